"""Pool paired A/B recordings (``bench.ab``'s ab.json) of the same pairs across calls or runs.

  python scripts/ab_pool.py run10/ab_testbed/ab.json run11/ab_testbed_p64/ab.json ... [--json OUT]

One device call fits about 12 ABBA rounds, and the per-round ratios of a host-bound pair
spread by +-15%, so one call cannot resolve a few percent. Here the per-round ratios of
every recording of a pair (same A and B configuration names, same parallelism) are pooled.
Two summaries are given, because the recordings may come from different machines or
package builds:

- **rounds pooled**: every round as one sample, the geometric mean with its 95% t-interval
  (``bench.ab.ratio_stats``). Narrow, but it ignores differences between recordings.
- **recordings as units**: one geometric-mean ratio per recording, with a t-interval over
  recordings. Wide with few recordings, but honest when the machine changes between them.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_eagle_paged.bench.ab import ratio_stats  # noqa: E402


def pair_rounds(paths: list) -> dict:
    """{(A name, B name, parallel): [(path, per-round ratios), ...]}, in the order of ``paths``."""
    groups = {}
    for path in paths:
        rec = json.loads(Path(path).read_text())
        for pair in rec["pairs"].values():
            for parallel, summary in pair["summary"].items():
                if summary.get("ratios"):
                    key = (pair["A"]["name"], pair["B"]["name"], int(parallel))
                    groups.setdefault(key, []).append((str(path), summary["ratios"]))
    return groups


def pool(groups: dict) -> list:
    rows = []
    for (a, b, parallel), recs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], -kv[0][2])):
        everything = [r for _, ratios in recs for r in ratios]
        units = [ratio_stats([1.0] * len(ratios), ratios)["ratio"] for _, ratios in recs]
        rows.append({"A": a, "B": b, "parallel": parallel, "recordings": [p for p, _ in recs],
                     "per_recording": units,
                     "rounds_pooled": ratio_stats([1.0] * len(everything), everything),
                     "recordings_as_units": ratio_stats([1.0] * len(units), units)})
    return rows


def _interval(s: dict) -> str:
    if s["ratio"] is None:
        return "not measured"
    high = f"{s['high']:.3f}" if s["high"] is not None else "inf"
    return f"{s['ratio']:.3f}x ({s['low']:.3f}-{high})"


def markdown(rows: list) -> str:
    lines = ["| A | B | parallel | recordings | per recording | rounds pooled | 95% (rounds) | "
             "recordings as units, 95% |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, u = r["rounds_pooled"], r["recordings_as_units"]
        lines.append(f"| {r['A']} | {r['B']} | {r['parallel']} | {len(r['recordings'])} | "
                     f"{', '.join(f'{x:.3f}' for x in r['per_recording'])} | {s['rounds']} rounds | "
                     f"{_interval(s)} | {_interval(u)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="ab.json files")
    ap.add_argument("--json", help="also write the pooled rows here")
    args = ap.parse_args(argv)
    rows = pool(pair_rounds(args.paths))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(markdown(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
