"""Disjoint CPU sets for the servers of an A/B measurement and for its benchmark client.

Run 12's A/B passes of one unchanged configuration on one H200 host (16 CPUs) spread by up to
35% at parallel 1 and 64% at parallel 16 (same prompts, same greedy outputs, same acceptance),
so a 3% difference needed far more rounds than a device call holds. These servers are
host-bound: scheduler, tokenizer and detokenizer processes of two servers and the client's
event loop all share the host, and the kernel is free to stack them on one CPU or move them
mid-pass. Pinning each server (all its processes: children inherit the mask) and the client
to CPUs of their own takes that placement out of the comparison; both sides get sets of the
same size.
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
