"""scripts/bench_launch.py on the CPU: every case builds and runs its wrapper under the interpreter
and the report is written (the timings and the launcher check need a GPU)."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_launch.py"


def test_smoke_writes_every_case(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_launch", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--out", str(tmp_path), "--bs", "1", "--calls", "1", "--repeats", "1"]) == 0
    res = json.loads((tmp_path / "launch.json").read_text())
    assert [r["case"] for r in res["cases"]] == list(mod.CASES)
    assert "| assign (free pages) | 1 |" in (tmp_path / "launch.md").read_text()
