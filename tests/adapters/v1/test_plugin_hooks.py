"""The v1 adapter's hooks as SGLang 0.5.12.post1 loads them, one by one: what each mode and
setting hooks, the fa3 metadata and debug options, a target that cannot be resolved, and
``doctor``'s hook lines. The loader itself (entry point, allow-list, modes, version guard,
console scripts) is ``tests/test_plugin.py``, run on the current SGLang.

``register()`` patches SGLang process-wide and cannot be undone, so every case
that registers hooks runs in its own interpreter. The cases are independent and
each pays SGLang's import time (~5 s), so they are started together (two at a time)
the first time any test of this module asks for a result.
"""

import sys
from pathlib import Path

import pytest
from helpers.plugin_runs import result, run_cases

from sglang_eagle_paged import releases

if releases.support(check_hook_points=lambda _v: None).generation != "v1":
    pytest.skip("the v1 adapter's hooks: needs a v1 SGLang (the .venv-v1 environment)", allow_module_level=True)

from sglang_eagle_paged.adapters.v1 import sglang_api as compat  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
CLI = BIN / "sglang-eagle-paged"

PROBE = r"""
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
{pre}
{action}
from importlib.metadata import entry_points
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.standalone_worker import StandaloneWorker
import sglang.srt.layers.attention.flashattention_backend as fa3
from sglang.srt.plugins.hook_registry import HookRegistry
import sglang_eagle_paged.plugin as plugin
from sglang_eagle_paged.adapters.common import kv_copy
print("RESULT " + json.dumps({{
    "entry_points": sorted(f"{{ep.name}}={{ep.value}}" for ep in entry_points(group="sglang.srt.plugins")),
    "draft": hasattr(EAGLEWorker._draft_preprocess_decode, "__wrapped__"),
    "move": hasattr(MHATokenToKVPool.move_kv_cache, "__wrapped__"),
    "spec": hasattr(ServerArgs._handle_speculative_decoding, "__wrapped__"),
    "init": hasattr(EAGLEWorker.__init__, "__wrapped__"),
    "standalone_init": hasattr(StandaloneWorker.__init__, "__wrapped__"),
    # torch.compile's wrapper has __wrapped__ too: ask the registry what it patched
    "fa3_expand": getattr(fa3, "__name__") + ".draft_decode_set_expand_metadata" in HookRegistry._patched,
    "fa3_fused": getattr(fa3, "__name__") + ".FlashAttentionMultiStepBackend.init_forward_metadata_replay_cuda_graph"
                 in HookRegistry._patched,
    "verify_bookkeeping": "sglang.srt.speculative.spec_utils.get_src_tgt_cache_loc" in HookRegistry._patched
                          and __import__("sglang.srt.speculative.eagle_info", fromlist=["x"]).get_src_tgt_cache_loc
                          is __import__("sglang.srt.speculative.spec_utils", fromlist=["x"]).get_src_tgt_cache_loc,
    # None where eagle_info's verify reaches the page-list split and free (verify_free.py)
    "verify_free": __import__("sglang_eagle_paged.adapters.v1.verify", fromlist=["x"]).hooks_in_place(),
    "mode": plugin.active_mode(),
    "kv_hook_installed": kv_copy.hook_installed["move_kv_cache"],
    "prefix_check": [hasattr(EAGLEWorker.draft, "__wrapped__"), hasattr(EAGLEWorker.verify, "__wrapped__")],
}}))
"""

LOAD = "from sglang.srt.plugins import load_plugins; load_plugins()"
BAD_TARGET = "import sglang_eagle_paged.adapters.v1.sglang_api as c; c.DRAFT_PREPROCESS = c.EAGLE_WORKER + '._no_such_method'"


def _py(pre="", action=LOAD):
    return [sys.executable, "-c", PROBE.format(pre=pre, action=action)]


CASES = {
    "default": (_py(), {}),
    "off": (_py(), {"SGLANG_EAGLE_PAGED": "off"}),
    "fake": (_py(), {"SGLANG_EAGLE_PAGED": "FAKE"}),
    "bad_target": (_py(BAD_TARGET), {}),
    "bad_target_on": (_py(BAD_TARGET), {"SGLANG_EAGLE_PAGED": "on"}),
    "fa3_expand": (_py(), {"SGLANG_EAGLE_PAGED_FA3_EXPAND": "1"}),
    "fa3_sglang": (_py(), {"SGLANG_EAGLE_PAGED_FA3_EXPAND": "0"}),
    "fa3_expand_bogus": (_py(), {"SGLANG_EAGLE_PAGED_FA3_EXPAND": "maybe"}),
    "check_prefix": (_py(), {"SGLANG_EAGLE_PAGED_CHECK_PREFIX": "1"}),
    "verify_free_off": (_py(), {"SGLANG_EAGLE_PAGED_VERIFY_FREE": "0"}),
    "doctor": ([str(CLI), "doctor"], {}),
}


@pytest.fixture(scope="module")
def runs():
    return run_cases(CASES, ROOT, timeout=240)


ALL_ON = {"draft": True, "move": True, "spec": True, "init": True, "standalone_init": True, "mode": "on",
          "kv_hook_installed": True, "verify_bookkeeping": True, "verify_free": None}
NONE = {"draft": False, "move": False, "spec": False, "init": False, "standalone_init": False,
        "kv_hook_installed": False, "verify_bookkeeping": False,
        "verify_free": "get_target_cache_loc is not replaced"}


def subset(r, want):
    return {k: r[k] for k in want}


# --- what each mode hooks -------------------------------------------------------------------

def test_every_v1_hook_takes_when_sglang_loads_the_plugin(runs):
    r = result(runs["default"])
    assert "eagle_paged=sglang_eagle_paged.plugin:register" in r["entry_points"]
    assert subset(r, ALL_ON) == ALL_ON


def test_mode_off_hooks_nothing(runs):
    r = result(runs["off"])
    assert subset(r, NONE) == NONE and r["mode"] == "off"


def test_mode_fake_hooks_the_same_targets_as_on(runs):
    """fake skips the draft copy inside the worker; the post-verify move is ours in both modes."""
    r = result(runs["fake"])
    want = {"draft": True, "spec": True, "move": True, "mode": "fake", "kv_hook_installed": True,
            "verify_bookkeeping": True}
    assert subset(r, want) == want
    # drafts are wrong by design: start-up says so at WARNING level
    assert "SGLANG_EAGLE_PAGED=fake: draft branches read KV that was never copied" in runs["fake"].stderr
    assert "no effect on SGLang" not in runs["fa3_expand"].stderr  # v1 reads FA3_EXPAND


def test_fa3_metadata_replacement_is_fused_by_default_and_can_be_turned_off(runs):
    r = result(runs["default"])
    assert r["fa3_expand"] is True and r["fa3_fused"] is True
    assert "fa3 metadata=fused" in runs["default"].stderr
    r = result(runs["fa3_sglang"])
    assert r["fa3_expand"] is False and r["fa3_fused"] is False and subset(r, ALL_ON) == ALL_ON
    r = result(runs["fa3_expand"])
    assert r["fa3_expand"] is True and subset(r, ALL_ON) == ALL_ON
    assert "fa3 metadata=expand" in runs["fa3_expand"].stderr and r["fa3_fused"] is False
    assert "fa3 metadata=SGLang's" in runs["fa3_sglang"].stderr
    p = runs["fa3_expand_bogus"]
    assert p.returncode != 0 and "SGLANG_EAGLE_PAGED_FA3_EXPAND" in p.stderr


def test_prefix_check_hooks_only_when_asked(runs):
    """The debug check wraps EAGLEWorker.draft and .verify with SGLANG_EAGLE_PAGED_CHECK_PREFIX=1 only."""
    for name in ("default", "fake", "off"):
        assert result(runs[name])["prefix_check"] == [False, False], name
    r = result(runs["check_prefix"])
    assert r["prefix_check"] == [True, True] and subset(r, ALL_ON) == ALL_ON
    assert "prefix check=on" in runs["check_prefix"].stderr and "prefix check=off" in runs["default"].stderr


def test_verify_page_list_free_hooks_unless_turned_off(runs):
    r = result(runs["verify_free_off"])
    assert r["verify_free"] == "get_target_cache_loc is not replaced"
    assert subset(r, {**ALL_ON, "verify_free": None}) == {**ALL_ON, "verify_free": r["verify_free"]}


# --- a hook that cannot be applied ---------------------------------------------------------

def test_unresolvable_target_leaves_the_plugin_inert_when_the_mode_is_unset(runs):
    p = runs["bad_target"]
    r = result(p)
    hooked = {k: v for k, v in NONE.items() if k != "verify_free"}
    assert subset(r, hooked) == hooked and r["mode"] == "inactive"  # nothing registered: nothing for SGLang to apply
    assert r["verify_free"] is not None  # the verify does not reach ours (building the hooks recorded SGLang's function)
    ours = [line for line in p.stderr.splitlines() if "[sglang-eagle-paged]" in line]
    assert len(ours) == 1 and ours[0].startswith("WARNING") and "_no_such_method" in ours[0], ours


def test_unresolvable_target_exits_when_on_was_asked_for(runs):
    p = runs["bad_target_on"]
    assert p.returncode != 0 and "RESULT" not in p.stdout
    assert "cannot find sglang.srt.speculative.eagle_worker.EAGLEWorker._no_such_method" in p.stderr
    assert "SGLANG_EAGLE_PAGED=off" in p.stderr


# --- console scripts ----------------------------------------------------------------------

def test_doctor(runs):
    p = runs["doctor"]
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "all checks passed" in p.stdout
    for target in (compat.DRAFT_PREPROCESS, "sglang.srt.mem_cache.memory_pool.MHATokenToKVPool.move_kv_cache",
                   compat.SPEC_ARGS_CHECK):
        assert any(line.startswith("[ok  ] hook") and target in line for line in p.stdout.splitlines()), target
    assert "[ok  ] kernel self-test" in p.stdout


