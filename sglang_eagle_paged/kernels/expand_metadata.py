"""The "expand" attention metadata of paged tree drafting, in one Triton launch.

SGLang 0.5.12's FA3 backend builds, for every draft step with ``page_size > 1``
and ``topk > 1``, the metadata of the second attention (the one over each
branch's own last page plus its draft tokens) with
``flashattention_backend.draft_decode_set_expand_metadata``, a
``@torch.compile(dynamic=True)`` function. Its device work is tiny, but every
call pays TorchDynamo's guard evaluation and wrapper overhead on the host.
:func:`expand_draft_page_table` has the same effect on its two outputs with a
single kernel launch:

- ``cache_seqlens_int32[i] = decode_length + last_page_lens[i // topk]`` for each
  of the ``bs * topk`` rows;
- per row of ``cache_loc`` (a 1-D ``cache_loc`` is one row): the page ids
  ``cache_loc // page_size`` (floor division, then ``int32``), with consecutive
  repeats collapsed, are written in order to ``page_table[row, 0:k)``. Columns
  ``>= k`` and rows ``>= cache_loc.shape[0]`` are left untouched.

One program per row. The constexprs are configuration values only (``topk``,
``page_size``, the number of columns of ``cache_loc``, i.e.
``speculative_num_steps``); the batch size, ``decode_length``, strides and all
tensor contents are runtime arguments that Triton is told not to specialise on
(values nor pointer alignment), so a new batch size compiles nothing.

One deliberate difference: where a row has more distinct pages than
``page_table`` has columns, torch's ``scatter_`` raises (a device-side assert on
CUDA); the kernel cannot raise, so it writes the pages that fit and drops the
rest rather than writing out of bounds. Every other input torch rejects is
rejected here on the host, before the launch.
"""

import torch
import triton
import triton.language as tl

from .launch import launch
from ..tree_layout import check_tree_config

_RUNTIME_INTS = [
    "cs_stride", "n_lens", "lpl_stride", "lpl_last", "decode_length",
    "pt_stride0", "pt_stride1", "pt_cols", "cl_stride0", "cl_stride1", "num_seqs",
]
_POINTERS = ["cache_seqlens", "last_page_lens", "page_table", "cache_loc"]


@triton.jit
def _floor_div(x, d: tl.constexpr):
    # Python/torch floor division whatever Triton's integer ``//`` rounds to
    # (truncation when compiled): correct a negative remainder.
    q = x // d
    return tl.where(x - q * d < 0, q - 1, q)


@triton.jit
def _store_distinct_pages(page_table, pt_stride0, pt_stride1, pt_cols,
                          cache_loc, cl_stride0, cl_stride1, row, n_slots,
                          page_size: tl.constexpr, STEPS_POW2: tl.constexpr):
    # One row of the expand page table, from the row's first ``n_slots`` (<= STEPS) slots;
    # shared with .draft_decode_metadata's fused kernels.
    s = tl.arange(0, STEPS_POW2)
    live = s < n_slots
    base = cache_loc + row * cl_stride0
    loc = tl.load(base + s * cl_stride1, mask=live, other=0)
    prev = tl.load(base + (s - 1) * cl_stride1, mask=live & (s > 0), other=0)
    page = _floor_div(loc, page_size).to(tl.int32)
    prev_page = _floor_div(prev, page_size).to(tl.int32)
    first = live & ((s == 0) | (page != prev_page))  # first slot of each run
    col = tl.cumsum(first.to(tl.int32), axis=0) - 1
    tl.store(page_table + row * pt_stride0 + col.to(tl.int64) * pt_stride1, page,
             mask=first & (col < pt_cols))


@triton.jit(do_not_specialize=_RUNTIME_INTS, do_not_specialize_on_alignment=_POINTERS)
def _expand_draft_page_table_kernel(
    cache_seqlens,     # [n_lens] (any integer dtype; written)
    cs_stride,
    n_lens,            # entries of cache_seqlens to write
    last_page_lens,    # [bs] (flattened)
    lpl_stride,
    lpl_last,          # last_page_lens.numel() - 1 (clamp: the broadcast case bs * topk == 1)
    decode_length,
    page_table,        # [>= num_seqs, pt_cols] int32 (written)
    pt_stride0,
    pt_stride1,
    pt_cols,
    cache_loc,         # [num_seqs, STEPS]
    cl_stride0,
    cl_stride1,
    num_seqs,
    topk: tl.constexpr,
    page_size: tl.constexpr,
    STEPS: tl.constexpr,
    STEPS_POW2: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)

    if row < n_lens:
        src = tl.minimum(row // topk, lpl_last)
        lpl = tl.load(last_page_lens + src * lpl_stride)
        tl.store(cache_seqlens + row * cs_stride, lpl + decode_length)

    if row < num_seqs:
        _store_distinct_pages(page_table, pt_stride0, pt_stride1, pt_cols,
                              cache_loc, cl_stride0, cl_stride1, row, STEPS,
                              page_size, STEPS_POW2)


def _check(cache_seqlens_int32, page_table, last_page_lens, cache_loc, topk, page_size):
    check_tree_config(topk=topk, page_size=page_size)
    if cache_seqlens_int32.dim() != 1:
        raise ValueError(f"cache_seqlens_int32 must be 1-D, got shape {tuple(cache_seqlens_int32.shape)}")
    n_src = last_page_lens.numel() * topk
    n_dst = cache_seqlens_int32.shape[0]
    if n_src != n_dst and n_src != 1:  # torch's copy_ broadcasts a single value
        raise RuntimeError(f"cache_seqlens_int32 has {n_dst} entries but last_page_lens * topk "
                           f"gives {n_src}")
    if page_table.dim() != 2:
        raise ValueError(f"page_table must be 2-D, got shape {tuple(page_table.shape)}")
    if page_table.dtype != torch.int32:
        raise TypeError(f"page_table must be int32 (the page ids are), got {page_table.dtype}")
    if cache_loc.dim() not in (1, 2):
        raise ValueError(f"cache_loc must be 1-D or 2-D, got shape {tuple(cache_loc.shape)}")
    if cache_loc.dtype.is_floating_point or cache_loc.dtype == torch.bool:
        raise TypeError(f"cache_loc must hold integer slots, got {cache_loc.dtype}")
    num_seqs = cache_loc.shape[0] if cache_loc.dim() == 2 else 1
    if page_table.shape[0] < num_seqs:
        raise RuntimeError(f"page_table has {page_table.shape[0]} rows, cache_loc {num_seqs}")
    devices = {t.device for t in (cache_seqlens_int32, page_table, last_page_lens, cache_loc)}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")


def expand_draft_page_table(
    cache_seqlens_int32: torch.Tensor,  # modified
    page_table: torch.Tensor,  # modified
    last_page_lens: torch.Tensor,
    decode_length: int,
    cache_loc: torch.Tensor,
    topk: int,
    page_size: int,
) -> None:
    """Drop-in for SGLang's ``draft_decode_set_expand_metadata`` (same names and effect).

    Writes ``cache_seqlens_int32`` and ``page_table`` in place with one launch;
    see the module docstring for the exact semantics.
    """
    _check(cache_seqlens_int32, page_table, last_page_lens, cache_loc, topk, page_size)
    decode_length = int(decode_length)
    if cache_loc.dim() == 1:
        cache_loc = cache_loc.unsqueeze(0)
    num_seqs, steps = cache_loc.shape
    if steps == 0:
        num_seqs = 0  # no slots: nothing to write in page_table
    lpl = last_page_lens.reshape(-1)
    n_lens = cache_seqlens_int32.shape[0]
    grid = max(n_lens, num_seqs)
    if grid == 0:
        return
    launch(_expand_draft_page_table_kernel, (grid,), (
        cache_seqlens_int32, cache_seqlens_int32.stride(0), n_lens,
        lpl, lpl.stride(0) if lpl.numel() else 1, max(lpl.numel() - 1, 0),
        decode_length,
        page_table, page_table.stride(0), page_table.stride(1), page_table.shape[1],
        cache_loc, cache_loc.stride(0), cache_loc.stride(1), num_seqs,
    ), dict(topk=topk, page_size=page_size, STEPS=steps, STEPS_POW2=triton.next_power_of_2(max(steps, 1))),
        num_warps=1)


def expand_draft_page_table_reference(
    cache_seqlens_int32: torch.Tensor,
    page_table: torch.Tensor,
    last_page_lens: torch.Tensor,
    decode_length: int,
    cache_loc: torch.Tensor,
    topk: int,
    page_size: int,
) -> None:
    """Plain-torch, row-by-row statement of the same semantics (for tests; slow).

    Unlike the kernel it raises where a row's pages do not fit in ``page_table``.
    """
    lens = last_page_lens.reshape(-1).tolist()
    n = cache_seqlens_int32.shape[0]
    for i in range(n):
        j = i // topk if len(lens) * topk == n else 0  # single value: broadcast
        cache_seqlens_int32[i] = decode_length + lens[j]
    rows = cache_loc.reshape(1, -1) if cache_loc.dim() == 1 else cache_loc
    for r in range(rows.shape[0]):
        pages = torch.div(rows[r].long(), page_size, rounding_mode="floor").to(torch.int32)
        distinct = []
        for p in pages.tolist():
            if not distinct or p != distinct[-1]:
                distinct.append(p)
        if len(distinct) > page_table.shape[1]:
            raise IndexError(f"row {r}: {len(distinct)} pages, page_table has {page_table.shape[1]} columns")
        if distinct:
            page_table[r, :len(distinct)] = torch.tensor(distinct, dtype=page_table.dtype)
