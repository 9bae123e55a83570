"""Start-up on SGLang 0.5.23 as installed: the hook points of a release inside the tested range are
checked too, and with SGLANG_EAGLE_PAGED unset anything unexpected leaves the plugin inert with one
line; only an explicit mode stops start-up.

Each case registers the plugin in its own interpreter (hooks patch SGLang process-wide). What is
"unexpected" is made in our own module (the known fingerprints, the function name we look for),
standing for a build whose function changed or whose module home lacks it; SGLang is as installed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import v2_support as support

support.require_sglang()

REPO = Path(__file__).resolve().parents[3]

PROBE = r"""
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
import sglang_eagle_paged.adapters.v2.hook_points as hp
{pre}
from sglang_eagle_paged import plugin
plugin.register()
print("RESULT " + json.dumps({{"mode": plugin.active_mode(), "hooked": plugin.hooked_targets()}}))
"""

NEW_CODE = "hp.KNOWN_FINGERPRINTS = frozenset({'0' * 16})"  # the installed function's code is not the known one
NO_FUNCTION = "hp.FUNCTION = 'duplicate_prefix_tail_to_draft_branches_gone'"  # the home lacks the function


def _run(pre, mode=None):
    env = {k: v for k, v in os.environ.items() if k not in ("SGLANG_EAGLE_PAGED", "SGLANG_PLUGINS")}
    env["TRITON_INTERPRET"] = "1"
    if mode:
        env["SGLANG_EAGLE_PAGED"] = mode
    return subprocess.run([sys.executable, "-c", PROBE.format(pre=pre)], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("pre,says", [(NEW_CODE, "new code"), (NO_FUNCTION, "does not resolve")],
                         ids=["changed-function", "missing-function"])
def test_unexpected_hook_points_leave_the_plugin_inert_when_the_mode_is_unset(pre, says):
    p = _run(pre)
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    assert p.returncode == 0 and lines, p.stderr[-3000:]
    assert json.loads(lines[-1][len("RESULT "):]) == {"mode": "inactive", "hooked": []}
    ours = [x for x in p.stderr.splitlines() if "[sglang-eagle-paged]" in x]
    assert len(ours) == 1 and ours[0].startswith("WARNING") and "0.5.23" in ours[0] and says in ours[0], ours


def test_unexpected_hook_points_stop_start_up_when_on_was_asked_for():
    p = _run(NEW_CODE, mode="on")
    assert p.returncode != 0 and "RESULT" not in p.stdout
    assert "SGLANG_EAGLE_PAGED=on but SGLang 0.5.23" in p.stderr and "new code" in p.stderr
