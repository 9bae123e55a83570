"""The per-round trace summary (bench.round_profile) on a small hand-made Chrome trace, in the format
torch.profiler writes: two whole rounds of a scheduler thread, their kernels, a host sync and the GPU's
idle gaps, with and without Python stacks; and bench.v2_profile's step of one server (two profiles during a
load) against a stand-in of SGLang's /start_profile that writes that trace."""

from __future__ import annotations

import gzip
import json
import threading
import time
from argparse import Namespace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench import round_profile as rp

SCHED, GPU = (1, 10), (0, 7)


def _x(cat, name, ts, dur, where):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": where[0], "tid": where[1]}


def _marks() -> list:
    """The ranges the round-marks probe records around the same run_batch and verify calls."""
    return [_x("user_annotation", "eagle_paged::run_batch", ts, dur, SCHED)
            for ts, dur in ((0, 800), (1000, 800), (2000, 300), (2500, 50))] + [
        _x("user_annotation", "eagle_paged::verify", ts, dur, SCHED) for ts, dur in ((100, 400), (1000, 100))]


def _events(stack: bool, marks: bool = False) -> list:
    py = [  # run_batch at 0 and 1000 are whole rounds; the one at 2500 is the stub the profiler's stop leaves
        _x("python_function", "/x/sglang/srt/managers/scheduler.py(3528): run_batch", 0, 800, SCHED),
        _x("python_function", "/x/sglang/srt/speculative/eagle_worker_v2.py(10): verify", 100, 400, SCHED),
        _x("python_function", "/x/sglang/srt/managers/scheduler.py(20): process_batch_result", 550, 240, SCHED),
        _x("python_function", "/x/sglang/srt/managers/scheduler.py(3528): run_batch", 1000, 800, SCHED),
        _x("python_function", "/x/sglang/srt/speculative/eagle_worker_v2.py(10): verify", 1000, 100, SCHED),
        # a prefill batch: no verify, so not a round
        _x("python_function", "/x/sglang/srt/managers/scheduler.py(3528): run_batch", 2000, 300, SCHED),
        _x("python_function", "/x/sglang/srt/speculative/eagle_worker_v2.py(727): _draft_extend_for_prefill",
           2000, 200, SCHED),
        _x("python_function", "/x/sglang/srt/managers/scheduler.py(3528): run_batch", 2500, 50, SCHED),
    ]
    host = [
        _x("cpu_op", "aten::mm", 150, 100, SCHED),
        _x("cuda_runtime", "cudaLaunchKernel", 160, 10, SCHED),
        _x("cuda_runtime", "cudaStreamSynchronize", 400, 80, SCHED),
        _x("cpu_op", "aten::add", 150, 5, (1, 99)),  # another thread: not the scheduler's
    ]
    gpu = [
        _x("kernel", "void flash::flash_fwd_kernel<Ktraits, true>(Params)", 200, 200, GPU),
        _x("kernel", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 400, 100, GPU),
        _x("kernel", "_duplicate_kv_kernel", 500, 20, GPU),
        _x("kernel", "assign_req_to_token_pool", 520, 20, GPU),
        _x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 540, 10, GPU),
        _x("kernel", "void at::native::vectorized_elementwise_kernel<4, Fn>(int, Fn)", 550, 50, GPU),
        _x("kernel", "void flash::flash_fwd_kernel<Ktraits, true>(Params)", 1000, 300, GPU),
        _x("kernel", "void flash::flash_fwd_kernel<Ktraits, true>(Params)", 2000, 100, GPU),  # the prefill's
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
    ]
    return (py if stack else []) + (_marks() if marks else []) + host + gpu


@pytest.fixture
def trace(tmp_path):
    def write(stack: bool, gz: bool = False):
        path = tmp_path / f"t-{stack}.trace.json{'.gz' if gz else ''}"
        data = json.dumps({"traceEvents": _events(stack)}).encode()
        path.write_bytes(gzip.compress(data) if gz else data)
        return path
    return write


def test_rounds_are_the_windows_between_run_batch_starts(trace):
    s = rp.summarize(trace(True, gz=True))
    assert (s["rounds"], s["rounds_from"], s["with_stack"], s["scheduler_thread"]) == (2, "run_batch", True, [1, 10])
    assert s["other_rounds"] == 1
    pr = s["per_round"]
    assert pr["wall_us"]["median"] == 1000
    # round 1: busy 200..600; round 2: busy 1000..1300
    assert sorted([pr["gpu_busy_us"]["p10"], pr["gpu_busy_us"]["p90"]]) == [300, 400]
    assert pr["gpu_idle_us"]["mean"] == (600 + 700) / 2
    # gaps: 0..200 and 600..1000 in round 1, 1300..2000 in round 2
    assert pr["gpu_gaps"]["mean"] == 1.5 and pr["gpu_gap_us"]["mean"] == 650
    assert pr["host_blocked_us"]["mean"] == 40 and pr["host_active_us"]["mean"] == 960


def test_gpu_time_per_round_by_group_and_kernel(trace):
    s = rp.summarize(trace(True))
    assert s["gpu_groups_us_per_round"] == {"attention": 250, "gemm": 50, "ours": 10, "sglang_triton": 10,
                                            "copy_memset": 5, "other": 25}
    top = s["kernels"][0]
    assert top["group"] == "attention" and top["us_per_round"] == 250 and top["count_per_round"] == 1
    assert s["gpu_kernel_us_per_round"] == 350


def test_scheduler_frames_and_what_it_was_in_when_the_gpu_idled(trace):
    s = rp.summarize(trace(True))
    frames = {r["name"]: r for r in s["python_frames"]}
    # verify: 400 minus mm (100, the launch inside it) minus the sync (80), then 100, over 2 rounds
    assert frames["eagle_worker_v2.py(10): verify"]["self_us_per_round"] == 160
    # run_batch: 800 - 400 - 240 in round 1, 800 - 100 in round 2; the prefill and the stub are no rounds
    assert frames["scheduler.py(3528): run_batch"]["self_us_per_round"] == 430
    assert not any("prefill" in name for name in frames)
    assert frames["scheduler.py(3528): run_batch"]["count_per_round"] == 1
    by_frame = {r["name"]: r["us_per_round"] for r in s["idle_gaps_by_python_frame"]}
    assert by_frame == {"scheduler.py(3528): run_batch": 450, "scheduler.py(20): process_batch_result": 200}


def test_without_stacks_the_trace_is_spread_over_the_given_rounds(trace):
    path = trace(False)
    with pytest.raises(SystemExit, match="--rounds"):
        rp.summarize(path)
    s = rp.summarize(path, rounds=2)
    assert (s["rounds"], s["rounds_from"], s["with_stack"], s["python_frames"]) == (2, "given", False, [])
    # every kernel, the prefill's too (nothing tells the rounds apart)
    assert s["gpu_groups_us_per_round"]["attention"] == (200 + 300 + 100) / 2
    assert s["gpu_groups_us_per_round"]["gemm"] == rp.summarize(trace(True))["gpu_groups_us_per_round"]["gemm"]
    assert s["per_round"]["wall_us"]["mean"] == (2100 - 150) / 2  # first host event to last kernel's end
    assert s["per_round"]["host_blocked_us"]["mean"] == 40
    assert {r["name"] for r in s["idle_gaps_by_host_event"]} <= {"aten::mm", "cudaStreamSynchronize", "(none)"}


@pytest.mark.parametrize("stack", [False, True], ids=["marks", "marks-and-frames"])
def test_the_probes_marks_give_rounds_without_stacks_and_are_not_counted_twice_with_them(tmp_path, stack):
    path = tmp_path / "marked.trace.json"
    path.write_text(json.dumps({"traceEvents": _events(stack, marks=True)}))
    s = rp.summarize(path)
    framed = rp.summarize(_write(tmp_path, _events(True)))
    assert (s["rounds"], s["other_rounds"], s["rounds_from"], s["with_stack"]) == (2, 1, "run_batch", stack)
    for key in ("wall_us", "gpu_busy_us", "gpu_gap_us", "host_blocked_us"):
        assert s["per_round"][key] == framed["per_round"][key], key
    assert s["gpu_groups_us_per_round"] == framed["gpu_groups_us_per_round"]
    if not stack:  # the innermost host event while the GPU idled: the round's own range
        assert {r["name"] for r in s["idle_gaps_by_host_event"]} == {"eagle_paged::run_batch"}


def test_host_time_per_phase_and_the_outermost_events_inside_it(tmp_path):
    """SGLang's ``draft`` range in each round, with events inside it: an outer op, one nested in it
    (counted within the outer), a later op; plus a ``draft`` range of the prefill, which is no round."""
    phases = [
        _x("user_annotation", "draft", 10, 80, SCHED), _x("user_annotation", "draft", 1110, 60, SCHED),
        _x("cpu_op", "Torch-Compiled Region: 1/3", 20, 30, SCHED),
        _x("cpu_op", "aten::remainder", 25, 5, SCHED),  # inside the compiled region: not outermost
        _x("cpu_op", "aten::index", 60, 20, SCHED),
        _x("cpu_op", "aten::index", 1120, 10, SCHED),
        _x("user_annotation", "draft", 2010, 50, SCHED), _x("cpu_op", "aten::index", 2020, 30, SCHED),
    ]
    s = rp.summarize(_write(tmp_path, _events(False, marks=True) + phases))
    draft = s["phases"]["draft"]
    assert draft["us_per_round"] == (80 + 60) / 2
    assert draft["children"] == [
        {"name": "Torch-Compiled Region: 1/3", "us_per_round": 15.0, "count_per_round": 0.5},
        {"name": "aten::index", "us_per_round": 15.0, "count_per_round": 1.0}]
    # the probe's verify mark is a phase too: round 1's 400 us range holds aten::mm and the sync
    verify = s["phases"]["eagle_paged::verify"]
    assert verify["us_per_round"] == (400 + 100) / 2 and "draft_extend" not in s["phases"]
    assert {r["name"] for r in verify["children"]} == {"aten::mm", "cudaStreamSynchronize"}
    md = rp.markdown(s, "t")
    assert "### Host time in `draft`: 70.0 us/round" in md and "| Torch-Compiled Region: 1/3 | 15.0 | 0.50 |" in md
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(s))
    b.write_text(json.dumps(rp.summarize(_write(tmp_path, _events(False, marks=True)))))
    assert "| host in draft | 70.0 | - |" in rp.compare_markdown([json.loads(a.read_text()), json.loads(b.read_text())],
                                                                  ["a", "b"])


def _write(tmp_path, events) -> Path:
    path = tmp_path / "framed.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_our_kernels_are_read_from_the_source(tmp_path):
    ours = rp.our_kernel_names()
    # the v2 duplication's kernel has a decorator whose arguments take three lines
    assert {"_duplicate_kv_kernel", "_assign_tree_draft_slots_kernel", "_move_rows_kernel",
            "_duplicate_prefix_tail_kernel"} <= ours
    (tmp_path / "k.py").write_text(
        "import triton\n\n@triton.jit\ndef plain(x):\n    pass\n\n"
        "@triton.jit(do_not_specialize=['a',\n                             'b'])\n@other\ndef spread(a, b):\n    pass\n\n"
        "@other.jit\ndef not_triton():\n    pass\n\ndef helper():\n    pass\n")
    assert rp.our_kernel_names(tmp_path) == {"plain", "spread"}
    assert rp.kernel_group("_move_rows_kernel", "kernel", ours) == "ours"
    assert rp.kernel_group("_move_rows_kernel", "kernel", frozenset()) == "sglang_triton"


def test_cli_writes_json_markdown_and_a_comparison(trace, tmp_path):
    for name, stack in (("p1", True), ("p64", False)):
        args = ["summarize", str(trace(stack)), "--out", str(tmp_path / f"{name}.json"), "--md", str(tmp_path / f"{name}.md")]
        assert rp.main(args + ([] if stack else ["--rounds", "2"])) == 0
    md = (tmp_path / "p1.md").read_text()
    assert "| attention | 250.0 | 71.4% |" in md and "| eagle_worker_v2.py(10): verify | 160.0 |" in md
    assert rp.main(["compare", str(tmp_path / "p1.json"), str(tmp_path / "p64.json"), "--names", "p1", "p64",
                    "--md", str(tmp_path / "cmp.md")]) == 0
    assert "| wall_us | 1,000.0 | 975.0 |" in (tmp_path / "cmp.md").read_text()


def test_a_real_torch_profiler_trace_is_read_the_same_way(tmp_path, monkeypatch):
    """torch.profiler's own Chrome trace (CPU only here) of a stand-in scheduler: its Python frames carry
    the names and threads that the rounds are found by."""
    torch = pytest.importorskip("torch")
    (tmp_path / "scheduler.py").write_text(
        "import torch\n\n\ndef verify(x):\n    return torch.mm(x, x)\n\n\n"
        "def run_batch(x):\n    return verify(x) + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import scheduler

    x = torch.randn(8, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as p:
        for _ in range(4):
            scheduler.run_batch(x)
    path = tmp_path / "real.trace.json"
    p.export_chrome_trace(str(path))
    s = rp.summarize(path)
    assert (s["rounds"], s["rounds_from"], s["other_rounds"], s["with_stack"]) == (3, "run_batch", 0, True)
    frames = {r["name"]: r for r in s["python_frames"]}
    assert frames["scheduler.py(4): verify"]["count_per_round"] == 1
    assert frames["scheduler.py(4): verify"]["total_us_per_round"] <= frames["scheduler.py(8): run_batch"]["total_us_per_round"]
    assert s["gpu_kernel_us_per_round"] == 0 and s["kernels"] == []


class ProfilingServer:
    """Answers /start_profile as SGLang 0.5.17 does when no start step is given (at once), then writes
    ``{profile_id}-TP-0.trace.json.gz`` into the asked directory: here the hand-made trace, with Python
    stacks if asked for them."""

    def __init__(self):
        self.payloads = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path == "/start_profile":
                    server.payloads.append(body)
                    path = Path(body["output_dir"]) / f"{time.time()}-TP-0.trace.json.gz"
                    path.write_bytes(gzip.compress(json.dumps({"traceEvents": _events(body["with_stack"])}).encode()))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def test_one_server_is_profiled_twice_during_its_load(tmp_path, monkeypatch):
    from bench import v2_profile

    server = ProfilingServer()
    calls = []
    record = {}

    def bench(base_url, questions, *, parallel, **kw):  # the load client (ours): the test's clock
        calls.append((len(questions), parallel, kw["ignore_eos"], kw["tokenizer"]))
        deadline = time.time() + 60
        while len(questions) == 5 and "stack" not in record.get("load_running_after", {}):
            assert time.time() < deadline  # the load runs until both profiles are taken
            time.sleep(0.05)
        return {"summary": {"output_throughput": 123.0}}

    monkeypatch.setattr(v2_profile, "run_benchmark", bench)
    a = Namespace(max_new=16, ignore_eos=True, parallel=4, settle_s=0.0, steps=2, capture_timeout=30.0, py_spy=None,
                  tokenizer="TOK")
    load = [{"question_id": i} for i in range(5)]
    warmup = [{"question_id": f"w{i}"} for i in range(2)]
    try:
        v2_profile.measure(server, "on_p64", record, a, tmp_path, load, warmup)
    finally:
        server.httpd.shutdown()
    assert [p["with_stack"] for p in server.payloads] == [False, True]
    assert all(p["num_steps"] == 2 and p["activities"] == ["CPU", "GPU"] for p in server.payloads)
    # warm-up mixes, then the load; every prompt with the chat template asked for
    assert calls[:2] == [(4, 4, True, "TOK"), (1, 3, True, "TOK")] and calls[2] == (5, 4, True, "TOK")
    assert record["summaries"] == {"nostack": "on_p64-nostack.json", "stack": "on_p64-stack.json"}
    assert record["load_running_after"] == {"nostack": True, "stack": True}
    assert record["load"] == {"output_throughput": 123.0} and "errors" not in record
    stack = json.loads((tmp_path / "on_p64-stack.json").read_text())
    assert stack["rounds_from"] == "run_batch" and stack["gpu_groups_us_per_round"]["ours"] == 10
    assert json.loads((tmp_path / "on_p64-nostack.json").read_text())["rounds_from"] == "given"
    text = v2_profile.report(tmp_path, ["on_p1", "on_p64"])  # on_p1 not profiled: left out
    assert "## nostack" in text and "| us per round (median; groups: mean) | on_p64 |" in text
    assert "## on_p64, stack" in text and "on_p1" not in text


def test_the_round_marks_probe_puts_ranges_a_real_trace_shows(tmp_path, monkeypatch):
    """scripts/device/probes/round_marks.py on stand-ins of SGLang's scheduler and v2 worker classes, profiled
    on the CPU without stacks: its ranges are the rounds, and the names match round_profile's."""
    torch = pytest.importorskip("torch")
    import sys

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "scripts" / "device" / "probes"))
    import round_marks

    assert (round_marks.RUN_BATCH_MARK, round_marks.VERIFY_MARK) == (rp.RUN_BATCH_MARK, rp.VERIFY_MARK)

    class Worker:
        def verify(self, x):
            return torch.mm(x, x)

    class Scheduler:
        def run_batch(self, x, verify=True):
            return Worker().verify(x) if verify else x + 1

    round_marks.mark(Scheduler, "run_batch", round_marks.RUN_BATCH_MARK)
    round_marks.mark(Worker, "verify", round_marks.VERIFY_MARK)
    assert Scheduler.run_batch.__name__ == "run_batch"
    x = torch.randn(8, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        for verify in (True, True, False, True, True):
            Scheduler().run_batch(x, verify=verify)
    path = tmp_path / "marked.trace.json"
    p.export_chrome_trace(str(path))
    s = rp.summarize(path)
    assert (s["rounds"], s["other_rounds"], s["with_stack"]) == (3, 1, False)  # 4 windows, one without verify
    # armed only by its variable
    monkeypatch.delenv(round_marks.ENV_VAR, raising=False)
    before = list(sys.meta_path)
    assert round_marks.install() is False and sys.meta_path == before
    monkeypatch.setenv(round_marks.ENV_VAR, "1")
    try:
        assert round_marks.install() is True
        added = [f for f in sys.meta_path if f not in before]
        assert sorted(f.name for f in added) == ["sglang.srt.managers.scheduler", "sglang.srt.speculative.eagle_worker_v2"]
    finally:
        sys.meta_path[:] = before
