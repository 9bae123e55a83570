"""How far apart two configurations' acceptance may be on the same prompts before it means something.

Greedy acceptance on a small, unsure model moves with numerics alone (page-size dependent
reductions, batch mixes): a tie broken differently changes the rest of an output. The noise is
measured from the run itself, as the standard error of paired differences: per question, not per
request, because a question's second turn continues its first; and with a Bonferroni share of
the family's error rate, because a suite judges many pairs at once and 2 SE per pair fails one
in twenty by chance.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Mapping, Sequence

# Counts per request key "<question>/<turn>": [completion_tokens, spec_verify_ct].
Counts = Mapping[str, Sequence[int]]


def spec_counts(keyed_records) -> dict:
    """``{key: [completion_tokens, spec_verify_ct]}`` of ``(key, request record)`` pairs that verified."""
    return {key: [r.get("completion_tokens"), r.get("spec_verify_ct")] for key, r in keyed_records
            if r.get("spec_verify_ct")}


def question_of(key: str) -> str:
    return key.split("/", 1)[0]


def paired_diffs(a: Counts, b: Counts) -> list:
    """Per question, acceptance of ``a`` minus ``b`` over the turns both served."""
    sums: dict = {}
    for key in a.keys() & b.keys():
        if not (a[key][1] and b[key][1]):
            continue
        s = sums.setdefault(question_of(key), [0, 0, 0, 0])
        s[0] += a[key][0]
        s[1] += a[key][1]
        s[2] += b[key][0]
        s[3] += b[key][1]
    return [s[0] / s[1] - s[2] / s[3] for s in sums.values()]


def std_error(diffs: Sequence[float]) -> float:
    n = len(diffs)
    if n < 2:
        return 0.0
    mean = sum(diffs) / n
    return (sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) ** 0.5


def z_for(family_alpha: float, tests: int, two_sided: bool = True) -> float:
    """The normal quantile that keeps the chance of any false alarm among ``tests`` at ``family_alpha``."""
    share = family_alpha / max(1, tests) / (2 if two_sided else 1)
    return NormalDist().inv_cdf(1 - share)


def band(reference: float, diffs: Sequence[float] | None, *, tests: int, tol: float = 0.03,
         family_alpha: float = 0.05, two_sided: bool = True) -> float:
    """The allowed gap: ``tol`` of ``reference``, or the paired noise where that is larger."""
    noise = z_for(family_alpha, tests, two_sided) * std_error(diffs) if diffs else 0.0
    return max(tol * reference, noise)


def sign_test_p(worse: int, better: int) -> float:
    """One-sided sign test: the chance of ``worse`` or more of ``worse + better`` paired
    differences going one way when either way is equally likely."""
    n = worse + better
    return sum(math.comb(n, k) for k in range(worse, n + 1)) / 2 ** n
