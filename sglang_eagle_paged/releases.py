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
# What each opt-in path of ours is proven on, release by release, and what serves elsewhere:
# PROVEN[feature] = Proof. Proven on SGLang's own code on the CPU (the tests named), each release
# on its own source: scripts/test.sh runs the proof files on the ends (0.5.23, and 0.5.17, the GPU
# machine's release), scripts/check_fa3_proofs.sh the fa3 ones on 0.5.18 .. 0.5.22 (not in CI).
# Elsewhere the setting does nothing, in one line (:func:`unproven`).
#
# - fa3 in place (SGLANG_EAGLE_PAGED_FA3_IN_PLACE): tests/adapters/v2/test_fa3_in_place.py.
# - the fused FA3 draft replay metadata on v2 (SGLANG_EAGLE_PAGED_FA3_EXPAND, unset or fused):
#   tests/adapters/v2/test_fa3_replay.py against SGLang's own replay. 0.5.13 and 0.5.15 bound the
#   draft page table by other rules (its ``why``), which the fused writer does not reproduce, and
#   setup_cpu.sh pins no CPU environment for them; there an explicit fused replaces only the expand
#   builder and the unset default keeps SGLang's builders (two rows, one per wording).
# - the dense draft layout (SGLANG_EAGLE_PAGED_DENSE_DRAFT=1): test_dense_draft.py and
#   test_dense_hooks.py on 0.5.23 and 0.5.17, test_dense_rounds.py on 0.5.23; its hook points
#   (allocation_sizing's reserve, the module-level prepare_for_draft, the index kernel's positional
#   page_size) are those of 0.5.17 .. 0.5.23; on fa3 (where fa3 in place covers every draft step, whose
#   row it needs too): test_fa3_dense.py on 0.5.23 and 0.5.17.
# - the dense draft layout by default (SGLANG_EAGLE_PAGED_DENSE_DRAFT unset or auto): per draft decode
#   backend, where the GPU suite has proven it (docs/gpu.md); none yet, so auto is off everywhere.


@dataclass(frozen=True)
class Proof:
    setting: str                 # what the user set, as the line names it
    releases: tuple = ()         # (first, last) proven, inclusive; () where none is
    instead: str = ""            # what serves where it is not proven
    why: str | None = None       # why not before ``first``
    backends: tuple = ()         # the draft decode backends it is proven for (empty: not per backend)


_DENSE_INSTEAD = "SGLang's per-branch layout and reserve serve"
_FUSED_WHY_NOT = ("before 0.5.17 SGLang bounds the draft page table by the CPU lengths (a device read where they "
                  "are missing), which the fused writer does not reproduce")
PROVEN = {
    "fa3_in_place": Proof("SGLANG_EAGLE_PAGED_FA3_IN_PLACE", (Version("0.5.17"), Version("0.5.23")),
                          "fa3 copies the prefix tail as before"),
    "fa3_fused_v2": Proof("SGLANG_EAGLE_PAGED_FA3_EXPAND=fused's replay hook", (Version("0.5.17"), Version("0.5.23")),
                          "only the expand builder is replaced (as with =expand)", _FUSED_WHY_NOT),
    "fa3_fused_v2_default": Proof("the fused FA3 draft metadata (the v2 default)",
                                  (Version("0.5.17"), Version("0.5.23")),
                                  "SGLang's own FA3 metadata builders serve", _FUSED_WHY_NOT),
    "dense_draft": Proof("SGLANG_EAGLE_PAGED_DENSE_DRAFT", (Version("0.5.17"), Version("0.5.23")), _DENSE_INSTEAD),
    "dense_draft_auto": Proof("SGLANG_EAGLE_PAGED_DENSE_DRAFT=auto (the default)", (),
                              _DENSE_INSTEAD + " (SGLANG_EAGLE_PAGED_DENSE_DRAFT=1 asks for the dense layout)",
                              backends=()),
}
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


def unproven(feature: str, version: str | None = None) -> str | None:
    """None where ``feature`` (a key of :data:`PROVEN`) is proven for ``version`` (default: the installed
    SGLang); else why the setting does nothing there and what serves, in one line."""
    proof = PROVEN[feature]
    version = installed_version() if version is None else version
    if not proof.releases:
        return f"{proof.setting} does nothing on SGLang {version}: proven on no release yet; {proof.instead}"
    first, last = proof.releases
    if version is not None and _within(Version(version), proof.releases):
        return None
    because = f" ({proof.why})" if proof.why and version is not None and Version(version) < first else ""
    return (f"{proof.setting} does nothing on SGLang {version}: proven on {first} .. {last} only{because}; "
            f"{proof.instead}")


def proven_backends(feature: str, version: str | None = None) -> tuple:
    """The draft decode backends ``feature`` is proven for on ``version`` (none where the release is not)."""
    return () if unproven(feature, version) else PROVEN[feature].backends


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
