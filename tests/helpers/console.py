"""The installed console script, called as a user calls it: its own process, the checkout's code
first on the path (an editable install of another checkout must not stand in), none of the plugin's
variables inherited unless given."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "sglang-eagle-paged"


def run_cli(*args, timeout: float = 300, cwd=None, **env) -> subprocess.CompletedProcess:
    assert CLI.is_file(), f"{CLI} is not installed (scripts/setup_cpu.sh installs it)"
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE_PAGED")}
    full.update(PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", **env)
    return subprocess.run([str(CLI), *map(str, args)], env=full, cwd=cwd or ROOT, capture_output=True, text=True,
                          timeout=timeout)


def one_line(p: subprocess.CompletedProcess) -> str:
    """The single line a refusal printed (stderr), checked to be one and no traceback."""
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]
