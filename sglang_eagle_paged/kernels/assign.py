"""Cache-location assignment for EAGLE tree drafting on a paged KV cache.

One program per request; each writes only its own ``req_to_token`` row, its own
slice of ``out_cache_loc`` and its own slice of the pair buffers, and reads only
inputs that no program writes (the allocator's output or free pages, and the prefix
part of the row). So the result cannot depend on program order, unlike SGLang 0.5.12's
``assign_draft_cache_locs``, which rewrites ``out_cache_loc`` in place while other
programs still read it.

Two variants of one kernel, by where the extension's slots come from:

- :func:`assign_tree_draft_slots`: ``alloc_loc``, what SGLang's allocator returned;
- :func:`assign_tree_draft_slots_from_free_pages`: the allocator's free pages, each slot
  computed where it is used by the formula of :mod:`.free_page_slots` (what ``alloc_extend``
  would return, allocating nothing). This saves the draft step a launch and a tensor
  against ``tree_slots_from_free_pages`` (``tests/helpers/tree_alloc.py``) followed by the first
  variant, with the same results (tested).

Every ``tl.constexpr`` is a configuration value (page size, topk, steps, the variant),
never a batch property, and the grid is the batch size; strides and pointer alignment are
not specialised on either (the free list is a slice at any offset). So a new batch
compiles nothing.
"""

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .free_page_slots import BLOCK_BS, _extension_shape, _free_page_slots, _last_loc, _request_starts
from .launch import launch
from ..tree_layout import check_tree_config, pair_capacity

PAIR_SENTINEL = -1
PAIR_SENTINEL_C = tl.constexpr(PAIR_SENTINEL)

BLOCK = 1024  # row entries per loop iteration

_RUNTIME_INTS = ["rpi_stride", "rtt_stride0", "rtt_stride1", "pool_len", "sl_stride", "alloc_stride"]
_POINTERS = ["req_pool_indices", "req_to_token", "seq_lens", "alloc", "out_cache_loc", "src_loc", "tgt_loc"]


@triton.jit
def _extension_slots(o, mask, alloc, alloc_stride, alloc_start, last, last_loc, page_size: tl.constexpr,
                     FROM_FREE_PAGES: tl.constexpr):
    # The slots at offsets o past the prefix, in the allocator's order: every use in the
    # kernel goes through here, so the row, the draft slots and the pair targets agree.
    if FROM_FREE_PAGES:
        loc = _free_page_slots(o, mask, last, last_loc, alloc, alloc_stride, alloc_start, page_size)
    else:
        loc = tl.load(alloc + (alloc_start + o) * alloc_stride, mask=mask, other=0).to(tl.int64)
    return loc


@triton.jit(do_not_specialize=_RUNTIME_INTS, do_not_specialize_on_alignment=_POINTERS)
def _assign_tree_draft_slots_kernel(
    req_pool_indices, rpi_stride,                      # [bs]
    req_to_token, rtt_stride0, rtt_stride1, pool_len,  # [rows, pool_len] int32
    seq_lens, sl_stride,                               # [bs] prefix lengths
    alloc, alloc_stride,  # FROM_FREE_PAGES: the free pages; else alloc_loc, packed per request
    out_cache_loc,        # [bs * topk * steps]
    src_loc,              # [bs * (topk - 1) * (page_size - 1)]
    tgt_loc,              # same
    page_size: tl.constexpr,
    topk: tl.constexpr,
    steps: tl.constexpr,
    PAGE_POW2: tl.constexpr,
    STEPS_POW2: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_BS: tl.constexpr,
    FROM_FREE_PAGES: tl.constexpr,
):
    pid = tl.program_id(0)
    seq_len = tl.load(seq_lens + pid.to(tl.int64) * sl_stride).to(tl.int64)
    last_page_len, pages, extend_len, _ = _extension_shape(seq_len, page_size, topk, steps)
    branch_span = pages * page_size  # slots per branch, from the page start
    out_start, page_start = _request_starts(seq_lens, sl_stride, pid, page_size, topk, steps, BLOCK_BS)
    row = req_to_token + tl.load(req_pool_indices + pid.to(tl.int64) * rpi_stride).to(tl.int64) * rtt_stride0
    if FROM_FREE_PAGES:
        alloc_start = page_start
        # Safe to read: this program writes its row only from seq_len on.
        last_loc = _last_loc(row, rtt_stride1, seq_len, last_page_len)
    else:
        alloc_start = out_start
        last_loc = tl.full([], 0, tl.int64)  # not used

    # 1. The row past the prefix: all branches' pages, exactly as allocated.
    #    SGLang sizes rows for context + draft tokens, not for topk branches of
    #    whole pages: near the context limit the tail would spill into the next
    #    request's row, so it is clipped to this row.
    for j0 in range(0, extend_len, BLOCK):
        offs = j0 + tl.arange(0, BLOCK)
        m = (offs < extend_len) & (seq_len + offs < pool_len)
        loc = _extension_slots(offs, m, alloc, alloc_stride, alloc_start, last_page_len, last_loc, page_size,
                               FROM_FREE_PAGES)
        tl.store(row + (seq_len + offs) * rtt_stride1, loc.to(tl.int32), mask=m)

    # 2. Draft slots, [bs, topk, steps]. Past the prefix, branch b's page start sits at
    #    b * branch_span - last_page_len, and its drafts begin last_page_len later.
    s = tl.arange(0, STEPS_POW2)
    sm = s < steps
    for b in tl.static_range(topk):
        loc = _extension_slots(b * branch_span + s, sm, alloc, alloc_stride, alloc_start, last_page_len, last_loc,
                               page_size, FROM_FREE_PAGES)
        tl.store(out_cache_loc + (pid * topk + b) * steps + s, loc, mask=sm)

    # 3. Duplication pairs: the prefix's partial page -> the head of branches 1..topk-1.
    #    Every capacity entry is written, unused ones with the sentinel, so the
    #    buffers need no clearing and their length is known on the host.
    if page_size > 1:
        o = tl.arange(0, PAGE_POW2)
        slot_in_cap = o < page_size - 1
        live = o < last_page_len
        src = tl.load(row + (seq_len - last_page_len + o) * rtt_stride1, mask=live, other=0).to(tl.int64)
        src = tl.where(live, src, PAIR_SENTINEL_C)
        for b in tl.static_range(1, topk):
            tgt = _extension_slots(b * branch_span - last_page_len + o, live, alloc, alloc_stride, alloc_start,
                                   last_page_len, last_loc, page_size, FROM_FREE_PAGES)
            tgt = tl.where(live, tgt, PAIR_SENTINEL_C)
            base = (pid * (topk - 1) + (b - 1)) * (page_size - 1)
            tl.store(src_loc + base + o, src, mask=slot_in_cap)
            tl.store(tgt_loc + base + o, tgt, mask=slot_in_cap)


@dataclass
class TreeDraftLayout:
    """Outputs of :func:`assign_tree_draft_slots` and :func:`assign_tree_draft_slots_from_free_pages`.

    ``src_loc``/``tgt_loc`` have the fixed length :func:`pair_capacity`; entries
    equal to :data:`PAIR_SENTINEL` are padding and must be skipped by the copy.
    """

    out_cache_loc: torch.Tensor
    src_loc: torch.Tensor
    tgt_loc: torch.Tensor


def assign_tree_draft_slots(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    alloc_loc: torch.Tensor,
    page_size: int,
    topk: int,
    steps: int,
    out: TreeDraftLayout = None,
) -> TreeDraftLayout:
    """Fill ``req_to_token`` for every branch and return the draft slots and copy pairs.

    ``alloc_loc`` is what SGLang's paged allocator returned for the per-request
    extension lengths of :func:`.layout.extend_lens`. Pass ``out`` to reuse buffers
    (e.g. a persistent workspace); they are overwritten entirely.
    """
    return _assign(req_pool_indices, req_to_token, seq_lens, alloc_loc, page_size, topk, steps, out,
                   from_free_pages=False)


def assign_tree_draft_slots_from_free_pages(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    free_pages: torch.Tensor,
    page_size: int,
    topk: int,
    steps: int,
    out: TreeDraftLayout = None,
) -> TreeDraftLayout:
    """:func:`assign_tree_draft_slots` on the slots SGLang's paged allocator would hand out, in one launch.

    The same result as :func:`assign_tree_draft_slots` given
    ``tree_slots_from_free_pages`` (``tests/helpers/tree_alloc.py``)'s output, without building it; nothing of
    the allocator changes. ``free_pages`` must hold at least ``new_pages(seq_lens).sum()``
    pages (:func:`.layout.new_pages`; the caller checks, on the host).
    """
    return _assign(req_pool_indices, req_to_token, seq_lens, free_pages, page_size, topk, steps, out,
                   from_free_pages=True)


def _assign(req_pool_indices, req_to_token, seq_lens, alloc, page_size, topk, steps, out, from_free_pages):
    check_tree_config(page_size=page_size, topk=topk, steps=steps)
    bs = seq_lens.shape[0]
    device = seq_lens.device
    if out is None:
        cap = pair_capacity(bs, page_size, topk)
        out = TreeDraftLayout(
            out_cache_loc=torch.empty(bs * topk * steps, dtype=torch.int64, device=device),
            src_loc=torch.empty(cap, dtype=torch.int64, device=device),
            tgt_loc=torch.empty(cap, dtype=torch.int64, device=device),
        )
    if bs == 0:
        return out
    launch(_assign_tree_draft_slots_kernel, (bs,), (
        req_pool_indices, req_pool_indices.stride(0),
        req_to_token, req_to_token.stride(0), req_to_token.stride(1), req_to_token.shape[1],
        seq_lens, seq_lens.stride(0),
        alloc, alloc.stride(0),
        out.out_cache_loc,
        out.src_loc,
        out.tgt_loc,
    ), dict(
        page_size=page_size,
        topk=topk,
        steps=steps,
        PAGE_POW2=triton.next_power_of_2(max(page_size, 2)),
        STEPS_POW2=triton.next_power_of_2(steps),
        BLOCK=BLOCK,
        BLOCK_BS=BLOCK_BS,
        FROM_FREE_PAGES=from_free_pages,
    ))
    return out
