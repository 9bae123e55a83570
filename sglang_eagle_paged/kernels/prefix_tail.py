"""The v2 worker's prefix-tail duplication in one launch, and its plain-torch reference.

SGLang 0.5.13 .. 0.5.23's ``duplicate_prefix_tail_to_draft_branches`` copies, for request ``r``
and every draft branch ``b >= 1``, the KV of the prefix's partial last page (``rows[r]`` positions
``[prefix_base[r], prefix_base[r] + last_page[r])``) into the first ``last_page[r]`` slots of
branch b's first page (positions shifted by ``b * num_new_pages[r] * page_size``). It selects the
live pairs with boolean masks (host syncs) and copies them through the pool's ``move_kv_cache``.

:func:`duplicate_prefix_tail` does all of it in one launch: each program reads its request's
``last_page``, ``prefix_base`` and ``num_new_pages``, its slots from ``rows``, and copies one
block of tail offsets of one K/V buffer to every branch (one read of the source rows, ``topk - 1``
writes). Nothing runs on the device before it, and the grid is sized from what the host knows
(batch size, page size, the pool's buffer count): programs past a request's tail return at once.
Batch size, topk and page size are runtime arguments: one compiled variant per pool layout and
slot dtype.

The reference builds the same pairs in torch (:func:`tail_pairs`: fixed-capacity buffers, -1 where
there is nothing to copy, no host read) and copies them with
:func:`~sglang_eagle_paged.kernels.reference.duplicate_kv_pairs_ref`.
"""

import torch
import triton
import triton.language as tl

from .duplicate import KVBufferTable
from .launch import launch
from .reference import duplicate_kv_pairs_ref

SENTINEL = -1

_VECTORS = ["rows", "prefix_base", "last_page", "num_new_pages"]


# Every runtime integer and pointer opts out of specialisation (kernels/launch.py's direct path);
# a stride or width of 1 then compiles no variant of its own.
@triton.jit(do_not_specialize=["rows_stride", "rows_width", "base_stride", "last_stride", "pages_stride",
                               "topk", "page_size", "blocks_per_request"],
            do_not_specialize_on_alignment=["buf_ptrs", "buf_row_elems"] + _VECTORS)
def _duplicate_prefix_tail_kernel(
    buf_ptrs,            # [n_buffers] int64 base addresses
    buf_row_elems,       # [n_buffers] int64 row length in ELEM units
    rows,                # [bs, rows_width] slots: each request's req_to_token row
    rows_stride,
    rows_width,
    prefix_base,         # [bs] position of the prefix's last (partial) page
    base_stride,
    last_page,           # [bs] tokens of the prefix in that page (0: page-aligned, nothing to copy)
    last_stride,
    num_new_pages,       # [bs] pages per branch
    pages_stride,
    topk,
    page_size,
    blocks_per_request,  # cdiv(page_size - 1, BLOCK_P): a tail holds at most page_size - 1 tokens
    ELEM: tl.constexpr,
    ROW_ELEMS_MAX: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    pid = tl.program_id(0)
    buf = tl.program_id(1)
    r = (pid // blocks_per_request).to(tl.int64)
    first = (pid % blocks_per_request) * BLOCK_P
    tail = tl.load(last_page + r * last_stride).to(tl.int64)
    if first >= tail:
        return  # past this request's tail: most programs at large pages
    offs = first + tl.arange(0, BLOCK_P)
    live = offs < tail
    row = rows + r * rows_stride
    src_pos = tl.load(prefix_base + r * base_stride).to(tl.int64) + offs
    branch_step = tl.load(num_new_pages + r * pages_stride).to(tl.int64) * page_size
    # Positions outside the row copy nothing (SGLang's gather would raise there): never read
    # another request's row or past the tensor.
    src_ok = live & (src_pos >= 0) & (src_pos < rows_width)
    src = tl.load(row + src_pos, mask=src_ok, other=0).to(tl.int64)
    base = tl.load(buf_ptrs + buf).to(tl.pointer_type(ELEM))
    width = tl.load(buf_row_elems + buf)
    for e0 in tl.static_range(0, ROW_ELEMS_MAX, BLOCK_E):
        offs_e = e0 + tl.arange(0, BLOCK_E)
        in_row = (offs_e < width)[None, :]
        vals = tl.load(base + src[:, None] * width + offs_e[None, :], mask=src_ok[:, None] & in_row)
        for b in range(1, topk):
            tgt_pos = src_pos + b * branch_step
            tgt_ok = src_ok & (tgt_pos < rows_width)
            tgt = tl.load(row + tgt_pos, mask=tgt_ok, other=0).to(tl.int64)
            tl.store(base + tgt[:, None] * width + offs_e[None, :], vals, mask=tgt_ok[:, None] & in_row)


def duplicate_prefix_tail(table: KVBufferTable, rows: torch.Tensor, prefix_base: torch.Tensor,
                          last_page: torch.Tensor, num_new_pages: torch.Tensor, topk: int, page_size: int) -> None:
    """SGLang's ``duplicate_prefix_tail_to_draft_branches`` on the K/V buffers of ``table``: one
    launch, no torch op, no host read (module docstring). Sources and targets must be disjoint
    slots, as the paged tree layout makes them."""
    bs = rows.shape[0]
    if bs == 0 or topk <= 1 or page_size <= 1:
        return
    blocks = triton.cdiv(page_size - 1, table.block_p)
    grid = (bs * blocks, len(table.keys))
    launch(_duplicate_prefix_tail_kernel, grid,
           (table.ptrs, table.row_elems, rows, rows.stride(0), rows.shape[1], prefix_base, prefix_base.stride(0),
            last_page, last_page.stride(0), num_new_pages, num_new_pages.stride(0), topk, page_size, blocks),
           table.constexprs(), num_warps=4)


def compile_prefix_tail(table: KVBufferTable, slot_dtype: torch.dtype, index_dtype: torch.dtype = torch.int64) -> None:
    """Compile the variant that serves ``table`` with ``slot_dtype`` rows and ``index_dtype`` positions
    (SGLang's are int64) by a launch whose every tail is empty: no KV changes."""
    device = table.ptrs.device
    zero = torch.zeros((1,), dtype=index_dtype, device=device)
    duplicate_prefix_tail(table, torch.zeros((1, 1), dtype=slot_dtype, device=device), zero, zero, zero, 2, 2)


# ------------------------------------------------------------------ plain-torch reference

def tail_pairs(rows: torch.Tensor, prefix_base: torch.Tensor, last_page: torch.Tensor,
               num_new_pages: torch.Tensor, topk: int, page_size: int):
    """``(tgt, src)``: slot ``src[i]``'s KV goes to slot ``tgt[i]``; -1 in both where there is nothing to copy.

    Every request contributes a fixed ``(topk - 1) * (page_size - 1)`` entries (the most a prefix
    tail can hold), the dead ones -1, so the host knows every size: torch gathers, arange and
    where only, no host read. The live entries come out in SGLang's order: request, branch, offset.
    Both buffers have the dtype of ``rows`` and ``tree_layout.pair_capacity`` entries.
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


def duplicate_prefix_tail_reference(buffers, rows, prefix_base, last_page, num_new_pages, topk: int,
                                    page_size: int) -> None:
    """:func:`duplicate_prefix_tail` in plain torch, on a list of K/V buffers: :func:`tail_pairs`, then
    row copies (the reference copy checks that the pairs are disjoint)."""
    tgt, src = tail_pairs(rows, prefix_base, last_page, num_new_pages, topk, page_size)
    duplicate_kv_pairs_ref(buffers, tgt, src)


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
