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
from sglang_eagle_paged.adapters.v2 import dense_draft, fault, hook_points, hook_table  # noqa: E402
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
    """The hooks of SGLANG_EAGLE_PAGED_DENSE_DRAFT=1 installed with SGLang's HookRegistry as a server
    installs them; yields (originals, the targets now, hooked, the dense layout the bodies were handed)."""
    monkeypatch.setattr(fault.SWITCH, "reason", None)
    monkeypatch.setattr(fault, "_CONSEQUENCES", [])
    with hook_sandbox(monkeypatch, TARGETS) as (originals, read):
        listed = v2.hooks(Settings(dense_draft=True), "0.5.23")
        hooked = hooks_mod.install([h for h in listed
                                    if h.target.split(".")[-1] in {a for _, a in TARGETS.values()}], "test")
        yield originals, read(), hooked, hook_table.dense_layout_of(listed)


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
    originals, now, hooked, _dense = installed
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
            assert dense_draft.decide(worker, installed[3])
            assert dense_draft.decide(worker, installed[3])  # once per process
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
        assert not dense_draft.decide(make(case), installed[3])
    lines = [r for r in caplog.records if "dense draft" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING and why in lines[0].getMessage()
    assert not installed[3].active


@pytest.mark.parametrize("params", CASES[:4], ids=lambda c: f"page{c[3]}-topk{c[2]}-steps{c[4]}")
def test_sglangs_prepare_for_draft_gives_the_dense_slots_and_copies_nothing(params, installed, monkeypatch):
    case, dense = dense_case(params)
    assert dense_draft.decide(_worker(case, _triton(case)), installed[3])
    prep = prepare_for_draft(case, monkeypatch)  # SGLang's own, through the hooks
    assert torch.equal(prep.out_cache_loc, dense.out_cache_loc)
    assert prep.tgt.numel() == 0  # the duplication copied nothing


def test_a_gather_fault_hands_the_slots_to_sglangs_page_1_kernel_in_one_error_line(installed, monkeypatch, caplog):
    case, dense = dense_case(CASES[2])
    assert dense_draft.decide(_worker(case, _triton(case)), installed[3])

    def broken(*_a, **_k):
        raise KeyError("broken on purpose")

    monkeypatch.setattr(dense_draft, "dense_out_cache_loc", broken)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        for _ in range(2):
            prep = prepare_for_draft(case, monkeypatch)
            assert torch.equal(prep.out_cache_loc, dense.out_cache_loc) and prep.tgt.numel() == 0
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "KeyError" in errors[0]
    # the line says what the hand-back costs a pool sized for the dense reserve (issue 61, point 4)
    assert "a pool sized for the dense reserve" in errors[0] and "may retract requests" in errors[0]
    assert installed[3].active  # the layout stays dense: rounds in flight were allocated for it


def test_off_by_default_and_elsewhere_one_line(caplog):
    assert not Settings().dense_draft
    names = [h.target for h in v2.hooks(Settings(), "0.5.23")]
    assert not any(n.endswith(("get_alloc_len_per_decode", ".prepare_for_draft")) for n in names)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        assert hook_table.dense_draft_layout(True, "0.5.15.post1") is None
    assert any("DENSE_DRAFT does nothing on SGLang 0.5.15.post1" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("reader", ["triton", "flashinfer"])
def test_sglangs_draft_backends_read_page_1s_keys_through_the_installed_hook(reader, installed, monkeypatch):
    from test_dense_draft import _forward_batch, _multi_step_backend, page_1_reads
    from sglang.srt.speculative.spec_utils import draft_kv_indices_buffer_width

    case, dense = dense_case(CASES[5])  # page 256
    assert dense_draft.decide(_worker(case, _triton(case)), installed[3])
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


# ------------------------------------------------- each refusal, on SGLang's real objects (issue 64, point 6)


def _server_args(**kw):
    """SGLang's own server arguments for the case's tree (validated as a server validates them)."""
    fields = dict(model_path="dummy", speculative_draft_model_path="dummy", device="cpu", page_size=4,
                  speculative_algorithm="EAGLE", speculative_eagle_topk=3, speculative_num_steps=2,
                  speculative_num_draft_tokens=4, attention_backend="triton")
    fields.update(kw)
    return ServerArgs(**fields)


def _refused(worker, caplog, dense) -> str:
    """decide()'s one line for ``worker``, which must be a refusal (WARNING, the layout off)."""
    caplog.clear()  # decide()'s lines only, not a line the test logged before (the auto row's, for one)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        assert not dense_draft.decide(worker, dense)
    lines = [r for r in caplog.records if "dense draft" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING, [r.getMessage() for r in lines]
    assert not dense.active
    return lines[0].getMessage()


def _covered_worker(case):
    worker = _worker(case, _triton(case))
    worker.server_args = _server_args(page_size=case.page)
    return worker


def test_the_control_a_covered_worker_with_sglangs_server_args_takes_the_dense_layout(installed):
    """So that each refusal below can fail: the same worker, nothing changed, is covered."""
    case, _ = dense_case(CASES[1])
    assert dense_draft.decide(_covered_worker(case), installed[3])


def test_refused_under_prefill_decode_disaggregation(installed, caplog):
    case, _ = dense_case(CASES[1])
    worker = _covered_worker(case)
    worker.server_args = _server_args(page_size=case.page, disaggregation_mode="decode")
    assert "disaggregated decode" in _refused(worker, caplog, installed[3])


@pytest.mark.parametrize("algorithm", ["NGRAM", "DFLASH"])
def test_refused_for_an_algorithm_it_does_not_cover(algorithm, installed, caplog):
    case, _ = dense_case(CASES[1])
    worker = _covered_worker(case)
    worker.server_args.speculative_algorithm = algorithm  # the worker a server built for EAGLE, asked otherwise
    assert f"speculative algorithm {algorithm} is not covered" in _refused(worker, caplog, installed[3])


def test_refused_for_a_pool_layout_it_does_not_serve(installed, caplog):
    """SGLang's own no-op pool subclass (placeholder buffers): not the plain pool whose slot ``s`` is row
    ``s`` of its K/V buffers, which the dense reads rest on."""
    from sglang.srt.mem_cache.memory_pool import NoOpMHATokenToKVPool

    case, _ = dense_case(CASES[1])
    worker = _covered_worker(case)
    pool = NoOpMHATokenToKVPool(case.pool.size, case.page, torch.float32, 1, 2, 1, "cpu", enable_memory_saver=False,
                                enable_alt_stream=False)
    worker.draft_runner.token_to_kv_pool = pool
    worker.token_to_kv_pool_allocator = PagedTokenToKVPoolAllocator(pool.size, case.page, torch.float32, "cpu", pool,
                                                                    need_sort=False)
    line = _refused(worker, caplog, installed[3])
    assert "the draft KV pool: NoOpMHATokenToKVPool is not the plain MHATokenToKVPool" in line


def test_refused_where_the_index_kernel_is_not_hooked(caplog, monkeypatch):
    """The setting asked (its hooks listed) but SGLang's index kernel global left as it is: the dense
    slots would be read by SGLang's per-branch lists."""
    monkeypatch.setattr(fault.SWITCH, "reason", None)
    with hook_sandbox(monkeypatch, TARGETS):
        case, _ = dense_case(CASES[1])
        dense = dense_draft.DenseLayout()  # what the hook table hands the other hooks
        assert "triton's index kernel is not hooked" in _refused(_covered_worker(case), caplog, dense)


def test_refused_where_the_allocation_page_differs_from_the_kv_page(installed, caplog):
    """Decode context parallelism: SGLang's allocator pages ``page_size * attn_dcp_size`` slots
    (``get_alloc_page_size``) over a pool of ``page_size`` pages; the dense positions are counted in the
    pool's pages. SGLang's real allocator, built as its DCP branch builds it."""
    case, _ = dense_case(CASES[1])
    worker = _covered_worker(case)
    worker.token_to_kv_pool_allocator = PagedTokenToKVPoolAllocator(case.pool.size, case.page * 2, torch.float32,
                                                                    "cpu", case.pool, need_sort=False)
    assert "the allocation page differs from the KV page" in _refused(worker, caplog, installed[3])


def test_refused_where_a_start_up_check_fails(installed, caplog):
    """Our gather tried once on the runner's own rows before serving: where it raises (rows SGLang's
    runner does not hold as a tensor here), SGLang's layout, one line; never a failed start-up."""
    case, _ = dense_case(CASES[1])
    worker = _covered_worker(case)
    worker.draft_runner.req_to_token_pool = SimpleNamespace(req_to_token=None)
    assert "the check failed" in _refused(worker, caplog, installed[3])


def test_auto_serves_only_the_backends_a_filled_gpu_row_names(monkeypatch, caplog):
    """SGLANG_EAGLE_PAGED_DENSE_DRAFT=auto once the GPU suite fills its row (our own table, set here):
    the layout is installed for that release range and serves the backends the row names, and a draft
    worker on another covered backend keeps SGLang's layout, in one line saying why."""
    from packaging.version import Version

    from sglang_eagle_paged import releases

    row = releases.Proof("SGLANG_EAGLE_PAGED_DENSE_DRAFT=auto (the default)", (Version("0.5.17"), Version("0.5.23")),
                         "SGLang's per-branch layout and reserve serve", backends=("flashinfer",))
    monkeypatch.setitem(releases.PROVEN, "dense_draft_auto", row)
    dense = hook_table.dense_draft_layout(None, "0.5.23")
    assert dense is not None and dense.backends == ("flashinfer",)
    assert hook_table.dense_draft_layout(None, "0.5.15.post1") is None  # outside the row's releases
    case, _ = dense_case(CASES[1])
    with hook_sandbox(monkeypatch, TARGETS):
        hooks_mod.install([h for h in hook_table.dense_draft_hooks(dense)], "test")
        line = _refused(_covered_worker(case), caplog, dense)  # a triton draft backend
    assert "triton is not proven by the GPU suite" in line and "auto serves flashinfer" in line


def test_sglangs_pool_sizing_reads_the_reserve_only_for_sliding_window_pools():
    """Issue 61, point 4: where the dense layout serves (the plain MHA pool), SGLang sizes the KV pool
    and caps ``--max-running-requests`` without the per-decode reserve, so nothing there needs the dense
    reserve. The only pool-sizing readers of the reserve are the sliding-window pools' (0.5.23's
    ``compute_swa_request_cap``, 0.5.17's ``SWAChunkCapPoolConfigurator``), pools the dense layout
    refuses. Read from the installed source: the configurators need a whole model to run."""
    pc = pytest.importorskip("sglang.srt.model_executor.pool_configurator")
    kvc = pytest.importorskip("sglang.srt.mem_cache.kv_cache_configurator")
    names = {"get_alloc_len_per_decode", "get_alloc_reserve_per_decode"}

    def readers(module):
        out = set()
        for top in ast.parse(inspect.getsource(module)).body:
            fns = [(f"{top.name}.{f.name}", f) for f in top.body if isinstance(f, ast.FunctionDef)] \
                if isinstance(top, ast.ClassDef) else [(top.name, top)] if isinstance(top, ast.FunctionDef) else []
            out |= {name for name, fn in fns for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in names}
        return out

    found = readers(pc)
    assert found and all("swa" in name.lower() for name in found), found
    assert readers(kvc) == set()
