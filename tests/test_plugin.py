"""The plugin as SGLang loads it, on the SGLang installed (0.5.23 in the suite): entry point,
allow-list, modes, settings, version guard, console scripts.

What each generation hooks is named here by its adapter's own target names (v1: the draft
preprocess, the post-verify move and the spec-args check; v2: the duplication's home in this
release); ``tests/adapters/v1/test_plugin_hooks.py`` checks the v1 adapter's hooks one by one.

``register()`` patches SGLang process-wide and cannot be undone, so every case that registers
hooks runs in its own interpreter. The cases are independent and each pays SGLang's import time,
so they are started together (two at a time) the first time any test of this module asks for a
result.
"""

import importlib.metadata
import json
import sys
from pathlib import Path

import pytest
from helpers.plugin_runs import result, run_cases

from sglang_eagle_paged import releases
from sglang_eagle_paged.adapters.v1 import sglang_api as v1_api

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CLI = BIN / "sglang-eagle-paged"

VERSION = importlib.metadata.version("sglang")
GENERATION = releases.support(VERSION, check_hook_points=lambda _v: None).generation


def _required_targets() -> list:
    if GENERATION == "v1":
        return [v1_api.DRAFT_PREPROCESS, v1_api.MOVE_KV_CACHE, v1_api.SPEC_ARGS_CHECK]
    from sglang_eagle_paged.adapters.v2 import hook_points

    return [hook_points.home_for(VERSION).target]


TARGETS = _required_targets()

PROBE = r"""
import json, logging, pkgutil, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
{pre}
{action}
from importlib.metadata import entry_points
import sglang_eagle_paged.plugin as plugin
targets = json.loads(sys.argv[1])
print("RESULT " + json.dumps({{
    "entry_points": sorted(f"{{ep.name}}={{ep.value}}" for ep in entry_points(group="sglang.srt.plugins")),
    # SGLang's HookRegistry wraps with functools.wraps: asked of SGLang's objects, not of our records
    "wrapped": [hasattr(pkgutil.resolve_name(t), "__wrapped__") for t in targets],
    "hooked": plugin.hooked_targets(),
    "mode": plugin.active_mode(),
}}))
"""

LOAD = "from sglang.srt.plugins import load_plugins; load_plugins()"
OLD_SGLANG = "import sglang_eagle_paged.releases as r; r.installed_version = lambda: '0.5.7'"
PATCHED_SGLANG = "import sglang_eagle_paged.releases as r; r.installed_version = lambda: '0.5.10'"
# A release newer than the last tested one whose hook points differ: here, as the v2 check would say.
CHANGED_SGLANG = ("import sglang_eagle_paged.releases as r; r.installed_version = lambda: '0.5.99'; "
                  "import sglang_eagle_paged.adapters.v2.hook_points as h; "
                  "h.check_hook_points = lambda v: 'duplicate_prefix_tail_to_draft_branches changed'")


def _py(pre="", action=LOAD):
    return [sys.executable, "-c", PROBE.format(pre=pre, action=action), json.dumps(TARGETS)]


CASES = {
    "default": (_py(), {}),
    "allow_ours": (_py(), {"SGLANG_PLUGINS": "eagle_paged"}),
    "allow_other": (_py(), {"SGLANG_PLUGINS": "someother"}),
    "off": (_py(), {"SGLANG_EAGLE_PAGED": "off"}),
    "fake": (_py(), {"SGLANG_EAGLE_PAGED": "FAKE"}),
    "invalid": (_py(), {"SGLANG_EAGLE_PAGED": "bogus"}),
    "old_default": (_py(OLD_SGLANG), {}),
    "old_on": (_py(OLD_SGLANG), {"SGLANG_EAGLE_PAGED": "on"}),
    "patched_release": (_py(PATCHED_SGLANG), {}),
    "changed_on": (_py(CHANGED_SGLANG), {"SGLANG_EAGLE_PAGED": "on"}),
    "verify_free_bogus": (_py(), {"SGLANG_EAGLE_PAGED_VERIFY_FREE": "sometimes"}),
    "doctor": ([str(CLI), "doctor"], {}),
    "doctor_off": ([str(CLI), "doctor", "--no-self-test"], {"SGLANG_EAGLE_PAGED": "off"}),
    "demo": ([str(CLI), "demo"], {}),
}


@pytest.fixture(scope="module")
def runs():
    return run_cases(CASES, ROOT)


def all_on(r):
    return r["wrapped"] == [True] * len(TARGETS) and set(TARGETS) <= set(r["hooked"])


def none_hooked(r):
    return r["wrapped"] == [False] * len(TARGETS) and r["hooked"] == []


# --- entry point and SGLang's allow-list ------------------------------------------------

def test_entry_point_and_load_plugins(runs):
    r = result(runs["default"])
    assert "eagle_paged=sglang_eagle_paged.plugin:register" in r["entry_points"]
    assert all_on(r) and r["mode"] == "on", r
    assert f"{GENERATION} adapter" in runs["default"].stderr and f"sglang {VERSION}" in runs["default"].stderr


def test_allow_list_naming_us_loads(runs):
    r = result(runs["allow_ours"])
    assert all_on(r) and r["mode"] == "on", r


def test_allow_list_without_us_skips(runs):
    r = result(runs["allow_other"])
    assert none_hooked(r) and r["mode"] is None, r


# --- modes and settings -----------------------------------------------------------------

def test_mode_off_hooks_nothing(runs):
    r = result(runs["off"])
    assert none_hooked(r) and r["mode"] == "off", r


def test_mode_fake_hooks_the_same_required_targets_as_on(runs):
    """fake skips the copy inside our hooks; the targets are those of on."""
    r = result(runs["fake"])
    assert all_on(r) and r["mode"] == "fake", r


def test_an_unknown_boolean_stops_start_up_naming_the_variable(runs):
    p = runs["verify_free_bogus"]
    assert p.returncode != 0 and "RESULT" not in p.stdout
    assert "SGLANG_EAGLE_PAGED_VERIFY_FREE='sometimes'" in p.stderr and "1/on/true/yes" in p.stderr


def test_invalid_mode_exits_naming_valid_values(runs):
    p = runs["invalid"]
    assert p.returncode != 0 and "RESULT" not in p.stdout
    assert "SystemExit" in p.stderr or "[sglang-eagle-paged]" in p.stderr
    assert "'bogus'" in p.stderr and "on, off, fake" in p.stderr


# --- version guard ----------------------------------------------------------------------

def test_unsupported_version_goes_inactive_with_warning(runs):
    p = runs["old_default"]
    r = result(p)
    assert none_hooked(r) and r["mode"] == "inactive", r
    warnings = [line for line in p.stderr.splitlines() if line.startswith("WARNING:sglang_eagle_paged")]
    assert len([w for w in warnings if "inactive" in w]) == 1 and "0.5.7" in warnings[0], p.stderr[-3000:]


def test_unsupported_version_with_explicit_on_exits(runs):
    p = runs["old_on"]
    assert p.returncode != 0 and "RESULT" not in p.stdout
    assert "SGLANG_EAGLE_PAGED=on but SGLang 0.5.7 is older than 0.5.8" in p.stderr
    assert "SGLANG_EAGLE_PAGED=off" in p.stderr and "Traceback" not in p.stderr


def test_a_patched_release_is_left_to_the_patch(runs):
    r = result(runs["patched_release"])
    assert none_hooked(r) and r["mode"] == "inactive", r
    assert "patch --apply" in runs["patched_release"].stderr


def test_a_newer_release_with_changed_hook_points_is_refused_when_asked_for(runs):
    p = runs["changed_on"]
    assert p.returncode != 0 and "RESULT" not in p.stdout
    assert "0.5.99 is newer than 0.5.23" in p.stderr and "duplicate_prefix_tail_to_draft_branches changed" in p.stderr


# --- console scripts ----------------------------------------------------------------------

def test_doctor(runs):
    p = runs["doctor"]
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "all checks passed" in p.stdout
    for target in TARGETS:
        assert any(line.startswith("[ok  ] hook") and target in line for line in p.stdout.splitlines()), target
    assert "[ok  ] kernel self-test" in p.stdout


def test_doctor_mode_off(runs):
    p = runs["doctor_off"]
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "SGLANG_EAGLE_PAGED=off" in p.stdout and "all checks passed" in p.stdout
    assert "[ok  ] hook" not in p.stdout


def test_cpu_demo(runs):
    p = runs["demo"]
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "OK:" in p.stdout
