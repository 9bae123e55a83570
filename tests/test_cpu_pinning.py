"""CPU sets of an A/B measurement: disjoint, equal per server, and really applied to a server's processes."""

import os
import sys

import pytest

from sglang_eagle_paged.bench import cpu_pinning
from sglang_eagle_paged.bench.server import ServerProcess


def test_plan_gives_the_client_a_quarter_and_each_server_an_equal_disjoint_set():
    p = cpu_pinning.plan(range(16), 2)
    assert p["client"] == [12, 13, 14, 15]
    assert p["servers"] == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]
    p = cpu_pinning.plan(range(16), 4)  # two pairs side by side
    assert [len(s) for s in p["servers"]] == [3] * 4
    every = sorted(c for s in p["servers"] for c in s) + p["client"]
    assert len(every) == len(set(every))


def test_plan_leaves_a_remainder_idle_rather_than_favour_one_side():
    p = cpu_pinning.plan([0, 2, 4, 6, 8, 10, 12, 14, 16], 2)  # 9 CPUs, not contiguous
    assert p == {"client": [14, 16], "servers": [[0, 2, 4], [6, 8, 10]]}  # CPU 12 stays idle
    assert cpu_pinning.plan(range(9), 2, client=2)["servers"] == [[0, 1, 2], [3, 4, 5]]


def test_plan_refuses_a_host_too_small_to_split():
    with pytest.raises(ValueError, match="cannot give 2 servers"):
        cpu_pinning.plan(range(3), 2)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this OS")
def test_a_pinned_server_and_the_children_it_starts_later_run_on_its_cpus(tmp_path):
    mine = sorted(os.sched_getaffinity(0))
    # The child waits before starting a grandchild, as a server imports before it forks.
    script = ("import os, subprocess, sys, time; time.sleep(0.5); "
              "c = subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'], "
              "capture_output=True, text=True); print(sorted(os.sched_getaffinity(0)), c.stdout.strip(), flush=True)")
    srv = ServerProcess([], command=[sys.executable, "-c", script], log_path=tmp_path / "s.log", cpus=mine[:1])
    srv.start()
    try:
        srv.proc.wait(timeout=60)
    finally:
        srv.stop()
    out = (tmp_path / "s.log").read_text().splitlines()[-1]
    assert out == f"{mine[:1]} {mine[:1]}"
