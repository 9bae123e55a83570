"""On SGLang 0.5.23 (the v2 CPU environment): ``doctor`` reports v2 active with its hooks and a passing
self-test, and the demo drives SGLang's own prepare_for_draft with our duplication hooked in."""

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.metadata.version("sglang") != "0.5.23":
    pytest.skip("needs SGLang 0.5.23 (scripts/setup_cpu.sh builds it)", allow_module_level=True)

CLI = Path(sys.executable).parent / "sglang-eagle-paged"
ROOT = Path(__file__).resolve().parents[2]


def _run(*args, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE_PAGED")}
    full.update(TRITON_INTERPRET="1", **env)
    return subprocess.run([str(CLI), *args], env=full, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_doctor_reports_v2_active_and_its_self_test_passes():
    p = _run("doctor")
    out = p.stdout
    assert p.returncode == 0, out + p.stderr[-3000:]
    assert "SGLang 0.5.23: v2 worker, through the plugin entry point" in out
    assert any(line.startswith("[ok  ] hook") and "eagle_worker_common.duplicate_prefix_tail_to_draft_branches" in line
               for line in out.splitlines()), out
    # per backend class of this release, the decision a server's hook makes (the same function, run here)
    import pkgutil

    from sglang_eagle_paged.adapters.v2 import backends

    for path, (name, _reads, _why) in backends.READERS.items():
        cls = pkgutil.resolve_name(path)
        copy, reason = backends.copy_needed(cls.__new__(cls))
        line = next(x for x in out.splitlines() if f"copy ({name})" in x)
        assert line.endswith(reason) and ("one launch" in line if copy else "skipped: " in line), line
    assert "skipped" in out and "one launch" in out
    assert "[ok  ] kernel self-test" in out and "the v2 duplication against SGLang's" in out
    assert "all checks passed" in out


def test_doctor_explicit_on_where_unsupported_is_one_clear_failure():
    p = _run("doctor", "--no-self-test", SGLANG_EAGLE_PAGED="bogus")
    assert p.returncode != 0 and "SGLANG_EAGLE_PAGED='bogus' is not one of: on, off, fake" in p.stdout


def test_demo_on_v2():
    p = _run("demo")
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "SGLang's v2 prepare_for_draft" in p.stdout
    assert "matches the worked example (last value 27, the text's 24 is a typo): True" in p.stdout
    assert "OK: every branch reads the prefix's KV; index-only (fake) does not." in p.stdout
