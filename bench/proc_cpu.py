"""CPU seconds a server's processes and the whole host spend over one benchmark pass (Linux ``/proc``).

When passes of one unchanged server scatter, these say whether the scheduler held its CPU the
whole pass or waited off it, and whether other processes of the host were busy meanwhile. Busy
includes CUDA's spin-wait on the GPU, so a busy scheduler may be paced by either; the GPU's
utilisation over the pass (:mod:`.gpu_sampler`) tells which. Off Linux every reading is empty and
nothing is recorded.
"""

from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PREFIX = "sglang::"  # SGLang names its subprocesses so (setproctitle): sglang::scheduler_TP0, ...


def _role(pid: str) -> str:
    """``scheduler``, ``detokenizer``, ... for SGLang's named subprocesses; ``main`` for the rest."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            first = f.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return "main"
    name = first[len(_PREFIX):].split("_", 1)[0].strip() if first.startswith(_PREFIX) else ""
    return name or "main"


def group_seconds(pgid: int | None) -> dict[str, float]:
    """User + system CPU seconds so far of every live process in process group ``pgid``, summed by
    role (a server runs in its own session: :class:`.server.ServerProcess`)."""
    out: dict[str, float] = {}
    if not pgid or not os.path.isdir("/proc"):
        return out
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # The name field may hold spaces and parentheses: the fields after its last ")" are
        # state, ppid, pgrp, ... with utime and stime 12th and 13th.
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) != pgid:
            continue
        role = _role(pid)
        out[role] = out.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / _TICK
    return out


def host_seconds() -> dict[str, float]:
    """The host's busy and stolen CPU seconds so far, all CPUs together (``/proc/stat``)."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return {}
    # user nice system idle iowait irq softirq steal [guest guest_nice: inside user and nice]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    steal = values[7] if len(values) > 7 else 0
    return {"busy": (sum(values[:8]) - idle - steal) / _TICK, "steal": steal / _TICK}


def snapshot(pgid: int | None) -> dict:
    return {"server": group_seconds(pgid), "host": host_seconds()}


def difference(before: dict, after: dict) -> dict:
    """Seconds spent between two :func:`snapshot` calls: ``server`` by role (a role that appeared
    or vanished meanwhile is left out) and ``host`` busy and steal."""
    def delta(a: dict, b: dict) -> dict:
        return {k: round(b[k] - a[k], 3) for k in a if k in b}

    return {"server": delta(before.get("server", {}), after.get("server", {})),
            "host": delta(before.get("host", {}), after.get("host", {}))}
