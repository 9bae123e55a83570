"""Compile SGLang's paged KV-slot allocation at start-up, not while serving (v2 worker, page > 1, topk > 1).

At page size > 1 the v2 worker allocates KV slots with three Triton kernels of SGLang's
(``mem_cache.allocation`` and the paged allocator; the same code in 0.5.17 and 0.5.23), each
compiled per variant on first use, with the scheduler stalled meanwhile:

- ``alloc_extend_kernel``, launched by the paged allocator's ``alloc_extend`` for every prefill
  batch (``alloc_for_extend``: prefix lengths, sequence lengths and last slots int64) and every
  decode round (``alloc_for_spec_decode`` reserving the round's draft and verify slots: the same
  three int32). A variant per dtype and per ``next_power_of_2(bs)``, a constexpr; the free-page
  list, a slice that moves, is not specialised on, and the page size is fixed.
- ``get_last_loc_kernel`` (``get_last_loc``'s Triton implementation; ROCm's dispatch picks
  ``_get_last_loc_safe_kernel``), in every decode round: the batch size is an int argument
  (specialised on being 1, a multiple of 16, or neither).
- ``assign_req_to_token_pool`` (``assign_req_to_token_pool_func``), writing a decode round's new
  slots into the request rows: ``next_power_of_2(bs)`` is a constexpr (the row width another,
  fixed).

Every other argument is the pool's own tensor or a fresh one (16-byte aligned on a GPU) of a
fixed dtype, so calling SGLang's own functions once per power of two and per int class, with the
dtypes serving passes, compiles every variant serving launches, whichever kernels the release
and platform pick. The calls allocate and write nothing: every request extends by no token, and
the row write goes to a scratch row. An optimisation only: a failure is logged in one line and
the kernels compile on first use, as without the plugin.
"""

import torch

from ...hooks import resolve, resolve_first
from ..common.batch_classes import buckets, int_class_sizes
from .sglang_api import ASSIGN_ROWS, GET_LAST_LOC, PAGED_ALLOCATOR
from .warm_up_scope import warm_up_once


# alloc_for_extend's lengths and last slots, then alloc_for_spec_decode's (its kv lengths are built int32)
EXTEND_DTYPES = (torch.int64, torch.int32)
SPEC_DECODE_DTYPE = torch.int32


def warm_up_alloc_extend(allocator, max_batch: int) -> int:
    """Call the allocator's ``alloc_extend`` once per dtype and bucket, every request extending by
    no token (nothing is allocated); returns the calls made."""
    calls = 0
    for dtype in EXTEND_DTYPES:
        for bs in buckets(max_batch):
            lens_cpu = torch.zeros(bs, dtype=dtype)
            lens = lens_cpu.to(allocator.device)
            last_loc = torch.full((bs,), -1, dtype=dtype, device=allocator.device)  # an empty prefix's
            allocator.alloc_extend(lens, lens_cpu, lens, lens_cpu, last_loc, 0)
            calls += 1
    return calls


def warm_up_last_loc(req_to_token: torch.Tensor, max_batch: int) -> int:
    """SGLang's ``get_last_loc`` dispatcher on the pool's rows (their stride is specialised on) for
    one batch size per int class; every prefix is empty, so nothing of the rows is read."""
    get_last_loc = resolve_first(GET_LAST_LOC)
    sizes = int_class_sizes(max_batch)
    for bs in sizes:
        get_last_loc(req_to_token, torch.zeros(bs, dtype=torch.int64, device=req_to_token.device),
                     torch.zeros(bs, dtype=SPEC_DECODE_DTYPE, device=req_to_token.device))
    return len(sizes)


def warm_up_assign_rows(req_to_token: torch.Tensor, max_batch: int) -> int:
    """SGLang's ``assign_req_to_token_pool_func`` once per bucket, into one scratch row as wide as
    the pool's (the width is a constexpr); every request writes no slot."""
    assign = resolve_first(ASSIGN_ROWS)
    device = req_to_token.device
    scratch = torch.zeros((1, req_to_token.shape[1]), dtype=req_to_token.dtype, device=device)
    no_slots = torch.empty(0, dtype=torch.int64, device=device)  # alloc_extend's output dtype
    sizes = buckets(max_batch)
    for bs in sizes:
        lens = torch.zeros(bs, dtype=SPEC_DECODE_DTYPE, device=device)
        assign(torch.zeros(bs, dtype=torch.int64, device=device), scratch, lens, lens, no_slots, bs)
    return len(sizes)


def _plan(worker, allocator, rows, max_batch):
    if not isinstance(allocator, resolve(PAGED_ALLOCATOR)):
        return None  # another allocator (hybrid, SWA): another allocation path
    key = (max_batch, tuple(rows.req_to_token.shape[1:]))
    return allocator, key, lambda: (warm_up_alloc_extend(allocator, max_batch)
                                    + warm_up_last_loc(rows.req_to_token, max_batch)
                                    + warm_up_assign_rows(rows.req_to_token, max_batch))


def warm_up_worker(worker) -> int:
    """Warm up the paged allocation for a v2 draft worker once its pools exist; returns the calls
    made (0 where there is nothing to warm, it was warmed already, or it failed: logged)."""
    return warm_up_once("paged KV-slot allocation", worker, _plan)
