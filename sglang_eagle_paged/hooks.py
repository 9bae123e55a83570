"""The one way the plugin hooks SGLang: a :class:`Hook` record per target, through SGLang's
public ``HookRegistry`` (``sglang.srt.plugins.hook_registry``).

Whether a hook took is checked with what is public: the hooked attribute is another object
after ``apply_hooks()`` than before it. A required hook that cannot be resolved or did not
take stops start-up (:class:`HookError`); an optional one is left to SGLang, with one line
saying so.
"""

import importlib
import logging
import pkgutil
from dataclasses import dataclass
from typing import Callable

logger = logging.getLogger("sglang_eagle_paged")

KINDS = ("replace", "around", "before", "after")


@dataclass(frozen=True)
class Hook:
    target: str          # dotted ``module.Class.attr`` or ``module.function``, as HookRegistry takes it
    function: Callable   # replace: called as the target; around: (original, *args); after: (result, *args)
    kind: str            # one of KINDS
    required: bool = True
    purpose: str = ""    # what it does, in a few words (doctor: where two hooks share a target and kind)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"hook kind {self.kind!r} is not one of {KINDS}")


class HookError(RuntimeError):
    """A required hook could not be installed."""


def resolve(target: str):
    """The object a dotted target names (``ImportError``/``AttributeError`` where there is none).

    ``pkgutil.resolve_name`` stops importing at the first module that fails to import and then
    reports a missing attribute of its parent, hiding why (a dependency of SGLang's missing, say):
    the module's own import error is raised instead, so that it is what the user reads."""
    try:
        return pkgutil.resolve_name(target)
    except AttributeError:
        _raise_import_error_of(target)
        raise


def _raise_import_error_of(target: str) -> None:
    """Import the longest module prefix of ``target`` that exists; raise its import error, if any."""
    parts = target.split(".")
    for end in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:end])
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
                continue  # this module (or a parent) does not exist: a shorter prefix might
            raise
        return


def resolve_first(targets) -> object:
    """The first of ``targets`` this release has (a symbol renamed or moved between releases)."""
    problems = []
    for target in targets:
        try:
            return resolve(target)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{target}: {exc}")
    raise AttributeError("none of " + "; ".join(problems))


def resolvable(target: str) -> str | None:
    """None where ``target`` resolves; else why not, in one line."""
    try:
        resolve(target)
    except ImportError as exc:
        return f"importing it fails: {type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 -- an import-time error of SGLang's is "not there" too
        return f"{type(exc).__name__}: {exc}"
    return None


def install(hooks, where: str) -> list:
    """Register ``hooks`` with SGLang's HookRegistry and apply them now; returns the targets hooked.

    ``where`` names the SGLang release in messages. Applied now rather than after every plugin
    so that the result can be checked; ``apply_hooks`` skips targets already patched, so
    SGLang's own later call is harmless.
    """
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    problems = {hook.target: resolvable(hook.target) for hook in hooks}
    for hook in hooks:  # before registering any: a refused install leaves nothing for SGLang to apply later
        if hook.required and problems[hook.target] is not None:
            raise HookError(f"cannot find {hook.target} in {where}: {problems[hook.target]}")
    before = {}
    for hook in hooks:
        if problems[hook.target] is not None:
            logger.warning("[sglang-eagle-paged] %s not found in %s, SGLang's own path stays (%s)",
                           hook.target, where, problems[hook.target])
            continue
        before[hook.target] = resolve(hook.target)
        HookRegistry.register(hook.target, hook.function, HookType[hook.kind.upper()])
    HookRegistry.apply_hooks()
    hooked, missing = [], []
    for hook in hooks:
        if hook.target not in before:
            continue
        if resolve(hook.target) is before[hook.target]:
            (missing if hook.required else []).append(hook.target)
            if not hook.required:
                logger.warning("[sglang-eagle-paged] %s did not take in %s; SGLang's own path stays",
                               hook.target, where)
            continue
        hooked.append(hook.target)
    if missing:
        raise HookError(f"hooks did not apply to {', '.join(missing)} ({where})")
    return hooked
