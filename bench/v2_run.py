"""Runner of the v2-worker GPU run (issue 30): the sweep of :mod:`.v2_sets` and its A/B pairs.

  python -m bench.v2_run sweep --set correct --target T --draft D --out DIR \\
      [--only a,b] [--probe-dir scripts/device/probes]
  python -m bench.v2_run ab --pairs on_p64:off_p64 --target T --draft D --out DIR

``sweep`` measures each configuration once (:func:`.e2e.run_configs`: outputs with top-2 margins,
acceptance, Triton variants compiled after warm-up, each server with a fresh ``TRITON_CACHE_DIR``);
with ``--probe-dir`` every server also counts its host syncs (``probes/sync_probe.py``) into
``DIR/sync/<name>/``. Configurations already measured in ``DIR/e2e.json`` are not run again.

``ab`` runs every pair with :func:`.ab.run_pairs` in a folder of its own, ``DIR/<A>__<B>/``, so that
a pair measured to the end by an earlier call is skipped and a cut-short one runs again.

``profile`` (:mod:`.v2_profile`) profiles each configuration under a steady load through SGLang's
``/start_profile`` and reduces every trace per verify round on the machine (:mod:`.round_profile`):
  python -m bench.v2_run profile --only on_p1,on_p64 --target T --draft D --out DIR
"""

import argparse
import glob
import json
import os
from dataclasses import replace
from pathlib import Path

from sglang_eagle_paged.bench import ab as ab_mod, kv_sizing
from sglang_eagle_paged.bench.ab import add_until_args
from sglang_eagle_paged.bench.configs import add_workload_args
from sglang_eagle_paged.bench.mtbench import in_flight_note

from . import ab_probes, v2_sets
from .e2e import run_configs

SYNC_ENV = "SGLANG_EAGLE_PAGED_SYNC_PROBE"


def with_probe(cfgs: list, probe_dir: str, env_of) -> list:
    """Each configuration with ``probe_dir`` first on its PYTHONPATH (its ``sitecustomize`` arms the
    probes whose variables ``env_of(cfg)`` sets) and those variables."""
    probe_dir = str(Path(probe_dir).resolve())
    if not (Path(probe_dir) / "sitecustomize.py").is_file():
        raise SystemExit(f"--probe-dir {probe_dir}: no sitecustomize.py there")
    path = os.pathsep.join(p for p in (probe_dir, os.environ.get("PYTHONPATH", "")) if p)
    return [replace(c, env={**c.env, "PYTHONPATH": path, **env_of(c)}) for c in cfgs]


def sized_for(cfg, a):
    """``cfg`` with the command line's CUDA-graph batch and running-request cap."""
    return replace(cfg, cuda_graph_max_bs=a.cuda_graph_max_bs, max_running_requests=a.max_running_requests)


def pair_dir(out: Path, a, b) -> Path:
    return out / f"{a.name}__{b.name}"


def pair_done(path: Path, rounds: int) -> bool:
    """An earlier call measured this pair to the end: every parallelism has ``rounds`` rounds, or the
    pair stopped once resolved (``--until-pct``)."""
    try:
        rec = json.loads((path / "ab.json").read_text())
    except (OSError, ValueError):
        return False
    pairs = list(rec.get("pairs", {}).values())
    if rec.get("interrupted") or not pairs:
        return False
    if all(p.get("resolved") for p in pairs):  # stopped early, the interval resolved (--until-pct)
        return True
    summaries = [s for p in pairs for s in (p.get("summary") or {}).values()]
    return bool(summaries) and rec.get("rounds", 0) >= rounds and all(s.get("rounds", 0) >= rounds for s in summaries)


def _say_in_flight(tag: str, parallel: int, questions: int) -> None:
    note = in_flight_note(parallel, questions)
    if note:
        print(f"[{tag}] {note}")


def sweep(a) -> int:
    cfgs = [sized_for(c, a) for c in v2_sets.configs(a.set, a.only)]
    out = Path(a.out)
    if a.probe_dir:
        cfgs = with_probe(cfgs, a.probe_dir, lambda c: {SYNC_ENV: str(out / "sync" / c.name)})
    pool = kv_sizing.pool_for(a, cfgs, a.questions, a.parallel, "v2 sweep", a.tokenizer)
    _say_in_flight("v2 sweep", a.parallel, a.questions)
    if a.dry_run:
        print(f"[v2 sweep] {len(cfgs)} configurations, {a.questions} questions at parallel {a.parallel}, "
              f"{a.max_new} tokens")
        for c in cfgs:
            print(f"{c.name}: mode={c.mode} page={c.page_size} backend={c.backend} extra={c.extra} "
                  f"probe={c.env.get(SYNC_ENV, '-')}")
        return 0
    run_configs(cfgs, target=a.target, draft=a.draft, out_json=str(out / "e2e.json"), log_dir=str(out / "logs"),
                num_questions=a.questions, parallel=a.parallel, max_new_tokens=a.max_new,
                max_total_tokens=pool, mem_fraction=a.mem_fraction, question_file=a.question_file,
                warmup=a.warmup, concurrency=a.concurrency or len(cfgs), ignore_eos=a.ignore_eos,
                parallel1_questions=a.parallel1_questions, gpus=a.gpus, load_format=a.load_format,
                tokenizer=a.tokenizer)
    return 0


def ab(a) -> int:
    out = Path(a.out)
    seeds = [d for g in a.triton_seed for d in sorted(glob.glob(g))]
    more = tuple(int(x) for x in a.also_parallel.split(",") if x) if a.also_parallel else ()
    _say_in_flight("v2 ab", max((a.parallel, *more)), a.questions)
    until = ab_mod.until_of(a)
    for pa, pb in v2_sets.pairs(a.pairs):
        pa, pb = (sized_for(c, a) for c in (pa, pb))
        where = pair_dir(out, pa, pb)
        if pair_done(where, a.rounds):
            print(f"[v2 ab] {pa.name}:{pb.name} measured already ({where})")
            continue
        if until is not None:
            earlier = until.earlier(pa.name, pb.name, a.max_new, a.parallel, a.questions)
            print(f"[v2 ab] {pa.name}:{pb.name} stops once its rounds pooled with {sum(map(len, earlier))} "
                  f"earlier ones of {len(earlier)} server pairs at parallel {a.parallel} resolve "
                  f"+-{a.until_pct:g}% (95%, over server pairs)")
        # both sides get the pool of the larger need (bench.ab refuses unequal pools)
        pool = kv_sizing.pool_for(a, (pa, pb), a.questions, max((a.parallel, *more)), "v2 ab", a.tokenizer)
        if a.dry_run:
            print(f"[v2 ab] {pa.name}:{pb.name} -> {where} (target {a.target}, draft {a.draft}, "
                  f"chat template {a.tokenizer or 'none'}, KV pool {pool}, "
                  f"Triton caches to seed from {len(seeds)})")
            continue
        try:
            results = ab_mod.run_pairs([(pa, pb)], target=a.target, draft=a.draft, out_dir=str(where),
                                       rounds=a.rounds, num_questions=a.questions, parallel=a.parallel,
                                       more_parallel=more, load_format=a.load_format,
                                       parallel1_questions=a.parallel1_questions, max_new_tokens=a.max_new,
                                       ignore_eos=a.ignore_eos, warmup=a.warmup,
                                       max_total_tokens=pool, mem_fraction=a.mem_fraction,
                                       question_file=a.question_file, triton_seeds=seeds, settle=a.settle_passes,
                                       tokenizer=a.tokenizer, until=until, probes=ab_probes.probes)
        except KeyboardInterrupt:  # the call's time limit: keep what this pair measured, stop here
            saved = where / "ab.json"
            if saved.exists():
                results = {**json.loads(saved.read_text()), "interrupted": True}
                saved.write_text(json.dumps(results, indent=1))
                (where / "ab.md").write_text(ab_mod.markdown(results))
            print(f"[v2 ab] {pa.name}:{pb.name} interrupted")
            return 130
        (where / "ab.md").write_text(ab_mod.markdown(results))
        ab_mod.plot(results, str(where / "ab.png"))
        print(f"[v2 ab] {pa.name}:{pb.name}\n" + ab_mod.markdown(results).split("\n\n")[1])
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="The v2-worker GPU run of issue 30 (bench/v2_sets.py).")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, defaults in (("sweep", dict(questions=16, max_new=160, warmup=4, mem_fraction=0.5)),
                           ("ab", dict(questions=32, max_new=256, warmup=8, mem_fraction=0.4)),
                           ("profile", dict(parallel=64, max_new=256, warmup=8, mem_fraction=0.4, ignore_eos=True,
                                            cuda_graph_max_bs=64, max_running_requests=128))):
        s = sub.add_parser(name)
        s.add_argument("--target", required=True)
        s.add_argument("--draft", required=True)
        s.add_argument("--out", required=True)
        s.add_argument("--max-total-tokens", type=kv_sizing.pool_arg, default=131072,
                       help="KV slots per server, or 'auto': what the largest need of the configurations (of a "
                            "pair: both sides the same) takes to run --parallel requests without retraction")
        s.add_argument("--mem-fraction", type=float)
        s.add_argument("--cuda-graph-max-bs", type=int, default=32,
                       help="largest batch served by a CUDA graph (at least the parallelism measured)")
        s.add_argument("--max-running-requests", type=int,
                       help="SGLang's cap on requests served at once (it lowers its own for speculative decoding)")
        s.add_argument("--load-format", help="e.g. dummy: random weights from the configs (a cost-only run)")
        s.add_argument("--dry-run", action="store_true", help="print what would run, start nothing")
        add_workload_args(s, "also measure parallel 1 on this many")
        s.set_defaults(**defaults)
    for which in ("sweep", "profile"):
        sub.choices[which].add_argument("--set", default="correct", help=f"one of {', '.join(v2_sets.SETS)}")
        sub.choices[which].add_argument("--only", help="comma-separated configuration names of the set")
    sw = sub.choices["sweep"]
    sw.add_argument("--concurrency", type=int, default=0, help="servers started together (0: all)")
    sw.add_argument("--gpus", type=int, default=1)
    sw.add_argument("--probe-dir", help="scripts/device/probes: count host syncs per draft step")
    sa = sub.choices["ab"]
    sa.add_argument("--pairs", help=f"A:B,... (default {','.join(v2_sets.AB_PAIRS)})")
    sa.add_argument("--rounds", type=int, default=6)
    sa.add_argument("--also-parallel", help="more parallelisms each round measures, comma-separated (e.g. 128)")
    sa.add_argument("--settle-passes", type=int, default=1)
    sa.add_argument("--triton-seed", action="append", default=[], help="Triton cache dir (glob) to seed from")
    add_until_args(sa)
    sp = sub.choices["profile"]
    sp.set_defaults(only="on_p1,on_p64")
    sp.add_argument("--steps", type=int, default=24, help="forward steps each profile records")
    sp.add_argument("--load-questions", type=int, default=512,
                    help="conversations of the steady load (long enough to outlast both profiles)")
    sp.add_argument("--settle-s", type=float, default=5.0, help="seconds of load before the first profile")
    sp.add_argument("--capture-timeout", type=float, default=120.0, help="seconds to wait for each trace")
    sp.add_argument("--probe-dir", help="scripts/device/probes: mark each round for traces without stacks")
    sp.add_argument("--py-spy", help="py-spy binary: also sample each scheduler process for --py-spy-s seconds")
    sp.add_argument("--py-spy-s", type=int, default=5)
    sp.add_argument("--eos", dest="ignore_eos", action="store_false", help="let replies stop at EOS")
    return p


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    if a.cmd == "profile":
        from . import v2_profile

        def prepare(c):
            c = sized_for(c, a)
            return with_probe([c], a.probe_dir, lambda _: {v2_profile.MARKS_ENV: "1"})[0] if a.probe_dir else c

        return v2_profile.run(a, prepare)
    return sweep(a) if a.cmd == "sweep" else ab(a)


if __name__ == "__main__":
    raise SystemExit(main())
