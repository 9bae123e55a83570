"""The (target, source) slot pairs of SGLang's v2 prefix-tail duplication, without a host sync.

SGLang's ``duplicate_prefix_tail_to_draft_branches`` selects the live pairs with a boolean
mask, which makes the host wait for the device to learn how many there are. Here every
request contributes a fixed ``(topk - 1) * (page_size - 1)`` entries (the most a prefix tail
can hold: ``last_page <= page_size - 1``), the dead ones set to -1, which the duplication
kernel skips. The live entries come out in SGLang's order: request, branch, offset.

Only torch ops whose result sizes the host already knows: gather, arange, where.
"""

import torch

SENTINEL = -1


def pair_capacity(bs: int, topk: int, page_size: int) -> int:
    """Entries of each pair buffer: every slot that can hold a prefix tail, in every branch but the first."""
    return bs * max(topk - 1, 0) * max(page_size - 1, 0)


def tail_pairs(rows: torch.Tensor, prefix_base: torch.Tensor, last_page: torch.Tensor,
               num_new_pages: torch.Tensor, topk: int, page_size: int):
    """``(tgt, src)``: slot ``src[i]``'s KV goes to slot ``tgt[i]``; -1 in both where there is nothing to copy.

    ``rows[r]`` is request r's ``req_to_token`` row; its prefix tail is at positions
    ``[prefix_base[r], prefix_base[r] + last_page[r])`` and branch b's first page starts at
    ``prefix_base[r] + b * num_new_pages[r] * page_size``. Both buffers have the dtype of
    ``rows`` and :func:`pair_capacity` entries.
    """
    bs = rows.shape[0]
    width = page_size - 1
    if bs == 0 or topk <= 1 or width <= 0:
        empty = rows.new_empty((0,))
        return empty, empty
    device = rows.device
    off = torch.arange(width, device=device, dtype=torch.int64).view(1, 1, width)
    branch = torch.arange(1, topk, device=device, dtype=torch.int64).view(1, topk - 1, 1)
    base = prefix_base.to(torch.int64).view(bs, 1, 1)
    live = off < last_page.to(torch.int64).view(bs, 1, 1)               # (bs, 1, width)
    live = live.expand(bs, topk - 1, width)
    src_pos = (base + off).expand(bs, topk - 1, width)
    tgt_pos = base + branch * (num_new_pages.to(torch.int64).view(bs, 1, 1) * page_size) + off
    # Dead entries read column 0: a gather never leaves the row, whatever the row's width.
    src_pos = torch.where(live, src_pos, 0).reshape(bs, -1)
    tgt_pos = torch.where(live, tgt_pos, 0).reshape(bs, -1)
    src = torch.gather(rows, 1, src_pos).reshape(-1)
    tgt = torch.gather(rows, 1, tgt_pos).reshape(-1)
    live = live.reshape(-1)
    return torch.where(live, tgt, SENTINEL), torch.where(live, src, SENTINEL)


def tail_pairs_reference(rows, prefix_base, last_page, num_new_pages, topk: int, page_size: int):
    """The live pairs, in order, by plain Python loops over host copies (for tests only)."""
    rows, prefix_base = rows.tolist(), prefix_base.tolist()
    last_page, num_new_pages = last_page.tolist(), num_new_pages.tolist()
    tgt, src = [], []
    for r, row in enumerate(rows):
        for b in range(1, topk):
            for o in range(last_page[r]):
                src.append(row[prefix_base[r] + o])
                tgt.append(row[prefix_base[r] + b * num_new_pages[r] * page_size + o])
    return tgt, src
