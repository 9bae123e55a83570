"""Markdown table of an end-to-end run (tests/gpu) with page-1 ratios and output agreement.

  python scripts/e2e_report.py bench/results/2026-11-30-h200/e2e.json > e2e.md
"""

import json
import sys

from sglang_eagle_paged.bench.e2e import agreement


def main(path: str) -> None:
    res = json.load(open(path))
    on_p1 = res.get("on_p1", {}).get("summary", {})
    print("| run | mode | page | topk | backend | acceptance | output tok/s | tok/s vs on_p1 | identical outputs vs non-spec | vs SGLang built-in | Triton variants (warm-up -> run) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, rec in res.items():
        cfg = rec["config"]
        if rec.get("error"):
            print(f"| {name} | {cfg['mode']} | {cfg['page_size']} | {cfg['topk']} | {cfg['backend']} | error: {rec['error'][:60]} | | | | | |")
            continue
        s = rec["summary"]
        acc = f"{s['acceptance_length']:.3f}" if s["acceptance_length"] else "-"
        ratio = f"{s['output_throughput'] / on_p1['output_throughput']:.2f}x" if on_p1.get("output_throughput") else "-"
        ns = agreement(res["nospec_p1"]["outputs"], rec["outputs"]) if "nospec_p1" in res and name != "nospec_p1" else None
        bi = agreement(res["off_p64"]["outputs"], rec["outputs"]) if "off_p64" in res and name != "off_p64" else None
        fmt = lambda a: f"{a['exact']}/{a['compared']}" if a else "-"
        warm, run = rec.get("triton_variants_after_warmup"), rec.get("triton_variants_after_run")
        variants = "; ".join(f"{k.strip('_')} {warm[k]}->{run[k]}" for k in run if run[k]) if warm and run else "not counted"
        print(f"| {name} | {cfg['mode'] if cfg['algorithm'] else 'no spec'} | {cfg['page_size']} | {cfg['topk'] if cfg['algorithm'] else '-'} | "
              f"{cfg['backend']} | {acc} | {s['output_throughput']:.0f} | {ratio} | {fmt(ns)} | {fmt(bi)} | {variants} |")


if __name__ == "__main__":
    main(sys.argv[1])
