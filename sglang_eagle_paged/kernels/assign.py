"""Cache-location assignment for EAGLE tree drafting on a paged KV cache.

One program per request; each writes only its own ``req_to_token`` row, its own
slice of ``out_cache_loc`` and its own slice of the pair buffers, and reads only
inputs that no program writes (the allocator's output and the prefix part of the
row). So the result cannot depend on program order, unlike SGLang 0.5.12's
``assign_draft_cache_locs``, which rewrites ``out_cache_loc`` in place while other
programs still read it.

Every ``tl.constexpr`` is a configuration value (page size, topk, steps), never a
batch property, and the grid is the batch size: a new mix of prefix lengths
compiles nothing.
"""

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .layout import check_tree_config, pair_capacity

PAIR_SENTINEL = -1
PAIR_SENTINEL_C = tl.constexpr(PAIR_SENTINEL)


@triton.jit
def _exclusive_extend_offset(seq_lens, pid, page_size: tl.constexpr, topk: tl.constexpr,
                             steps: tl.constexpr, BLOCK_BS: tl.constexpr):
    # Where this request's slots start in the allocator's packed output. A loop
    # over fixed blocks instead of next_power_of_2(bs) keeps bs out of the constexprs.
    total = tl.full([], 0, tl.int64)
    for b0 in range(0, pid, BLOCK_BS):
        offs = b0 + tl.arange(0, BLOCK_BS)
        lens = tl.load(seq_lens + offs, mask=offs < pid, other=0).to(tl.int64)
        last = lens % page_size
        pages = (last + steps + page_size - 1) // page_size
        ext = tl.where(offs < pid, pages * page_size * topk - last, 0)
        total += tl.sum(ext, axis=0)
    return total


@triton.jit(do_not_specialize=["pool_len"])
def _assign_tree_draft_slots_kernel(
    req_pool_indices,   # [bs]
    req_to_token,       # [rows, pool_len] int32
    seq_lens,           # [bs] prefix lengths
    alloc_loc,          # [sum(extend_lens)] allocator output, packed per request
    out_cache_loc,      # [bs * topk * steps]
    src_loc,            # [bs * (topk - 1) * (page_size - 1)]
    tgt_loc,            # same
    pool_len,
    page_size: tl.constexpr,
    topk: tl.constexpr,
    steps: tl.constexpr,
    PAGE_POW2: tl.constexpr,
    STEPS_POW2: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_BS: tl.constexpr,
):
    pid = tl.program_id(0)
    seq_len = tl.load(seq_lens + pid).to(tl.int64)
    last_page_len = seq_len % page_size
    pages = (last_page_len + steps + page_size - 1) // page_size
    branch_span = pages * page_size  # slots per branch, from the page start
    extend_len = branch_span * topk - last_page_len
    start = _exclusive_extend_offset(seq_lens, pid, page_size, topk, steps, BLOCK_BS)
    my_alloc = alloc_loc + start
    row = req_to_token + tl.load(req_pool_indices + pid).to(tl.int64) * pool_len

    # 1. The row past the prefix: all branches' pages, exactly as allocated.
    #    SGLang sizes rows for context + draft tokens, not for topk branches of
    #    whole pages: near the context limit the tail would spill into the next
    #    request's row, so it is clipped to this row.
    for j0 in range(0, extend_len, BLOCK):
        offs = j0 + tl.arange(0, BLOCK)
        m = (offs < extend_len) & (seq_len + offs < pool_len)
        loc = tl.load(my_alloc + offs, mask=m)
        tl.store(row + seq_len + offs, loc.to(tl.int32), mask=m)

    # 2. Draft slots, [bs, topk, steps]. In alloc_loc, branch b's page start sits at
    #    b * branch_span - last_page_len, and its drafts begin last_page_len later.
    s = tl.arange(0, STEPS_POW2)
    sm = s < steps
    for b in tl.static_range(topk):
        loc = tl.load(my_alloc + b * branch_span + s, mask=sm)
        tl.store(out_cache_loc + (pid * topk + b) * steps + s, loc, mask=sm)

    # 3. Duplication pairs: the prefix's partial page -> the head of branches 1..topk-1.
    #    Every capacity entry is written, unused ones with the sentinel, so the
    #    buffers need no clearing and their length is known on the host.
    if page_size > 1:
        o = tl.arange(0, PAGE_POW2)
        slot_in_cap = o < page_size - 1
        live = o < last_page_len
        src = tl.load(row + seq_len - last_page_len + o, mask=live, other=0).to(tl.int64)
        src = tl.where(live, src, PAIR_SENTINEL_C)
        for b in tl.static_range(1, topk):
            tgt = tl.load(my_alloc + b * branch_span - last_page_len + o, mask=live, other=0).to(tl.int64)
            tgt = tl.where(live, tgt, PAIR_SENTINEL_C)
            base = (pid * (topk - 1) + (b - 1)) * (page_size - 1)
            tl.store(src_loc + base + o, src, mask=slot_in_cap)
            tl.store(tgt_loc + base + o, tgt, mask=slot_in_cap)



@dataclass
class TreeDraftLayout:
    """Outputs of :func:`assign_tree_draft_slots`.

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
    _assign_tree_draft_slots_kernel[(bs,)](
        req_pool_indices,
        req_to_token,
        seq_lens,
        alloc_loc,
        out.out_cache_loc,
        out.src_loc,
        out.tgt_loc,
        req_to_token.shape[1],
        page_size=page_size,
        topk=topk,
        steps=steps,
        PAGE_POW2=triton.next_power_of_2(max(page_size, 2)),
        STEPS_POW2=triton.next_power_of_2(steps),
        BLOCK=1024,
        BLOCK_BS=128,
    )
    return out
