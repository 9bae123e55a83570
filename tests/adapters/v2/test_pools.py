"""Which 0.5.23 pools our kernel copies: the plain NHD MHATokenToKVPool only; every other class
or layout runs SGLang's own function, never with a -1 sentinel."""

import logging

import pytest

import v2_support as support

support.require_sglang()

import torch  # noqa: E402
from sglang.srt.mem_cache import memory_pool as mp  # noqa: E402

from sglang_eagle_paged.adapters.v2 import duplicate, pools  # noqa: E402
from sglang_eagle_paged.settings import Mode  # noqa: E402

torch.set_num_threads(1)
OURS = duplicate.make_hook(Mode.ON)


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
