"""Where a verify round's time goes: one torch-profiler trace of a loaded server, per round.

A round is one ``Scheduler.run_batch`` of the decode loop (draft, verify, draft-extend): rounds are
the windows between consecutive ``run_batch`` starts on the scheduler thread that call a ``verify``
(prefill batches are left out and counted; the last window, cut by the profiler's stop, is dropped).
Starts and verifies come from the device probe's profiler ranges (``eagle_paged::run_batch``,
``eagle_paged::verify``: ``scripts/device/probes/round_marks.py``), else from Python frames (a trace
with stacks); with neither, the trace is one window and every per-round number is its total divided
by ``rounds`` (the profiled step count, prefills included).

Per round: wall time; GPU busy (union of kernels, copies and memsets) and idle (wall minus busy, as
gaps); the scheduler thread's time blocked in host syncs and the rest (active); GPU time by kernel,
grouped (attention, GEMM, ours, SGLang's Triton, copies/memsets, other); the scheduler's Python
frames by self time; what the scheduler was doing when the GPU went idle; and the host time of each
phase of the round (SGLang's ``draft`` and ``draft_extend`` ranges, the probe's verify mark) with the
outermost events inside it: where a phase is longer in one trace than in another, and on what.

    python -m bench.round_profile summarize TRACE [--rounds N] [--out JSON] [--md MD]
    python -m bench.round_profile compare A.json B.json ... [--md MD]
"""

from __future__ import annotations

import argparse
import ast
import bisect
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Sequence

from .profile import GPU_MEM_CATS, KERNEL_CATS, RUNTIME_CATS, STEP_FUNCTION, _is_sync, _num, _self_times, \
    load_trace, short_name
from sglang_eagle_paged.bench.report import fmt, table

GROUPS = ("attention", "gemm", "ours", "sglang_triton", "copy_memset", "other")
TOP = 25
# Idle stretches shorter than this are launch spacing, not a GPU waiting on the host.
GAP_MIN_US = 10.0
HOST_CATS = frozenset({"python_function", "cpu_op", "user_annotation"}) | RUNTIME_CATS
_LAUNCHES = ("cudaLaunchKernel", "cudaGraphLaunch", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")

_COPY = re.compile(r"memcpy|memset|copy_kernel|direct_copy|CatArrayBatchedCopy|FillFunctor|fill_kernel", re.I)
_ATTENTION = re.compile(r"flash|fmha|attn|attention|mha_", re.I)
_GEMM = re.compile(r"gemm|cutlass|cublas|nvjet|xmma|splitK|sm90_.*mma|_mma_", re.I)
# A Triton kernel is named by its Python function alone; CUDA C++ kernels carry a signature.
_TRITON_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
VERIFY_FUNCTION = re.compile(r"\(\d+\): verify$")
# Profiler ranges the device probe scripts/device/probes/round_marks.py puts around Scheduler.run_batch and
# EAGLEWorkerV2.verify: rounds in a trace without Python stacks.
RUN_BATCH_MARK = "eagle_paged::run_batch"
VERIFY_MARK = "eagle_paged::verify"
# Host ranges that split a round into its phases: SGLang's own profiler ranges and the probe's mark.
PHASES = ("draft", VERIFY_MARK, "draft_extend")


def our_kernel_names(kernels_dir: str | Path | None = None) -> frozenset:
    """The names of the plugin's Triton kernels (``@triton.jit`` functions of ``kernels/``), read
    from the source so that summarising needs no Triton."""
    d = Path(kernels_dir) if kernels_dir else Path(__file__).resolve().parents[1] / "sglang_eagle_paged" / "kernels"
    return frozenset(f.name for p in sorted(d.glob("*.py")) for f in ast.walk(ast.parse(p.read_text()))
                     if isinstance(f, ast.FunctionDef) and any(_is_triton_jit(x) for x in f.decorator_list))


def _is_triton_jit(decorator: ast.expr) -> bool:
    """``@triton.jit`` or ``@triton.jit(...)``, however many lines its arguments take."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and target.attr == "jit" and \
        isinstance(target.value, ast.Name) and target.value.id == "triton"


def kernel_group(name: str, cat: str, ours: frozenset) -> str:
    if cat in GPU_MEM_CATS or _COPY.search(name):
        return "copy_memset"
    if name in ours:
        return "ours"
    if _ATTENTION.search(name):
        return "attention"
    if _GEMM.search(name):
        return "gemm"
    if _TRITON_NAME.match(name):
        return "sglang_triton"
    return "other"


def _merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _clip(merged: list[tuple[float, float]], a: float, b: float) -> list[tuple[float, float]]:
    return [(max(s, a), min(e, b)) for s, e in merged if e > a and s < b]


def _gaps(busy: list[tuple[float, float]], a: float, b: float) -> list[tuple[float, float]]:
    out, t = [], a
    for s, e in busy:
        if s > t:
            out.append((t, s))
        t = max(t, e)
    if b > t:
        out.append((t, b))
    return out


def _innermost(events: list[tuple], points: list[float]) -> list[int | None]:
    """For each time in ``points``, the index of the innermost event of ``events`` (``(ts, dur,
    index)``, one thread's nesting) running then, or None: one sweep with a stack of open events."""
    order = sorted(range(len(points)), key=lambda i: points[i])
    evs = sorted(events, key=lambda e: (e[0], -e[1]))
    found: list[int | None] = [None] * len(points)
    stack: list[tuple[float, int]] = []
    j = 0
    for i in order:
        t = points[i]
        while j < len(evs) and evs[j][0] <= t:
            ts, dur, idx = evs[j]
            while stack and stack[-1][0] <= ts:
                stack.pop()
            stack.append((ts + dur, idx))
            j += 1
        while stack and stack[-1][0] <= t:
            stack.pop()
        found[i] = stack[-1][1] if stack else None
    return found


def _inside(sorted_times: list[float], a: float, b: float) -> bool:
    i = bisect.bisect_left(sorted_times, a)
    return i < len(sorted_times) and sorted_times[i] < b


def _stats(values: list[float]) -> dict:
    if not values:
        return {"median": None, "mean": None, "p10": None, "p90": None}
    s = sorted(values)
    return {"median": statistics.median(s), "mean": sum(s) / len(s),
            "p10": s[int(0.1 * (len(s) - 1))], "p90": s[int(round(0.9 * (len(s) - 1)))]}


def _marked(events: list[dict], mark: str, frame: re.Pattern) -> list[float]:
    """Start times of the ``mark`` ranges, else (no marks: the probe was not armed) of the Python
    frames ``frame`` matches; never both, which would split every round in two."""
    marks = [e["ts"] for e in events if e["cat"] == "user_annotation" and e["name"] == mark]
    return sorted(marks or [e["ts"] for e in events
                            if e["cat"] == "python_function" and frame.search(short_name(e["name"]))])


def _scheduler_thread(host: list[dict]) -> tuple | None:
    """The thread that runs ``run_batch`` (marked or framed), else the one that launches the most kernels."""
    runs, launches = defaultdict(int), defaultdict(int)
    for e in host:
        key = (e["pid"], e["tid"])
        if e["name"] == RUN_BATCH_MARK or (e["cat"] == "python_function" and STEP_FUNCTION.search(short_name(e["name"]))):
            runs[key] += 1
        elif e["name"] in _LAUNCHES:
            launches[key] += 1
    pick = runs or launches
    return max(pick, key=pick.get) if pick else None


def _phases(inside: list[dict], n: int, top: int) -> dict:
    """Per phase of :data:`PHASES`: its host time per round and the outermost events inside its ranges
    (by name, per round), the longest first."""
    events = sorted(inside, key=lambda e: (e["ts"], -e["dur"]))
    starts = [e["ts"] for e in events]
    out = {}
    for phase in PHASES:
        ranges = [e for e in events if e["cat"] == "user_annotation" and e["name"] == phase]
        if not ranges:
            continue
        children: dict[str, dict] = defaultdict(lambda: {"us": 0.0, "count": 0})
        for r in ranges:
            end, covered = r["ts"] + r["dur"], r["ts"]  # an event starting before `covered` is nested
            for e in events[bisect.bisect_left(starts, r["ts"]):bisect.bisect_right(starts, end)]:
                if e is r or e["ts"] + e["dur"] > end or e["ts"] < covered:
                    continue
                c = children[short_name(e["name"])]
                c["us"] += e["dur"]
                c["count"] += 1
                covered = e["ts"] + e["dur"]
        rows = sorted(({"name": k, "us_per_round": c["us"] / n, "count_per_round": c["count"] / n}
                       for k, c in children.items()), key=lambda row: (-row["us_per_round"], row["name"]))
        out[phase] = {"us_per_round": sum(r["dur"] for r in ranges) / n, "children": rows[:top]}
    return out


def summarize(path: str | Path, rounds: int | None = None, ours: frozenset | None = None,
              top: int = TOP) -> dict:
    """Reduce one trace to the per-round summary (times in microseconds per round)."""
    ours = our_kernel_names() if ours is None else ours
    host, gpu = [], []
    for ev in load_trace(path).get("traceEvents") or []:
        if not isinstance(ev, dict) or ev.get("ph") != "X" or _num(ev.get("ts")) is None:
            continue
        cat = str(ev.get("cat") or "")
        e = {"ts": _num(ev["ts"]), "dur": max(_num(ev.get("dur")) or 0.0, 0.0), "cat": cat,
             "name": str(ev.get("name") or ""), "pid": ev.get("pid"), "tid": ev.get("tid")}
        if cat in KERNEL_CATS or cat in GPU_MEM_CATS:
            gpu.append(e)
        elif cat in HOST_CATS:
            host.append(e)
    thread = _scheduler_thread(host)
    sched = [e for e in host if (e["pid"], e["tid"]) == thread]
    starts = _marked(sched, RUN_BATCH_MARK, STEP_FUNCTION)
    with_stack = any(e["cat"] == "python_function" for e in sched)
    other_rounds = 0
    if len(starts) >= 2:
        windows, rounds_from = list(zip(starts, starts[1:])), "run_batch"
        # Prefill batches run_batch too: keep the rounds that verify (all, if none is seen to).
        verifies = _marked(sched, VERIFY_MARK, VERIFY_FUNCTION)
        kept = [w for w in windows if _inside(verifies, *w)]
        if kept:
            windows, other_rounds = kept, len(windows) - len(kept)
    else:
        span = [t for e in host + gpu for t in (e["ts"], e["ts"] + e["dur"])]
        if not span or not rounds:
            raise SystemExit(f"{path}: no run_batch marks or frames in the trace: give --rounds (the profiled steps)")
        windows, rounds_from = [(min(span), max(span))], "given"
    n = len(windows) if rounds_from == "run_batch" else rounds
    w_starts = [a for a, _ in windows]

    def in_rounds(ts: float, end: float | None = None) -> bool:
        i = bisect.bisect_right(w_starts, ts) - 1
        return i >= 0 and ts < windows[i][1] and (end is None or end <= windows[i][1])

    busy = _merge((e["ts"], e["ts"] + e["dur"]) for e in gpu)
    syncs = _merge((e["ts"], e["ts"] + e["dur"]) for e in sched if e["cat"] in RUNTIME_CATS and _is_sync(e["name"]))
    per_round = defaultdict(list)
    gaps: list[tuple[float, float]] = []
    for a, b in windows:
        gpu_busy = sum(e - s for s, e in _clip(busy, a, b))
        blocked = sum(e - s for s, e in _clip(syncs, a, b))
        idle = [g for g in _gaps(_clip(busy, a, b), a, b) if g[1] - g[0] >= GAP_MIN_US]
        gaps += idle
        per_round["wall_us"].append(b - a)
        per_round["gpu_busy_us"].append(gpu_busy)
        per_round["gpu_idle_us"].append(b - a - gpu_busy)
        per_round["gpu_gaps"].append(float(len(idle)))
        per_round["gpu_gap_us"].append(sum(e - s for s, e in idle))
        per_round["host_blocked_us"].append(blocked)
        per_round["host_active_us"].append(b - a - blocked)
    if rounds_from == "given":  # one window for all rounds: spread it evenly
        per_round = {k: [v[0] / n] for k, v in per_round.items()}

    kernels: dict[str, dict] = defaultdict(lambda: {"us": 0.0, "count": 0})
    for e in gpu:
        if in_rounds(e["ts"]):
            k = kernels[e["name"]]
            k["us"] += e["dur"]
            k["count"] += 1
            k["group"] = kernel_group(e["name"], e["cat"], ours)
    gpu_total = sum(k["us"] for k in kernels.values())
    groups = {g: 0.0 for g in GROUPS}
    for k in kernels.values():
        groups[k["group"]] += k["us"] / n
    kernel_rows = sorted(({"name": name, "group": k["group"], "us_per_round": k["us"] / n,
                           "count_per_round": k["count"] / n, "share": k["us"] / gpu_total if gpu_total else 0.0}
                          for name, k in kernels.items()), key=lambda r: (-r["us_per_round"], r["name"]))

    inside = [e for e in sched if in_rounds(e["ts"], e["ts"] + e["dur"])]
    nested = [(e["ts"], e["dur"], (0, 0), i) for i, e in enumerate(inside)]
    selfs = _self_times(nested)
    frames: dict[str, dict] = defaultdict(lambda: {"self_us": 0.0, "total_us": 0.0, "count": 0})
    for i, e in enumerate(inside):
        if e["cat"] == "python_function":
            f = frames[short_name(e["name"])]
            f["self_us"] += selfs[i]
            f["total_us"] += e["dur"]
            f["count"] += 1
    frame_rows = sorted(({"name": name, "self_us_per_round": f["self_us"] / n,
                          "total_us_per_round": f["total_us"] / n, "count_per_round": f["count"] / n}
                         for name, f in frames.items()), key=lambda r: (-r["self_us_per_round"], r["name"]))

    # What the scheduler was in when the GPU went idle: the innermost host event, and the innermost
    # Python frame, at each gap's start.
    by_host: dict[str, float] = defaultdict(float)
    by_frame: dict[str, float] = defaultdict(float)
    points = [s for s, _ in gaps]
    for i, hit in enumerate(_innermost([(e["ts"], e["dur"], j) for j, e in enumerate(inside)], points)):
        by_host[short_name(inside[hit]["name"]) if hit is not None else "(none)"] += gaps[i][1] - gaps[i][0]
    py = [(e["ts"], e["dur"], j) for j, e in enumerate(inside) if e["cat"] == "python_function"]
    if py:
        for i, hit in enumerate(_innermost(py, points)):
            by_frame[short_name(inside[hit]["name"]) if hit is not None else "(none)"] += gaps[i][1] - gaps[i][0]

    def ranked(d: dict) -> list[dict]:
        return [{"name": k, "us_per_round": v / n} for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))][:top]

    return {
        "trace": str(path), "with_stack": with_stack, "rounds": n, "rounds_from": rounds_from,
        "other_rounds": other_rounds,
        "scheduler_thread": list(thread) if thread else None,
        "per_round": {k: _stats(v) for k, v in per_round.items()},
        "gpu_groups_us_per_round": groups,
        "gpu_kernel_us_per_round": gpu_total / n,
        "kernels": kernel_rows[:top],
        "python_frames": frame_rows[:top],
        "idle_gaps_by_host_event": ranked(by_host),
        "idle_gaps_by_python_frame": ranked(by_frame),
        "gap_min_us": GAP_MIN_US,
        "phases": _phases(inside, n, top),
    }


# --------------------------------------------------------------------------- markdown
PER_ROUND_ROWS = ("wall_us", "gpu_busy_us", "gpu_idle_us", "gpu_gaps", "gpu_gap_us", "host_active_us",
                  "host_blocked_us")


def _f(v, digits: int = 1) -> str:
    return fmt(v, digits, thousands=True)


def markdown(s: dict, title: str) -> str:
    how = (f"windows between run_batch starts that verify; {s.get('other_rounds', 0)} other run_batch windows "
           "(prefill) left out" if s["rounds_from"] == "run_batch"
           else "the whole trace divided by the profiled steps (no Python stacks)")
    out = [f"## {title}\n\n{s['rounds']} rounds ({how}); Python stacks: {'yes' if s['with_stack'] else 'no'}; "
           f"gaps: GPU idle stretches of at least {s['gap_min_us']:.0f} us.\n\n"]
    out.append(table(["per round (us)", "median", "mean", "p10", "p90"],
                     ([k, *(_f(s["per_round"][k][q]) for q in ("median", "mean", "p10", "p90"))]
                      for k in PER_ROUND_ROWS if k in s["per_round"])))
    total = s["gpu_kernel_us_per_round"] or 0.0
    out.append("\n### GPU time per round by group\n\n")
    out.append(table(["group", "us/round", "share"],
                     ([g, _f(v), f"{v / total:.1%}" if total else "-"] for g, v in s["gpu_groups_us_per_round"].items())))
    sections = (
        ("GPU kernels", "kernels", ["kernel", "group", "us/round", "launches/round", "share"],
         lambda r: [r["name"][:110], r["group"], _f(r["us_per_round"]), _f(r["count_per_round"], 2), f"{r['share']:.1%}"]),
        ("Scheduler Python frames by self time", "python_frames", ["frame", "self us/round", "total us/round", "calls/round"],
         lambda r: [r["name"][:110], _f(r["self_us_per_round"]), _f(r["total_us_per_round"]), _f(r["count_per_round"], 2)]),
        ("GPU idle by what the scheduler was in (innermost host event)", "idle_gaps_by_host_event",
         ["host event", "idle us/round"], lambda r: [r["name"][:110], _f(r["us_per_round"])]),
        ("GPU idle by the scheduler's innermost Python frame", "idle_gaps_by_python_frame",
         ["frame", "idle us/round"], lambda r: [r["name"][:110], _f(r["us_per_round"])]),
    )
    for heading, key, headers, cells in sections:
        if s.get(key):
            out.append(f"\n### {heading}\n\n")
            out.append(table(headers, (cells(r) for r in s[key])))
    for phase, ph in (s.get("phases") or {}).items():
        out.append(f"\n### Host time in `{phase}`: {_f(ph['us_per_round'])} us/round; the outermost events inside\n\n")
        out.append(table(["event", "us/round", "calls/round"],
                         ([r["name"][:110], _f(r["us_per_round"]), _f(r["count_per_round"], 2)] for r in ph["children"])))
    return "".join(out)


def compare_markdown(summaries: Sequence[dict], names: Sequence[str]) -> str:
    """Medians per round and GPU groups side by side, the first summary the reference."""
    out = ["## Per round, side by side\n\n"]
    rows = [[k, *(_f(s["per_round"].get(k, {}).get("median")) for s in summaries)] for k in PER_ROUND_ROWS]
    rows += [[f"GPU {g}", *(_f(s["gpu_groups_us_per_round"].get(g)) for s in summaries)] for g in GROUPS]
    rows += [[f"host in {p}", *(_f((s.get("phases") or {}).get(p, {}).get("us_per_round")) for s in summaries)]
             for p in PHASES if any(p in (s.get("phases") or {}) for s in summaries)]
    rows.append(["rounds", *(str(s["rounds"]) for s in summaries)])
    out.append(table(["us per round (median; groups: mean)", *names], rows))
    return "".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.round_profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summarize", help="one trace (.json or .json.gz)")
    s.add_argument("trace")
    s.add_argument("--rounds", type=int, help="profiled steps, for a trace without Python stacks")
    s.add_argument("--out")
    s.add_argument("--md")
    s.add_argument("--title")
    c = sub.add_parser("compare", help="summary JSONs side by side")
    c.add_argument("summaries", nargs="+")
    c.add_argument("--names", nargs="+")
    c.add_argument("--md")
    a = p.parse_args(argv)
    if a.cmd == "summarize":
        summary = summarize(a.trace, rounds=a.rounds)
        if a.out:
            Path(a.out).write_text(json.dumps(summary, indent=1) + "\n")
        text = markdown(summary, a.title or Path(a.trace).name)
    else:
        loaded = [json.loads(Path(x).read_text()) for x in a.summaries]
        text = compare_markdown(loaded, a.names or [Path(x).stem for x in a.summaries])
    if a.md:
        Path(a.md).write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
