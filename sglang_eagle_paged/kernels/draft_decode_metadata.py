"""FA3's replay metadata for paged tree drafting: one step's, or every step's, in one Triton launch.

What SGLang 0.5.12 does: before each replay of the draft CUDA graph,
``FlashAttentionMultiStepBackend.init_forward_metadata_replay_cuda_graph`` calls
``init_forward_metadata_replay_cuda_graph`` of each of its
``speculative_num_steps - 1`` per-step ``FlashAttentionBackend``\\ s. With
``topk > 1`` and ``page_size > 1`` the draft-decode branch of each call builds
two attention metadata from the same inputs:

- "normal" (the prefix, without each request's partial last page)::

      last_page_lens = seq_lens % page_size
      cache_seqlens_int32.copy_(seq_lens - last_page_lens)
      max_seq_pages = ceil(max(seq_lens_cpu) / page_size)
      page_table[:, :max_seq_pages].copy_(
          req_to_token[req_pool_indices[:, None], strided_indices[None, :max_seq_pages]] // page_size)

  with ``strided_indices = arange(0, max_context_len, page_size)``;
- "expand" (each branch's own last page plus its drafts):
  ``draft_decode_set_expand_metadata(..., last_page_lens, decode_length=step_id + 1,
  cache_loc=out_cache_loc.view(-1, speculative_num_steps), ...)``, i.e. what
  :mod:`.expand_metadata` writes.

Why it is slow: about a dozen small torch ops (each a host dispatch and a
launch) plus a ``@torch.compile(dynamic=True)`` call whose TorchDynamo guards
run on the host every time, a ``.max().item()`` on the CPU lengths, and all of
it repeated for every step: host time, ×(steps - 1), on the critical path of
every draft round.

What :func:`draft_decode_metadata` does instead: the same writes, into the same
buffers, in one launch per step; the caller computes ``max_seq_pages`` once for
all steps (it is the same for every step). Grid: one program per (row, block of
``BLOCK_COLS`` normal page-table columns); row ``r`` covers request ``r`` of the
normal metadata (``r < bs``), branch ``r`` of the expand lengths
(``r < bs * topk``) and row ``r`` of ``cache_loc`` (``r < cache_loc.shape[0]``,
which on a padded replay is the unpadded batch's). Everything outside those
ranges, and normal page-table columns ``>= max_seq_pages``, is left untouched,
as SGLang leaves it. Constexprs are configuration values only; batch size,
``max_seq_pages``, ``decode_length`` and strides are runtime arguments Triton is
told not to specialise on, so no batch size or length compiles a new variant.

What :func:`draft_decode_metadata_all_steps` does: every step's writes in one
launch per draft round. The normal metadata is the same for every step and the
expand metadata differs only in ``decode_length``, but each step's backend owns
(and its CUDA graph reads) its own buffers, so every step's buffers are still
written. They reach the kernel through a :class:`DraftStepTable`: one int64 row
per step with the step's buffer addresses, strides and ``decode_length``, built
once and reused every round (the caller decides when it is stale). Same grid as
above; each program writes its cells of every step's buffers, in step order
(each step through its own ``strided_indices``: equal in SGLang, but only a
device read could tell). The number of steps is a constexpr, a configuration
value like ``STEPS``.

SGLang's v2 releases (0.5.13 ..) build the same metadata through
``init_forward_metadata_out_graph`` with one difference: the expand table is built from each
row's first ``decode_length`` slots (``cache_loc[:, :decode_length]``), not all of them.
``live_slots=True`` does the same (a constexpr: a variant of its own).

Where it cannot match torch: indices torch would reject or wrap
(``req_pool_indices``/``strided_indices`` out of range or negative) are not
checked on the device; SGLang never produces them. A row of ``cache_loc`` with
more distinct pages than the expand table has columns is clipped (see
:mod:`.expand_metadata`). Shape mismatches torch would reject raise here too.
"""

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import torch
import triton
import triton.language as tl

from .expand_metadata import _floor_div, _store_distinct_pages
from .launch import launch

BLOCK_COLS = 128  # normal page-table columns per program

_RUNTIME_INTS = [
    "sl_stride", "rpi_stride", "rtt_stride0", "rtt_stride1", "si_stride",
    "cs_stride", "pt_stride0", "pt_stride1", "n_cols",
    "ecs_stride", "ept_stride0", "ept_stride1", "ept_cols",
    "cl_stride0", "cl_stride1", "num_seqs", "bs", "decode_length",
]
_POINTERS = ["seq_lens", "req_pool_indices", "req_to_token", "strided_indices", "cache_seqlens",
             "page_table", "exp_cache_seqlens", "exp_page_table", "cache_loc"]


@triton.jit
def _write_step(
    row, blk,
    seq_lens, sl_stride, req_pool_indices, rpi_stride, req_to_token, rtt_stride0, rtt_stride1,
    n_cols, cache_loc, cl_stride0, cl_stride1, num_seqs, bs,
    # one step's outputs, its strided_indices and decode_length
    cache_seqlens, cs_stride, page_table, pt_stride0, pt_stride1,
    exp_cache_seqlens, ecs_stride, exp_page_table, ept_stride0, ept_stride1, ept_cols,
    strided_indices, si_stride, decode_length,
    topk: tl.constexpr, page_size: tl.constexpr, STEPS: tl.constexpr, STEPS_POW2: tl.constexpr,
    BLOCK_COLS: tl.constexpr, LIVE_SLOTS: tl.constexpr,
):
    """Program (row, blk)'s cells of one step's metadata: the body of both kernels below."""
    if blk == 0:
        if row < bs * topk:
            seq = tl.load(seq_lens + (row // topk) * sl_stride)
            last_page_len = seq - _floor_div(seq, page_size) * page_size  # torch's % (floor)
            tl.store(exp_cache_seqlens + row * ecs_stride, last_page_len + decode_length)
        if row < num_seqs:
            if LIVE_SLOTS:
                n_slots = tl.minimum(decode_length, STEPS)
            else:
                n_slots = STEPS
            _store_distinct_pages(exp_page_table, ept_stride0, ept_stride1, ept_cols,
                                  cache_loc, cl_stride0, cl_stride1, row, n_slots,
                                  page_size, STEPS_POW2)
        if row < bs:
            seq = tl.load(seq_lens + row * sl_stride)
            tl.store(cache_seqlens + row * cs_stride, _floor_div(seq, page_size) * page_size)

    if row < bs:
        _write_prefix_pages(row, blk, req_pool_indices, rpi_stride, req_to_token, rtt_stride0, rtt_stride1,
                            n_cols, page_table, pt_stride0, pt_stride1, strided_indices, si_stride,
                            page_size, BLOCK_COLS)


@triton.jit
def _write_prefix_pages(row, blk, req_pool_indices, rpi_stride, req_to_token, rtt_stride0, rtt_stride1,
                        n_cols, page_table, pt_stride0, pt_stride1, strided_indices, si_stride,
                        page_size: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """Block ``blk`` of request ``row``'s first-pass page table, as SGLang writes it:
    ``req_to_token[req_pool_indices[row], strided_indices[cols]] // page_size`` for ``cols < n_cols``."""
    cols = blk.to(tl.int64) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    live = cols < n_cols
    req = tl.load(req_pool_indices + row * rpi_stride).to(tl.int64)
    tok = tl.load(strided_indices + cols * si_stride, mask=live, other=0).to(tl.int64)
    slot = tl.load(req_to_token + req * rtt_stride0 + tok * rtt_stride1, mask=live, other=0)
    tl.store(page_table + row * pt_stride0 + cols * pt_stride1, _floor_div(slot, page_size).to(tl.int32), mask=live)


@triton.jit(do_not_specialize=_RUNTIME_INTS, do_not_specialize_on_alignment=_POINTERS)
def _draft_decode_metadata_kernel(
    seq_lens, sl_stride,                        # [bs]
    req_pool_indices, rpi_stride,               # [bs]
    req_to_token, rtt_stride0, rtt_stride1,     # [pool, max_context_len]
    strided_indices, si_stride,                 # [>= n_cols]
    cache_seqlens, cs_stride,                   # normal [bs] (written)
    page_table, pt_stride0, pt_stride1, n_cols,  # normal [bs, >= n_cols] (written)
    exp_cache_seqlens, ecs_stride,              # expand [bs * topk] (written)
    exp_page_table, ept_stride0, ept_stride1, ept_cols,  # expand [>= num_seqs, ept_cols] (written)
    cache_loc, cl_stride0, cl_stride1, num_seqs,  # [num_seqs, STEPS]
    bs,
    decode_length,
    topk: tl.constexpr,
    page_size: tl.constexpr,
    STEPS: tl.constexpr,
    STEPS_POW2: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    LIVE_SLOTS: tl.constexpr,
):
    _write_step(tl.program_id(0).to(tl.int64), tl.program_id(1),
                seq_lens, sl_stride, req_pool_indices, rpi_stride, req_to_token, rtt_stride0, rtt_stride1,
                n_cols, cache_loc, cl_stride0, cl_stride1, num_seqs, bs,
                cache_seqlens, cs_stride, page_table, pt_stride0, pt_stride1,
                exp_cache_seqlens, ecs_stride, exp_page_table, ept_stride0, ept_stride1, ept_cols,
                strided_indices, si_stride, decode_length,
                topk, page_size, STEPS, STEPS_POW2, BLOCK_COLS, LIVE_SLOTS)


def _normal_cols(page_table, strided_indices, max_seq_pages):
    # Widths of SGLang's two sides of ``page_table[:, :m].copy_(gather[:, :m])``.
    m = max(int(max_seq_pages), 0)
    dst, src = min(m, page_table.shape[1]), min(m, strided_indices.shape[0])
    if dst != src:
        raise RuntimeError(f"page_table[:, :{m}] has {dst} columns, strided_indices[:{m}] {src}")
    return src


def _check(cache_seqlens_int32, page_table, expand_cache_seqlens_int32, expand_page_table,
           seq_lens, req_pool_indices, cache_loc, topk, page_size):
    # Only what torch would reject too; cheap, since this runs on every draft round.
    bs = seq_lens.shape[0]
    if req_pool_indices.shape[0] != bs or cache_seqlens_int32.shape[0] != bs or page_table.shape[0] != bs:
        raise RuntimeError(
            f"batch mismatch: seq_lens {bs}, req_pool_indices {req_pool_indices.shape[0]}, "
            f"cache_seqlens {cache_seqlens_int32.shape[0]}, page_table rows {page_table.shape[0]}")
    if expand_cache_seqlens_int32.shape[0] != bs * topk:
        raise RuntimeError(f"expand cache_seqlens has {expand_cache_seqlens_int32.shape[0]} entries, "
                           f"bs * topk = {bs * topk}")
    if cache_loc.dim() != 2 or expand_page_table.shape[0] < cache_loc.shape[0]:
        raise RuntimeError(f"cache_loc {tuple(cache_loc.shape)} must be 2-D with at most "
                           f"{expand_page_table.shape[0]} rows (expand page_table)")
    if page_table.dtype != torch.int32 or expand_page_table.dtype != torch.int32:
        raise TypeError(f"page tables must be int32, got {page_table.dtype} / {expand_page_table.dtype}")
    if page_size < 1 or topk < 1:
        raise ValueError(f"page_size and topk must be positive, got {page_size}, {topk}")


def _launch(cache_seqlens_int32, page_table, expand_cache_seqlens_int32, expand_page_table, seq_lens,
            req_pool_indices, strided_indices, max_seq_pages, cache_loc, topk, page_size):
    """Checks, then ``(grid, n_cols, bs, num_seqs, steps)`` of a launch, or None when there is nothing to write.

    Shared by the per-step and all-steps wrappers (the latter with step 0's tensors), so that
    both size their grids alike."""
    _check(cache_seqlens_int32, page_table, expand_cache_seqlens_int32, expand_page_table,
           seq_lens, req_pool_indices, cache_loc, topk, page_size)
    n_cols = _normal_cols(page_table, strided_indices, max_seq_pages)
    bs = seq_lens.shape[0]
    num_seqs, steps = cache_loc.shape
    if steps == 0:
        num_seqs = 0
    rows = max(bs * topk, num_seqs)
    if rows == 0:
        return None
    return (rows, max(triton.cdiv(n_cols, BLOCK_COLS), 1)), n_cols, bs, num_seqs, steps


def draft_decode_metadata(
    cache_seqlens_int32: torch.Tensor,  # normal, modified
    page_table: torch.Tensor,  # normal, modified
    expand_cache_seqlens_int32: torch.Tensor,  # modified
    expand_page_table: torch.Tensor,  # modified
    seq_lens: torch.Tensor,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    strided_indices: torch.Tensor,
    max_seq_pages: int,
    cache_loc: torch.Tensor,
    decode_length: int,
    topk: int,
    page_size: int,
    live_slots: bool = False,
) -> None:
    """One draft step's normal and expand metadata (module docstring), in one launch.

    ``seq_lens`` and ``req_pool_indices`` hold exactly the ``bs`` rows to write;
    ``cache_loc`` is ``out_cache_loc.view(-1, speculative_num_steps)``. ``live_slots``: the expand
    page table from each row's first ``decode_length`` slots only, as SGLang's v2 releases slice
    ``cache_loc`` (0.5.12 hands every slot of the row).
    """
    plan = _launch(cache_seqlens_int32, page_table, expand_cache_seqlens_int32, expand_page_table, seq_lens,
                     req_pool_indices, strided_indices, max_seq_pages, cache_loc, topk, page_size)
    if plan is None:
        return
    grid, n_cols, bs, num_seqs, steps = plan
    launch(_draft_decode_metadata_kernel, grid, (
        seq_lens, seq_lens.stride(0),
        req_pool_indices, req_pool_indices.stride(0),
        req_to_token, req_to_token.stride(0), req_to_token.stride(1),
        strided_indices, strided_indices.stride(0),
        cache_seqlens_int32, cache_seqlens_int32.stride(0),
        page_table, page_table.stride(0), page_table.stride(1), n_cols,
        expand_cache_seqlens_int32, expand_cache_seqlens_int32.stride(0),
        expand_page_table, expand_page_table.stride(0), expand_page_table.stride(1),
        expand_page_table.shape[1],
        cache_loc, cache_loc.stride(0), cache_loc.stride(1), num_seqs,
        bs, int(decode_length),
    ), dict(topk=topk, page_size=page_size, STEPS=steps, STEPS_POW2=triton.next_power_of_2(max(steps, 1)),
            BLOCK_COLS=BLOCK_COLS, LIVE_SLOTS=live_slots), num_warps=1)


def draft_decode_metadata_reference(
    cache_seqlens_int32: torch.Tensor,
    page_table: torch.Tensor,
    expand_cache_seqlens_int32: torch.Tensor,
    expand_page_table: torch.Tensor,
    seq_lens: torch.Tensor,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    strided_indices: torch.Tensor,
    max_seq_pages: int,
    cache_loc: torch.Tensor,
    decode_length: int,
    topk: int,
    page_size: int,
    live_slots: bool = False,
) -> None:
    """SGLang 0.5.12's ops for the same writes, transcribed (the expand part is the
    body of ``draft_decode_set_expand_metadata``, run eagerly)."""
    last_page_lens = seq_lens % page_size
    cache_seqlens_int32.copy_(seq_lens - last_page_lens)
    idx = strided_indices[:max_seq_pages]
    page_table[:, :max_seq_pages].copy_(req_to_token[req_pool_indices[:, None], idx[None, :]] // page_size)

    expand_cache_seqlens_int32.copy_(decode_length + last_page_lens.repeat_interleave(topk))
    if live_slots:
        cache_loc = cache_loc[:, :decode_length]
    pages = (cache_loc // page_size).to(torch.int32)
    mask = torch.ones_like(pages, dtype=torch.bool)
    mask[:, 1:] = pages[:, 1:] != pages[:, :-1]
    positions = mask.cumsum(dim=1) - 1
    expand_page_table[:pages.shape[0], :].scatter_(1, positions, pages)


# ---------------------------------------------------------------- every step in one launch

class DraftStep(NamedTuple):
    """One step's outputs (written) and the two inputs its backend holds itself."""

    cache_seqlens: torch.Tensor  # normal [bs] int32
    page_table: torch.Tensor  # normal [bs, cols] int32
    expand_cache_seqlens: torch.Tensor  # [bs * topk] int32
    expand_page_table: torch.Tensor  # [rows, decode_length + 1] int32
    strided_indices: torch.Tensor  # int64
    decode_length: int


# Columns of a DraftStepTable row (tl.constexpr: the kernel reads them as globals).
_CS, _CS_STRIDE = tl.constexpr(0), tl.constexpr(1)
_PT, _PT_STRIDE0, _PT_STRIDE1 = tl.constexpr(2), tl.constexpr(3), tl.constexpr(4)
_ECS, _ECS_STRIDE = tl.constexpr(5), tl.constexpr(6)
_EPT, _EPT_STRIDE0, _EPT_STRIDE1, _EPT_COLS = tl.constexpr(7), tl.constexpr(8), tl.constexpr(9), tl.constexpr(10)
_SI, _SI_STRIDE = tl.constexpr(11), tl.constexpr(12)
_DECODE_LENGTH = tl.constexpr(13)
_FIELDS = 14


@dataclass
class DraftStepTable:
    """Every step's buffers as one device table (see the module docstring).

    Holds the steps' tensors, so the addresses in ``table`` stay valid while it lives.
    """

    table: torch.Tensor  # int64 [n_steps, _FIELDS]
    steps: tuple  # DraftStep per step
    host: torch.Tensor | None = None  # the table's pinned source, alive while its copy may be in flight

    @classmethod
    def from_steps(cls, steps: Sequence[DraftStep]) -> "DraftStepTable | None":
        """The table, or None where one launch could differ from one launch per step.

        Strides and the expand table's width may differ per step (the table holds
        them); dtypes, devices and every shape the checks and the grid depend on
        must not, so that step 0's checks hold for all of them.
        """
        steps = tuple(DraftStep(*s) for s in steps)
        if not steps:
            return None
        first = steps[0]
        for s in steps:
            outputs = (s.cache_seqlens, s.page_table, s.expand_cache_seqlens, s.expand_page_table)
            # the kernel casts the addresses to int32* and (strided_indices) int64*
            if (any(t.dtype != torch.int32 for t in outputs) or s.strided_indices.dtype != torch.int64
                    or any(t.device != first.page_table.device for t in outputs + (s.strided_indices,))
                    or s.cache_seqlens.shape != first.cache_seqlens.shape
                    or s.page_table.shape != first.page_table.shape
                    or s.expand_cache_seqlens.shape != first.expand_cache_seqlens.shape
                    or s.expand_page_table.dim() != 2
                    or s.expand_page_table.shape[0] != first.expand_page_table.shape[0]
                    or s.strided_indices.shape != first.strided_indices.shape
                    or s.cache_seqlens.dim() != 1 or s.page_table.dim() != 2
                    or s.expand_cache_seqlens.dim() != 1 or s.strided_indices.dim() != 1):
                return None
        rows = [[s.cache_seqlens.data_ptr(), s.cache_seqlens.stride(0),
                 s.page_table.data_ptr(), *s.page_table.stride(),
                 s.expand_cache_seqlens.data_ptr(), s.expand_cache_seqlens.stride(0),
                 s.expand_page_table.data_ptr(), *s.expand_page_table.stride(), s.expand_page_table.shape[1],
                 s.strided_indices.data_ptr(), s.strided_indices.stride(0),
                 int(s.decode_length)] for s in steps]
        # Built at the first replay of each batch size, i.e. while serving: a pageable
        # copy would make the host wait for the stream; a pinned one is queued like a launch.
        device = first.page_table.device
        host = torch.tensor(rows, dtype=torch.int64)
        if device.type == "cuda":
            host = host.pin_memory()
        return cls(table=host.to(device, non_blocking=True), steps=steps, host=host)


@triton.jit
def _int32_ptr(step, field: tl.constexpr):
    return tl.load(step + field).to(tl.pointer_type(tl.int32))


_ALL_STEPS_RUNTIME_INTS = [
    "sl_stride", "rpi_stride", "rtt_stride0", "rtt_stride1", "n_cols",
    "cl_stride0", "cl_stride1", "num_seqs", "bs",
]
_ALL_STEPS_POINTERS = ["steps", "seq_lens", "req_pool_indices", "req_to_token", "cache_loc"]


@triton.jit(do_not_specialize=_ALL_STEPS_RUNTIME_INTS, do_not_specialize_on_alignment=_ALL_STEPS_POINTERS)
def _draft_decode_metadata_all_steps_kernel(
    steps,                                      # [N_STEPS, FIELDS] int64 (DraftStepTable)
    seq_lens, sl_stride,                        # [bs]
    req_pool_indices, rpi_stride,               # [bs]
    req_to_token, rtt_stride0, rtt_stride1,     # [pool, max_context_len]
    n_cols,                                     # normal page-table columns to write
    cache_loc, cl_stride0, cl_stride1, num_seqs,  # [num_seqs, STEPS]
    bs,
    topk: tl.constexpr,
    page_size: tl.constexpr,
    STEPS: tl.constexpr,
    STEPS_POW2: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    N_STEPS: tl.constexpr,
    FIELDS: tl.constexpr,
    LIVE_SLOTS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1)
    for s in tl.static_range(N_STEPS):
        step = steps + s * FIELDS
        _write_step(row, blk,
                    seq_lens, sl_stride, req_pool_indices, rpi_stride, req_to_token, rtt_stride0, rtt_stride1,
                    n_cols, cache_loc, cl_stride0, cl_stride1, num_seqs, bs,
                    _int32_ptr(step, _CS), tl.load(step + _CS_STRIDE),
                    _int32_ptr(step, _PT), tl.load(step + _PT_STRIDE0), tl.load(step + _PT_STRIDE1),
                    _int32_ptr(step, _ECS), tl.load(step + _ECS_STRIDE),
                    _int32_ptr(step, _EPT), tl.load(step + _EPT_STRIDE0), tl.load(step + _EPT_STRIDE1),
                    tl.load(step + _EPT_COLS),
                    tl.load(step + _SI).to(tl.pointer_type(tl.int64)), tl.load(step + _SI_STRIDE),
                    tl.load(step + _DECODE_LENGTH),
                    topk, page_size, STEPS, STEPS_POW2, BLOCK_COLS, LIVE_SLOTS)


def draft_decode_metadata_all_steps(
    steps: DraftStepTable,  # every step's outputs, modified
    seq_lens: torch.Tensor,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    max_seq_pages: int,
    cache_loc: torch.Tensor,
    topk: int,
    page_size: int,
    live_slots: bool = False,
) -> None:
    """:func:`draft_decode_metadata` for every step of ``steps`` (each with its own
    ``decode_length`` and ``strided_indices``), in one launch."""
    plan = table_launch(steps, seq_lens, req_pool_indices, req_to_token, max_seq_pages, cache_loc, topk, page_size)
    if plan is None:
        return
    grid, args, n_loc = plan
    launch(_draft_decode_metadata_all_steps_kernel, grid, args,
           dict(topk=topk, page_size=page_size, STEPS=n_loc, STEPS_POW2=triton.next_power_of_2(max(n_loc, 1)),
                BLOCK_COLS=BLOCK_COLS, N_STEPS=len(steps.steps), FIELDS=_FIELDS, LIVE_SLOTS=live_slots), num_warps=1)


def table_launch(steps: DraftStepTable, seq_lens, req_pool_indices, req_to_token, max_seq_pages, cache_loc, topk,
                 page_size):
    """``(grid, runtime arguments, cache_loc width)`` of a launch over ``steps``' table (the checks
    on step 0's tensors), or None when there is nothing to write. The arguments are those every
    all-steps kernel takes first: the table, the batch's inputs, the columns and the batch size."""
    first = steps.steps[0]
    plan = _launch(first.cache_seqlens, first.page_table, first.expand_cache_seqlens, first.expand_page_table,
                   seq_lens, req_pool_indices, first.strided_indices, max_seq_pages, cache_loc, topk, page_size)
    if plan is None:
        return None
    grid, n_cols, bs, num_seqs, n_loc = plan
    return grid, (
        steps.table,
        seq_lens, seq_lens.stride(0),
        req_pool_indices, req_pool_indices.stride(0),
        req_to_token, req_to_token.stride(0), req_to_token.stride(1),
        n_cols,
        cache_loc, cache_loc.stride(0), cache_loc.stride(1), num_seqs,
        bs,
    ), n_loc


def draft_decode_metadata_all_steps_reference(
    steps: Sequence[DraftStep],
    seq_lens: torch.Tensor,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    max_seq_pages: int,
    cache_loc: torch.Tensor,
    topk: int,
    page_size: int,
    live_slots: bool = False,
) -> None:
    """SGLang's per-step ops (:func:`draft_decode_metadata_reference`), step after step."""
    for s in steps:
        draft_decode_metadata_reference(s.cache_seqlens, s.page_table, s.expand_cache_seqlens, s.expand_page_table,
                                        seq_lens, req_pool_indices, req_to_token, s.strided_indices,
                                        max_seq_pages, cache_loc, s.decode_length, topk, page_size, live_slots)
