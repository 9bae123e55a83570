"""The GPU's utilisation and SM clock over each benchmark pass, sampled by ``nvidia-smi``.

A pass of a small model that runs slow may have had a slower host under it (the GPU then idles
more) or a slower GPU (lower clock, or busier); with the scheduler's CPU seconds
(:mod:`.proc_cpu`) these tell the two apart. ``nvidia-smi --loop-ms`` writes a sample every
``interval_ms`` into a file, read after each pass; where there is no ``nvidia-smi`` (the CPU
machines) nothing is sampled and nothing is recorded.
"""

from __future__ import annotations

import datetime as _dt
import shutil
import subprocess
from pathlib import Path

QUERY = "timestamp,utilization.gpu,clocks.sm"


def parse(line: str) -> tuple[float, float, float] | None:
    """``(unix seconds, utilisation %, SM MHz)`` of one ``--format=csv,noheader,nounits`` line
    (``2026/12/03 07:30:00.123, 45, 1980``); None for anything else ("[N/A]", a partial line)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3:
        return None
    try:
        stamp = _dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        return stamp, float(parts[1]), float(parts[2])
    except ValueError:
        return None


def summarize(samples: list, start: float, end: float) -> dict | None:
    """Mean utilisation and SM clock of the samples taken between ``start`` and ``end`` (unix
    seconds); None where none fell inside."""
    inside = [s for s in samples if start <= s[0] <= end]
    if not inside:
        return None
    return {"samples": len(inside), "util_pct": round(sum(s[1] for s in inside) / len(inside), 1),
            "sm_mhz": round(sum(s[2] for s in inside) / len(inside), 1)}


class GpuSampler:
    """``nvidia-smi`` sampling GPU ``gpu`` into ``path`` until :meth:`stop`; :meth:`between` reads it."""

    def __init__(self, path, gpu: int = 0, interval_ms: int = 100, command: str | None = None):
        self.path = Path(path)
        self.command = [command or shutil.which("nvidia-smi") or "nvidia-smi", f"--query-gpu={QUERY}",
                        "--format=csv,noheader,nounits", f"--loop-ms={interval_ms}", "-i", str(gpu)]
        self.proc: subprocess.Popen | None = None
        self._read = 0  # bytes of the file parsed so far (whole lines only)
        self._samples: list = []

    @classmethod
    def start_if_available(cls, path, gpu: int = 0, interval_ms: int = 100) -> "GpuSampler | None":
        if shutil.which("nvidia-smi") is None:
            return None
        try:
            return cls(path, gpu, interval_ms).start()
        except OSError:  # a diagnostic: the measurement goes on without it
            return None

    def start(self) -> "GpuSampler":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "wb") as out:  # the child keeps its own handle
            self.proc = subprocess.Popen(self.command, stdout=out, stderr=subprocess.DEVNULL,
                                         stdin=subprocess.DEVNULL)
        return self

    def samples(self) -> list:
        """Every sample so far; each line is parsed once, on the first read after it is complete."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._read)
                new = f.read()
        except OSError:
            return self._samples
        whole = new[:new.rfind(b"\n") + 1]  # a line still being written waits for the next read
        self._read += len(whole)
        self._samples += [s for s in map(parse, whole.decode(errors="replace").splitlines()) if s is not None]
        return self._samples

    def between(self, start: float, end: float) -> dict | None:
        return summarize(self.samples(), start, end)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
