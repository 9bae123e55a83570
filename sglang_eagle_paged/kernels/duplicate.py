"""One-launch KV duplication over (pair block x K/V buffer) for an MHA pool.

SGLang 0.5.12's ``copy_all_layer_kv_cache_tiled`` gives each program one byte tile
of one buffer for *all* pairs (its pair count is a ``tl.constexpr`` rounded to a
power of two, so each new length compiles a variant, and it launches once per 256
pairs). Here each program copies whole rows for a block of pairs, with wide
integer loads, so the grid grows with the number of pairs and the bandwidth with it.
The pair count is a runtime argument excluded from specialisation: any length, one
compiled kernel per pool layout.
"""

from dataclasses import dataclass
from typing import Sequence

import torch
import triton
import triton.language as tl

from .launch import launch

_INT_TYPES = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}
_TL_TYPES = {8: tl.int64, 4: tl.int32, 2: tl.int16, 1: tl.uint8}


# For kernels over (table, src_loc, tgt_loc, num_pairs): nothing value- or alignment-specialised
# (the rows' addresses come from the table, not these arguments' alignment), so one variant per
# configuration, which .launch can reuse directly.
PAIR_KERNEL_OPTIONS = dict(do_not_specialize=["num_pairs"],
                           do_not_specialize_on_alignment=["buf_ptrs", "buf_row_elems", "src_loc", "tgt_loc"])


@triton.jit(**PAIR_KERNEL_OPTIONS)
def _duplicate_kv_kernel(
    buf_ptrs,        # [n_buffers] int64 base addresses
    buf_row_elems,   # [n_buffers] int64 row length in ELEM units
    src_loc,
    tgt_loc,
    num_pairs,
    ELEM: tl.constexpr,
    ROW_ELEMS_MAX: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    pid_p = tl.program_id(0)
    buf = tl.program_id(1)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    in_range = offs_p < num_pairs
    src = tl.load(src_loc + offs_p, mask=in_range, other=-1).to(tl.int64)
    tgt = tl.load(tgt_loc + offs_p, mask=in_range, other=-1).to(tl.int64)
    live = (src >= 0) & (tgt >= 0)
    if tl.max(live.to(tl.int32), axis=0) == 0:
        return  # a block of padding: the common case for short last pages
    base = tl.load(buf_ptrs + buf).to(tl.pointer_type(ELEM))
    row = tl.load(buf_row_elems + buf)
    for e0 in tl.static_range(0, ROW_ELEMS_MAX, BLOCK_E):
        offs_e = e0 + tl.arange(0, BLOCK_E)
        m = live[:, None] & (offs_e < row)[None, :]
        vals = tl.load(base + src[:, None] * row + offs_e[None, :], mask=m)
        tl.store(base + tgt[:, None] * row + offs_e[None, :], vals, mask=m)


@dataclass
class KVBufferTable:
    """Device-side description of a pool's K and V buffers, built once per pool."""

    ptrs: torch.Tensor        # int64 [n]
    row_elems: torch.Tensor   # int64 [n]
    elem_bytes: int
    row_elems_max: int
    keys: tuple               # (data_ptr, row_bytes) per buffer; its length is the grid's layer axis
    block_p: int = 0          # launch shape, fixed per table: nothing left to decide per call
    block_e: int = 0

    def __post_init__(self):
        self.block_p, self.block_e = _block_sizes(self.row_elems_max)

    def constexprs(self) -> dict:
        """What a row-copying kernel over this table is compiled for: lane type, widest row, launch shape."""
        return dict(ELEM=_TL_TYPES[self.elem_bytes], ROW_ELEMS_MAX=self.row_elems_max, BLOCK_P=self.block_p,
                    BLOCK_E=self.block_e)

    @classmethod
    def from_buffers(cls, buffers: Sequence[torch.Tensor]) -> "KVBufferTable":
        if not buffers:
            raise ValueError("no KV buffers")
        device = buffers[0].device
        if not all(b.is_contiguous() for b in buffers):
            raise ValueError("KV buffers must be contiguous")
        ptrs, row_bytes = map(list, zip(*_keys(buffers)))
        # Widest integer that divides every row and base address: 8-byte lanes
        # (16-byte vector accesses after coalescing) for every real pool layout.
        elem = 8
        while elem > 1 and any(x % elem for x in row_bytes + ptrs):
            elem //= 2
        row_elems = [r // elem for r in row_bytes]
        return cls(
            ptrs=torch.tensor(ptrs, dtype=torch.int64, device=device),
            row_elems=torch.tensor(row_elems, dtype=torch.int64, device=device),
            elem_bytes=elem,
            row_elems_max=max(row_elems),
            keys=tuple(zip(ptrs, row_bytes)),
        )


def _keys(buffers) -> tuple:
    # (address, row bytes) per buffer; stride(0) is the row length of a contiguous buffer
    return tuple((b.data_ptr(), b.stride(0) * b.element_size()) for b in buffers)


def _block_sizes(row_elems_max: int):
    block_e = min(triton.next_power_of_2(row_elems_max), 512)
    # about 4 KiB of lanes per pair block per tile keeps registers modest
    block_p = max(1, min(16, 512 // block_e))
    return block_p, block_e


def duplicate_kv_pairs(table: KVBufferTable, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
    """Copy row ``src_loc[i]`` to ``tgt_loc[i]`` in every buffer of ``table``.

    Negative entries are skipped, so fixed-capacity pair buffers pass straight in.
    Pairs must be disjoint (no target is also a source of another pair); the
    assignment kernel guarantees it for tree drafting.
    """
    n = tgt_loc.numel()
    if n == 0:
        return
    grid = (triton.cdiv(n, table.block_p), len(table.keys))
    launch(_duplicate_kv_kernel, grid, (table.ptrs, table.row_elems, src_loc, tgt_loc, n), table.constexprs(),
           num_warps=4)
