"""CPU checks of bench/kernels.py: timing helpers, report layout, the tiny sweep."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU behaviour")


@pytest.fixture
def bk(monkeypatch):
    from bench import kernels

    monkeypatch.setattr(kernels, "CAPTURE_FAILURES", {})  # a module global: each test starts empty
    return kernels


def times(device, wall, host, na=None):
    out = dict(device_us=device, wall_us=wall, host_us=host)
    if na:
        out["device_na"] = na
    return out


def fake_result(bk):
    """A result shaped as main() writes it, with values distinct enough to find in the text."""
    copy = dict(layers=1, bs=64, page=64, topk=8, pairs=100, capacity=200, basis="device", speedup=9.0,
                ours_GBps=1.0, upstream_GBps=0.1)
    for p, t in (("upstream", times(90.1, 91.2, 92.3)), ("ours", times(10.1, 21.2, 22.3)),
                 ("ours_exact", times(10.4, 21.5, 22.6)), ("torch_index", times(40.1, 41.2, 42.3))):
        copy.update(bk.prefixed(p, t))
    assign = dict(bs=64, page=64, topk=8, steps=5, ours_new_copy_len_ms=[0.5], upstream_new_copy_len_ms=[150.0])
    for p, t in (("ours", times(2.61, 55.5, 54.4)), ("ours_out", times(2.62, 38.3, 37.7)),
                 ("ours_free_pages", times(2.63, 56.6, 55.5)), ("ours_two_launches", times(4.1, 88.8, 87.7)),
                 ("upstream_kernel", times(3.71, 29.9, 28.8)), ("upstream", times(None, 210.1, 217.2, "syncs"))):
        assign.update(bk.prefixed(p, t))
    pre = dict(bs=64, page=64, topk=8, steps=5, ours_syncs=2, upstream_syncs=3)
    for p, t in (("ours", times(None, 1156.5, 1150.1, "syncs")), ("upstream", times(None, 6881.2, 6885.8, "syncs"))):
        pre.update(bk.prefixed(p, t))
    res = dict(device="NVIDIA H200", date="2026-11-30", versions=dict(sglang="0.5.12.post1", torch="t", triton="3.6.0"),
               d2d_GBps=4250.3, launch_us=10.83, copy=[copy], assign=[assign], preprocess=[pre],
               capture_failures={"assign bs64 upstream": "AcceleratorError: operation not permitted when stream is capturing"})
    res.update(bk.prefixed("empty_triton", times(0.81, 17.3, 18.8)))
    return res


@cpu_only
def test_graph_us_is_none_on_cpu(bk):
    calls = []
    assert bk.graph_us(lambda: calls.append(1), label="cpu") is None
    assert calls == []  # nothing captured, nothing run
    assert bk.measure(lambda: calls.append(1), "cpu")["device_na"] == "cpu"


def test_graph_us_records_why_a_capture_failed(bk, monkeypatch):
    # Pretend a GPU, and make the warm-up fail as a syncing call fails in capture.
    monkeypatch.setattr(bk, "DEV", "cuda")
    monkeypatch.setattr(torch.cuda, "Stream", lambda: (_ for _ in ()).throw(RuntimeError("not permitted when capturing")))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    assert bk.graph_us(lambda: None, label="syncing fn") is None
    assert bk.CAPTURE_FAILURES == {"syncing fn": "RuntimeError: not permitted when capturing"}


def test_markdown_has_device_wall_and_host_columns(bk):
    md = bk.markdown(fake_result(bk))
    for head in ("device us (graph)", "wall us (back-to-back)", "host us (enqueue)"):
        assert md.count(head) == 3, head  # copy, assignment and preprocess tables
    assert "| ours (capacity-padded) | 10.1 | 21.2 | 22.3 | 9.0x | 1.0 |" in md
    assert "| ours, outputs allocated per call | 2.61 | 55.5 | 54.4 |" in md
    assert "| ours, preallocated `out=` | 2.62 | 38.3 | 37.7 |" in md
    assert "| ours from the free pages, one launch (the draft step's fast path) | 2.63 | 56.6 | 55.5 |" in md
    assert "| ours from the free pages, slots then assignment (two launches) | 4.1 | 88.8 | 87.7 |" in md
    assert "| SGLang assign_draft_cache_locs, launch only | 3.71 | 29.9 | 28.8 |" in md
    assert "| SGLang assign_draft_cache_locs with its input prep | n/a (syncs) | 210.1 | 217.2 |" in md
    assert "| empty Triton kernel (launch floor) | 0.81 | 17.3 | 18.8 |" in md
    assert "| 64 | 64 | 8 | SGLang | n/a (syncs) | 6881.2 | 6885.8 | 3 |" in md
    assert "empty torch launch (`add_`, wall back-to-back): 10.83 us" in md
    assert "assign bs64 upstream" in md
    # results written before the free-page variant still render, without its rows
    old = fake_result(bk)
    old["assign"][0] = {k: v for k, v in old["assign"][0].items() if "free_pages" not in k and "two_launches" not in k}
    assert "from the free pages" not in bk.markdown(old)


def test_markdown_has_the_v2_duplication_rows(bk):
    res = fake_result(bk)
    row = dict(layers=1, bs=8, page=64, topk=8, steps=5, pairs=231)
    for p, t in (("ours", times(3.1, 12.5, 11.2)), ("ours_torch_pairs", times(30.2, 150.1, 149.3)),
                 ("upstream", times(None, 610.4, 600.2, "syncs"))):
        row.update(bk.prefixed(p, t))
    res["v2_duplicate"] = [row]
    md = bk.markdown(res)
    assert "| 1 | 8 | 64 | 8 | 5 | 231 | ours (one launch) | 3.1 | 12.5 | 11.2 |" in md
    assert "| 1 | 8 | 64 | 8 | 5 | 231 | ours before (torch pairs + launch) | 30.2 | 150.1 | 149.3 |" in md
    assert "| 1 | 8 | 64 | 8 | 5 | 231 | SGLang | n/a (syncs) | 610.4 | 600.2 |" in md
    assert "v2 prefix-tail duplication" not in bk.markdown(fake_result(bk))  # results from before it still render


def test_plot_uses_device_time_where_measured(bk, tmp_path):
    pytest.importorskip("matplotlib")
    res = fake_result(bk)
    assert bk.best_us(res["assign"][0], "ours") == 2.61
    assert bk.best_us(res["assign"][0], "upstream") == 210.1  # not capturable: wall
    bk.plot(res, tmp_path / "k.png")
    assert (tmp_path / "k.png").stat().st_size > 0


@cpu_only
def test_tiny_sweep_runs_on_cpu(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "bench.kernels", "--out", str(tmp_path)], cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=600)
    res = json.loads((tmp_path / "kernels.json").read_text())
    for key in ("ours", "ours_out", "ours_free_pages", "upstream_kernel", "upstream"):
        assert res["assign"][0][f"{key}_device_us"] is None
        assert res["assign"][0][f"{key}_wall_us"] > 0
        assert res["assign"][0][f"{key}_host_us"] > 0
    assert res["empty_triton_device_na"] == "cpu"
    assert {"ours_device_us", "upstream_device_us", "ours_host_us"} <= set(res["copy"][0])
    assert "n/a (cpu)" in (tmp_path / "kernels.md").read_text()
    # FA3's expand metadata: ours and SGLang's (eager on a CPU) wrote the same tables
    assert res["fa3_expand"][0]["identical"] is True and res["fa3_expand"][0]["ours_wall_us"] > 0
    # the post-verify move: overlapping pairs, both implementations timed
    v = res["verify_move"][0]
    assert v["pairs"] > 0 and v["ours_wall_us"] > 0 and v["upstream_wall_us"] > 0
    # FA3's replay metadata for all draft steps: ours wrote SGLang's tables
    assert res["fa3_replay"][0]["identical"] is True and res["fa3_replay"][0]["upstream_p1_wall_us"] > 0
    # the v2 duplication: ours in one launch, ours before (torch pairs), SGLang's own where it has one (0.5.13+)
    from packaging.version import Version

    d = res["v2_duplicate"][0]
    assert d["pairs"] > 0 and d["ours_wall_us"] > 0 and d["ours_torch_pairs_wall_us"] > 0
    assert ("upstream_wall_us" in d) == (Version(res["versions"]["sglang"]) >= Version("0.5.13")), d

