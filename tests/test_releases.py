"""The one release table: which generation serves which SGLang release, and how."""

import pytest

from sglang_eagle_paged import releases


def never(_version):
    raise AssertionError("a tested release must not need the hook-point check")


@pytest.mark.parametrize("version,generation,route", [
    ("0.5.8", "v1", "patch"), ("0.5.8.post1", "v1", "patch"), ("0.5.10.post1", "v1", "patch"),
    ("0.5.11", "v1", "plugin"), ("0.5.12", "v1", "plugin"), ("0.5.12.post1", "v1", "plugin"),
    ("0.5.13", "v2", "plugin"), ("0.5.13.post1", "v2", "plugin"), ("0.5.15.post1", "v2", "plugin"),
    ("0.5.17", "v2", "plugin"), ("0.5.23", "v2", "plugin"),
])
def test_served_releases(version, generation, route):
    asked = []
    s = releases.support(version, check_hook_points=never if generation == "v1" else asked.append)
    assert (s.generation, s.route, s.problem) == (generation, route, None)
    assert s.adapter == f"sglang_eagle_paged.adapters.{generation}"
    assert asked == ([] if generation == "v1" else [version])  # every v2 release's hook points are checked


@pytest.mark.parametrize("version", ["0.5.13", "0.5.20", "0.5.23", "0.5.23.dev0"])
def test_a_v2_release_whose_hook_points_changed_is_not_served(version):
    s = releases.support(version, check_hook_points=lambda v: "duplicate_prefix_tail_to_draft_branches has new code")
    assert s.adapter is None and version in s.problem and "new code" in s.problem and "\n" not in s.problem


@pytest.mark.parametrize("version", ["0.5.7", "0.5.2", "0.4.9"])
def test_older_releases_are_refused_in_one_line(version):
    s = releases.support(version, check_hook_points=never)
    assert s.generation is None and s.adapter is None and version in s.problem and "\n" not in s.problem


def test_a_newer_release_is_served_only_with_identical_hook_points():
    asked = []
    same = releases.support("0.5.24", check_hook_points=lambda v: asked.append(v))
    assert asked == ["0.5.24"] and (same.generation, same.route, same.problem) == ("v2", "untested", None)
    assert "untested" in same.describe()
    changed = releases.support("0.6.0", check_hook_points=lambda v: "prepare_for_draft's signature changed")
    assert changed.adapter is None and "0.6.0" in changed.problem and "signature changed" in changed.problem


def test_not_installed():
    s = releases.Support(None, None, "none", "SGLang is not installed")
    assert s.adapter is None and s.describe() == "SGLang is not installed"


def test_patched_release():
    assert releases.patched_release("0.5.9") is None
    assert "no patch is needed" in releases.patched_release("0.5.12.post1")
    assert "older than 0.5.8" in releases.patched_release("0.5.7")


def test_the_package_requires_neither_sglang_nor_torch():
    """Installing the plugin never installs, upgrades or downgrades SGLang, torch or triton: it names
    none of them (pip's resolver itself is asked in tests/test_packaging.py)."""
    import pathlib
    import tomllib

    from packaging.requirements import Requirement

    root = pathlib.Path(releases.__file__).resolve().parents[1]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"].get("dependencies", [])
    assert not {Requirement(d).name for d in deps} & {"sglang", "torch", "triton"}


def test_a_newer_release_with_0_5_23s_hook_points_is_served_untested():
    """With the real check, on the installed 0.5.23 standing in for a newer release."""
    import importlib.metadata

    if importlib.metadata.version("sglang") != "0.5.23":
        pytest.skip("needs SGLang 0.5.23's hook points installed")
    s = releases.support("0.5.99")
    assert (s.generation, s.route, s.problem) == ("v2", "untested", None)


def test_the_fa3_proofs_run_on_every_release_of_their_proven_ranges():
    """The fa3 rows of releases.PROVEN are ranges proven release by release: their ends
    are the releases scripts/test.sh runs the proof files on (.venv-517's and .venv's), every
    0.5.x between them is in scripts/check_fa3_proofs.sh's default list (no post release lies in
    between), and the script refuses a release it has no environment for."""
    import pathlib
    import re
    import subprocess

    from packaging.version import Version

    root = pathlib.Path(releases.__file__).resolve().parents[1]
    low = re.search(r"SGLANG_VERSION=(\S+) VENV=\.venv-517", (root / "scripts/test.sh").read_text())[1]
    high = re.search(r'SGLANG_VERSION:-([^}]+)\}', (root / "scripts/setup_cpu.sh").read_text())[1]
    ends = (Version(low), Version(high))
    assert {releases.PROVEN[f].releases for f in ("fa3_in_place", "fa3_fused_v2", "fa3_fused_v2_default")} == {ends}
    dry = subprocess.run(["bash", "scripts/check_fa3_proofs.sh", "--dry-run"], cwd=root,
                         capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    middle = sorted({Version(line.split(":")[0]) for line in dry.stdout.splitlines()})
    assert middle == [Version(f"0.5.{n}") for n in range(ends[0].micro + 1, ends[1].micro)]
    refused = subprocess.run(["bash", "scripts/check_fa3_proofs.sh", "--dry-run", "0.5.16"], cwd=root,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "0.5.16" in refused.stderr
