"""Entry point of group ``sglang.srt.plugins``: registers our hooks with SGLang.

SGLang calls :func:`register` in the launcher, the engine and every scheduler
process. SGLang only logs a plugin's exceptions, so a hook that did not take is
turned into a ``SystemExit`` here: a server that silently drafts on the wrong
path is worse than one that does not start.
"""

import logging
import os

from . import compat
from .mode import ENV_VAR, Mode, current_mode

logger = logging.getLogger("sglang_eagle_paged")

_state = {"registered": False, "active": None}


def _hooks(mode: Mode):
    from .kv_copy import move_kv_cache_hook
    from .server_args_gate import spec_args_hook
    from .worker import draft_preprocess_decode_hook, worker_init_hook

    hooks = {
        compat.DRAFT_PREPROCESS: (draft_preprocess_decode_hook, "AROUND"),
        compat.WORKER_INIT: (worker_init_hook, "AFTER"),
        compat.SPEC_ARGS_CHECK: (spec_args_hook, "AROUND"),
    }
    # In both modes: fake differs from on by the draft copy alone (the worker skips it),
    # while the post-verify move, which has nothing to do with the bug, is ours in both.
    hooks[compat.MOVE_KV_CACHE] = (move_kv_cache_hook, "AROUND")
    from . import prefix_check

    if prefix_check.enabled():  # debug only: costs a sync and two reads of every prefix per step
        hooks.update(prefix_check.hooks())
    return hooks


def _optional_hooks() -> dict:
    # Without these serving is still right, only slower: STANDALONE's warm-up (its kernels
    # would compile on the first draft step) and the eager verify bookkeeping (SGLang's
    # torch.compile'd one stays). A release without the target is no reason to stop.
    from . import verify_alloc, verify_free
    from .verify_compaction import src_tgt_cache_loc
    from .worker import worker_init_hook

    hooks = {compat.STANDALONE_WORKER_INIT: (worker_init_hook, "AFTER"),
             compat.SRC_TGT_CACHE_LOC: (src_tgt_cache_loc, "REPLACE")}
    try:  # the verify's page-list free and (opt-in) one-launch slots; each turned on at worker start-up
        hooks.update(verify_free.hooks())
        hooks.update(verify_alloc.hooks())
    except (ImportError, AttributeError) as exc:
        logger.warning("[sglang-eagle-paged] the verify's slots stay SGLang's: %s", exc)
    return hooks


def _register_fa3_expand() -> None:
    from . import fa3_metadata

    try:
        chosen = fa3_metadata.selection()
    except ValueError as exc:
        _fail(str(exc))
    if chosen == "off":
        return
    targets = fa3_metadata.targets()
    if chosen == "fused":
        targets = targets + [compat.FA3_BACKEND]  # the fused path's exact-type check
    for target in targets:
        try:
            compat.resolve(target)
        except (ImportError, AttributeError) as exc:
            message = f"{fa3_metadata.ENV_VAR}={chosen} but SGLang {compat.sglang_version()} has no {target}: {exc}"
            if os.environ.get(fa3_metadata.ENV_VAR, "").strip():
                _fail(message)  # asked for explicitly: an error, not a warning
            logger.warning("[sglang-eagle-paged] FA3 metadata stays SGLang's: %s", message)
            return
    fa3_metadata.register_hook()
    _state["fa3_expand"] = chosen
    _state["fa3_targets"] = fa3_metadata.targets()


def _fail(message: str):
    logger.critical("[sglang-eagle-paged] %s", message)
    raise SystemExit(f"[sglang-eagle-paged] {message} (set {ENV_VAR}=off to run stock SGLang)")


def _record_gc() -> None:
    # A benchmark's diagnostic (gc_stats.py), in every mode; it must never keep a server from starting.
    try:
        from . import gc_stats

        gc_stats.install_from_env()
    except Exception as exc:  # noqa: BLE001
        logger.warning("[sglang-eagle-paged] garbage-collection record not installed: %s", exc)


def register() -> None:
    """Register and apply our hooks; idempotent within a process."""
    if _state["registered"]:
        return
    _state["registered"] = True
    _record_gc()
    try:
        mode = current_mode()
    except ValueError as exc:
        _fail(str(exc))
    if mode is Mode.OFF:
        logger.info("[sglang-eagle-paged] %s=off: stock SGLang %s", ENV_VAR, compat.sglang_version())
        _state["active"] = "off"
        return
    problem = compat.version_problem()
    if problem:
        if os.environ.get(ENV_VAR):
            _fail(f"{ENV_VAR}={mode.value} but {problem}")
        logger.warning("[sglang-eagle-paged] inactive: %s", problem)
        _state["active"] = "inactive"
        return

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    hooks = _hooks(mode)
    before = {}
    for target, (hook, hook_type) in hooks.items():
        try:
            before[target] = compat.resolve(target)
        except (ImportError, AttributeError) as exc:
            _fail(f"cannot find {target} in SGLang {compat.sglang_version()}: {exc}")
        HookRegistry.register(target, hook, HookType[hook_type])
    _register_fa3_expand()
    for target, (hook, hook_type) in _optional_hooks().items():
        try:
            compat.resolve(target)
        except (ImportError, AttributeError) as exc:
            logger.warning("[sglang-eagle-paged] %s not found, SGLang's own path stays: %s", target, exc)
            continue
        HookRegistry.register(target, hook, HookType[hook_type])
    # Applied now rather than after all plugins so that we can check the result;
    # apply_hooks skips targets already patched, so SGLang's later call is harmless.
    HookRegistry.apply_hooks()
    checked = list(hooks) + _state.get("fa3_targets", [])
    missing = [t for t in checked if t not in HookRegistry._patched or (t in before and compat.resolve(t) is before[t])]
    if missing:
        _fail(f"hooks did not apply to {', '.join(missing)} (SGLang {compat.sglang_version()})")
    if compat.MOVE_KV_CACHE in hooks:
        from . import kv_copy

        kv_copy.hook_installed["move_kv_cache"] = True
    _state["active"] = mode.value
    logger.info(
        "[sglang-eagle-paged] active: mode=%s, worker=%s._draft_preprocess_decode (paged tree drafting), "
        "kv copy=%s, fa3 expand metadata=%s, fa3 draft replay metadata=%s, prefix check=%s, sglang %s",
        mode.value, compat.EAGLE_WORKER, "one-launch duplication" if mode is Mode.ON else "skipped (fake)",
        "one-launch kernel" if _state.get("fa3_expand") else "SGLang's",
        "fused, one launch per draft round" if _state.get("fa3_expand") == "fused" else "SGLang's",
        "on" if compat.DRAFT_STEP in hooks else "off", compat.sglang_version(),
    )


def active_mode() -> str | None:
    """What :func:`register` did in this process (None: not called)."""
    return _state["active"]
