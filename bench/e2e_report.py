"""Markdown table of an end-to-end run (tests/gpu or bench.e2e) with page-1 ratios and agreement.

  python -m bench.e2e_report bench/results/<run>/testbed/e2e.json > e2e.md

Each row's page-1 baseline and built-in counterpart are the runs with the same
algorithm, draft, topk and backend (page 1, mode on; same page, mode off).
"""

import argparse

from sglang_eagle_paged.bench import triton_cache

from .e2e import load_recording, run_agreement


def _key(cfg, **over):
    c = {**cfg, **over}
    return (c["algorithm"], c["draft"], c["topk"], c["backend"], c["page_size"], c["mode"], c["cuda_graph"])


def _tps(rec, key="summary"):
    s = rec.get(key) or {}
    return s.get("output_throughput")


def main(path: str) -> None:
    res = load_recording(path)
    by_key = {_key(r["config"]): n for n, r in res.items() if not r.get("error")}
    ref = res.get("nospec_p1")
    print("| run | mode | page | topk | backend | acceptance | tok/s (par 16) | vs page 1 | vs SGLang built-in | tok/s (par 1) "
          "| identical to non-spec | divergences on near-ties | Triton variants (warm-up -> run) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, rec in res.items():
        cfg = rec["config"]
        mode = cfg["mode"] if cfg["algorithm"] else "no spec"
        head = f"| {name} | {mode} | {cfg['page_size']} | {cfg['topk'] if cfg['algorithm'] else '-'} | {cfg['backend']} |"
        if rec.get("error"):
            print(f"{head} error: {rec['error'][:60]} | | | | | | | |")
            continue
        s = rec["summary"]
        acc = f"{s['acceptance_length']:.3f}" if s["acceptance_length"] else "-"
        tps = _tps(rec)
        p1 = res.get(by_key.get(_key(cfg, page_size=1, mode="on", cuda_graph=True))) if cfg["algorithm"] else None
        off = res.get(by_key.get(_key(cfg, mode="off", cuda_graph=True))) if cfg["algorithm"] and cfg["mode"] == "on" else None
        ratio = lambda other: f"{tps / _tps(other):.2f}x" if other and _tps(other) and other is not rec else "-"  # noqa: E731
        par1 = _tps(rec, "summary_parallel1")
        agree = run_agreement(ref, rec) if ref and rec is not ref else None
        same = f"{agree['exact']}/{agree['compared']}" if agree else "-"
        ties = (f"{agree['near_tie_share']:.0%} (median gap {agree['margin_median']})"
                if agree and agree["near_tie_share"] is not None else "-")
        warm, run = rec.get("triton_variants_after_warmup"), rec.get("triton_variants_after_run")
        # ours and SGLang's (its assignment compiles per copy length at page > 1, per batch bucket
        # at page 1; its copy compiled mid-run before the post-verify move was ours)
        variants = "; ".join(f"{k.strip('_')} {warm[k]}->{run[k]}" for k in triton_cache.COUNTED_KERNELS
                             if run.get(k)) if warm and run else "-"
        print(f"{head} {acc} | {tps:.0f} | {ratio(p1)} | {ratio(off)} | {f'{par1:.0f}' if par1 else '-'} | {same} | "
              f"{ties} | {variants or '-'} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recording", help="e2e.json or e2e.json.gz of one run")
    main(ap.parse_args().recording)
