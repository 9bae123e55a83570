"""Our eager ``get_src_tgt_cache_loc`` against SGLang's own function, run eagerly on the CPU."""

import pytest
import torch

from helpers.sglang_source import undecorated
from sglang_eagle_paged.harness import verify_bookkeeping_inputs
from sglang_eagle_paged.verify_compaction import src_tgt_cache_loc

spec_utils = pytest.importorskip("sglang.srt.speculative.spec_utils")
SGLANG = undecorated(spec_utils.get_src_tgt_cache_loc, "get_src_tgt_cache_loc", "spec_utils.py")


@pytest.mark.parametrize("bs,draft_token_num,page_size", [
    (1, 8, 16), (3, 64, 64), (16, 32, 128), (7, 16, 4), (48, 64, 16), (5, 4, 256), (9, 6, 2),
])
def test_same_results_as_sglang(bs, draft_token_num, page_size):
    gen = torch.Generator().manual_seed(bs * 1000 + page_size)
    for _ in range(20):
        args = verify_bookkeeping_inputs(gen, bs, draft_token_num, page_size)
        src, tgt, free = src_tgt_cache_loc(*args, draft_token_num, page_size)
        ref_src, ref_tgt, ref_free = SGLANG(*args, draft_token_num, page_size)
        assert torch.equal(src, ref_src)
        assert tgt.shape == ref_tgt.shape and tgt.dtype == ref_tgt.dtype
        assert free.dtype == ref_free.dtype and torch.equal(free, ref_free)


def test_page_boundaries_exactly():
    # accepted tokens ending exactly on a page boundary keep no slot of the next page
    seq_lens = torch.tensor([62, 63, 64, 0 + 60])
    num_correct = torch.tensor([1, 0, 3, 4], dtype=torch.int32)  # ends at 64, 64, 68, 65
    accept_index = torch.arange(4) * 8
    out = torch.arange(32)
    _, _, free = src_tgt_cache_loc(seq_lens, out, accept_index, num_correct, 8, 64)
    # extended ends 70, 71, 72, 68; kept ends 64, 64, 128->72 (capped), 128->68 (capped)
    assert free.tolist() == [6, 7, 0, 0]
    assert torch.equal(free, SGLANG(seq_lens, out, accept_index, num_correct, 8, 64)[2])
