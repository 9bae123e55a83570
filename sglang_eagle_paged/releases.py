"""The one place that knows SGLang's releases: which generation each belongs to and which
adapter serves it.

| releases                 | generation | how the plugin gets in                                  |
|--------------------------|------------|---------------------------------------------------------|
| 0.5.8 .. 0.5.10.post1    | v1         | ``sglang-eagle-paged patch --apply`` (no plugin API)    |
| 0.5.11 .. 0.5.12.post1   | v1         | ``sglang.srt.plugins`` entry point                      |
| 0.5.13 .. 0.5.23         | v2         | ``sglang.srt.plugins`` entry point, hook points checked |
| newer than 0.5.23        | v2         | only where every v2 hook point is unchanged (checked)   |

Every v2 release's hook points are checked at start-up, tested range included: a build inside
it (a ``.dev`` or a patched wheel) may carry other code under the same number.

Each adapter (``adapters.v1``, ``adapters.v2``) owns its hooks; this module only picks one.
"""

import functools
import importlib
import importlib.metadata
from dataclasses import dataclass

from packaging.version import Version

V1_PATCHED = (Version("0.5.8"), Version("0.5.10.post1"))
V1_PLUGIN = (Version("0.5.11"), Version("0.5.12.post1"))
V2_TESTED = (Version("0.5.13"), Version("0.5.23"))
# Where fa3's in-place draft reads (SGLANG_EAGLE_PAGED_FA3_IN_PLACE) are proven on SGLang's own
# builders (tests/adapters/v2/test_fa3_in_place.py), release by release, each on its own source:
# scripts/test.sh runs it on the ends (0.5.23, and 0.5.17, the GPU machine's release),
# scripts/check_fa3_proofs.sh on 0.5.18 .. 0.5.22 (not in CI). Elsewhere the setting does nothing.
FA3_IN_PLACE_PROVEN = (Version("0.5.17"), Version("0.5.23"))
# Where the fused FA3 draft replay metadata (SGLANG_EAGLE_PAGED_FA3_EXPAND, unset or fused) is proven on
# v2 against SGLang's own replay (tests/adapters/v2/test_fa3_replay.py), on the same releases through
# the same two scripts; elsewhere on v2 an explicit fused replaces only the expand builder and the
# unset default keeps SGLang's builders. 0.5.13 and 0.5.15 bound the draft page table by other rules
# (FA3_FUSED_V2_WHY_NOT), which the fused writer does not reproduce, and setup_cpu.sh pins no CPU
# environment for them, so no proof runs there.
FA3_FUSED_V2_PROVEN = (Version("0.5.17"), Version("0.5.23"))
FA3_FUSED_V2_WHY_NOT = ("before 0.5.17 SGLang bounds the draft page table by the CPU lengths (a device read "
                        "where they are missing), which the fused writer does not reproduce")
# Where the dense draft layout (SGLANG_EAGLE_PAGED_DENSE_DRAFT) is proven on SGLang's own code
# (tests/adapters/v2/test_dense_draft.py and test_dense_hooks.py on 0.5.23 and 0.5.17,
# test_dense_rounds.py on 0.5.23): its hook points (allocation_sizing's reserve, the module-level
# prepare_for_draft, the index kernel's positional page_size) are those of 0.5.17 .. 0.5.23.
DENSE_DRAFT_PROVEN = (Version("0.5.17"), Version("0.5.23"))
# Earliest release at all: older ones differ in the draft preprocess (SWA eviction,
# decode_batch_idx, where the helpers live) and no patch is shipped for them.
OLDEST = V1_PATCHED[0]

ADAPTERS = {"v1": "sglang_eagle_paged.adapters.v1", "v2": "sglang_eagle_paged.adapters.v2"}


@dataclass(frozen=True)
class Support:
    version: str | None
    generation: str | None   # "v1", "v2" or None (not served)
    route: str               # "plugin", "patch", "untested" (newer, identical hook points) or "none"
    problem: str | None = None  # why not served, in one line (None: served)

    @property
    def adapter(self) -> str | None:
        return ADAPTERS.get(self.generation) if self.problem is None else None

    def describe(self) -> str:
        if self.problem:
            return self.problem
        how = {"plugin": "through the plugin entry point", "patch": "through the patch (no plugin API)",
               "untested": "untested release, its v2 hook points identical to 0.5.23's"}[self.route]
        return f"SGLang {self.version}: {self.generation} worker, {how}"


@functools.lru_cache(maxsize=1)
def installed_version() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def _within(v: Version, bounds) -> bool:
    return bounds[0] <= v <= bounds[1]


def support(version: str | None = None, *, check_hook_points=None) -> Support:
    """How ``version`` (default: the installed SGLang) is served.

    ``check_hook_points(version) -> str | None`` decides every v2 release, tested or newer
    (default: the v2 adapter's own check, which imports SGLang)."""
    version = installed_version() if version is None else version
    if version is None:
        return Support(None, None, "none", "SGLang is not installed")
    v = Version(version)
    if _within(v, V1_PLUGIN):
        return Support(version, "v1", "plugin")
    if _within(v, V1_PATCHED):
        return Support(version, "v1", "patch")
    if v < OLDEST:
        return Support(version, None, "none",
                       f"SGLang {version} is older than {OLDEST}, the oldest release served "
                       f"({OLDEST} .. {V1_PATCHED[1]} through `sglang-eagle-paged patch --apply`)")
    if check_hook_points is None:
        check_hook_points = importlib.import_module(ADAPTERS["v2"] + ".hook_points").check_hook_points
    tested = _within(v, V2_TESTED)
    changed = check_hook_points(version)
    if changed:
        where = "a v2 release" if tested else f"newer than {V2_TESTED[1]}"
        return Support(version, None, "none",
                       f"SGLang {version} is {where} and its draft hook points changed "
                       f"({changed}); SGLang's own path serves")
    return Support(version, "v2", "plugin" if tested else "untested")


def _unproven(version, proven, what: str, instead: str, why: str | None = None) -> str | None:
    version = installed_version() if version is None else version
    if version is not None and _within(Version(version), proven):
        return None
    because = f" ({why})" if why and version is not None and Version(version) < proven[0] else ""
    return f"{what} does nothing on SGLang {version}: proven on {proven[0]} .. {proven[1]} only{because}; {instead}"


def fa3_in_place_problem(version: str | None = None) -> str | None:
    """None where fa3's in-place draft reads are proven for ``version`` (default: installed); else
    why the setting does nothing there, in one line."""
    return _unproven(version, FA3_IN_PLACE_PROVEN, "SGLANG_EAGLE_PAGED_FA3_IN_PLACE",
                     "fa3 copies the prefix tail as before")


def fa3_fused_v2_problem(version: str | None = None, explicit: bool = True) -> str | None:
    """None where the fused FA3 draft replay metadata is proven for v2 ``version`` (default:
    installed); else, in one line, why it does not serve there and what does: with
    ``SGLANG_EAGLE_PAGED_FA3_EXPAND=fused`` set (``explicit``) the expand builder alone is replaced,
    with it unset SGLang's own builders serve."""
    if explicit:
        return _unproven(version, FA3_FUSED_V2_PROVEN, "SGLANG_EAGLE_PAGED_FA3_EXPAND=fused's replay hook",
                         "only the expand builder is replaced (as with =expand)", FA3_FUSED_V2_WHY_NOT)
    return _unproven(version, FA3_FUSED_V2_PROVEN, "the fused FA3 draft metadata (the v2 default)",
                     "SGLang's own FA3 metadata builders serve", FA3_FUSED_V2_WHY_NOT)


def dense_draft_problem(version: str | None = None) -> str | None:
    """None where the dense draft layout is proven for ``version`` (default: installed); else why the
    setting does nothing there, in one line."""
    return _unproven(version, DENSE_DRAFT_PROVEN, "SGLANG_EAGLE_PAGED_DENSE_DRAFT",
                     "SGLang's per-branch layout and reserve serve")


def patched_release(version: str | None = None) -> str | None:
    """None where ``version`` is a pre-plugin release the patch serves; else why not."""
    s = support(version, check_hook_points=lambda _v: None)  # a v2 release: no patch either way
    if s.problem:
        return s.problem
    if s.route != "patch":
        return (f"SGLang {s.version} loads the plugin through its entry point; no patch is needed "
                f"(the patch serves {V1_PATCHED[0]} .. {V1_PATCHED[1]})")
    return None


def adapter_module(s: Support):
    return importlib.import_module(s.adapter)
