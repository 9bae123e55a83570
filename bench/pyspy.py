"""A py-spy sample of a server's scheduler process, reduced to its top frames.

py-spy reads the process from outside (no tracer in it, unlike the torch profiler's Python stacks),
so its shares are those of the undisturbed loop. It travels to the GPU machine as a wheel
(``.devbundle-v2/extra/py_spy-*.whl``; ``setup_v2.sh`` installs its binary into ``SITE/bin``).

``record`` writes py-spy's raw (collapsed) format: one line per distinct stack,
``outer (file.py:12);inner (file.py:34) COUNT``, the leaf last.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path

from sglang_eagle_paged.bench.report import table

SCHEDULER_TITLE = "sglang::scheduler"  # SGLang's setproctitle for the scheduler process


def child_with_title(pid: int, title: str = SCHEDULER_TITLE) -> int | None:
    """The first process under ``pid`` whose name or command line contains ``title``."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return None
    for c in children:
        try:
            if title in c.name() or title in " ".join(c.cmdline()):
                return c.pid
        except psutil.Error:
            continue
    return None


def record(py_spy: str, pid: int, out: Path, seconds: int, rate: int = 100) -> dict:
    """Sample ``pid`` for ``seconds`` without pausing it (``--nonblocking``); py-spy's exit and last words."""
    cmd = [py_spy, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", str(rate),
           "--format", "raw", "--nonblocking", "-o", str(out)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": None, "error": f"{type(exc).__name__}: {exc}"}
    return {"rc": done.returncode, "said": (done.stdout + done.stderr).strip()[-400:]}


def _frame(text: str) -> str:
    # "run_batch (sglang/srt/managers/scheduler.py:3528)" -> "run_batch (scheduler.py:3528)"
    name, sep, where = text.rpartition(" (")
    return f"{name} ({Path(where).name}" if sep else text


def top_frames(raw: str, top: int = 25) -> dict:
    """Samples per frame: ``self`` (the frame is the leaf) and ``total`` (anywhere in the stack, once
    per stack), largest first."""
    self_n: dict[str, int] = defaultdict(int)
    total_n: dict[str, int] = defaultdict(int)
    samples = 0
    for line in raw.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";")]
        samples += n
        self_n[frames[-1]] += n
        for f in set(frames):
            total_n[f] += n

    def ranked(d):
        return [{"name": k, "samples": v, "share": v / samples}
                for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))][:top]

    return {"samples": samples, "self": ranked(self_n), "total": ranked(total_n)}


def markdown(summary: dict, title: str) -> str:
    out = [f"## {title}\n\n{summary['samples']} samples\n"]
    for key, heading in (("self", "leaf frames"), ("total", "frames anywhere in the stack")):
        out.append(f"\n### py-spy: {heading}\n\n")
        out.append(table(["frame", "samples", "share"],
                         ([r["name"][:110], r["samples"], f"{r['share']:.1%}"] for r in summary[key])))
    return "".join(out)
