"""``doctor``'s lines for the v2 adapter: the hook point of the installed release, the copy decision
per draft decode backend class, and what each opt-in setting does here (the adapter's own decisions,
asked as a server asks them; nothing here decides anything a server does not)."""

import pkgutil

from ..adapters.v2 import backends, hook_points
from ..adapters.v2.hook_table import mode_of
from ..settings import Mode, Settings


def lines(settings_or_mode) -> list:
    """(label, detail) lines for ``doctor``: the hook point of this release and, per draft decode
    backend class of this release, the copy decision a server's draft plan makes for it
    (:func:`.backends.copy_needed` on an object of that class)."""
    mode = mode_of(settings_or_mode)
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
        out.append(("fa3 metadata", fa3_metadata_line(settings_or_mode, version)))
        if mode is Mode.ON:
            out.append(("fa3 in place", _fa3_in_place_line(settings_or_mode.fa3_in_place, version)))
            out.append(("dense draft", _dense_draft_line(settings_or_mode.dense_draft, version)))
    return out


def _opt_in_line(asked: bool, variable: str, unset: str, problem: str | None, on: str) -> str:
    """doctor's line for an opt-in setting: off (and what serves), not proven here (why), or what it does."""
    if not asked:
        return f"off ({variable} unset: {unset})"
    return problem if problem else on


def _dense_draft_line(asked: bool | None, version) -> str:
    from .. import releases, settings

    if asked is None:
        backends = releases.proven_backends("dense_draft_auto", version)
        if not backends:
            return f"off ({settings.DENSE_DRAFT} unset or auto: {releases.unproven('dense_draft_auto', version)})"
        return (f"auto ({settings.DENSE_DRAFT} unset or auto): page 1's draft slots and reserve where the draft "
                f"worker's backend is {' or '.join(backends)} (decided at start-up, one line)")
    return _opt_in_line(asked, settings.DENSE_DRAFT, "SGLang's per-branch draft layout and reserve",
                        releases.unproven("dense_draft", version) if asked else None,
                        f"asked ({settings.DENSE_DRAFT}): page 1's draft slots and reserve where the draft worker's "
                        "backend is flashinfer's or triton's, or fa3's where fa3 in place covers it (decided at "
                        "start-up, one line)")


def fa3_metadata_line(s: Settings, version) -> str:
    from .. import releases, settings
    from ..settings import FA3Expand
    from ..adapters.v2 import fa3_replay

    chosen = fa3_replay.chosen(s, version)
    if chosen is FA3Expand.OFF:
        if not s.fa3_expand_explicit:
            return f"SGLang's builders: {releases.unproven('fa3_fused_v2_default', version)}"
        return f"SGLang's builders ({settings.FA3_EXPAND}=off)"
    if chosen is FA3Expand.FUSED:
        how = f"{settings.FA3_EXPAND}=fused" if s.fa3_expand_explicit else f"{settings.FA3_EXPAND} unset: the default"
        return f"fused ({how}): the draft round's FA3 metadata in one launch" + (
            ", in the per-token form where fa3 reads in place" if s.fa3_in_place else "")
    asked = s.fa3_expand_for("v2")
    why = releases.unproven("fa3_fused_v2", version) if asked is FA3Expand.FUSED else None
    return f"expand ({settings.FA3_EXPAND}={asked.value}): the expand builder replaced" + (f"; {why}" if why else "")


def _fa3_in_place_line(asked: bool, version) -> str:
    from .. import releases, settings

    return _opt_in_line(asked, settings.FA3_IN_PLACE, "fa3 copies the prefix tail",
                        releases.unproven("fa3_in_place", version) if asked else None,
                        f"on ({settings.FA3_IN_PLACE}): fa3's draft reads the prefix tail where it lies, its replay "
                        "metadata from the fused writer's per-token form, eager steps SGLang's builders and our "
                        "rewrite")
