"""The parallel-1 latency fits and one-token probes of paired A/B recordings (``bench.ab``'s ab.json),
B minus A within each round, pooled: the v1 worker's per-request and per-round cost questions
(runs 14-16, ``scripts/device/call_ab.sh``'s ``MAX_NEW=1``).

  python -m bench.ab_fits run16/ab/ab.json ... [--probe]

``--fits`` (default): per pair the fits' (latency = per request + per round x rounds) B minus A with
their mean, a 95% t-interval over the paired passes, and the correlation of the two differences:
near -1 the fit cannot tell a per-request cost from a per-round one. ``--probe``: the per-request time
of one-token recordings at parallel 1 as B minus A within each round, measured directly.
"""

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from sglang_eagle_paged.bench.stats import t_two_sided


def _mean_interval(xs: list) -> dict:
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return {"n": len(xs), "mean": mean, "low": None, "high": None}
    half = t_two_sided(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return {"n": len(xs), "mean": mean, "low": mean - half, "high": mean + half}


def _correlation(xs: list, ys: list) -> float | None:
    try:
        return statistics.correlation(xs, ys)
    except statistics.StatisticsError:  # fewer than two pairs, or one side constant
        return None


def _parallel1_rounds(paths: list, value, keep=lambda rec: True) -> dict:
    """{(A name, B name): [(A's value, B's value), one per round]} over the recordings ``keep``
    accepts: each round's two parallel-1 passes without errors, where ``value(pass)`` gives one for both."""
    groups = {}
    for path in paths:
        rec = json.loads(Path(path).read_text())
        if not keep(rec):
            continue
        for pair in rec["pairs"].values():
            vals = {(p["round"], p["side"]): value(p) for p in pair.get("passes", [])
                    if p.get("parallel") == 1 and not p.get("errors")}
            rounds = [(vals[r, "A"], vals[r, "B"]) for r in sorted({r for r, _ in vals})
                      if vals.get((r, "A")) is not None and vals.get((r, "B")) is not None]
            if rounds:
                groups.setdefault((pair["A"]["name"], pair["B"]["name"]), []).extend(rounds)
    return groups


def fit_differences(paths: list) -> list:
    """Per pair (A and B names): the parallel-1 latency fits' B minus A within each round, pooled
    over the recordings; ``per_request_ms`` and ``per_round_ms`` with 95% t-intervals."""
    rows = []
    for (a, b), rounds in sorted(_parallel1_rounds(paths, lambda p: p.get("latency_fit")).items()):
        req = [fb["per_request_ms"] - fa["per_request_ms"] for fa, fb in rounds]
        rnd = [fb["per_round_ms"] - fa["per_round_ms"] for fa, fb in rounds]
        rows.append({"A": a, "B": b, "passes": len(rounds), "per_request_ms": _mean_interval(req),
                     "per_round_ms": _mean_interval(rnd), "correlation": _correlation(req, rnd)})
    return rows


def probe_differences(paths: list) -> list:
    """Per pair: the per-request time of one-token recordings (the probe, ``MAX_NEW=1``), B minus A
    within each round at parallel 1, pooled, with a 95% t-interval. One request at a time and one
    output token each, so a pass's milliseconds per request are 1000 over its output tokens per
    second: admission, prefill, draft extend, finish and the client's round trip, no verify round."""
    ms = lambda p: 1000.0 / p["output_throughput"] if p.get("output_throughput") else None  # noqa: E731
    groups = _parallel1_rounds(paths, ms, keep=lambda rec: rec.get("max_new_tokens") == 1)
    return [{"A": a, "B": b, "per_request_ms": _mean_interval([mb - ma for ma, mb in rounds])}
            for (a, b), rounds in sorted(groups.items())]


def probe_markdown(rows: list) -> str:
    lines = ["| A | B | paired passes (one token per request, parallel 1) | per request ms, B - A (95%) |",
             "|---|---|---|---|"]
    for r in rows:
        s = r["per_request_ms"]
        span = "" if s["low"] is None else f" ({s['low']:+.2f} to {s['high']:+.2f})"
        lines.append(f"| {r['A']} | {r['B']} | {s['n']} | {s['mean']:+.2f}{span} |")
    return "\n".join(lines) + "\n"


def fits_markdown(rows: list) -> str:
    def cell(s: dict, digits: int) -> str:
        if s["low"] is None:
            return f"{s['mean']:+.{digits}f}"
        return f"{s['mean']:+.{digits}f} ({s['low']:+.{digits}f} to {s['high']:+.{digits}f})"

    lines = ["| A | B | paired passes | per request ms, B - A (95%) | per round ms, B - A (95%) | correlation |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        corr = "-" if r["correlation"] is None else f"{r['correlation']:.2f}"
        lines.append(f"| {r['A']} | {r['B']} | {r['passes']} | {cell(r['per_request_ms'], 1)} | "
                     f"{cell(r['per_round_ms'], 3)} | {corr} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="ab.json files")
    ap.add_argument("--probe", action="store_true", help="the one-token recordings' per-request time instead")
    args = ap.parse_args(argv)
    if args.probe:
        print(probe_markdown(probe_differences(args.paths)), end="")
    else:
        print(fits_markdown(fit_differences(args.paths)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
