"""The paired A/B throughput runner on the CPU: ABBA order, the interval and its verdict, and the
orchestration with fake servers (both of a pair up for the whole measurement, stopped after)."""

import json
import math
import os
import time

import pytest

from bench import ab_probes
from sglang_eagle_paged.bench import ab, configs, kv_sizing
from test_bench_mtbench import QUESTIONS, FakeSGLang, fake_server  # noqa: F401  (fixture)
from test_e2e_runner import FakeServer


def _question_file(tmp_path):
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return qfile


def _serve_fakes(monkeypatch, fake_server):
    # every server bench.ab starts is a FakeServer answering on the fake SGLang's address
    url, _ = fake_server
    FakeServer.started, FakeServer.events = [], []
    monkeypatch.setattr(configs, "ServerProcess", lambda args, **kw: FakeServer(args, base_url=url, **kw))


def _compile_late_kernel(out_dir, server):
    # what a Triton compile leaves in the server's cache directory, as the runner reads it
    entry = out_dir / "logs" / "triton_cache" / server / "h1"
    entry.mkdir(parents=True)
    (entry / "late_kernel.json").write_text("{}")


def test_pass_order_is_abba():
    assert ab.pass_order(3) == [(0, "A"), (0, "B"), (1, "B"), (1, "A"), (2, "A"), (2, "B")]


def test_ratio_stats_interval_and_verdicts():
    # Same ratio every round: no spread, the interval collapses onto it.
    s = ab.ratio_stats([100.0, 200.0, 50.0], [110.0, 220.0, 55.0])
    assert s["ratio"] == pytest.approx(1.1) and s["low"] == pytest.approx(1.1) and s["verdict"] == "B >= A"
    assert ab.ratio_stats([100, 100, 100], [90, 91, 89])["verdict"] == "B < A"
    # Spread around 1, wider than +-3%: not resolved. The interval is the t-interval of the log ratios.
    a, b = [100.0, 100.0, 100.0], [95.0, 105.0, 101.0]
    s = ab.ratio_stats(a, b)
    logs = [math.log(y / x) for x, y in zip(a, b)]
    m = sum(logs) / 3
    sd = math.sqrt(sum((v - m) ** 2 for v in logs) / 2)
    assert s["low"] == pytest.approx(math.exp(m - 4.303 * sd / math.sqrt(3)), abs=1e-4)
    assert s["verdict"].startswith("not resolved") and s["rounds"] == 3
    # One round cannot show a difference; a missing pass drops its round.
    one = ab.ratio_stats([100.0], [130.0])
    assert one["verdict"].startswith("not resolved") and one["high"] is None
    # "level" only where the whole interval lies within +-3%
    assert ab.ratio_stats([100.0] * 3, [99.0, 100.0, 101.0])["verdict"] == "level within +-3%"
    assert ab.ratio_stats([100.0, None], [130.0, 120.0])["rounds"] == 1
    assert ab.ratio_stats([], [])["verdict"] == "not measured"


def test_round_rate_ratio_takes_acceptance_out_of_the_throughput_ratio():
    # B is 10% faster per round but accepts 5% less every round: throughput 1.045x, round rate 1.1x
    passes = [dict(round=r, side=s, parallel=16, output_throughput=t, acceptance_length=acc, errors=0)
              for r in range(3) for s, t, acc in (("A", 200.0 + r, 2.0), ("B", (200.0 + r) * 1.1 * 0.95, 1.9))]
    s = ab.summarize_pair(passes)["16"]
    assert s["ratio"] == pytest.approx(1.045) and s["round_rate_ratio"] == pytest.approx(1.1)
    assert s["round_rate_verdict"] == "B >= A"


def test_summarize_pair_pairs_passes_of_the_same_round():
    passes = [dict(round=r, side=s, parallel=p, output_throughput=t, acceptance_length=2.0, errors=0)
              for r, s, p, t in [(0, "A", 16, 100), (0, "B", 16, 90), (0, "A", 1, 10), (0, "B", 1, 12),
                                 (1, "B", 16, 99), (1, "A", 16, 110), (2, "A", 16, 500)]]  # round 2 has no B
    s = ab.summarize_pair(passes)
    assert list(s) == ["16", "1"]
    assert s["16"]["rounds"] == 2 and s["16"]["ratios"] == [0.9, 0.9] and s["16"]["tps_A"] == 105
    assert s["1"]["ratio"] == pytest.approx(1.2) and s["1"]["rounds"] == 1
    # a pass with failed requests takes its round out of the ratio (its errors are still counted)
    passes[1]["errors"] = 2
    s = ab.summarize_pair(passes)
    assert s["16"]["rounds"] == 1 and s["16"]["ratios"] == [0.9] and s["16"]["errors"] == 2


def test_summary_carries_the_latency_fits_and_the_compiles_of_counted_passes():
    fit = lambda req, rnd: {"per_request_ms": req, "per_round_ms": rnd, "residual_ms": 0.1, "n": 8}  # noqa: E731
    passes = [dict(round=r, side=s, parallel=1, output_throughput=10, acceptance_length=2.0, errors=0,
                   latency_fit=f, compiled=c)
              for r, s, f, c in [(0, "A", fit(10, 3.0), None), (0, "B", fit(30, 3.2), {"k": 2}),
                                 (1, "B", fit(20, 3.4), None), (1, "A", fit(12, 3.0), {"k": 1, "j": 1})]]
    s = ab.summarize_pair(passes)["1"]
    assert s["per_request_ms_A"] == 11 and s["per_request_ms_B"] == 25
    assert s["per_round_ms_A"] == 3.0 and s["per_round_ms_B"] == pytest.approx(3.3)
    assert s["compiled_A"] == 2 and s["compiled_B"] == 2
    md = ab.markdown({"rounds": 2, "num_questions": 4, "parallel": 16, "parallel1_questions": 4,
                      "max_new_tokens": 8, "pairs": {"x": {"A": {"name": "a"}, "B": {"name": "b"}, "summary": {"1": s}}}})
    assert "| a | b | 1 | 1.000x | 1.000-1.000 | 11.00 / 25.00 | 3.0000 / 3.3000 | 2 / 2 |" in md
    # every round compiled on one side or the other: no ratio is left without them
    assert s["rounds_without_compiles"] == 0 and s["ratio_without_compiles"] is None
    assert "no round left" in md
    # a pass record keeps the fit at parallel 1 only, and what compiled during it
    bench = {"summary": {"output_throughput": 1.0, "latency_fit": fit(1, 2)}}
    assert "latency_fit" in ab._pass_record(bench, "A", 0, 1) and "latency_fit" not in ab._pass_record(bench, "A", 0, 16)
    assert ab._pass_record(bench, "A", 0, 16, {"k": 1})["compiled"] == {"k": 1}


def test_the_clients_and_the_schedulers_cpu_share_and_the_gpus_load_are_averaged_per_side():
    passes = [dict(round=r, side=side, parallel=16, output_throughput=100, acceptance_length=2.0, errors=0,
                   wall_s=2.0, client_cpu_s=cpu, cpu_s={"server": {"scheduler": sched, "main": 0.3}, "host": {}},
                   gpu={"samples": 20, "util_pct": util, "sm_mhz": 1980.0} if util is not None else None)
              for r, side, cpu, sched, util in [(0, "A", 0.5, 2.0, 40.0), (0, "B", 1.8, 1.0, 70.0),
                                                (1, "B", 1.6, 1.4, 50.0), (1, "A", 1.5, 1.8, None)]]
    s = ab.summarize_pair(passes)["16"]
    assert s["client_cpu_share_A"] == pytest.approx(0.5) and s["client_cpu_share_B"] == pytest.approx(0.85)
    assert s["scheduler_cpu_share_A"] == pytest.approx(0.95) and s["scheduler_cpu_share_B"] == pytest.approx(0.6)
    # a pass with no sample inside it (shorter than the sampling step) is left out, not counted as idle
    assert s["gpu_util_A"] == 40.0 and s["gpu_util_B"] == 60.0 and s["sm_mhz_A"] == 1980.0
    md = ab.markdown({"rounds": 2, "num_questions": 16, "parallel": 16, "parallel1_questions": 0, "max_new_tokens": 8,
                      "pairs": {"x": {"A": {"name": "a"}, "B": {"name": "b"}, "summary": {"16": s}}}})
    assert md.rstrip().endswith("| 50% / 85% | 95% / 60% | 40% / 60% |")
    # recordings from before the fields: no share, a dash
    old = ab.summarize_pair([{k: v for k, v in p.items() if k not in ("client_cpu_s", "cpu_s", "gpu")}
                             for p in passes])
    assert old["16"]["client_cpu_share_A"] is None and old["16"]["scheduler_cpu_share_B"] is None
    assert old["16"]["gpu_util_A"] is None


def test_run_pairs_keeps_both_servers_up_and_alternates(monkeypatch, tmp_path, fake_server):  # noqa: F811
    _serve_fakes(monkeypatch, fake_server)
    real = ab.run_benchmark
    calls = []

    def bench(base_url, qs, **kw):
        FakeServer.events.append(("pass", kw["parallel"]))
        calls.append(kw["parallel"])
        if len(calls) == 7:  # after 4 warm-up passes: round 0's B pass at parallel 2 "compiles" a kernel
            _compile_late_kernel(tmp_path / "ab", "pair0_B_on_p64")
        return real(base_url, qs, **kw)

    monkeypatch.setattr(ab, "run_benchmark", bench)
    qfile = _question_file(tmp_path)
    p1, p64 = configs.RunConfig("on_p1", page_size=1), configs.RunConfig("on_p64", page_size=64)
    res = ab.run_pairs([(p1, p64)], target="T", draft="D", out_dir=str(tmp_path / "ab"), rounds=2, num_questions=2,
                       parallel=2, parallel1_questions=1, max_new_tokens=8, warmup=1, question_file=str(qfile),
                       settle=0)

    assert json.loads((tmp_path / "ab" / "ab.json").read_text()) == res
    a, b = FakeServer.started
    for srv, page in ((a, "1"), (b, "64")):
        assert srv.args[srv.args.index("--page-size") + 1] == page
        assert "--sleep-on-idle" in srv.args and srv.args[srv.args.index("--base-gpu-id") + 1] == "0"
    # Both are ready before anything is measured (B started once A was), and stopped only after the last pass.
    ev = FakeServer.events
    assert ev[:4] == [("start", a.name), ("ready", a.name), ("start", b.name), ("ready", b.name)]
    last_pass = max(i for i, e in enumerate(ev) if e[0] == "pass")
    assert all(e[0] == "pass" for e in ev[4:last_pass + 1])
    assert {e[0] for e in ev[last_pass + 1:]} == {"terminate", "stop"}
    pair = res["pairs"]["on_p1:on_p64#0"]
    assert [(p["round"], p["side"], p["parallel"]) for p in pair["passes"]] == [
        (0, "A", 2), (0, "A", 1), (0, "B", 2), (0, "B", 1), (1, "B", 2), (1, "B", 1), (1, "A", 2), (1, "A", 1)]
    # the variant compiled during round 0's B pass at parallel 2 is charged to that pass alone
    assert [p.get("compiled") for p in pair["passes"]] == [None, None, {"late_kernel": 1}] + [None] * 5
    assert pair["passes"][2]["compiled_signatures"] == ["late_kernel: None"]  # no TTIR in this fake entry
    assert pair["summary"]["2"]["compiled_B"] == 1 and pair["summary"]["2"]["compiled_A"] == 0
    # warm-up: two mixes per server (the first fills all `parallel` slots), then the 8 passes
    assert [e[1] for e in ev[4:last_pass + 1]] == [2, 3, 2, 3] + [2, 1] * 4
    assert pair["summary"]["2"]["rounds"] == 2 and pair["summary"]["1"]["rounds"] == 2
    # every pass keeps the client's own CPU time (a process's CPU time: never negative)
    assert all(p["client_cpu_s"] is not None and p["client_cpu_s"] >= 0 for p in pair["passes"])
    assert pair["summary"]["2"]["client_cpu_share_A"] is not None
    # no lab probe asked for: nothing else recorded (the lab's: test_with_the_labs_probes_...)
    assert not any("cpu_s" in p or "gpu" in p for p in pair["passes"])
    # when each pass began, in order, each after the one before it ended
    starts = [p["start_s"] for p in pair["passes"]]
    assert all(later >= earlier + p["wall_s"] - 1e-3 for earlier, later, p in zip(starts, starts[1:], pair["passes"]))
    md = ab.markdown(res)
    assert "| on_p1 | on_p64 | 2 |" in md and "| on_p1 | on_p64 | 1 |" in md
    pytest.importorskip("matplotlib")
    assert ab.plot(res, str(tmp_path / "ab.png")) and (tmp_path / "ab.png").stat().st_size > 0


def test_with_the_labs_probes_every_pass_keeps_the_gpus_load_over_it(monkeypatch, tmp_path, fake_server):  # noqa: F811
    from test_gpu_sampler import stand_in

    _serve_fakes(monkeypatch, fake_server)
    tools = tmp_path / "bin"
    tools.mkdir()
    stand_in(tools)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    real = ab.run_benchmark

    csv = tmp_path / "ab" / "logs" / "gpu0_samples.csv"

    def lines():
        return csv.read_text().count("\n") if csv.exists() else 0

    def bench(base_url, qs, **kw):  # each pass lasts until the stand-in wrote samples inside it
        seen, deadline = lines(), time.monotonic() + 30  # a loaded machine starts the stand-in late
        while lines() < seen + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        return real(base_url, qs, **kw)

    monkeypatch.setattr(ab, "run_benchmark", bench)
    res = ab.run_pairs([(configs.RunConfig("on_p1"), configs.RunConfig("on_p64", page_size=64))], target="T", draft="D",
                       out_dir=str(tmp_path / "ab"), rounds=1, num_questions=1, parallel=1, max_new_tokens=8,
                       warmup=0, settle=0, question_file=str(_question_file(tmp_path)), probes=ab_probes.probes)
    passes = res["pairs"]["on_p1:on_p64#0"]["passes"]
    assert all("server" in p["cpu_s"] for p in passes)  # the lab's CPU probe, beside the GPU's
    assert [p["gpu"]["util_pct"] for p in passes] == [55.0, 55.0] and all(p["gpu"]["samples"] >= 2 for p in passes)
    assert res["pairs"]["on_p1:on_p64#0"]["summary"]["1"]["gpu_util_A"] == 55.0
    assert (tmp_path / "ab" / "logs" / "gpu0_samples.csv").stat().st_size > 0


def test_settling_passes_run_before_round_0_uncounted_and_their_compiles_are_named(monkeypatch, tmp_path,
                                                                                 fake_server):  # noqa: F811
    _serve_fakes(monkeypatch, fake_server)
    real, calls = ab.run_benchmark, []

    def bench(base_url, qs, **kw):
        calls.append((base_url, kw["parallel"], len(qs)))
        if len(calls) == 3:  # no warm-up (warmup=0): B's settling pass at parallel 2 "compiles" a kernel
            _compile_late_kernel(tmp_path / "ab", "pair0_B_on_p64")
        return real(base_url, qs, **kw)

    monkeypatch.setattr(ab, "run_benchmark", bench)
    qfile = _question_file(tmp_path)
    res = ab.run_pairs([(configs.RunConfig("on_p1"), configs.RunConfig("on_p64", page_size=64))], target="T", draft="D",
                       out_dir=str(tmp_path / "ab"), rounds=1, num_questions=2, parallel=2, parallel1_questions=1,
                       max_new_tokens=8, warmup=0, question_file=str(qfile))  # settle: 1 by default
    # the settling passes are the measured workload (same levels, same questions), A then B
    assert [(par, n) for _, par, n in calls] == [(2, 2), (1, 1)] * 4
    pair = res["pairs"]["on_p1:on_p64#0"]
    assert [(p["round"], p["side"], p["parallel"]) for p in pair["passes"]] == [
        (0, "A", 2), (0, "A", 1), (0, "B", 2), (0, "B", 1)]
    # the compile is the settling pass's, named in the record and the table, not a counted pass's
    assert pair["settle_compiled"] == {"B": {"late_kernel": 1}}
    assert all(not p.get("compiled") for p in pair["passes"])
    assert res["settle_passes"] == 1 and pair["summary"]["2"]["rounds"] == 1
    header = ab.markdown(res).splitlines()[0]
    assert "after 1 settling pass per side and parallelism (not counted; during them on_p1:on_p64 B compiled " \
           "1 late_kernel)" in header
    # recordings from before settling existed say nothing about it
    assert "settling" not in ab.markdown({**res, "settle_passes": 0}).splitlines()[0]


def test_more_parallelisms_are_levels_of_every_round_over_more_conversations_than_the_set(monkeypatch, tmp_path,
                                                                                          fake_server):  # noqa: F811
    _serve_fakes(monkeypatch, fake_server)
    real, calls = ab.run_benchmark, []

    def bench(base_url, qs, **kw):
        calls.append((kw["parallel"], [q["question_id"] for q in qs]))
        return real(base_url, qs, **kw)

    monkeypatch.setattr(ab, "run_benchmark", bench)
    qfile = _question_file(tmp_path)
    n = len(QUESTIONS) + 2  # past the set's end: the set again, each turn with a numbered preamble
    res = ab.run_pairs([(configs.RunConfig("on_p64", page_size=64), configs.RunConfig("off_p64", mode="off", page_size=64))],
                       target="T", draft="D", out_dir=str(tmp_path / "ab"), rounds=1, num_questions=n, parallel=2,
                       more_parallel=(4,), max_new_tokens=8, warmup=0, question_file=str(qfile), settle=0)
    assert [par for par, _ in calls] == [2, 4, 2, 4]
    ids = calls[0][1]
    assert len(ids) == len(set(ids)) == n and all(c[1] == ids for c in calls)
    pair = res["pairs"]["on_p64:off_p64#0"]
    assert sorted(pair["summary"]) == ["2", "4"] and res["more_parallel"] == [4]
    assert f"{n} questions at parallel 2, 4" in ab.markdown(res).splitlines()[0]


def test_the_header_says_when_the_conversations_cap_the_requests_in_flight():
    res = {"rounds": 1, "num_questions": 32, "parallel": 64, "parallel1_questions": 0, "max_new_tokens": 8,
           "pairs": {}}
    assert "at most 32 requests in flight" in ab.markdown(res).splitlines()[0]
    assert "in flight" not in ab.markdown({**res, "parallel": 16}).splitlines()[0]
    assert "at most 32 requests in flight" in ab.markdown({**res, "parallel": 16, "more_parallel": [128]})


def test_a_pair_that_fails_to_start_is_recorded_and_the_rest_measured(monkeypatch, tmp_path, fake_server):  # noqa: F811
    url, _ = fake_server

    class Broken(FakeServer):
        def wait_ready(self):
            raise RuntimeError("no GPU memory")

    FakeServer.started, FakeServer.events = [], []
    monkeypatch.setattr(configs, "ServerProcess", lambda args, **kw: (
        Broken if "pair1_" in kw["log_path"] else FakeServer)(args, base_url=url, **kw))
    qfile = _question_file(tmp_path)
    cfg = lambda n, p: configs.RunConfig(n, page_size=p)  # noqa: E731
    res = ab.run_pairs([(cfg("on_p1", 1), cfg("on_p64", 64)), (cfg("on_p1", 1), cfg("on_p128", 128))],
                       target="T", draft="D", out_dir=str(tmp_path / "ab"), rounds=1, num_questions=1,
                       parallel=1, max_new_tokens=8, warmup=0, gpus=2, question_file=str(qfile))
    good, bad = res["pairs"]["on_p1:on_p64#0"], res["pairs"]["on_p1:on_p128#1"]
    assert not good.get("error") and len(good["passes"]) == 2 and good["gpu"] == 0
    assert "no GPU memory" in bad["error"] and bad["passes"] == [] and bad["gpu"] == 1
    assert "error: start" in ab.markdown(res)


def test_main_reports_the_passes_saved_before_an_interrupt(monkeypatch, tmp_path):
    saved = {"rounds": 2, "parallel": 16, "parallel1_questions": 0, "num_questions": 8, "max_new_tokens": 8,
             "pairs": {"on_p1:on_p64#0": {"A": {"name": "on_p1"}, "B": {"name": "on_p64"}, "gpu": 0, "passes": [],
                                          "summary": ab.summarize_pair([
                                              dict(round=0, side=s, parallel=16, output_throughput=t,
                                                   acceptance_length=2.0, errors=0)
                                              for s, t in (("A", 100.0), ("B", 97.0))])}}}
    (tmp_path / "ab.json").write_text(json.dumps(saved))

    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(ab, "run_pairs", interrupted)
    assert ab.main(["--target", "T", "--draft", "D", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "ab.md").read_text()
    assert "| on_p1 | on_p64 | 16 | 100.0 | 97.0 | 0.970x |" in md
    # one of the two rounds asked for: the header and the saved record say so
    assert md.startswith("1 of 2 rounds (ABBA; interrupted before the rest)")
    assert json.loads((tmp_path / "ab.json").read_text())["interrupted"] is True


def test_a_time_limit_keeps_the_passes_measured_before_it(monkeypatch, tmp_path, fake_server, sigint_raises):  # noqa: F811
    """SIGINT to the main thread (the device scripts' `timeout -s INT`) during the third measured pass:
    the servers stop, the JSON keeps the two passes before it and records nothing after."""
    import os
    import signal
    import threading
    import time

    _serve_fakes(monkeypatch, fake_server)
    real, calls = ab.run_benchmark, []

    def bench(base_url, qs, **kw):
        calls.append(kw["parallel"])
        if len(calls) == 3:  # no warm-up (warmup=0): the third measured pass
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 10
            while not any(e[0] == "stop" for e in FakeServer.events) and time.monotonic() < deadline:
                threading.Event().wait(0.01)
        return real(base_url, qs, **kw)

    monkeypatch.setattr(ab, "run_benchmark", bench)
    qfile = _question_file(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        ab.run_pairs([(configs.RunConfig("on_p1"), configs.RunConfig("on_p64", page_size=64))], target="T", draft="D",
                     out_dir=str(tmp_path / "ab"), rounds=3, num_questions=1, parallel=1, max_new_tokens=8,
                     warmup=0, question_file=str(qfile), settle=0)
    time.sleep(0.5)  # the lane thread returns after the stop; it must not append or save anything more
    pair = json.loads((tmp_path / "ab" / "ab.json").read_text())["pairs"]["on_p1:on_p64#0"]
    assert [(p["round"], p["side"]) for p in pair["passes"]] == [(0, "A"), (0, "B")]
    assert not pair.get("error") and pair["summary"]["1"]["rounds"] == 1


def test_pass_spread_is_the_scatter_of_one_side_in_percent():
    assert ab.pass_spread([100.0]) is None
    assert ab.pass_spread([100.0, 100.0, 100.0]) == 0.0
    spread = ab.pass_spread([100.0, 110.0, 90.0])
    logs = [math.log(v) for v in (100.0, 110.0, 90.0)]
    mean = sum(logs) / 3
    assert spread == round(100 * math.sqrt(sum((v - mean) ** 2 for v in logs) / 2), 2) and 9 < spread < 11
    s = ab.summarize_pair([dict(round=r, side=side, parallel=16, output_throughput=t, acceptance_length=2.0, errors=0)
                           for r, (ta, tb) in enumerate([(100.0, 100.0), (120.0, 101.0)])
                           for side, t in (("A", ta), ("B", tb))])["16"]
    assert s["spread_A"] > 10 > s["spread_B"] > 0


def test_a_probe_without_verify_rounds_still_gives_the_ratio():
    # max_new_tokens 1 (the per-request cost probe: prefill, draft extend, finish) never verifies,
    # so no pass has an acceptance or a latency fit; the throughput ratio is then requests per second.
    passes = [dict(round=r, side=s, parallel=1, output_throughput=t, acceptance_length=None, errors=0)
              for r, s, t in [(0, "A", 60.0), (0, "B", 54.0), (1, "B", 57.0), (1, "A", 60.0)]]
    s = ab.summarize_pair(passes)["1"]
    assert s["ratio"] == pytest.approx((0.9 * 0.95) ** 0.5, abs=1e-4) and s["acceptance_A"] is None
    assert s["round_rate_ratio"] is None and "per_request_ms_A" not in s
    md = ab.markdown({"rounds": 2, "num_questions": 4, "parallel": 16, "parallel1_questions": 4,
                      "max_new_tokens": 1, "pairs": {"x": {"A": {"name": "a"}, "B": {"name": "b"}, "summary": {"1": s}}}})
    assert "| a | b | 1 | 60.0 | 55.5 |" in md


def test_freezing_gc_happens_on_both_servers_after_warm_up_and_before_anything_counted(monkeypatch, tmp_path,
                                                                                      fake_server):  # noqa: F811
    _serve_fakes(monkeypatch, fake_server)
    real, frozen_at_call = ab.run_benchmark, []

    def bench(base_url, qs, **kw):
        frozen_at_call.append(len(FakeSGLang.freezes))  # how many servers were frozen when this pass began
        return real(base_url, qs, **kw)

    monkeypatch.setattr(ab, "run_benchmark", bench)
    kw = dict(target="T", draft="D", rounds=1, num_questions=2, parallel=2, max_new_tokens=8, warmup=1,
              question_file=str(_question_file(tmp_path)))
    pair = (configs.RunConfig("on_p1"), configs.RunConfig("on_p64", page_size=64))
    res = ab.run_pairs([pair], out_dir=str(tmp_path / "ab"), gc_freeze=True, **kw)
    # two warm-up mixes per server unfrozen, then both frozen before the settling and counted passes
    assert frozen_at_call == [0] * 4 + [2] * 4 and FakeSGLang.freezes == ["/freeze_gc"] * 2
    assert res["gc_freeze"] is True and len(res["pairs"]["on_p1:on_p64#0"]["passes"]) == 2
    assert "(`--freeze-gc`" in ab.markdown(res)
    # a server without /freeze_gc: the pair says so and measures nothing, rather than one side frozen
    FakeSGLang.refuse_freeze, FakeSGLang.freezes = True, []
    res = ab.run_pairs([pair], out_dir=str(tmp_path / "ab2"), gc_freeze=True, **kw)
    bad = res["pairs"]["on_p1:on_p64#0"]
    assert "/freeze_gc answered 404" in bad["error"] and bad["passes"] == []
    # off by default: no call, and the table says nothing of it
    FakeSGLang.refuse_freeze, FakeSGLang.freezes = False, []
    res = ab.run_pairs([pair], out_dir=str(tmp_path / "ab3"), **kw)
    assert FakeSGLang.freezes == [] and res["gc_freeze"] is False and "freeze" not in ab.markdown(res)


def test_the_ratio_is_given_again_without_the_rounds_that_compiled():
    # round 1's B pass stalled on a compile (half the throughput); rounds 0 and 2 were quiet
    passes = [dict(round=r, side=side, parallel=1, output_throughput=t, acceptance_length=2.0, errors=0, compiled=c)
              for r, side, t, c in [(0, "A", 100.0, None), (0, "B", 95.0, None), (1, "B", 50.0, {"alloc": 1}),
                                    (1, "A", 100.0, None), (2, "A", 100.0, None), (2, "B", 97.0, None)]]
    s = ab.summarize_pair(passes)["1"]
    assert s["rounds"] == 3 and s["ratio"] == pytest.approx((0.95 * 0.5 * 0.97) ** (1 / 3), abs=1e-4)
    assert s["rounds_without_compiles"] == 2
    assert s["ratio_without_compiles"] == pytest.approx(math.sqrt(0.95 * 0.97), abs=1e-4)
    md = ab.markdown({"rounds": 3, "num_questions": 1, "parallel": 16, "parallel1_questions": 1,
                      "max_new_tokens": 8, "pairs": {"x": {"A": {"name": "a"}, "B": {"name": "b"}, "summary": {"1": s}}}})
    assert "Without the rounds in which a pass compiled" in md and "a:b at parallel 1 0.960x (" in md
    # nothing compiled: nothing more to say
    quiet = ab.summarize_pair([dict(p, compiled=None) for p in passes])["1"]
    assert "ratio_without_compiles" not in quiet


def test_a_pair_whose_kv_pools_differ_is_refused_and_the_sizes_recorded():
    info = {"page_size": 64, "internal_states": [{"max_total_num_tokens": 91392}]}
    assert ab.kv_pool_tokens(info) == 91392 and ab.kv_pool_tokens({"max_total_num_tokens": 5}) == 5
    assert ab.kv_pool_tokens(None) is None and ab.kv_pool_tokens({"page_size": 64}) is None
    ab.equal_kv_pools({"A": 131072, "B": 131072})
    ab.equal_kv_pools({"A": 131072, "B": None})  # a server that does not say is not held against the pair
    with pytest.raises(RuntimeError, match=r"unequal KV pools.*--max-total-tokens 91392"):
        ab.equal_kv_pools({"A": 91392, "B": 131072})


def test_the_running_request_cap_reaches_the_server_only_when_asked():
    cfg = configs.RunConfig("on_p64", page_size=64, max_running_requests=128)
    args = configs.server_args(cfg, "T", "D", 30000, 65536, 0.4)
    assert args[args.index("--max-running-requests") + 1] == "128"
    assert "--max-running-requests" not in configs.server_args(configs.RunConfig("on_p64", page_size=64), "T", "D", 30000,
                                                           65536, 0.4)


def test_every_pass_of_a_pair_sends_the_chat_template_when_given_a_tokenizer(monkeypatch, tmp_path,
                                                                              fake_server):  # noqa: F811
    from test_e2e_runner import TEMPLATED_TOKENIZER

    _serve_fakes(monkeypatch, fake_server)
    seen = {}

    def capture(pairs, **kw):
        seen.update(kw)
        raise SystemExit(0)  # what it reaches the runner with is all this part asks

    with monkeypatch.context() as m, pytest.raises(SystemExit):
        m.setattr(ab, "run_pairs", capture)
        ab.main(["--target", "T", "--draft", "D", "--out", str(tmp_path / "cli"), "--tokenizer", "TOK"])
    assert seen["tokenizer"] == "TOK"
    res = ab.run_pairs([(configs.RunConfig("on_p1"), configs.RunConfig("on_p64", page_size=64))], target="T", draft="D",
                       out_dir=str(tmp_path / "ab"), rounds=1, num_questions=2, parallel=2, max_new_tokens=8,
                       warmup=1, question_file=str(_question_file(tmp_path)), settle=0,
                       tokenizer=str(TEMPLATED_TOKENIZER))
    assert res["tokenizer"] == str(TEMPLATED_TOKENIZER)
    assert FakeSGLang.prompts and all("input_ids" in r and "text" not in r for r in FakeSGLang.prompts)
    # loaded once for the whole pair, not once per pass
    from sglang_eagle_paged.bench import mtbench

    assert mtbench._tokenizer.cache_info().currsize >= 1
    assert mtbench.PromptBuilder(str(TEMPLATED_TOKENIZER)).tokenizer is mtbench.PromptBuilder(
        str(TEMPLATED_TOKENIZER)).tokenizer


def test_retractions_during_counted_passes_make_the_verdict_kv_bound(monkeypatch, tmp_path, fake_server):  # noqa: F811
    """A side whose server logs "KV cache pool is full" during a counted pass measured its pool: the row
    says so instead of a speed verdict; retractions of the warm-up are not counted."""
    from test_e2e_runner import _with_log

    _serve_fakes(monkeypatch, fake_server)
    monkeypatch.setattr(FakeServer, "__init__", _with_log(FakeServer.__init__))
    real, calls = ab.run_benchmark, []
    line = "[TP0] KV cache pool is full. Retract requests. #retracted_reqs: 4, #new_tokens_gained: 512\n"

    def bench(base_url, qs, **kw):
        calls.append(kw["parallel"])
        out = real(base_url, qs, **kw)
        # call 3: B's first warm-up mix; call 7: round 0's B pass at parallel 2 (order as in the test above)
        if len(calls) in (3, 7):
            with open(FakeServer.started[1].log_path, "a") as f:
                f.write(line * 2)
        return out

    monkeypatch.setattr(ab, "run_benchmark", bench)
    res = ab.run_pairs([(configs.RunConfig("on_p1"), configs.RunConfig("on_p64", page_size=64))], target="T", draft="D",
                       out_dir=str(tmp_path / "ab"), rounds=2, num_questions=2, parallel=2, parallel1_questions=1,
                       max_new_tokens=8, warmup=1, question_file=str(_question_file(tmp_path)), settle=0)
    pair = res["pairs"]["on_p1:on_p64#0"]
    assert [p["retractions"] for p in pair["passes"]] == [0, 0, 2, 0, 0, 0, 0, 0]
    assert pair["passes"][2]["retracted_reqs"] == 8
    s2, s1 = pair["summary"]["2"], pair["summary"]["1"]
    assert (s2["retractions_A"], s2["retractions_B"]) == (0, 2)
    assert s2["verdict"] == "KV-bound: A retracted 0, B 2" and s2["ratio_verdict"]
    assert (s1["retractions_A"], s1["retractions_B"]) == (0, 0) and not s1["verdict"].startswith("KV-bound")
    md = ab.markdown(res)
    assert "| KV-bound: A retracted 0, B 2 |" in md and "| 2 | 0 / 2 |" in md and "| 2 | 0 / 0 |" in md


def test_main_sizes_the_pool_for_every_configuration_of_its_pairs(monkeypatch, tmp_path, capsys):
    seen = {}

    def capture(pairs, **kw):
        seen.update(kw, pairs=[(a.name, b.name) for a, b in pairs])
        raise SystemExit(0)  # the runner is reached with the pool: all this test asks

    monkeypatch.setattr(ab, "run_pairs", capture)
    with pytest.raises(SystemExit):
        ab.main(["--target", "T", "--draft", "D", "--out", str(tmp_path), "--pairs", "on_p1:on_p64",
                 "--parallel", "32", "--max-new", "64", "--max-total-tokens", "auto",
                 "--question-file", str(_question_file(tmp_path))])
    prompt = int(capsys.readouterr().out.split("longest prompt ")[1].split()[0])
    assert seen["pairs"] == [("on_p1", "on_p64")]
    p1, p64 = configs.RunConfig("on_p1"), configs.RunConfig("on_p64", page_size=64)  # the large set's, as named
    assert seen["max_total_tokens"] == kv_sizing.pool_tokens([p1, p64], 32, prompt, 64) > 32 * 2048
    with pytest.raises(SystemExit):  # a number stays that number
        ab.main(["--target", "T", "--draft", "D", "--out", str(tmp_path), "--max-total-tokens", "90000"])
    assert seen["max_total_tokens"] == 90000
    assert "in flight" not in capsys.readouterr().out
    with pytest.raises(SystemExit):  # more threads than conversations: said before anything runs
        ab.main(["--target", "T", "--draft", "D", "--out", str(tmp_path), "--max-total-tokens", "90000",
                 "--parallel", "64", "--questions", "8"])
    assert "[ab] parallel 64 over 8 conversations: at most 8 requests in flight" in capsys.readouterr().out


def test_a_pair_stops_before_its_rounds_once_pooled_with_earlier_ones_it_resolves(monkeypatch, tmp_path,
                                                                                  fake_server):  # noqa: F811
    from sglang_eagle_paged.bench import ab_pool

    _serve_fakes(monkeypatch, fake_server)
    real = ab._pass_record

    def steady(bench, side, rnd, par, *a, **kw):  # B runs at 0.85 of A in every pass
        rec = real(bench, side, rnd, par, *a, **kw)
        rec["output_throughput"] = 100.0 if side == "A" else 85.0
        return rec

    monkeypatch.setattr(ab, "_pass_record", steady)
    qfile = _question_file(tmp_path)
    p1, p64 = configs.RunConfig("on_p1", page_size=1), configs.RunConfig("on_p64", page_size=64)
    key = ("on_p1", "on_p64", 8, 2, 2)
    until = ab_pool.UntilResolved({key: [[0.85] * 8]}, 0.03, min_rounds=10)  # one earlier server pair
    kw = dict(target="T", draft="D", rounds=20, num_questions=2, parallel=2, max_new_tokens=8, warmup=1,
              question_file=str(qfile), settle=0)
    res = ab.run_pairs([(p1, p64)], out_dir=str(tmp_path / "ab"), until=until, **kw)
    pair = res["pairs"]["on_p1:on_p64#0"]
    # three rounds of its own (the fewest), eleven with the earlier eight: resolved, stopped, servers down
    assert pair["summary"]["2"]["rounds"] == 3 and len(pair["passes"]) == 6
    assert pair["resolved"]["2"]["rounds"] == 11 and pair["resolved"]["2"]["prior_rounds"] == 8
    assert {e[0] for e in FakeServer.events[-4:]} == {"terminate", "stop"}
    md = ab.markdown(res)
    assert md.startswith("3 of 20 rounds (ABBA; 1 of 1 pairs stopped once their rounds pooled with earlier "
                         "recordings' resolved +-3%)")
    assert "on_p1:on_p64 at parallel 2 0.850x (0.850-0.850), 11 rounds of which 8 earlier, 2 server pairs" in md
    # with no earlier rounds it measures to the tenth round before the same rule lets it stop
    res = ab.run_pairs([(p1, p64)], out_dir=str(tmp_path / "ab2"),
                       until=ab_pool.UntilResolved({}, 0.03, min_rounds=10), **kw)
    assert res["pairs"]["on_p1:on_p64#0"]["summary"]["2"]["rounds"] == 10


def _fault_line() -> str:
    """The line the plugin itself logs when a switch trips: its real FaultSwitch and logger, the mark
    included, formatted as SGLang's log format writes it (``[time TP0] message``)."""
    import logging

    from sglang_eagle_paged.adapters.common.fault_switch import FaultSwitch

    got = []

    class Keep(logging.Handler):
        def emit(self, record):
            got.append(f"[2026-12-04 01:02:03 TP0] {record.getMessage()}\n")

    logger = logging.getLogger("sglang_eagle_paged")
    keep = Keep()
    logger.addHandler(keep)
    try:
        FaultSwitch("[sglang-eagle-paged] fa3 in place switched off for this process after a fault: %s").trip(
            RuntimeError("The size of tensor a (176) must match the size of tensor b (168)"))
    finally:
        logger.removeHandler(keep)
    (line,) = got
    return line


def _pair_with_fault(monkeypatch, tmp_path, fake_server, at_call: int):
    from test_e2e_runner import _with_log

    _serve_fakes(monkeypatch, fake_server)
    monkeypatch.setattr(FakeServer, "__init__", _with_log(FakeServer.__init__))
    real, calls, line = ab.run_benchmark, [], _fault_line()

    def bench(base_url, qs, **kw):
        calls.append(kw["parallel"])
        out = real(base_url, qs, **kw)
        if len(calls) == at_call:  # B's server (the second started) logs the plugin's fault line
            with open(FakeServer.started[1].log_path, "a") as f:
                f.write(line)
        return out

    monkeypatch.setattr(ab, "run_benchmark", bench)
    res = ab.run_pairs([(configs.RunConfig("on_p1"), configs.RunConfig("on_p64", page_size=64))], target="T",
                       draft="D", out_dir=str(tmp_path / "ab"), rounds=3, num_questions=2, parallel=2,
                       max_new_tokens=8, warmup=1, question_file=str(_question_file(tmp_path)), settle=1)
    return res["pairs"]["on_p1:on_p64#0"], line


def test_a_pair_whose_server_logged_a_fault_line_in_a_counted_pass_is_refused_and_the_line_named(
        monkeypatch, tmp_path, fake_server):  # noqa: F811
    # calls: 4 warm-up mixes, 2 settling passes, then round 0: A (7), B (8): B's pass logs the fault
    pair, line = _pair_with_fault(monkeypatch, tmp_path, fake_server, at_call=8)
    assert line.startswith("[2026-12-04 01:02:03 TP0] [sglang-eagle-paged] [fault] fa3 in place switched off")
    assert len(pair["passes"]) == 2  # no round after the fault is measured
    assert pair["passes"][1]["faults"] == [line.strip()]
    assert pair["error"].startswith("RuntimeError: refused: B's server logged the plugin's fault line during a "
                                    "counted pass: [2026-12-04 01:02:03 TP0] [sglang-eagle-paged] [fault] fa3")
    s = pair["summary"]["2"]
    assert s["verdict"].startswith("refused: B logged") and "176" in s["verdict"] and s["faults"]["B"] == line.strip()
    md = ab.markdown({"rounds": 3, "num_questions": 2, "parallel": 2, "parallel1_questions": 0, "max_new_tokens": 8,
                      "pairs": {"x": pair}})
    assert "| refused: B logged [2026-12-04 01:02:03 TP0] [sglang-eagle-paged] [fault] fa3 in place" in md
    assert "error: RuntimeError: refused" in md


def test_a_fault_line_logged_while_settling_refuses_the_pair_before_anything_is_counted(
        monkeypatch, tmp_path, fake_server):  # noqa: F811
    pair, line = _pair_with_fault(monkeypatch, tmp_path, fake_server, at_call=5)  # A's settling pass
    assert pair["passes"] == [] and pair["faults"] == {"B": [line.strip()]}
    assert "refused: B's server logged the plugin's fault line during its start-up, warm-up or settling passes" \
        in pair["error"]


def test_without_a_fault_line_the_pair_is_measured_whole(monkeypatch, tmp_path, fake_server):  # noqa: F811
    pair, _ = _pair_with_fault(monkeypatch, tmp_path, fake_server, at_call=10 ** 6)
    assert len(pair["passes"]) == 6 and not pair.get("error") and "faults" not in pair
    assert not pair["summary"]["2"]["verdict"].startswith("refused")


def test_a_gpus_second_server_starts_once_its_first_is_ready(monkeypatch, tmp_path, fake_server):  # noqa: F811
    """Each server sizes its KV pool from the memory free while it starts: B starts only after A on
    the same GPU is ready (both GPUs' A first, side by side), so B sees A whole."""
    _serve_fakes(monkeypatch, fake_server)
    cfg = lambda n, p: configs.RunConfig(n, page_size=p)  # noqa: E731
    ab.run_pairs([(cfg("on_p1", 1), cfg("on_p64", 64)), (cfg("on_p1", 1), cfg("on_p128", 128))],
                 target="T", draft="D", out_dir=str(tmp_path / "ab"), rounds=1, num_questions=1, parallel=1,
                 max_new_tokens=8, warmup=0, gpus=2, question_file=str(_question_file(tmp_path)))
    startup = [e for e in FakeServer.events if e[0] in ("start", "ready")]
    order = [f"{kind} {name.split('_')[0]}{name.split('_')[1]}" for kind, name in startup]
    assert order == ["start pair0A", "start pair1A", "ready pair0A", "ready pair1A",
                     "start pair0B", "start pair1B", "ready pair0B", "ready pair1B"], order
