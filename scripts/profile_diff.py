"""Where one profiled configuration spends more host time than another, per scheduler step.

``bench.e2e --profile A,B`` records, for each profiled configuration, the summary of a torch
profiler trace (``profile`` in ``e2e.json``): wall time, syncs, and per-name totals of CPU ops,
CUDA runtime calls, GPU kernels and (with Python stacks) Python functions. Steps differ between
two traces (a prefill more or less), so each total is divided by the trace's own step count.
This prints, per category, the names whose per-step time differs most between B and A:

    python scripts/profile_diff.py bench/results/.../e2e.json on_p1 on_p64 [--top 25] [--json out.json]

Names present on one side only (SGLang's page-1 helpers against its paged ones, our hooks) are
the interesting rows; the Python rows are inclusive times, so a caller's row contains its callees'.
"""

import argparse
import gzip
import json
import sys
from pathlib import Path

CATEGORIES = ("python", "cpu_ops", "cuda_runtime", "gpu_kernels")


def load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def per_step(profile: dict, category: str) -> dict:
    """name -> (total us per step, calls per step)."""
    steps = max(1, int(profile.get("steps") or 1))
    return {row["name"]: (row.get("total_us", 0.0) / steps, row.get("count", 0) / steps)
            for row in profile.get(category) or []}


def diff(a: dict, b: dict, top: int = 25) -> dict:
    """Per category, the ``top`` names by |B - A| per step, largest first; and the headline numbers."""
    steps_a, steps_b = max(1, a.get("steps") or 1), max(1, b.get("steps") or 1)
    out = {"headline": {
        "steps": [a.get("steps"), b.get("steps")],
        "wall_ms_per_step": [round(a["wall_ms"] / steps_a, 3), round(b["wall_ms"] / steps_b, 3)],
        "gpu_busy_ms_per_step": [round(a.get("gpu_busy_ms", 0) / steps_a, 3), round(b.get("gpu_busy_ms", 0) / steps_b, 3)],
        "syncs_per_step": [round((a.get("syncs") or 0) / steps_a, 2), round((b.get("syncs") or 0) / steps_b, 2)],
        "with_stack": [a.get("with_stack"), b.get("with_stack")],
    }}
    for category in CATEGORIES:
        pa, pb = per_step(a, category), per_step(b, category)
        rows = []
        for name in set(pa) | set(pb):
            (ta, ca), (tb, cb) = pa.get(name, (0.0, 0.0)), pb.get(name, (0.0, 0.0))
            rows.append({"name": name, "us_A": round(ta, 1), "us_B": round(tb, 1), "delta_us": round(tb - ta, 1),
                         "calls_A": round(ca, 2), "calls_B": round(cb, 2)})
        rows.sort(key=lambda r: -abs(r["delta_us"]))
        out[category] = rows[:top]
    return out


def markdown(result: dict, name_a: str, name_b: str) -> str:
    h = result["headline"]
    lines = [f"{name_b} against {name_a}, per scheduler step ({h['steps'][0]} and {h['steps'][1]} steps; "
             f"Python stacks: {h['with_stack'][0]} / {h['with_stack'][1]})", "",
             f"- wall: {h['wall_ms_per_step'][0]} -> {h['wall_ms_per_step'][1]} ms",
             f"- GPU busy: {h['gpu_busy_ms_per_step'][0]} -> {h['gpu_busy_ms_per_step'][1]} ms",
             f"- syncs: {h['syncs_per_step'][0]} -> {h['syncs_per_step'][1]}"]
    for category in CATEGORIES:
        rows = result.get(category) or []
        if not rows:
            continue
        lines += ["", f"## {category}", "", f"| name | {name_a} us | {name_b} us | delta us | calls {name_a} | calls {name_b} |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            name = r["name"] if len(r["name"]) <= 100 else r["name"][:97] + "..."
            lines.append(f"| `{name}` | {r['us_A']} | {r['us_B']} | {r['delta_us']:+} | {r['calls_A']} | {r['calls_B']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("e2e_json", help="bench.e2e's e2e.json (or .json.gz)")
    ap.add_argument("a", help="the baseline configuration's name, e.g. on_p1")
    ap.add_argument("b", help="the configuration compared with it, e.g. on_p64")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    runs = load(args.e2e_json)
    missing = [n for n in (args.a, args.b) if not (runs.get(n) or {}).get("profile")]
    if missing:
        print(f"no profile recorded for {missing} in {args.e2e_json}", file=sys.stderr)
        return 2
    result = diff(runs[args.a]["profile"], runs[args.b]["profile"], args.top)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(markdown(result, args.a, args.b))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
