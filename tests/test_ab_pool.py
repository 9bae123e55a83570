"""CPU tests of scripts/ab_pool.py: pooling bench.ab recordings across calls."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ab_pool.py"


def _load():
    spec = importlib.util.spec_from_file_location("ab_pool", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _recording(path, b_name, ratios_by_parallel):
    summary = {str(par): {"ratios": ratios} for par, ratios in ratios_by_parallel.items()}
    rec = {"rounds": 2, "pairs": {"pair0": {"A": {"name": "on_p1"}, "B": {"name": b_name}, "summary": summary}}}
    path.write_text(json.dumps(rec))
    return str(path)


def test_rounds_of_the_same_pair_and_parallelism_are_pooled(tmp_path):
    mod = _load()
    one = _recording(tmp_path / "1.json", "on_p64", {16: [0.9, 1.1], 1: [1.0, 1.02]})
    two = _recording(tmp_path / "2.json", "on_p64", {16: [0.8, 0.85, 0.9]})
    other = _recording(tmp_path / "3.json", "on_p128", {16: [1.2, 1.3]})
    rows = {(r["B"], r["parallel"]): r for r in mod.pool(mod.pair_rounds([one, two, other]))}
    assert set(rows) == {("on_p64", 16), ("on_p64", 1), ("on_p128", 16)}
    p64 = rows["on_p64", 16]
    assert p64["recordings"] == [one, two] and p64["rounds_pooled"]["rounds"] == 5
    want = math.exp(sum(math.log(r) for r in [0.9, 1.1, 0.8, 0.85, 0.9]) / 5)
    assert p64["rounds_pooled"]["ratio"] == pytest.approx(want, abs=1e-4)
    # one geometric mean per recording, and an interval over the two of them
    assert p64["per_recording"] == [pytest.approx(math.sqrt(0.99), abs=1e-4),
                                    pytest.approx((0.8 * 0.85 * 0.9) ** (1 / 3), abs=1e-4)]
    assert p64["recordings_as_units"]["rounds"] == 2
    assert p64["recordings_as_units"]["low"] < p64["rounds_pooled"]["low"]  # fewer units: wider
    assert rows["on_p64", 1]["recordings_as_units"]["high"] is None  # one recording says nothing of the noise
    table = mod.markdown(list(rows.values()))
    assert "| on_p1 | on_p64 | 16 | 2 |" in table and "not measured" not in table


def test_the_committed_runs_give_the_pooled_numbers_their_readme_states():
    mod = _load()
    results = ROOT / "bench" / "results"
    paths = [results / "2026-11-30-h200-run10/ab_testbed/ab.json",
             results / "2026-11-30-h200-run11/ab_testbed_p64/ab.json",
             results / "2026-11-30-h200-run12/ab_testbed_p64/ab.json"]
    if not all(p.exists() for p in paths):
        pytest.skip("results moved out of the tree (a device carry)")
    rows = {r["parallel"]: r["rounds_pooled"] for r in mod.pool(mod.pair_rounds(paths))}
    assert (rows[16]["ratio"], rows[16]["low"], rows[16]["high"]) == pytest.approx((0.9618, 0.9027, 1.0248))
    assert (rows[1]["ratio"], rows[1]["low"], rows[1]["high"]) == pytest.approx((0.9698, 0.9361, 1.0048))
