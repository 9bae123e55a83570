"""Device probe: the garbage collector's work in each server process.

A host-bound server spends part of each step in Python's collector, and the torch profiler
charges that time to whichever function happened to allocate when a collection began. This
records, per process, how many collections each generation ran and how long they took, so a
benchmark can put the collector's share of a pass beside its throughput (what it showed:
``docs/performance.md``).

``SGLANG_EAGLE_PAGED_GC_STATS=<dir>`` turns it on (``sitecustomize.py`` here, first on the server's
PYTHONPATH): every process that starts (the launcher with its tokenizer manager, each scheduler) adds a ``gc.callbacks`` entry and a daemon
thread that rewrites ``<dir>/gc-<pid>.json`` (atomically) every 0.25 s while anything changed.
A reader therefore sees a process's totals as of at most 0.25 s ago: wait that long after a pass
before reading (:func:`read_totals`). Off, nothing is installed.
"""

import gc
import json
import logging
import os
import threading
import time
from pathlib import Path


def process_title(pid: int) -> str:
    """The first word of the command line: SGLang's processes set it to their role (``setproctitle``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""


logger = logging.getLogger("sglang_eagle_paged")

ENV_VAR = "SGLANG_EAGLE_PAGED_GC_STATS"
WRITE_INTERVAL_S = 0.25

_state = {"installed": None, "recorder": None}


def _forget_in_child() -> None:
    # A forked child inherits the callback but not the writer thread: its counts would go nowhere
    # (SGLang spawns its processes, which load the plugin and record for themselves).
    recorder = _state["recorder"]
    if recorder is not None and recorder.callback in gc.callbacks:
        gc.callbacks.remove(recorder.callback)
    _state.update(installed=None, recorder=None)


class _Recorder:
    def __init__(self, path: Path):
        self.path = path
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.started = None
        self.version = 0  # bumped by every collection; the writer skips unchanged totals

    def callback(self, phase, info):
        # Runs inside the collector: no allocation beyond a float, no I/O.
        if phase == "start":
            self.started = time.perf_counter()
        elif self.started is not None:
            gen = info.get("generation", 0)
            self.counts[gen] += 1
            self.seconds[gen] += time.perf_counter() - self.started
            self.started = None
            self.version += 1

    def snapshot(self) -> dict:
        # SGLang retitles its processes (``sglang::scheduler`` ...) after the plugin loads: read it late.
        return {"pid": os.getpid(), "title": process_title(os.getpid()),
                "generations": {str(g): {"collections": self.counts[g], "ms": round(1e3 * self.seconds[g], 3)}
                                for g in range(3)}}

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.snapshot()))
        os.replace(tmp, self.path)

    def run(self) -> None:
        written = -1
        while True:
            if self.version != written:
                written = self.version
                try:
                    self.write()
                except OSError:  # a full or vanished directory must not stop the server
                    pass
            time.sleep(WRITE_INTERVAL_S)


def install(target: str) -> Path | None:
    """Start recording into directory ``target`` (``SGLANG_EAGLE_PAGED_GC_STATS``); the file this
    process writes, else None. Idempotent
    within a process."""
    if _state["installed"] is not None:
        return _state["installed"]
    if not target:
        return None
    path = Path(target) / f"gc-{os.getpid()}.json"
    # never created here: a mistyped path should say so, not leave a new folder behind
    if not path.parent.is_dir():
        logger.warning("[sglang-eagle-paged] %s=%s: cannot record the collector there: no such directory",
                       ENV_VAR, target)
        return None
    try:
        recorder = _Recorder(path)
        recorder.write()
    except OSError as exc:
        logger.warning("[sglang-eagle-paged] %s=%s: cannot record the collector there: %s", ENV_VAR, target, exc)
        return None
    gc.callbacks.append(recorder.callback)
    os.register_at_fork(after_in_child=_forget_in_child)  # only where recording: off, nothing is installed
    threading.Thread(target=recorder.run, name="sglang-eagle-paged-gc-stats", daemon=True).start()
    _state.update(installed=path, recorder=recorder)
    return path


def read_totals(directory) -> dict:
    """Every recorded process of ``directory``: {pid: its snapshot}. Files being replaced are skipped."""
    out = {}
    for f in sorted(Path(directory).glob("gc-*.json")):
        try:
            snap = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        out[int(snap["pid"])] = snap
    return out


def difference(before: dict, after: dict) -> dict:
    """Collections and milliseconds per generation between two :func:`read_totals`, summed over
    processes, and per process title (a process new since ``before`` counts from zero)."""
    def add(bucket: dict, collections: int, ms: float) -> None:
        bucket["collections"] += collections
        bucket["ms"] = round(bucket["ms"] + ms, 3)

    total = {str(g): {"collections": 0, "ms": 0.0} for g in range(3)}
    by_title = {}
    for pid, snap in after.items():
        old = before.get(pid, {}).get("generations", {})
        title = by_title.setdefault(snap.get("title") or str(pid), {"collections": 0, "ms": 0.0})
        for g, now in snap["generations"].items():
            d_n = now["collections"] - old.get(g, {}).get("collections", 0)
            d_ms = now["ms"] - old.get(g, {}).get("ms", 0.0)
            add(total[g], d_n, d_ms)
            add(title, d_n, d_ms)
    return {"generations": total, "ms": round(sum(v["ms"] for v in total.values()), 3), "by_process": by_title}
