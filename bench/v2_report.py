"""What the v2 sweep measured (issue 30 points 1-3, 5), as one table per point.

  python -m bench.v2_report DIR    (DIR: a v2_run sweep's --out; writes DIR/report.md)

Reads ``DIR/e2e.json`` (or ``.json.gz``) and the host-sync probe's ``DIR/sync/<name>/sync-*.json``.
Nothing is judged here: the numbers, the pairs they compare, and where each comes from.
"""

import json
import sys
from pathlib import Path

from . import parity
from .e2e import load_recording, measured, run_agreement

# (ours or fake, reference): outputs compared token by token, margins from the reference's top-2
OUTPUT_PAIRS = [("on_p64", "off_p64"), ("on_p128", "off_p128"), ("on_p64_nooverlap", "off_p64_nooverlap"),
                ("fake_p64", "on_p64"), ("fake_p128", "on_p128"), ("on_p1", "off_p1"),
                ("triton_on_p64", "triton_off_p64"), ("triton_fake_p64", "triton_off_p64"),
                ("triton_fake_p16", "triton_on_p16"), ("fi_on_p64", "fi_off_p64"),
                ("fi_fake_p64", "fi_off_p64"), ("fi_fake_p16", "fi_on_p16"),
                # the fused FA3 draft metadata (opt-in on v2) writes what SGLang's builders write
                ("on_p64_fx", "off_p64"), ("on_p128_fx", "off_p128"), ("on_p64_fx", "on_p64"),
                # FA3 reading the prefix tail in place (opt-in): another split of the same keys between
                # the two passes, so draft numerics differ in rounding; outputs differ only at near-ties
                ("on_p64_ip", "off_p64"), ("on_p128_ip", "off_p128"), ("on_p64_ip", "on_p64"),
                # the dense draft layout (opt-in): the draft reads page 1's keys, so page 1's outputs
                ("triton_dense_p64", "triton_on_p1"), ("triton_dense_p128", "triton_on_p1"),
                ("triton_dense_p64", "triton_off_p64"), ("triton_dense_p128", "triton_dense_p64"),
                # SGLang's own triton at page 64 against page 1: what a page change alone does to outputs
                ("triton_off_p64", "triton_on_p1"),
                # pages against page 1 and against no speculation: divergences expected only at near-ties
                ("on_p64", "on_p1"), ("on_p128", "on_p1"), ("on_p64", "nospec_p1"), ("on_p1", "nospec_p1")]
# (configuration, page-1 reference) for acceptance
ACCEPT_PAIRS = [("on_p64", "on_p1"), ("on_p128", "on_p1"), ("off_p64", "on_p1"), ("off_p128", "on_p1"),
                ("fake_p64", "on_p64"), ("fake_p128", "on_p128"), ("on_p64_fx", "on_p1"), ("on_p128_fx", "on_p1"),
                ("on_p64_ip", "on_p1"), ("on_p128_ip", "on_p1"), ("on_p64_ip", "on_p64"),
                ("triton_dense_p64", "triton_on_p1"), ("triton_dense_p128", "triton_on_p1"),
                ("triton_off_p64", "triton_on_p1")]


def sync_counts(sync_dir: Path) -> dict:
    """Per window, summed over the server's processes: calls, syncs, syncs per call, top lines."""
    total: dict = {}
    for f in sorted(sync_dir.glob("sync-*.json")):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        for name, w in rec.get("windows", {}).items():
            t = total.setdefault(name, {"calls": 0, "syncs": 0, "where": {}})
            t["calls"] += w["calls"]
            t["syncs"] += w["syncs"]
            for loc, n in w.get("where", {}).items():
                t["where"][loc] = t["where"].get(loc, 0) + n
    for t in total.values():
        t["per_call"] = round(t["syncs"] / t["calls"], 3) if t["calls"] else None
        t["top"] = sorted(t["where"].items(), key=lambda kv: -kv[1])[:4]
    return total


def _retractions(rec: dict) -> str:
    n = rec.get("retractions")
    if n is None:  # not counted: a recording from before the count, or no server log
        return "-"
    return f"{n} ({rec['retracted_reqs']} requests)" if n else "0"


def report(out_dir) -> str:
    out = Path(out_dir)
    path = out / "e2e.json" if (out / "e2e.json").exists() else out / "e2e.json.gz"
    res = load_recording(path)
    lines = [f"# v2 sweep: {len(res)} configurations ({path.name})", ""]
    lines += ["## Configurations (retractions: the server's \"KV cache pool is full\" lines during the measured "
              "pass; a configuration that retracted measured its KV pool)", "",
              "| name | mode | page | backend | extra | acceptance | tok/s | startup s | "
              "compiled after warm-up | retractions | error |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, rec in res.items():
        cfg, s = rec.get("config", {}), rec.get("summary") or {}
        compiled = rec.get("triton_compiled_during_run")
        lines.append(f"| {name} | {cfg.get('mode')} | {cfg.get('page_size')} | {cfg.get('backend')} | "
                     f"{' '.join(cfg.get('extra') or []) or '-'} | {s.get('acceptance_length', '-')} | "
                     f"{s.get('output_throughput', '-')} | {rec.get('startup_s', '-')} | "
                     f"{sum(compiled.values()) if compiled is not None else '-'}"
                     f"{' (' + ', '.join(f'{k} {v}' for k, v in sorted(compiled.items())) + ')' if compiled else ''} | "
                     f"{_retractions(rec)} | {(rec.get('error') or '')[:120]} |")
    lines += ["", "## Greedy outputs (first reference token that differs; near-tie: top-2 margin <= 0.5)", "",
              "| A | reference | compared | identical | divergences | on near-ties | margin max |",
              "|---|---|---|---|---|---|---|"]
    for a, b in OUTPUT_PAIRS:
        if measured(res.get(a)) and measured(res.get(b)):
            g = run_agreement(res[b], res[a])
            lines.append(f"| {a} | {b} | {g['compared']} | {g['exact']} | {len(g['divergences'])} | "
                         f"{g['near_ties']} | {g['margin_max'] if g['margin_max'] is not None else '-'} |")
    lines += ["", "## Acceptance (paired per question; band: 3% or the paired noise at family error 5%)", "",
              "| A | reference | A | reference | A/ref - 1 | band | questions |", "|---|---|---|---|---|---|---|"]
    pairs = [(a, b) for a, b in ACCEPT_PAIRS if measured(res.get(a)) and measured(res.get(b))]
    for a, b in pairs:
        acc_a, acc_b = res[a]["summary"]["acceptance_length"], res[b]["summary"]["acceptance_length"]
        diffs = (parity.paired_diffs(res[a]["spec_counts"], res[b]["spec_counts"])
                 if res[a].get("spec_counts") and res[b].get("spec_counts") else None)
        band = parity.band(acc_b, diffs, tests=len(pairs)) if acc_b else None
        lines.append(f"| {a} | {b} | {acc_a:.3f} | {acc_b:.3f} | {acc_a / acc_b - 1:+.2%} | "
                     f"{band:.3f} | {len(diffs or [])} |" if acc_a and acc_b else f"| {a} | {b} | - | - | - | - | - |")
    lines += ["", "## Host syncs (torch's sync debug mode inside each window, all the server's processes)", "",
              "| name | window | calls | syncs | per call | where (top lines) |", "|---|---|---|---|---|---|"]
    for name in res:
        for window, t in sync_counts(out / "sync" / name).items():
            lines.append(f"| {name} | {window} | {t['calls']} | {t['syncs']} | {t['per_call']} | "
                         f"{', '.join(f'{loc} x{n}' for loc, n in t['top']) or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit("usage: python -m bench.v2_report SWEEP_DIR")
    text = report(argv[0])
    (Path(argv[0]) / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
