"""install_legacy(): what a patched pre-plugin release runs (simulated on 0.5.12.post1's classes)."""

import os
import subprocess
import sys

import pytest

from sglang_eagle_paged import releases

SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
from sglang_eagle_paged import releases
from sglang_eagle_paged.adapters.common import kv_copy
from sglang_eagle_paged.adapters.v1 import legacy
releases.installed_version = lambda: sys.argv[1]
first = legacy.install_legacy()
second = legacy.install_legacy()
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
print("RESULT", first, second, hasattr(EAGLEWorker._draft_preprocess_decode, "__wrapped__"),
      hasattr(EAGLEWorker.__init__, "__wrapped__"), hasattr(MHATokenToKVPool.move_kv_cache, "__wrapped__"),
      kv_copy.hook_installed["move_kv_cache"])
"""


def _run(version, mode=None):
    env = dict(os.environ)
    env.pop("SGLANG_EAGLE_PAGED", None)
    if mode:
        env["SGLANG_EAGLE_PAGED"] = mode
    out = subprocess.run([sys.executable, "-c", SCRIPT, version], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT"))
    return line.split()[1:], out.stdout


@pytest.mark.parametrize("version", ["0.5.8", "0.5.10.post1"])
def test_patched_release_with_the_same_internals_gets_every_hook_once(version):
    result, _ = _run(version)
    assert result == ["True", "True", "True", "True", "True", "True"]


def test_older_release_declines_with_a_warning():
    result, log = _run("0.5.7")
    assert result == ["False", "False", "False", "False", "False", "False"]
    assert "older than 0.5.8" in log


def test_fake_mode_hooks_the_same_targets():
    """fake differs from on inside the worker (no draft copy), not in what is hooked."""
    result, _ = _run("0.5.9", mode="fake")
    assert result == ["True", "True", "True", "True", "True", "True"]


@pytest.mark.parametrize("version,ok", [("0.5.2", False), ("0.5.7", False), ("0.5.8", True),
                                        ("0.5.10.post1", True), ("0.5.11", False), ("0.5.12.post1", False)])
def test_legacy_range(version, ok):
    assert (releases.patched_release(version) is None) is ok
