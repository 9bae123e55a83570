"""Compile the rest of SGLang's paged-tree verify before serving: its per-batch-size kernels and
the ``torch.compile``'d filter of rounds in which a request finishes.

At page > 1 every verify round looks up each request's last slot with ``get_last_loc`` (a Triton
kernel specialised on whether the batch size is 1, a multiple of 16 or neither). At topk > 1 it
then splits each request's verify slots with ``get_target_cache_loc`` and, in a round where some
request finishes, compacts the survivors' slots with ``filter_finished_cache_loc_kernel`` after
``create_num_accept_tokens_filter`` (``create_num_accepted_drafts_filter`` in 0.5.11). The split
and compaction kernels take ``next_power_of_2(bs)`` as a constexpr, so each batch-size bucket is a
Triton variant compiled on first use; the filter is compiled by Dynamo and Inductor on its first
call (4.2 s on this project's CPU, then 1 s more for the first round with two survivors, its 0/1
size specialisation). The page-1 path has none of them, so each is a stall only page N pays, in the
middle of serving: H200 run 13 saw ``get_target_cache_loc`` compile in a measured page-64 pass.
Launched here once per variant a worker's batches can meet, on scratch tensors only.
"""

import logging

import torch
import triton

from . import compat
from .allocator_warm_up import buckets

logger = logging.getLogger("sglang_eagle_paged")

# num_correct_drafts reaches get_target_cache_loc as int32 from the sampling kernel, and as
# int64 in a round where a request finished (recounted in torch); the filter kernel only
# runs in the second kind of round.
TARGET_CACHE_LOC_DTYPES = (torch.int32, torch.int64)
# (batch size, survivors) of the filter's warm-up calls: one survivor, then several, the two
# shapes its dynamic compile specialises on (a round with none skips the filter).
FILTER_SHAPES = ((2, 1), (3, 2))


def _warm_kernels(device, draft_tokens: int, max_batch: int) -> int:
    target_cache_loc = compat.resolve(compat.TARGET_CACHE_LOC_KERNEL)
    filter_finished = compat.resolve(compat.FILTER_FINISHED_KERNEL)
    i64 = dict(dtype=torch.int64, device=device)
    tokens_pow2 = triton.next_power_of_2(draft_tokens)
    launches = 0
    for bucket in buckets(max_batch):
        # One accepted token per request and nothing to free: each program copies one slot.
        out_cache_loc = torch.zeros(bucket * draft_tokens, **i64)
        tgt, to_free = torch.zeros(bucket, **i64), torch.zeros(bucket, **i64)
        to_free_num_slots = torch.zeros(bucket, **i64)
        for dtype in TARGET_CACHE_LOC_DTYPES:
            num_correct = torch.zeros(bucket, dtype=dtype, device=device)
            target_cache_loc[(bucket,)](tgt, to_free, num_correct, to_free_num_slots, out_cache_loc,
                                        draft_tokens, tokens_pow2, bucket)
            launches += 1
        survivors = torch.ones(bucket, **i64)
        filter_finished[(bucket,)](torch.empty(bucket, **i64), tgt, torch.zeros(bucket, **i64), survivors,
                                   bucket, tokens_pow2)
        launches += 1
    return launches


def _warm_filter(device) -> int:
    finished_filter = compat.resolve_first(compat.FINISHED_FILTER_NAMES)
    calls = 0
    i64 = dict(dtype=torch.int64, device=device)
    # Under the scheduler's grad mode: Dynamo guards on it, and the worker starts with grad enabled,
    # so a warm-up outside it would leave serving to compile both shapes again.
    with compat.resolve(compat.DYNAMIC_GRAD_MODE)():
        for bs, survivors in FILTER_SHAPES:
            finished_filter(torch.zeros(bs, **i64), torch.arange(survivors, **i64), torch.ones(bs, **i64))
            calls += 1
    return calls


# One batch size per class Triton specialises an int argument on: 1, a multiple of 16, neither.
LAST_LOC_BATCH_SIZES = (1, 2, 16)


def _warm_last_loc(req_to_token: torch.Tensor, max_batch: int) -> int:
    """SGLang's own dispatcher, so that whichever implementation it picks here is the one warmed; on
    the pool's real ``req_to_token`` (its row stride is specialised on too), which it only reads."""
    get_last_loc = compat.resolve(compat.GET_LAST_LOC)
    i64 = dict(dtype=torch.int64, device=req_to_token.device)
    sizes = [bs for bs in LAST_LOC_BATCH_SIZES if bs <= max_batch]
    for bs in sizes:
        # empty prefixes: every lookup is masked, nothing of the pool is read
        get_last_loc(req_to_token, torch.zeros(bs, **i64), torch.zeros(bs, **i64))
    return len(sizes)


def warm_up(device, draft_tokens: int, page_size: int, max_batch: int | None,
            req_to_token: torch.Tensor | None = None) -> int:
    """Compile what a paged tree verify compiles on first use; returns the launches and calls made.

    An optimisation only: a part that fails (a release without it, no compiler for
    ``torch.compile``) is logged and left to compile on first use, as without the plugin."""
    if page_size <= 1 or not max_batch:
        return 0
    done = 0
    parts = [("kernels", lambda: _warm_kernels(device, draft_tokens, max_batch)),
             ("finished-request filter", lambda: _warm_filter(device))]
    if req_to_token is not None:
        parts.append(("last-slot lookup", lambda: _warm_last_loc(req_to_token, max_batch)))
    for part, warm in parts:
        try:
            done += warm()
        except Exception as exc:  # never a reason not to start
            logger.warning("[sglang-eagle-paged] SGLang's paged verify %s not compiled ahead (%s: %s); "
                           "they compile on first use, as without the plugin", part, type(exc).__name__,
                           str(exc)[:300])
    return done
