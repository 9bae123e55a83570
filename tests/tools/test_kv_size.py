"""``sglang-eagle-paged kv-size``: the pool a batch needs per page size, from SGLang's reserve (whose
formula tests/bench/test_kv_sizing.py pins to SGLang's own function)."""

import pytest

from sglang_eagle_paged.tools.cli import main


def test_the_table_gives_each_page_size_its_reserve_and_pool(capsys):
    assert main(["kv-size", "--page-size", "1", "64", "128", "--running", "64", "--context", "1000"]) == 0
    out = capsys.readouterr().out
    assert "topk 8, 5 steps, 64 draft tokens), 64 running requests of up to 1,000 tokens" in out
    assert "| 1 | 128 | 1,128 | 72,192 | 128 (128) | 1,128 | 72,192 |" in out
    # 3,048 slots in 48 whole pages; dense: 1,128 in 18
    assert "| 64 | 2,048 | 3,072 | 196,608 | 128 (191) | 1,152 | 73,728 |" in out
    assert "| 128 | 4,096 | 5,120 | 327,680 | 128 (255) | 1,152 | 73,728 |" in out
    assert "SGLANG_EAGLE_PAGED_DENSE_DRAFT=1" in out


def test_a_chain_reserves_the_same_at_every_page_size(capsys):
    assert main(["kv-size", "--page-size", "1", "64", "--topk", "1", "--steps", "3", "--draft-tokens", "4",
                 "--running", "2", "--context", "64"]) == 0
    out = capsys.readouterr().out
    assert "| 1 | 8 | 72 | 144 | 8 (8) | 72 | 144 |" in out and "| 64 | 8 | 128 | 256 | 8 (71) | 128 | 256 |" in out


@pytest.mark.parametrize("bad", [["--running", "0"], ["--page-size", "-64"], ["--topk", "x"]])
def test_bad_numbers_stop_in_one_line(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["kv-size", *bad])
    assert exc.value.code == 2 and "kv-size: error:" in capsys.readouterr().err


@pytest.mark.parametrize("page", [2, 16, 64, 128, 256])
def test_the_dense_reserve_is_page_1s_and_holds_at_most_a_page_more(page, capsys):
    from sglang_eagle_paged.kv_reserve import held_beyond_committed, reserve_per_decode

    dense = reserve_per_decode(page, 8, 5, 64, dense=True)
    held = held_beyond_committed(page, dense)
    print(f"page {page}: per-branch reserve {reserve_per_decode(page, 8, 5, 64):,}, dense {dense} (held at most {held})")
    assert dense == reserve_per_decode(1, 8, 5, 64) == 128
    if page <= 64:
        assert held <= 192  # issue 54: at page 64, topk 8, 5 steps


# --- the tree's shape as SGLang 0.5.23 takes it (kv-size's draft_tokens_served says what it does)

def _sglang_0523():
    import importlib.metadata

    if importlib.metadata.version("sglang") != "0.5.23":
        pytest.skip("reads SGLang 0.5.23's own code (scripts/setup_cpu.sh builds it)")


@pytest.mark.upstream
def test_sglang_gives_a_chain_steps_plus_one_draft_tokens_and_kv_size_does_the_same(caplog):
    """SGLang's own argument resolution (ServerArgs.resolve_once, on the CPU with the testbed's
    configs) adjusts --speculative-num-draft-tokens for topk 1, with a warning, and accepts a tree's
    draft tokens beyond what the tree proposes (the draft then fails: the next test)."""
    _sglang_0523()
    import logging
    from pathlib import Path

    from sglang.srt.arg_groups.overrides import resolution_result
    from sglang.srt.server_args import ServerArgs

    from sglang_eagle_paged.tools.kv_size import draft_tokens_served

    testbed = Path(__file__).resolve().parents[2] / "sglang_eagle_paged" / "testbed"
    served = {}
    for topk, asked in ((1, 64), (8, 1000)):
        args = ServerArgs(model_path=str(testbed / "target"), speculative_algorithm="EAGLE",
                          speculative_draft_model_path=str(testbed / "draft"), speculative_eagle_topk=topk,
                          speculative_num_steps=5, speculative_num_draft_tokens=asked, device="cpu", page_size=64,
                          attention_backend="triton")
        with caplog.at_level(logging.WARNING):
            args.resolve_once()
        served[topk] = resolution_result(args, "speculative_num_draft_tokens")
    assert served == {1: 6, 8: 1000}
    assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1" in caplog.text
    tokens, note = draft_tokens_served(1, 5, 64)
    assert tokens == served[1] and "steps + 1 = 6" in note


@pytest.mark.upstream
@pytest.mark.parametrize("topk,steps", [(8, 5), (4, 3), (2, 1)])
def test_sglang_s_draft_takes_at_most_the_tree_s_tokens(topk, steps):
    """SGLang's organize_draft_results, on the scores its draft loop collects (the first step's topk,
    topk x topk at each later one: eagle_worker_v2's draft_forward), picks draft_tokens - 1 of them:
    kv-size's bound is the most it can pick."""
    _sglang_0523()
    import torch
    from sglang.srt.speculative.eagle_utils import organize_draft_results

    from sglang_eagle_paged.tools.kv_size import draft_tokens_served, tree_tokens

    b = 2
    scores = [torch.rand(b, 1, topk)] + [torch.rand(b, topk, topk) for _ in range(steps - 1)]
    tokens = [torch.randint(0, 100, (b, topk))] + [torch.randint(0, 100, (b, topk * topk)) for _ in range(steps - 1)]
    parents = [torch.arange(-1, topk).expand(b, -1)] + [torch.randint(0, topk, (b, topk)) for _ in range(steps - 1)]
    most = tree_tokens(topk, steps)
    organize_draft_results(scores, tokens, parents, most)
    with pytest.raises(RuntimeError, match="out of range"):
        organize_draft_results(scores, tokens, parents, most + 1)
    assert draft_tokens_served(topk, steps, most) == (most, None)
    with pytest.raises(ValueError, match=f"ask at most {most}"):
        draft_tokens_served(topk, steps, most + 1)
