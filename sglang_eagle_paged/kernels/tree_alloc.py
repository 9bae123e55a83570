"""A tree-draft extension's slots read straight from the paged allocator's free pages, in one launch.

The draft's slots live only until the end of ``draft_preprocess_decode``: SGLang
(and we) back up the allocator, call ``alloc_paged_token_slots_extend`` (tree-cache
eviction, ``alloc_extend`` with its ``torch.empty``, its Triton kernel and a CPU page
count) and restore the allocator before the draft forward runs. That is about
0.5 ms of host dispatch per draft round (Python-stack profile, H200 run 6, 2026-11-30,
8B-shaped server, page 64, topk 8, steps 5), and SGLang's
``alloc_extend_kernel`` takes ``next_power_of_2(bs)`` as a constexpr, so a new
power-of-two batch size compiles a new variant mid-serving.

:func:`tree_slots_from_free_pages` writes what ``PagedTokenToKVPoolAllocator.alloc_extend``
would return for the extension (``prefix_lens = seq_lens``, the tree's page-aligned
new lengths, ``last_loc`` from ``req_to_token``), without changing any allocator
state. Per request ``r`` (``prefix = seq_lens[r]``, ``last = prefix % page``)::

    part 1: last_loc + 1 ... (page - last slots, when last > 0: the rest of the partial page)
    part 2: free_pages[page_offset[r] + k // page] * page + k % page, for the remaining slots

with ``out`` and ``page_offset`` exclusive prefix sums over the requests before ``r`` of
``extend_len`` and ``new_pages`` (:func:`.layout.new_pages`). The new length is page-aligned,
so SGLang's part 3 (a new partial page) never happens.

One program per request, as in :mod:`.assign`: each sums the requests before it in
blocks of a fixed size in a runtime loop (a few hundred requests: one to three
iterations), so the batch size is no constexpr. The constexprs are configuration
values only; the batch size, strides and pointer alignment are not specialised on
(``free_pages`` is a slice of a slice, at any offset), so no batch compiles a new variant.
"""

import torch
import triton
import triton.language as tl

from .layout import check_tree_config

BLOCK = 1024     # output slots per loop iteration: page 128, topk 8 takes at most two
BLOCK_BS = 128   # earlier requests summed per loop iteration

_RUNTIME_INTS = ["sl_stride", "rpi_stride", "rtt_stride0", "rtt_stride1", "fp_stride"]
_POINTERS = ["seq_lens", "req_pool_indices", "req_to_token", "free_pages", "out_cache_loc"]


@triton.jit(do_not_specialize=_RUNTIME_INTS, do_not_specialize_on_alignment=_POINTERS)
def _tree_alloc_kernel(
    seq_lens, sl_stride,                     # [bs] prefix lengths
    req_pool_indices, rpi_stride,            # [bs]
    req_to_token, rtt_stride0, rtt_stride1,  # [rows, max_context_len]
    free_pages, fp_stride,                   # [>= sum(new_pages)] page ids, read only
    out_cache_loc,                           # [sum(extend_lens)] (written)
    page_size: tl.constexpr,
    topk: tl.constexpr,
    steps: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_BS: tl.constexpr,
):
    pid = tl.program_id(0)
    # Lengths are never negative, so Triton's truncating // is torch's floor division.
    out_start = tl.full([], 0, tl.int64)
    page_start = tl.full([], 0, tl.int64)
    for b0 in range(0, pid, BLOCK_BS):
        offs = b0 + tl.arange(0, BLOCK_BS)
        earlier = offs < pid
        lens = tl.load(seq_lens + offs.to(tl.int64) * sl_stride, mask=earlier, other=0).to(tl.int64)
        last = lens % page_size
        pages = (last + steps + page_size - 1) // page_size
        out_start += tl.sum(tl.where(earlier, pages * (page_size * topk) - last, 0), axis=0)
        # The partial page a prefix already holds is not a new page.
        page_start += tl.sum(tl.where(earlier, pages * topk - (last > 0).to(tl.int64), 0), axis=0)

    prefix = tl.load(seq_lens + pid.to(tl.int64) * sl_stride).to(tl.int64)
    last = prefix % page_size
    pages = (last + steps + page_size - 1) // page_size
    extend_len = pages * (page_size * topk) - last
    # SGLang's min(new_len, ceil(prefix / page) * page) - prefix: the new length reaches
    # at least the end of the partial page, so this is all of its free rest.
    part1 = tl.where(last > 0, page_size - last, 0)
    req = tl.load(req_pool_indices + pid.to(tl.int64) * rpi_stride).to(tl.int64)
    last_loc = tl.load(req_to_token + req * rtt_stride0 + (prefix - 1) * rtt_stride1,
                       mask=last > 0, other=0).to(tl.int64)

    out = out_cache_loc + out_start
    for j0 in range(0, extend_len, BLOCK):
        o = j0 + tl.arange(0, BLOCK).to(tl.int64)
        live = o < extend_len
        whole = o >= part1
        k = tl.where(whole, o - part1, 0)
        page_id = tl.load(free_pages + (page_start + k // page_size) * fp_stride, mask=live & whole, other=0)
        loc = tl.where(whole, page_id.to(tl.int64) * page_size + k % page_size, last_loc + 1 + o)
        tl.store(out + o, loc, mask=live)


def tree_slots_from_free_pages(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                               free_pages: torch.Tensor, num_slots: int, page_size: int, topk: int,
                               steps: int) -> torch.Tensor:
    """``alloc_extend``'s output for the tree extension, read from ``free_pages`` (module docstring).

    ``num_slots`` is ``extend_lens(seq_lens).sum()``, known on the host; ``free_pages`` must
    hold at least ``new_pages(seq_lens).sum()`` pages (the caller checks, on the host).
    Returns an int64 tensor on ``seq_lens``'s device, as ``alloc_extend`` does.
    """
    check_tree_config(page_size=page_size, topk=topk, steps=steps)
    bs = seq_lens.shape[0]
    if req_pool_indices.shape[0] != bs:
        raise RuntimeError(f"batch mismatch: seq_lens {bs}, req_pool_indices {req_pool_indices.shape[0]}")
    out = torch.empty(num_slots, dtype=torch.int64, device=seq_lens.device)
    if bs == 0:
        return out
    _tree_alloc_kernel[(bs,)](
        seq_lens, seq_lens.stride(0),
        req_pool_indices, req_pool_indices.stride(0),
        req_to_token, req_to_token.stride(0), req_to_token.stride(1),
        free_pages, free_pages.stride(0),
        out,
        page_size=page_size, topk=topk, steps=steps, BLOCK=BLOCK, BLOCK_BS=BLOCK_BS,
    )
    return out
