"""Pool paired A/B recordings (``bench.ab``'s ab.json) of the same pairs across calls or runs.

  python -m sglang_eagle_paged.bench.ab_pool run25/ab/ab.json run26/ab/ab.json ... [--json OUT]

One device call fits about 12 ABBA rounds, and the per-round ratios of a host-bound pair spread
by +-15%, so one call cannot resolve a few percent. Here the per-round ratios of every recording
of a pair (same A and B configuration names, output tokens, parallelism and requests in flight)
are pooled. Each recording is one pair of servers, and pairs differ beyond their rounds' noise
(another start-up, machine or build), so the rounds are not pooled as if independent: each
recording gives its mean, and the means are pooled with random effects (:func:`.stats.pooled`:
DerSimonian-Laird, the modified Hartung-Knapp interval), with the heterogeneity between the recordings printed (Cochran's Q on its degrees of freedom,
its p-value, tau^2). A verdict says "level" only where the whole interval lies within +-3%.

:class:`UntilResolved` is the same pooling while a pair is measured: ``bench.ab --until-pct P --prior
FILE`` stops the pair once its rounds, with the earlier recordings (:func:`load_prior`), resolve +-P%.
"""

import argparse
import json
import sys
from pathlib import Path

from sglang_eagle_paged.bench import stats
from sglang_eagle_paged.bench.mtbench import in_flight


def pair_key(a: str, b: str, tokens, parallel: int, conversations: int | None) -> tuple:
    """What pools together: A and B names, output tokens, parallelism and requests in flight
    (``conversations`` cap them; None: not recorded, the parallelism)."""
    return (a, b, tokens, parallel, in_flight(parallel, conversations) if conversations else parallel)


def pair_rounds(paths: list) -> dict:
    """{(A name, B name, output tokens, parallel, requests in flight): [(path, per-round ratios), ...]},
    in the order of ``paths``: one entry per server pair. The output length is part of the key: a
    one-token probe is another workload; so are the requests in flight: 64 client threads over 32
    conversations keep 32."""
    groups = {}
    for path in paths:
        rec = json.loads(Path(path).read_text())
        for pair in rec["pairs"].values():
            for parallel, summary in (pair.get("summary") or {}).items():  # none: cut before its first round
                if summary.get("ratios"):
                    key = pair_key(pair["A"]["name"], pair["B"]["name"], rec.get("max_new_tokens"), int(parallel),
                                   rec.get("num_questions"))
                    groups.setdefault(key, []).append((str(path), summary["ratios"]))
    return groups


def pool(groups: dict) -> list:
    rows = []
    for (a, b, tokens, parallel, flying), recs in sorted(
            groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0, -kv[0][3], -kv[0][4])):
        rows.append({"A": a, "B": b, "tokens": tokens, "parallel": parallel, "in_flight": flying,
                     "recordings": [p for p, _ in recs],
                     "per_recording": [stats.ratio_interval(ratios)["ratio"] for _, ratios in recs],
                     "rounds": [list(ratios) for _, ratios in recs],
                     "pooled": stats.pooled([ratios for _, ratios in recs]),
                     "rounds_for_3pct": stats.rounds_to_resolve([r for _, ratios in recs for r in ratios])})
    return rows


def load_prior(paths: list) -> dict:
    """{pair key as in :func:`pair_rounds`: [per-round ratios of one server pair, ...]} of earlier
    recordings: ``bench.ab``'s ab.json files and this module's ``--json`` output."""
    out = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        if isinstance(data, dict) and "pairs" in data:
            for key, recs in pair_rounds([path]).items():
                out.setdefault(key, []).extend(list(ratios) for _, ratios in recs)
            continue
        for row in data["pooled"] if isinstance(data, dict) else data:
            if "rounds" not in row:  # written before the pooling went over server pairs
                raise SystemExit(f"{path}: pooled rows without each recording's rounds; pass the ab.json files")
            key = (row["A"], row["B"], row.get("tokens"), row["parallel"], row.get("in_flight", row["parallel"]))
            out.setdefault(key, []).extend(row["rounds"])
    return out


class UntilResolved:
    """When a pair being measured may stop: once its rounds, pooled over server pairs with the
    earlier recordings of the same key (``prior``, :func:`load_prior`) as :func:`pool` pools them,
    give a 95% interval within +-``half_width`` of the ratio on both sides, with at least
    ``min_rounds`` in all and three here.

    The rule looks at the interval's width, never at where the ratio lies, so it does not steer the
    ratio; the width is itself estimated, so stopping when it first looks narrow covers a little
    less than 95%. The device's time then goes to the next pair instead of rounds nobody needs."""

    def __init__(self, prior: dict, half_width: float, min_rounds: int = 10):
        self.prior, self.half_width, self.min_rounds = prior, half_width, min_rounds

    def earlier(self, *key) -> list:
        """The prior server pairs' rounds of :func:`pair_key` ``(*key)``."""
        return self.prior.get(pair_key(*key), [])

    def check(self, key: tuple, ratios: list) -> dict | None:
        """The pooled statistics where the rounds so far (``ratios``) and the prior ones of
        :func:`pair_key` ``(*key)`` resolve +-``half_width``; else None."""
        earlier = self.earlier(*key)
        if len(ratios) < 3 or sum(map(len, earlier)) + len(ratios) < self.min_rounds:
            return None
        s = stats.pooled([*earlier, ratios])
        width = stats.half_width(s)
        if width is None or width > self.half_width:
            return None
        return {"half_width": self.half_width, "prior_rounds": sum(map(len, earlier)), "rounds": s["rounds"],
                "pairs": s["pairs"], "ratio": s["ratio"], "low": s["low"], "high": s["high"]}


def heterogeneity(s: dict) -> str:
    """Cochran's Q of the recordings, its degrees of freedom and p-value, and tau^2 (one pair: -)."""
    if "q" not in s:
        return "- (one server pair)"
    return f"Q {s['q']:.1f} on {s['df']}, p {s['p']:.3f}, tau^2 {s['tau2']:.2g}"


def interval_text(s: dict) -> str:
    if s["ratio"] is None:
        return "not measured"
    high = f"{s['high']:.3f}" if s["high"] is not None else "inf"
    return f"{s['ratio']:.3f}x ({s['low']:.3f}-{high})"


def markdown(rows: list) -> str:
    lines = ["| A | B | tokens | parallel (in flight) | server pairs | per pair | rounds | B/A (95%, over pairs) | "
             "verdict | heterogeneity | rounds for +-3% |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r["pooled"]
        flying = r.get("in_flight", r["parallel"])
        par = f"{r['parallel']}" + (f" ({flying} in flight)" if flying != r["parallel"] else "")
        lines.append(f"| {r['A']} | {r['B']} | {r.get('tokens') or '-'} | {par} | {len(r['recordings'])} | "
                     f"{', '.join(f'{x:.3f}' for x in r['per_recording'])} | {s['rounds']} | {interval_text(s)} | "
                     f"{s['verdict']} | {heterogeneity(s)} | {r.get('rounds_for_3pct') or '-'} |")
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
