"""CPU test of bench/reproducibility.py on synthetic recordings."""

import json

from bench import reproducibility as mod


def _rec(outputs, acc=2.0, error=None):
    return {"outputs": outputs, "summary": {"acceptance_length": acc, "output_throughput": 100.0}, "error": error}


def test_rows_count_identical_outputs_per_pair_of_recordings():
    a = {"x": _rec({"1/1": "same", "2/1": "one", "2/2": "later"}), "gone": _rec({"1/1": "a"})}
    b = {"x": _rec({"1/1": "same", "2/1": "two", "2/2": "later"}, acc=2.5)}
    c = {"x": _rec({"1/1": "same", "2/1": "one", "2/2": "later"}), "gone": _rec({}, error="not measured")}
    rows = mod.rows([a, b, c])
    assert [r["name"] for r in rows] == ["x"]  # "gone" is not in every recording
    # a second turn is compared only where its first turn agrees (2/2 is left out against b)
    assert rows[0]["identical"] == [(1, 2), (3, 3), (1, 2)]
    assert rows[0]["acceptance"] == [2.0, 2.5, 2.0]


def test_main_prints_a_markdown_table(tmp_path, capsys):
    paths = []
    for i, text in enumerate(("p", "q")):
        p = tmp_path / f"r{i}.json"
        p.write_text(json.dumps({"on_p64": _rec({"1/1": text})}))
        paths.append(str(p))
    mod.main(paths)
    out = capsys.readouterr().out
    assert "| on_p64 | 2.0000 | 2.0000 | 0/1 |" in out


def test_gzipped_recordings_read_like_plain_ones(tmp_path):
    import gzip

    from bench.e2e import load_recording

    rec = {"on_p64": _rec({"1/1": "x"})}
    plain, packed = tmp_path / "e2e.json", tmp_path / "e2e.json.gz"
    plain.write_text(json.dumps(rec))
    with gzip.open(packed, "wt") as f:
        json.dump(rec, f)
    assert load_recording(plain) == load_recording(packed) == rec
