"""The statistics every reported figure comes from: ratio intervals, pooling over server pairs,
heterogeneity and equivalence.

- :func:`t_quantile`: Student's t quantile, exact (the regularized incomplete beta inverted by
  bisection), for any degrees of freedom; :func:`chi2_sf` the chi-square tail for heterogeneity.
- :func:`ratio_interval`: B/A over the rounds of one server pair, the geometric mean of the
  per-round ratios with a t-interval over rounds (rounds of one pair share its two servers).
- :func:`pooled`: rounds from several server pairs (recordings). Each pair gives its mean log ratio
  and that mean's variance; pairs differ beyond their rounds' noise (two servers of another start
  up, another machine, another build), so they are pooled with random effects
  (DerSimonian-Laird's between-pair variance tau^2), and the interval is the *modified*
  Hartung-Knapp one: a t quantile on (pairs - 1) degrees of freedom times the standard error from
  the larger of two variances of the pooled mean, Hartung-Knapp's (the weighted spread of the pairs'
  means about it) and DerSimonian-Laird's (1 / the sum of the weights). Plain Hartung-Knapp keeps its coverage with
  a few pairs where they scatter as their rounds predict; where a few pairs happen to agree more
  closely than that (Q below its degrees of freedom), its variance falls below what the rounds
  themselves allow and the interval gets narrower than the evidence, far narrower on two pairs.
  The floor (Knapp and Hartung 2003's truncation) never lets it go below DerSimonian-Laird's: where
  pairs agree by chance the interval errs wide, so a published figure never claims more than the
  rounds of its pairs show.
  Heterogeneity is reported: Cochran's Q, its degrees of freedom, its p-value, tau^2. One pair:
  its rounds' interval (the between-pair variation cannot be estimated, and the row says so).
- :func:`verdict`: "B >= A" or "B < A" where the whole interval lies on one side of 1, "level"
  only where the whole interval lies within +-``margin`` (an equivalence shown), else "not resolved".
"""

from __future__ import annotations

import math

LEVEL = 0.95
MARGIN = 0.03  # the equivalence margin the project states: +-3%
METHOD = ("random effects over server pairs (DerSimonian-Laird tau^2; modified Hartung-Knapp interval: "
          "HK's variance floored at DL's)")


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
                    -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (inf below one)."""
    if df < 1 or not 0.0 < p < 1.0:
        return math.inf if p >= 0.5 else -math.inf
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):  # to the last bit of a double
        mid = (lo + hi) / 2.0
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2.0


def t_two_sided(df: float, level: float = LEVEL) -> float:
    """The two-sided ``level`` quantile of t (12.706 for one degree of freedom at 95%)."""
    return t_quantile(0.5 + level / 2.0, df)


def chi2_sf(q: float, df: int) -> float:
    """P(chi-square with ``df`` degrees of freedom > ``q``): the regularized upper incomplete gamma."""
    a, x = df / 2.0, q / 2.0
    if x <= 0:
        return 1.0
    if x < a + 1.0:  # the series of the lower part
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-16:
            n += 1.0
            term *= x / n
            total += term
        return 1.0 - total * math.exp(-x + a * math.log(x) - math.lgamma(a))
    tiny, b = 1e-300, x + 1.0 - a  # the continued fraction of the upper part
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def _logs(ratios) -> list:
    return [math.log(r) for r in ratios if r and r > 0]


def _mean_var(logs: list) -> tuple:
    """Mean of ``logs`` and the variance of that mean (None for one value)."""
    n = len(logs)
    mean = sum(logs) / n
    if n < 2:
        return mean, None
    return mean, sum((v - mean) ** 2 for v in logs) / (n - 1) / n


def _interval(mean: float, se: float | None, df: float, level: float) -> tuple:
    half = t_two_sided(df, level) * se if se is not None else math.inf
    return math.exp(mean - half), math.exp(mean + half)


def verdict(low: float | None, high: float | None, margin: float = MARGIN) -> str:
    """What the interval shows: a side of 1, equivalence within +-``margin``, or nothing yet."""
    if low is None:
        return "not measured"
    high = math.inf if high is None else high
    if low >= 1 - margin and high <= 1 + margin:
        return f"level within +-{100 * margin:g}%"
    if low >= 1:
        return "B >= A"
    if high < 1:
        return "B < A"
    return f"not resolved (neither side of 1, nor within +-{100 * margin:g}%)"


def _row(mean: float, low: float, high: float, margin: float, **rest) -> dict:
    return {"ratio": round(math.exp(mean), 4), "low": round(low, 4),
            "high": round(high, 4) if math.isfinite(high) else None, **rest,
            "verdict": verdict(low, high if math.isfinite(high) else None, margin)}


def ratio_interval(ratios: list, level: float = LEVEL, margin: float = MARGIN) -> dict:
    """B/A per round of one server pair: geometric mean, t-interval over rounds, verdict."""
    logs = _logs(ratios)
    out = {"rounds": len(logs), "ratios": [round(r, 4) for r in ratios if r and r > 0]}
    if not logs:
        return {**out, "ratio": None, "low": None, "high": None, "verdict": "not measured"}
    mean, var = _mean_var(logs)
    low, high = _interval(mean, None if var is None else math.sqrt(var), len(logs) - 1, level)
    return _row(mean, low, high, margin, **out)


def ratio_stats(a: list, b: list, level: float = LEVEL, margin: float = MARGIN) -> dict:
    """:func:`ratio_interval` of B/A from each round's A and B (a round missing either is left out)."""
    return ratio_interval([y / x for x, y in zip(a, b) if x and y], level, margin)


def pooled(groups: list, level: float = LEVEL, margin: float = MARGIN) -> dict:
    """Per-round ratios of several server pairs (``groups``: one list per pair) pooled with random
    effects (module docstring): the ratio, its interval, the verdict and the heterogeneity."""
    units = [_mean_var(_logs(g)) for g in groups if len(_logs(g)) >= 2]
    rounds = sum(len(_logs(g)) for g in groups)
    if len(units) < 2:
        one = ratio_interval([r for g in groups for r in g], level, margin)
        return {**one, "pairs": len(units), "rounds": rounds, "method": "one server pair: its rounds' t-interval"}
    y, v = [m for m, _ in units], [max(var, 1e-12) for _, var in units]
    w = [1.0 / x for x in v]
    fixed = sum(wi * yi for wi, yi in zip(w, y)) / sum(w)
    q = sum(wi * (yi - fixed) ** 2 for wi, yi in zip(w, y))
    df = len(y) - 1
    tau2 = max(0.0, (q - df) / (sum(w) - sum(wi * wi for wi in w) / sum(w)))
    ws = [1.0 / (x + tau2) for x in v]
    mean = sum(wi * yi for wi, yi in zip(ws, y)) / sum(ws)
    # Hartung-Knapp: the spread of the pairs' means about the pooled one, on (pairs - 1) df;
    # floored at DerSimonian-Laird's variance (the modification: module docstring says why)
    hk, dl = sum(wi * (yi - mean) ** 2 for wi, yi in zip(ws, y)) / (df * sum(ws)), 1.0 / sum(ws)
    low, high = _interval(mean, math.sqrt(max(hk, dl)), df, level)
    return _row(mean, low, high, margin, pairs=len(y), rounds=rounds,
                per_pair=[round(math.exp(m), 4) for m in y], q=round(q, 3), df=df, p=round(chi2_sf(q, df), 4),
                tau2=round(tau2, 6), floored=hk < dl, method=METHOD)


def half_width(s: dict) -> float | None:
    """The larger side of an interval relative to its ratio (0.03: +-3%), None where unbounded."""
    if not s.get("low") or s.get("high") is None:
        return None
    return max(s["high"] / s["ratio"], s["ratio"] / s["low"]) - 1


def rounds_to_resolve(ratios: list, width: float = MARGIN, level: float = LEVEL) -> int | None:
    """Rounds of one pair whose interval would reach +-``width`` at the scatter of ``ratios``, or
    None with fewer than three to estimate it from. The plan for the next recording, not a result."""
    logs = _logs(ratios)
    if len(logs) < 3:
        return None
    sd, target = math.sqrt(_mean_var(logs)[1] * len(logs)), math.log1p(width)
    n = 2
    while t_two_sided(n - 1, level) * sd / math.sqrt(n) > target:
        n += 1
    return n
