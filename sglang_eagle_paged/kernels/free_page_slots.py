"""The slots SGLang's paged allocator would hand out for a tree-draft extension: Triton helpers.

``PagedTokenToKVPoolAllocator.alloc_extend``, asked for the extension (``prefix_lens = seq_lens``,
the tree's page-aligned new lengths, ``last_loc`` from ``req_to_token``), returns per request ``r``
(``prefix = seq_lens[r]``, ``last = prefix % page``), packed in batch order::

    part 1: last_loc + 1 ... (page - last slots, when last > 0: the rest of the partial page)
    part 2: free_pages[page_start[r] + k // page] * page + k % page, for the remaining slots

with ``out_start`` and ``page_start`` exclusive prefix sums over the requests before ``r`` of
``extend_len`` and ``new_pages`` (:mod:`.layout`). The new length is page-aligned, so SGLang's
part 3 (a new partial page) never happens.

The formula lives here only: the test helper ``tests/helpers/tree_alloc.py`` writes it out as a tensor, and :mod:`.assign`'s
free-page variant evaluates it where each slot is used, so no such tensor is ever built.
Lengths are never negative, so Triton's truncating ``//`` and ``%`` are torch's floor ones.
"""

import triton
import triton.language as tl

BLOCK_BS = 128  # earlier requests summed per loop iteration


@triton.jit
def _extension_shape(prefix, page_size: tl.constexpr, topk: tl.constexpr, steps: tl.constexpr):
    """``(last, pages per branch, extend_len, new pages)`` of prefix lengths (:mod:`.layout`)."""
    last = prefix % page_size
    pages = (last + steps + page_size - 1) // page_size
    extend_len = pages * (page_size * topk) - last
    # The partial page a prefix already holds is not a new page.
    new_pages = pages * topk - (last > 0).to(tl.int64)
    return last, pages, extend_len, new_pages


@triton.jit
def _request_starts(seq_lens, sl_stride, pid, page_size: tl.constexpr, topk: tl.constexpr,
                    steps: tl.constexpr, BLOCK_BS: tl.constexpr):
    """Request ``pid``'s ``(out_start, page_start)``: where its slots start in the allocator's packed
    output, and its first page in the free list."""
    # A runtime loop over fixed blocks, not one block of next_power_of_2(bs): the batch size
    # stays out of the constexprs (a few hundred requests: one to three iterations).
    out_start = tl.full([], 0, tl.int64)
    page_start = tl.full([], 0, tl.int64)
    for b0 in range(0, pid, BLOCK_BS):
        offs = b0 + tl.arange(0, BLOCK_BS)
        earlier = offs < pid
        lens = tl.load(seq_lens + offs.to(tl.int64) * sl_stride, mask=earlier, other=0).to(tl.int64)
        _, _, extend_len, new_pages = _extension_shape(lens, page_size, topk, steps)
        out_start += tl.sum(tl.where(earlier, extend_len, 0), axis=0)
        page_start += tl.sum(tl.where(earlier, new_pages, 0), axis=0)
    return out_start, page_start


@triton.jit
def _last_loc(row, rtt_stride1, prefix, last):
    """The prefix's last slot, where its last page is partial (part 1 continues it); else 0."""
    return tl.load(row + (prefix - 1) * rtt_stride1, mask=last > 0, other=0).to(tl.int64)


@triton.jit
def _free_page_slots(o, mask, last, last_loc, free_pages, fp_stride, page_start, page_size: tl.constexpr):
    """The slots at offsets ``o`` of one request's extension (``mask``: the offsets to read)."""
    o = o.to(tl.int64)
    # SGLang's min(new_len, ceil(prefix / page) * page) - prefix: the new length reaches
    # at least the end of the partial page, so part 1 is all of its free rest.
    part1 = tl.where(last > 0, page_size - last, 0)
    whole = o >= part1
    k = tl.where(whole, o - part1, 0)
    page_id = tl.load(free_pages + (page_start + k // page_size) * fp_stride, mask=mask & whole, other=0)
    return tl.where(whole, page_id.to(tl.int64) * page_size + k % page_size, last_loc + 1 + o)
