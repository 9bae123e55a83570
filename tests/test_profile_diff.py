"""scripts/profile_diff.py: per-step differences between two profiled configurations."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import profile_diff  # noqa: E402


def _profile(steps, wall_ms, python, cpu_ops=()):
    return {"steps": steps, "wall_ms": wall_ms, "gpu_busy_ms": steps * 1.0, "syncs": steps * 7, "with_stack": True,
            "python": [{"name": n, "total_us": t, "count": c} for n, t, c in python],
            "cpu_ops": [{"name": n, "total_us": t, "count": c} for n, t, c in cpu_ops]}


def test_per_step_differences_and_one_sided_names(tmp_path, capsys):
    a = _profile(10, 100.0, [("verify", 4000.0, 10), ("page1_only", 500.0, 10)], [("aten::index", 300.0, 30)])
    b = _profile(20, 220.0, [("verify", 10000.0, 20), ("paged_only", 2000.0, 20)], [("aten::index", 600.0, 60)])
    result = profile_diff.diff(a, b)
    assert result["headline"]["wall_ms_per_step"] == [10.0, 11.0]
    rows = {r["name"]: r for r in result["python"]}
    assert rows["verify"]["delta_us"] == 100.0           # 500 per step against 400
    assert rows["paged_only"]["us_A"] == 0.0 and rows["paged_only"]["delta_us"] == 100.0
    assert rows["page1_only"]["delta_us"] == -50.0
    assert result["cpu_ops"][0]["delta_us"] == 0.0 and result["cpu_ops"][0]["calls_B"] == 3.0
    path = tmp_path / "e2e.json"
    path.write_text(json.dumps({"on_p1": {"profile": a}, "on_p64": {"profile": b}, "off_p64": {}}))
    assert profile_diff.main([str(path), "on_p1", "on_p64", "--json", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out
    assert "| `paged_only` | 0.0 | 100.0 | +100.0 |" in out
    assert json.loads((tmp_path / "d.json").read_text())["python"][0]["name"] in {"verify", "paged_only"}
    assert profile_diff.main([str(path), "on_p1", "off_p64"]) == 2  # no profile recorded there
