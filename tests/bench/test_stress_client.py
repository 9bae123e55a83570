"""The reliability client (bench/stress/) against a fake in-process SGLang server.

The fake tokenizes by words (id = word index + 10, BOS = 1), answers /generate with and
without streaming, rejects empty ``input_ids`` with 400 like SGLang's
``GenerateReqInput`` does, and serves /v1/loads, /flush_cache and /health_generate.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("requests")

from bench import stress  # noqa: E402
from bench.e2e import RunConfig, agreement  # noqa: E402
from test_bench_mtbench import QUESTIONS, FakeSGLang  # noqa: E402

BOS = 1


class FakeStressSGLang(FakeSGLang):
    """The MT-bench fake's plumbing (quiet log, JSON replies) with the endpoints stress.py uses."""

    vocab: dict = {}
    lock = threading.Lock()
    state: dict = {}

    def do_GET(self):
        st = self.state
        if self.path in ("/health", "/health_generate"):
            return self._json(200, {})
        if self.path.startswith("/v1/loads"):
            return self._json(200, {"loads": [{"num_running_reqs": st.get("running", 0), "num_waiting_reqs": 0,
                                               "num_used_tokens": st.get("used", 0), "max_total_num_tokens": 4096,
                                               "token_usage": st.get("used", 0) / 4096}]})
        return self._json(404, {})

    def _ids(self, text, special):
        with self.lock:
            ids = [self.vocab.setdefault(w, 10 + len(self.vocab)) for w in text.split()]
        return ([BOS] if special else []) + ids

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        st = self.state
        if self.path == "/flush_cache":
            st["flushed"] = st.get("flushed", 0) + 1
            return self._json(200, {})
        if self.path == "/tokenize":
            ids = self._ids(req["prompt"], req.get("add_special_tokens", True))
            return self._json(200, {"tokens": ids, "count": len(ids), "max_model_len": 16384})
        if self.path != "/generate":
            return self._json(404, {})
        with self.lock:
            st.setdefault("requests", []).append(req)
        if "input_ids" in req and len(req["input_ids"]) == 0:
            code = st.get("empty_ids_status", 400)
            return self._json(code, {"error": {"message": "input_ids cannot be empty."}})
        if req.get("text") == "":
            return self._json(200, {"text": "", "meta_info": {"prompt_tokens": 1, "completion_tokens": 1}})
        ids = req.get("input_ids") or self._ids(req["text"], True)
        if ids[-1] == 13 and st.get("fail_marker"):
            return self._json(500, {"error": "boom"})
        n_new = req["sampling_params"]["max_new_tokens"]
        if req.get("stream"):
            return self._stream(n_new)
        meta = {"prompt_tokens": len(ids), "completion_tokens": min(n_new, 4), "spec_verify_ct": 2,
                "finish_reason": {"type": "length"}, "cached_tokens": len(ids) - 1}
        if len(ids) > 2:  # as SGLang with HiCache: part of the reused prefix came back from host memory
            meta["cached_tokens_details"] = {"device": 1, "host": len(ids) - 2}
        answer = f"A{sum(ids) % 97}"
        if req.get("return_logprob"):
            meta["output_token_logprobs"] = [[-0.1, 5, answer]]
            meta["output_top_logprobs"] = [[[-0.1, 5, answer], [-0.3, 6, "B"]]]
        return self._json(200, {"text": answer, "meta_info": meta})

    def _stream(self, n_new):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for i in range(min(n_new, 400)):
                self.wfile.write(b"data: " + json.dumps({"text": "x" * (i + 1)}).encode() + b"\n\n")
                self.wfile.flush()
                time.sleep(0.003)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            outcome = "completed"
        except (BrokenPipeError, ConnectionResetError):
            outcome = "disconnected"
        with self.lock:
            self.state.setdefault("streams", []).append(outcome)


@pytest.fixture
def fake():
    FakeStressSGLang.vocab = {}
    FakeStressSGLang.state = {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeStressSGLang)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", FakeStressSGLang.state
    httpd.shutdown()
    httpd.server_close()


# --------------------------------------------------------------------------- prompts

def test_server_tokenizer_and_special_prefix(fake):
    url, _ = fake
    tok = stress.ServerTokenizer(url)
    assert tok("a b a", False) == [10, 11, 10]
    assert tok.special_prefix() == [BOS]


def test_token_source_exact_lengths_distinct_and_seeded(fake):
    url, _ = fake
    src = stress.TokenSource.from_server(url, QUESTIONS, min_tokens=200, seed=3)
    assert src.prefix == [BOS] and len(src.stream) >= 200
    lengths = [5, 64, 128, 199]
    prompts = src.prompts(lengths, seed=1)
    assert list(prompts) == ["p0/1", "p1/1", "p2/1", "p3/1"]
    for n, p in zip(lengths, prompts.values()):
        ids = p["input_ids"]
        assert len(ids) == n and ids[0] == BOS and BOS not in ids[1:]
    assert prompts == src.prompts(lengths, seed=1)
    assert prompts != src.prompts(lengths, seed=2)
    with pytest.raises(ValueError):
        src.window(1, __import__("random").Random(0))  # nothing after BOS
    with pytest.raises(ValueError):
        src.window(len(src.stream) + 5, __import__("random").Random(0))


def test_corpus_text_covers_every_turn():
    import random

    text = stress.corpus_text(QUESTIONS, random.Random(0))
    for q in QUESTIONS:
        for t in q["turns"]:
            assert t in text


def test_seeded_lengths():
    a = stress.seeded_lengths(48, 500, 1500, seed=7)
    assert a == stress.seeded_lengths(48, 500, 1500, seed=7)
    assert len(a) == 48 and all(500 <= x <= 1500 for x in a)


# --------------------------------------------------------------------------- generation

def test_run_prompts_records_outputs_margins_and_errors(fake):
    url, st = fake
    prompts = {"p0/1": {"input_ids": [1, 20, 21]}, "p1/1": {"input_ids": [1, 22]}, "bad/1": {"input_ids": [1, 13]}}
    st["fail_marker"] = True
    res = stress.run_prompts(url, prompts, parallel=3, max_new_tokens=8, top_logprobs=2)
    assert res["summary"]["num_requests"] == 3 and res["summary"]["num_errors"] == 1
    assert res["errors"] and res["errors"][0].startswith("bad/1:")
    assert res["outputs"]["p0/1"] == f"A{(1 + 20 + 21) % 97}" and res["outputs"]["bad/1"] is None
    assert res["prompt_tokens"]["p0/1"] == 3 and res["sent_tokens"]["p1/1"] == 2
    assert res["cached_tokens"] == {"p0/1": 2, "p1/1": 1, "bad/1": None}
    assert res["cached_host_tokens"] == {"p0/1": 1, "p1/1": None, "bad/1": None}
    assert res["tokens"]["p0/1"][0][1] == pytest.approx(0.2)
    assert all(r["return_logprob"] and r["top_logprobs_num"] == 2 for r in st["requests"])
    # Recorded like an e2e run: agreement compares two of them.
    same = agreement(res["outputs"], dict(res["outputs"]), res["tokens"])
    assert same["compared"] == 2 and same["exact"] == 2


def test_aborting_stream_closes_the_connection(fake):
    url, st = fake
    res = stress.aborting_stream(url, {"input_ids": [1, 20]}, chunks=3, max_new_tokens=400)
    assert res == {"status": 200, "chunks": 3, "completed": False, "error": None}
    req = st["requests"][-1]
    assert req["stream"] is True and req["sampling_params"]["ignore_eos"] is True
    deadline = time.time() + 20
    while not st.get("streams") and time.time() < deadline:
        time.sleep(0.05)
    assert st["streams"] == ["disconnected"]  # the server saw the client go away


def test_aborting_stream_reads_to_done_when_short(fake):
    url, st = fake
    res = stress.aborting_stream(url, {"input_ids": [1, 20]}, chunks=50, max_new_tokens=4)
    assert res["chunks"] == 4 and res["completed"] is True


# --------------------------------------------------------------------------- soak

def _source():
    stream = list(range(10, 5010))
    src = stress.TokenSource(lambda text, special: stream, QUESTIONS, min_tokens=4000, prefix=[BOS])
    return src


def test_soak_covers_every_kind_and_finds_nothing_unexpected(fake):
    url, st = fake
    cfg = stress.SoakConfig(duration_s=600, max_requests=60, seed=5, workers=4, page_size=16, mean_gap_s=0,
                            max_prompt=300, max_new=20, abort_max_new=400, max_pages=4,
                            weights={k: 1 for k in stress.SOAK_KINDS})
    res = stress.soak(url, _source(), cfg)
    assert res["requests"] == 60
    assert all(res["counts"][k] > 0 for k in stress.SOAK_KINDS), res["counts"]
    assert res["unexpected_count"] == 0, res["unexpected"]
    assert res["empty_statuses"]["empty_ids"] == {"400": res["counts"]["empty_ids"]}
    assert res["aborts_cut_short"] == res["counts"]["abort"]
    reqs = st["requests"]
    pages = [len(r["input_ids"]) for r in reqs if r.get("input_ids") and len(r["input_ids"]) % 16 == 0]
    assert pages  # page-multiple prompts went out as input_ids
    ones = [r for r in reqs if r["sampling_params"]["max_new_tokens"] == 1]
    assert ones


def test_soak_flags_a_server_error_on_empty_input(fake):
    url, st = fake
    st["empty_ids_status"] = 500
    cfg = stress.SoakConfig(duration_s=600, max_requests=6, workers=2, mean_gap_s=0, weights={"empty_ids": 1})
    res = stress.soak(url, _source(), cfg)
    assert res["unexpected_count"] == 6 and "status 500" in res["unexpected"][0]


def test_soak_flags_one_token_requests_that_generate_more(fake, monkeypatch):
    from bench.stress import soak_driver

    url, st = fake
    # The fake answers min(max_new, 4) tokens: a 'one' request reporting 2 would be flagged.
    cfg = stress.SoakConfig(duration_s=600, max_requests=4, workers=1, mean_gap_s=0, max_prompt=50,
                            weights={"one": 1})
    orig = soak_driver._meta_record
    monkeypatch.setattr(soak_driver, "_meta_record", lambda out: {**orig(out), "completion_tokens": 2})
    res = stress.soak(url, _source(), cfg)
    assert res["unexpected_count"] == 4 and res["unexpected"][0].startswith("one:")


# --------------------------------------------------------------------------- server state

def test_loads_wait_idle_and_idle_check(fake):
    url, st = fake
    st.update(running=0, used=128)
    assert stress.loads(url)["num_used_tokens"] == 128
    assert stress.wait_idle(url, timeout=5) is not None
    st["running"] = 2
    assert stress.wait_idle(url, timeout=0.3, interval=0.1) is None
    st["running"] = 0
    res = stress.idle_check(url, idle_s=0, drain_timeout=5)
    assert res["loads_idle"]["num_used_tokens"] == 128  # reported, for the test to judge
    assert res["flush_cache_status"] == 200 and st["flushed"] == 1
    assert res["health_generate_status"] == 200 and res["health_status"] == 200


def test_load_poller_records_peaks(fake):
    url, st = fake
    st.update(running=7, used=300)
    with stress.LoadPoller(url, interval=0.01) as p:
        deadline = time.time() + 10
        while p.samples < 2 and time.time() < deadline:
            time.sleep(0.01)
    r = p.result()
    assert r["samples"] >= 2 and r["peak"]["num_running_reqs"] == 7 and r["peak"]["num_used_tokens"] == 300


def test_idle_check_reports_a_dead_server():
    res = stress.idle_check("http://127.0.0.1:9", idle_s=0, drain_timeout=0.2)
    assert res["drain_s"] is None
    assert isinstance(res["health_generate_status"], str) and "error" in res["loads_idle"]


# --------------------------------------------------------------------------- logs

LOG = """\
[2026-12-01 10:00:00] server_args=ServerArgs(...)
[2026-12-01 10:00:01] [sglang-eagle-paged] active: mode=on, worker=x, kv copy=y, sglang 0.5.12.post1
[2026-12-01 10:00:05 TP0] [sglang-eagle-paged] active: mode=on, worker=x, kv copy=y, sglang 0.5.12.post1
[2026-12-01 10:00:05 TP1] [sglang-eagle-paged] active: mode=on, worker=x, kv copy=y, sglang 0.5.12.post1
[2026-12-01 10:01:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 384, #new_token_ratio: 0.4 -> 0.6
[2026-12-01 10:01:02 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 256, #new_token_ratio: 0.6 -> 0.8
[2026-12-01 10:02:00 TP0] pool memory leak detected! [full] total=12288, available=0
[2026-12-01 10:02:01] [http_server] Error: input_ids cannot be empty.
Traceback (most recent call last):
RuntimeError: CUDA error: an illegal memory access was encountered
"""


def test_scan_log_file_reads_plain_and_gzipped_logs(tmp_path):
    import gzip

    plain = tmp_path / "a.log"
    plain.write_text(LOG)
    with gzip.open(tmp_path / "b.log.gz", "wt") as f:
        f.write(LOG)
    assert stress.scan_log_file(plain) == stress.scan_log_file(tmp_path / "b.log.gz") == stress.scan_log(LOG)
    assert "error" in stress.scan_log_file(tmp_path / "missing.log")


def test_scan_log():
    s = stress.scan_log(LOG)
    assert s["retract"] == 2 and s["retracted_reqs"] == 5
    assert s["leak"] == 1 and s["traceback"] == 1 and s["cuda_error"] == 1 and s["http_error"] == 1
    assert s["plugin_active"] == {"main": "on", "TP0": "on", "TP1": "on"}
    assert s["examples"]["leak"][0].endswith("available=0")
    clean = stress.scan_log("[x] [sglang-eagle-paged] SGLANG_EAGLE_PAGED=off: stock SGLang 0.5.12.post1\n")
    assert clean["retract"] == clean["leak"] == 0 and clean["plugin_active"] == {}
    assert clean["plugin_other"]
    short = stress.scan_log("[x TP0] [sglang-eagle-paged] draft slots allocated by SGLang (the free list is short of "
                            "the extension); not logged again for this reason\n")
    assert short["plugin_other"] and short["traceback"] == 0
    eager = stress.scan_log("[x TP0] [sglang-eagle-paged] verify bookkeeping kernel not used (RuntimeError: x); "
                            "eager torch ops instead\n")
    assert eager["plugin_other"]


# SGLang 0.5.12's HTTP start-up without the optional openai_harmony package (run 4, every server).
OPTIONAL_ENDPOINT = """\
[2026-11-30 07:12:33] INFO:     Waiting for application startup.
[2026-11-30 07:12:33] Can not initialize OpenAIServingResponses, error: Traceback (most recent call last):
  File "/tmp/site/sglang/srt/entrypoints/http_server.py", line 365, in lifespan
    from sglang.srt.entrypoints.openai.serving_responses import (
  File "/tmp/site/sglang/srt/entrypoints/openai/serving_responses.py", line 30, in <module>
    from openai_harmony import Message as OpenAIMessage
ModuleNotFoundError: No module named 'openai_harmony'

[2026-11-30 07:12:33] INFO:     Application startup complete.
"""

# A scheduler that died (run 4's TP=2 server): a traceback that must count.
SCHEDULER_CRASH = """\
[2026-11-30 07:11:48 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/tmp/site/sglang/srt/managers/scheduler.py", line 4025, in run_scheduler_process
    scheduler = Scheduler(
RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes.
"""


def test_scan_log_counts_an_optional_endpoint_apart_from_tracebacks():
    s = stress.scan_log(OPTIONAL_ENDPOINT)
    assert s["traceback"] == 0 and s["optional_endpoint"] == 1
    (example,) = s["examples"]["optional_endpoint"]
    assert "OpenAIServingResponses" in example and example.endswith("No module named 'openai_harmony'")
    assert s["examples"]["traceback"] == []


def test_scan_log_still_counts_every_other_traceback():
    s = stress.scan_log(OPTIONAL_ENDPOINT + SCHEDULER_CRASH)
    assert s["optional_endpoint"] == 1 and s["traceback"] == 1
    assert s["examples"]["traceback"] == ["[2026-11-30 07:11:48 TP0] Scheduler hit an exception: Traceback "
                                          "(most recent call last):"]
    # The crash's exception is not taken for the optional endpoint's
    assert s["examples"]["optional_endpoint"][0].endswith("'openai_harmony'")
    # A traceback right after the optional one (no exception line between) counts, and is not attached to it
    s = stress.scan_log("[t] Can not initialize OpenAIServingChat, error: Traceback (most recent call last):\n"
                        + SCHEDULER_CRASH)
    assert s["optional_endpoint"] == 1 and s["traceback"] == 1
    assert s["examples"]["optional_endpoint"] == ["[t] Can not initialize OpenAIServingChat, error: Traceback "
                                                  "(most recent call last):"]
    # Other wording around an endpoint's failure is no exemption
    s = stress.scan_log("[t] Can not initialize OpenAIServingResponses\nTraceback (most recent call last):\n")
    assert s["optional_endpoint"] == 0 and s["traceback"] == 1

def test_long_context_copy(tmp_path):
    src = tmp_path / "m"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"max_position_embeddings": 8192, "hidden_size": 4}))
    (src / "tokenizer.json").write_text("{}")
    dst = stress.long_context_copy(src, tmp_path / "long", 40960)
    assert json.loads((dst / "config.json").read_text()) == {"max_position_embeddings": 40960, "hidden_size": 4}
    assert (dst / "tokenizer.json").is_symlink()
    assert json.loads((src / "config.json").read_text())["max_position_embeddings"] == 8192
    stress.long_context_copy(src, tmp_path / "long", 40960)  # idempotent


# --------------------------------------------------------------------------- runner

@pytest.fixture
def no_stagger(monkeypatch):
    """run_group's servers start without serve_group's 1 s between starts."""
    from bench.stress import runner

    monkeypatch.setattr(runner, "serve_group", functools.partial(runner.serve_group, stagger_s=0.0))


class FakeLauncher:
    started = []
    alive = set()  # names started and not yet stopped
    starts = []  # (name, names alive when it started)

    def __init__(self, args, *, port, env, log_path, startup_timeout, url, fail=()):
        self.args, self.env, self.log_path, self.url, self.fail = args, env, Path(log_path), url, fail
        self.stopped = False
        self.name = self.log_path.stem

    @property
    def base_url(self):
        return self.url

    def start(self):
        FakeLauncher.started.append(self)
        FakeLauncher.starts.append((self.name, set(FakeLauncher.alive)))
        FakeLauncher.alive.add(self.name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text(LOG if "--tp" in self.args else "[t] started\n")
        return self

    def wait_ready(self):
        if Path(self.log_path).stem in self.fail:
            raise stress.ServerStartError("never healthy", "last words")

    def terminate(self):
        pass

    def stop(self):
        self.stopped = True
        FakeLauncher.alive.discard(self.name)


def test_run_group_records_resumes_and_keeps_going(fake, no_stagger, tmp_path):
    url, _ = fake
    FakeLauncher.started = []
    specs = [
        stress.ServerSpec(RunConfig("a_on", page_size=128, extra=["--tp", "2", "--log-level", "info"]),
                          target="T", draft="D", port=31000, max_total_tokens=12288),
        stress.ServerSpec(RunConfig("b_nospec", algorithm=None, env={"X": "1"}), target="T", draft="D", port=31020,
                          max_total_tokens=65536),
        stress.ServerSpec(RunConfig("c_dead"), target="T", draft="D", port=31040, max_total_tokens=4096),
    ]
    calls = []

    def work(name):
        def run(base):
            calls.append(name)
            if name == "b_nospec":
                raise RuntimeError("client blew up")
            return {"summary": {"acceptance_length": 2.0}, "outputs": {"p0/1": "x"}}
        return run

    launcher = lambda args, **kw: FakeLauncher(args, url=url, fail=("c_dead",), **kw)  # noqa: E731
    out = tmp_path / "r.json"
    res = stress.run_group(specs, {s.name: work(s.name) for s in specs}, out_json=str(out),
                           log_dir=str(tmp_path / "logs"), launcher=launcher)
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    assert calls == ["a_on", "b_nospec"]  # the TP=2 server alone, before the others
    a = res["a_on"]
    assert not a.get("error") and a["outputs"] == {"p0/1": "x"}
    assert a["server_args"][a["server_args"].index("--max-total-tokens") + 1] == "12288"
    # Extras come last, so they override configs.server_args' --log-level warning.
    assert a["server_args"][::-1].index("info") < a["server_args"][::-1].index("warning")
    assert "--sleep-on-idle" not in a["server_args"]  # alone: nothing to share its GPUs with
    assert "--sleep-on-idle" in res["b_nospec"]["server_args"]
    assert a["log_scan"]["plugin_active"]["TP1"] == "on" and a["log_scan"]["retract"] == 2
    assert "client blew up" in res["b_nospec"]["error"]
    b = next(s for s in FakeLauncher.started if Path(s.log_path).stem == "b_nospec")
    assert b.env["X"] == "1" and b.env["SGLANG_EAGLE_PAGED"] == "on"
    assert "--speculative-algorithm" not in res["b_nospec"]["server_args"]
    assert res["c_dead"]["error"].startswith("never healthy") and res["c_dead"]["log_tail"] == "last words"
    assert all(s.stopped for s in FakeLauncher.started)

    # A second run re-runs only what failed.
    FakeLauncher.started, calls[:] = [], []
    stress.run_group(specs, {s.name: work(s.name) for s in specs}, out_json=str(out),
                     log_dir=str(tmp_path / "logs"), launcher=launcher)
    assert sorted(Path(s.log_path).stem for s in FakeLauncher.started) == ["b_nospec", "c_dead"]
    assert calls == ["b_nospec"]


def test_run_group_spreads_servers_over_gpus_and_keeps_tp_on_gpu_0_alone(fake, no_stagger, tmp_path):
    url, _ = fake
    FakeLauncher.started = []
    specs = [stress.ServerSpec(RunConfig("soak", page_size=128), target="T", draft="D", port=31000,
                               max_total_tokens=4096),
             stress.ServerSpec(RunConfig("tp2", page_size=64, extra=["--tp", "2"]), target="T", draft="D",
                               port=31020, max_total_tokens=4096),
             stress.ServerSpec(RunConfig("a"), target="T", draft="D", port=31040, max_total_tokens=4096),
             stress.ServerSpec(RunConfig("b"), target="T", draft="D", port=31060, max_total_tokens=4096)]
    launcher = lambda args, **kw: FakeLauncher(args, url=url, fail=(), **kw)  # noqa: E731
    res = stress.run_group(specs, {s.name: (lambda base: {"ok": True}) for s in specs}, out_json=str(tmp_path / "r.json"),
                           log_dir=str(tmp_path / "logs"), launcher=launcher, gpus=2, costs={"soak": 3.0})
    args = {Path(s.log_path).stem: s.args for s in FakeLauncher.started}
    assert "--base-gpu-id" not in args["tp2"] and res["tp2"]["gpu"] == 0  # SGLang places TP from GPU 0
    gpu = {n: a[a.index("--base-gpu-id") + 1] for n, a in args.items() if "--base-gpu-id" in a}
    assert gpu == {"soak": "0", "a": "1", "b": "1"}  # the soak's 3 units outweigh a's and b's 1 each
    # Without costs TP's run counts on no GPU (it runs alone): a and b are dealt as if it were not there.
    FakeLauncher.started = []
    stress.run_group(specs, {s.name: (lambda base: {"ok": True}) for s in specs}, out_json=str(tmp_path / "r2.json"),
                     log_dir=str(tmp_path / "logs2"), launcher=launcher, gpus=2)
    args = {Path(s.log_path).stem: s.args for s in FakeLauncher.started}
    gpu = {n: a[a.index("--base-gpu-id") + 1] for n, a in args.items() if "--base-gpu-id" in a}
    assert gpu == {"soak": "0", "a": "1", "b": "0"}
    assert all(r.get("ok") for r in res.values())


@pytest.mark.parametrize("gpus", [1, 2])
def test_a_tensor_parallel_server_is_never_alive_beside_another(fake, no_stagger, tmp_path, gpus):
    """SGLang refuses TP ranks on GPUs with unequal free memory (run 4: 'The memory capacity is
    unbalanced' with the other groups' servers starting beside TP=2): each TP > 1 server starts
    alone, before the others (run 5: last, it was cut by the call's time limit)."""
    url, _ = fake
    FakeLauncher.started, FakeLauncher.starts, FakeLauncher.alive = [], [], set()
    spec = lambda name, port, extra=(): stress.ServerSpec(  # noqa: E731
        RunConfig(name, page_size=64, extra=list(extra)), target="T", draft="D", port=port, max_total_tokens=4096)
    specs = [spec("tp2", 31000, ["--tp", "2"]), spec("a", 31020), spec("tp1", 31040, ["--tp", "1"]),
             spec("tp2b", 31060, ["--tp-size=2"]), spec("b", 31080), spec("c", 31100)]
    seen, waits = {}, []

    def work(name):
        def run(base):
            seen[name] = set(FakeLauncher.alive)  # who is up while it is measured
            return {"ok": True}
        return run

    def wait_free():
        waits.append(set(FakeLauncher.alive))
        return {"used_mib": [0] * gpus, "waited_s": 0.0, "free": True}

    launcher = lambda args, **kw: FakeLauncher(args, url=url, fail=(), **kw)  # noqa: E731
    res = stress.run_group(specs, {s.name: work(s.name) for s in specs}, out_json=str(tmp_path / "r.json"),
                           log_dir=str(tmp_path / "logs"), launcher=launcher, gpus=gpus, wait_free=wait_free)
    assert all(r.get("ok") and not r.get("error") for r in res.values()), res
    tp = {"tp2", "tp2b"}
    for name, alive_then in FakeLauncher.starts:
        if name in tp:
            assert alive_then == set(), f"{name} started beside {alive_then}"
        else:
            assert not alive_then & tp, f"{name} started beside {alive_then & tp}"
    assert seen["tp2"] == {"tp2"} and seen["tp2b"] == {"tp2b"}
    assert all(not seen[n] & tp for n in ("a", "tp1", "b", "c"))
    # the TP > 1 servers first, one at a time, then the others (TP 1 included) together
    assert [n for n, _ in FakeLauncher.starts] == ["tp2", "tp2b", "a", "tp1", "b", "c"]
    assert waits == [set(), set()]  # asked before each TP start, with nothing up
    assert res["tp2"]["gpus_before_start"]["free"] and "gpus_before_start" not in res["a"]
    assert "--base-gpu-id" not in res["tp2"]["server_args"] and res["tp2b"]["gpu"] == 0
    assert FakeLauncher.alive == set()


def test_run_group_interrupted_records_what_it_did_not_measure(fake, no_stagger, tmp_path):
    """A stop (the suite's time limit) during the TP server, which runs first, leaves the shared
    servers unstarted: recorded as not measured, keeping the error an earlier run recorded."""
    url, _ = fake
    FakeLauncher.started, FakeLauncher.starts, FakeLauncher.alive = [], [], set()
    specs = [stress.ServerSpec(RunConfig("a"), target="T", draft="D", port=31000, max_total_tokens=4096),
             stress.ServerSpec(RunConfig("tp2", extra=["--tp", "2"]), target="T", draft="D", port=31020,
                               max_total_tokens=4096)]
    out = tmp_path / "r.json"
    out.write_text(json.dumps({"tp2": {"error": "an earlier run's"},
                               "a": {"error": "server exited with code -9 before becoming healthy"}}))

    def interrupted(base):
        raise KeyboardInterrupt

    launcher = lambda args, **kw: FakeLauncher(args, url=url, fail=(), **kw)  # noqa: E731
    with pytest.raises(KeyboardInterrupt):
        stress.run_group(specs, {"a": lambda base: {}, "tp2": interrupted}, out_json=str(out),
                         log_dir=str(tmp_path / "logs"), launcher=launcher)
    res = json.loads(out.read_text())
    assert [n for n, _ in FakeLauncher.starts] == ["tp2"] and FakeLauncher.alive == set()
    assert res["tp2"]["error"] == "not measured: interrupted before its workload ran" and "log_scan" in res["tp2"]
    assert res["a"]["error"] == "not measured: interrupted before its server started"
    assert res["a"]["earlier_error"].startswith("server exited") and "--model-path" in res["a"]["server_args"]


def test_tp_size_reads_every_spelling():
    assert stress.tp_size(["--model-path", "m"]) == 1
    assert stress.tp_size(["--tp", "2"]) == 2 and stress.tp_size(["--tp-size=4"]) == 4
    assert stress.tp_size(["--tensor-parallel-size", "1", "--port", "2"]) == 1


def test_wait_gpus_free_waits_for_the_memory_to_come_back():
    seen = iter([[66000, 120], [2500, 0], [300, 0]])
    res = stress.wait_gpus_free(used=lambda: next(seen), poll_s=0, max_used_mib=2048)
    assert res["used_mib"] == [300, 0] and res["free"] is True
    # still busy at the time limit: says so (the TP server's own check then decides)
    res = stress.wait_gpus_free(used=lambda: [66000, 0], poll_s=0, timeout_s=0)
    assert res["free"] is False and res["used_mib"] == [66000, 0]
    # no nvidia-smi: cannot tell, does not wait
    assert stress.wait_gpus_free(used=lambda: None)["free"] is None
