"""CPU test of scripts/device/setup.sh: the offline bundle installs once per machine and part.

On a warm device machine the ignored files of earlier calls stay in the checkout, so a bundle part
carried by call 1 is still there in call 3; run 12 reinstalled it in every call (41-52 s each).
Here a stand-in ``install.sh`` counts its runs.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "device" / "setup.sh"

FAKE_INSTALL = """#!/usr/bin/env bash
set -e
SITE=${2:?}
mkdir -p "$SITE/.devbundle"
echo run >> "$SITE/../install_runs"
echo "export FAKE_BUNDLE=1" > "$SITE/.devbundle/env.sh"
"""


@pytest.fixture
def checkout(tmp_path):
    if not shutil.which("bash") or not shutil.which("stat"):
        pytest.skip("needs bash and coreutils")
    (tmp_path / ".devbundle").mkdir()
    (tmp_path / ".devbundle" / "install.sh").write_text(FAKE_INSTALL)
    (tmp_path / ".devbundle" / "core.tar").write_bytes(b"core")
    return tmp_path


def _setup(checkout) -> int:
    env = {**os.environ, "DEVBUNDLE_SITE": str(checkout / "site")}
    done = subprocess.run(["bash", str(SETUP), str(checkout / "log.txt")], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = checkout / "install_runs"
    return len(runs.read_text().split()) if runs.exists() else 0


def test_a_part_kept_from_an_earlier_call_is_not_installed_again(checkout):
    assert _setup(checkout) == 1       # call 1: core carried
    assert _setup(checkout) == 1       # call 2: core.tar still there from call 1
    (checkout / ".devbundle" / "fa3.part00").write_bytes(b"fa3")
    assert _setup(checkout) == 2       # FA3 arrives: install (core and FA3)
    assert _setup(checkout) == 2
    assert "bundle already installed" in (checkout / "log.txt").read_text()


def test_a_changed_part_or_a_fresh_machine_installs_again(checkout):
    assert _setup(checkout) == 1
    (checkout / ".devbundle" / "core.tar").write_bytes(b"another core")  # carried anew: size differs
    assert _setup(checkout) == 2
    shutil.rmtree(checkout / "site")  # a fresh machine: nothing installed, the parts kept or carried
    assert _setup(checkout) == 3
    assert (checkout / "site" / ".devbundle" / "env.sh").exists()
