"""Slot bookkeeping of SGLang's paged tree verify, without ``torch.compile``'s per-call cost.

After verifying a tree at page > 1 and topk > 1, SGLang keeps each request's accepted
tokens at the front of its verify slots and frees what lies past the page that holds
the last of them. ``spec_utils.get_src_tgt_cache_loc`` computes the move's source slots,
an output buffer for the targets and the per-request count of slots to free: a gather
and a handful of elementwise ops, under ``torch.compile(dynamic=True)``. On the H200 the
compiled call costs about 0.36 ms of host time per verify (Dynamo's guards, the AOT
wrapper, two generated kernels; run 4's 8B profile at page 64), far more than the ops
themselves. The same results in eager torch cost a few tens of microseconds.
"""

import torch


def src_tgt_cache_loc(seq_lens: torch.Tensor, out_cache_loc: torch.Tensor, accept_index: torch.Tensor,
                      num_correct_drafts: torch.Tensor, draft_token_num: int, page_size: int):
    """Same parameters and results as SGLang's ``get_src_tgt_cache_loc`` (REPLACE hook body).

    0.5.11 names the fourth parameter ``num_accepted_drafts``; its callers (``eagle_info``,
    ``ngram_info``), like 0.5.12's, pass every argument by position."""
    src_cache_loc = out_cache_loc[accept_index]
    # The accepted tokens (num_correct_drafts + 1 per request) end inside one page; that
    # page stays whole, every verify slot after it is freed.
    kept_end = (seq_lens + num_correct_drafts + page_size) // page_size * page_size
    to_free_num_slots = (seq_lens + draft_token_num - kept_end).clamp_(min=0)
    return src_cache_loc, torch.empty_like(src_cache_loc), to_free_num_slots
