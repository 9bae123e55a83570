"""Hook installation for SGLang releases without ``sglang.srt.plugins``.

The patches in ``patches/`` only add a guarded call to :func:`install_legacy` at
the end of ``eagle_worker.py``, so the fix itself stays in this package. Without
a HookRegistry we wrap the same targets directly, with the same hooks.
"""

import functools
import logging

from . import compat
from .mode import Mode, current_mode

logger = logging.getLogger("sglang_eagle_paged")

_installed = False


def _around(owner, name, hook):
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        return hook(original, *args, **kwargs)

    setattr(owner, name, wrapper)


def missing_apis() -> list:
    """The SGLang internals our worker calls that this release lacks."""
    needed = [
        compat.DRAFT_PREPROCESS,
        compat.MOVE_KV_CACHE,
        "sglang.srt.mem_cache.common.alloc_paged_token_slots_extend",
    ]
    missing = []
    for target in needed:
        try:
            compat.resolve(target)
        except (ImportError, AttributeError):
            missing.append(target)
    return missing


def install_legacy() -> bool:
    """Install our hooks in-process; returns whether they are active."""
    global _installed
    if _installed:
        return True
    mode = current_mode()
    if mode is Mode.OFF:
        return False
    problem = compat.legacy_problem()
    if problem:
        logger.warning("[sglang-eagle-paged] not installed: %s", problem)
        return False
    missing = missing_apis()
    if missing:
        logger.warning("[sglang-eagle-paged] not installed on SGLang %s: missing %s",
                       compat.sglang_version(), ", ".join(missing))
        return False
    from .kv_copy import move_kv_cache_hook
    from .worker import draft_preprocess_decode_hook, worker_init_hook

    worker_cls = compat.resolve(compat.EAGLE_WORKER)
    _around(worker_cls, "_draft_preprocess_decode", draft_preprocess_decode_hook)
    _around(worker_cls, "__init__", lambda original, worker, *a, **k: worker_init_hook(original(worker, *a, **k), worker))
    # as the plugin does: in fake mode too (the worker skips the draft copy there)
    _around(compat.resolve(compat.MHA_POOL), "move_kv_cache", move_kv_cache_hook)
    from . import kv_copy

    kv_copy.hook_installed["move_kv_cache"] = True
    _installed = True
    logger.info("[sglang-eagle-paged] active (legacy patch): mode=%s, sglang %s", mode.value, compat.sglang_version())
    return True
