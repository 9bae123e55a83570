"""bench.proc_cpu against real processes: a server-like process group whose child carries
SGLang's process-title form, and a busy process outside the group."""

import os
import signal
import subprocess
import sys
import time

import pytest

from bench import proc_cpu

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads Linux /proc")

BURN = ("import time\ntime.sleep({idle})\nt = time.process_time()\n"
        "while time.process_time() - t < {s}: pass\ntime.sleep(60)\n")


def _group(burn_child_s: float):
    # A session leader (like ServerProcess's server) whose child names itself as SGLang's
    # scheduler does (argv[0] "sglang::scheduler_TP0"), burns CPU, then idles.
    script = f'exec -a sglang::scheduler_TP0 {sys.executable} -c "$0"'
    return subprocess.Popen(["bash", "-c", f"({script}) & wait", BURN.format(idle=1.0, s=burn_child_s)],
                            start_new_session=True)


def _wait_for(pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_a_groups_seconds_are_summed_by_sglangs_role_and_other_processes_are_left_out():
    outsider = subprocess.Popen([sys.executable, "-c", BURN.format(idle=0, s=0.6)])
    group = _group(0.4)
    try:
        # read once the child runs under its title (before it burns): a role that appears between
        # two readings is left out of their difference
        assert _wait_for(lambda: "scheduler" in proc_cpu.group_seconds(group.pid))
        before = proc_cpu.snapshot(group.pid)
        assert _wait_for(lambda: proc_cpu.group_seconds(group.pid).get("scheduler", 0) >= 0.35)
        spent = proc_cpu.difference(before, proc_cpu.snapshot(group.pid))
        # the burning child, by its title's role; the bash leader as "main", nearly idle; the
        # outsider (0.6 s) is in no sum
        assert 0.2 <= spent["server"]["scheduler"] <= 0.6
        assert spent["server"].get("main", 0) < 0.2
        assert set(spent["server"]) <= {"scheduler", "main"}
        assert spent["host"]["busy"] >= spent["server"]["scheduler"] - 0.05 and spent["host"]["steal"] >= 0
    finally:
        os.killpg(group.pid, signal.SIGKILL)
        outsider.kill()
        group.wait()
        outsider.wait()


def test_no_group_and_a_gone_group_read_empty():
    assert proc_cpu.group_seconds(None) == {}
    p = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    p.wait()
    assert proc_cpu.group_seconds(p.pid) == {}
    # a role that appears between two readings is not charged its whole life
    assert proc_cpu.difference({"server": {}, "host": {"busy": 1.0, "steal": 0.0}},
                               {"server": {"scheduler": 5.0}, "host": {"busy": 1.5, "steal": 0.0}}) == {
        "server": {}, "host": {"busy": 0.5, "steal": 0.0}}
