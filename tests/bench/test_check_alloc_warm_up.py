"""scripts/check_alloc_warm_up.py on the CPU (interpreter): both child processes, the serving-like
allocations through SGLang's allocator and the report run; timings and compile counts need a GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_alloc_warm_up.py"


def test_smoke_writes_the_report(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1")
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--page", "16", "--max-batch", "3"],
                   check=True, env=env, capture_output=True, text=True, timeout=600)
    res = json.loads((tmp_path / "alloc_warm_up.json").read_text())
    for step in ("cold_process", "disk_cache_process", "in_process_first", "in_process_again"):
        assert res[step]["launches"] == 6  # buckets 1, 2, 4 x two free-list alignments
    assert res["served_slots"] > 0 and res["compiled_while_serving"] == {}
    assert "| warm-up, fresh Triton cache (new process) | 6 |" in (tmp_path / "alloc_warm_up.md").read_text()
