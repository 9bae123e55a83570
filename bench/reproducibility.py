"""How well each configuration reproduces itself across end-to-end recordings.

  python -m bench.reproducibility run4/e2e.json run5/e2e.json run6/e2e.json > reproducibility.md

For every configuration measured in all the recordings: its acceptance in each,
and how many outputs of each pair of recordings are identical (same prompts,
greedy). The identity tests of the GPU suite compare two configurations within
one recording; this is the yardstick for them: a configuration that does not
reproduce its own outputs across runs cannot be expected to reproduce another's.
"""

import argparse
from itertools import combinations

from .e2e import agreement, load_recording


def rows(records: list) -> list:
    names = [n for n in records[0] if all(n in r for r in records)]
    out = []
    for name in names:
        recs = [r[name] for r in records]
        if any(rec.get("error") or not rec.get("outputs") for rec in recs):
            continue
        acc = [rec["summary"].get("acceptance_length") for rec in recs]
        pairs = []
        for a, b in combinations(recs, 2):
            g = agreement(a["outputs"], b["outputs"])
            pairs.append((g["exact"], g["compared"]))
        out.append({"name": name, "acceptance": acc, "identical": pairs,
                    "tok_s": [rec["summary"].get("output_throughput") for rec in recs]})
    return out


def main(paths: list) -> None:
    records = [load_recording(p) for p in paths]
    labels = [f"R{i + 1}" for i in range(len(paths))]
    print("Recordings: " + "; ".join(f"{lab} = `{p}`" for lab, p in zip(labels, paths)) + "\n")
    pair_labels = [f"{a} vs {b}" for a, b in combinations(labels, 2)]
    print("| configuration | " + " | ".join(f"acceptance {lab}" for lab in labels) + " | "
          + " | ".join(f"identical {p}" for p in pair_labels) + " | "
          + " | ".join(f"tok/s {lab}" for lab in labels) + " |")
    print("|---" * (1 + 2 * len(labels) + len(pair_labels)) + "|")
    for r in rows(records):
        acc = " | ".join("-" if a is None else f"{a:.4f}" for a in r["acceptance"])
        same = " | ".join(f"{e}/{c}" for e, c in r["identical"])
        tps = " | ".join("-" if t is None else f"{t:.0f}" for t in r["tok_s"])
        print(f"| {r['name']} | {acc} | {same} | {tps} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recordings", nargs="+", help="e2e.json or e2e.json.gz files, two or more")
    main(ap.parse_args().recordings)
