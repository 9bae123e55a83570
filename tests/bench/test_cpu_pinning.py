"""CPU sets of an A/B measurement: disjoint, equal per server, and really applied to a server's processes."""

import os
import sys

import pytest

from bench import cpu_pinning
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


# A server's session in miniature: a leader (SGLang's HTTP process) and children titled as SGLang
# titles its schedulers (one per TP rank), each process with a second thread, so per-thread masks
# can be read back.
_SCHEDULER = ("import threading, time; threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); "
              "print('ready', flush=True); time.sleep(60)")


def _leader(schedulers: int) -> str:
    return ("import subprocess, sys, threading, time; "
            "threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); "
            f"cs = [subprocess.Popen([f'sglang::scheduler_TP{{i}}', '-c', {_SCHEDULER!r}], executable=sys.executable, "
            f"stdout=subprocess.PIPE, text=True) for i in range({schedulers})]; "
            "[c.stdout.readline() for c in cs]; print(' '.join(str(c.pid) for c in cs), flush=True); time.sleep(60)")


def _masks(pid):
    return {int(t): sorted(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}


def _session(schedulers: int):
    import subprocess

    leader = subprocess.Popen([sys.executable, "-c", _leader(schedulers)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    return leader, [int(p) for p in leader.stdout.readline().split()]


linux_2cpus = pytest.mark.skipif(not os.path.isdir("/proc") or len(os.sched_getaffinity(0)) < 2,
                                 reason="needs Linux and 2 CPUs")


@linux_2cpus
def test_repin_moves_every_thread_of_the_session_and_can_give_the_scheduler_a_cpu_alone():
    first, second = sorted(os.sched_getaffinity(0))[:2]
    leader, (scheduler,) = _session(1)
    try:
        assert cpu_pinning.session_pids(leader.pid) == sorted([leader.pid, scheduler])
        moved = cpu_pinning.repin_server(leader.pid, [first, second], isolate_scheduler=True)
        assert moved[scheduler].startswith("sglang::scheduler") and set(moved) == {leader.pid, scheduler}
        sched = _masks(scheduler)
        assert sched.pop(scheduler) == [first]  # the event loop, alone
        assert list(sched.values()) == [[second]]  # its other thread
        assert set(map(tuple, _masks(leader.pid).values())) == {(second,)}
        # without isolation every thread gets the whole set; a set of one cannot isolate anything
        cpu_pinning.repin_server(leader.pid, [first, second])
        assert all(m == [first, second] for p in (leader.pid, scheduler) for m in _masks(p).values())
        cpu_pinning.repin_server(leader.pid, [second], isolate_scheduler=True)
        assert all(m == [second] for p in (leader.pid, scheduler) for m in _masks(p).values())
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()


@linux_2cpus
def test_each_tp_rank_scheduler_gets_its_own_cpu_only_if_one_is_left_for_the_rest():
    mine = sorted(os.sched_getaffinity(0))
    leader, schedulers = _session(2)
    try:
        cpu_pinning.repin_server(leader.pid, mine[:2], isolate_scheduler=True)  # 2 CPUs, 2 schedulers: none isolated
        assert all(m == mine[:2] for p in (leader.pid, *schedulers) for m in _masks(p).values())
        if len(mine) >= 3:
            cpu_pinning.repin_server(leader.pid, mine[:3], isolate_scheduler=True)
            assert [_masks(p)[p] for p in schedulers] == [[mine[0]], [mine[1]]]
            assert set(map(tuple, _masks(leader.pid).values())) == {(mine[2],)}
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()


def test_repin_of_a_session_that_is_gone_moves_nothing():
    assert cpu_pinning.repin_server(2 ** 22 + 12345, [0]) == {}
