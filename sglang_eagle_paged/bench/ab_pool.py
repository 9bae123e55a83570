"""Pool paired A/B recordings (``bench.ab``'s ab.json) of the same pairs across calls or runs.

  python -m sglang_eagle_paged.bench.ab_pool run10/ab_testbed/ab.json run11/ab_testbed_p64/ab.json ... [--json OUT]

One device call fits about 12 ABBA rounds, and the per-round ratios of a host-bound pair
spread by +-15%, so one call cannot resolve a few percent. Here the per-round ratios of
every recording of a pair (same A and B configuration names, same parallelism) are pooled.
Two summaries are given, because the recordings may come from different machines or
package builds:

- **rounds pooled**: every round as one sample, the geometric mean with its 95% t-interval
  (``bench.ab.ratio_stats``). Narrow, but it ignores differences between recordings.
- **recordings as units**: one geometric-mean ratio per recording, with a t-interval over
  recordings. Wide with few recordings, but honest when the machine changes between them.

``--fits`` adds, per pair, the parallel-1 latency fits (``latency_fit`` of each pass: latency =
per request + per round x rounds) as B minus A within each round, with their mean, a 95%
t-interval over the paired passes, and the correlation of the two differences: near -1 the fit
cannot tell a per-request cost from a per-round one (the round counts vary too little).

``--probe`` adds, per pair, the per-request time of one-token recordings (``max_new_tokens`` 1,
``call_ab.sh``'s ``MAX_NEW=1``) at parallel 1 as B minus A within each round: the per-request
cost measured directly, without the fits' trade-off.

:class:`UntilResolved` is the same pooling while a pair is measured: ``bench.ab --until-pct P --prior
FILE`` stops the pair once its rounds with the earlier ones (:func:`load_prior`) resolve +-P%.
"""

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from sglang_eagle_paged.bench.ab import ratio_stats, t95
from sglang_eagle_paged.bench.mtbench import in_flight


def pair_key(a: str, b: str, tokens, parallel: int, conversations: int | None) -> tuple:
    """What pools together: A and B names, output tokens, parallelism and requests in flight
    (``conversations`` cap them; None: not recorded, the parallelism)."""
    return (a, b, tokens, parallel, in_flight(parallel, conversations) if conversations else parallel)


def pair_rounds(paths: list) -> dict:
    """{(A name, B name, output tokens, parallel, requests in flight): [(path, per-round ratios), ...]},
    in the order of ``paths``. The output length is part of the key: a one-token probe is another
    workload; so are the requests in flight: 64 client threads over 32 conversations keep 32."""
    groups = {}
    for path in paths:
        rec = json.loads(Path(path).read_text())
        for pair in rec["pairs"].values():
            for parallel, summary in pair["summary"].items():
                if summary.get("ratios"):
                    key = pair_key(pair["A"]["name"], pair["B"]["name"], rec.get("max_new_tokens"), int(parallel),
                                   rec.get("num_questions"))
                    groups.setdefault(key, []).append((str(path), summary["ratios"]))
    return groups


def rounds_to_resolve(ratios: list, half_width: float = 0.03) -> int | None:
    """Rounds whose 95% interval would reach +-``half_width`` (0.03: +-3%) at the scatter of
    ``ratios`` (the standard deviation of their logs, as :func:`.ab.ratio_stats` reads them), or None
    with fewer than three rounds to estimate it from. The plan for the next recording, not a result."""
    logs = [math.log(r) for r in ratios if r and r > 0]
    if len(logs) < 3:
        return None
    sd, target = statistics.stdev(logs), math.log1p(half_width)
    n = 2
    while t95(n - 1) * sd / math.sqrt(n) > target:
        n += 1
    return n


def pool(groups: dict) -> list:
    rows = []
    for (a, b, tokens, parallel, flying), recs in sorted(
            groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0, -kv[0][3], -kv[0][4])):
        everything = [r for _, ratios in recs for r in ratios]
        units = [ratio_stats([1.0] * len(ratios), ratios)["ratio"] for _, ratios in recs]
        rows.append({"A": a, "B": b, "tokens": tokens, "parallel": parallel, "in_flight": flying,
                     "recordings": [p for p, _ in recs],
                     "per_recording": units,
                     "rounds_pooled": ratio_stats([1.0] * len(everything), everything),
                     "rounds_for_3pct": rounds_to_resolve(everything),
                     "recordings_as_units": ratio_stats([1.0] * len(units), units)})
    return rows


def load_prior(paths: list) -> dict:
    """{pair key as in :func:`pair_rounds`: every per-round ratio} of earlier recordings: ``bench.ab``'s
    ab.json files and this module's ``--json`` output (its pooled rows keep every round's ratio)."""
    out = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        if isinstance(data, dict) and "pairs" in data:
            for key, recs in pair_rounds([path]).items():
                out.setdefault(key, []).extend(r for _, ratios in recs for r in ratios)
            continue
        for row in data["pooled"] if isinstance(data, dict) else data:
            key = (row["A"], row["B"], row.get("tokens"), row["parallel"], row.get("in_flight", row["parallel"]))
            out.setdefault(key, []).extend(row["rounds_pooled"]["ratios"])
    return out


class UntilResolved:
    """When a pair being measured may stop: once its rounds, pooled with the earlier recordings'
    rounds of the same key (``prior``, :func:`load_prior`), give a 95% interval within
    +-``half_width`` of the ratio on both sides, with at least ``min_rounds`` in all and three here.

    The rule looks at the interval's width, never at where the ratio lies, so it does not steer the
    ratio; the width is itself estimated, so stopping when it first looks narrow covers a little
    less than 95%. The device's time then goes to the next pair instead of rounds nobody needs."""

    def __init__(self, prior: dict, half_width: float, min_rounds: int = 10):
        self.prior, self.half_width, self.min_rounds = prior, half_width, min_rounds

    def earlier(self, *key) -> list:
        """The prior rounds of :func:`pair_key` ``(*key)``."""
        return self.prior.get(pair_key(*key), [])

    def check(self, key: tuple, ratios: list) -> dict | None:
        """The pooled statistics where the rounds so far (``ratios``) and the prior ones of
        :func:`pair_key` ``(*key)`` resolve +-``half_width``; else None."""
        earlier = self.earlier(*key)
        pooled = [*earlier, *ratios]
        if len(ratios) < 3 or len(pooled) < self.min_rounds:
            return None
        s = ratio_stats([1.0] * len(pooled), pooled)
        if not s.get("low") or s.get("high") is None:
            return None
        if max(s["high"] / s["ratio"], s["ratio"] / s["low"]) - 1 > self.half_width:
            return None
        return {"half_width": self.half_width, "prior_rounds": len(earlier), "rounds": len(pooled),
                "ratio": s["ratio"], "low": s["low"], "high": s["high"]}


def _mean_interval(xs: list) -> dict:
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return {"n": len(xs), "mean": mean, "low": None, "high": None}
    half = t95(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
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


def _interval(s: dict) -> str:
    if s["ratio"] is None:
        return "not measured"
    high = f"{s['high']:.3f}" if s["high"] is not None else "inf"
    return f"{s['ratio']:.3f}x ({s['low']:.3f}-{high})"


def markdown(rows: list) -> str:
    lines = ["| A | B | tokens | parallel (in flight) | recordings | per recording | rounds pooled | 95% (rounds) | "
             "recordings as units, 95% | rounds for +-3% |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, u = r["rounds_pooled"], r["recordings_as_units"]
        flying = r.get("in_flight", r["parallel"])
        par = f"{r['parallel']}" + (f" ({flying} in flight)" if flying != r["parallel"] else "")
        lines.append(f"| {r['A']} | {r['B']} | {r.get('tokens') or '-'} | {par} | {len(r['recordings'])} | "
                     f"{', '.join(f'{x:.3f}' for x in r['per_recording'])} | {s['rounds']} rounds | "
                     f"{_interval(s)} | {_interval(u) if u['rounds'] > 1 else '- (one recording)'} | "
                     f"{r.get('rounds_for_3pct') or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="ab.json files")
    ap.add_argument("--json", help="also write the pooled rows here")
    ap.add_argument("--fits", action="store_true", help="also the parallel-1 latency fits, B minus A")
    ap.add_argument("--probe", action="store_true",
                    help="also the per-request time of one-token recordings at parallel 1, B minus A")
    args = ap.parse_args(argv)
    rows = pool(pair_rounds(args.paths))
    fits = fit_differences(args.paths) if args.fits else None
    probe = probe_differences(args.paths) if args.probe else None
    if args.json:
        extra = {k: v for k, v in (("fits", fits), ("probe", probe)) if v is not None}
        Path(args.json).write_text(json.dumps({"pooled": rows, **extra} if extra else rows, indent=1))
    print(markdown(rows), end="")
    if fits:
        print("\n" + fits_markdown(fits), end="")
    if probe:
        print("\n" + probe_markdown(probe), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
