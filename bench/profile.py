"""Profile a running ``sglang.launch_server`` and keep only a small summary.

A torch-profiler trace of a few EAGLE decode steps with Python stacks is easily
hundreds of MB, too big to bring back from the GPU machine, so the trace is
reduced there to a dict of totals (GPU kernels, CPU ops with self time, Python
functions, CUDA runtime calls and host syncs) that fits in a JSON file.

How SGLang 0.5.12.post1 writes the trace (``scheduler_profiler_mixin.py``):

- ``POST /start_profile`` takes a ``ProfileReqInput`` (``output_dir``,
  ``num_steps``, ``activities``, ``with_stack``, ``record_shapes``, ...). Without
  ``start_step``/``profile_by_stage`` the scheduler starts the profiler at once
  and answers, so the HTTP call returns right away; older SGLang versions held
  the answer until profiling ended, hence the call is made from a thread.
- Profiling stops inside ``Scheduler.run_batch`` once ``forward_ct`` reaches
  start + ``num_steps``: the trace holds ``num_steps - 1`` whole forward steps
  plus the start of the last one, and stops only if that many batches run.
- The file is ``{output_dir}/[{prefix}-]{profile_id}-TP-{rank}[-DP-..][-PP-..]
  [-EP-..].trace.json.gz`` where ``profile_id = str(time.time())`` of the
  request, e.g. ``1732941234.5678-TP-0.trace.json.gz``; torch writes the gzip
  progressively after saving the JSON to a temp file.

CLI::

    python -m bench.profile summarize TRACE [--out JSON] [--md MD]
    python -m bench.profile compare A.json B.json --names p1 p64
    python -m bench.profile compare runs/x/e2e.json:on_p1 runs/x/e2e.json:on_p64 --names p1 p64
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from sglang_eagle_paged.bench.report import fmt, table

TRACE_GLOB = "*.trace.json*"
KERNEL_CATS = frozenset({"kernel"})
GPU_MEM_CATS = frozenset({"gpu_memcpy", "gpu_memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver"})
# Scheduler.run_batch runs once per forward step (for EAGLE: draft + verify +
# draft-extend), so its count is the number of profiled steps.
STEP_FUNCTION = re.compile(r"scheduler\.py\(\d+\): run_batch$")
TABLE_ROWS = 25


def _log(msg: str) -> None:
    print(f"[profile] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- capture


def _trace_files(directory: Path) -> set[Path]:
    return set(directory.glob(TRACE_GLOB)) if directory.is_dir() else set()


def _pick(paths: Iterable[Path]) -> Path:
    # With TP > 1 every rank writes a file; rank 0 is representative.
    def key(p: Path) -> tuple[int, float]:
        try:
            mtime = p.stat().st_mtime
        except OSError:
            mtime = 0.0
        return (0 if "-TP-0" in p.name else 1, -mtime)

    return sorted(paths, key=key)[0]


def capture(
    base_url: str,
    output_dir: str,
    num_steps: int,
    drive: Callable[[], Any],
    timeout: float = 180.0,
    with_stack: bool = True,
    *,
    start_wait: float = 10.0,
    stop_grace: float | None = 30.0,
    stable_s: float = 2.0,
    poll_s: float = 0.25,
) -> Path | None:
    """Profile ``num_steps`` forward steps of the server while ``drive()`` runs.

    ``drive`` must make the server run at least ``num_steps`` batches (send
    generation requests), otherwise SGLang never stops the profiler by itself;
    for that case ``/stop_profile`` is posted once, ``stop_grace`` seconds after
    ``drive`` returned without a trace (``None`` disables it). Returns the new
    trace file once its size has been stable for ``stable_s``, or ``None`` when
    none appears within ``timeout`` seconds of the call.
    """
    import requests  # only capture needs it; summarizing works without

    t0 = time.monotonic()
    deadline = t0 + timeout
    base_url = base_url.rstrip("/")
    # The server resolves the directory against its own cwd: send it absolute.
    out = Path(output_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    before = _trace_files(out)
    payload = {
        "output_dir": str(out),
        "num_steps": num_steps,
        "activities": ["CPU", "GPU"],
        "with_stack": with_stack,
        "record_shapes": False,
    }

    answer: dict[str, Any] = {}
    answered = threading.Event()

    def start() -> None:
        try:
            r = requests.post(f"{base_url}/start_profile", json=payload, timeout=timeout)
            answer["status"], answer["text"] = r.status_code, r.text.strip()
        except Exception as e:  # noqa: BLE001 - reported below, never raised
            answer["error"] = repr(e)
        finally:
            answered.set()

    threading.Thread(target=start, name="start_profile", daemon=True).start()
    # Normally the answer comes once the profiler runs, so drive() only starts
    # steps that are profiled; if this server holds the answer until the end,
    # drive anyway after start_wait.
    if answered.wait(min(start_wait, timeout)):
        if "error" in answer or answer.get("status") != 200:
            _log(f"start_profile failed: {answer.get('error') or (answer.get('status'), answer.get('text'))}")
            return None
    else:
        _log(f"start_profile has not answered after {start_wait:.0f}s; driving anyway")

    try:
        drive()
    except Exception as e:  # noqa: BLE001 - the trace may still come; keep waiting
        _log(f"drive() raised {e!r}; still waiting for the trace")
    drive_done = time.monotonic()

    stop_sent = False
    last: tuple[Path, int] | None = None
    last_change = time.monotonic()
    while True:
        now = time.monotonic()
        new = _trace_files(out) - before
        if new:
            path = _pick(new)
            try:
                size = path.stat().st_size
            except OSError:
                size = -1
            if last != (path, size):
                last, last_change = (path, size), now
            elif size > 0 and now - last_change >= stable_s:
                _log(f"trace {path} ({size / 1e6:.1f} MB) after {now - t0:.1f}s")
                return path
        elif not stop_sent and stop_grace is not None and now - drive_done >= stop_grace:
            stop_sent = True
            _log(f"no trace {stop_grace:.0f}s after drive(); posting /stop_profile")
            # A stop that arrives after the scheduler stopped by itself only
            # gets a harmless 'not in progress' error; send from a thread as it
            # waits behind any trace export in the scheduler.
            threading.Thread(
                target=_post_quietly, args=(f"{base_url}/stop_profile", max(deadline - now, 1.0)), daemon=True
            ).start()
        if now >= deadline:
            _log(f"no stable trace in {out} after {timeout:.0f}s (start_profile answer: {answer or 'none'})")
            return None
        time.sleep(poll_s)


def _post_quietly(url: str, timeout: float) -> None:
    import requests

    try:
        requests.post(url, timeout=timeout)
    except Exception as e:  # noqa: BLE001
        _log(f"{url}: {e!r}")


# --------------------------------------------------------------------------- summary


def load_trace(path: str | Path) -> dict:
    path = Path(path)
    with path.open("rb") as f:
        gz = f.read(2) == b"\x1f\x8b"  # by content: names don't always say
    opener = gzip.open if gz else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    # Chrome traces may also be a bare event list.
    return {"traceEvents": data} if isinstance(data, list) else data


_PY_NAME = re.compile(r"^(?:.*[/\\])?([^/\\]+\.py\(\d+\): .*)$")


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_PYBIND = re.compile(r"pybind11_builtins\.\S+")


def short_name(name: str) -> str:
    """``sglang/srt/speculative/eagle_worker.py(123): draft`` -> ``eagle_worker.py(123): draft``.

    Built-ins name the object they are bound to by address (``<built-in
    method sum of Tensor object at 0x7f..>``); the address is dropped so that
    calls add up and two runs compare.
    """
    m = _PY_NAME.match(name)
    if m:
        return m.group(1)
    return _PYBIND.sub("pybind11", _ADDRESS.sub("", name))


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None  # drop NaN


def _self_times(events: list[tuple]) -> list[float]:
    """Self time of each event: its duration minus that of its direct children.

    ``events`` are ``(ts, dur, thread, index)`` with index = position in
    ``events``; children are the events on the
    same thread that start inside the parent. Sorting by (ts, -dur) puts a
    parent before its children, and a stack of open events gives each event's
    parent in O(n log n). A child is clipped to its parent's end, since
    clock rounding can make it stick out, so self time never goes negative.
    """
    selfs = [0.0] * len(events)
    for e in events:
        selfs[e[3]] = e[1]
    by_thread: dict[Any, list[tuple]] = defaultdict(list)
    for e in events:
        by_thread[e[2]].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e[0], -e[1]))
        stack: list[tuple[float, int]] = []  # (end, index)
        for ts, dur, _, i in evs:
            while stack and stack[-1][0] <= ts:
                stack.pop()
            end = ts + dur
            if stack:
                p_end, p = stack[-1]
                selfs[p] -= min(end, p_end) - ts
            stack.append((end, i))
    return selfs


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _is_sync(name: str) -> bool:
    # Synchronize calls and synchronous (non-Async) memcpys block the host.
    return "Synchronize" in name or (name.startswith(("cudaMemcpy", "cuMemcpy")) and "Async" not in name)


def _top(rows: dict[str, dict], key: str, top: int) -> list[dict]:
    out = [{"name": n, **v} for n, v in rows.items()]
    out.sort(key=lambda r: (-r[key], r["name"]))
    return out[:top]


def summarize_trace(path: str | Path, top: int = 40, steps: int | None = None) -> dict:
    """Reduce a torch-profiler Chrome trace (plain or gzip) to a small dict.

    Times are microseconds (``*_us``) or milliseconds (``*_ms``). ``steps`` is
    the number of profiled forward steps, for per-step numbers; by default it
    is the number of whole ``Scheduler.run_batch`` calls in the trace (needs
    ``with_stack``), else ``None``.
    """
    data = load_trace(path)
    raw = data.get("traceEvents") or []

    t_min, t_max = float("inf"), float("-inf")
    threaded: list[tuple] = []  # (ts, dur, (pid, tid), index into meta)
    meta: list[tuple[str, str]] = []  # (cat, name)
    kernels: dict[str, dict] = defaultdict(lambda: {"total_us": 0.0, "count": 0})
    gpu_mem: dict[str, dict] = defaultdict(lambda: {"total_us": 0.0, "count": 0})
    runtime: dict[str, dict] = defaultdict(lambda: {"total_us": 0.0, "count": 0})
    kernel_spans: list[tuple[float, float]] = []
    syncs, sync_us = 0, 0.0
    categories: dict[str, int] = defaultdict(int)

    for ev in raw:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        ts, dur = _num(ev.get("ts")), _num(ev.get("dur"))
        if ts is None:
            continue
        dur = max(dur or 0.0, 0.0)
        cat, name = str(ev.get("cat") or ""), str(ev.get("name") or "")
        categories[cat] += 1
        t_min, t_max = min(t_min, ts), max(t_max, ts + dur)
        if cat in KERNEL_CATS:
            k = kernels[name]
            k["total_us"] += dur
            k["count"] += 1
            kernel_spans.append((ts, ts + dur))
        elif cat in GPU_MEM_CATS:
            g = gpu_mem[name]
            g["total_us"] += dur
            g["count"] += 1
        else:
            if cat in RUNTIME_CATS:
                r = runtime[name]
                r["total_us"] += dur
                r["count"] += 1
                if _is_sync(name):
                    syncs += 1
                    sync_us += dur
            # Host-side events nest per thread; GPU events are left out of
            # the self-time pass as they never have CPU children.
            threaded.append((ts, dur, (ev.get("pid"), ev.get("tid")), len(meta)))
            meta.append((cat, name))

    selfs = _self_times(threaded)
    cpu_ops: dict[str, dict] = defaultdict(lambda: {"total_us": 0.0, "self_us": 0.0, "count": 0})
    python: dict[str, dict] = defaultdict(lambda: {"total_us": 0.0, "self_us": 0.0, "count": 0})
    step_durs: list[float] = []
    for ts, dur, _, i in threaded:
        cat, name = meta[i]
        if cat == "cpu_op":
            row = cpu_ops[name]
        elif cat == "python_function":
            name = short_name(name)
            row = python[name]
            if STEP_FUNCTION.search(name):
                step_durs.append(dur)
        else:
            continue
        row["total_us"] += dur
        row["self_us"] += selfs[i]
        row["count"] += 1

    if steps is None and step_durs:
        # The profiler stops at the start of the last run_batch, leaving a
        # stub of it; count only calls of a real step's size.
        median = sorted(step_durs)[len(step_durs) // 2]
        steps = sum(1 for d in step_durs if d >= 0.05 * median)
        steps = steps or None

    gpu_total = sum(k["total_us"] for k in kernels.values())
    for k in kernels.values():
        k["mean_us"] = k["total_us"] / k["count"] if k["count"] else 0.0
        k["share"] = k["total_us"] / gpu_total if gpu_total else 0.0

    return {
        "trace": str(path),
        "steps": steps,
        "wall_ms": (t_max - t_min) / 1e3 if t_max >= t_min else 0.0,
        "gpu_total_us": gpu_total,
        "gpu_busy_ms": _union_us(kernel_spans) / 1e3,
        "gpu_kernel_count": sum(k["count"] for k in kernels.values()),
        "gpu_kernels": _top(kernels, "total_us", top),
        "gpu_mem": _top(gpu_mem, "total_us", top),
        "cpu_ops": _top(cpu_ops, "self_us", top),
        "python": _top(python, "total_us", top),
        "cuda_runtime": _top(runtime, "total_us", top),
        "syncs": syncs,
        "sync_us": sync_us,
        "categories": dict(sorted(categories.items())),
    }


# --------------------------------------------------------------------------- markdown


def _f(v: Any, digits: int = 1) -> str:
    return fmt(v, digits, thousands=True)


def _per_step(summary: dict) -> tuple[float, str]:
    steps = summary.get("steps")
    return (float(steps), "/step") if steps else (1.0, "")


def markdown(summary: dict, title: str) -> str:
    """Compact tables of one summary (the first ``TABLE_ROWS`` rows of each)."""
    n, per = _per_step(summary)
    s = summary
    out = [f"## {title}\n\n"]
    out.append(table(
        ["steps", "wall ms", "GPU busy ms", "GPU kernel ms", "kernels", "syncs", "sync ms"],
        [[_f(s.get("steps")), _f(s.get("wall_ms"), 2), _f(s.get("gpu_busy_ms"), 2),
          _f((s.get("gpu_total_us") or 0.0) / 1e3, 2), _f(s.get("gpu_kernel_count")),
          _f(s.get("syncs")), _f((s.get("sync_us") or 0.0) / 1e3, 2)]],
    ))
    if per:
        out.append(f"\nPer-step columns divide by {int(n)} steps.\n")
    sections = [
        ("GPU kernels", s.get("gpu_kernels"), ["kernel", f"total us{per}", "count", "mean us", "share"],
         lambda r: [r["name"][:120], _f(r["total_us"] / n), _f(r["count"]), _f(r.get("mean_us")), f"{r.get('share', 0.0):.1%}"]),
        ("CPU ops by self time", s.get("cpu_ops"), ["op", f"self us{per}", f"total us{per}", "count"],
         lambda r: [r["name"], _f(r["self_us"] / n), _f(r["total_us"] / n), _f(r["count"])]),
        ("Python functions by inclusive time", s.get("python"), ["function", f"total us{per}", f"self us{per}", "count"],
         lambda r: [r["name"], _f(r["total_us"] / n), _f(r.get("self_us", 0.0) / n), _f(r["count"])]),
        ("CUDA runtime", s.get("cuda_runtime"), ["call", f"total us{per}", "count"],
         lambda r: [r["name"], _f(r["total_us"] / n), _f(r["count"])]),
    ]
    for heading, rows, headers, cells in sections:
        if rows:
            out.append(f"\n### {heading}\n\n")
            out.append(table(headers, (cells(r) for r in rows[:TABLE_ROWS])))
    return "".join(out)


def _by_name(rows: Iterable[dict] | None, key: str, n: float) -> dict[str, float]:
    return {r["name"]: r.get(key, 0.0) / n for r in rows or []}


def compare_markdown(a: dict, b: dict, name_a: str, name_b: str) -> str:
    """Side by side of two summaries, largest change from ``a`` to ``b`` first.

    Per step when both know their step count, else totals. A name missing from
    one summary's top list counts as 0 there and is marked ``*`` (it may just
    have been below that list's cut-off).
    """
    (na, pa), (nb, pb) = _per_step(a), _per_step(b)
    per_step = bool(pa and pb)
    if not per_step:
        na = nb = 1.0
    unit = "us/step" if per_step else "us total"
    out = [f"## {name_b} vs {name_a}\n\n"]

    def overall(s: dict, n: float) -> list[str]:
        return [_f(s.get("steps")), _f(s.get("wall_ms", 0.0) / n, 3), _f(s.get("gpu_busy_ms", 0.0) / n, 3),
                _f(s.get("gpu_total_us", 0.0) / 1e3 / n, 3), _f(s.get("syncs", 0) / n, 2)]

    scale = "per step" if per_step else "total"
    out.append(table(
        ["run", "steps", f"wall ms {scale}", f"GPU busy ms {scale}", f"kernel ms {scale}", f"syncs {scale}"],
        [[name_a, *overall(a, na)], [name_b, *overall(b, nb)]],
    ))
    for heading, field, key in (("Python functions (inclusive)", "python", "total_us"),
                                ("GPU kernels", "gpu_kernels", "total_us"),
                                ("CPU ops (self)", "cpu_ops", "self_us")):
        ta, tb = _by_name(a.get(field), key, na), _by_name(b.get(field), key, nb)
        names = sorted(set(ta) | set(tb), key=lambda k: (-abs(tb.get(k, 0.0) - ta.get(k, 0.0)),
                                                       -max(ta.get(k, 0.0), tb.get(k, 0.0)), k))
        if not names:
            continue
        rows = []
        for k in names[:TABLE_ROWS]:
            va = _f(ta[k]) if k in ta else "0*"
            vb = _f(tb[k]) if k in tb else "0*"
            rows.append([k[:120], va, vb, _f(tb.get(k, 0.0) - ta.get(k, 0.0))])
        out.append(f"\n### {heading}, {unit}\n\n")
        out.append(table(["name", name_a, name_b, f"{name_b} - {name_a}"], rows))
    return "".join(out)


# --------------------------------------------------------------------------- CLI


def load_summary(spec: str) -> dict:
    """A summary JSON file, or ``E2E_JSON:NAME``: the ``profile`` that ``bench.e2e --profile`` recorded
    for configuration ``NAME`` in its ``e2e.json`` (``.json.gz`` too)."""
    path, sep, name = spec.rpartition(":")
    if not sep or not Path(path).is_file():
        return json.loads(Path(spec).read_text())
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        profile = (json.load(f).get(name) or {}).get("profile")
    if not profile:
        raise SystemExit(f"no profile recorded for {name!r} in {path}")
    return profile


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("summarize", help="reduce a trace (.json or .json.gz) to a summary")
    p.add_argument("trace")
    p.add_argument("--out", help="write the summary JSON here")
    p.add_argument("--md", help="write the Markdown tables here (else print them)")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--steps", type=int, help="profiled steps (default: counted run_batch calls)")
    p.add_argument("--title", help="Markdown title (default: the trace's file name)")
    c = sub.add_parser("compare", help="side by side of two summary JSONs")
    c.add_argument("a", help="a summary JSON, or E2E_JSON:NAME for a configuration's profile in bench.e2e's e2e.json")
    c.add_argument("b", help="the same for the other side")
    c.add_argument("--names", nargs=2, metavar=("NAME_A", "NAME_B"), default=("A", "B"))
    c.add_argument("--md", help="write the Markdown here (else print it)")
    args = parser.parse_args(argv)

    if args.cmd == "summarize":
        summary = summarize_trace(args.trace, top=args.top, steps=args.steps)
        if args.out:
            Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
        text = markdown(summary, args.title or Path(args.trace).name)
    else:
        a, b = (load_summary(x) for x in (args.a, args.b))
        text = compare_markdown(a, b, *args.names)
    if args.md:
        Path(args.md).write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
