"""bench.parity: the noise band the GPU suite judges acceptance pairs with."""

import pytest

from bench import parity


def test_paired_diffs_pool_a_questions_turns():
    a = {"81/1": [10, 5], "81/2": [30, 10], "82/1": [8, 4]}
    b = {"81/1": [10, 10], "81/2": [30, 10], "82/1": [8, 8], "83/1": [5, 5]}
    diffs = sorted(parity.paired_diffs(a, b))
    # question 81: 40/15 vs 40/20; question 82: 2.0 vs 1.0; 83 only in b
    assert diffs == pytest.approx(sorted([40 / 15 - 2.0, 1.0]))


def test_paired_diffs_skip_requests_without_verify_steps():
    assert parity.paired_diffs({"1/1": [3, 0]}, {"1/1": [3, 1]}) == []


def test_z_is_bonferroni():
    assert parity.z_for(0.05, 1) == pytest.approx(1.95996, abs=1e-4)
    assert parity.z_for(0.05, 1, two_sided=False) == pytest.approx(1.64485, abs=1e-4)
    assert parity.z_for(0.05, 20) == pytest.approx(3.0233, abs=1e-3)  # 0.05 / 40 per tail


def test_band_is_the_floor_or_the_noise():
    assert parity.band(2.0, None, tests=5) == pytest.approx(0.06)
    assert parity.band(2.0, [0.0, 0.0, 0.0], tests=5) == pytest.approx(0.06)
    diffs = [0.5, -0.5, 0.5, -0.5]
    se = parity.std_error(diffs)
    assert se == pytest.approx((4 * 0.25 / 3 / 4) ** 0.5)
    assert parity.band(2.0, diffs, tests=1) == pytest.approx(1.95996 * se, rel=1e-4)
    # a real gap outside the band is still caught: 10 questions all 0.3 lower, little spread
    tight = [-0.3 + 0.01 * (i % 2) for i in range(10)]
    assert abs(sum(tight) / len(tight)) > parity.band(2.0, tight, tests=20)


def test_sign_test_p_is_the_binomial_upper_tail():
    assert parity.sign_test_p(0, 0) == 1.0
    assert parity.sign_test_p(6, 0) == pytest.approx(1 / 64)
    assert parity.sign_test_p(8, 2) == pytest.approx((45 + 10 + 1) / 1024)
    assert parity.sign_test_p(1, 3) == pytest.approx(15 / 16)
