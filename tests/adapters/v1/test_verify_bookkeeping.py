"""Our ``get_src_tgt_cache_loc`` (the one-launch kernel and the eager fallback) against SGLang's own
function, run eagerly on the CPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.sglang_source import undecorated  # noqa: E402
from sglang_eagle_paged.tools.harness import verify_bookkeeping_inputs  # noqa: E402
from sglang_eagle_paged.adapters.v1.verify import src_tgt_cache_loc_eager as src_tgt_cache_loc  # noqa: E402

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


# --- the one-launch kernel (the REPLACE hook's default) ---

from sglang_eagle_paged.adapters.v1 import verify as verify_compaction  # noqa: E402
from sglang_eagle_paged.kernels.verify_bookkeeping import BLOCK, src_and_free_counts  # noqa: E402


@pytest.mark.parametrize("bs,draft_token_num,page_size", [
    (1, 8, 16), (3, 64, 64), (16, 32, 128), (7, 16, 4), (48, 64, 16), (5, 4, 256), (9, 6, 2), (40, 64, 64),
])
def test_kernel_same_results_as_sglang(bs, draft_token_num, page_size):
    gen = torch.Generator().manual_seed(7 * bs + page_size)
    for _ in range(5):
        args = verify_bookkeeping_inputs(gen, bs, draft_token_num, page_size)
        src, tgt, free = src_and_free_counts(*args, draft_token_num, page_size)
        ref_src, ref_tgt, ref_free = SGLANG(*args, draft_token_num, page_size)
        assert src.dtype == ref_src.dtype and torch.equal(src, ref_src)
        assert tgt.shape == ref_tgt.shape and tgt.dtype == ref_tgt.dtype
        assert free.dtype == ref_free.dtype and torch.equal(free, ref_free)


def test_kernel_more_than_one_block_and_strided_inputs():
    """Past one block of requests and of accepted tokens; inputs that are views with a stride."""
    gen = torch.Generator().manual_seed(3)
    bs, dtn, page = BLOCK + 37, 4, 16
    seq_lens, out, accept, correct = verify_bookkeeping_inputs(gen, bs, dtn, page)
    assert accept.numel() > BLOCK
    strided = [torch.stack([t, torch.zeros_like(t)], dim=1)[:, 0] for t in (seq_lens, out, accept, correct)]
    assert all(t.stride(0) == 2 for t in strided)
    got = src_and_free_counts(*strided, dtn, page)
    want = SGLANG(seq_lens, out, accept, correct, dtn, page)
    assert torch.equal(got[0], want[0]) and torch.equal(got[2], want[2])


def test_page_boundaries_exactly_kernel():
    seq_lens = torch.tensor([62, 63, 64, 60])
    num_correct = torch.tensor([1, 0, 3, 4], dtype=torch.int32)
    _, _, free = src_and_free_counts(seq_lens, torch.arange(32), torch.arange(4) * 8, num_correct, 8, 64)
    assert free.tolist() == [6, 7, 0, 0]


def test_hook_uses_the_kernel_after_a_good_warm_up(monkeypatch):
    monkeypatch.setitem(verify_compaction._state, "kernel", True)
    verify_compaction.warm_up_bookkeeping("cpu", 16, 64)
    assert verify_compaction._state["kernel"]
    calls = []
    from sglang_eagle_paged.kernels import verify_bookkeeping

    real = verify_bookkeeping.src_and_free_counts
    monkeypatch.setattr(verify_bookkeeping, "src_and_free_counts", lambda *a: calls.append(1) or real(*a))
    args = verify_bookkeeping_inputs(torch.Generator().manual_seed(0), 4, 16, 64)
    src, _, free = verify_compaction.src_tgt_cache_loc(*args, 16, 64)
    assert calls and torch.equal(free, SGLANG(*args, 16, 64)[2])


@pytest.mark.parametrize("breakage", ["raises", "wrong"])
def test_warm_up_falls_back_to_eager_ops(monkeypatch, caplog, breakage):
    """A kernel that cannot compile, or computes wrong, on this machine: serving goes on eagerly, said once."""
    from sglang_eagle_paged.kernels import verify_bookkeeping

    real = verify_bookkeeping.src_and_free_counts

    def broken(*args):
        if breakage == "raises":
            raise RuntimeError("no compiler here")
        src, tgt, free = real(*args)
        return src, tgt, free + 1

    monkeypatch.setitem(verify_compaction._state, "kernel", True)
    monkeypatch.setattr(verify_bookkeeping, "src_and_free_counts", broken)
    with caplog.at_level("WARNING", logger="sglang_eagle_paged"):
        verify_compaction.warm_up_bookkeeping("cpu", 16, 64)
    assert not verify_compaction._state["kernel"]
    assert "verify bookkeeping kernel not used" in caplog.text
    args = verify_bookkeeping_inputs(torch.Generator().manual_seed(1), 4, 16, 64)
    _, _, free = verify_compaction.src_tgt_cache_loc(*args, 16, 64)  # served by the eager ops
    assert torch.equal(free, SGLANG(*args, 16, 64)[2])


def test_warm_up_compiles_every_index_dtype_a_verify_hands_the_hook(monkeypatch):
    """SGLang's verify passes int32 accept_index and num_correct_drafts, and an int64 num_correct_drafts
    in rounds where a request finished mid-tree: each a Triton variant, all compiled before serving."""
    from helpers.interpreter_order import capture_specializations
    from sglang_eagle_paged.adapters.v1 import verify as verify_compaction
    from sglang_eagle_paged.kernels.verify_bookkeeping import _src_to_free_kernel

    monkeypatch.setitem(verify_compaction._state, "kernel", True)
    with capture_specializations(_src_to_free_kernel) as warm:
        verify_compaction.warm_up_bookkeeping("cpu", 16, 64)
    assert len({repr(s) for s in warm}) == 4
    gen = torch.Generator().manual_seed(3)
    with capture_specializations(_src_to_free_kernel) as serve:
        for bs, ncd_dtype in ((1, torch.int32), (5, torch.int64), (9, torch.int32)):
            seq_lens, out_cache_loc, accept_index, num_correct = verify_bookkeeping_inputs(gen, bs, 16, 64)
            verify_compaction.src_tgt_cache_loc(seq_lens, out_cache_loc, accept_index.to(torch.int32),
                                                num_correct.to(ncd_dtype), 16, 64)
    assert len({repr(s) for s in serve}) == 2 and {repr(s) for s in serve} <= {repr(s) for s in warm}
