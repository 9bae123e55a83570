"""bench.gpu_sampler: nvidia-smi's CSV samples summed per pass. The GPU tool itself is not here: a
stand-in prints lines in the form ``--format=csv,noheader,nounits`` gives (nvidia-smi's documented
timestamp "YYYY/MM/DD HH:MM:SS.msec", then the queried fields in order), so these tests cover our
reading of that form and the pass bounds, not nvidia-smi."""

import datetime as dt
import os
import stat
import time

import pytest

from bench import gpu_sampler


def _line(t: float, util, mhz) -> str:
    return f"{dt.datetime.fromtimestamp(t).strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]}, {util}, {mhz}"


def test_lines_parse_and_passes_take_the_samples_inside_their_bounds():
    t = 1_800_000_000.0
    samples = [gpu_sampler.parse(_line(t + k * 0.1, u, m)) for k, (u, m) in enumerate(
        [(10, 1980), (40, 1980), (60, 1755), (90, 1755), (100, 1980)])]
    assert samples[0] == (pytest.approx(t, abs=1e-3), 10.0, 1980.0)
    assert gpu_sampler.summarize(samples, t + 0.05, t + 0.35) == {"samples": 3, "util_pct": 63.3, "sm_mhz": 1830.0}
    assert gpu_sampler.summarize(samples, t + 1, t + 2) is None  # no sample inside: nothing claimed
    for bad in ("[N/A]", "2026/12/03 07:30:00.123, [N/A], 1980", "2026/12/03 07:30", ""):
        assert gpu_sampler.parse(bad) is None


def stand_in(folder) -> str:
    """An executable ``nvidia-smi`` in ``folder`` printing a sample (55%, 1980 MHz) every 50 ms."""
    tool = folder / "nvidia-smi"
    tool.write_text("#!/usr/bin/env python3\n"
                    "import sys, time, datetime\n"
                    "assert '--query-gpu=timestamp,utilization.gpu,clocks.sm' in sys.argv\n"
                    "assert '--format=csv,noheader,nounits' in sys.argv and '-i' in sys.argv\n"
                    "while True:\n"
                    "    now = datetime.datetime.now().strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]\n"
                    "    print(now + ', 55, 1980', flush=True)\n"
                    "    time.sleep(0.05)\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return str(tool)


def test_a_sampler_runs_until_stopped_and_reads_what_it_wrote(tmp_path):
    tool = stand_in(tmp_path)
    sampler = gpu_sampler.GpuSampler(tmp_path / "gpu0.csv", 0, 50, command=str(tool)).start()
    try:
        start = time.time()
        deadline = time.monotonic() + 20
        while len(sampler.samples()) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        got = sampler.between(start - 1, time.time())
    finally:
        sampler.stop()
    assert got["samples"] >= 3 and got["util_pct"] == 55.0 and got["sm_mhz"] == 1980.0
    assert sampler.proc is None


def test_without_nvidia_smi_nothing_is_sampled(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_sampler.GpuSampler.start_if_available(tmp_path / "x.csv") is None
    assert not os.path.exists(tmp_path / "x.csv")


def test_each_line_is_read_once_and_a_partial_line_waits(tmp_path):
    t = 1_800_000_000.0
    path = tmp_path / "gpu0.csv"
    sampler = gpu_sampler.GpuSampler(path)  # not started: the file is written here
    path.write_text(_line(t, 10, 1980) + "\n" + _line(t + 0.1, 20, 1980)[:12])
    assert [s[1] for s in sampler.samples()] == [10.0]
    with open(path, "a") as f:
        f.write(_line(t + 0.1, 20, 1980)[12:] + "\n" + _line(t + 0.2, 30, 1755) + "\n")
    assert [s[1] for s in sampler.samples()] == [10.0, 20.0, 30.0]
    assert sampler.between(t + 0.15, t + 0.25) == {"samples": 1, "util_pct": 30.0, "sm_mhz": 1755.0}
