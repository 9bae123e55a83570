"""Entry point of group ``sglang.srt.plugins``: registers the hooks of the adapter that serves
the installed SGLang.

SGLang calls :func:`register` in the launcher, the engine and every scheduler process (and,
from 0.5.22, the DP controller and detokenizer). It catches a plugin's ``Exception`` and only
logs it, so a problem that must stop start-up is raised as ``SystemExit`` here: a server that
silently drafts on the wrong path is worse than one that does not start. What stops start-up:
an unknown setting; ``SGLANG_EAGLE_PAGED`` set explicitly where this SGLang cannot be served or
a required hook did not take. With the mode unset, an unsupported SGLang (hook points changed
included) or a hook that did not take leaves the plugin inert, with one line.
"""

import logging

from . import releases, settings
from .hooks import HookError, install

logger = logging.getLogger("sglang_eagle_paged")

FAKE_WARNING = (f"{settings.MODE}=fake: draft branches read KV that was never copied, so drafts are wrong "
                "by design (acceptance drops); for A/B benchmarks only, never for serving")

_state = {"registered": False, "active": None, "hooked": []}


def _fail(message: str):
    logger.critical("[sglang-eagle-paged] %s", message)
    raise SystemExit(f"[sglang-eagle-paged] {message} (set {settings.MODE}=off to run stock SGLang)")


def _refuse(s: settings.Settings, problem: str) -> None:
    """This SGLang cannot be served: stop start-up if the mode was asked for, else stay inert."""
    if s.mode_explicit:
        _fail(f"{settings.MODE}={s.mode.value} but {problem}")
    logger.warning("[sglang-eagle-paged] inactive: %s", problem)
    _state["active"] = "inactive"


def register() -> None:
    """Register and apply the hooks of this SGLang's adapter; idempotent within a process."""
    if _state["registered"]:
        return
    _state["registered"] = True
    try:
        s = settings.current()
    except settings.SettingsError as exc:
        _fail(str(exc))
    version = releases.installed_version()
    if s.mode is settings.Mode.OFF:
        logger.info("[sglang-eagle-paged] %s=off: stock SGLang %s", settings.MODE, version)
        _state["active"] = "off"
        return
    try:
        support = releases.support(version)
    except Exception as exc:  # noqa: BLE001 -- checking SGLang's hook points must not stop it either
        support = releases.Support(version, None, "none", f"hook points of SGLang {version} not checkable "
                                   f"({type(exc).__name__}: {exc})")
    if support.problem is None and support.route == "patch":
        # Pre-plugin releases call the v1 adapter's legacy install from the patched worker module.
        support = releases.Support(version, None, "none", f"SGLang {version} has no plugin API: "
                                   "`sglang-eagle-paged patch --apply` serves it")
    if support.problem:
        _refuse(s, support.problem)
        return
    unused = settings.unused_by(support.generation)
    if unused:
        logger.warning("[sglang-eagle-paged] %s: no effect on SGLang %s (%s adapter; v1 releases only)",
                       ", ".join(unused), version, support.generation)
    if s.mode is settings.Mode.FAKE:
        logger.warning("[sglang-eagle-paged] %s", FAKE_WARNING)
    adapter = releases.adapter_module(support)
    try:
        hooked = install(adapter.hooks(s), f"SGLang {version}")
    except (HookError, LookupError) as exc:
        _refuse(s, str(exc))
        return
    adapter.installed(hooked)
    _state.update(active=s.mode.value, hooked=hooked)
    if support.route == "untested":
        logger.warning("[sglang-eagle-paged] %s", support.describe())
    logger.info("[sglang-eagle-paged] active: mode=%s, %s adapter, %s, sglang %s", s.mode.value,
                support.generation, adapter.describe(s, hooked), version)


def active_mode() -> str | None:
    """What :func:`register` did in this process (None: not called)."""
    return _state["active"]


def hooked_targets() -> list:
    """The targets :func:`register` hooked in this process."""
    return list(_state["hooked"])
