"""The published figures, each from its committed recordings through ``sglang_eagle_paged.bench.stats``.

  python -m bench.figures [--md] [--plot docs/performance.png]

``--md`` prints the tables of ``docs/performance.md`` (between its ``figures:begin`` and
``figures:end`` marks), ``--plot`` draws ratio and interval per model, backend and requests in
flight. ``tests/bench/test_published_figures.py`` checks that the README and ``docs/performance.md``
state every figure as this module renders it from the records, so a figure cannot drift from them.

End-to-end ratios: the per-round ratios of every recording (one server pair each) of the same pair
key, pooled over server pairs with random effects and the modified Hartung-Knapp interval
(``ab_pool.pool``, ``stats.pooled``), oriented as the question asks (ours over SGLang's own, page N
over page 1). A figure of one server pair is its rounds' interval and is stated as such
(:func:`stated`), with no verdict. Every recording with rounds under ``bench/results/`` is pooled by a
figure or named in :data:`EXCLUDED` with why (:func:`unaccounted` lists any other, and the test fails
on it). The copy: device times of the micro-benchmarks.
"""

import argparse
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle_paged.bench import ab_pool, stats

RESULTS = Path(__file__).resolve().parent / "results"
SMOLLM2 = "SmolLM2-135M + run 21's head"  # every SmolLM2 A/B ran it; the package's head is run 28's since
TESTBED = "testbed 16M pair"
LARGE = "8B-shaped, random weights"


@dataclass(frozen=True)
class Figure:
    question: str        # "ours / SGLang's own" or "page N / page 1"
    model: str
    backend: str
    sglang: str
    pages: str           # what is compared, e.g. "64" or "64 / 1"
    in_flight: int
    runs: str
    recordings: tuple    # ab.json paths under bench/results/
    key: tuple           # (A, B, tokens, parallel, in flight): the pooled row to take
    invert: bool         # the question's ratio is A/B (ours is side A)


@dataclass(frozen=True)
class Exclusion:
    label: str           # how the table of recordings not pooled names them
    paths: tuple         # folders under bench/results/: every ab.json below each is left out
    reason: str          # why, as the run's README states it (its line starts with NOT_POOLED)


NOT_POOLED = "Not pooled in the published figures"


def _ab(run: str, sub: str, pair: str) -> str:
    return f"{run}/{sub}/{pair}/ab.json"


_R23, _R24, _R25 = "2026-12-02-h200-run23", "2026-12-03-h200-run24", "2026-12-03-h200-run25"
_R26, _R27, _R28 = "2026-12-03-h200-run26", "2026-12-03-h200-run27", "2026-12-03-h200-run28"
_R29, _R30, _R31 = "2026-12-04-h200-run29", "2026-12-04-h200-run30", "2026-12-04-h200-run31"
_R19, _R20, _R21 = "2026-12-02-h200-run19", "2026-12-02-h200-run20", "2026-12-02-h200-run21"
_R32 = "2026-12-06-h100-run32"
_OURS = "on_p64__off_p64"
_PAGES = "on_p1__on_p64"
_FUSED = "fa3, fused metadata"  # SGLANG_EAGLE_PAGED_FA3_EXPAND=fused: v2's default from run 29 on
_IN_PLACE = "fa3 in place / fused copy"
_DENSE = "dense draft layout / per-branch layout"
_FIXED_POOL = "triton, fixed pool"  # AB_KV=99968: the per-branch reserve cannot hold 64 requests there
# Names of one configuration: ``_fx`` named the fused metadata while it was opt-in (run 29); from
# run 30 on it is v2's default and ``on_pN`` runs it. Applied only within a figure's own recordings,
# so run 22's ``on_p64`` (before the fused metadata) never pools with run 29's ``on_p64_fx``.
SAME_CONFIGURATION = {"on_p64_fx": "on_p64", "on_p128_fx": "on_p128"}

FIGURES = (
    Figure("ours / SGLang's own", SMOLLM2, "fa3", "0.5.17", "64", 16, "23-28",
           tuple(_ab(r, s, _OURS) for r, s in ((_R23, "ab-smollm2"), (_R24, "ab-smollm2-p16"), (_R25, "ab-smollm2-p16c"),
                                                (_R27, "ab-smollm2-p16d"), (_R27, "ab-smollm2-p16e"),
                                                (_R28, "ab-smollm2-p16f"))),
           ("on_p64", "off_p64", 128, 16, 16), True),
    Figure("ours / SGLang's own", SMOLLM2, "fa3", "0.5.17", "64", 32, "23-24",
           tuple(_ab(r, s, _OURS) for r, s in ((_R23, "ab-smollm2"), (_R23, "ab-smollm2-p64"), (_R24, "ab-smollm2-p64b"))),
           ("on_p64", "off_p64", 128, 64, 32), True),
    Figure("ours / SGLang's own", SMOLLM2, "fa3", "0.5.17", "64", 64, "25-26",
           tuple(_ab(r, s, _OURS) for r, s in ((_R25, "ab-smollm2-q64"), (_R26, "ab-smollm2-q64b"),
                                                (_R26, "ab-smollm2-q64c"))),
           ("on_p64", "off_p64", 128, 64, 64), True),
    Figure("ours / SGLang's own", TESTBED, "fa3", "0.5.17", "64", 64, "22",
           (_ab("2026-12-02-h200-run22", "ab", _OURS), _ab("2026-12-02-h200-run22", "ab-p64more", _OURS)),
           ("on_p64", "off_p64", 128, 64, 64), True),
    Figure("ours / SGLang's own", TESTBED, "fa3", "0.5.17", "64", 128, "22",
           (_ab("2026-12-02-h200-run22", "ab", _OURS),), ("on_p64", "off_p64", 128, 128, 128), True),
    Figure("ours / SGLang's own", LARGE, "fa3", "0.5.17", "64", 32, "20",
           (_ab("2026-12-02-h200-run20", "ab-large", _OURS),), ("on_p64", "off_p64", 64, 32, 32), True),
    *(Figure("page N / page 1", SMOLLM2, "fa3", "0.5.17", "64 / 1", n, "23",
             (_ab("2026-12-02-h200-run23", "ab-smollm2", _PAGES),), ("on_p1", "on_p64", 128, parallel, n), False)
      for parallel, n in ((16, 16), (64, 32))),
    Figure("page N / page 1", SMOLLM2, "fa3", "0.5.17", "64 / 1", 64, "26-28",
           tuple(_ab(r, s, _PAGES) for r, s in ((_R26, "ab-smollm2-p1q64"), (_R27, "ab-smollm2-p1q64b"),
                                                 (_R28, "ab-smollm2-p1q64c"))),
           ("on_p1", "on_p64", 128, 64, 64), False),
    Figure("page N / page 1", TESTBED, "fa3", "0.5.17", "64 / 1", 64, "22",
           (_ab("2026-12-02-h200-run22", "ab-pages", _PAGES),), ("on_p1", "on_p64", 128, 64, 64), False),
    Figure("page N / page 1", TESTBED, "fa3", "0.5.17", "128 / 1", 64, "22",
           (_ab("2026-12-02-h200-run22", "ab-pages", "on_p1__on_p128"),), ("on_p1", "on_p128", 128, 64, 64), False),
    Figure("ours / SGLang's own", TESTBED, _FUSED, "0.5.17", "64", 64, "29",
           (_ab(_R29, "ab-pp", "off_p64__on_p64_fx"),), ("off_p64", "on_p64", 128, 64, 64), False),
    # SGLang 0.5.23 (what `pip install sglang` gives), on an H100: the only run on another card so far
    Figure("ours / SGLang's own", TESTBED, _FUSED + ", H100", "0.5.23", "64", 64, "32",
           (_ab(_R32, "ab-v3", _OURS),), ("on_p64", "off_p64", 128, 64, 64), True),
    Figure("page N / page 1", TESTBED, _FUSED, "0.5.17", "64 / 1", 64, "29-31",
           (_ab(_R29, "ab-pp", "on_p1__on_p64_fx"), _ab(_R30, "ab-pp2", _PAGES), _ab(_R31, "ab-pp3", _PAGES),
            _ab(_R31, "ab-pp4", _PAGES)),
           ("on_p1", "on_p64", 128, 64, 64), False),
    Figure("page N / page 1", TESTBED, _FUSED, "0.5.17", "128 / 1", 64, "31",
           (_ab(_R31, "ab-pp4", "on_p1__on_p128"),), ("on_p1", "on_p128", 128, 64, 64), False),
    *(Figure(_IN_PLACE, TESTBED, _FUSED, "0.5.17", "64", n, "29",
             tuple(_ab(_R29, s, "on_p64_fx__on_p64_ip") for s in ("ab-ip-call5", "ab-ip-call7")),
             ("on_p64", "on_p64_ip", 128, n, n), False) for n in (64, 128)),
    Figure(_DENSE, TESTBED, _FIXED_POOL + " / SGLang's own", "0.5.17", "64", 64, "31",
           (_ab(_R31, "ab-dense", "triton_off_p64__triton_dense_p64"),),
           ("triton_off_p64", "triton_dense_p64", 128, 64, 64), False),
    Figure(_DENSE, TESTBED, _FIXED_POOL + " / ours", "0.5.17", "64", 64, "31",
           (_ab(_R31, "ab-dense", "triton_on_p64__triton_dense_p64"),),
           ("triton_on_p64", "triton_dense_p64", 128, 64, 64), False),
)
def _left_out(run: str, sub: str, reason: str) -> Exclusion:
    """One folder of a run left out: ``run 20 `ab/``` in the table."""
    return Exclusion(f"run {run.rsplit('run', 1)[1]} `{sub}/`", (f"{run}/{sub}",), reason)


# Every recording with rounds that no figure pools, and why: the runs' READMEs say the same in a line
# that starts with NOT_POOLED (the test reads both, and fails on a recording in neither).
EXCLUDED = (
    Exclusion("runs 9-18, every A/B", tuple(f"2026-11-30-h200-run{n}" for n in range(9, 14))
              + tuple(f"2026-12-01-h200-run{n}" for n in range(14, 19)),
              "the v1 worker (SGLang 0.5.12.post1); these figures are the v2 worker's (0.5.17). Their A/Bs are "
              "history in docs/gpu_runs.md, whose pooled figures took every round as one sample"),
    _left_out(_R19, "ab_testbed", "SGLang 0.5.17 reset `--max-running-requests` to 48 for speculative decoding: "
                                  "at most 48 requests in flight, not the 64 and 128 asked"),
    _left_out(_R19, "ab_large8b", "the two KV pools differed (ours 91,392 slots, SGLang's 131,072): ours retracted "
                                  "344 times, SGLang's never"),
    _left_out(_R20, "ab", "KV-bound: pools of 131,072 slots did not hold page 64's reserve for 64 or 128 requests, "
                          "both sides retracted about 1,250 times"),
    _left_out(_R20, "ab-pages", "KV-bound: page 64's server retracted 285 times, page 1's never"),
    _left_out(_R20, "ab-fake", "`fake` (no copy, wrong drafts) against ours: a control no figure asks about; "
                               "KV-bound too (149 and 181 retractions)"),
    _left_out(_R21, "ab-pages128", "one round of eight, page 128's server retracting 486 times: the retraction "
                                   "example of docs/configuration.md"),
)
# Each question of the tables and the plot, with what B above A means in its words.
QUESTIONS = (("ours / SGLang's own", ("ours faster", "ours slower")),
             ("page N / page 1", ("page N faster", "page N slower")),
             (_IN_PLACE, ("in place faster", "in place slower")),
             (_DENSE, ("dense faster", "dense slower")))


def _oriented(s: dict, invert: bool) -> dict:
    """The pooled statistics as the question's ratio (A/B where ours is A), verdict recomputed."""
    if not invert:
        return s
    ratio, low, high = 1 / s["ratio"], 1 / s["high"] if s["high"] else None, 1 / s["low"]
    return {**s, "ratio": ratio, "low": low, "high": high, "verdict": stats.verdict(low, high)}


def _same(key: tuple) -> tuple:
    a, b, *rest = key
    return (SAME_CONFIGURATION.get(a, a), SAME_CONFIGURATION.get(b, b), *rest)


def _rounds(fig: Figure) -> list:
    """[(recording, per-round ratios)] of the figure's key, one per server pair; every recording of
    the figure must give rounds there (a path or key that gives none is an error, not a smaller pool)."""
    recs = [rec for key, got in ab_pool.pair_rounds([RESULTS / p for p in fig.recordings]).items()
            if _same(key) == fig.key for rec in got]
    found = {Path(p).relative_to(RESULTS).as_posix() for p, _ in recs}
    if found != set(fig.recordings):
        raise ValueError(f"{fig.key}: no rounds in {sorted(set(fig.recordings) - found)}")
    return recs


def row(fig: Figure) -> dict:
    """The figure's pooled ratio, interval, verdict and heterogeneity, from its recordings."""
    s = _oriented(stats.pooled([ratios for _, ratios in _rounds(fig)]), fig.invert)
    return {**s, "text": text(s), "stated": stated(s)}


def per_pair(fig: Figure) -> list:
    """Each server pair of a figure alone: its rounds' interval, oriented as the question asks."""
    return [{**(s := _oriented(stats.pooled([ratios]), fig.invert)), "text": text(s), "stated": stated(s)}
            for _, ratios in _rounds(fig)]


def text(s: dict) -> str:
    """How a ratio is written: 1.08x (1.04x-1.12x)."""
    high = f"{s['high']:.2f}x" if s["high"] else "unbounded"
    return f"{s['ratio']:.2f}x ({s['low']:.2f}x-{high})"


def stated(s: dict) -> str:
    """How the prose writes a figure: one server pair's says so with its rounds inside the parentheses
    (1.29x (1.12x-1.48x; one server pair, 14 rounds)), for its interval is over that pair's rounds
    alone and says nothing about a second pair of servers."""
    if s["pairs"] >= 2:
        return text(s)
    return f"{text(s)[:-1]}; one server pair, {s['rounds']} rounds)"


def recordings_with_rounds() -> list:
    """[(recording under bench/results/, pair key)] of every ab.json there whose key has rounds."""
    return [(path.relative_to(RESULTS).as_posix(), key) for path in sorted(RESULTS.rglob("ab.json"))
            for key in ab_pool.pair_rounds([path])]


def exclusion(recording: str) -> Exclusion | None:
    """The :data:`EXCLUDED` entry whose folder holds ``recording``, if any."""
    for e in EXCLUDED:
        if any(recording.startswith(p + "/") for p in e.paths):
            return e
    return None


def unaccounted() -> list:
    """Recordings with rounds (and their keys) that no figure pools and no exclusion names: each is
    a measurement silently dropped from the published figures."""
    pooled = {(p, f.key) for f in FIGURES for p in f.recordings}
    return [(p, key) for p, key in recordings_with_rounds() if (p, _same(key)) not in pooled and not exclusion(p)]


def floored() -> tuple:
    """(intervals that the floor at DerSimonian-Laird's variance widened, intervals over two or more
    server pairs) among the figures."""
    multi = [s for s in map(row, FIGURES) if s["pairs"] >= 2]
    return sum(s["floored"] for s in multi), len(multi)


def ab_acceptance(model: str) -> tuple:
    """(lowest, highest) acceptance either side of a model's figures measured, over their keys."""
    seen = []
    for fig in (f for f in FIGURES if f.model == model):
        for p in fig.recordings:
            rec = json.loads((RESULTS / p).read_text())
            for pair in rec["pairs"].values():
                for parallel, s in pair["summary"].items():
                    key = ab_pool.pair_key(pair["A"]["name"], pair["B"]["name"], rec.get("max_new_tokens"),
                                           int(parallel), rec.get("num_questions"))
                    if _same(key) == fig.key:
                        seen += [s["acceptance_A"], s["acceptance_B"]]
    return min(seen), max(seen)


# The plugin's start-up note on SGLang's reserve (sglang_eagle_paged/adapters/v2/kv_reserve_note.py writes it)
_RESERVE_NOTE = re.compile(r"SGLang keeps ([\d,]+) KV slots free per running request at each decode step.*?"
                           r"this pool's ([\d,]+) slots hold that for (\d+) requests")


def dense_pool() -> dict:
    """The dense layout's fixed pool (run 31): its slots, SGLang's per-branch reserve per request and
    how many requests the pool holds it for (the plugin's note in the per-branch server's log), the
    requests in flight and the retractions of SGLang's own side and the dense side."""
    (fig,) = [f for f in FIGURES if f.question == _DENSE and f.key[0] == "triton_on_p64"]
    rec_path = RESULTS / fig.recordings[0]
    (pair,) = json.loads(rec_path.read_text())["pairs"].values()
    log = (rec_path.parent / "logs" / f"pair0_A_{pair['A']['name']}.log").read_text(errors="replace")
    reserve, pool, held = _RESERVE_NOTE.search(log).groups()
    (own,) = [f for f in FIGURES if f.question == _DENSE and f.key[0] == "triton_off_p64"]
    (own_pair,) = json.loads((RESULTS / own.recordings[0]).read_text())["pairs"].values()
    summary = own_pair["summary"][str(own.key[3])]
    return {"pool": int(pool.replace(",", "")), "pool_recorded": own_pair["kv_pool_tokens"],
            "reserve": int(reserve.replace(",", "")), "held": int(held), "in_flight": own.in_flight,
            "retractions": (summary["retractions_A"], summary["retractions_B"])}


def _verdict(s: dict, invert_words: tuple) -> str:
    """The verdict in the question's words (faster, slower, level within +-3%, not resolved); none for
    one server pair, whose interval cannot allow for the next pair's difference."""
    if s["pairs"] < 2:
        return "none (one server pair)"
    v = s["verdict"]
    return {"B >= A": invert_words[0], "B < A": invert_words[1]}.get(v, v)


def table() -> str:
    lines = []
    for question, words in QUESTIONS:
        lines += [f"**{question}** (page size 64 unless named; ratio of output throughput, 95% interval over "
                  "server pairs, or over the rounds where one pair)", "",
                  "| model | backend | SGLang | pages | in flight | runs | server pairs | rounds | ratio (95%) | "
                  "verdict | heterogeneity |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for fig in (f for f in FIGURES if f.question == question):
            s = row(fig)
            lines.append(f"| {fig.model} | {fig.backend} | {fig.sglang} | {fig.pages} | {fig.in_flight} | {fig.runs} "
                         f"| {s['pairs']} | {s['rounds']} | {s['text']} | {_verdict(s, words)} | "
                         f"{ab_pool.heterogeneity(s)} |")
        lines.append("")
    lines += ["**Recordings not pooled** (every `ab.json` under `bench/results/` with rounds is pooled above or "
              "named here; each run's README says why too)", "", "| recordings | why |", "|---|---|"]
    lines += [f"| {e.label} | {e.reason} |" for e in EXCLUDED]
    lines.append("")
    return "\n".join(lines)


def copy_v2(run: str = "2026-12-02-h200-run20", page: int = 64, batch: int = 64) -> dict:
    """The v2 duplication alone (``prepare_v2.json``): GPU milliseconds, ours and SGLang's, and the
    pool's layer count (the benchmark's pool; a server's copy goes to the draft's one-layer pool)."""
    rec = json.loads((RESULTS / run / "prepare" / "prepare_v2.json").read_text())
    (r,) = [r for r in rec["rows"] if r["page_size"] == page and r["batch"] == batch]
    return {"layers": rec["layers"], "ours_ms": round(r["ours"]["gpu_ms"]["median"], 2),
            "sglang_ms": round(r["sglang"]["gpu_ms"]["median"], 1)}


def copy_v1(runs=("2026-11-30-h200-run3", "2026-11-30-h200-run9"), small_pairs: int = 100) -> dict:
    """The v1 copy kernel against SGLang's ``move_kv_cache`` (device time): the speed-up over the
    shapes with at least ``small_pairs`` pairs, and over the smallest shapes (fewer pairs)."""
    rows = [r for run in runs for r in json.loads((RESULTS / run / "kernels" / "kernels.json").read_text())["copy"]]
    big = [r["speedup"] for r in rows if r["pairs"] >= small_pairs]
    small = [r["speedup"] for r in rows if r["pairs"] < small_pairs]
    return {"large": (round(min(big)), round(max(big))), "small": (round(min(small), 1), round(max(small), 1)),
            "small_pairs": (min(r["pairs"] for r in rows if r["pairs"] < small_pairs),
                            max(r["pairs"] for r in rows if r["pairs"] < small_pairs))}


# The plot's three kinds of row: what the colour says about the interval
_RESOLVED, _OPEN, _ONE = "tab:blue", "tab:gray", "tab:orange"


def _label(f: Figure, s: dict) -> str:
    pairs = f"{s['pairs']} server pairs" if s["pairs"] >= 2 else "one server pair"
    return (f"{f.model.split(' +')[0].split(',')[0]}, p{f.pages}, {f.in_flight} in flight, {f.backend} "
            f"[{pairs}, {s['rounds']} rounds]")


def _title(question: str, rows: list) -> str:
    one = [s["pairs"] < 2 for _, s in rows]
    if all(one):
        return f"{question}: 95% interval over one server pair's rounds"
    if any(one):
        return f"{question}: 95% interval over server pairs (orange: over one pair's rounds)"
    return f"{question}: 95% interval over server pairs"


def plot(path: str) -> str | None:
    """Ratio with its interval per figure, one panel per question, on one shared ratio scale; None
    without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError:
        return None
    panels = [(q, [(f, row(f)) for f in FIGURES if f.question == q]) for q, _ in QUESTIONS]
    lows = [s["low"] for _, rows in panels for _, s in rows]
    highs = [s["high"] for _, rows in panels for _, s in rows if s["high"]]
    # one scale for every panel, to the next 0.05 beyond the widest interval
    x_lo = math.floor(20 * min(lows + [1 - stats.MARGIN]) - 1) / 20
    x_hi = math.ceil(20 * max(highs + [1 + stats.MARGIN]) + 1) / 20
    counts = [len(rows) for _, rows in panels]
    fig, axes = plt.subplots(len(panels), 1, sharex=True, figsize=(12, 1.6 + 0.36 * sum(counts) + 0.75 * len(panels)),
                             gridspec_kw={"height_ratios": counts})
    for ax, (question, rows) in zip(axes, panels):
        for y, (f, s) in enumerate(rows):
            high = s["high"] or x_hi  # unbounded: to the panel's edge
            colour = _ONE if s["pairs"] < 2 else _RESOLVED if s["low"] > 1 or high < 1 else _OPEN
            ax.errorbar([s["ratio"]], [y], xerr=[[s["ratio"] - s["low"]], [high - s["ratio"]]], fmt="o", capsize=4,
                        color=colour, mfc="white" if s["pairs"] < 2 else colour)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([_label(f, s) for f, s in rows], fontsize=7)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.axvline(1.0, color="black", lw=0.8)
        ax.axvspan(1 - stats.MARGIN, 1 + stats.MARGIN, color="tab:green", alpha=0.12)
        ax.set_title(_title(question, rows), fontsize=9)
        ax.tick_params(labelbottom=True, labelsize=8)
        ax.xaxis.set_minor_locator(matplotlib.ticker.MultipleLocator(0.05))
        ax.grid(axis="x", which="both", color="0.9", lw=0.5)
        ax.set_axisbelow(True)
    axes[-1].set_xlim(x_lo, x_hi)
    axes[-1].set_xlabel(f"throughput ratio, the question's first over its second (every panel {x_lo:.2f}-{x_hi:.2f})")
    legend = [Line2D([], [], color=_RESOLVED, marker="o", label="two or more server pairs, interval on one side of 1"),
              Line2D([], [], color=_OPEN, marker="o", label="two or more server pairs, interval across 1"),
              Line2D([], [], color=_ONE, marker="o", mfc="white",
                     label="one server pair: its rounds' interval, no verdict"),
              Patch(color="tab:green", alpha=0.12, label="+-3%: 'level' only where a whole interval lies inside")]
    fig.legend(handles=legend, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--md", action="store_true", help="print the tables of docs/performance.md")
    ap.add_argument("--plot", help="draw the ratios to this PNG")
    a = ap.parse_args(argv)
    if a.plot:
        print(plot(a.plot) or "no matplotlib: no plot")
    if a.md or not a.plot:
        print(table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
