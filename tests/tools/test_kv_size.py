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
