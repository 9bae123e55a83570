"""The lab's one entry: ``python -m bench NAME ...`` from the checkout's root runs bench/NAME.py."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lab(*args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_lab_lists_its_tools_and_dispatches_to_one():
    listed = _lab()
    assert listed.returncode == 0 and "figures" in listed.stdout and "v2_run" in listed.stdout
    assert "ab_probes" not in listed.stdout  # a helper, not a tool
    from bench import figures

    ran = _lab("figures", "--md")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == figures.table() + "\n"
    unknown = _lab("nothing_here")
    assert unknown.returncode == 2 and "one of:" in unknown.stdout
