"""The tree verify's slots at page > 1, read from the paged allocator's free pages, in one launch.

``prepare_for_verify`` gives each request ``draft_tokens`` slots after its prefix. At page > 1 that is
``get_last_loc`` (one launch), ``alloc_paged_token_slots_extend`` (the new-page count in host arithmetic
on CPU tensors, then ``alloc_extend_kernel``) and ``assign_req_to_token_pool`` (a third launch, which
page 1 also makes). Every request extends by the same length, so its slots start at
``r * draft_tokens`` of the output, and :func:`.free_page_slots._free_page_slots` gives the slot of each
position exactly as ``alloc_extend`` lays it out (the rest of the partial page first, then new pages
from the free list in batch order, the last one possibly partial). This kernel writes those slots to
``out`` and to the request's ``req_to_token`` row: SGLang's three launches as one, the batch size a
runtime value (no variant per batch-size bucket).
"""

import torch
import triton
import triton.language as tl

from .free_page_slots import _free_page_slots, _last_loc
from .launch import launch

BLOCK_BS = 128  # earlier requests summed per loop iteration
BLOCK_T = 64  # positions written per loop iteration

_INTS = ["rtt_stride0", "rtt_stride1", "rpi_stride", "sl_stride", "fp_stride", "draft_tokens"]
_POINTERS = ["req_to_token", "req_pool_indices", "seq_lens", "free_pages", "out"]


@triton.jit
def _new_pages(prefix, draft_tokens, page_size: tl.constexpr):
    return (prefix + draft_tokens + page_size - 1) // page_size - (prefix + page_size - 1) // page_size


@triton.jit(do_not_specialize=_INTS, do_not_specialize_on_alignment=_POINTERS)
def _verify_slots_kernel(
    req_to_token, rtt_stride0, rtt_stride1,  # [pool rows, context] in/out
    req_pool_indices, rpi_stride,            # [bs]
    seq_lens, sl_stride,                     # [bs] prefix lengths
    free_pages, fp_stride,                   # the allocator's free list
    out,                                     # [bs * draft_tokens] out: the verify's slots
    draft_tokens,
    page_size: tl.constexpr,
    BLOCK_BS: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    r = tl.program_id(0)
    # This request's first page in the free list: the new pages of the requests before it.
    page_start = tl.full([], 0, tl.int64)
    for b0 in range(0, r, BLOCK_BS):
        offs = b0 + tl.arange(0, BLOCK_BS)
        earlier = offs < r
        lens = tl.load(seq_lens + offs.to(tl.int64) * sl_stride, mask=earlier, other=0).to(tl.int64)
        page_start += tl.sum(tl.where(earlier, _new_pages(lens, draft_tokens, page_size), 0), axis=0)
    prefix = tl.load(seq_lens + r.to(tl.int64) * sl_stride).to(tl.int64)
    row = req_to_token + tl.load(req_pool_indices + r.to(tl.int64) * rpi_stride).to(tl.int64) * rtt_stride0
    last = prefix % page_size
    last_loc = _last_loc(row, rtt_stride1, prefix, last)
    for t0 in range(0, draft_tokens, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        m = t < draft_tokens
        slot = _free_page_slots(t, m, last, last_loc, free_pages, fp_stride, page_start, page_size)
        tl.store(out + r.to(tl.int64) * draft_tokens + t, slot, mask=m)
        tl.store(row + (prefix + t) * rtt_stride1, slot.to(req_to_token.dtype.element_ty), mask=m)


def new_pages_total(seq_lens_cpu: torch.Tensor, draft_tokens: int, page_size: int) -> int:
    """The free pages a verify of ``draft_tokens`` per request takes (SGLang's ``get_num_new_pages``)."""
    lens = seq_lens_cpu.numpy().astype("int64")
    return int(((lens + draft_tokens + page_size - 1) // page_size - (lens + page_size - 1) // page_size).sum())


def verify_slots(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                 free_pages: torch.Tensor, draft_tokens: int, page_size: int) -> torch.Tensor:
    """Each request's ``draft_tokens`` verify slots after its prefix, as ``alloc_extend`` would hand them
    out from ``free_pages`` (packed in batch order), also written to ``req_to_token``. The caller checks
    that ``free_pages`` holds :func:`new_pages_total` pages and takes them off the list."""
    bs = seq_lens.numel()
    out = torch.empty(bs * draft_tokens, dtype=torch.int64, device=seq_lens.device)
    if bs:
        launch(_verify_slots_kernel, (bs,), (
            req_to_token, req_to_token.stride(0), req_to_token.stride(1), req_pool_indices,
            req_pool_indices.stride(0), seq_lens, seq_lens.stride(0), free_pages, free_pages.stride(0), out,
            draft_tokens,
        ), dict(page_size=page_size, BLOCK_BS=BLOCK_BS, BLOCK_T=BLOCK_T))
    return out
