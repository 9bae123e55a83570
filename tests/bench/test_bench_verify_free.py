"""CPU runs of scripts/bench_verify_free.py: the page-N ways free the same pages, and its report."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_sweep_writes_its_report(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_verify_free.py"), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((tmp_path / "verify_free.json").read_text())
    assert res["rows"] and all(r["same_pages"] and r["pages_freed"] > 0 for r in res["rows"])
    md = (tmp_path / "verify_free.md").read_text()
    assert md.count("| ours, page list (now) |") == len(res["rows"])
    for r in res["rows"]:
        assert f"| {r['bs']} | {r['draft_tokens']} | {r['page']} | SGLang | {r['sglang_wall_us']} |" in md
