"""Every bad value of every flag, as a user types it into the installed console script: one line that
names the option and what it must be, exit status 2, no usage block, no traceback, no internal name
(issue 64: points 3 and 4). And the commands that took a value silently where SGLang would not."""

import importlib.metadata

import pytest
from helpers.console import run_cli, one_line

BAD = [
    (("bench", "--port", "99999"), "argument --port: 99999 is out of range: a TCP port is 1 .. 65535"),
    (("bench", "--port", "0"), "argument --port: 0 is out of range"),
    (("bench", "--parallel", "-1"), "argument --parallel: -1 is too small: it must be at least 1"),
    (("bench", "--num-questions", "0"), "argument --num-questions: 0 is too small"),
    (("bench", "--max-new-tokens", "many"), "argument --max-new-tokens: 'many' is not a whole number"),
    (("bench", "--sweep", "--page-sizes", "1,x"), "argument --page-sizes: 'x' is not a whole number"),
    (("bench", "--sweep", "--mem-fraction-static", "1.5"), "argument --mem-fraction-static: 1.5 is out of range"),
    (("bench", "--sweep", "--modes", "on,of"), "argument --modes: 'of' is not one of on, off, fake"),
    (("serve-default", "--port", "65536"), "argument --port: 65536 is out of range"),
    (("serve-default", "--page-size", "0"), "argument --page-size: 0 is too small"),
    (("serve-default", "--startup-timeout", "-3"), "argument --startup-timeout: -3 is too small"),
    (("kv-size", "--page-size", "abc"), "argument --page-size: 'abc' is not a whole number"),
    (("kv-size", "--running", "0"), "argument --running: 0 is too small"),
    (("kv-size", "--layout", "paged"), "argument --layout: invalid choice: 'paged'"),
]


@pytest.mark.parametrize("argv,said", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_value_is_one_line_naming_the_option(argv, said):
    p = run_cli(*argv)
    line = one_line(p)
    assert p.returncode == 2 and p.stdout == ""
    assert line.startswith(f"sglang-eagle-paged {argv[0]}: error: ") and said in line, line
    assert "_positive" not in line and "<lambda>" not in line and "usage:" not in p.stderr


def test_kv_size_refuses_more_draft_tokens_than_the_tree_proposes():
    p = run_cli("kv-size", "--draft-tokens", "1000")
    line = one_line(p)
    assert p.returncode == 2 and p.stdout == ""
    assert "--draft-tokens 1000 is more than a tree of topk 8 and 5 steps proposes (265" in line
    assert "ask at most 265" in line
    assert run_cli("kv-size", "--draft-tokens", "265").returncode == 0


def test_kv_size_gives_a_chain_the_draft_tokens_sglang_serves_it_and_says_so():
    p = run_cli("kv-size", "--topk", "1", "--draft-tokens", "64", "--page-size", "1", "64", "--running", "2",
                "--context", "64")
    assert p.returncode == 0, p.stderr
    assert "SGLang sets --speculative-num-draft-tokens to steps + 1 = 6" in p.stdout
    assert "(topk 1, 5 steps, 6 draft tokens)" in p.stdout
    # 2 x max(5 x 1, 6) = 12 slots reserved, not 2 x 64
    assert "| 1 | 12 | 76 | 152 | 12 (12) | 76 | 152 |" in p.stdout
    assert "| 64 | 12 | 128 | 256 | 12 (75) | 128 | 256 |" in p.stdout


def test_kv_size_says_one_running_request_and_names_the_columns_it_means():
    p = run_cli("kv-size", "--running", "1", "--page-size", "64")
    assert p.returncode == 0, p.stderr
    assert "1 running request of up to" in p.stdout and "1 running requests" not in p.stdout
    assert "Without it a server needs the per-branch columns' figures" in p.stdout
    assert "first three columns" not in p.stdout


@pytest.mark.parametrize("layout", ["per-branch", "dense"])
def test_kv_size_shows_one_layout_when_asked(layout):
    p = run_cli("kv-size", "--layout", layout, "--page-size", "64", "--running", "64", "--context", "1000")
    assert p.returncode == 0, p.stderr
    header = next(line for line in p.stdout.splitlines() if line.startswith("| page"))
    (row,) = [line for line in p.stdout.splitlines() if line.startswith("| 64 ")]
    if layout == "dense":
        assert header.count("dense:") == 3 and header.count("|") == 5
        assert row == "| 64 | 128 (191) | 1,152 | 73,728 |"
    else:
        assert "dense" not in header and header.count("|") == 5
        assert row == "| 64 | 2,048 | 3,072 | 196,608 |" and "dense columns" not in p.stdout


needs_v2 = pytest.mark.skipif(importlib.metadata.version("sglang") != "0.5.23",
                              reason="the v2 release of the CPU environment (0.5.23)")


@needs_v2
def test_serve_default_lets_triton_serve_a_tree_on_pages_where_sglang_does(tmp_path):
    """On v2 SGLang drafts a paged tree on triton itself; SGLANG_EAGLE_PAGED_ALLOW_TRITON is read by
    the v1 adapter only (doctor says so). serve-default goes on to its next step (here the questions,
    missing, so that no server starts) instead of asking for the v1 switch."""
    missing = tmp_path / "none.jsonl"
    p = run_cli("serve-default", "--attention-backend", "triton", "--model-path", "/m",
                "--speculative-draft-model-path", "/d", "--question-file", missing)
    line = one_line(p)
    assert p.returncode == 2 and "ALLOW_TRITON" not in line
    assert line.startswith(f"--question-file {missing}: ") and "No such file" in line, line


def test_serve_default_asks_for_the_triton_switch_on_v1_only():
    from sglang_eagle_paged.bench.default_run import triton_refusal

    refusal = triton_refusal("triton", 8, 64, version="0.5.12.post1")
    assert refusal and "SGLANG_EAGLE_PAGED_ALLOW_TRITON=1" in refusal and "0.5.12.post1 (v1)" in refusal
    assert triton_refusal("triton", 8, 64, version="0.5.23") is None
    assert triton_refusal("triton", 8, 64, version="0.5.17") is None
    assert triton_refusal("flashinfer", 8, 64, version="0.5.12.post1") is None
    assert triton_refusal("triton", 1, 64, version="0.5.12.post1") is None


def test_serve_default_takes_the_v1_switch_where_it_is_read(monkeypatch):
    from sglang_eagle_paged.bench.default_run import triton_refusal

    monkeypatch.setenv("SGLANG_EAGLE_PAGED_ALLOW_TRITON", "1")
    assert triton_refusal("triton", 8, 64, version="0.5.12.post1") is None


def test_the_demo_says_its_report_and_nothing_of_the_plugins_start_up_lines():
    """The plugin's start-up lines are INFO lines kept for a server's log (they pass SGLang's warning
    level: sglang_eagle_paged/__init__.py); the demo reports the same itself, so they stay out of it."""
    p = run_cli("demo", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr == "" and p.stdout.rstrip().splitlines()[-1].startswith("OK: ")
