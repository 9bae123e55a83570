"""Profiles of v2 servers under a steady load (issue 36): where page 64's round time goes against page 1's.

Every configuration's server starts with the others (:func:`.e2e.serve_group`, one GPU each in turn),
warms up like the sweep (:func:`.e2e.warmup_mixes`), then serves a steady load (``--load-questions``
conversations at ``--parallel``, replies ``--max-new`` tokens long) while SGLang's own torch profiler
records ``--steps`` forward steps twice through ``/start_profile`` (:func:`.profile.capture`): first
without Python stacks (true host and GPU times; with ``--probe-dir`` the round-marks probe shows each
round in it), then with them (which frames; stack tracing inflates host time); before them, with ``--py-spy``, py-spy samples the scheduler process from outside
(:mod:`.pyspy`). Each trace is reduced on the machine by :mod:`.round_profile` to ``DIR/<name>-<kind>.json``
and ``.md``; ``DIR/profile.md`` puts the configurations side by side and ``DIR/profile.json`` keeps
each server's record (the load's throughput, whether the load still ran when each trace ended).
Raw traces stay in ``DIR/traces/``. Configurations with both summaries in ``profile.json`` are not
run again.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from . import profile, pyspy, round_profile, v2_sets
from sglang_eagle_paged.bench.configs import _warmup_questions, launch, server_args, warmup_mixes
from sglang_eagle_paged.bench.kv_sizing import pool_for
from sglang_eagle_paged.bench.mtbench import load_questions, run_benchmark

from .e2e import serve_group

# The round-marks probe's variable (scripts/device/probes/round_marks.py)
MARKS_ENV = "SGLANG_EAGLE_PAGED_ROUND_MARKS"
# Without stacks first: the load is at its steadiest then, and that trace's times are the true ones.
KINDS = (("nostack", False), ("stack", True))


def _summarize(trace: Path, out: Path, name: str, kind: str, steps: int) -> dict:
    summary = round_profile.summarize(trace, rounds=steps)
    (out / f"{name}-{kind}.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / f"{name}-{kind}.md").write_text(round_profile.markdown(summary, f"{name}, {kind}"))
    return summary


def measure(server, name: str, record: dict, a, out: Path, load, warmup) -> None:
    """Warm up, start the load, profile twice while it runs, wait for the load to end."""
    bench_kw = dict(max_new_tokens=a.max_new, progress=False, ignore_eos=a.ignore_eos, tokenizer=a.tokenizer)
    for mix, parallel in warmup_mixes(warmup, a.parallel):
        run_benchmark(server.base_url, mix, parallel=parallel, **bench_kw)
    result: dict = {}

    def drive_load():
        try:
            result.update(run_benchmark(server.base_url, load, parallel=a.parallel, **bench_kw))
        except Exception as exc:  # noqa: BLE001 - recorded, the profiles may still be good
            result["error"] = f"{type(exc).__name__}: {exc}"

    loader = threading.Thread(target=drive_load, name=f"load-{name}", daemon=True)
    loader.start()
    time.sleep(a.settle_s)  # every slot filled, the first prefills done
    record["summaries"], record["load_running_after"], record["trace_mb"] = {}, {}, {}
    if a.py_spy:  # first: it reads the process from outside, before any profiler has run in it
        record["py_spy"] = sample(server, name, a, out)
        record["load_running_after"]["py_spy"] = loader.is_alive()
    traces = {}
    for kind, stack in KINDS:
        traces[kind] = profile.capture(server.base_url, str(out / "traces" / name / kind), num_steps=a.steps,
                                       drive=lambda: None, with_stack=stack, timeout=a.capture_timeout)
        # A trace taken after the load drained would measure a smaller batch: say so.
        record["load_running_after"][kind] = loader.is_alive()
    loader.join()
    record["load"] = result.get("summary")
    if result.get("error"):
        record.setdefault("errors", []).append(f"load: {result['error']}")
    # Only now: reducing a trace holds the load client's GIL for seconds, which would thin the batch.
    for kind, trace in traces.items():
        if trace is None:
            record.setdefault("errors", []).append(f"{kind}: no trace")
            continue
        record["trace_mb"][kind] = round(trace.stat().st_size / 2**20, 2)
        _summarize(trace, out, name, kind, a.steps)
        record["summaries"][kind] = f"{name}-{kind}.json"


def sample(server, name: str, a, out: Path, title: str = pyspy.SCHEDULER_TITLE) -> dict:
    """A py-spy sample of the server's scheduler process, reduced to ``DIR/<name>-pyspy.md``."""
    pid = pyspy.child_with_title(server.proc.pid, title) if getattr(server, "proc", None) else None
    if pid is None:
        return {"error": "no scheduler process found"}
    raw = out / f"{name}-pyspy.txt"
    rec = pyspy.record(a.py_spy, pid, raw, a.py_spy_s)
    if raw.is_file():
        summary = pyspy.top_frames(raw.read_text())
        rec["samples"] = summary["samples"]
        (out / f"{name}-pyspy.md").write_text(pyspy.markdown(summary, f"{name}, py-spy"))
    return rec


def report(out: Path, names: list) -> str:
    """Side by side per kind, then every summary's own tables."""
    parts = ["# Round profiles under load\n"]
    for kind, _ in KINDS:
        have = [(n, out / f"{n}-{kind}.json") for n in names if (out / f"{n}-{kind}.json").is_file()]
        if have:
            parts.append(f"\n## {kind}\n\n")
            summaries = [json.loads(p.read_text()) for _, p in have]
            parts.append(round_profile.compare_markdown(summaries, [n for n, _ in have]).split("\n\n", 1)[1])
    for n in names:
        for md in [out / f"{n}-{kind}.md" for kind, _ in KINDS] + [out / f"{n}-pyspy.md"]:
            if md.is_file():
                parts.append("\n" + md.read_text())
    return "".join(parts)


def run(a, prepare) -> int:
    """``v2_run profile``: ``prepare(cfg)`` gives each configuration the command line's graph and running
    caps, and the round marks' probe when asked."""
    cfgs = [prepare(c) for c in v2_sets.configs(a.set, a.only)]
    # the load's prompts go as the client sends them: the chat template with --tokenizer, else plain text
    pool = pool_for(a, cfgs, a.load_questions, a.parallel, "v2 profile", a.tokenizer)
    out = Path(a.out)
    record_path = out / "profile.json"
    records = json.loads(record_path.read_text()) if record_path.exists() else {}
    todo = [c for c in cfgs if len((records.get(c.name) or {}).get("summaries") or {}) < len(KINDS)]
    if a.dry_run:
        for c in cfgs:
            state = "to profile" if c in todo else "profiled already"
            marks = "on" if c.env.get(MARKS_ENV) == "1" else "off"
            print(f"{c.name}: mode={c.mode} page={c.page_size} backend={c.backend} "
                  f"graph_bs={c.cuda_graph_max_bs} max_running={c.max_running_requests} marks={marks} ({state})")
        print(f"[v2 profile] load {a.load_questions} conversations at parallel {a.parallel}, max_new {a.max_new}, "
              f"ignore_eos={a.ignore_eos}; {a.steps} steps per profile: {', '.join(k for k, _ in KINDS)}; "
              f"py-spy: {f'{a.py_spy_s}s with {a.py_spy}' if a.py_spy else 'no'}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    questions = load_questions(a.question_file, None)
    load = load_questions(a.question_file, a.load_questions)
    warmup = _warmup_questions(questions, a.warmup)
    launched = []
    for i, cfg in enumerate(todo):
        port = 30000 + 20 * i
        args = server_args(cfg, a.target, a.draft, port, pool, a.mem_fraction, a.load_format)
        server, record, _ = launch(cfg, args, port=port, log_dir=str(out / "logs"), startup_timeout=600,
                                   shared_gpu=len(todo) > 1)
        launched.append((cfg.name, server, record))

    def done(name, record):
        records[name] = record
        record_path.write_text(json.dumps(records, indent=1))
        load_summary = record.get("load") or {}
        print(f"[v2 profile] {name}: summaries={sorted(record.get('summaries') or {})} "
              f"load tok/s={load_summary.get('output_throughput')} err={record.get('error', record.get('errors', ''))}",
              flush=True)

    try:
        serve_group(launched, lambda name, server, record: measure(server, name, record, a, out, load, warmup), done)
    finally:
        for name, _, record in launched:
            records.setdefault(name, record)
        record_path.write_text(json.dumps(records, indent=1))
        (out / "profile.md").write_text(report(out, [c.name for c in cfgs]))
    return 0
