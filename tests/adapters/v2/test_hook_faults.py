"""Every hook the v2 adapter installs, under the one fault rule (issue 61, point 6): a fault in our
body never reaches SGLang's caller. SGLang's own path serves that call, the v2 switch trips once,
one ``[fault]`` ERROR line.

The hooks are the adapter's own list (``adapters.v2.hooks`` with every opt-in on, 0.5.23), not a
list written here: a hook added without a case here fails :func:`test_every_installed_hook_has_a_case`.
Each case calls the body as installed (what SGLang's HookRegistry calls) with SGLang's real function
as ``original`` where SGLang hands one, its real pool and its real index kernel (Triton interpreter),
and makes the fault in a function of ours that the body calls (never in SGLang's). Where the dense
layout was on, the rounds after such a fault run SGLang's layout with every slot returned:
test_dense_rounds.py's fault test, one origin per per-round body of the dense layout."""

import logging
from types import SimpleNamespace

import pytest

import v2_support as support

support.require_sglang()

import torch  # noqa: E402
from sglang.kernels.ops.speculative import cache_locs  # noqa: E402
from sglang.srt.layers.attention import flashattention_backend as fa3b  # noqa: E402
from sglang.srt.mem_cache import allocation_sizing as sizing  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative import eagle_worker_common as ewc  # noqa: E402

from sglang_eagle_paged import FAULT_MARK  # noqa: E402
from sglang_eagle_paged.adapters import v2  # noqa: E402
from sglang_eagle_paged.adapters.common import fa3_metadata  # noqa: E402
from sglang_eagle_paged.adapters.v2 import (  # noqa: E402
    dense_draft, draft_plan, draft_step, fa3_in_place, fault, hook_table)
from sglang_eagle_paged.settings import Settings  # noqa: E402

torch.set_num_threads(1)
PAGE, TOPK, STEPS, SEQ = 4, 3, 2, [5, 6]
EVERY_OPT_IN = Settings(fa3_in_place=True, dense_draft=True)


class Sglangs:
    """SGLang's function as the registry hands it to an AROUND body: the real one, its calls counted."""

    def __init__(self, real):
        self.real, self.calls, self.result = real, 0, None

    def __call__(self, *args, **kwargs):
        self.calls += 1
        self.result = self.real(*args, **kwargs)
        return self.result


def _broken(what):
    def broken(*_a, **_k):
        raise KeyError(f"broken on purpose: {what}")
    return broken


def _body_name(hook) -> str:
    body = getattr(hook.function, "body", hook.function)
    body = getattr(body, "func", body)  # a functools.partial
    return body.__name__


# ------------------------------------------------------------------ one case per body: (hook, monkeypatch) -> served


def _duplication(hook, monkeypatch):
    pool, rows = support.layout_rows(SEQ, PAGE, TOPK, STEPS, seed=1)
    support.fill_random(pool, 1)
    monkeypatch.setattr(draft_step, "duplicate_prefix_tail", _broken("our copy"))
    before = [b.clone() for b in pool.k_buffer]
    sglangs = Sglangs(ewc.duplicate_prefix_tail_to_draft_branches)
    hook.function(sglangs, pool, rows, *support.draft_args(SEQ, PAGE, STEPS), TOPK, PAGE)
    copied = any(not torch.equal(a, b) for a, b in zip(before, pool.k_buffer))  # SGLang's copy wrote the tails
    return sglangs.calls == 1 and copied


def _draft_worker(backend=None):
    pool, rows = support.layout_rows(SEQ, PAGE, TOPK, STEPS, seed=2)
    return SimpleNamespace(topk=TOPK, speculative_num_steps=STEPS, speculative_num_draft_tokens=4,
                           draft_attn_backend=backend, draft_runner=SimpleNamespace(
                               token_to_kv_pool=pool, draft_attn_backend=backend,
                               req_to_token_pool=SimpleNamespace(req_to_token=rows)))


def _warm_up(hook, monkeypatch):
    """The draft worker's warm-up: a fault of ours outside every narrower ``try`` of the body."""
    monkeypatch.setattr(dense_draft, "decide", _broken("the dense decision"))
    return hook.function("SGLang's result", _draft_worker()) in (None, "SGLang's result")  # None: it stands


def _fa3_warm_up(hook, monkeypatch):
    multi = object.__new__(fa3b.FlashAttentionMultiStepBackend)
    multi.topk, multi.speculative_num_steps = TOPK, STEPS
    multi.attn_backends = [SimpleNamespace(device="cpu", page_size=PAGE)]
    monkeypatch.setattr(fa3_metadata, "warm_up", _broken("our fa3 kernels' compile"))
    return hook.function("SGLang's result", _draft_worker(multi)) in (None, "SGLang's result")


def _fa3_backend_init(hook, monkeypatch):
    backend = SimpleNamespace(is_draft_runner=True, topk=TOPK, page_size=PAGE)
    monkeypatch.setattr(fa3_in_place, "not_covered", _broken("the coverage check"))
    served = hook.function(None, backend) is None
    return served and not getattr(backend, fa3_in_place.MARK, False)  # not covered: SGLang's split and copy


def _fa3_metadata(hook, monkeypatch):
    """A covered draft backend's metadata after SGLang's builder: SGLang's form stays."""
    from test_fault import covered_draft_metadata

    backend, batch, sglangs_form = covered_draft_metadata()
    monkeypatch.setattr(fa3_in_place, "rewrite_draft_metadata", _broken("the in-place rewrite"))
    return hook.function(None, backend, batch) is None and sglangs_form()


def _flash_attn(hook, monkeypatch):
    table = torch.zeros((2, 2), dtype=torch.int32)
    fa3_in_place.mark_per_token(table)
    cache = torch.zeros((4, PAGE, 1, 2))
    seen = []
    sglangs = Sglangs(lambda **kw: seen.append(kw["k_cache"]))  # FA3 itself needs a GPU: its arguments
    monkeypatch.setattr(fa3_in_place, "per_token_view", _broken("the per-token view"))
    hook.function(sglangs, page_table=table, k_cache=cache, v_cache=cache)
    return sglangs.calls == 1 and seen[0] is cache  # SGLang's own arguments


def _sizing(hook, monkeypatch, fa3_context):
    """The scheduler's reserve: SGLang's own where ours faults."""
    dense = _dense_of(hook)
    monkeypatch.setattr(dense, "active", True)
    monkeypatch.setattr(dense, "len_per_decode", SimpleNamespace())  # min() of it raises in our body
    sglangs = Sglangs(sizing.get_alloc_len_per_decode)
    with fa3_context(page=64, topk=8, steps=5, tokens=64):
        got = hook.function(sglangs)
    return sglangs.calls == 1 and got == sglangs.result == 1024


def _prepare(hook, monkeypatch):
    """The dense slots of a round allocated dense: SGLang's own page-1 slot kernel writes them."""
    rows = torch.arange(1, 65, dtype=torch.int32).view(1, 64)
    batch = SimpleNamespace(forward_mode=ForwardMode.DECODE, token_to_kv_pool_allocator=SimpleNamespace(page_size=PAGE),
                            req_pool_indices=torch.tensor([0]), seq_lens=torch.tensor([5]),
                            out_cache_loc=torch.zeros(TOPK * STEPS, dtype=torch.int64))
    monkeypatch.setattr(_dense_of(hook), "active", True)
    monkeypatch.setattr(dense_draft, "dense_out_cache_loc", _broken("our slot gather"))
    sglangs = Sglangs(lambda *a, **k: "SGLang's result")  # its paged branch needs a model runner: test_dense_hooks
    got = hook.function(sglangs, None, SimpleNamespace(req_to_token=rows), batch, None, None, TOPK, STEPS)
    return got == "SGLang's result" and torch.equal(batch.out_cache_loc, rows[0, 5:5 + TOPK * STEPS].long())


def _index_kernel(hook, monkeypatch):
    """SGLang's index kernel launched through our REPLACE: where our rewrite faults, SGLang's own
    launch (its page size) writes the lists."""
    from test_dense_draft import CASES, dense_case, _forward_batch, _multi_step_backend
    from sglang.srt.layers.attention import triton_backend as trb

    case, prep = dense_case(CASES[1])
    monkeypatch.setattr(hook.function.dense, "active", lambda: True)  # the layout serves this launch
    monkeypatch.setattr(dense_draft, "page_1_arguments", _broken("our argument rewrite"))
    lists = {}
    for name, kernel in (("ours", hook.function), ("sglang's", cache_locs.generate_draft_decode_kv_indices)):
        monkeypatch.setattr(trb, "generate_draft_decode_kv_indices", kernel)
        be = _multi_step_backend(trb.TritonMultiStepDraftBackend, case, case.page)
        buf = torch.full((case.steps, draft_kv_indices_width(case, be)), -7, dtype=torch.int64)
        be.cuda_graph_kv_indices = buf
        seen = lists.setdefault(name, [])
        be.common_template(_forward_batch(case, prep), buf, lambda i, fb, seen=seen: seen.append(
            fb.spec_info.kv_indices.clone()))
    return bool(lists["ours"]) and all(torch.equal(a, b) for a, b in zip(lists["ours"], lists["sglang's"], strict=True))


def draft_kv_indices_width(case, be):
    from sglang.srt.speculative.spec_utils import draft_kv_indices_buffer_width

    return draft_kv_indices_buffer_width(case.bs, case.topk, be.max_context_len)


def _expand(hook, monkeypatch):
    from sglang_eagle_paged.adapters.common import fa3_metadata as common

    monkeypatch.setattr(common, "expand_metadata_replacement", _broken("our expand builder"))
    sglangs = Sglangs(lambda *a, **k: "SGLang's builder")  # its own builder is test_fa3_replay's
    got = hook.function(sglangs, torch.zeros(2, dtype=torch.int32), torch.zeros((2, 4), dtype=torch.int32),
                        torch.ones(1, dtype=torch.int32), 1, torch.arange(8, 10).view(2, 1), 2, PAGE)
    return sglangs.calls == 1 and got == "SGLang's builder"


def _fused(hook, monkeypatch):
    monkeypatch.setattr(draft_plan, "for_fa3", _broken("our fused metadata's plan"))
    sglangs = Sglangs(lambda *a, **k: "SGLang's replay")
    got = hook.function(sglangs, SimpleNamespace(attn_backends=[]), SimpleNamespace(batch_size=2, spec_info=None))
    return sglangs.calls == 1 and got == "SGLang's replay"


CASES = {
    "duplicate_prefix_tail_to_draft_branches": _duplication,
    "after_hook": _warm_up,
    "after": _fa3_warm_up,
    "after_backend_init": _fa3_backend_init,
    "after_metadata": _fa3_metadata,
    "around_flash_attn": _flash_attn,
    "around_len_per_decode": _sizing,
    "around_prepare_for_draft": _prepare,
    "DenseDraftIndexKernel": _index_kernel,
    "guarded_expand": _expand,
    "fused_out_graph_hook": _fused,
}


_INSTALLED = []


def _installed():
    """The hook list, built once (its bodies share one dense layout, as a server's do)."""
    if not _INSTALLED:
        _INSTALLED.extend(v2.hooks(EVERY_OPT_IN, "0.5.23"))
    return _INSTALLED


def _dense_of(_hook):
    return hook_table.dense_layout_of(_installed())


def test_every_installed_hook_has_a_case():
    assert {_body_name(h) for h in _installed()} == set(CASES)


@pytest.fixture
def fa3_context():
    from sglang.srt import runtime_context
    from sglang.srt.server_args import ServerArgs

    def context(page, topk, steps, tokens):
        args = ServerArgs(model_path="dummy", speculative_draft_model_path="dummy", page_size=page, device="cpu",
                          speculative_algorithm="EAGLE", speculative_eagle_topk=topk, speculative_num_steps=steps,
                          speculative_num_draft_tokens=tokens, attention_backend="fa3")
        return runtime_context.use_context(runtime_context.create_context(args, role="test"))

    return context


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(fault.SWITCH, "reason", None)
    dense = hook_table.dense_layout_of(_installed())
    for name, value in vars(dense_draft.DenseLayout(dense.backends)).items():  # as built, nothing decided
        monkeypatch.setattr(dense, name, value)


@pytest.mark.parametrize("index", range(len(_installed())),
                         ids=[f"{h.target.rsplit('.', 2)[-2]}.{h.target.rsplit('.', 1)[-1]}-{_body_name(h)}"
                              for h in _installed()])
def test_a_fault_in_any_hook_body_serves_sglangs_path_trips_once_in_one_line(index, fresh, monkeypatch, caplog,
                                                                             fa3_context):
    hook = _installed()[index]
    case = CASES[_body_name(hook)]
    extra = {"fa3_context": fa3_context} if case is _sizing else {}
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        served = case(hook, monkeypatch, **extra)
        assert fault.SWITCH, f"{hook.target}: the switch did not trip"
        again = case(hook, monkeypatch, **extra)  # the same fault again: SGLang's path, no second line
    assert served and again, f"{hook.target}: SGLang's own path did not serve the call"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith(FAULT_MARK), errors
