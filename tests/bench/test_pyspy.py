"""py-spy's raw output reduced to top frames, and the sampling step of bench.v2_profile: the scheduler found
among a server's processes by its title, py-spy's command line (a stand-in binary that writes what py-spy
0.4.1 wrote here for a real process: ``frame (file:line);... COUNT``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from argparse import Namespace
from types import SimpleNamespace

import pytest

from bench import pyspy, v2_profile

RAW = """\
event_loop_overlap (sglang/srt/managers/scheduler.py:1716);run_batch (sglang/srt/managers/scheduler.py:3528);verify (sglang/srt/speculative/eagle_worker_v2.py:1495) 6
event_loop_overlap (sglang/srt/managers/scheduler.py:1716);run_batch (sglang/srt/managers/scheduler.py:3528) 2
event_loop_overlap (sglang/srt/managers/scheduler.py:1716);process_batch_result (sglang/srt/managers/scheduler.py:20) 2
"""


def test_top_frames_count_leaves_and_stacks():
    s = pyspy.top_frames(RAW)
    assert s["samples"] == 10
    assert s["self"][0] == {"name": "verify (eagle_worker_v2.py:1495)", "samples": 6, "share": 0.6}
    total = {r["name"]: r["samples"] for r in s["total"]}
    assert total["event_loop_overlap (scheduler.py:1716)"] == 10 and total["run_batch (scheduler.py:3528)"] == 8
    assert "| verify (eagle_worker_v2.py:1495) | 6 | 60.0% |" in pyspy.markdown(s, "x")


@pytest.fixture
def server_with_a_scheduler(tmp_path):
    """A 'server' process whose child carries the title (in its command line, as setproctitle shows it)."""
    title = f"h36-test-scheduler-{os.getpid()}"
    code = ("import subprocess, sys, time; "
            f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', {title!r}]); "
            "time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 30
    while pyspy.child_with_title(parent.pid, title) is None and time.time() < deadline:
        time.sleep(0.1)
    yield SimpleNamespace(proc=parent), title
    import psutil

    for c in psutil.Process(parent.pid).children(recursive=True):
        c.kill()
    parent.kill()
    parent.wait()


def test_the_scheduler_is_sampled_and_reduced(server_with_a_scheduler, tmp_path):
    server, title = server_with_a_scheduler
    scheduler = pyspy.child_with_title(server.proc.pid, title)
    assert scheduler is not None and scheduler != server.proc.pid
    fake = tmp_path / "py-spy"
    # writes RAW to the file after -o, and its arguments beside it
    fake.write_text("#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args\"\n"
                    "while [ \"$1\" != -o ]; do shift; done\ncat > \"$2\" <<'EOF'\n" + RAW + "EOF\n")
    fake.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    rec = v2_profile.sample(server, "on_p64", Namespace(py_spy=str(fake), py_spy_s=3), out, title=title)
    assert rec["rc"] == 0 and rec["samples"] == 10
    assert (tmp_path / "args").read_text().split() == [
        "record", "--pid", str(scheduler), "--duration", "3", "--rate", "100", "--format", "raw", "--nonblocking",
        "-o", str(out / "on_p64-pyspy.txt")]
    assert "verify (eagle_worker_v2.py:1495)" in (out / "on_p64-pyspy.md").read_text()
    assert "on_p64, py-spy" in v2_profile.report(out, ["on_p64"])
    assert v2_profile.sample(SimpleNamespace(proc=None), "x", Namespace(py_spy=str(fake), py_spy_s=3), out) == {
        "error": "no scheduler process found"}
