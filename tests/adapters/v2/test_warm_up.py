"""Warm-up compiles the one variant serving uses: after it, no pair count gives a new
specialisation of our kernel."""

import v2_support as support

support.require_sglang()

from types import SimpleNamespace  # noqa: E402

import torch  # noqa: E402

from helpers.interpreter_order import capture_specializations  # noqa: E402
from sglang_eagle_paged.adapters.v2 import draft_plan, draft_step, fault, warm_up  # noqa: E402
from sglang_eagle_paged.kernels.prefix_tail import _duplicate_prefix_tail_kernel  # noqa: E402
from sglang_eagle_paged.settings import Mode  # noqa: E402

torch.set_num_threads(1)


def test_no_new_specialisation_after_warm_up():
    page, topk, steps = 16, 4, 3
    batches = [[1], [17, 33], [16, 5, 9, 15, 2], [31] * 9]
    layouts = [support.layout_rows(seq, page, topk, steps, seed=i) for i, seq in enumerate(batches)]
    pool = layouts[-1][0]
    rows0 = layouts[0][1]
    worker = SimpleNamespace(topk=topk, draft_runner=SimpleNamespace(
        token_to_kv_pool=pool, req_to_token_pool=SimpleNamespace(req_to_token=rows0)))
    support.fill_random(pool, 1)
    start = support.snapshot(pool)
    with capture_specializations(_duplicate_prefix_tail_kernel) as warm:
        assert warm_up.after_hook("result", worker) == "result"
        warm_up.after_hook(None, worker)  # a second call (a subclass calling its parent's hooked method too) compiles nothing more
    assert len(warm) == 1
    for a, b in zip(start, support.snapshot(pool)):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))  # the warm-up copied nothing
    hook = draft_step.duplication_hook(Mode.ON)  # the runner has no draft decode backend: it copies
    with capture_specializations(_duplicate_prefix_tail_kernel) as serving:
        for (_, rows), seq in zip(layouts, batches):
            rows = rows.clamp_max(pool.size)
            hook(None, pool, rows, *support.draft_args(seq, page, steps), topk, page)
    assert len(serving) == len(batches)
    assert set(serving) == set(warm), (serving, warm)


def test_slot_dtype_of_the_rows_is_warmed():
    pool, rows = support.layout_rows([5], 8, 3, 2, seed=2)
    worker = SimpleNamespace(topk=3, draft_runner=SimpleNamespace(
        token_to_kv_pool=pool, req_to_token_pool=SimpleNamespace(req_to_token=rows.to(torch.int64))))
    with capture_specializations(_duplicate_prefix_tail_kernel) as warm64:
        warm_up.warm_up_worker(worker)
    with capture_specializations(_duplicate_prefix_tail_kernel) as serve32:
        draft_step.duplication_hook(Mode.ON)(None, pool, rows, *support.draft_args([5], 8, 2), 3, 8)
    assert warm64 and serve32 and set(warm64) != set(serve32)  # the key does see the slot dtype


def test_nothing_to_warm_without_pool_or_for_declined_pools():
    assert not warm_up.warm_up_worker(SimpleNamespace(topk=4, draft_runner=None))  # no draft runner yet
    pool = support.make_pool(4, 64)
    pool.use_hnd = True
    assert not warm_up.warm_up_pool(pool, 4, 4, torch.int32)
    assert not warm_up.warm_up_pool(support.make_pool(4, 64), 1, 4, torch.int32)


def test_nothing_compiles_where_the_reader_never_reads_the_copy():
    from sglang.srt.layers.attention import flashattention_backend as fa3b
    from sglang.srt.layers.attention import flashinfer_backend as fib
    from sglang.srt.layers.attention import triton_backend as trb

    compiled = {}
    for cls in (trb.TritonMultiStepDraftBackend, fib.FlashInferMultiStepDraftBackend,
                fa3b.FlashAttentionMultiStepBackend):
        pool, rows = support.layout_rows([5], 8, 3, 2, seed=6)
        worker = SimpleNamespace(topk=3, draft_runner=SimpleNamespace(
            token_to_kv_pool=pool, req_to_token_pool=SimpleNamespace(req_to_token=rows),
            draft_attn_backend=object.__new__(cls)))
        with capture_specializations(_duplicate_prefix_tail_kernel) as warm:
            warm_up.after_hook(None, worker)
        compiled[cls.__name__] = len(warm)
    assert compiled == {"TritonMultiStepDraftBackend": 0, "FlashInferMultiStepDraftBackend": 0,
                        "FlashAttentionMultiStepBackend": 1}


def test_fa3_in_place_compiles_nothing(monkeypatch):
    """In place, nothing is copied; after a fault SGLang's own function copies (one switch for
    every v2 path), so our kernel has nothing to compile."""
    from sglang.srt.layers.attention import flashattention_backend as fa3b

    from sglang_eagle_paged.adapters.v2 import fa3_in_place

    monkeypatch.setattr(fault.SWITCH, "reason", None)
    pool, rows = support.layout_rows([5], 8, 3, 2, seed=7)
    multi = object.__new__(fa3b.FlashAttentionMultiStepBackend)
    multi.attn_backends = [SimpleNamespace(**{fa3_in_place.MARK: True})]  # as the init hook marks a covered one
    worker = SimpleNamespace(topk=3, draft_runner=SimpleNamespace(
        token_to_kv_pool=pool, req_to_token_pool=SimpleNamespace(req_to_token=rows), draft_attn_backend=multi))
    with capture_specializations(_duplicate_prefix_tail_kernel) as warm:
        warm_up.after_hook(None, worker)
    plan = draft_plan.current(pool)
    assert (plan.copy, plan.reason, plan.in_place) == (draft_plan.SKIP, fa3_in_place.REASON, True) and warm == []
