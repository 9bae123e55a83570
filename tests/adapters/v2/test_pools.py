"""Which 0.5.23 pools our kernel copies: the plain NHD MHATokenToKVPool only; every other class
or layout runs SGLang's own function, never with a -1 sentinel."""

import logging

import pytest

import v2_support as support

support.require_sglang()

import torch  # noqa: E402
from sglang.srt.mem_cache import memory_pool as mp  # noqa: E402

from sglang_eagle_paged.adapters.v2 import draft_plan, draft_step, pools  # noqa: E402
from sglang_eagle_paged.settings import Mode  # noqa: E402

torch.set_num_threads(1)
OURS = draft_step.duplication_hook(Mode.ON)


def _calls_original(pool):
    """Run our hook on ``pool``; the arguments SGLang's function got, or None if ours copied."""
    page, topk, steps, seq = 4, 3, 2, [5, 6]
    rows = torch.arange(1, 1 + 2 * 64, dtype=torch.int32).view(2, 64)
    # every slot a real row of the pool: the kernel (interpreted here) writes raw memory
    assert getattr(pool, "size", None) is None or pool.size >= int(rows.max())
    prefix_base, last_page, nnp = support.draft_args(seq, page, steps)
    got = []

    def original(*args):
        got.append(args)

    OURS(original, pool, rows, prefix_base, last_page, nnp, topk, page)
    return got[0] if got else None


def test_plain_pool_is_ours_and_logged_once(caplog):
    pool = support.make_pool(4, 256)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        assert pools.copy_table(pool) is not None
        assert pools.copy_table(pool) is not None
        assert pools.copy_table(support.make_pool(4, 256)) is not None
    lines = [r.getMessage() for r in caplog.records if "v2 draft copy" in r.getMessage()]
    assert len(lines) <= 1  # at most one line per class and reason per process (earlier tests may have logged it)
    assert _calls_original(pool) is None


@pytest.mark.parametrize("attr,value,why", [
    ("use_hnd", True, "HND"),
    ("use_native_move_kv_cache", True, "native move"),
    ("kv_cache_layout", "vectorized_5d", "kv_cache_layout"),
    ("k_scale_buffer", [torch.zeros(4)], "scale buffers"),
    ("native_k_scale_buffer", [torch.zeros(4)], "scale buffers"),
    ("post_capture_active", True, "post-capture"),
])
def test_layouts_we_decline(attr, value, why):
    # The real class, switched the way its constructor would (HND and scales need CUDA-only recipes here).
    pool = support.make_pool(4, 256)
    setattr(pool, attr, value)
    assert why in pools.decline_reason(pool)
    args = _calls_original(pool)
    assert args is not None and args[0] is pool


def test_hnd_pool_built_by_its_constructor_is_declined(monkeypatch):
    monkeypatch.setenv("SGLANG_USE_HND_KVCACHE", "1")
    pool = mp.MHATokenToKVPool(64, 4, torch.bfloat16, 2, 4, 1, "cpu", enable_memory_saver=False,
                               enable_alt_stream=False, enable_kv_cache_copy=True)
    assert pool.use_hnd
    assert "HND" in pools.decline_reason(pool)


def test_native_move_env_is_declined(monkeypatch):
    monkeypatch.setenv("SGLANG_NATIVE_MOVE_KV_CACHE", "1")
    pool = support.make_pool(4, 256)
    assert "native move" in pools.decline_reason(pool)


def test_extra_buffers_in_data_ptrs_are_declined():
    pool = support.make_pool(4, 256)
    pool.data_ptrs = torch.cat([pool.data_ptrs, pool.data_ptrs[:1]])
    assert "buffers per slot" in pools.decline_reason(pool)


SUBCLASSES = ["MHATokenToKVPoolFP4", "MHATokenToKVPoolMXFP8", "PageMajorMHATokenToKVPool", "NoOpMHATokenToKVPool"]


@pytest.mark.parametrize("name", SUBCLASSES)
def test_subclasses_run_sglang_own(name):
    cls = getattr(mp, name, None)
    if cls is None:
        pytest.skip(f"{name} is not in this SGLang")
    try:
        pool = support.make_pool(16, 128, cls=cls, head_dim=32)
    except Exception as exc:  # noqa: BLE001 -- report which class cannot be built on CPU, and why
        pool = cls.__new__(cls)  # the class alone decides: nothing of the instance is read first
        reason = pools.decline_reason(pool)
        assert reason is not None and name in reason, reason
        pytest.xfail(f"{name} cannot be constructed on CPU ({type(exc).__name__}: {str(exc)[:80]}); "
                     f"declined by class")
    assert name in pools.decline_reason(pool)
    args = _calls_original(pool)
    assert args is not None and args[0] is pool


@pytest.mark.parametrize("path", [
    "sglang.srt.mem_cache.memory_pool.MLATokenToKVPool",
    "sglang.srt.mem_cache.swa_memory_pool.SWAKVPool",
    "sglang.srt.mem_cache.memory_pool.DSATokenToKVPool",
])
def test_other_pool_families_are_declined_by_class(path):
    import pkgutil

    try:
        cls = pkgutil.resolve_name(path)
    except (ImportError, AttributeError) as exc:
        pytest.skip(f"{path} not in this SGLang: {exc}")
    pool = cls.__new__(cls)
    assert pools.decline_reason(pool).startswith(cls.__name__)
    assert _calls_original(pool)[0] is pool


def test_describe_names_the_path():
    pool = support.make_pool(4, 256)
    assert pools.describe(pool) == "MHATokenToKVPool: " + pools.OURS


# --------------------------------------------------------------- the pool check comes first


def _declined_pools():
    hnd = support.make_pool(4, 256)
    hnd.use_hnd = True
    out = [hnd]
    import pkgutil

    for path in ("sglang.srt.mem_cache.memory_pool.MLATokenToKVPool", "sglang.srt.mem_cache.swa_memory_pool.SWAKVPool"):
        cls = pkgutil.resolve_name(path)
        out.append(cls.__new__(cls))  # not constructible on CPU: the class alone decides
    return out


@pytest.mark.parametrize("pool", _declined_pools(), ids=lambda p: type(p).__name__ + ("-hnd" if getattr(p, "use_hnd", 0) else ""))
def test_a_skip_decision_never_bypasses_the_pool_check(pool, monkeypatch, caplog):
    from types import SimpleNamespace

    from sglang.srt.layers.attention import flashinfer_backend as fib

    monkeypatch.setattr(pools, "_logged", set())
    never = object.__new__(fib.FlashInferMultiStepDraftBackend)  # a reader that never reads a copied slot
    hook = draft_step.duplication_hook(Mode.ON)
    page, topk, steps, seq = 4, 3, 2, [5, 6]
    rows = torch.arange(1, 1 + 2 * 64, dtype=torch.int32).view(2, 64)
    got = []
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        draft_plan.record(pool, SimpleNamespace(draft_attn_backend=never))  # the warm-up
        for _ in range(2):
            hook(lambda *a: got.append(a), pool, rows, *support.draft_args(seq, page, steps), topk, page)
    assert len(got) == 2 and all(a[0] is pool for a in got)  # SGLang's function, every call
    lines = [r.getMessage() for r in caplog.records if "v2 draft copy on" in r.getMessage()]
    assert len(lines) == 1, lines  # one line per pool class and path, per process
    assert type(pool).__name__ in lines[0] and "SGLang's own" in lines[0]


@pytest.mark.parametrize("reader,says", [("flashinfer_backend.FlashInferMultiStepDraftBackend", "copy skipped"),
                                         ("flashattention_backend.FlashAttentionMultiStepBackend", pools.OURS)])
def test_the_plain_pool_logs_its_path_once(reader, says, monkeypatch, caplog):
    import pkgutil
    from types import SimpleNamespace

    from sglang_eagle_paged.adapters.v2 import backends

    monkeypatch.setattr(pools, "_logged", set())
    cls = pkgutil.resolve_name("sglang.srt.layers.attention." + reader)
    backend = object.__new__(cls)
    pool, rows = support.layout_rows([5], 4, 3, 2, seed=1)
    hook = draft_step.duplication_hook(Mode.ON)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        draft_plan.record(pool, SimpleNamespace(draft_attn_backend=backend))  # the warm-up
        for _ in range(2):
            hook(None, pool, rows, *support.draft_args([5], 4, 2), 3, 4)
    lines = [r.getMessage() for r in caplog.records if "v2 draft copy on" in r.getMessage()]
    reason = backends.copy_needed(backend).reason
    assert len(lines) == 1 and says in lines[0] and reason in lines[0], lines


# --------------------------------------------------------------- the verdict follows the buffer table


def test_the_verdict_is_derived_again_when_the_buffer_table_is():
    """A buffer replaced by another tensor object at the id of the dead one (CPython reuses freed
    slots; not reproducible on demand under pytest) leaves every buffer id as it was, while the
    buffer table is re-built (``kv_copy`` sees the death through its weak references). Here the
    same state, made in place: the buffer's storage view swapped (``set_``, same object), and the
    table's death flag set as the dead buffer's weak reference would have set it."""
    pool = support.make_pool(4, 256)
    k0 = pool.k_buffer[0]
    shape, stride = k0.shape, k0.stride()
    k0.set_(k0.untyped_storage(), 0, (shape[0], shape[2], shape[1]), (stride[0], stride[2], stride[1]))
    assert not k0.is_contiguous()
    plan = draft_plan.current(pool)
    assert plan.copy == draft_plan.SGLANGS  # declined: a non-contiguous buffer
    assert draft_plan.current(pool) is plan  # nothing SGLang holds changed: kept
    k0.set_(k0.untyped_storage(), 0, shape, stride)  # contiguous again, every id unchanged
    plan.buffers.alive[0] = False
    assert pools.decline_reason(pool) is None
    plan = draft_plan.current(pool)
    assert plan.copy == draft_plan.OURS and plan.table.keys[0][0] == k0.data_ptr()
