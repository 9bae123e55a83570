"""FA3's draft-decode metadata in the per-token form (fa3 in place, the dense draft layout): every
step's, in one Triton launch.

SGLang's FA3 draft decode at ``topk > 1`` attends in two passes merged by their log-sum-exp. At
page > 1 its builders split them at the prefix's partial last page (:mod:`.draft_decode_metadata`
says how). The per-token form (``adapters/v2/fa3_in_place.py`` explains why it reads the same keys)
is what SGLang's builders followed by ``fa3_in_place.rewrite_draft_metadata`` leave:

- first pass: the whole prefix, ``cache_seqlens[r] = seq_lens[r]``; its page table SGLang's own,
  ``page_table[r, c] = req_to_token[req_pool_indices[r], strided_indices[c]] // page_size`` for
  ``c < max_seq_pages`` (the columns past it untouched);
- expand pass: the branch's own draft slots, read one slot per "page" (FA3 given a page-size-1 view
  of the KV buffer): ``cache_seqlens[z] = decode_length`` and ``page_table[z, j] = cache_loc[z, j]``
  for ``j < decode_length``; a row past ``cache_loc``'s (a CUDA graph's padding) reads slot 0, the
  pool's padding slot. Columns ``>= decode_length`` are left as they are: nothing reads them.

Worked example (page 4, topk 2, steps 3, step 1 so ``decode_length`` 2; one request with
``seq_lens`` 6 in pages 7, 9 and 10, dense draft slots at positions 6 .. 11 = slots 38, 39, 40 | 41, 42, 43)::

    first pass:  cache_seqlens [6]        page_table [[7, 9, ...]]    (slots 28..31, 36, 37)
    expand pass: cache_seqlens [2, 2]     page_table [[38, 39, .], [41, 42, .]]

``cache_loc`` is ``out_cache_loc`` viewed ``(rows, steps)``, branch-major; it may hold fewer rows
than the metadata (0.5.17 passes a padded replay the batch's own). Every step's buffers reach the
kernel through :class:`.draft_decode_metadata.DraftStepTable` (one row of addresses per step, built
once per batch size), so one launch writes a draft round and nothing here reads the device from the
host: the launch is sync-free and can run before a CUDA graph's replay. Batch size,
``max_seq_pages`` and strides are runtime arguments Triton does not specialise on.
:func:`per_token_draft_metadata_reference` is the same writes in plain torch.
"""

from typing import Sequence

import torch
import triton
import triton.language as tl

from .draft_decode_metadata import (
    _CS, _CS_STRIDE, _DECODE_LENGTH, _ECS, _ECS_STRIDE, _EPT, _EPT_STRIDE0, _EPT_STRIDE1, _FIELDS, _PT,
    _PT_STRIDE0, _PT_STRIDE1, _SI, _SI_STRIDE, BLOCK_COLS, DraftStep, DraftStepTable, _int32_ptr,
    _write_prefix_pages, table_launch,
)
from .launch import launch

_RUNTIME_INTS = ["sl_stride", "rpi_stride", "rtt_stride0", "rtt_stride1", "n_cols",
                 "cl_stride0", "cl_stride1", "num_seqs", "bs", "n_exp"]
_POINTERS = ["steps", "seq_lens", "req_pool_indices", "req_to_token", "cache_loc"]


@triton.jit
def _write_step(
    row, blk,
    seq_lens, sl_stride, req_pool_indices, rpi_stride, req_to_token, rtt_stride0, rtt_stride1,
    n_cols, cache_loc, cl_stride0, cl_stride1, num_seqs, bs, n_exp,
    cache_seqlens, cs_stride, page_table, pt_stride0, pt_stride1,
    exp_cache_seqlens, ecs_stride, exp_page_table, ept_stride0, ept_stride1,
    strided_indices, si_stride, decode_length,
    page_size: tl.constexpr, STEPS_POW2: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    """Program (row, blk)'s cells of one step's per-token metadata."""
    if blk == 0:
        if row < n_exp:  # branch ``row``: its first decode_length draft slots, one per "page"
            tl.store(exp_cache_seqlens + row * ecs_stride, decode_length.to(tl.int32))
            j = tl.arange(0, STEPS_POW2)
            live = j < decode_length
            slot = tl.load(cache_loc + row * cl_stride0 + j * cl_stride1, mask=live & (row < num_seqs), other=0)
            tl.store(exp_page_table + row * ept_stride0 + j * ept_stride1, slot.to(tl.int32), mask=live)
        if row < bs:  # request ``row``: the whole prefix, its partial last page too
            tl.store(cache_seqlens + row * cs_stride, tl.load(seq_lens + row * sl_stride).to(tl.int32))

    if row < bs:  # SGLang's page table of the prefix, as its builder writes it
        _write_prefix_pages(row, blk, req_pool_indices, rpi_stride, req_to_token, rtt_stride0, rtt_stride1,
                            n_cols, page_table, pt_stride0, pt_stride1, strided_indices, si_stride,
                            page_size, BLOCK_COLS)


@triton.jit(do_not_specialize=_RUNTIME_INTS, do_not_specialize_on_alignment=_POINTERS)
def _per_token_all_steps_kernel(
    steps,                                      # [N_STEPS, FIELDS] int64 (DraftStepTable)
    seq_lens, sl_stride,                        # [bs]
    req_pool_indices, rpi_stride,               # [bs]
    req_to_token, rtt_stride0, rtt_stride1,     # [pool, max_context_len]
    n_cols,                                     # first-pass page-table columns to write
    cache_loc, cl_stride0, cl_stride1, num_seqs,  # [num_seqs, steps]
    bs,
    n_exp,                                      # expand rows (bs * topk)
    page_size: tl.constexpr,
    STEPS_POW2: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    N_STEPS: tl.constexpr,
    FIELDS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1)
    for s in tl.static_range(N_STEPS):
        step = steps + s * FIELDS
        _write_step(row, blk,
                    seq_lens, sl_stride, req_pool_indices, rpi_stride, req_to_token, rtt_stride0, rtt_stride1,
                    n_cols, cache_loc, cl_stride0, cl_stride1, num_seqs, bs, n_exp,
                    _int32_ptr(step, _CS), tl.load(step + _CS_STRIDE),
                    _int32_ptr(step, _PT), tl.load(step + _PT_STRIDE0), tl.load(step + _PT_STRIDE1),
                    _int32_ptr(step, _ECS), tl.load(step + _ECS_STRIDE),
                    _int32_ptr(step, _EPT), tl.load(step + _EPT_STRIDE0), tl.load(step + _EPT_STRIDE1),
                    tl.load(step + _SI).to(tl.pointer_type(tl.int64)), tl.load(step + _SI_STRIDE),
                    tl.load(step + _DECODE_LENGTH),
                    page_size, STEPS_POW2, BLOCK_COLS)


def _check_widths(steps: Sequence[DraftStep], cache_loc: torch.Tensor) -> None:
    # What the rewrite's ``page_table[:, :decode_length].copy_(cache_loc[:, :decode_length])`` rejects.
    for s in steps:
        if not 1 <= s.decode_length <= min(cache_loc.shape[1], s.expand_page_table.shape[1]):
            raise RuntimeError(f"decode_length {s.decode_length} does not fit cache_loc {tuple(cache_loc.shape)} "
                               f"and expand page_table {tuple(s.expand_page_table.shape)}")


def per_token_draft_metadata_all_steps(
    steps: DraftStepTable,  # every step's outputs, modified
    seq_lens: torch.Tensor,  # (bs,)
    req_pool_indices: torch.Tensor,  # (bs,)
    req_to_token: torch.Tensor,
    max_seq_pages: int,
    cache_loc: torch.Tensor,  # (rows <= bs * topk, speculative_num_steps)
    topk: int,
    page_size: int,
) -> None:
    """Every step of ``steps`` in the per-token form (module docstring), in one launch."""
    _check_widths(steps.steps, cache_loc)
    plan = table_launch(steps, seq_lens, req_pool_indices, req_to_token, max_seq_pages, cache_loc, topk, page_size)
    if plan is None:
        return
    grid, args, n_loc = plan
    launch(_per_token_all_steps_kernel, grid, args + (seq_lens.shape[0] * topk,),
           dict(page_size=page_size, STEPS_POW2=triton.next_power_of_2(max(n_loc, 1)), BLOCK_COLS=BLOCK_COLS,
                N_STEPS=len(steps.steps), FIELDS=_FIELDS), num_warps=1)


def per_token_draft_metadata_reference(
    steps: Sequence[DraftStep],
    seq_lens: torch.Tensor,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    max_seq_pages: int,
    cache_loc: torch.Tensor,
    topk: int,
    page_size: int,
) -> None:
    """The same writes in plain torch, step after step."""
    _check_widths(steps, cache_loc)
    for s in steps:
        s.cache_seqlens.copy_(seq_lens)
        idx = s.strided_indices[:max_seq_pages]
        s.page_table[:, :max_seq_pages].copy_(req_to_token[req_pool_indices[:, None], idx[None, :]] // page_size)
        n, d = s.expand_cache_seqlens.shape[0], s.decode_length
        rows = min(n, cache_loc.shape[0])
        s.expand_cache_seqlens.fill_(d)
        s.expand_page_table[:rows, :d].copy_(cache_loc[:rows, :d])
        s.expand_page_table[rows:n, :d].zero_()
