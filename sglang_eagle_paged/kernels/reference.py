"""Plain-torch references for the kernels, written for clarity, not speed."""

import torch

from .assign import PAIR_SENTINEL, TreeDraftLayout
from ..tree_layout import extend_lens, num_new_pages_per_branch, pair_capacity
from .tree_extension import TreeExtension


def assign_tree_draft_slots_ref(req_pool_indices, req_to_token, seq_lens, alloc_loc,
                                page_size: int, topk: int, steps: int) -> TreeDraftLayout:
    """Same contract as :func:`..assign.assign_tree_draft_slots`; mutates ``req_to_token``."""
    bs = seq_lens.shape[0]
    cap = pair_capacity(bs, page_size, topk)
    out_cache_loc = torch.empty(bs * topk * steps, dtype=torch.int64)
    src_loc = torch.full((cap,), PAIR_SENTINEL, dtype=torch.int64)
    tgt_loc = torch.full((cap,), PAIR_SENTINEL, dtype=torch.int64)

    lens = seq_lens.cpu().long().tolist()
    ext = extend_lens(seq_lens.cpu().long(), page_size, topk, steps).tolist()
    pages = num_new_pages_per_branch(seq_lens.cpu().long(), page_size, steps).tolist()
    alloc = alloc_loc.cpu().long()
    start = 0
    for i in range(bs):
        seq_len, last = lens[i], lens[i] % page_size
        span = pages[i] * page_size
        mine = alloc[start:start + ext[i]]
        start += ext[i]
        row = int(req_pool_indices[i])
        fit = max(0, min(ext[i], req_to_token.shape[1] - seq_len))  # clipped to the row
        req_to_token[row, seq_len:seq_len + fit] = mine[:fit].to(req_to_token.dtype).to(req_to_token.device)
        # Indices below are relative to the page start of the prefix's last page.
        region = torch.cat([req_to_token[row, seq_len - last:seq_len].cpu().long(), mine])
        for b in range(topk):
            head = b * span
            out_cache_loc[(i * topk + b) * steps:(i * topk + b + 1) * steps] = region[head + last:head + last + steps]
            if b == 0:
                continue
            base = (i * (topk - 1) + b - 1) * (page_size - 1)
            src_loc[base:base + last] = region[0:last]
            tgt_loc[base:base + last] = region[head:head + last]
    dev = seq_lens.device
    return TreeDraftLayout(out_cache_loc.to(dev), src_loc.to(dev), tgt_loc.to(dev))


def duplicate_kv_pairs_ref(buffers, tgt_loc, src_loc) -> None:
    """Copy row ``src_loc[i]`` to row ``tgt_loc[i]`` of every buffer, skipping negative entries.

    Pairs must be disjoint (no target is also a source): that is what makes the
    one-launch parallel copy order-free, so the reference checks it.
    """
    live = (src_loc >= 0) & (tgt_loc >= 0)
    src, tgt = src_loc[live].long(), tgt_loc[live].long()
    if src.numel() == 0:
        return
    assert not bool(torch.isin(tgt, src).any()), "a duplication target is also a source"
    assert tgt.unique().numel() == tgt.numel(), "a slot is a duplication target twice"
    for buf in buffers:
        buf[tgt] = buf[src]


def move_kv_rows_ref(buffers, tgt_loc, src_loc, chunk: int) -> None:
    """SGLang's in-place-safe move: per chunk of ``chunk`` pairs, all reads before any write."""
    for start in range(0, tgt_loc.numel(), chunk):
        src, tgt = src_loc[start:start + chunk].long(), tgt_loc[start:start + chunk].long()
        for buf in buffers:
            buf[tgt] = buf[src].clone()


def tree_extension_ref(req_to_token, req_pool_indices, seq_lens, page_size: int, topk: int,
                       steps: int) -> TreeExtension:
    """Same contract as :func:`..tree_extension.tree_extension`, one request at a time."""
    new_lens, last_loc = [], []
    for row, prefix in zip(req_pool_indices.tolist(), seq_lens.tolist()):
        pages_per_branch = -(-(prefix % page_size + steps) // page_size)
        new_lens.append(prefix // page_size * page_size + pages_per_branch * page_size * topk)
        last_loc.append(int(req_to_token[row, prefix - 1]) if prefix > 0 else -1)
    like = dict(dtype=seq_lens.dtype, device=seq_lens.device)
    return TreeExtension(torch.tensor(new_lens, **like), torch.tensor(last_loc, **like))


def tree_slots_from_free_pages_ref(req_to_token, req_pool_indices, seq_lens, free_pages, page_size: int,
                                   topk: int, steps: int) -> torch.Tensor:
    """Same contract as ``tests/helpers/tree_alloc.py``, one request at a time:
    the rest of the prefix's partial page, then whole pages from the free list in order."""
    out, next_page = [], 0
    free = free_pages.cpu().long().tolist()
    ext = extend_lens(seq_lens.cpu().long(), page_size, topk, steps).tolist()
    for row, prefix, n in zip(req_pool_indices.tolist(), seq_lens.tolist(), ext):
        last = prefix % page_size
        head = page_size - last if last else 0
        if head:
            last_loc = int(req_to_token[row, prefix - 1])
            out += range(last_loc + 1, last_loc + 1 + head)
        for _ in range((n - head) // page_size):
            out += range(free[next_page] * page_size, (free[next_page] + 1) * page_size)
            next_page += 1
    return torch.tensor(out, dtype=torch.int64, device=seq_lens.device)


def split_verify_slots_ref(tgt, free_slots, num_correct_drafts, page_counts, slot_counts, out_cache_loc,
                           draft_token_num: int, page_size: int) -> None:
    """Same contract as :func:`..verify_bookkeeping.split_verify_slots`, one request at a time:
    each request's first ``num_correct_drafts + 1`` verify slots into ``tgt``, and the first slot of
    each page of its freed tail (which starts on a page boundary) into ``free_slots``, both packed."""
    kept_at = freed_at = 0
    for r, (kept, pages, slots) in enumerate(zip((num_correct_drafts.long() + 1).tolist(),
                                                 page_counts.long().tolist(), slot_counts.long().tolist())):
        row = out_cache_loc[r * draft_token_num:(r + 1) * draft_token_num]
        tgt[kept_at:kept_at + kept] = row[:kept]
        tail = draft_token_num - slots
        free_slots[freed_at:freed_at + pages] = row[tail:tail + pages * page_size:page_size]
        kept_at, freed_at = kept_at + kept, freed_at + pages
