"""Hook installation for SGLang releases without ``sglang.srt.plugins`` (0.5.8 .. 0.5.10.post1).

The patches (``tools/patches/``) only add a guarded call to :func:`install_legacy` at the end
of ``eagle_worker.py``, so the fix itself stays in this package. Without a HookRegistry the
same :class:`~sglang_eagle_paged.hooks.Hook` records are applied here, by wrapping each
target in place; only the kinds the v1 adapter's required hooks use are supported.
"""

import functools
import logging

from ... import releases, settings
from ...hooks import resolve, resolvable

logger = logging.getLogger("sglang_eagle_paged")

_installed = False

# What the patched releases have of the v1 hooks: the worker's draft preprocess and
# __init__, and the pool's move. The rest (server-args check, verify bookkeeping, FA3
# metadata) is left to SGLang there.
LEGACY_TARGETS = ("_draft_preprocess_decode", "EAGLEWorker.__init__", "move_kv_cache")


def _wrap(hook) -> None:
    owner_path, name = hook.target.rsplit(".", 1)
    owner = resolve(owner_path)
    original = getattr(owner, name)
    if hook.kind == "around":
        def wrapper(*args, **kwargs):
            return hook.function(original, *args, **kwargs)
    elif hook.kind == "after":
        def wrapper(*args, **kwargs):
            return hook.function(original(*args, **kwargs), *args, **kwargs)
    else:
        raise ValueError(f"the legacy install does not do {hook.kind} hooks ({hook.target})")
    setattr(owner, name, functools.wraps(original)(wrapper))


def legacy_hooks(s) -> list:
    from . import hooks

    return [h for h in hooks(s) if h.required and h.target.endswith(LEGACY_TARGETS)]


def install_legacy() -> bool:
    """Install our hooks in-process; returns whether they are active."""
    global _installed
    if _installed:
        return True
    s = settings.current()
    if s.mode is settings.Mode.OFF:
        return False
    problem = releases.patched_release()
    if problem:
        logger.warning("[sglang-eagle-paged] not installed: %s", problem)
        return False
    chosen = legacy_hooks(s)
    missing = [h.target for h in chosen if resolvable(h.target)]
    if missing:
        logger.warning("[sglang-eagle-paged] not installed on SGLang %s: missing %s",
                       releases.installed_version(), ", ".join(missing))
        return False
    for hook in chosen:
        _wrap(hook)
    from . import installed

    installed([h.target for h in chosen])
    _installed = True
    logger.info("[sglang-eagle-paged] active (legacy patch): mode=%s, sglang %s", s.mode.value,
                releases.installed_version())
    return True
