"""SGLANG_EAGLE_PAGED_DENSE_DRAFT wired into SGLang 0.5.23 through its HookRegistry (issue 54): the
reserve, SGLang's own ``prepare_for_draft`` (paged branch) and the index kernel of triton's and
flashinfer's draft backends, the decision per process from the draft worker SGLang built, and the
fault rule of the slot gather. The readers' and the rounds' proofs are test_dense_draft.py and
test_dense_rounds.py; here, that the hooks put them where SGLang calls them. Runs on 0.5.23 and
0.5.17 (whose sizing reads the server arguments it is given instead of a runtime context)."""

import ast
import inspect
import logging
import textwrap
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
sizing = pytest.importorskip("sglang.srt.mem_cache.allocation_sizing")
ewc = pytest.importorskip("sglang.srt.speculative.eagle_worker_common")

from sglang.srt.layers.attention import flashattention_backend as fa3b  # noqa: E402
from sglang.srt.layers.attention import flashinfer_backend as fib  # noqa: E402
from sglang.srt.layers.attention import triton_backend as trb  # noqa: E402
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative import eagle_worker_v2, multi_layer_eagle_worker_v2  # noqa: E402

from helpers.draft_tree import plain_translator, prepare_for_draft  # noqa: E402
from helpers.hook_sandbox import hook_sandbox  # noqa: E402
from sglang_eagle_paged import hooks as hooks_mod  # noqa: E402
from sglang_eagle_paged.adapters import v2  # noqa: E402
from sglang_eagle_paged.adapters.v2 import dense_draft, fault, hook_points  # noqa: E402
from sglang_eagle_paged.settings import Settings  # noqa: E402
from test_dense_draft import CASES, dense_case  # noqa: E402

TARGETS = {
    "sizing": (sizing, "get_alloc_len_per_decode"),
    "prepare": (ewc, "prepare_for_draft"),
    "duplicate": (ewc, hook_points.FUNCTION),
    "triton": (trb, "generate_draft_decode_kv_indices"),
    "flashinfer": (fib, "generate_draft_decode_kv_indices"),
}


@pytest.fixture
def installed(monkeypatch):
    dense_draft.PLAN.reset()
    monkeypatch.setattr(fault.SWITCH, "reason", None)
    with hook_sandbox(monkeypatch, TARGETS) as (originals, read):
        settings = Settings(dense_draft=True)
        hooked = hooks_mod.install([h for h in v2.hooks(settings, "0.5.23")
                                    if h.target.split(".")[-1] in {a for _, a in TARGETS.values()}], "test")
        yield originals, read(), hooked
    dense_draft.PLAN.reset()


def _worker(case, backend, cls=eagle_worker_v2.EagleDraftWorker, **args):
    worker = object.__new__(cls)
    allocator = PagedTokenToKVPoolAllocator(case.pool.size, case.page, torch.float32, "cpu", case.pool,
                                            need_sort=False)
    worker.topk, worker.speculative_num_steps, worker.speculative_num_draft_tokens = case.topk, case.steps, 2
    worker.server_args = SimpleNamespace(speculative_algorithm="EAGLE", disaggregation_mode="null", **args)
    worker.token_to_kv_pool_allocator = allocator
    worker.draft_runner = SimpleNamespace(token_to_kv_pool=case.pool, draft_attn_backend=backend,
                                          req_to_token_pool=SimpleNamespace(req_to_token=case.r2t))
    return worker


def _triton(case, **kw):
    be = object.__new__(trb.TritonMultiStepDraftBackend)
    be.draft_window_size, be.kv_index_translator = 0, plain_translator(case)
    for k, v in kw.items():
        setattr(be, k, v)
    return be


def test_every_hook_takes_where_sglang_calls_it(installed):
    originals, now, hooked = installed
    assert set(hooked) == {f"{m.__name__}.{a}" for m, a in TARGETS.values()}
    for name in ("triton", "flashinfer"):
        assert dense_draft.is_hooked(now[name]) and now[name].dense.kernel is originals[name]


def test_the_reserve_is_page_1s_once_the_plan_is_on(installed, caplog):
    case, _ = dense_case(CASES[8])  # page 64, topk 10, 8 steps
    args = ServerArgs(model_path="dummy", device="cpu", page_size=64, speculative_algorithm="EAGLE",
                      speculative_eagle_topk=8, speculative_num_steps=5, speculative_num_draft_tokens=64,
                      speculative_draft_model_path="dummy")
    try:  # 0.5.23: a runtime context; 0.5.17 takes the server arguments
        from sglang.srt.runtime_context import create_context, use_context
        context, reserve = use_context(create_context(args, role="test")), sizing.get_alloc_reserve_per_decode
    except ImportError:
        from contextlib import nullcontext
        context, reserve = nullcontext(), lambda: sizing.get_alloc_reserve_per_decode(args)
    with context:
        assert reserve() == 2048  # before any draft worker: SGLang's (row widths)
        worker = _worker(case, _triton(case))
        worker.topk, worker.speculative_num_steps, worker.speculative_num_draft_tokens = 8, 5, 64
        with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
            assert dense_draft.decide(worker)
            assert dense_draft.decide(worker)  # once per process
        assert reserve() == 128
    lines = [r.getMessage() for r in caplog.records if "dense draft" in r.getMessage()]
    assert len(lines) == 1 and "128 KV slots reserved" in lines[0] and "instead of 2,048" in lines[0]


@pytest.mark.parametrize("why,make", [
    # fa3 serves where fa3 in place covers every step backend (test_fa3_dense.py); none here
    ("fa3's multi-step draft backend has no step backends",
     lambda case: _worker(case, object.__new__(fa3b.FlashAttentionMultiStepBackend))),
    ("is not flashinfer's, triton's or fa3's", lambda case: _worker(case, object())),
    ("draft window", lambda case: _worker(case, _triton(case, draft_window_size=64))),
    ("translated", lambda case: _worker(case, _triton(case, kv_index_translator=SimpleNamespace(is_translating=True)))),
    ("adaptive", lambda case: _worker(case, _triton(case), speculative_adaptive=True)),
    ("MultiLayerEagleDraftWorker is not covered",
     lambda case: _worker(case, _triton(case), cls=multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker)),
])
def test_what_is_not_covered_keeps_sglangs_layout_in_one_line(why, make, installed, caplog):
    case, _ = dense_case(CASES[1])
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        assert not dense_draft.decide(make(case))
    lines = [r for r in caplog.records if "dense draft" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING and why in lines[0].getMessage()
    assert not dense_draft.PLAN.active


@pytest.mark.parametrize("params", CASES[:4], ids=lambda c: f"page{c[3]}-topk{c[2]}-steps{c[4]}")
def test_sglangs_prepare_for_draft_gives_the_dense_slots_and_copies_nothing(params, installed, monkeypatch):
    case, dense = dense_case(params)
    assert dense_draft.decide(_worker(case, _triton(case)))
    prep = prepare_for_draft(case, monkeypatch)  # SGLang's own, through the hooks
    assert torch.equal(prep.out_cache_loc, dense.out_cache_loc)
    assert prep.tgt.numel() == 0  # the duplication copied nothing


def test_a_gather_fault_hands_the_slots_to_sglangs_page_1_kernel_in_one_error_line(installed, monkeypatch, caplog):
    case, dense = dense_case(CASES[2])
    assert dense_draft.decide(_worker(case, _triton(case)))

    def broken(*_a, **_k):
        raise KeyError("broken on purpose")

    monkeypatch.setattr(dense_draft, "dense_out_cache_loc", broken)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        for _ in range(2):
            prep = prepare_for_draft(case, monkeypatch)
            assert torch.equal(prep.out_cache_loc, dense.out_cache_loc) and prep.tgt.numel() == 0
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "KeyError" in errors[0]
    assert dense_draft.PLAN.active  # the layout stays dense: rounds in flight were allocated for it


def test_off_by_default_and_elsewhere_one_line(caplog):
    assert not Settings().dense_draft
    names = [h.target for h in v2.hooks(Settings(), "0.5.23")]
    assert not any(n.endswith(("get_alloc_len_per_decode", ".prepare_for_draft")) for n in names)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        assert dense_draft.hooks("0.5.15.post1") == []
    assert any("DENSE_DRAFT does nothing on SGLang 0.5.15.post1" in r.getMessage() for r in caplog.records)
    dense_draft.PLAN.reset()


@pytest.mark.parametrize("reader", ["triton", "flashinfer"])
def test_sglangs_draft_backends_read_page_1s_keys_through_the_installed_hook(reader, installed, monkeypatch):
    from test_dense_draft import _forward_batch, _multi_step_backend, page_1_reads
    from sglang.srt.speculative.spec_utils import draft_kv_indices_buffer_width

    case, dense = dense_case(CASES[5])  # page 256
    assert dense_draft.decide(_worker(case, _triton(case)))
    monkeypatch.setenv("SGLANG_OPT_FLASHINFER_DRAFT_HOST_INDPTR", "0")
    cls = trb.TritonMultiStepDraftBackend if reader == "triton" else fib.FlashInferMultiStepDraftBackend
    be = _multi_step_backend(cls, case, case.page)
    if reader == "flashinfer":
        be.generate_draft_decode_kv_indices = fib.generate_draft_decode_kv_indices  # as its __init__ binds it
    width = draft_kv_indices_buffer_width(case.bs, case.topk, be.max_context_len)
    buf = torch.full((case.steps, width), -7, dtype=torch.int64 if reader == "triton" else torch.int32)
    be.cuda_graph_kv_indices = buf
    seen = []

    def call_fn(i, fb):
        indptr, indices = fb.spec_info.kv_indptr, fb.spec_info.kv_indices
        seen.append([indices[int(indptr[z]): int(indptr[z + 1])].long() for z in range(indptr.numel() - 1)])

    be.common_template(_forward_batch(case, dense), buf, call_fn)
    assert len(seen) == case.steps - 1
    for step, lists in enumerate(seen):
        for got, want in zip(lists, page_1_reads(case, step), strict=True):
            assert torch.equal(got, want)


# ------------------------------------------------- the forward batch sees the rewrite (installed release)


def _source_tree(fn) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(fn)))


def _assigned_attrs(tree: ast.AST) -> set:
    return {t.attr for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Attribute)}


def test_the_forward_batch_borrows_out_cache_loc_so_the_dense_rewrite_reaches_it():
    """The dense hook rewrites ``batch.out_cache_loc`` in place after SGLang's ``prepare_for_draft``
    returns its forward batch. That reaches the draft forward only because this release's
    ``ForwardBatch.init_new`` takes the batch's tensor itself (no copy, no reassignment inside it),
    and ``prepare_for_draft`` does not replace it after. ``init_new`` needs a whole model runner, which
    the CPU tests do not build (helpers/draft_tree.py stands it in), so the claim is read here from the
    installed release's own source."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    init_new = _source_tree(ForwardBatch.init_new)
    given = [ast.unparse(k.value) for n in ast.walk(init_new) if isinstance(n, ast.Call)
             for k in n.keywords if k.arg == "out_cache_loc"]
    assert given == ["batch.out_cache_loc"]
    assert "out_cache_loc" not in _assigned_attrs(init_new)
    prepare = _source_tree(ewc.prepare_for_draft)
    replaced = [ast.unparse(n) for n in ast.walk(prepare) if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Attribute) and t.attr == "out_cache_loc"
                and ast.unparse(t.value) != "batch"]
    assert replaced == []
