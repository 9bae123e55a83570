"""Trace summary (real CPU torch-profiler trace and a hand-made one) and capture()
against a fake SGLang HTTP server."""

from __future__ import annotations

import gzip
import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench import profile as prof

torch = pytest.importorskip("torch")

# --------------------------------------------------------------------------- real trace

N_OUTER, N_INNER = 2, 3


def _prof_inner(x):
    return torch.mm(x, x)


def _prof_outer(x):
    for _ in range(N_INNER):
        x = _prof_inner(x) * 0.5
    return x



@pytest.fixture(scope="module")
def real_traces(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("trace")
    x = torch.randn(8, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as p:
        for _ in range(N_OUTER):
            _prof_outer(x)
    plain = d / "cpu.trace.json"
    p.export_chrome_trace(str(plain))
    gz = d / "cpu.trace.json.gz"
    with plain.open("rb") as fin, gzip.open(gz, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    return plain, gz


def _row(rows: list[dict], name: str) -> dict:
    found = [r for r in rows if r["name"] == name]
    assert len(found) == 1, (name, [r["name"] for r in rows])
    return found[0]


def _py_row(rows: list[dict], func: str) -> dict:
    found = [r for r in rows if r["name"].startswith("test_profile.py(") and r["name"].endswith(": " + func)]
    assert len(found) == 1, (func, [r["name"] for r in rows])
    return found[0]


@pytest.mark.parametrize("which", [0, 1], ids=["plain", "gz"])
def test_real_trace(real_traces, which):
    s = prof.summarize_trace(real_traces[which], top=1000)

    outer, inner = _py_row(s["python"], "_prof_outer"), _py_row(s["python"], "_prof_inner")
    assert outer["count"] == N_OUTER
    assert inner["count"] == N_OUTER * N_INNER
    # Each inner call runs inside an outer call.
    assert inner["total_us"] <= outer["total_us"]
    assert outer["self_us"] <= outer["total_us"] - inner["total_us"] + 1e-6

    mm = _row(s["cpu_ops"], "aten::mm")
    assert mm["count"] == N_OUTER * N_INNER
    assert _row(s["cpu_ops"], "aten::mul")["count"] == N_OUTER * N_INNER
    for r in s["cpu_ops"] + s["python"]:
        assert -1e-6 <= r["self_us"] <= r["total_us"] + 1e-6, r
    # Built-ins are named without the bound object's address, so calls add up.
    assert not any(" at 0x" in r["name"] for r in s["python"])
    assert _row(s["python"], "<built-in method mm of type object>")["count"] == N_OUTER * N_INNER

    # CPU-only: no GPU sections, and wall covers the workload.
    assert s["gpu_kernels"] == [] and s["gpu_total_us"] == 0 and s["gpu_busy_ms"] == 0
    assert s["wall_ms"] * 1e3 >= outer["total_us"]
    assert s["steps"] is None
    json.dumps(s)  # the summary must serialize


def test_real_trace_top_and_markdown(real_traces):
    s = prof.summarize_trace(real_traces[1], top=3)
    assert len(s["python"]) == 3 and len(s["cpu_ops"]) == 3
    assert [r["self_us"] for r in s["cpu_ops"]] == sorted((r["self_us"] for r in s["cpu_ops"]), reverse=True)
    md = prof.markdown(prof.summarize_trace(real_traces[1]), "cpu run")
    # (the Python table's top rows are pytest's frames, open around the workload)
    assert md.startswith("## cpu run") and "\n| aten::mm | " in md and "### Python functions" in md


# --------------------------------------------------------------------------- hand-made trace


def X(cat, name, ts, dur, pid=1, tid=1):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid}


HAND_EVENTS = [
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
    # thread 1:  fwd [-10,120] > parent [0,100] > child [10,40] > launch [15,20]
    #                                           > sync [50,70]
    #                                           > child [80,110] (sticks out; clipped to 100)
    X("python_function", "sglang/srt/speculative/eagle_worker.py(12): fwd", -10, 130),
    X("cpu_op", "parent", 0, 100),
    X("cpu_op", "child", 10, 30),
    X("cuda_runtime", "cudaLaunchKernel", 15, 5),
    X("cuda_runtime", "cudaStreamSynchronize", 50, 20),
    X("cpu_op", "child", 80, 30),
    # thread 2 overlaps thread 1 in time but does not nest with it.
    X("cpu_op", "parent", 0, 50, tid=2),
    X("cuda_runtime", "cudaMemcpy", 60, 4, tid=2),
    X("cuda_runtime", "cudaMemcpyAsync", 70, 2, tid=2),
    # GPU: two streams; k1 [20,30] and k2 [25,35] overlap, k1 [100,105] alone.
    X("kernel", "k1", 20, 10, pid=0, tid=7),
    X("kernel", "k2", 25, 10, pid=0, tid=8),
    X("kernel", "k1", 100, 5, pid=0, tid=7),
    X("gpu_memcpy", "Memcpy DtoH", 40, 3, pid=0, tid=7),
    # Junk the summary must skip or tolerate.
    {"ph": "X", "cat": "cpu_op", "name": "no_ts", "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "bad_ts", "ts": "x", "dur": 5},
    {"ph": "X", "cat": "mystery", "name": "no_dur", "ts": 0, "pid": 9, "tid": 9},
    {"ph": "i", "name": "instant", "ts": 1000},
    "not an event",
]


def _check_hand(s: dict) -> None:
    assert s["wall_ms"] == pytest.approx(0.130)  # -10 .. 120

    py = _row(s["python"], "eagle_worker.py(12): fwd")
    assert (py["count"], py["total_us"], py["self_us"]) == (1, 130, 30)

    parent = _row(s["cpu_ops"], "parent")
    # thread 1: 100 - 30 (child) - 20 (sync) - 20 (clipped child); thread 2: 50
    assert (parent["count"], parent["total_us"], parent["self_us"]) == (2, 150, 80)
    child = _row(s["cpu_ops"], "child")
    assert (child["count"], child["total_us"], child["self_us"]) == (2, 60, 55)
    assert [r["name"] for r in s["cpu_ops"]] == ["parent", "child"]  # by self time

    k1, k2 = _row(s["gpu_kernels"], "k1"), _row(s["gpu_kernels"], "k2")
    assert (k1["count"], k1["total_us"], k1["mean_us"], k1["share"]) == (2, 15, 7.5, 0.6)
    assert (k2["count"], k2["total_us"], k2["share"]) == (1, 10, 0.4)
    assert s["gpu_total_us"] == 25 and s["gpu_kernel_count"] == 3
    assert s["gpu_busy_ms"] == pytest.approx(0.020)  # [20,35] + [100,105]
    assert _row(s["gpu_mem"], "Memcpy DtoH")["total_us"] == 3

    rt = {r["name"]: (r["count"], r["total_us"]) for r in s["cuda_runtime"]}
    assert rt == {"cudaStreamSynchronize": (1, 20), "cudaLaunchKernel": (1, 5),
                  "cudaMemcpy": (1, 4), "cudaMemcpyAsync": (1, 2)}
    assert (s["syncs"], s["sync_us"]) == (2, 24)  # not the async memcpy
    assert s["categories"]["mystery"] == 1 and s["steps"] is None


def test_hand_trace_exact(tmp_path):
    path = tmp_path / "hand.json"
    path.write_text(json.dumps({"traceEvents": HAND_EVENTS}))
    _check_hand(prof.summarize_trace(path))


def test_hand_trace_gzip_and_bare_list(tmp_path):
    # gzip is detected by content, and a bare event list is a valid trace.
    path = tmp_path / "hand.json"
    with gzip.open(path, "wt") as f:
        json.dump(HAND_EVENTS, f)
    _check_hand(prof.summarize_trace(path))


def test_empty_trace(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text("{}")
    s = prof.summarize_trace(path)
    assert s["wall_ms"] == 0 and s["gpu_busy_ms"] == 0 and s["python"] == [] and s["syncs"] == 0
    prof.markdown(s, "empty")


def test_short_name():
    assert prof.short_name("sglang/srt/speculative/eagle_worker.py(123): draft") == "eagle_worker.py(123): draft"
    assert prof.short_name("/usr/lib/python3.11/site-packages/x/y.py(7): f") == "y.py(7): f"
    assert prof.short_name("<built-in method sum of Tensor object at 0x7fb092e4a670>") == \
        "<built-in method sum of Tensor object>"
    assert prof.short_name("aten::mm") == "aten::mm"


def _step_trace(tmp_path: Path, durs: list[float]) -> Path:
    ev, ts = [], 0.0
    for d in durs:
        ev.append(X("python_function", "sglang/srt/managers/scheduler.py(2996): run_batch", ts, d, tid=3))
        ev.append(X("kernel", "k", ts + 1, d / 2, pid=0, tid=7))
        ts += 1000
    path = tmp_path / "steps.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_steps_counted_from_run_batch(tmp_path):
    # The last run_batch is the stub where the scheduler stopped the profiler.
    path = _step_trace(tmp_path, [400, 500, 450, 2])
    assert prof.summarize_trace(path)["steps"] == 3
    assert prof.summarize_trace(path, steps=7)["steps"] == 7


def test_markdown_and_compare_per_step(tmp_path):
    hand = tmp_path / "hand.json"
    hand.write_text(json.dumps({"traceEvents": HAND_EVENTS}))
    a = prof.summarize_trace(hand, steps=2)
    b = prof.summarize_trace(hand, steps=2)
    b["gpu_kernels"] = [{**r, "total_us": r["total_us"] * 2} for r in b["gpu_kernels"]] + [
        {"name": "k_new", "total_us": 40.0, "count": 4, "mean_us": 10.0, "share": 0.5}]
    b["steps"] = 4

    md = prof.markdown(a, "page 1")
    assert "us/step" in md and "| k1 | 7.5 | 2 | 7.5 | 60.0% |" in md
    assert "| eagle_worker.py(12): fwd | 65.0 | 15.0 | 1 |" in md

    cmp = prof.compare_markdown(a, b, "p1", "p64")
    assert "## p64 vs p1" in cmp and "us/step" in cmp
    # per step: k1 15/2 vs 30/4; k_new only in b (10/step), listed first as the biggest change
    kernel_rows = cmp.split("### GPU kernels")[1].split("###")[0]
    lines = [ln for ln in kernel_rows.splitlines() if ln.startswith("| k")]
    assert lines[0] == "| k_new | 0* | 10.0 | 10.0 |"
    assert "| k1 | 7.5 | 7.5 | 0.0 |" in lines
    assert "| k2 | 5.0 | 5.0 | 0.0 |" in lines

    # Without step counts on both sides the comparison is in totals.
    b["steps"] = None
    assert "us total" in prof.compare_markdown(a, b, "p1", "p64")


def test_cli(tmp_path, capsys):
    hand = tmp_path / "hand.json"
    hand.write_text(json.dumps({"traceEvents": HAND_EVENTS}))
    out, md = tmp_path / "s.json", tmp_path / "s.md"
    assert prof.main(["summarize", str(hand), "--out", str(out), "--md", str(md), "--steps", "2"]) == 0
    _check_hand({**json.loads(out.read_text()), "steps": None})
    assert "## hand.json" in md.read_text()
    assert prof.main(["compare", str(out), str(out), "--names", "p1", "p64"]) == 0
    printed = capsys.readouterr().out
    assert "## p64 vs p1" in printed and "| parent | 40.0 | 40.0 | 0.0 |" in printed


def test_compare_reads_profiles_out_of_an_e2e_record(tmp_path, capsys):
    """``E2E_JSON:NAME``: the summary bench.e2e --profile kept for that configuration (gzipped too)."""
    hand = tmp_path / "hand.json"
    hand.write_text(json.dumps({"traceEvents": HAND_EVENTS}))
    summary = prof.summarize_trace(str(hand), steps=2)
    slower = {**summary, "wall_ms": summary["wall_ms"] * 2}
    record = tmp_path / "e2e.json.gz"
    with gzip.open(record, "wt") as f:
        json.dump({"on_p1": {"profile": summary}, "on_p64": {"profile": slower}, "off_p64": {"profile": None}}, f)
    assert prof.main(["compare", f"{record}:on_p1", f"{record}:on_p64", "--names", "p1", "p64"]) == 0
    assert "## p64 vs p1" in capsys.readouterr().out
    assert prof.load_summary(f"{record}:on_p64")["wall_ms"] == 2 * summary["wall_ms"]
    with pytest.raises(SystemExit, match="no profile recorded for 'off_p64'"):
        prof.load_summary(f"{record}:off_p64")


# --------------------------------------------------------------------------- capture


def _small_gz_trace(path: Path) -> None:
    # Written in two parts, as torch streams the gzip, so a half-written file is seen.
    data = gzip.compress(json.dumps({"traceEvents": HAND_EVENTS}).encode())
    with path.open("wb") as f:
        f.write(data[: len(data) // 2])
        f.flush()
        time.sleep(0.2)
        f.write(data[len(data) // 2:])


class FakeServer:
    """Answers /start_profile and /stop_profile like SGLang's HTTP server.

    mode: 'write' - answer, then write the trace after a delay;
          'never' - answer, never write;
          'on_stop' - write the trace only when /stop_profile arrives;
          'block' - hold the answer until the trace is written, which happens
                    once ``driven`` is set (older SGLang answered at the end);
          'error' - answer 500.
    """

    def __init__(self, mode: str):
        self.mode, self.payloads, self.paths = mode, [], []
        self.driven = threading.Event()
        self.written: list[Path] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.paths.append(self.path)
                if self.path == "/start_profile":
                    server.payloads.append(json.loads(body))
                    server.start(self)
                elif self.path == "/stop_profile":
                    if server.mode == "on_stop":
                        server.write()
                    self._answer(200)

            def _answer(self, code):
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def write(self) -> None:
        out = Path(self.payloads[-1]["output_dir"])
        path = out / f"{time.time()}-TP-0.trace.json.gz"
        _small_gz_trace(path)
        self.written.append(path)

    def start(self, handler) -> None:
        if self.mode == "error":
            handler._answer(500)
            return
        if self.mode == "write":
            threading.Timer(0.3, self.write).start()
        if self.mode == "block":
            assert self.driven.wait(10)
            self.write()
        handler._answer(200)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake():
    servers = []

    def make(mode):
        servers.append(FakeServer(mode))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


FAST = dict(stable_s=0.3, poll_s=0.05)


def test_capture_finds_new_trace(fake, tmp_path):
    srv = fake("write")
    out = tmp_path / "prof"
    out.mkdir()
    old = out / "1.0-TP-0.trace.json.gz"
    _small_gz_trace(old)  # an earlier capture must not be returned
    driven = []
    path = prof.capture(srv.url + "/", str(out), 5, lambda: driven.append(time.time()), timeout=20, **FAST)
    assert path == srv.written[0] and path != old
    assert driven and srv.paths == ["/start_profile"]
    assert srv.payloads == [{"output_dir": str(out.resolve()), "num_steps": 5, "activities": ["CPU", "GPU"],
                             "with_stack": True, "record_shapes": False}]
    _check_hand(prof.summarize_trace(path))


def test_capture_when_start_profile_blocks(fake, tmp_path):
    srv = fake("block")
    path = prof.capture(srv.url, str(tmp_path), 3, srv.driven.set, timeout=20, with_stack=False,
                        start_wait=0.3, **FAST)
    assert path == srv.written[0]
    assert srv.payloads[0]["with_stack"] is False


def test_capture_stop_profile_fallback(fake, tmp_path):
    srv = fake("on_stop")
    path = prof.capture(srv.url, str(tmp_path), 3, lambda: None, timeout=20, stop_grace=0.2, **FAST)
    assert path == srv.written[0]
    assert srv.paths == ["/start_profile", "/stop_profile"]


def test_capture_timeout_returns_none(fake, tmp_path, capsys):
    srv = fake("never")
    t0 = time.monotonic()
    assert prof.capture(srv.url, str(tmp_path), 3, lambda: None, timeout=1.0, stop_grace=None, **FAST) is None
    assert time.monotonic() - t0 < 10
    assert "no stable trace" in capsys.readouterr().err
    assert srv.paths == ["/start_profile"]


def test_capture_drive_error_still_waits(fake, tmp_path):
    srv = fake("write")

    def drive():
        raise RuntimeError("client broke")

    assert prof.capture(srv.url, str(tmp_path), 3, drive, timeout=20, **FAST) == srv.written[0]


def test_capture_start_failure_returns_none(fake, tmp_path, capsys):
    srv = fake("error")
    driven = []
    assert prof.capture(srv.url, str(tmp_path), 3, lambda: driven.append(1), timeout=5, **FAST) is None
    assert not driven and "start_profile failed" in capsys.readouterr().err


def test_capture_server_down_returns_none(tmp_path):
    srv = FakeServer("never")
    url = srv.url
    srv.close()  # nothing listens on the port any more
    assert prof.capture(url, str(tmp_path), 3, lambda: None, timeout=5, **FAST) is None
