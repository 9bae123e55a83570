"""Disjoint CPU sets for the servers of an A/B measurement and for its benchmark client.

Run 12's A/B passes of one unchanged configuration on one H200 host (16 CPUs) spread by up to
35% at parallel 1 and 64% at parallel 16 (same prompts, same greedy outputs, same acceptance),
so a 3% difference needed far more rounds than a device call holds. These servers are
host-bound: scheduler, tokenizer and detokenizer processes of two servers and the client's
event loop all share the host, and the kernel is free to stack them on one CPU or move them
mid-pass. Pinning each server (all its processes: children inherit the mask) and the client
to CPUs of their own takes that placement out of the comparison; both sides get sets of the
same size.

Two refinements, for a server that is already up (:func:`repin_server`): its CPU set can be
exchanged with the other side's between rounds (``bench.ab --swap-cpus``), so that neither side
keeps the CPUs an idle kernel thread or an interrupt happens to favour; and the scheduler's event
loop, the thread a host-bound server waits on, can have a CPU to itself (``--isolate-scheduler``)
instead of sharing one with the HTTP server, the detokenizer or torch's worker threads whenever
the kernel stacks them.
"""

import os
from typing import Sequence


def plan(available: Sequence[int], servers: int, client: int | None = None) -> dict:
    """``{"client": [...], "servers": [[...], ...]}``: ``client`` CPUs (default: a quarter, at least
    two) for the client, the rest dealt into ``servers`` equal, contiguous sets (a remainder is left
    idle rather than giving one side more)."""
    cpus = sorted(available)
    client = max(2, len(cpus) // 4) if client is None else client
    per_server = (len(cpus) - client) // max(1, servers)
    if servers < 1 or per_server < 1:
        raise ValueError(f"{len(cpus)} CPUs cannot give {servers} servers a CPU each besides the client's {client}")
    return {"client": cpus[len(cpus) - client:],
            "servers": [cpus[i * per_server:(i + 1) * per_server] for i in range(servers)]}


def pin(pid: int, cpus: Sequence[int]) -> None:
    """Restrict process ``pid`` (0: this one) to ``cpus``; processes it starts later inherit the mask."""
    os.sched_setaffinity(pid, set(cpus))


def available() -> list:
    return sorted(os.sched_getaffinity(0))


# SGLang names its scheduler process so (``setproctitle`` in ``scheduler.py``), one per TP rank.
SCHEDULER_TITLE = "sglang::scheduler"


def _session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the command name (field 2) may hold spaces and parentheses: fields count from the last ")"
            return int(f.read().rsplit(")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def session_pids(sid: int) -> list:
    """Every live process of session ``sid``: a server started with ``start_new_session`` is the
    leader of its own, and its scheduler and detokenizer processes stay in it."""
    return sorted(int(d) for d in os.listdir("/proc") if d.isdigit() and _session(int(d)) == sid)


def process_title(pid: int) -> str:
    """The first word of the command line: SGLang's processes set it to their role (``setproctitle``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""


def _pin_threads(pid: int, cpus) -> None:
    # A process's mask is per thread: sched_setaffinity(pid) moves its main thread alone.
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return  # gone meanwhile
    for tid in tids:
        try:
            os.sched_setaffinity(tid, set(cpus))
        except OSError:  # a thread that ended meanwhile
            pass


def repin_server(pid: int, cpus: Sequence[int], isolate_scheduler: bool = False) -> dict:
    """Move every thread of server ``pid``'s session to ``cpus``. With ``isolate_scheduler`` each
    scheduler's main thread (one per TP rank) gets a CPU of ``cpus`` alone and every other thread
    the CPUs left, when at least one is left. Returns ``{pid: title}`` of the processes moved."""
    cpus = sorted(cpus)
    titles = {p: process_title(p) for p in session_pids(pid)}
    schedulers = sorted(p for p, t in titles.items() if t.startswith(SCHEDULER_TITLE)) if isolate_scheduler else []
    if len(schedulers) >= len(cpus):
        schedulers = []  # no CPU would be left for the rest: isolation would starve it
    rest = cpus[len(schedulers):]
    for p in titles:
        _pin_threads(p, rest)
    for p, cpu in zip(schedulers, cpus):
        try:
            os.sched_setaffinity(p, {cpu})  # the main thread: the event loop
        except OSError:  # ended meanwhile
            pass
    return titles
