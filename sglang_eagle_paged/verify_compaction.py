"""Slot bookkeeping of SGLang's paged tree verify, without ``torch.compile``'s per-call cost.

After verifying a tree at page > 1 and topk > 1, SGLang keeps each request's accepted
tokens at the front of its verify slots and frees what lies past the page that holds
the last of them. ``spec_utils.get_src_tgt_cache_loc`` computes the move's source slots,
an output buffer for the targets and the per-request count of slots to free: a gather
and a handful of elementwise ops, under ``torch.compile(dynamic=True)``, about 130 us of
host time per verify round on the H200 (run 9), as much as the same ops in eager torch.
The REPLACE hook computes them in one Triton launch
(:func:`.kernels.verify_bookkeeping.src_and_free_counts`).

The kernel is compiled and checked against the eager ops at worker start-up
(:func:`warm_up`); should either fail, the process serves with the eager ops and says so
once, rather than failing a verify mid-serving.
"""

import itertools
import logging

import torch

from .harness import verify_bookkeeping_inputs
from . import verify_free
from .kernels import verify_bookkeeping

logger = logging.getLogger("sglang_eagle_paged")

_state = {"kernel": True}


def src_tgt_cache_loc_eager(seq_lens: torch.Tensor, out_cache_loc: torch.Tensor, accept_index: torch.Tensor,
                            num_correct_drafts: torch.Tensor, draft_token_num: int, page_size: int):
    """The same results in eager torch: the fallback, and what :func:`kernel_problem` checks against."""
    src_cache_loc = out_cache_loc[accept_index]
    # The accepted tokens (num_correct_drafts + 1 per request) end inside one page; that
    # page stays whole, every verify slot after it is freed.
    kept_end = (seq_lens + num_correct_drafts + page_size) // page_size * page_size
    to_free_num_slots = (seq_lens + draft_token_num - kept_end).clamp_(min=0)
    return src_cache_loc, torch.empty_like(src_cache_loc), to_free_num_slots


def src_tgt_cache_loc(seq_lens: torch.Tensor, out_cache_loc: torch.Tensor, accept_index: torch.Tensor,
                      num_correct_drafts: torch.Tensor, draft_token_num: int, page_size: int):
    """Same parameters and results as SGLang's ``get_src_tgt_cache_loc`` (REPLACE hook body).

    0.5.11 names the fourth parameter ``num_accepted_drafts``; its callers (``eagle_info``,
    ``ngram_info``), like 0.5.12's, pass every argument by position."""
    if verify_free.enabled():  # free counts in pages (verify_free.py); chosen at start-up, with the kernel
        return verify_free.src_tgt_cache_loc(seq_lens, out_cache_loc, accept_index, num_correct_drafts,
                                             draft_token_num, page_size)
    impl = verify_bookkeeping.src_and_free_counts if _state["kernel"] else src_tgt_cache_loc_eager
    return impl(seq_lens, out_cache_loc, accept_index, num_correct_drafts, draft_token_num, page_size)


def kernel_in_use() -> bool:
    """Whether the hook computes with the kernel (False after a failed warm-up: the eager ops)."""
    return _state["kernel"]


def kernel_problem(args) -> str | None:
    """Why the kernel cannot stand in for the eager ops on ``args`` (the hook's arguments): its
    error, or a difference in the source slots or the free counts; None where it can."""
    try:
        got = verify_bookkeeping.src_and_free_counts(*args)
    except Exception as exc:  # a Triton or driver error
        return f"{type(exc).__name__}: {exc}"
    want = src_tgt_cache_loc_eager(*args)
    if torch.equal(got[0], want[0]) and torch.equal(got[2], want[2]) and got[2].dtype == want[2].dtype:
        return None
    return "its results differ from the eager ops"


# The index dtypes SGLang's verify (0.5.11 and 0.5.12) hands the hook: int32 from its sampling kernel, and an
# int64 num_correct_drafts in a round where a request finished mid-tree (recounted in torch).
# Each combination is a Triton variant of its own; one first met while serving stalls the
# scheduler for its compile, so warm-up compiles them all.
INDEX_DTYPES = tuple(itertools.product((torch.int32, torch.int64), repeat=2))  # (accept_index, num_correct_drafts)


def warm_up(device, draft_token_num: int, page_size: int) -> None:
    """Compile the kernel for this process and check it on a few verifies; fall back to eager if not."""
    if not _state["kernel"]:
        return
    seq_lens, out_cache_loc, accept_index, num_correct = verify_bookkeeping_inputs(
        torch.Generator().manual_seed(0), 8, draft_token_num, page_size)
    problem = None
    for ai_dtype, ncd_dtype in INDEX_DTYPES:
        args = [seq_lens, out_cache_loc, accept_index.to(ai_dtype), num_correct.to(ncd_dtype)]
        problem = kernel_problem([t.to(device) for t in args] + [draft_token_num, page_size])
        if problem is not None:
            break
    if problem is not None:
        _state["kernel"] = False
        logger.warning("[sglang-eagle-paged] verify bookkeeping kernel not used (%s); eager torch ops instead",
                       problem[:500])
