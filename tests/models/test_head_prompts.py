"""scripts/device/head_prompts.py: the head's training prompts, by kind, made offline, and none of
MT-bench's question text among them (MT-bench is the evaluation)."""

import re
import sys
from collections import Counter
from pathlib import Path

import pytest

DEVICE = Path(__file__).resolve().parents[2] / "scripts" / "device"
sys.path.insert(0, str(DEVICE))
import head_prompts as hp  # noqa: E402


@pytest.fixture(scope="module")
def sources():
    return hp.Sources(max_files=40)


def test_mix_parses_and_shares_out_the_prompts():
    assert hp.parse_mix(hp.DEFAULT_MIX) == {k: 1.0 for k in hp.KINDS} and len(hp.KINDS) == 9
    assert hp.counts(20, hp.parse_mix("math=3,coding=1")) == {"math": 15, "coding": 5}
    c = hp.counts(10, hp.parse_mix(hp.DEFAULT_MIX))
    assert sum(c.values()) == 10 and set(c.values()) == {1, 2}
    assert hp.counts(7, hp.parse_mix("writing=1,docstring=0")) == {"writing": 7}
    for bad, says in (("poetry=1", "unknown prompt kind"), ("math=x", "not a number"), ("math=-1", "negative"),
                      ("math=0", "no kind has a positive weight")):
        with pytest.raises(ValueError, match=says):
            hp.parse_mix(bad)


def test_every_kind_makes_distinct_reproducible_prompts(sources):
    prompts = hp.make_prompts(450, seed=3, sources=sources)
    kinds = Counter(k for k, _ in prompts)
    assert kinds == {k: 50 for k in hp.KINDS}, kinds
    assert len({p for _, p in prompts}) == 450
    assert hp.make_prompts(450, seed=3, sources=sources) == prompts
    assert hp.make_prompts(450, seed=4, sources=sources) != prompts
    assert [k for k, _ in prompts[:9]] != list(hp.KINDS)               # shuffled: a cut keeps the mix
    text = {k: [p for kk, p in prompts if kk == k] for k in hp.KINDS}
    assert sum("```python" in p for p in text["coding"]) >= 5           # standard-library source
    assert sum(bool(re.search(r"\d", p)) for p in text["math"]) == 50    # seeded numbers in every one
    assert sum(any(p.startswith(w) for w in ("Pretend", "You are", "Act as", "Imagine", "Role-play", "Speak as"))
               for p in text["roleplay"]) == 50
    assert all("`" in p or "\n\n" in p for p in text["docstring"])     # a module named or a docstring quoted
    assert not any("{" in p and "}" in p and "{mod" in p for _, p in prompts)   # every slot filled


def _words(text):
    return re.findall(r"[a-z0-9]+", text.lower())


def test_no_prompt_shares_question_text_with_mtbench():
    """Neither a whole MT-bench turn nor any run of eight of its words is in the prompt set the
    trainer builds by default (4,096 prompts, seed 0, every standard-library file)."""
    from sglang_eagle_paged.bench import mtbench

    try:
        questions = mtbench.load_questions()
    except mtbench.QuestionsNotFound as exc:
        pytest.skip(str(exc))
    turns = [" ".join(_words(t)) for q in questions for t in q["turns"]]
    shingles = {tuple(w[i:i + 8]) for t in turns for w in [t.split()] for i in range(len(w) - 7)}
    prompts = hp.make_prompts(4096, seed=0)
    assert len(prompts) == 4096
    for _, p in prompts:
        flat = " ".join(_words(p))
        assert not any(t and t in flat for t in turns), p[:200]
        w = flat.split()
        shared = {tuple(w[i:i + 8]) for i in range(len(w) - 7)} & shingles
        assert not shared, (p[:200], shared)


def test_the_trainer_reads_no_benchmark():
    for f in ("head_prompts.py", "train_eagle_head.py", "head_checkpoint.py"):
        text = (DEVICE / f).read_text().lower()
        imported = re.findall(r"^\s*(?:from|import)\s+(\S+)", text, re.M)
        assert "mtbench" not in text and "question.jsonl" not in text, f
        assert imported and not any("bench" in m for m in imported), (f, imported)
