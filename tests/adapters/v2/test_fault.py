"""One fault switch for every v2 path of ours (issue 54, point 3): a fault in any one of them hands
every one of them to SGLang's own path for the rest of the process, in one ERROR line.

Each path runs through its real hook body (:mod:`sglang_eagle_paged.adapters.v2.draft_step`, the
warm-up), over SGLang's real pool and its own page-1 slot kernel; the fault is made in our own code
(the function of ours the path calls), never by replacing SGLang's."""

import logging
from types import SimpleNamespace

import pytest

import v2_support as support

support.require_sglang()

import torch  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

from sglang_eagle_paged.adapters.common import fa3_metadata  # noqa: E402
from sglang_eagle_paged.adapters.v2 import (  # noqa: E402
    dense_draft, draft_plan, draft_step, fa3_in_place, fault, warm_up)
from sglang_eagle_paged.settings import Mode  # noqa: E402

torch.set_num_threads(1)
PAGE, TOPK, STEPS, SEQ = 4, 3, 2, [5, 6]

# (module, our function each path calls) -- what a fault is made in, and what is counted after it
OURS = {
    "duplication": (draft_step, "duplicate_prefix_tail"),
    "fa3 expand metadata": (fa3_metadata, "expand_metadata_replacement"),
    "fa3 fused metadata": (draft_plan, "for_fa3"),
    "fa3 in place rewrite": (fa3_in_place, "rewrite_draft_metadata"),
    "dense slot gather": (dense_draft, "dense_out_cache_loc"),
}


class Sglangs:
    """SGLang's side of an AROUND hook: records that it served."""

    def __init__(self):
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1


def _duplication(monkeypatch):
    pool, rows = support.layout_rows(SEQ, PAGE, TOPK, STEPS, seed=1)
    sglangs = Sglangs()
    draft_step.duplication_hook(Mode.ON)(sglangs, pool, rows, *support.draft_args(SEQ, PAGE, STEPS), TOPK, PAGE)
    return sglangs.calls == 1


def _expand(monkeypatch):
    sglangs = Sglangs()
    # one request, two branches, the first draft step: SGLang's expand builder's arguments
    draft_step.expand_hook(sglangs, torch.zeros(2, dtype=torch.int32), torch.zeros((2, 4), dtype=torch.int32),
                           torch.ones(1, dtype=torch.int32), 1, torch.arange(8, 10).view(2, 1), 2, PAGE)
    return sglangs.calls == 1


def _fused(monkeypatch):
    sglangs = Sglangs()
    multi = SimpleNamespace(attn_backends=[])
    draft_step.fused_out_graph_hook(sglangs, multi, SimpleNamespace(batch_size=2, spec_info=None))
    return sglangs.calls == 1


def covered_draft_metadata():
    """(backend, batch, sglangs_form): a covered fa3 draft backend's eager metadata as SGLang's builder
    left it, and ``sglangs_form()``: whether it still is (its expand table unmarked, its lengths
    untouched)."""
    expand = SimpleNamespace(page_table=torch.full((2, STEPS), 7, dtype=torch.int32),
                             cache_seqlens_int32=torch.full((2,), 9, dtype=torch.int32))
    backend = SimpleNamespace(**{fa3_in_place.MARK: True}, forward_metadata_spec_decode_expand=expand,
                              forward_metadata=SimpleNamespace(cache_seqlens_int32=torch.zeros(1, dtype=torch.int32)),
                              speculative_num_steps=STEPS, speculative_step_id=0)
    batch = SimpleNamespace(spec_info=SimpleNamespace(), forward_mode=ForwardMode.DECODE,
                            out_cache_loc=torch.arange(2 * STEPS), seq_lens=torch.tensor([5]))
    return backend, batch, lambda: not fa3_in_place.is_per_token(expand.page_table) and bool(
        (expand.cache_seqlens_int32 == 9).all())


def _rewrite(monkeypatch):
    """A covered draft backend's eager metadata after SGLang's builder: SGLang's form stays where
    the rewrite does not serve."""
    backend, batch, sglangs_form = covered_draft_metadata()
    draft_step.after_metadata(None, backend, batch)
    return sglangs_form()


def _gather(monkeypatch):
    """The dense layout's slots: SGLang's own page-1 kernel writes them (the same slots)."""
    rows = torch.arange(1, 65, dtype=torch.int32).view(1, 64)
    batch = SimpleNamespace(forward_mode=ForwardMode.DECODE, token_to_kv_pool_allocator=SimpleNamespace(page_size=PAGE),
                            req_pool_indices=torch.tensor([0]), seq_lens=torch.tensor([5]),
                            out_cache_loc=torch.zeros(TOPK * STEPS, dtype=torch.int64))
    dense = dense_draft.DenseLayout()
    dense.active = True  # as dense_draft.decide turns it on
    draft_step.around_prepare_for_draft(dense, Sglangs(), None, SimpleNamespace(req_to_token=rows), batch, None, None,
                                        TOPK, STEPS)
    return torch.equal(batch.out_cache_loc, rows[0, 5:5 + TOPK * STEPS].long())


SERVE = {"duplication": _duplication, "fa3 expand metadata": _expand, "fa3 fused metadata": _fused,
         "fa3 in place rewrite": _rewrite, "dense slot gather": _gather}


def _warm_up(monkeypatch):
    pool, rows = support.layout_rows(SEQ, PAGE, TOPK, STEPS, seed=2)
    warm_up.after_hook(None, SimpleNamespace(topk=TOPK, draft_runner=SimpleNamespace(
        token_to_kv_pool=pool, req_to_token_pool=SimpleNamespace(req_to_token=rows))))


def _view(monkeypatch):
    table = torch.zeros((2, 2), dtype=torch.int32)
    fa3_in_place.mark_per_token(table)
    cache = torch.zeros((4, PAGE, 1, 2))
    draft_step.around_flash_attn(Sglangs(), page_table=table, k_cache=cache, v_cache=cache)


# where a fault is made: each serving path above, the warm-up, and the in-place view
ORIGINS = {**{name: (OURS[name], SERVE[name]) for name in SERVE},
           "warm-up": ((warm_up, "compile_prefix_tail"), _warm_up),
           "fa3 in place view": ((fa3_in_place, "per_token_view"), _view)}


def _count_ours(monkeypatch, but=None) -> dict:
    """Count the calls of each path's own function (all but ``but``), running it as it is."""
    ours = {}
    for path, (module, name) in OURS.items():
        if (module, name) == but:
            continue
        real, seen = getattr(module, name), ours.setdefault(path, [])
        monkeypatch.setattr(module, name, lambda *a, _real=real, _seen=seen, **k: (_seen.append(1), _real(*a, **k))[1])
    return ours


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(fault.SWITCH, "reason", None)


@pytest.mark.parametrize("origin", list(ORIGINS))
def test_a_fault_in_one_path_hands_every_path_to_sglang_in_one_error_line(origin, fresh, monkeypatch, caplog):
    (module, name), run = ORIGINS[origin]

    def broken(*_a, **_k):
        raise KeyError(f"broken on purpose in {origin}")

    monkeypatch.setattr(module, name, broken)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        run(monkeypatch)
        assert fault.SWITCH, origin
        ours = _count_ours(monkeypatch, but=(module, name))
        served = {path: serve(monkeypatch) for path, serve in SERVE.items()}
        run(monkeypatch)  # the same fault again: said once
    assert served == dict.fromkeys(SERVE, True), served  # SGLang's own path, every one
    assert ours == {path: [] for path in ours}, ours  # none of ours was tried after the fault
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "KeyError" in errors[0] and origin in errors[0], errors


def test_every_path_runs_ours_before_a_fault(fresh, monkeypatch, caplog):
    """The control, so the test above can fail: before any fault every path tries its own function
    and none faults."""
    ours = _count_ours(monkeypatch)
    with caplog.at_level(logging.ERROR, logger="sglang_eagle_paged"):
        for serve in SERVE.values():
            serve(monkeypatch)
    assert all(ours.values()), ours
    assert not fault.SWITCH and not caplog.records, fault.SWITCH.reason
