"""Which v2 draft pools our duplication kernel copies, and which stay with SGLang's own function.

The kernel copies whole K and V rows. That is all a slot holds only in SGLang's plain
``MHATokenToKVPool`` (the exact class: subclasses such as FP4, MXFP8, PageMajor and NoOp
keep more state or another layout) with NHD rows and nothing else moved per slot. Every
pool we decline keeps SGLang's own function, so a -1 sentinel never reaches a pool's own
``move_kv_cache``.

The verdict is part of the draft runner's plan (:mod:`.draft_plan`), derived again when SGLang
replaces a buffer; the plan logs which path serves each pool class, once per process and path
(:func:`log_path`).
"""

import logging

from ...hooks import resolve
from ..common import kv_copy
from .sglang_api import ENVIRON

logger = logging.getLogger("sglang_eagle_paged")

_logged = set()

OURS = "one-launch duplication (plain NHD K/V rows)"


def _native_move_env() -> bool:
    try:
        envs = resolve(ENVIRON)
    except (ImportError, AttributeError):
        return False
    var = getattr(envs, "SGLANG_NATIVE_MOVE_KV_CACHE", None)
    return bool(var.get()) if var is not None else False


def layout_reason(pool) -> str | None:
    """None where ``pool`` is SGLang's plain ``MHATokenToKVPool`` holding slot ``s`` as row ``s``
    of unscaled NHD K and V buffers, all that a slot is; else why not, in one line. What both our
    copy and FA3's in-place reads (``fa3_in_place``) rest on."""
    cls = type(pool)
    if cls is not kv_copy.mha_pool_class():
        return f"{cls.__name__} is not the plain MHATokenToKVPool"
    if getattr(pool, "use_hnd", False):
        return "HND layout (SGLANG_USE_HND_KVCACHE)"
    layout = getattr(pool, "kv_cache_layout", "nhd")
    if layout != "nhd":
        return f"kv_cache_layout={layout!r}"
    if getattr(pool, "is_quantized_kv_cache", False):
        return "quantized KV cache"
    for name in ("k_scale_buffer", "v_scale_buffer", "native_k_scale_buffer", "native_v_scale_buffer"):
        if getattr(pool, name, None) is not None:
            return f"scale buffers ({name})"
    return None


def decline_reason(pool) -> str | None:
    """None where our kernel copies ``pool`` exactly as SGLang would; else why not, in one line."""
    reason = layout_reason(pool)
    if reason is not None:
        return reason
    if getattr(pool, "use_native_move_kv_cache", False) or _native_move_env():
        return "native move_kv_cache (SGLANG_NATIVE_MOVE_KV_CACHE)"
    if getattr(pool, "post_capture_active", False):
        return "post-capture (VMM-backed) KV buffers"
    k, v = getattr(pool, "k_buffer", None), getattr(pool, "v_buffer", None)
    if not k or not v:
        return "no K/V buffers (zero-layer pool)"
    data_ptrs = getattr(pool, "data_ptrs", None)
    if data_ptrs is not None and data_ptrs.numel() != len(k) + len(v):
        # numel is host metadata: what SGLang moves per slot is more than the K and V rows
        return f"SGLang moves {data_ptrs.numel()} buffers per slot, not only the {len(k) + len(v)} K/V rows"
    if not all(b.is_contiguous() and b.dim() >= 1 for b in (*k, *v)):
        return "non-contiguous K/V buffers"
    return None


def log_path(pool, path: str, why: str) -> None:
    """One INFO line per pool class, path and reason, per process: which function serves this
    pool's prefix-tail duplication, and why."""
    key = (type(pool).__qualname__, path, why)
    if key in _logged:
        return
    _logged.add(key)
    logger.info("[sglang-eagle-paged] v2 draft copy on %s: %s (%s)", type(pool).__name__, path, why)


def copy_table(pool):
    """The buffer table our kernel copies ``pool`` with, or None where SGLang's own function must
    run (the doctor's self-test, benchmarks; serving reads the draft plan's)."""
    return None if decline_reason(pool) is not None else kv_copy.pool_table(pool)


def describe(pool) -> str:
    """Which path serves ``pool`` and why, in one line (doctor, logs)."""
    reason = decline_reason(pool)
    return f"{type(pool).__name__}: " + (OURS if reason is None else f"SGLang's own copy ({reason})")
