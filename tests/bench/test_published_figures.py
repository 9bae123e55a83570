"""Every figure the README and docs/performance.md state, derived from the committed recordings in
bench/results/ by the statistics module (through bench/figures.py), and found there as derived: every
recording with rounds pooled or its exclusion stated, every one-pair figure saying so, the interval's
method named as it is computed."""

import json
import re
from pathlib import Path

import pytest

from bench import figures
from sglang_eagle_paged.bench import ab_pool, server_log, stats

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PERF = (ROOT / "docs" / "performance.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()  # the README's KV-memory details
# a ratio with its interval as the prose writes it: 1.08x (1.04x-1.12x), or with a qualifier after "; "
RATIO = re.compile(r"(\d+\.\d\dx \(\d+\.\d\dx-(?:\d+\.\d\dx|unbounded))(\)|; [^)]*\))")
VERDICT_WORDS = re.compile(r"\b(faster|slower|level|resolved)\b", re.I)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _prose(text: str) -> str:
    """A page less its generated figures block (checked whole against figures.table())."""
    if "<!-- figures:begin -->" not in text:
        return text
    return text[:text.index("<!-- figures:begin -->")] + text[text.index("<!-- figures:end -->"):]


def _performance_section(text: str) -> str:
    return text[text.index("## Performance\n"):text.index("## Configuration\n")]


@pytest.fixture(scope="module")
def rows():
    if not all((figures.RESULTS / p).exists() for f in figures.FIGURES for p in f.recordings):
        pytest.skip("results moved out of the tree (a device carry)")
    # keyed by what tells the rows apart; a release other than 0.5.17 adds itself to the key
    rows = {(f.model, f.question, f.pages, f.in_flight) + ((f.backend,) if f.backend != "fa3" else ())
            + ((f.sglang,) if f.sglang != "0.5.17" else ()): figures.row(f) for f in figures.FIGURES}
    assert len(rows) == len(figures.FIGURES)
    return rows


def test_the_performance_page_tables_are_what_the_records_give(rows):
    block = re.search(r"<!-- figures:begin -->\n(.*)<!-- figures:end -->", PERF, re.S).group(1)
    assert block == figures.table()


def test_every_readme_end_to_end_figure_is_derived_from_its_records(rows):
    text = _performance_section(README)
    smol, testbed, large = figures.SMOLLM2, figures.TESTBED, figures.LARGE
    ours = lambda m, i: rows[(m, "ours / SGLang's own", "64", i)]  # noqa: E731
    page = lambda m, p, i: rows[(m, "page N / page 1", p, i)]  # noqa: E731
    fused = lambda i: rows[(testbed, "ours / SGLang's own", "64", i, figures._FUSED)]  # noqa: E731
    fused_pages = rows[(testbed, "page N / page 1", "64 / 1", 64, figures._FUSED)]
    fused_p128 = rows[(testbed, "page N / page 1", "128 / 1", 64, figures._FUSED)]
    in_place = rows[(testbed, figures._IN_PLACE, "64", 64, figures._FUSED)]
    assert fused_pages["verdict"].startswith("not resolved") and in_place["verdict"].startswith("not resolved")
    (in_place_64, in_place_64b) = figures.per_pair(
        next(f for f in figures.FIGURES if f.question == figures._IN_PLACE and f.in_flight == 64))
    expected = {
        f"**{ours(smol, 16)['text']} SGLang's own throughput with 16 requests in flight**": ours(smol, 16),
        f"**{ours(smol, 64)['text']} with 64** (123 rounds on 3)": ours(smol, 64),
        f"(Q 7.6 on 2, p 0.02) and {ours(smol, 32)['text']} is not resolved": ours(smol, 32),
        f"with 64 in flight: {page(smol, '64 / 1', 64)['text']} (58 rounds on 3 server pairs), not resolved":
            page(smol, "64 / 1", 64),
        f"is {ours(testbed, 64)['text']} at parallel 64": ours(testbed, 64),
        f"it served {ours(large, 32)['stated']}, a run cut short": ours(large, 32),
        f"Page 64 served {page(testbed, '64 / 1', 64)['stated']}": page(testbed, "64 / 1", 64),
        f"page 128 {page(testbed, '128 / 1', 64)['stated']} of page 1": page(testbed, "128 / 1", 64),
        f"ours served {fused(64)['stated']} SGLang's own throughput in run 29": fused(64),
        f"Page 64 against page 1 is {fused_pages['text']} (64 rounds on 4 server pairs, runs 29-31), not resolved":
            fused_pages,
        f"Page 128 against page 1: {fused_p128['stated']}, run 31": fused_p128,
        f"measured {in_place['text']} of the default over its 2 server pairs (36 rounds)": in_place,
        f"Each pair alone: {in_place_64['stated']} and {in_place_64b['stated']}.": in_place_64,
    }
    flat = _flat(text)
    for sentence in expected:
        assert _flat(sentence) in flat, sentence
    # the numbers the issue named, as the records give them over server pairs
    assert ours(smol, 16)["text"] == "1.08x (1.04x-1.12x)" and ours(smol, 16)["rounds"] == 182
    assert ours(smol, 64)["text"] == "1.19x (1.09x-1.29x)" and ours(smol, 64)["pairs"] == 3
    q32 = ours(smol, 32)
    assert (q32["text"], round(q32["q"], 1), q32["df"], round(q32["p"], 2)) == ("1.16x (0.96x-1.41x)", 7.6, 2, 0.02)
    assert ours(large, 32)["rounds"] == 4 and ours(large, 32)["pairs"] == 1
    assert page(smol, "64 / 1", 64)["verdict"].startswith("not resolved")
    # run 31's second page-64 pair (12 complete rounds) is pooled: four server pairs, as the issue recomputed
    assert (fused_pages["text"], fused_pages["pairs"], fused_pages["rounds"]) == ("0.99x (0.90x-1.08x)", 4, 64)
    assert (round(fused_pages["q"], 1), fused_pages["df"]) == (7.7, 3)


def test_the_copy_figures_come_from_the_micro_benchmark_records():
    text = " ".join(_performance_section(README).split())
    v2, v1 = figures.copy_v2(), figures.copy_v1()
    assert (v2["ours_ms"], v2["sglang_ms"], v2["layers"]) == (0.56, 40.5, 32)
    assert (f"{v2['ours_ms']} ms of GPU time where SGLang's takes {v2['sglang_ms']} ms, measured on a "
            f"**{v2['layers']}-layer** pool") in text
    assert v1 == {"large": (63, 259), "small": (1.1, 3.2), "small_pairs": (9, 91)}
    assert "63x-259x faster than SGLang's at 100 pairs or more, and 1.1x-3.2x at the smallest shapes (9-91 pairs)" \
        in text
    perf = " ".join(PERF.split())
    assert "0.56 ms of GPU time against SGLang's 40.5 ms, on a **32-layer** pool" in perf
    assert "63x-259x SGLang's `move_kv_cache` at 100 pairs or more, but only 1.1x-3.2x" in perf


def test_the_retraction_example_is_its_one_recorded_round():
    path = figures.RESULTS / "2026-12-02-h200-run21/ab-pages128/on_p1__on_p128/ab.json"
    if not path.exists():
        pytest.skip("results moved out of the tree (a device carry)")
    ((_, ratios),) = ab_pool.pair_rounds([path])[("on_p1", "on_p128", 128, 64, 64)]
    s = stats.ratio_interval(ratios)
    assert s["rounds"] == 1 and s["high"] is None and f"{s['ratio']:.2f}x" == "0.37x"
    assert "0.37x of page 1's throughput in the same pool: run 21, one round" in " ".join(CONFIGURATION.split())
    log = path.parent / "logs" / "pair0_B_on_p128.log"  # the page-128 server's retractions, its whole log
    retracted = server_log.retractions(log.read_text(errors="replace"))["retract"]
    assert f"a page-128 server that retracted {retracted} times" in " ".join(CONFIGURATION.split())


def test_level_is_said_only_where_equivalence_is_shown(rows):
    # no row shows equivalence today, so "level" appears only where the pages define it
    assert not any(r["verdict"].startswith("level") for r in rows.values())
    for name, text in (("README", _performance_section(README)), ("performance.md", PERF)):
        for para in text.split("\n\n"):
            if re.search(r"\blevel\b", para, re.I):
                assert "+-3%" in para and "only" in para, (name, para)


def test_the_plot_is_drawn_from_the_records(rows, tmp_path):
    pytest.importorskip("matplotlib")
    assert figures.plot(str(tmp_path / "p.png")) and (tmp_path / "p.png").stat().st_size > 10_000
    assert (ROOT / "docs" / "performance.png").stat().st_size > 10_000 and "](docs/performance.png)" in README


def test_speculation_against_none_on_the_135m_target_is_run_21s_single_passes():
    from bench.e2e import load_recording

    path = figures.RESULTS / "2026-12-02-h200-run21/smollm2/bench/e2e.json.gz"
    if not path.exists():
        pytest.skip("results moved out of the tree (a device carry)")
    rec = load_recording(path)
    eagle, none = (round(rec[k]["summary"]["output_throughput"]) for k in ("on_p1", "nospec_p1"))
    assert f"({eagle:,} tok/s with EAGLE against {none:,} without)" in " ".join(README.split())


def test_the_dense_layout_figure_in_the_readme_is_derived_from_its_records(rows):
    """The opt-in dense layout's fixed-pool figure (README: Page size and KV memory), and that its pair
    was KV-bound on SGLang's side only: the pool was chosen too small for SGLang's reserve, the figure is
    about what the smaller reserve buys there, and each page says so."""
    dense = rows[(figures.TESTBED, figures._DENSE, "64", 64, figures._FIXED_POOL + " / SGLang's own")]
    pool = figures.dense_pool()
    # the plugin's note in the per-branch server's log, the recorded pools and the reserve agree
    assert pool["pool_recorded"] == {"A": pool["pool"], "B": pool["pool"]}
    assert pool["held"] == pool["pool"] // pool["reserve"] < pool["in_flight"]
    assert pool["retractions"] == (246, 0)
    flat = _flat(README)
    assert (f"chose a pool of {pool['pool']:,} slots too small for SGLang's reserve on purpose: it holds the "
            f"per-branch reserve for {pool['held']} of the {pool['in_flight']} requests in flight") in flat
    assert (f"dense layout served {dense['stated']} SGLang's own throughput, with 0 retractions against SGLang's "
            f"{pool['retractions'][0]}: what the smaller reserve buys in a pool that cannot hold the per-branch "
            "one, not the draft's speed where the pool holds both") in flat
    assert (f"The pool was chosen too small for SGLang's per-branch reserve ({pool['reserve']:,} slots a request): "
            f"it holds that reserve for {pool['held']} of the {pool['in_flight']} requests") in _flat(PERF)
    assert (f"reserve (it holds it for {pool['held']} of the {pool['in_flight']} requests in flight), it served "
            f"{dense['stated']} SGLang's own throughput") in _flat(CONFIGURATION)
    assert dense["rounds"] == 8 and dense["pairs"] == 1
    (fig,) = [f for f in figures.FIGURES if f.question == figures._DENSE and f.key[0] == "triton_off_p64"]
    (pair,) = json.loads((figures.RESULTS / fig.recordings[0]).read_text())["pairs"].values()
    summary = pair["summary"]["64"]
    assert (summary["retractions_A"], summary["retractions_B"]) == (246, 0)


def test_every_recording_with_rounds_is_pooled_or_its_exclusion_stated(rows, monkeypatch):
    """Scans bench/results/ for every ab.json whose pair has rounds (not a hand list): each is pooled by a
    figure of its key or named in figures.EXCLUDED with a reason, which its run's README states too."""
    found = figures.recordings_with_rounds()
    assert len(found) > 60 and figures.unaccounted() == []
    pooled = {p for f in figures.FIGURES for p in f.recordings}
    for e in figures.EXCLUDED:
        assert e.reason and e.paths
        for path in e.paths:
            held = [p for p, _ in found if p.startswith(path + "/")]
            assert held and not pooled & set(held), (path, "an exclusion must name recordings no figure pools")
            run, _, sub = path.partition("/")
            lines = [line for line in (figures.RESULTS / run / "README.md").read_text().splitlines()
                     if line.startswith(figures.NOT_POOLED)]
            assert lines and (not sub or any(f"`{sub}/`" in line for line in lines)), (path, "no reason in the record")
    # the guard sees a complete recording dropped: run 31's second page-64 pair, 12 rounds, no errors
    pp4 = "2026-12-04-h200-run31/ab-pp4/on_p1__on_p64/ab.json"
    (summary,) = [p["summary"]["64"] for p in json.loads((figures.RESULTS / pp4).read_text())["pairs"].values()]
    assert len(summary["ratios"]) == summary["rounds"] == 12 and summary["errors"] == 0
    without = tuple(figures.Figure(**{**f.__dict__, "recordings": tuple(p for p in f.recordings if p != pp4)})
                    for f in figures.FIGURES)
    monkeypatch.setattr(figures, "FIGURES", without)
    assert figures.unaccounted() == [(pp4, ("on_p1", "on_p64", 128, 64, 64))]


def test_a_figure_whose_recording_gives_no_rounds_at_its_key_is_an_error(rows):
    fig = next(f for f in figures.FIGURES if f.in_flight == 128 and f.question == "ours / SGLang's own")
    more = figures.Figure(**{**fig.__dict__, "recordings": fig.recordings + (
        "2026-12-02-h200-run22/ab-p64more/on_p64__off_p64/ab.json",)})  # that recording has 64 in flight only
    with pytest.raises(ValueError, match="no rounds in"):
        figures.row(more)


def _derived(rows) -> dict:
    """{ratio and interval as written: [the derived figures that read so]}: every row and each pair alone."""
    out = {}
    for fig in figures.FIGURES:
        for s in (figures.row(fig), *figures.per_pair(fig)):
            out.setdefault(s["text"], []).append(s)
    return out


@pytest.mark.parametrize("name", ["README.md", "docs/performance.md", "docs/configuration.md"])
def test_every_quoted_interval_is_derived_and_one_pair_says_so_without_a_verdict(rows, name):
    """A ratio with its interval in the prose is a derived figure; one of one server pair carries "one
    server pair, N rounds" in its parentheses, is not bold, and its sentence holds no verdict word."""
    text = _flat(_prose((ROOT / name).read_text()))
    derived = _derived(rows)
    quoted = list(RATIO.finditer(text))
    assert name == "docs/performance.md" or quoted  # its figures are in the table; the README quotes them
    for m in quoted:
        base, tail = m.group(1) + ")", m.group(2)
        assert base in derived, (name, m.group(0), "quoted but not derived from the records")
        one = [s for s in derived[base] if s["pairs"] < 2]
        if not one:
            assert "one server pair" not in tail, (name, m.group(0))
            continue
        assert any(m.group(0).startswith(s["stated"][:-1]) for s in one), (name, m.group(0), "say 'one server pair'")
        assert text[m.start() - 2:m.start()] != "**", (name, m.group(0), "one server pair in bold")
        start, end = text.rfind(". ", 0, m.start()) + 1, text.find(". ", m.end())
        sentence = text[start:end if end >= 0 else len(text)]
        assert not VERDICT_WORDS.search(sentence), (name, sentence, "a verdict beside one server pair's figure")


def test_the_tables_give_one_server_pair_no_verdict(rows):
    for line in figures.table().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 11 and cells[6] == "1":
            assert cells[9] == "none (one server pair)" and not VERDICT_WORDS.search(cells[9]), line


def test_the_interval_method_is_named_as_computed(rows):
    """stats.pooled floors Hartung-Knapp's variance at DerSimonian-Laird's: the pages call it the modified
    Hartung-Knapp interval, say why, and count the intervals the floor widened."""
    assert "modified Hartung-Knapp" in stats.METHOD and "modified" in stats.__doc__
    perf, readme = _flat(PERF), _flat(_performance_section(README))
    benchmark = _flat((ROOT / "docs" / "benchmark.md").read_text())
    assert "the interval is the **modified Hartung-Knapp** one" in perf and "Why the floor:" in perf
    assert "random effects with the modified Hartung-Knapp interval" in readme
    assert "the modified Hartung-Knapp interval on recordings - 1 degrees of freedom" in benchmark
    for page in (perf, readme, benchmark):
        assert not re.search(r"(?<!modified )(?<!plain )Hartung-Knapp's interval", page)
    widened, multi = figures.floored()
    assert (widened, multi) == (6, 8)
    assert f"It widens {widened} of the {multi} intervals over two or more server pairs below" in perf


def test_each_smollm2_figure_names_the_head_it_used(rows):
    """Every SmolLM2 A/B ran with run 21's head (run 28's README, which trained the package's head
    since, says so); the pages say which head each figure used, with the pairs' own acceptance."""
    runs = {int(re.search(r"-run(\d+)/", p).group(1)) for f in figures.FIGURES if f.model == figures.SMOLLM2
            for p in f.recordings}
    assert runs and max(runs) <= 28 and "run 21's head" in figures.SMOLLM2
    run28 = _flat((figures.RESULTS / "2026-12-03-h200-run28" / "README.md").read_text())
    assert "every SmolLM2 A/B of runs 23-28 was measured with run 21's head" in run28
    low, high = figures.ab_acceptance(figures.SMOLLM2)
    readme = _flat(_performance_section(README))
    assert "the package's head, run 28's, accepts 2.78 at page 1" in readme
    assert "Every figure after this one used run 21's head" in readme
    assert f"Paired at page 64 (acceptance {low:.2f}-{high:.2f} on either side), ours serves" in readme
    assert f"every one with run 21's head (acceptance {low:.2f}-{high:.2f} on either side of these pairs)" in _flat(PERF)


def test_the_plot_says_what_each_row_and_colour_is(rows):
    """Labels carry each row's server pairs and rounds; a panel of one-pair rows is not titled 'over
    server pairs'; the legend names the three kinds of row (checked on what plot() draws with)."""
    for f in figures.FIGURES:
        s = figures.row(f)
        pairs = "one server pair" if s["pairs"] < 2 else f"{s['pairs']} server pairs"
        assert figures._label(f, s).endswith(f"[{pairs}, {s['rounds']} rounds]")
    for question, _ in figures.QUESTIONS:
        panel = [(f, figures.row(f)) for f in figures.FIGURES if f.question == question]
        title = figures._title(question, panel)
        assert ("over server pairs" in title) == any(s["pairs"] >= 2 for _, s in panel), title
        assert bool(re.search(r"one (server )?pair's rounds", title)) == any(s["pairs"] < 2 for _, s in panel), title
