"""The published figures, each from its committed recordings through ``sglang_eagle_paged.bench.stats``.

  python -m bench.figures [--md] [--plot docs/performance.png]

``--md`` prints the tables of ``docs/performance.md`` (between its ``figures:begin`` and
``figures:end`` marks), ``--plot`` draws ratio and interval per model, backend and requests in
flight. ``tests/bench/test_published_figures.py`` checks that the README and ``docs/performance.md``
state every figure as this module renders it from the records, so a figure cannot drift from them.

End-to-end ratios: the per-round ratios of every recording (one server pair each) of the same pair
key, pooled over server pairs with random effects (``ab_pool.pool``), oriented as the question asks
(ours over SGLang's own, page N over page 1). The copy: device times of the micro-benchmarks.
"""

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle_paged.bench import ab_pool, stats

RESULTS = Path(__file__).resolve().parent / "results"
SMOLLM2 = "SmolLM2-135M + the package's head"
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


def _ab(run: str, sub: str, pair: str) -> str:
    return f"{run}/{sub}/{pair}/ab.json"


_R23, _R24, _R25 = "2026-12-02-h200-run23", "2026-12-03-h200-run24", "2026-12-03-h200-run25"
_R26, _R27, _R28 = "2026-12-03-h200-run26", "2026-12-03-h200-run27", "2026-12-03-h200-run28"
_R29, _R30, _R31 = "2026-12-04-h200-run29", "2026-12-04-h200-run30", "2026-12-04-h200-run31"
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
           (_ab("2026-12-02-h200-run22", "ab", _OURS), _ab("2026-12-02-h200-run22", "ab-p64more", _OURS)),
           ("on_p64", "off_p64", 128, 128, 128), True),
    Figure("ours / SGLang's own", LARGE, "fa3", "0.5.17", "64", 32, "20",
           (_ab("2026-12-02-h200-run20", "ab-large", _OURS),), ("on_p64", "off_p64", 64, 32, 32), True),
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
    Figure("page N / page 1", TESTBED, _FUSED, "0.5.17", "64 / 1", 64, "29-31",
           (_ab(_R29, "ab-pp", "on_p1__on_p64_fx"), _ab(_R30, "ab-pp2", _PAGES), _ab(_R31, "ab-pp3", _PAGES)),
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


def row(fig: Figure) -> dict:
    """The figure's pooled ratio, interval, verdict and heterogeneity, from its recordings."""
    paths = [RESULTS / p for p in fig.recordings]
    groups = {}
    for (a, b, *rest), recs in ab_pool.pair_rounds(paths).items():
        name = (SAME_CONFIGURATION.get(a, a), SAME_CONFIGURATION.get(b, b), *rest)
        groups.setdefault(name, []).extend(recs)
    pooled = {(r["A"], r["B"], r["tokens"], r["parallel"], r["in_flight"]): r for r in ab_pool.pool(groups)}
    s = _oriented(pooled[fig.key]["pooled"], fig.invert)
    return {**s, "text": text(s)}


def text(s: dict) -> str:
    """How a ratio is written: 1.08x (1.04x-1.12x)."""
    high = f"{s['high']:.2f}x" if s["high"] else "unbounded"
    return f"{s['ratio']:.2f}x ({s['low']:.2f}x-{high})"


def _verdict(s: dict, invert_words: tuple) -> str:
    """The verdict in the question's words (faster, slower, level within +-3%, not resolved)."""
    v = s["verdict"]
    return {"B >= A": invert_words[0], "B < A": invert_words[1]}.get(v, v)


def table() -> str:
    lines = []
    for question, words in QUESTIONS:
        lines += [f"**{question}** (page size 64 unless named; ratio of output throughput, 95% interval over "
                  "server pairs)", "",
                  "| model | backend | SGLang | pages | in flight | runs | server pairs | rounds | ratio (95%) | "
                  "verdict | heterogeneity |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for fig in (f for f in FIGURES if f.question == question):
            s = row(fig)
            lines.append(f"| {fig.model} | {fig.backend} | {fig.sglang} | {fig.pages} | {fig.in_flight} | {fig.runs} "
                         f"| {s['pairs']} | {s['rounds']} | {s['text']} | {_verdict(s, words)} | "
                         f"{ab_pool.heterogeneity(s)} |")
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


def plot(path: str) -> str | None:
    """Ratio with its interval per figure, one panel per question; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    questions = [q for q, _ in QUESTIONS]
    counts = [sum(f.question == q for f in FIGURES) for q in questions]
    fig, axes = plt.subplots(len(questions), 1, figsize=(9, 1.2 + 0.42 * sum(counts) + 0.6 * len(questions)),
                             gridspec_kw={"height_ratios": counts})
    for ax, question in zip(axes, questions):
        figs = [f for f in FIGURES if f.question == question]
        for y, f in enumerate(figs):
            s = row(f)
            high = s["high"] or s["ratio"] * 2
            ax.errorbar([s["ratio"]], [y], xerr=[[s["ratio"] - s["low"]], [high - s["ratio"]]], fmt="o", capsize=4,
                        color="tab:blue" if s["low"] > 1 or high < 1 else "tab:gray")
        ax.set_yticks(range(len(figs)))
        ax.set_yticklabels([f"{f.model.split(' +')[0].split(',')[0]}, p{f.pages}, {f.in_flight} in flight, "
                            f"{f.backend}" for f in figs], fontsize=7)
        ax.axvline(1.0, color="black", lw=0.8)
        ax.axvspan(1 - stats.MARGIN, 1 + stats.MARGIN, color="tab:green", alpha=0.12, label="+-3% (equivalence)")
        ax.set_title(f"{question} (95% over server pairs)", fontsize=9)
        ax.set_xlabel("throughput ratio")
        ax.invert_yaxis()
        if ax is axes[0]:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
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
