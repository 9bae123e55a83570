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

import logging

import torch

logger = logging.getLogger("sglang_eagle_paged")

_state = {"kernel": True}


def src_tgt_cache_loc_eager(seq_lens: torch.Tensor, out_cache_loc: torch.Tensor, accept_index: torch.Tensor,
                            num_correct_drafts: torch.Tensor, draft_token_num: int, page_size: int):
    """The same results in eager torch: the fallback, and what :func:`warm_up` checks against."""
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
    if _state["kernel"]:
        from .kernels.verify_bookkeeping import src_and_free_counts

        return src_and_free_counts(seq_lens, out_cache_loc, accept_index, num_correct_drafts,
                                   draft_token_num, page_size)
    return src_tgt_cache_loc_eager(seq_lens, out_cache_loc, accept_index, num_correct_drafts,
                                   draft_token_num, page_size)


def warm_up(device, draft_token_num: int, page_size: int) -> None:
    """Compile the kernel for this process and check it on a small verify; fall back to eager if not."""
    if not _state["kernel"]:
        return
    from .kernels.verify_bookkeeping import src_and_free_counts

    i64 = dict(dtype=torch.int64, device=device)
    # Two requests: one whose accepted tokens end mid-page, one that ends on a page boundary.
    seq_lens = torch.tensor([page_size + 1, 2 * page_size - 2], **i64)
    num_correct = torch.tensor([min(2, draft_token_num - 1), min(1, draft_token_num - 1)],
                               dtype=torch.int32, device=device)
    out_cache_loc = torch.arange(2 * draft_token_num, **i64) + 7
    accept_index = torch.cat([torch.arange(int(num_correct[r]) + 1, **i64) + r * draft_token_num for r in range(2)])
    args = (seq_lens, out_cache_loc, accept_index, num_correct, draft_token_num, page_size)
    try:
        got, want = src_and_free_counts(*args), src_tgt_cache_loc_eager(*args)
        same = all(torch.equal(g, w) for g, w in ((got[0], want[0]), (got[2], want[2]))) \
            and got[2].dtype == want[2].dtype
        problem = None if same else "its results differ from the eager ops"
    except Exception as exc:  # a Triton or driver error: serve with the eager ops instead
        problem = f"{type(exc).__name__}: {exc}"
    if problem is not None:
        _state["kernel"] = False
        logger.warning("[sglang-eagle-paged] verify bookkeeping kernel not used (%s); eager torch ops instead",
                       problem[:500])
