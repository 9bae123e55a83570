"""sglang_eagle_paged.bench.stats: exact t quantiles, the chi-square tail, pooling over server pairs
with random effects, and verdicts that say "level" only for an equivalence shown."""

import math
import statistics

import pytest

from sglang_eagle_paged.bench import stats

# Two-sided 95% (and one 99% one-sided) quantiles of Student's t from the printed tables
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 5: 2.571, 10: 2.228, 20: 2.086, 21: 2.080, 25: 2.060, 30: 2.042,
           40: 2.021, 60: 2.000, 120: 1.980}


@pytest.mark.parametrize("df, want", sorted(T_TABLE.items()))
def test_t_quantiles_match_the_printed_tables(df, want):
    assert stats.t_two_sided(df) == pytest.approx(want, abs=5e-4)


def test_t_quantiles_beyond_the_tables_and_in_the_tails():
    assert stats.t_quantile(0.99, 10) == pytest.approx(2.764, abs=5e-4)
    assert stats.t_quantile(0.025, 5) == pytest.approx(-2.571, abs=5e-4)
    assert stats.t_two_sided(10 ** 6) == pytest.approx(statistics.NormalDist().inv_cdf(0.975), abs=1e-5)
    # the quantile inverts the distribution function to the last digits, at any degrees of freedom
    for df in (1, 3, 7.5, 31, 200):
        for p in (0.6, 0.9, 0.975, 0.999):
            assert stats.t_cdf(stats.t_quantile(p, df), df) == pytest.approx(p, abs=1e-12)
    # 21-30 and beyond 30 degrees of freedom: not the 2.042 and 1.96 of a short table
    assert stats.t_two_sided(22) > stats.t_two_sided(30) > 2.042 - 1e-3 and stats.t_two_sided(31) > 2.03
    assert stats.t_two_sided(0) == math.inf


def test_the_regularized_incomplete_beta_and_the_chi_square_tail():
    assert stats.betainc(1, 1, 0.3) == pytest.approx(0.3)  # uniform
    assert stats.betainc(2, 3, 0.4) + stats.betainc(3, 2, 0.6) == pytest.approx(1.0)  # symmetry
    for q, df in ((3.841, 1), (5.991, 2), (18.307, 10), (43.773, 30)):  # the printed 5% points
        assert stats.chi2_sf(q, df) == pytest.approx(0.05, abs=2e-5)
    assert stats.chi2_sf(2.0, 2) == pytest.approx(math.exp(-1.0))
    assert stats.chi2_sf(0.0, 3) == 1.0


def test_one_pair_gets_its_rounds_t_interval():
    ratios = [0.95, 1.05, 1.01, 0.99]
    logs = [math.log(r) for r in ratios]
    half = 3.182 * statistics.stdev(logs) / 2
    s = stats.pooled([ratios])
    assert s["pairs"] == 1 and s["rounds"] == 4 and "one server pair" in s["method"]
    assert s["low"] == pytest.approx(math.exp(statistics.fmean(logs) - half), abs=1e-4)


def test_pairs_that_disagree_widen_the_interval_and_the_heterogeneity_says_so():
    agree = [[0.90, 0.92, 0.91, 0.89], [0.91, 0.90, 0.92, 0.90], [0.90, 0.91, 0.89, 0.92]]
    differ = [[0.80, 0.82, 0.81, 0.79], [0.91, 0.90, 0.92, 0.90], [1.00, 1.01, 0.99, 1.02]]
    a, d = stats.pooled(agree), stats.pooled(differ)
    assert a["tau2"] == 0 and a["p"] > 0.5 and d["tau2"] > 0 and d["p"] < 1e-6
    assert d["high"] / d["low"] > 5 * (a["high"] / a["low"] - 1) + 1  # far wider than the rounds alone say
    # the rounds pooled as independent would have claimed a narrow interval
    flat = stats.ratio_interval([r for g in differ for r in g])
    assert flat["high"] - flat["low"] < (d["high"] - d["low"]) / 3


def test_dersimonian_laird_by_hand():
    groups = [[0.8, 0.9, 1.0], [1.0, 1.1, 1.2], [0.9, 0.95, 1.0, 1.05]]
    y, v = [], []
    for g in groups:
        logs = [math.log(x) for x in g]
        y.append(statistics.fmean(logs))
        v.append(statistics.variance(logs) / len(logs))
    w = [1 / x for x in v]
    fixed = sum(a * b for a, b in zip(w, y)) / sum(w)
    q = sum(a * (b - fixed) ** 2 for a, b in zip(w, y))
    tau2 = max(0.0, (q - 2) / (sum(w) - sum(a * a for a in w) / sum(w)))
    ws = [1 / (x + tau2) for x in v]
    mu = sum(a * b for a, b in zip(ws, y)) / sum(ws)
    hk = sum(a * (b - mu) ** 2 for a, b in zip(ws, y)) / (2 * sum(ws))
    se = math.sqrt(max(hk, 1 / sum(ws)))
    s = stats.pooled(groups)
    assert s["q"] == pytest.approx(q, abs=1e-3) and s["tau2"] == pytest.approx(tau2, abs=1e-6)
    assert s["ratio"] == pytest.approx(math.exp(mu), abs=1e-4)
    assert s["low"] == pytest.approx(math.exp(mu - 4.3027 * se), abs=1e-4)
    assert s["p"] == pytest.approx(stats.chi2_sf(q, 2), abs=1e-4)


def test_level_only_where_the_whole_interval_lies_within_the_margin():
    assert stats.verdict(0.98, 1.02) == "level within +-3%"
    assert stats.verdict(0.945, 1.002).startswith("not resolved")  # a 5.5% loss is not excluded
    assert stats.verdict(1.01, 1.02) == "level within +-3%"  # inside the margin says more than "B >= A"
    assert stats.verdict(1.01, 1.2) == "B >= A" and stats.verdict(0.8, 0.99) == "B < A"
    assert stats.verdict(0.98, None).startswith("not resolved") and stats.verdict(None, None) == "not measured"


def test_rounds_to_resolve_uses_the_exact_quantile():
    ratios = [0.9, 1.0, 1.1, 0.95, 1.05]
    n = stats.rounds_to_resolve(ratios)
    sd = statistics.stdev(math.log(r) for r in ratios)
    assert stats.t_two_sided(n - 1) * sd / math.sqrt(n) <= math.log(1.03) < stats.t_two_sided(n - 2) * sd / math.sqrt(n - 1)
    assert stats.rounds_to_resolve([1.0, 1.1]) is None


def test_the_hartung_knapp_variance_is_floored_at_dersimonian_lairds():
    """Pairs whose means agree more closely than their rounds predict (Q below its degrees of freedom):
    plain Hartung-Knapp's variance falls below DerSimonian-Laird's 1 / sum(w), and the interval is the
    floored one (the modified Hartung-Knapp), never narrower than the rounds allow."""
    groups = [[0.80, 1.00, 1.20, 0.90, 1.10], [0.81, 1.01, 1.19, 0.91, 1.09], [0.79, 0.99, 1.21, 0.89, 1.11]]
    y, v = [], []
    for g in groups:
        logs = [math.log(x) for x in g]
        y.append(statistics.fmean(logs))
        v.append(statistics.variance(logs) / len(logs))
    w = [1 / x for x in v]  # tau^2 is 0 here: Q is far below 2
    mu = sum(a * b for a, b in zip(w, y)) / sum(w)
    hk, dl = sum(a * (b - mu) ** 2 for a, b in zip(w, y)) / (2 * sum(w)), 1 / sum(w)
    assert hk < dl / 100
    s = stats.pooled(groups)
    assert s["tau2"] == 0 and s["q"] < 0.1 and s["floored"] is True
    t2 = stats.t_two_sided(2)
    assert s["low"] == pytest.approx(math.exp(mu - t2 * math.sqrt(dl)), abs=1e-4)
    assert s["high"] == pytest.approx(math.exp(mu + t2 * math.sqrt(dl)), abs=1e-4)
    assert s["low"] < math.exp(mu - 5 * t2 * math.sqrt(hk))  # plain HK's would be far narrower
    assert "modified Hartung-Knapp" in s["method"]
    # pairs that scatter beyond their rounds: Hartung-Knapp's own variance, no floor
    apart = stats.pooled([[0.80, 0.82, 0.81, 0.79], [0.91, 0.90, 0.92, 0.90], [1.00, 1.01, 0.99, 1.02]])
    assert apart["floored"] is False
