"""Paired A/B throughput: two configurations on one GPU, measured in turn, with a confidence interval.

The sweep (:mod:`.e2e`) measures each configuration once, lanes of GPUs side by side. Its
page-N / page-1 ratios move by 5-20% from run to run (H200 runs 3-8): the two servers of a
ratio sit on different GPUs, their measuring windows overlap other lanes' host-bound
servers, and one pass of a fast model lasts seconds. Whether page N is at least as fast as
page 1 cannot be read from one such ratio.

Here both servers of a pair live on the same GPU for the whole measurement (half the memory
each; the idle one sleeps on its socket). Passes alternate in ABBA order, round after
round, so a drift of the machine over time loads both sides alike. The ratio B/A is taken
per round (the two passes of a round are adjacent), and its geometric mean comes with a
95% t-interval over rounds (:mod:`.stats`). A verdict says "B >= A" only when the whole interval is
at or above 1, "level" only when it lies within +-3%. A pair is refused, with the line named, when
either server's KV pool differs from the other's or either logged one of the plugin's fault lines
(:func:`refuse_faults`): its figure would measure memory or SGLang's fallback, not the path.

  python -m sglang_eagle_paged.bench.ab --set large --pairs on_p1:on_p64,on_p1:on_p128 \\
      --target T --draft D --load-format dummy --ignore-eos --rounds 3 --questions 48 --gpus 2 --out DIR
"""

import glob
import json
import math
import statistics
import threading
import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

from . import kv_sizing, triton_cache
from .ab_pool import UntilResolved, load_prior
from .configs import (_warmup_questions, add_set_and_model_args, add_workload_args, configs_of, launch, server_args,
                      warmup_mixes)
from .mtbench import Client, in_flight, in_flight_note, load_questions, require_chat_template, run_benchmark, sized
from .server import stop_all
from .server_log import faults, log_end, served, since as log_since, text_since
from .stats import ratio_stats

def pass_order(rounds: int) -> list:
    """(round, side) in ABBA order: A B, B A, A B, ... ."""
    return [(r, side) for r in range(rounds) for side in (("A", "B") if r % 2 == 0 else ("B", "A"))]


def _pass_record(bench: dict, side: str, rnd: int, parallel: int, compiled: dict | None = None,
                 signatures: list | None = None) -> dict:
    s = bench["summary"]
    rec = {"round": rnd, "side": side, "parallel": parallel, "output_throughput": s.get("output_throughput"),
           "acceptance_length": s.get("acceptance_length"), "wall_s": s.get("wall_s"),
           "client_cpu_s": s.get("client_cpu_s"), "errors": s.get("num_errors", 0)}
    if parallel == 1 and s.get("latency_fit"):
        rec["latency_fit"] = s["latency_fit"]
    if compiled:
        # Triton variants the server compiled during this pass: a compile is a stall of
        # tens to hundreds of milliseconds that would read as a throughput difference.
        rec["compiled"] = compiled
        rec["compiled_signatures"] = signatures or []
    return rec


def _fit_means(passes: list, side: str) -> dict:
    fits = [p["latency_fit"] for p in passes if p["side"] == side and p.get("latency_fit")]
    if not fits:
        return {}
    return {f"{k}_{side}": round(sum(f[k] for f in fits) / len(fits), 4) for k in ("per_request_ms", "per_round_ms")}


def pass_spread(values: list) -> float | None:
    """Standard deviation of log throughput over one side's passes, in percent: how far passes of
    one unchanged configuration scatter, the noise the per-round ratios inherit."""
    logs = [math.log(v) for v in values if v]
    return round(100 * statistics.stdev(logs), 2) if len(logs) > 1 else None


def _wall_share(passes: list, seconds) -> float | None:
    """Mean over ``passes`` of ``seconds(pass)`` over the pass's wall time, where both are known."""
    shares = [seconds(p) / p["wall_s"] for p in passes if seconds(p) is not None and p.get("wall_s")]
    return sum(shares) / len(shares) if shares else None


def _scheduler_s(p: dict) -> float | None:
    return ((p.get("cpu_s") or {}).get("server") or {}).get("scheduler")


def summarize_pair(passes: list) -> dict:
    """Per parallelism: each side's throughput and acceptance, and :func:`ratio_stats` of B over A."""
    out = {}
    for par in sorted({p["parallel"] for p in passes}, reverse=True):
        by = {(p["round"], p["side"]): p for p in passes if p["parallel"] == par}
        # A round counts only if both its passes served every request: a failed request shortens
        # a pass and would read as throughput.
        rounds = sorted({r for r, _ in by if (r, "A") in by and (r, "B") in by
                         and not by[r, "A"]["errors"] and not by[r, "B"]["errors"]})
        a = [by[r, "A"]["output_throughput"] for r in rounds]
        b = [by[r, "B"]["output_throughput"] for r in rounds]
        mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
        acc = lambda side: mean([by[r, side]["acceptance_length"] for r in rounds  # noqa: E731
                                 if by[r, side]["acceptance_length"] is not None])
        counted = [by[r, side] for r in rounds for side in ("A", "B")]
        # Output tokens per second = verify rounds per second x tokens per round. Each side's
        # acceptance is fixed by its numerics on these prompts, the same every round, so the
        # throughput ratio carries it whole; the round-rate ratio is the machinery's speed alone.
        rate = lambda side: [by[r, side]["output_throughput"] / by[r, side]["acceptance_length"]  # noqa: E731
                             if by[r, side]["output_throughput"] and by[r, side]["acceptance_length"] else None
                             for r in rounds]
        round_rate = ratio_stats(rate("A"), rate("B"))
        compiled = {side: sum(sum((p.get("compiled") or {}).values()) for p in by.values() if p["side"] == side)
                    for side in ("A", "B")}
        # A compile stalls its pass for 0.1-1.5 s (SGLang's own kernels too: a server without the
        # plugin's warm-up compiles its paged allocation mid-serving, run 17): the ratio once more
        # without the rounds in which either pass compiled, where there were such rounds.
        quiet = [r for r in rounds if not by[r, "A"].get("compiled") and not by[r, "B"].get("compiled")]
        if len(quiet) < len(rounds):
            without = ratio_stats([by[r, "A"]["output_throughput"] for r in quiet],
                                  [by[r, "B"]["output_throughput"] for r in quiet])
            compiles = {f"{k}_without_compiles": without[k] for k in ("ratio", "low", "high", "rounds")}
        else:
            compiles = {}
        # Retractions in the counted passes: a side whose pool could not hold the batch re-ran requests,
        # and its throughput measured the pool, not the path. None where a side's log was not read.
        retracted = {side: (None if any(by[r, side].get("retractions") is None for r in rounds)
                            else sum(by[r, side]["retractions"] for r in rounds)) for side in ("A", "B")}
        client = lambda side: _wall_share([by[r, side] for r in rounds], lambda p: p.get("client_cpu_s"))  # noqa: E731
        scheduler = lambda side: _wall_share([by[r, side] for r in rounds], _scheduler_s)  # noqa: E731
        gpu = lambda side, key: mean([by[r, side]["gpu"][key] for r in rounds if by[r, side].get("gpu")])  # noqa: E731
        out[str(par)] = {"tps_A": mean(a), "tps_B": mean(b), "acceptance_A": acc("A"), "acceptance_B": acc("B"),
                         "client_cpu_share_A": client("A"), "client_cpu_share_B": client("B"),
                         "scheduler_cpu_share_A": scheduler("A"), "scheduler_cpu_share_B": scheduler("B"),
                         "gpu_util_A": gpu("A", "util_pct"), "gpu_util_B": gpu("B", "util_pct"),
                         "sm_mhz_A": gpu("A", "sm_mhz"), "sm_mhz_B": gpu("B", "sm_mhz"),
                         "errors": sum(p["errors"] or 0 for p in by.values()), **ratio_stats(a, b),
                         **_fit_means(counted, "A"), **_fit_means(counted, "B"),
                         "compiled_A": compiled["A"], "compiled_B": compiled["B"], **compiles,
                         "spread_A": pass_spread(a), "spread_B": pass_spread(b),
                         "retractions_A": retracted["A"], "retractions_B": retracted["B"],
                         **{f"round_rate_{k}": round_rate[k] for k in ("ratio", "low", "high", "verdict")}}
        if retracted["A"] or retracted["B"]:
            out[str(par)].update(ratio_verdict=out[str(par)]["verdict"],
                                 verdict=f"KV-bound: A retracted {retracted['A']}, B {retracted['B']}")
        # A side whose server logged one of the plugin's fault lines served on SGLang's path from
        # then on: the figure is not about the path asked for (bench/server_log.py).
        faulted = {}
        for side in ("A", "B"):
            lines = [line for p in by.values() if p["side"] == side for line in p.get("faults") or ()]
            if lines:
                faulted[side] = lines[0]
        if faulted:
            out[str(par)].update(ratio_verdict=out[str(par)]["verdict"], faults=faulted,
                                 verdict="refused: " + "; ".join(f"{side} logged {line}"
                                                                 for side, line in sorted(faulted.items())))
    return out


def freeze_gc(servers: dict) -> None:
    """SGLang's ``/freeze_gc`` on both servers: the objects alive after warm-up leave the garbage
    collector's generations in the scheduler, tokenizer and detokenizer processes, so no pass pays
    for a collection that walks them. A side whose server refuses raises: a comparison with one
    side frozen would measure the freeze."""
    import requests

    for side in ("A", "B"):
        r = requests.post(servers[side].base_url + "/freeze_gc", timeout=60)
        if r.status_code != 200:
            raise RuntimeError(f"{side}: /freeze_gc answered {r.status_code}")


def kv_pool_tokens(info: dict | None) -> int | None:
    """A server's KV pool in tokens as its scheduler reports it in ``/server_info`` (None where it
    does not say)."""
    for d in (info or {}, *((info or {}).get("internal_states") or [])):
        if isinstance(d, dict) and isinstance(d.get("max_total_num_tokens"), int):
            return d["max_total_num_tokens"]
    return None


def equal_kv_pools(pools: dict) -> None:
    """Refuse a pair whose servers hold KV pools of different sizes. A server sizes its pool from the
    memory free when it profiles it; B starts after A (:func:`_start_sides`), so where A leaves B too
    little for the ``--max-total-tokens`` asked, B's pool is smaller and would retract requests A
    serves: the comparison would measure memory, not the path."""
    known = {side: n for side, n in pools.items() if n is not None}
    if len(set(known.values())) > 1:
        raise RuntimeError(f"unequal KV pools (tokens): {known}; give both servers --max-total-tokens "
                           f"{min(known.values())} or less, or a larger --mem-fraction-static")


def _measure_pair(pair: dict, servers: dict, *, questions, warmup_questions, parallel: int,
                  parallel1_questions: int, more_parallel: tuple = (), rounds: int, settle: int, bench_kw: dict, save,
                  stopping: threading.Event, cache_dirs: dict | None = None, gc_freeze: bool = False, probes=(),
                  until=None) -> None:
    cache_dirs = cache_dirs or {}
    t0 = time.monotonic()
    pools = {side: kv_pool_tokens(Client(servers[side].base_url).server_info()) for side in ("A", "B")}
    save(lambda: pair.update(kv_pool_tokens=pools))
    equal_kv_pools(pools)
    for side in ("A", "B"):
        for mix, mix_parallel in warmup_mixes(warmup_questions, max((parallel, *more_parallel))):
            run_benchmark(servers[side].base_url, mix, parallel=mix_parallel, **bench_kw)
    if gc_freeze:  # after warm-up, as SGLang advises: what warm-up made is what serving keeps
        freeze_gc(servers)
    variants = {side: triton_cache.compiled_since({}, cache_dirs.get(side))[0] for side in ("A", "B")}
    levels = ([(par, questions) for par in (parallel, *more_parallel)]
              + ([(1, questions[:parallel1_questions])] if parallel1_questions else []))
    # Settling passes, not counted: the measured workload once per side and level. Round 0 was the
    # only round whose prompts were not yet in the radix cache, and the short warm-up mixes left
    # kernels to compile in it (runs 14 and 15: page 1's server compiled two of SGLang's kernels
    # in round 0, a slow pass that favoured page N). What compiles here is recorded, not hidden.
    settled = {"A": Counter(), "B": Counter()}
    for side in ("A", "B") * settle:
        for par, qs in levels:
            run_benchmark(servers[side].base_url, qs, parallel=par, **bench_kw)
            if stopping.is_set():
                return
            variants[side], compiled, _ = triton_cache.compiled_since(variants[side], cache_dirs.get(side))
            settled[side].update(compiled or {})
    if any(settled.values()):
        save(lambda: pair.update(settle_compiled={side: dict(c) for side, c in settled.items() if c}))
    refuse_faults(pair, servers, save, "its start-up, warm-up or settling passes")
    record_served(pair, servers, save)
    for rnd, side in pass_order(rounds):
        for par, qs in levels:
            log = getattr(servers[side], "log_file", None)
            log_start = log_end(log)
            before = [probe.before(servers[side]) for probe in probes]
            started = time.monotonic() - t0
            bench = run_benchmark(servers[side].base_url, qs, parallel=par, **bench_kw)
            if stopping.is_set():  # the servers were stopped under this pass: it measured nothing
                return
            variants[side], compiled, signatures = triton_cache.compiled_since(variants[side], cache_dirs.get(side))
            rec = _pass_record(bench, side, rnd, par, compiled, signatures)
            rec.update(log_since(log, log_start, "this pass"))
            # seconds since the pair was ready: what the passes leave between them shows in the gaps
            rec["start_s"] = round(started, 3)
            for probe, state in zip(probes, before):
                rec.update(probe.after(servers[side], state))

            def record(rec=rec):
                pair["passes"].append(rec)
                pair["summary"] = summarize_pair(pair["passes"])

            save(record)
            if rec.get("faults"):
                refuse_faults(pair, servers, save, "a counted pass")
        if until is not None and side == ("B" if rnd % 2 == 0 else "A"):  # the round's last pass
            resolved = _resolved(pair, until, (parallel, *more_parallel), bench_kw.get("max_new_tokens"),
                                 len(questions))
            if resolved:
                save(lambda: pair.update(resolved=resolved))
                return


def refuse_faults(pair: dict, servers: dict, save, when: str) -> None:
    """Refuse the pair (as :func:`equal_kv_pools` does) once either server's log holds one of the
    plugin's fault lines (:func:`.server_log.faults`): from that line on, SGLang's own path served
    that server, and a ratio would measure the fallback. The whole log counts: a switch-off during
    start-up or warm-up holds for every pass after it."""
    found = {side: faults(text_since(getattr(servers[side], "log_file", None), 0) or "") for side in ("A", "B")}
    found = {side: lines for side, lines in found.items() if lines}
    if found:
        save(lambda: pair.update(faults=found))
        side, lines = sorted(found.items())[0]
        raise RuntimeError(f"refused: {side}'s server logged the plugin's fault line during {when}: {lines[0]}")


def asked_layout(cfg: dict) -> str | None:
    """The draft layout a side's configuration (a :class:`.configs.RunConfig` as recorded) asks for:
    ``dense`` where it sets SGLANG_EAGLE_PAGED_DENSE_DRAFT on, else SGLang's ``per-branch``; None
    without the plugin (mode off) or without a tree on pages."""
    from .. import settings

    if cfg.get("mode") == "off" or (cfg.get("topk") or 1) <= 1 or (cfg.get("page_size") or 1) <= 1:
        return None
    return "dense" if settings.parse(cfg.get("env") or {}).dense_draft else "per-branch"


def record_served(pair: dict, servers: dict, save) -> None:
    """What each server logged about the path it ran (:func:`.server_log.served`: mode, draft layout,
    the plugin's start-up lines), read from its whole log once warm-up and settling are done, into the
    pair's record; where a side ran another layout than its configuration asks, ``served_not_asked``
    says so (its figure is about the layout that served)."""
    found = {side: served(text_since(getattr(servers[side], "log_file", None), 0)) for side in ("A", "B")}
    differs = {side: f"asked {asked}, served {found[side]['layout']}" for side in ("A", "B")
               if (asked := asked_layout(pair[side])) is not None and found[side]["plugin"] in ("on", "fake")
               and found[side]["layout"] != asked}

    def update():
        pair["served"] = found
        if differs:
            pair["served_not_asked"] = differs

    save(update)


def _resolved(pair: dict, until, levels: tuple, tokens, conversations: int) -> dict | None:
    """Per parallelism, the pooled statistics where ``until`` (:class:`.ab_pool.UntilResolved`) lets
    the pair stop at every one; else None."""
    found = {}
    for par in levels:
        key = (pair["A"]["name"], pair["B"]["name"], tokens, par, conversations)
        got = until.check(key, (pair.get("summary", {}).get(str(par)) or {}).get("ratios") or [])
        if got is None:
            return None
        found[str(par)] = got
    return found


def _start_sides(lanes: list, t0: float) -> None:
    """Start the wave's servers side by side (A on every GPU, then B on every GPU), each side only once
    the one before it on its GPU is ready. A server sizes its KV pool from the memory it finds free
    while it starts: two starting together on one GPU each count the other's loading as free, and
    their pools differ by chance (then :func:`equal_kv_pools` refuses the pair); one after the other,
    the second sees the first whole, and an explicit ``--max-total-tokens`` that both can hold gives
    equal pools."""
    for side in ("A", "B"):
        live = [(pair, servers) for pair, servers, _, _ in lanes if not pair.get("error")]
        for _, servers in live:
            servers[side].start()
        for pair, servers in live:
            try:
                servers[side].wait_ready()
                pair["startup_s"] = round(time.time() - t0, 1)
            except Exception as exc:
                pair["error"] = f"start: {type(exc).__name__}: {exc}"[:2000]
                for srv in servers.values():
                    srv.stop()


def _run_wave(lanes: list, save, **measure_kw) -> None:
    """Start every server of the wave (:func:`_start_sides`), then measure each GPU's pair in its own
    thread; a pair whose server fails to start, or whose measuring raises, records why and the others
    go on."""
    everything = [srv for _, servers, _, _ in lanes for srv in servers.values()]
    stopping = threading.Event()  # set once the servers go down (end, or a time limit): lanes record no more
    try:
        _start_sides(lanes, time.time())

        def lane(pair, servers, cache_dirs, probes):
            try:
                _measure_pair(pair, servers, save=save, stopping=stopping, cache_dirs=cache_dirs, probes=probes,
                              **measure_kw)
            except Exception as exc:  # keep the other lanes going; the record says why
                if not stopping.is_set():  # else: its servers were stopped under it (a time limit)
                    pair["error"] = f"{type(exc).__name__}: {exc}"[:2000]

        threads = [threading.Thread(target=lane, args=lp, name=f"ab-gpu{lp[0]['gpu']}")
                   for lp in lanes if not lp[0].get("error")]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():  # short joins: a SIGINT (a time limit) is handled in this thread
                t.join(timeout=0.2)
    finally:
        stopping.set()
        for probe in (probe for *_, probes in lanes for probe in probes):
            getattr(probe, "close", lambda: None)()
        stop_all(everything)
        save()


def run_pairs(pairs, *, target: str, draft: str, out_dir: str, rounds: int = 3, num_questions: int = 80,
              parallel: int = 16, parallel1_questions: int = 0, max_new_tokens: int = 256,
              more_parallel: tuple = (), ignore_eos: bool = False, warmup: int = 16, max_total_tokens: int = 131072,
              mem_fraction: float = 0.4, load_format: str | None = None, gpus: int = 1,
              question_file: str | None = None, startup_timeout: float = 900.0, triton_seeds=(),
              settle: int = 1, gc_freeze: bool = False, tokenizer: str | None = None, until=None,
              probes=None) -> dict:
    """Measure every ``(A, B)`` pair of :class:`RunConfig` in turn on one GPU (module docstring).

    Pairs are dealt over ``gpus`` GPUs, one pair per GPU at a time; the GPUs run side by side.
    ``gc_freeze`` calls :func:`freeze_gc` on both servers of a pair after warm-up. ``settle`` passes
    of the measured workload per side and parallelism run before round 0 and are not counted.
    Results go to ``out_dir/ab.json`` after every pass. ``tokenizer``: the chat template applied
    client-side. ``until`` (:class:`.ab_pool.UntilResolved`): a pair stops before ``rounds`` once its
    rounds, pooled with earlier recordings', resolve the interval asked for (``resolved`` in its record).
    ``probes(out_dir, gpu)``: what else to measure around every counted pass on that GPU (the lab's
    CPU and GPU samplers, ``bench/ab_probes.py`` at the top of the checkout): objects with
    ``before(server)`` and ``after(server, state) -> dict`` (merged into the pass's record) and
    optionally ``close()``.
    """
    if tokenizer:
        require_chat_template(tokenizer)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    all_questions = load_questions(question_file, None)
    questions = sized(all_questions, num_questions)
    warmup_questions = _warmup_questions(all_questions, warmup)
    bench_kw = dict(max_new_tokens=max_new_tokens, progress=False, ignore_eos=ignore_eos, tokenizer=tokenizer)
    results = {"rounds": rounds, "parallel": parallel, "more_parallel": list(more_parallel),
               "parallel1_questions": parallel1_questions,
               "num_questions": len(questions), "max_new_tokens": max_new_tokens, "settle_passes": settle,
               "gc_freeze": gc_freeze, "tokenizer": tokenizer, "pairs": {}}
    if until is not None:
        results["until_half_width"] = until.half_width
    lock = threading.Lock()

    def save(update=None):
        # Under one lock: another GPU's lane may be recording while this one writes the file.
        with lock:
            if update is not None:
                update()
            (out / "ab.json").write_text(json.dumps(results, indent=1))

    for w in range(0, len(pairs), max(1, gpus)):
        _measure_wave(pairs[w:w + max(1, gpus)], w, results, out, save, target=target, draft=draft,
                      max_total_tokens=max_total_tokens, mem_fraction=mem_fraction, load_format=load_format,
                      startup_timeout=startup_timeout, triton_seeds=triton_seeds, probes=probes,
                      questions=questions, warmup_questions=warmup_questions, parallel=parallel,
                      more_parallel=tuple(more_parallel), parallel1_questions=parallel1_questions, rounds=rounds,
                      settle=settle, bench_kw=bench_kw, gc_freeze=gc_freeze, until=until)
    return results


def _measure_wave(wave, first, results, out, save, *, target, draft, max_total_tokens, mem_fraction,
                  load_format, startup_timeout, triton_seeds, probes=None, **measure_kw) -> None:
    """Launch the pairs of one wave, one per GPU, and measure them side by side."""
    lanes = []  # (pair record, {"A": server, "B": server}, their Triton cache dirs, probes), one per GPU
    for gpu, (i, (a, b)) in enumerate(enumerate(wave, start=first)):
        pair = results["pairs"][f"{a.name}:{b.name}#{i}"] = {"A": asdict(a), "B": asdict(b), "gpu": gpu,
                                                              "passes": []}
        servers, cache_dirs = {}, {}
        for side, cfg in (("A", a), ("B", b)):
            port = 30000 + 20 * (2 * i + (side == "B"))
            args = server_args(cfg, target, draft, port, max_total_tokens, mem_fraction, load_format)
            args += ["--base-gpu-id", str(gpu)]
            # The idle server of a pair sleeps on its socket (shared_gpu) while the other is timed.
            servers[side], launched, cache_dirs[side] = launch(
                replace(cfg, name=f"pair{i}_{side}_{cfg.name}"), args, port=port, log_dir=str(out / "logs"),
                startup_timeout=startup_timeout, shared_gpu=True, triton_seeds=triton_seeds)
            servers[side].log_file = launched["log"]  # each pass reads what the server logged during it
        lanes.append((pair, servers, cache_dirs, list(probes(out, gpu)) if probes else []))
    _run_wave(lanes, save, **measure_kw)


def _rounds_text(results: dict) -> str:
    # An interrupt (the device scripts' time limit) leaves ab.json with the rounds asked for: the
    # header must not claim them all.
    asked = results["rounds"]
    stopped = [p for p in results["pairs"].values() if p.get("resolved")]
    if not results.get("interrupted") and not stopped:
        return f"{asked} rounds (ABBA)"
    done = max((s["rounds"] for pair in results["pairs"].values()
                for s in (pair.get("summary") or {}).values()), default=0)
    why = [] if not stopped else [f"{len(stopped)} of {len(results['pairs'])} pairs stopped once their rounds "
                                  f"pooled with earlier recordings' resolved +-{100 * results['until_half_width']:g}%"]
    why += ["interrupted before the rest"] if results.get("interrupted") else []
    return f"{done} of {asked} rounds (ABBA; {'; '.join(why)})"


def _capped_text(results: dict) -> str:
    n, top = results["num_questions"], max((results["parallel"], *results.get("more_parallel", ())))
    if in_flight(top, n) == top:
        return ""
    return f" (one client thread per conversation: at most {in_flight(top, n)} requests in flight)"


def markdown(results: dict) -> str:
    levels = ", ".join(str(p) for p in (results["parallel"], *results.get("more_parallel", ())))
    lines = [_rounds_text(results) + f", {results['num_questions']} questions at parallel "
             f"{levels}" + _capped_text(results) + (f", {results['parallel1_questions']} at parallel 1"
                                        if results["parallel1_questions"] else "")
             + f", {results['max_new_tokens']} tokens" + _settle_text(results)
             + "; ratio = geometric mean of B/A per round, 95% t-interval; \"level\" only where it lies within "
             "+-3%; retractions: the servers' \"KV cache pool is full\" lines during the counted passes (a side "
             "that retracted measured its KV pool: the verdict says KV-bound)",
             "", "| A | B | parallel | A tok/s | B tok/s | B/A | 95% interval | verdict | acceptance A / B | rounds "
             "| retractions A / B |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v, f="{:.1f}": "-" if v is None else f.format(v)  # noqa: E731
    for key, pair in results["pairs"].items():
        for par, s in (pair.get("summary") or {}).items():
            lines.append(f"| {pair['A']['name']} | {pair['B']['name']} | {par} | {fmt(s['tps_A'])} | "
                         f"{fmt(s['tps_B'])} | {fmt(s['ratio'], '{:.3f}x')} | "
                         f"{fmt(s['low'], '{:.3f}')}-{fmt(s['high'], '{:.3f}')} | {s['verdict']} | "
                         f"{fmt(s['acceptance_A'], '{:.3f}')} / {fmt(s['acceptance_B'], '{:.3f}')} | {s['rounds']} | "
                         f"{fmt(s.get('retractions_A'), '{}')} / {fmt(s.get('retractions_B'), '{}')} |")
        if pair.get("error"):
            lines.append(f"| {pair['A']['name']} | {pair['B']['name']} | error: {pair['error'][:200]} ||||||||")
    lines += _served_text(results)
    stalled = [(pair, par, s) for pair in results["pairs"].values() for par, s in (pair.get("summary") or {}).items()
               if "ratio_without_compiles" in s]
    if stalled:
        lines += ["", "Without the rounds in which a pass compiled a Triton variant (a stall of that pass): "
                  + "; ".join(f"{pair['A']['name']}:{pair['B']['name']} at parallel {par} "
                              + (f"{s['ratio_without_compiles']:.3f}x ({fmt(s['low_without_compiles'], '{:.3f}')}-"
                                 f"{fmt(s['high_without_compiles'], '{:.3f}')}), {s['rounds_without_compiles']} rounds"
                                 if s["ratio_without_compiles"] is not None else "no round left")
                              for pair, par, s in stalled) + "."]
    resolved = [(pair, par, r) for pair in results["pairs"].values() for par, r in (pair.get("resolved") or {}).items()]
    if resolved:
        lines += ["", "Pooled with earlier recordings over server pairs (the rounds that stopped the pair): "
                  + "; ".join(f"{pair['A']['name']}:{pair['B']['name']} at parallel {par} {r['ratio']:.3f}x "
                              f"({r['low']:.3f}-{r['high']:.3f}), {r['rounds']} rounds of which {r['prior_rounds']} "
                              f"earlier, {r.get('pairs', 1)} server pairs" for pair, par, r in resolved) + "."]
    lines += ["", "Where the time goes: verify rounds per second (tok/s over acceptance: the speed without the "
              "acceptance, which each side's numerics fix per prompt set); at parallel 1 each pass fits latency = "
              "per request + per round x rounds over its requests (means over the counted passes); Triton variants "
              "compiled during the passes; pass spread: standard deviation of each side's log throughput over its "
              "passes, in percent (the noise); client CPU: the benchmark client's CPU seconds over the pass's wall "
              "time (near 100%, the client paces the pass); scheduler CPU: the same for the server's scheduler "
              "process (below 100%, it waited off its CPU; CUDA's spin on the GPU counts as busy; per pass in "
              "`ab.json`, `cpu_s`, with the server's other processes and the whole host's busy and stolen seconds); GPU util: nvidia-smi's utilisation over the "
              "pass, sampled every 100 ms (per pass in `ab.json`, `gpu`, with the SM clock; blank without nvidia-smi).",
              "",
              "| A | B | parallel | verify rounds/s B/A | 95% interval | per request ms A / B | per round ms A / B "
              "| compiled A / B | pass spread A / B | client CPU A / B | scheduler CPU A / B | GPU util A / B |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for pair in results["pairs"].values():
        for par, s in (pair.get("summary") or {}).items():
            lines.append(f"| {pair['A']['name']} | {pair['B']['name']} | {par} | "
                         f"{fmt(s.get('round_rate_ratio'), '{:.3f}x')} | "
                         f"{fmt(s.get('round_rate_low'), '{:.3f}')}-{fmt(s.get('round_rate_high'), '{:.3f}')} | "
                         f"{fmt(s.get('per_request_ms_A'), '{:.2f}')} / {fmt(s.get('per_request_ms_B'), '{:.2f}')} | "
                         f"{fmt(s.get('per_round_ms_A'), '{:.4f}')} / {fmt(s.get('per_round_ms_B'), '{:.4f}')} | "
                         f"{s.get('compiled_A', '-')} / {s.get('compiled_B', '-')} | "
                         f"{fmt(s.get('spread_A'), '{:.1f}%')} / {fmt(s.get('spread_B'), '{:.1f}%')} | "
                         f"{fmt(s.get('client_cpu_share_A'), '{:.0%}')} / "
                         f"{fmt(s.get('client_cpu_share_B'), '{:.0%}')} | "
                         f"{fmt(s.get('scheduler_cpu_share_A'), '{:.0%}')} / "
                         f"{fmt(s.get('scheduler_cpu_share_B'), '{:.0%}')} | "
                         f"{fmt(s.get('gpu_util_A'), '{:.0f}%')} / {fmt(s.get('gpu_util_B'), '{:.0f}%')} |")
    if results.get("gc_freeze"):
        lines += ["", "Garbage collection frozen on both servers after warm-up (`--freeze-gc`, SGLang's `/freeze_gc`)."]
    return "\n".join(lines) + "\n"


def _served_text(results: dict) -> list:
    """The path each server ran, from its log (:func:`record_served`), where the pairs recorded it."""
    def side(found: dict) -> str:
        if found.get("plugin") in ("on", "fake"):
            return f"plugin {found['plugin']}, {found['layout']}"
        return f"plugin {found['plugin']}" if found.get("plugin") else "no line of the plugin"

    said = [f"{pair['A']['name']}:{pair['B']['name']} A {side(pair['served']['A'])}, B {side(pair['served']['B'])}"
            + (f" ({'; '.join(f'{k}: {v}' for k, v in pair['served_not_asked'].items())}: not the layout asked)"
               if pair.get("served_not_asked") else "")
            for pair in results["pairs"].values() if pair.get("served")]
    return ["", "Path served, from each server's log (mode, draft layout): " + "; ".join(said) + "."] if said else []


def _settle_text(results: dict) -> str:
    settle = results.get("settle_passes", 0)  # recordings before run 16 had none
    if not settle:
        return ""
    compiled = "; ".join(f"{pair['A']['name']}:{pair['B']['name']} {side} compiled "
                         + ", ".join(f"{n} {name}" for name, n in sorted(kernels.items()))
                         for pair in results["pairs"].values()
                         for side, kernels in sorted((pair.get("settle_compiled") or {}).items()))
    return (f", after {settle} settling pass{'es' if settle > 1 else ''} per side and parallelism (not counted"
            + (f"; during them {compiled}" if compiled else "") + ")")


def plot(results: dict, path: str) -> str | None:
    """Throughput of every pass, per pair and parallelism, A and B in pass order; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    panels = [(key, par) for key, pair in results["pairs"].items() for par in (pair.get("summary") or {})]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.5), squeeze=False)
    for ax, (key, par) in zip(axes[0], panels):
        passes = [p for p in results["pairs"][key]["passes"] if str(p["parallel"]) == par]
        for side, marker in (("A", "o"), ("B", "s")):
            pts = [(n, p["output_throughput"]) for n, p in enumerate(passes) if p["side"] == side]
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker, label=results["pairs"][key][side]["name"])
        ax.set_title(f"{key}, parallel {par}", fontsize=9)
        ax.set_xlabel("pass")
        ax.set_ylabel("output tok/s")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def add_until_args(p) -> None:
    p.add_argument("--until-pct", type=float,
                   help="stop a pair before --rounds once its rounds, pooled with --prior's, give a 95%% interval "
                        "within +-this percent (bench/ab_pool.py: UntilResolved)")
    p.add_argument("--prior", action="append", default=[],
                   help="earlier recordings to pool with (glob; ab.json or ab_pool --json output); repeatable")


def until_of(a):
    """The stopping rule ``--until-pct`` and ``--prior`` ask for, or None."""
    if a.until_pct is None:
        if a.prior:
            raise SystemExit("--prior pools with earlier recordings only for --until-pct")
        return None
    paths = [x for g in a.prior for x in sorted(glob.glob(g))]
    missing = [g for g in a.prior if not glob.glob(g)]
    if missing:
        raise SystemExit(f"--prior {missing[0]}: no such file")
    return UntilResolved(load_prior(paths), a.until_pct / 100.0)


def _parse_pairs(spec: str, configs: list) -> list:
    by_name = {c.name: c for c in configs}
    pairs = []
    for item in spec.split(","):
        a, _, b = item.partition(":")
        missing = [n for n in (a, b) if n not in by_name]
        if missing:
            raise SystemExit(f"unknown configuration(s) {missing}; the set has {sorted(by_name)}")
        pairs.append((by_name[a], by_name[b]))
    return pairs


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Paired A/B throughput of two configurations on one GPU, in turn.")
    add_set_and_model_args(p, "large")
    p.add_argument("--pairs", default="on_p1:on_p64", help="comma-separated A:B configuration names of the set")
    p.add_argument("--out", required=True, help="directory: ab.json, ab.md, ab.png, logs/")
    p.add_argument("--rounds", type=int, default=3)
    add_workload_args(p, "each round also measures parallel 1 on this many")
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--mem-fraction", type=float, default=0.4, help="per server: two share a GPU")
    p.add_argument("--max-total-tokens", type=kv_sizing.pool_arg, default=131072,
                   help="KV slots of every server, or auto: the pool in which every configuration of the pairs "
                        "runs the batch without SGLang retracting requests (bench/kv_sizing.py)")
    p.add_argument("--triton-seed", action="append", default=[], help="Triton cache dir (glob) to seed from")
    p.add_argument("--settle-passes", type=int, default=1,
                   help="uncounted passes of the measured workload per side and parallelism before round 0")
    p.add_argument("--freeze-gc", action="store_true",
                   help="call SGLang's /freeze_gc on both servers of a pair after warm-up")
    add_until_args(p)
    a = p.parse_args(argv)
    configs = configs_of(a)
    pairs = _parse_pairs(a.pairs, configs)
    note = in_flight_note(a.parallel, a.questions)
    if note:
        print(f"[ab] {note}", flush=True)
    a.max_total_tokens = kv_sizing.pool_for(a, [c for pair in pairs for c in pair], a.questions, a.parallel, "ab",
                                            a.tokenizer)
    try:
        results = run_pairs(pairs, target=a.target, draft=a.draft, out_dir=a.out,
                            rounds=a.rounds, num_questions=a.questions, parallel=a.parallel,
                            parallel1_questions=a.parallel1_questions, max_new_tokens=a.max_new,
                            ignore_eos=a.ignore_eos, warmup=a.warmup, max_total_tokens=a.max_total_tokens,
                            mem_fraction=a.mem_fraction, load_format=a.load_format, gpus=a.gpus,
                            question_file=a.question_file,
                            triton_seeds=[d for g in a.triton_seed for d in sorted(glob.glob(g))],
                            settle=a.settle_passes, gc_freeze=a.freeze_gc, tokenizer=a.tokenizer,
                            until=until_of(a))
    except KeyboardInterrupt:  # a time limit: report the rounds that completed (ab.json is saved per pass)
        saved = Path(a.out) / "ab.json"
        if not saved.exists():
            raise
        results = {**json.loads(saved.read_text()), "interrupted": True}
        saved.write_text(json.dumps(results, indent=1))
        print("interrupted: the table covers the passes measured so far")
    md = markdown(results)
    (Path(a.out) / "ab.md").write_text(md)
    plot(results, str(Path(a.out) / "ab.png"))
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
