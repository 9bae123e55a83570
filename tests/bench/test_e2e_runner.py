"""The GPU suite's runner on the CPU: fake servers, real client, real bookkeeping.

The runner only ever ran on the H200 inside the suite; these tests keep a later
device session from spending its minutes on a bookkeeping bug.
"""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from bench import e2e
from sglang_eagle_paged.bench import configs as bench_configs, kv_sizing, triton_cache
from test_bench_mtbench import QUESTIONS, FakeSGLang, fake_server  # noqa: F401  (fixture)

# A tokenizer with a chat template (Llama-3's layout) that ships with the package.
TEMPLATED_TOKENIZER = Path(bench_configs.__file__).resolve().parents[1] / "testbed" / "target"


class FakeServer:
    """Stands in for ServerProcess: records its env and life cycle, 'compiles' one kernel variant."""

    started = []
    events = []

    def __init__(self, args, *, port, env, log_path, startup_timeout, base_url, cpus=None):
        self.args, self.env, self.base_url, self.name = args, env, base_url, Path(log_path).stem
        self.cpus = cpus

    def start(self):
        FakeServer.started.append(self)
        FakeServer.events.append(("start", self.name))
        return self

    def wait_ready(self):
        FakeServer.events.append(("ready", self.name))
        variant = Path(self.env["TRITON_CACHE_DIR"]) / "hash0"
        variant.mkdir(parents=True, exist_ok=True)
        (variant / "_duplicate_kv_kernel.json").write_text("{}")
        (variant / "__grp___duplicate_kv_kernel.json").write_text("{}")  # not a variant

    def terminate(self):
        FakeServer.events.append(("terminate", self.name))

    def stop(self):
        FakeServer.events.append(("stop", self.name))


@pytest.fixture
def questions(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return p


@pytest.fixture
def fake_servers(monkeypatch, fake_server):  # noqa: F811
    """e2e launches FakeServers against the fake SGLang; no stagger sleeps."""
    url, _ = fake_server
    FakeServer.started, FakeServer.events = [], []
    monkeypatch.setattr(bench_configs, "ServerProcess", lambda args, **kw: FakeServer(args, base_url=url, **kw))
    monkeypatch.setattr(e2e.time, "sleep", lambda s: None)
    return FakeServer


def test_run_configs_warms_up_measures_and_counts_variants(monkeypatch, tmp_path, questions, fake_server):  # noqa: F811
    url, _ = fake_server
    FakeServer.started = []
    monkeypatch.setattr(bench_configs, "ServerProcess", lambda args, **kw: FakeServer(args, base_url=url, **kw))
    configs = [bench_configs.RunConfig("nospec_p1", algorithm=None), bench_configs.RunConfig("on_p64", page_size=64, mode="on"),
               bench_configs.RunConfig("fake_p64", page_size=64, mode="fake")]
    out = tmp_path / "e2e.json"
    res = e2e.run_configs(configs, target="T", draft="D", out_json=str(out), log_dir=str(tmp_path / "logs"),
                          num_questions=2, question_file=str(questions), warmup=1, max_new_tokens=8)

    assert json.loads(out.read_text()) == res
    assert [s.env["SGLANG_EAGLE_PAGED"] for s in FakeServer.started] == ["on", "on", "fake"]
    assert len({s.env["TRITON_CACHE_DIR"] for s in FakeServer.started}) == 3  # fresh cache per server
    assert "--speculative-algorithm" not in FakeServer.started[0].args
    assert FakeServer.started[1].args[FakeServer.started[1].args.index("--page-size") + 1] == "64"
    for name in ("nospec_p1", "on_p64", "fake_p64"):
        rec = res[name]
        assert not rec.get("error"), rec
        assert rec["summary"]["num_requests"] == 4  # 2 measured questions x 2 turns, warm-up not counted
        assert set(rec["outputs"]) == {"1/1", "1/2", "2/1", "2/2"}
        assert rec["triton_variants_after_warmup"]["_duplicate_kv_kernel"] == 1
        assert rec["triton_variants_after_run"] == rec["triton_variants_after_warmup"]
        assert rec["triton_compiled_during_run"] == {}
    assert res["on_p64"]["summary"]["acceptance_length"] == pytest.approx(3.0)
    # per-request counts for the suite's paired noise estimates, only where there is speculation
    assert set(res["on_p64"]["spec_counts"]) == {"1/1", "1/2", "2/1", "2/2"} and "spec_counts" not in res["nospec_p1"]
    assert all(t / v == pytest.approx(3.0) for t, v in res["on_p64"]["spec_counts"].values())

    # A resumed run skips what was measured already.
    FakeServer.started = []
    e2e.run_configs(configs, target="T", draft="D", out_json=str(out), log_dir=str(tmp_path / "logs"),
                    num_questions=2, question_file=str(questions), warmup=1)
    assert FakeServer.started == []


def test_concurrent_groups_start_together_and_are_measured_one_at_a_time(monkeypatch, tmp_path, questions,
                                                                         fake_servers):
    configs = [bench_configs.RunConfig(f"on_p{p}", page_size=p) for p in (1, 16, 64)] + [
        bench_configs.RunConfig("triton_on_p64", page_size=64, backend="triton")]
    res = e2e.run_configs(configs, target="T", draft="D", out_json=str(tmp_path / "e.json"),
                          log_dir=str(tmp_path / "logs"), num_questions=1, question_file=str(questions),
                          warmup=1, concurrency=3, parallel1_questions=1)
    ev = FakeServer.events
    # group 1: three starts, then all three ready before any is measured (and stopped)
    assert ev[:6] == [("start", "on_p1"), ("start", "on_p16"), ("start", "on_p64"),
                      ("ready", "on_p1"), ("ready", "on_p16"), ("ready", "on_p64")]
    assert ev.index(("stop", "on_p1")) < ev.index(("stop", "on_p16")) < ev.index(("stop", "on_p64"))
    assert ev.index(("stop", "on_p64")) < ev.index(("start", "triton_on_p64"))
    assert all("--sleep-on-idle" in s.args for s in FakeServer.started)
    assert FakeServer.started[3].env.get("SGLANG_EAGLE_PAGED_ALLOW_TRITON") == "1"
    assert "SGLANG_EAGLE_PAGED_ALLOW_TRITON" not in FakeServer.started[0].env
    for name in ("on_p1", "on_p16", "on_p64", "triton_on_p64"):
        assert not res[name].get("error") and res[name]["summary_parallel1"]["num_requests"] == 2


def test_two_gpus_each_measure_their_own_servers_side_by_side(monkeypatch, tmp_path, questions,
                                                             fake_servers):
    both_lanes_busy = threading.Barrier(2, timeout=10)
    real_measure = e2e._measure

    def measure(server, cfg, *a, **kw):
        if cfg.name in ("on_p1", "on_p16"):  # the first server of each GPU: only passes if they overlap
            both_lanes_busy.wait()
        return real_measure(server, cfg, *a, **kw)

    monkeypatch.setattr(e2e, "_measure", measure)
    configs = [bench_configs.RunConfig(f"on_p{p}", page_size=p) for p in (1, 16, 64, 128)]
    res = e2e.run_configs(configs, target="T", draft="D", out_json=str(tmp_path / "e.json"),
                          log_dir=str(tmp_path / "logs"), num_questions=1, question_file=str(questions),
                          warmup=0, concurrency=4, gpus=2)
    gpu_of = {s.name: s.args[s.args.index("--base-gpu-id") + 1] for s in FakeServer.started}
    assert gpu_of == {"on_p1": "0", "on_p16": "1", "on_p64": "0", "on_p128": "1"}
    assert {n: r["gpu"] for n, r in res.items()} == {n: int(g) for n, g in gpu_of.items()}
    ev = FakeServer.events
    assert max(ev.index(("ready", n)) for n in gpu_of) < min(ev.index(("stop", n)) for n in gpu_of)
    # within a GPU, one server after the other
    assert ev.index(("stop", "on_p1")) < ev.index(("stop", "on_p64"))
    assert ev.index(("stop", "on_p16")) < ev.index(("stop", "on_p128"))
    assert all(not r.get("error") and r["summary"]["num_requests"] == 2 for r in res.values())
    assert json.loads((tmp_path / "e.json").read_text()).keys() == res.keys()


def test_slow_builtin_servers_are_spread_over_the_gpus(monkeypatch, tmp_path, questions, fake_servers):
    """SGLang's built-in takes ~7x ours to measure (run 3): two of them must not share a GPU's queue."""
    configs = [bench_configs.RunConfig("on_p1"), bench_configs.RunConfig("off_p64", mode="off", page_size=64),
               bench_configs.RunConfig("on_p64", page_size=64), bench_configs.RunConfig("on_p128", page_size=128),
               bench_configs.RunConfig("off_p128", mode="off", page_size=128), bench_configs.RunConfig("on_p16", page_size=16)]
    e2e.run_configs(configs, target="T", draft="D", out_json=str(tmp_path / "e.json"),
                    log_dir=str(tmp_path / "logs"), num_questions=1, question_file=str(questions),
                    warmup=0, concurrency=6, gpus=2)
    gpu_of = {s.name: s.args[s.args.index("--base-gpu-id") + 1] for s in FakeServer.started}
    assert gpu_of["off_p64"] != gpu_of["off_p128"], gpu_of
    per_gpu = [sum(e2e.measure_cost(c) for c in configs if gpu_of[c.name] == g) for g in "01"]
    assert max(per_gpu) - min(per_gpu) <= 7.0, per_gpu


def test_builtin_servers_are_measured_after_all_of_ours_on_every_gpu(monkeypatch, tmp_path, questions,
                                                                     fake_servers):
    """SGLang's built-in compiles all through its run: never measured beside one of ours."""
    spans = {}
    real_measure = e2e._measure

    def measure(server, cfg, *a, **kw):
        t0 = time.monotonic()
        if cfg.name == "on_p16":
            threading.Event().wait(0.3)  # GPU 1's ours runs long: GPU 0's built-in must wait for it
        out = real_measure(server, cfg, *a, **kw)
        spans[cfg.name] = (t0, time.monotonic())
        return out

    monkeypatch.setattr(e2e, "_measure", measure)
    configs = [bench_configs.RunConfig("on_p1"), bench_configs.RunConfig("on_p16", page_size=16),
               bench_configs.RunConfig("off_p64", mode="off", page_size=64), bench_configs.RunConfig("on_p64", page_size=64)]
    e2e.run_configs(configs, target="T", draft="D", out_json=str(tmp_path / "e.json"), log_dir=str(tmp_path / "logs"),
                    num_questions=1, question_file=str(questions), warmup=0, concurrency=4, gpus=2)
    ours_end = max(end for name, (_, end) in spans.items() if name.startswith("on_"))
    assert spans["off_p64"][0] >= ours_end, spans


def test_a_group_stopped_mid_run_marks_what_it_did_not_measure(monkeypatch, tmp_path, questions,
                                                                fake_servers, sigint_raises):
    """A time limit that stops the group must not leave its unmeasured servers looking measured
    (2026-11-30 run 3: lanes kept 'measuring' stopped servers and recorded 0 tok/s, no error)."""
    real_measure = e2e._measure

    def measure(server, cfg, *a, **kw):
        if cfg.name == "on_p64":
            # the suite's timeout (SIGINT to the main thread) while GPU 0 measures its second server
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 10  # the teardown stops every server under this measurement
            while ("stop", "on_p64") not in FakeServer.events and time.monotonic() < deadline:
                threading.Event().wait(0.01)
        return real_measure(server, cfg, *a, **kw)

    monkeypatch.setattr(e2e, "_measure", measure)
    configs = [bench_configs.RunConfig(f"on_p{p}", page_size=p) for p in (1, 16, 64, 128, 256)]
    out = tmp_path / "e.json"
    with pytest.raises(KeyboardInterrupt):
        e2e.run_configs(configs, target="T", draft="D", out_json=str(out), log_dir=str(tmp_path / "logs"),
                        num_questions=1, question_file=str(questions), warmup=0, concurrency=5, gpus=2)
    res = json.loads(out.read_text())
    assert not res["on_p1"].get("error") and res["on_p1"]["summary"]["num_errors"] == 0
    for name in ("on_p64", "on_p256"):  # GPU 0 after the interrupt
        assert res[name].get("error"), (name, {k: v for k, v in res[name].items() if k not in ("config", "server_args", "outputs")})
    # GPU 1's servers: measured before the stop, or marked as not measured; never a silent 0 tok/s
    for name in ("on_p16", "on_p128"):
        r = res[name]
        assert r.get("error") or (r["summary"]["num_errors"] == 0 and r["summary"]["output_throughput"] > 0), r


def test_warm_up_prompts_differ_from_the_measured_ones(monkeypatch, tmp_path, questions, fake_server):  # noqa: F811
    url, _ = fake_server
    from test_bench_mtbench import FakeSGLang

    FakeServer.started = []
    monkeypatch.setattr(bench_configs, "ServerProcess", lambda args, **kw: FakeServer(args, base_url=url, **kw))
    FakeSGLang.prompts = []
    e2e.run_configs([bench_configs.RunConfig("nospec_p1", algorithm=None)], target="T", draft="D",
                    out_json=str(tmp_path / "e.json"), log_dir=str(tmp_path / "logs"), num_questions=3,
                    question_file=str(questions), warmup=2)
    warm = [p["text"] for p in FakeSGLang.prompts if "Briefly:" in p["text"]]
    measured = [p["text"] for p in FakeSGLang.prompts if "Briefly:" not in p["text"]]
    assert warm and len(measured) == 6 and not set(warm) & set(measured)


def _spy_benchmark(monkeypatch, completion_tokens):
    """run_benchmark as the runner calls it, recorded, with each answer's completion_tokens set
    by ``completion_tokens(request)`` (the fake server claims 30 but sends two logprob entries)."""
    calls, real = [], e2e.run_benchmark

    def spy(url, questions, **kw):
        calls.append(kw)
        out = real(url, questions, **kw)
        for r in out["requests"]:
            r["completion_tokens"] = completion_tokens(r)
        return out

    monkeypatch.setattr(e2e, "run_benchmark", spy)
    return calls


def test_every_configuration_records_token_margins(monkeypatch, tmp_path, questions, fake_servers):
    calls = _spy_benchmark(monkeypatch, completion_tokens=lambda r: len(r.get("tokens") or ()))
    res = e2e.run_configs([bench_configs.RunConfig("nospec_p1", algorithm=None), bench_configs.RunConfig("on_p64", page_size=64)],
                          target="T", draft="D", out_json=str(tmp_path / "e.json"), log_dir=str(tmp_path / "l"),
                          num_questions=1, question_file=str(questions), warmup=1, parallel1_questions=1)
    for name in ("nospec_p1", "on_p64"):  # speculative too: any run can be the reference
        assert res[name]["tokens"]["1/1"] == [["ANS", 0.3, "X"], ["WER[1]", 1.3, "X"]]
        assert res[name]["tokens_unmatched"] == []
    # per server: two warm-up mixes, the measured pass, parallel 1; only the measured pass pays for logprobs
    assert [c.get("top_logprobs", 0) for c in calls] == [0, 0, 2, 0] * 2


def test_token_margins_that_do_not_cover_the_output_are_dropped_and_named(monkeypatch, tmp_path, questions,
                                                                          fake_servers):
    _spy_benchmark(monkeypatch, completion_tokens=lambda r: 3 if r["turn"] == 2 else 2)
    res = e2e.run_configs([bench_configs.RunConfig("on_p64", page_size=64)], target="T", draft="D",
                          out_json=str(tmp_path / "e.json"), log_dir=str(tmp_path / "l"), num_questions=1,
                          question_file=str(questions), warmup=0)
    rec = res["on_p64"]
    assert not rec.get("error") and rec["tokens"]["1/2"] is None and rec["tokens"]["1/1"]
    assert rec["tokens_unmatched"] == ["1/2"]


REF = {"1/1": "the cat sat", "2/1": "a b", "3/1": "same"}


@pytest.mark.parametrize("other,tokens,expected", [
    (REF, None, True),  # identical outputs
    ({**REF, "1/1": "the dog sat"}, {"1/1": [["the", 2.0, "a"], [" cat", 0.3, " dog"], [" sat", 3.0, "!"]]}, True),
    ({**REF, "1/1": "the dog sat"}, {"1/1": [["the", 2.0, "a"], [" cat", 3.0, " dog"], [" sat", 3.0, "!"]]}, False),
    ({**REF, "1/1": "the dog sat"}, None, False),  # no margins: 2/3 identical is below 95%
    # two divergences, one on a clear winner: one unexplained divergence fails the whole pair
    ({**REF, "1/1": "the dog sat", "2/1": "a c"},
     {"1/1": [["the", 2.0, "a"], [" cat", 0.3, " dog"], [" sat", 3.0, "!"]],
      "2/1": [["a", 1.0, "b"], [" b", 2.5, " d"]]},
     False),
])
def test_identity_is_judged_up_to_near_ties_of_the_reference(other, tokens, expected):
    assert e2e.explained_by_near_ties(e2e.agreement(REF, other, tokens)) is expected


def test_identity_without_margins_keeps_the_strict_rate():
    ref = {f"{i}/1": "x" for i in range(20)}
    one_off = {**ref, "0/1": "y"}  # 19/20 = 95%: passes on the rate alone
    assert e2e.explained_by_near_ties(e2e.agreement(ref, one_off))
    two_off = {**one_off, "1/1": "y"}
    assert not e2e.explained_by_near_ties(e2e.agreement(ref, two_off))
    assert not e2e.explained_by_near_ties(e2e.agreement({}, {}))  # nothing compared proves nothing


def test_failed_start_is_recorded_not_raised(monkeypatch, tmp_path, questions):
    class Exits(FakeServer):
        def wait_ready(self):
            raise e2e.ServerStartError("server exited with code 1", "log tail here")

    FakeServer.events = []
    monkeypatch.setattr(bench_configs, "ServerProcess", lambda args, **kw: Exits(args, base_url="http://x", **kw))
    res = e2e.run_configs([bench_configs.RunConfig("on_p64", page_size=64)], target="T", draft="D",
                          out_json=str(tmp_path / "e.json"), log_dir=str(tmp_path), num_questions=1,
                          question_file=str(questions), warmup=0)
    assert res["on_p64"]["error"].startswith("server exited with code 1") and res["on_p64"]["log_tail"] == "log tail here"
    assert FakeServer.events[-1] == ("stop", "on_p64")  # children of a failed start are cleaned up


def test_agreement_counts_and_first_divergence():
    ref = {"1/1": "abcdef", "1/2": "same", "2/1": "xyz", "2/2": "uvw", "3/1": None}
    other = {"1/1": "abcXef", "1/2": "same", "2/1": "xyz", "2/2": "uvw", "3/1": "ignored", "4/1": "extra"}
    a = e2e.agreement(ref, other)
    # 1/2 is not the same prompt in both runs (its first turn differs): not compared
    assert (a["compared"], a["exact"]) == (3, 2)
    assert a["rate"] == pytest.approx(2 / 3)
    assert a["first_divergence"]["prompt"] == "1/1" and a["first_divergence"]["char"] == 3
    assert a["near_tie_share"] is None  # no margins given


def test_agreement_places_divergences_on_reference_tokens():
    ref = {"1/1": "the cat sat", "2/1": "a b", "3/1": "same"}
    other = {"1/1": "the dog sat", "2/1": "a c", "3/1": "same"}
    tokens = {"1/1": [["the", 2.0, "a"], [" cat", 0.1, " dog"], [" sat", 3.0, "!"]],
              "2/1": [["a", 1.0, "b"], [" b", 2.5, " d"]], "3/1": [["same", 9.0, "x"]]}
    a = e2e.agreement(ref, other, tokens)
    by = {d["prompt"]: d for d in a["divergences"]}
    assert (by["1/1"]["token"], by["1/1"]["margin"], by["1/1"]["runner_up_taken"]) == (1, 0.1, True)
    assert (by["2/1"]["token"], by["2/1"]["margin"], by["2/1"]["runner_up_taken"]) == (1, 2.5, False)
    assert a["near_tie_share"] == pytest.approx(0.5) and a["near_ties"] == 1 and a["runner_up_taken"] == 1
    assert (a["margin_median"], a["margin_max"]) == (2.5, 2.5)


def test_divergence_is_the_first_token_chosen_differently():
    """Token texts of a multi-byte character decode to U+FFFD one by one, so they do not add up
    to the output text and characters point at the wrong token (H200 run 7: a 0.0-margin
    divergence read as a 2.1 one three tokens later). With both runs' tokens the divergence
    is the first token chosen differently."""
    ref = {"1/1": "\U0001F50D x 26.1, H"}
    other = {"1/1": "\U0001F50D x 26.3\n"}
    glyph = [["\ufffd", 3.0, "a"], ["\ufffd", 3.0, "a"]]  # 2 U+FFFD for 1 character: offsets shift
    ref_tok = {"1/1": glyph + [[" x", 2.0, " y"], [" 2", 2.1, " 5"], ["6", 3.5, "7"], [".", 4.0, ","],
                               ["1", 0.0, "3"], [",", 1.0, "."], [" H", 2.0, " A"]]}
    other_tok = {"1/1": glyph + [[" x", 2.0, " y"], [" 2", 2.1, " 5"], ["6", 3.5, "7"], [".", 4.0, ","],
                                 ["3", 0.25, "1"], ["\n", 1.0, "."]]}
    by_chars = e2e.agreement(ref, other, ref_tok)["first_divergence"]
    assert "margin" not in by_chars  # texts do not add up: no place, so no explanation
    d = e2e.agreement(ref, other, ref_tok, other_tok)["first_divergence"]
    assert (d["token"], d["margin"], d["runner_up_taken"]) == (6, 0.0, True)
    assert e2e.explained_by_near_ties(e2e.run_agreement({"outputs": ref, "tokens": ref_tok},
                                                        {"outputs": other, "tokens": other_tok}))
    # a run that stopped early diverges where it stopped, on the reference's token there
    short = e2e.agreement(ref, {"1/1": "\U0001F50D x"}, ref_tok, {"1/1": glyph + [[" x", 2.0, " y"]]})
    assert (short["first_divergence"]["token"], short["first_divergence"]["margin"]) == (3, 2.1)


@pytest.mark.parametrize("ours_off,theirs_off,ok", [
    (1, 3, True),    # run 7's on_p64_k4: 1/17 vs 3/18 identical is noise, not worse
    (0, 0, True),
    (6, 0, False),   # worse on six prompts where the other matches, better on none: p = 1/64
    (8, 2, True),    # 6 more than theirs, but p = 0.055 on 10 discordant prompts
])
def test_no_worse_agreement_is_a_paired_sign_test(ours_off, theirs_off, ok):
    ref = {f"{i}/1": "x" for i in range(20)}
    ours = {**ref, **{f"{i}/1": "y" for i in range(ours_off)}}
    theirs = {**ref, **{f"{19 - i}/1": "y" for i in range(theirs_off)}}
    vs = e2e.no_worse_agreement(ref, ours, theirs)
    assert (vs["worse"], vs["better"], vs["compared"]) == (ours_off, theirs_off, 20)
    assert vs["ok"] is ok


def test_sets_and_cli_select_configurations(monkeypatch, tmp_path):
    sets = bench_configs.testbed_sets("fa3")
    core = [c.name for c in sets["core"]]
    assert core == ["nospec_p1", "on_p1", "on_p64", "fake_p64", "off_p64"]
    ext = {c.name: c for c in sets["extended"]}
    assert set(core) < set(ext) and ext["triton_on_p64"].backend == "triton"
    assert ext["oracle_on_p64"].algorithm == "STANDALONE" and ext["oracle_on_p64"].draft == "target"
    assert len(ext) == len(sets["extended"])  # unique names
    # the A/B's controls: one configuration twice, SGLang without speculation, chain EAGLE (topk 1)
    ctl = {c.name: c for c in sets["controls"]}
    assert len(ctl) == len(sets["controls"])
    assert (ctl["on_p1_r2"].page_size, ctl["on_p1_r2"].topk) == (ctl["on_p1"].page_size, ctl["on_p1"].topk)
    assert ctl["nospec_p64"].algorithm is None and ctl["nospec_p64"].page_size == 64
    assert (ctl["on_p64_k1"].topk, ctl["on_p64_k1"].page_size) == (1, 64)
    nospec = bench_configs.server_args(ctl["nospec_p64"], "T", "D", 30000, 4096, 0.4, None)
    assert nospec[nospec.index("--page-size") + 1] == "64" and not any("speculative" in a for a in nospec)
    # greedy equality is asked for at page 1/16/64 x topk 1/4/8 on every backend
    for be in ("on", "triton_on", "fi_on"):
        for page in (1, 16, 64):
            for k, suffix in ((8, ""), (4, "_k4"), (1, "_k1")):
                cfg = ext[f"{be}_p{page}{suffix}"]
                assert (cfg.page_size, cfg.topk) == (page, k) and cfg.backend == {"on": "fa3", "triton_on": "triton",
                                                                                 "fi_on": "flashinfer"}[be]
    seen = {}
    monkeypatch.setattr(e2e, "run_configs", lambda configs, **kw: seen.update(configs=configs, **kw))
    e2e.main(["--set", "large", "--only", "on_p1,off_p64", "--target", "T", "--draft", "D", "--load-format",
              "dummy", "--out", str(tmp_path), "--concurrency", "4", "--profile", "on_p1", "--ignore-eos"])
    assert [c.name for c in seen["configs"]] == ["on_p1", "off_p64"]
    assert seen["load_format"] == "dummy" and seen["concurrency"] == 4 and seen["profile"] == ["on_p1"]
    assert seen["ignore_eos"] and seen["out_json"] == str(tmp_path / "e2e.json")
    assert seen["profile_stack"] is True
    e2e.main(["--set", "core", "--target", "T", "--draft", "D", "--out", str(tmp_path), "--profile-no-stack"])
    assert seen["profile_stack"] is False


def test_triton_variants_counts_only_named_kernel_files(tmp_path):
    for h, name in [("a", "_assign_tree_draft_slots_kernel"), ("b", "_assign_tree_draft_slots_kernel"),
                    ("c", "assign_draft_cache_locs"), ("d", "unrelated")]:
        (tmp_path / h).mkdir()
        (tmp_path / h / f"{name}.json").write_text("{}")
    counts = triton_cache.variants(tmp_path)
    assert counts["_assign_tree_draft_slots_kernel"] == 2 and counts["assign_draft_cache_locs"] == 1
    assert counts["_duplicate_kv_kernel"] == 0 and "unrelated" not in counts


def test_compiled_since_counts_every_kernel_but_not_group_files(tmp_path):
    for h, name in [("a", "alloc_extend_kernel"), ("b", "alloc_extend_kernel"), ("b", "__grp__alloc_extend_kernel"),
                    ("c", "_duplicate_kv_kernel")]:
        (tmp_path / h).mkdir(exist_ok=True)
        (tmp_path / h / f"{name}.json").write_text("{}")
    assert triton_cache.compiled_since({}, tmp_path)[1] == {"alloc_extend_kernel": 2, "_duplicate_kv_kernel": 1}
    assert triton_cache.compiled_since({}, tmp_path / "missing")[1] == {}


def test_compiled_since_names_each_new_variant_with_its_signature(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "alloc_extend_kernel.json").write_text("{}")
    before = triton_cache.variant_entries(tmp_path)
    entry = tmp_path / "new"
    entry.mkdir()
    (entry / "alloc_extend_kernel.json").write_text("{}")
    (entry / "__grp__alloc_extend_kernel.json").write_text("{}")
    (entry / "alloc_extend_kernel.ttir").write_text(
        '#loc = loc("allocator.py":241:0)\nmodule {\n  tt.func public @alloc_extend_kernel('
        '%arg0: !tt.ptr<i64> {tt.divisibility = 16 : i32} loc("allocator.py":241:0), '
        '%arg1: i32 loc(#loc1)) attributes {noinline = false} {\n  }\n}\n')
    (tmp_path / "bare").mkdir()  # a variant without TTIR: named, signature unknown
    (tmp_path / "bare" / "_move_rows_kernel.json").write_text("{}")
    now, counts, sigs = triton_cache.compiled_since(before, tmp_path)
    assert counts == {"alloc_extend_kernel": 1, "_move_rows_kernel": 1} and len(now) == 3
    assert sigs == ["_move_rows_kernel: None",
                    "alloc_extend_kernel: tt.func public @alloc_extend_kernel(%arg0: !tt.ptr<i64> "
                    "{tt.divisibility = 16 : i32}, %arg1: i32) attributes {noinline = false} {"]
    assert triton_cache.compiled_since(now, tmp_path)[1:] == ({}, [])


def test_stop_all_signals_every_server_before_waiting_on_any():
    events = []

    class S:
        def __init__(self, n):
            self.n = n

        def terminate(self):
            events.append(("terminate", self.n))

        def stop(self):
            events.append(("stop", self.n))

    from sglang_eagle_paged.bench.server import stop_all

    stop_all([S(1), S(2), S(3)])
    assert events == [("terminate", 1), ("terminate", 2), ("terminate", 3), ("stop", 1), ("stop", 2), ("stop", 3)]


def test_triton_cache_seed_links_other_kernels_and_never_counted_ones(tmp_path):
    """Seeding a fresh per-server cache must leave the counted kernels' variants at zero."""
    earlier = tmp_path / "earlier"
    for h, kernel in (("h1", "_fwd_rope"), ("h2", "_duplicate_kv_kernel"), ("h3", "copy_all_layer_kv_cache_tiled"),
                      ("h4", "_store_kv")):
        (earlier / h).mkdir(parents=True)
        (earlier / h / f"{kernel}.json").write_text("{}")
        (earlier / h / f"__grp__{kernel}.json").write_text("{}")
        (earlier / h / f"{kernel}.cubin").write_bytes(b"\x7fELF")
    fresh = tmp_path / "fresh"
    assert triton_cache.seed(fresh, [earlier, tmp_path / "missing"]) == 2
    assert sorted(p.name for p in fresh.iterdir()) == ["h1", "h4"]
    assert (fresh / "h1" / "_fwd_rope.cubin").read_bytes() == b"\x7fELF"
    assert os.stat(fresh / "h1" / "_fwd_rope.cubin").st_ino == os.stat(earlier / "h1" / "_fwd_rope.cubin").st_ino
    assert set(triton_cache.variants(fresh).values()) == {0}
    assert triton_cache.seed(fresh, [earlier]) == 0  # present already: nothing twice


def test_run_configs_seeds_each_servers_cache(fake_servers, tmp_path, questions):
    earlier = tmp_path / "earlier" / "h9"
    earlier.mkdir(parents=True)
    (earlier / "_fwd_rope.json").write_text("{}")
    res = e2e.run_configs([bench_configs.RunConfig("on_p64", page_size=64)], target="T", draft="D",
                          out_json=str(tmp_path / "e.json"), log_dir=str(tmp_path / "logs"), num_questions=1,
                          question_file=str(questions), warmup=0, triton_seeds=[str(earlier.parent)])
    assert res["on_p64"]["triton_variants_seeded"] == 1
    assert (tmp_path / "logs" / "triton_cache" / "on_p64" / "h9" / "_fwd_rope.json").exists()
    assert res["on_p64"]["triton_variants_after_warmup"]["_duplicate_kv_kernel"] == 1  # the fake server's own


def test_warm_up_fills_every_slot_of_the_measured_parallelism():
    qs = [{"question_id": i, "turns": ["a", "b"]} for i in range(4)]
    (first, par), (second, par2) = bench_configs.warmup_mixes(qs, 16)
    assert par == 16 and len(first) == 16 and {q["question_id"] for q in first} == {0, 1, 2, 3}
    assert par2 == 3 and second == qs[:1]
    assert len(bench_configs.warmup_mixes(qs * 5, 16)[0][0]) == 20  # more questions than slots: all of them
    assert bench_configs.warmup_mixes([], 16) == []


def test_throughput_runs_leave_margins_to_the_reference(monkeypatch, tmp_path, questions, fake_servers):
    """margins=False (--no-margins, the device perf and 8B calls): no logprob cost on speculative
    servers; the non-speculative reference keeps its margins for the agreement report."""
    calls = _spy_benchmark(monkeypatch, completion_tokens=lambda r: len(r.get("tokens") or ()))
    res = e2e.run_configs([bench_configs.RunConfig("nospec_p1", algorithm=None), bench_configs.RunConfig("on_p64", page_size=64)],
                          target="T", draft="D", out_json=str(tmp_path / "e.json"), log_dir=str(tmp_path / "l"),
                          num_questions=1, question_file=str(questions), warmup=1, parallel1_questions=1,
                          margins=False)
    assert [c.get("top_logprobs", 0) for c in calls] == [0, 0, 2, 0] + [0, 0, 0, 0]
    assert res["nospec_p1"]["tokens"]["1/1"] and res["on_p64"]["tokens"] == {}


def test_no_margins_flag_reaches_the_runner(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(e2e, "run_configs", lambda configs, **kw: seen.update(kw))
    e2e.main(["--set", "large", "--target", "T", "--draft", "D", "--out", str(tmp_path), "--no-margins"])
    assert seen["margins"] is False
    e2e.main(["--set", "large", "--target", "T", "--draft", "D", "--out", str(tmp_path)])
    assert seen["margins"] is True


def test_our_counted_kernels_are_our_kernels():
    import importlib
    import pkgutil

    import sglang_eagle_paged.kernels as pkg

    ours = {name for m in pkgutil.iter_modules(pkg.__path__)
            for name, obj in vars(importlib.import_module(f"{pkg.__name__}.{m.name}")).items()
            if name.endswith("_kernel") and hasattr(obj, "fn")}
    assert set(triton_cache.OUR_KERNELS) == ours


def test_servers_log_at_warning_unless_the_call_asks_for_more(monkeypatch):
    cfg = bench_configs.testbed_sets("fa3")["core"][1]

    def level():
        args = bench_configs.server_args(cfg, "T", "D", 30000, 4096, 0.5)
        return args[args.index("--log-level") + 1]

    monkeypatch.delenv(bench_configs.LOG_LEVEL_ENV, raising=False)
    assert level() == "warning"
    monkeypatch.setenv(bench_configs.LOG_LEVEL_ENV, "info")
    assert level() == "info"


def test_tokenizer_option_applies_the_chat_template_to_every_request(monkeypatch, tmp_path, questions,
                                                                     fake_servers):
    """--tokenizer: every /generate request (warm-up, measured, parallel 1) carries the template
    applied to the conversation so far as token ids, turn 2 built on the model's first answer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TEMPLATED_TOKENIZER)
    seen = {}
    with monkeypatch.context() as m:
        m.setattr(e2e, "run_configs", lambda configs, **kw: seen.update(kw))
        e2e.main(["--set", "core", "--target", "T", "--draft", "D", "--out", str(tmp_path),
                  "--tokenizer", str(TEMPLATED_TOKENIZER)])
    assert seen["tokenizer"] == str(TEMPLATED_TOKENIZER)

    res = e2e.run_configs([bench_configs.RunConfig("on_p64", page_size=64)], target="T", draft="D",
                          out_json=str(tmp_path / "e.json"), log_dir=str(tmp_path / "l"), num_questions=2,
                          question_file=str(questions), warmup=1, parallel1_questions=1, max_new_tokens=8,
                          tokenizer=str(TEMPLATED_TOKENIZER))
    assert not res["on_p64"].get("error"), res["on_p64"]
    assert not res["on_p64"]["errors"], res["on_p64"]["errors"]
    assert res["on_p64"]["metadata"]["tokenizer"] == str(TEMPLATED_TOKENIZER)
    sent = FakeSGLang.prompts
    assert sent and all("input_ids" in r and "text" not in r for r in sent)

    def ids(messages):
        out = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        return list(out["input_ids"] if hasattr(out, "keys") else out)

    q1, q2 = QUESTIONS[0]["turns"]
    first = [{"role": "user", "content": q1}]
    answer = res["on_p64"]["outputs"]["1/1"]
    second = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": q2}]
    sent_ids = [r["input_ids"] for r in sent]
    assert ids(first) in sent_ids and ids(second) in sent_ids
    assert tok.decode(ids(first)).count("<|start_header_id|>user") == 1


def test_a_tokenizer_without_chat_template_is_refused_before_any_server_starts(tmp_path, questions,
                                                                               fake_servers):
    import shutil

    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(TEMPLATED_TOKENIZER / "tokenizer.json", plain)
    cfg = json.loads((TEMPLATED_TOKENIZER / "tokenizer_config.json").read_text())
    cfg.pop("chat_template")
    (plain / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="no chat template"):
        e2e.run_configs([bench_configs.RunConfig("on_p64", page_size=64)], target="T", draft="D",
                        out_json=str(tmp_path / "e.json"), log_dir=str(tmp_path / "l"), num_questions=1,
                        question_file=str(questions), warmup=0, tokenizer=str(plain))
    assert fake_servers.started == []


def test_a_configuration_interrupted_before_its_summary_is_measured_by_the_next_call(
        monkeypatch, tmp_path, questions, fake_servers):
    """A time limit during a measurement leaves a record without a summary: it says so, and the next
    call measures it (it used to be kept as measured, and every later call skipped it)."""
    real_measure = e2e._measure

    def interrupted(server, cfg, *a, **kw):
        if cfg.name == "on_p64":
            raise KeyboardInterrupt  # the suite's time limit, in the measuring thread
        return real_measure(server, cfg, *a, **kw)

    monkeypatch.setattr(e2e, "_measure", interrupted)
    configs = [bench_configs.RunConfig("on_p1"), bench_configs.RunConfig("on_p64", page_size=64), bench_configs.RunConfig("on_p128", page_size=128)]
    out = tmp_path / "e.json"
    kw = dict(target="T", draft="D", out_json=str(out), log_dir=str(tmp_path / "logs"), num_questions=1,
              question_file=str(questions), warmup=0)
    with pytest.raises(KeyboardInterrupt):
        e2e.run_configs(configs, **kw)
    first = json.loads(out.read_text())
    assert first["on_p1"].get("summary") and "interrupted" not in first["on_p1"]
    assert first["on_p64"]["interrupted"] is True and "summary" not in first["on_p64"]
    assert "on_p128" not in first

    monkeypatch.setattr(e2e, "_measure", real_measure)
    FakeServer.started = []
    res = e2e.run_configs(configs, **kw)
    assert [s.name for s in FakeServer.started] == ["on_p64", "on_p128"]  # on_p1 was measured already
    assert res["on_p64"]["summary"]["num_requests"] == 2 and "interrupted" not in res["on_p64"]
    assert json.loads(out.read_text()) == res


def test_retractions_are_counted_in_the_measured_pass_only(monkeypatch, tmp_path, questions, fake_servers):
    """The server log's "KV cache pool is full" lines written during the measured pass are the record's
    retractions; those of the warm-up and of the parallel-1 pass are not."""
    real = e2e.run_benchmark
    line = "[2026-12-01 10:01:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: {n}, #new_tokens_gained: 384\n"

    def logging_benchmark(url, qs, **kw):
        out = real(url, qs, **kw)
        server = FakeServer.started[-1]
        measured = kw.get("top_logprobs")  # only the measured pass asks for margins
        with open(server.log_path, "a") as f:
            f.write("".join(line.format(n=3 if measured else 7) for _ in range(2 if measured else 1)))
        return out

    monkeypatch.setattr(e2e, "run_benchmark", logging_benchmark)
    monkeypatch.setattr(FakeServer, "__init__", _with_log(FakeServer.__init__))
    res = e2e.run_configs([bench_configs.RunConfig("on_p64", page_size=64)], target="T", draft="D",
                          out_json=str(tmp_path / "e.json"), log_dir=str(tmp_path / "logs"), num_questions=1,
                          question_file=str(questions), warmup=1, parallel1_questions=1)
    rec = res["on_p64"]
    assert (rec["retractions"], rec["retracted_reqs"]) == (2, 6), rec
    assert rec["retractions_counted"] == "log lines written during the measured pass"
    log = Path(rec["log"]).read_text()
    assert log.count("Retract requests") == 2 + 2 + 1  # two warm-up mixes, measured pass, parallel 1



def test_a_server_that_logged_a_fault_line_is_refused_and_no_report_prints_its_figure(monkeypatch, tmp_path,
                                                                                     questions, fake_servers):
    """A fault line anywhere in the server's log up to the end of the measured pass (here its warm-up):
    the plugin was off from then on, so the configuration is not measured and the record names the line."""
    from bench import v2_report
    from test_bench_ab import _fault_line

    real, line = e2e.run_benchmark, _fault_line()

    def logging_benchmark(url, qs, **kw):
        out = real(url, qs, **kw)
        if FakeServer.started[-1].name == "on_p64" and not kw.get("top_logprobs"):  # a warm-up mix
            with open(FakeServer.started[-1].log_path, "a") as f:
                f.write(line)
        return out

    monkeypatch.setattr(e2e, "run_benchmark", logging_benchmark)
    monkeypatch.setattr(FakeServer, "__init__", _with_log(FakeServer.__init__))
    res = e2e.run_configs([bench_configs.RunConfig("on_p1"), bench_configs.RunConfig("on_p64", page_size=64)],
                          target="T", draft="D", out_json=str(tmp_path / "e2e.json"), log_dir=str(tmp_path / "logs"),
                          num_questions=1, question_file=str(questions), warmup=1)
    bad, good = res["on_p64"], res["on_p1"]
    assert bad["faults"][0] == line.strip() and bad["error"].startswith("refused: the server logged the plugin's "
                                                                       "fault line: [2026-12-04 01:02:03 TP0]")
    assert not e2e.measured(bad) and e2e.measured(good) and "faults" not in good
    report = v2_report.report(tmp_path)
    assert "refused: the server logged the plugin's fault line" in report

def _with_log(init):
    def __init__(self, args, *, log_path, **kw):
        init(self, args, log_path=log_path, **kw)
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("server starting\n")  # as ServerProcess: the log exists once started
    return __init__


def test_main_sizes_the_pool_for_its_configurations(monkeypatch, tmp_path, questions, capsys):
    seen = {}

    def capture(configs, **kw):
        seen.update(kw, names=[c.name for c in configs])
        raise SystemExit(0)  # the runner is reached with the pool: all this test asks

    monkeypatch.setattr(e2e, "run_configs", capture)
    argv = ["--target", "T", "--draft", "D", "--out", str(tmp_path), "--only", "on_p1,on_p64",
            "--parallel", "8", "--max-new", "32", "--question-file", str(questions)]
    with pytest.raises(SystemExit):
        e2e.main(argv + ["--max-total-tokens", "auto"])
    prompt = int(capsys.readouterr().out.split("longest prompt ")[1].split()[0])
    cfgs = [c for c in bench_configs.testbed_sets("fa3")["core"] if c.name in ("on_p1", "on_p64")]
    assert seen["names"] == ["on_p1", "on_p64"] and [c.page_size for c in cfgs] == [1, 64]
    assert seen["max_total_tokens"] == kv_sizing.pool_tokens(cfgs, 8, prompt, 32) >= 8 * 2048
    with pytest.raises(SystemExit):  # a number stays that number
        e2e.main(argv + ["--max-total-tokens", "90000"])
    assert seen["max_total_tokens"] == 90000

