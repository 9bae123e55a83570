"""The v2 adapter: SGLang's overlap-scheduled v2 worker (0.5.13 .. 0.5.23).

One hot-path hook: the paged tree draft's prefix-tail duplication
(``duplicate_prefix_tail_to_draft_branches``, :mod:`.duplicate`), in the module home of the
installed release (:mod:`.hook_points`). What serves each draft runner is decided once, when the
draft worker's pool and backend exist (:mod:`.draft_plan`, :mod:`.warm_up`); everything of ours
that runs per draft step is :mod:`.draft_step`, under one fault switch (:mod:`.fault`). Which pools
our kernel copies is :mod:`.pools`. With
``SGLANG_EAGLE_PAGED_FA3_IN_PLACE`` on, fa3's draft reads the prefix tail in place and nothing is
copied for it (:mod:`.fa3_in_place`; off by default: measured slower than the fused copy). FA3's
tree-draft metadata builders are replaced as on v1 (:mod:`.fa3_replay`; ``SGLANG_EAGLE_PAGED_FA3_EXPAND``,
fused by default where proven).
"""

import logging
import pkgutil

from ...hooks import Hook
from ...settings import Mode, Settings
from . import hook_points
from .hook_points import check_hook_points  # noqa: F401  (the release table's check)

GENERATION = "v2"
logger = logging.getLogger("sglang_eagle_paged")


def _mode(settings_or_mode) -> Mode:
    return Mode(settings_or_mode.mode if isinstance(settings_or_mode, Settings) else settings_or_mode)


def warm_up_targets() -> list:
    """The draft worker classes' own ``init_attention_backend`` in the SGLang importable here (after it,
    the draft pool and its decode backend exist); a class that inherits it is served by its parent's."""
    out = []
    for cls_path in hook_points.DRAFT_WORKERS:
        try:
            cls = pkgutil.resolve_name(cls_path)
        except Exception:  # noqa: BLE001 -- an import-time error of SGLang's is left to hooks.install to report
            out.append(f"{cls_path}.{hook_points.WARM_UP_METHOD}")
            continue
        if hook_points.WARM_UP_METHOD in vars(cls):
            out.append(f"{cls_path}.{hook_points.WARM_UP_METHOD}")
    return out


def hooks(settings_or_mode, version: str | None = None) -> list:
    """The v2 hooks for a :class:`~sglang_eagle_paged.settings.Settings` or a mode (on, fake;
    off installs nothing), for ``version`` (default: the installed SGLang)."""
    from . import draft_step, warm_up

    mode = _mode(settings_or_mode)
    if mode is Mode.OFF:
        return []
    home = hook_points.home_for(version if version is not None else hook_points.installed_version())
    out = [Hook(home.target, draft_step.duplication_hook(mode), "around")]
    if mode is Mode.ON:  # fake launches nothing: nothing to compile
        out += [Hook(t, warm_up.after_hook, "after", required=False) for t in warm_up_targets()]
    # issue 61 seam: the dense layout on fa3 reads through fa3 in place's per-token form, so asking
    # for it installs those hooks too
    if mode is Mode.ON and isinstance(settings_or_mode, Settings) and (
            settings_or_mode.fa3_in_place or settings_or_mode.dense_draft):
        out += fa3_in_place_hooks(version)
    if mode is Mode.ON and isinstance(settings_or_mode, Settings) and settings_or_mode.dense_draft:
        from . import dense_draft

        out += [Hook(target, fn, kind, required) for target, fn, kind, required in dense_draft.hooks(version)]
    if isinstance(settings_or_mode, Settings):  # on and fake alike, as on v1: an A/B differs by the copy only
        from . import fa3_replay

        out += fa3_replay.hooks(settings_or_mode, warm_up_targets(), version)
    return out


def fa3_in_place_hooks(version: str | None = None) -> list:
    """fa3's in-place draft reads where they are proven for ``version``; elsewhere none, one line."""
    from ...releases import fa3_in_place_problem
    from . import fa3_in_place

    problem = fa3_in_place_problem(version)
    if problem:
        logger.info("[sglang-eagle-paged] %s", problem)
        return []
    return [Hook(target, fn, kind) for target, fn, kind in fa3_in_place.hooks()]


def installed(hooked: list) -> None:
    """Nothing to switch on after the hooks took: the duplication hook decides per pool."""


def describe(settings_or_mode, hooked: list) -> str:
    mode = _mode(settings_or_mode)
    dup = [t for t in hooked if t.endswith("." + hook_points.FUNCTION)]
    copy = "one-launch duplication on plain MHA pools, SGLang's own elsewhere" if mode is Mode.ON else \
        "skipped (fake)"
    from . import fa3_replay

    return (f"draft duplication={dup[0] if dup else 'SGLang' + chr(39) + 's'} ({copy}), "
            f"fa3 metadata={fa3_replay.describe(hooked)}")


def doctor_lines(settings_or_mode) -> list:
    """(label, detail) lines for ``doctor``: the hook point of this release and, per draft decode
    backend class of this release, the copy decision a server's draft plan makes for it
    (:func:`.backends.copy_needed` on an object of that class)."""
    from . import backends

    mode = _mode(settings_or_mode)
    version = hook_points.installed_version()
    home = hook_points.home_for(version)
    out = [("v2 hook point", f"{home.target} (SGLang {version})")]
    for path, (name, _reads, _why) in backends.READERS.items():
        label = f"copy ({name})"
        if mode is Mode.FAKE:
            out.append((label, "skipped: mode fake (index-only, benchmarks)"))
            continue
        try:
            cls = pkgutil.resolve_name(path)
        except Exception as exc:  # noqa: BLE001 -- a backend this machine cannot import (CUDA-only modules)
            out.append((label, f"{path} does not import here ({type(exc).__name__}); a server decides from it"))
            continue
        decision = backends.copy_needed(cls.__new__(cls))
        out.append((label, ("one launch, plain MHA pools; SGLang's own elsewhere: " if decision.copy else "skipped: ")
                    + decision.reason))
    if isinstance(settings_or_mode, Settings):
        out.append(("fa3 metadata", _fa3_metadata_line(settings_or_mode, version)))
        if mode is Mode.ON:
            out.append(("fa3 in place", _fa3_in_place_line(settings_or_mode.fa3_in_place, version)))
            out.append(("dense draft", _dense_draft_line(settings_or_mode.dense_draft, version)))
    return out


def _opt_in_line(asked: bool, variable: str, unset: str, problem: str | None, on: str) -> str:
    """doctor's line for an opt-in setting: off (and what serves), not proven here (why), or what it does."""
    if not asked:
        return f"off ({variable} unset: {unset})"
    return problem if problem else on


def _dense_draft_line(asked: bool, version) -> str:
    from ... import releases, settings

    return _opt_in_line(asked, settings.DENSE_DRAFT, "SGLang's per-branch draft layout and reserve",
                        releases.dense_draft_problem(version) if asked else None,
                        f"asked ({settings.DENSE_DRAFT}): page 1's draft slots and reserve where the draft worker's "
                        "backend is flashinfer's or triton's, or fa3's where fa3 in place covers it (decided at start-up, one line)")


def _fa3_metadata_line(s: Settings, version) -> str:
    from ... import releases, settings
    from ...settings import FA3Expand
    from . import fa3_replay

    chosen = fa3_replay.chosen(s, version)
    if chosen is FA3Expand.OFF:
        if not s.fa3_expand_explicit:
            return f"SGLang's builders: {releases.fa3_fused_v2_problem(version, explicit=False)}"
        return f"SGLang's builders ({settings.FA3_EXPAND}=off)"
    if chosen is FA3Expand.FUSED:
        how = f"{settings.FA3_EXPAND}=fused" if s.fa3_expand_explicit else f"{settings.FA3_EXPAND} unset: the default"
        return f"fused ({how}): the draft round's FA3 metadata in one launch" + (
            ", in the per-token form where fa3 reads in place" if s.fa3_in_place else "")
    asked = s.fa3_expand_for("v2")
    why = releases.fa3_fused_v2_problem(version) if asked is FA3Expand.FUSED else None
    return f"expand ({settings.FA3_EXPAND}={asked.value}): the expand builder replaced" + (f"; {why}" if why else "")


def _fa3_in_place_line(asked: bool, version) -> str:
    from ... import releases, settings

    return _opt_in_line(asked, settings.FA3_IN_PLACE, "fa3 copies the prefix tail",
                        releases.fa3_in_place_problem(version) if asked else None,
                        f"on ({settings.FA3_IN_PLACE}): fa3's draft reads the prefix tail where it lies, its replay "
                        "metadata from the fused writer's per-token form, eager steps SGLang's builders and our rewrite")
