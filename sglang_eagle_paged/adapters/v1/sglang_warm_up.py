"""Compile SGLang's own paged-tree kernels before serving (v1 generation): the page-N-only
variants that would otherwise compile on first use, with the scheduler stalled meanwhile.

- **Allocation** (:func:`warm_up_allocator`): each verify round and every prefill allocates
  through SGLang's paged allocator (``alloc_extend``). Its Triton kernel takes
  ``next_power_of_2(bs)`` as a constexpr and is specialised on the 16-byte alignment of the
  free-page list, a slice whose start moves with every allocation: each (bucket, alignment)
  pair is a variant of its own.
- **Verify** (:func:`warm_up_verify`): every verify round looks up each request's last slot
  with ``get_last_loc`` (specialised on whether the batch size is 1, a multiple of 16 or
  neither). At topk > 1 it then splits each request's verify slots with
  ``get_target_cache_loc`` and, in a round where some request finishes, compacts the
  survivors' slots with ``filter_finished_cache_loc_kernel`` after
  ``create_num_accept_tokens_filter`` (``create_num_accepted_drafts_filter`` in 0.5.11). The
  split and compaction kernels take ``next_power_of_2(bs)`` as a constexpr; the filter is
  compiled by Dynamo and Inductor on its first call, then again for its 0/1 size
  specialisation.

The page-1 path has none of them. Everything here runs on scratch tensors (or only reads the
pool's ``req_to_token``); the allocator's state is never read or written. An optimisation only:
a part that fails is logged and left to compile on first use, as without the plugin.
"""

import logging

import torch
import triton

from ...hooks import resolve
from ..common.batch_classes import buckets, int_class_sizes
from . import sglang_api as api

logger = logging.getLogger("sglang_eagle_paged")


def warm_up_allocator(device, page_size: int, max_batch: int | None) -> int:
    """Launch SGLang's ``alloc_extend`` kernel once per bucket and free-list alignment; returns
    the launches made (0 where the kernel or the batch bound is unknown, or a launch failed:
    serving then compiles as it would have, and the log says why)."""
    if page_size <= 1 or not max_batch:
        return 0
    try:
        kernel = resolve(api.ALLOC_EXTEND_KERNEL)
        launches, i64 = 0, dict(dtype=torch.int64, device=device)
        for bucket in buckets(max_batch):
            # one new token per request, on a fresh page: every program reads one free page
            prefix_lens, seq_lens = torch.zeros(bucket, **i64), torch.ones(bucket, **i64)
            last_loc, out = torch.zeros(bucket, **i64), torch.empty(bucket, **i64)
            free = torch.arange(1, bucket + 2, **i64)
            for free_pages in (free[:bucket], free[1:]):  # 16-byte aligned, then 8 bytes past
                kernel[(bucket,)](prefix_lens, seq_lens, last_loc, free_pages, out, bucket, page_size)
                launches += 1
        return launches
    except Exception as exc:  # an optimisation only: never a reason not to start
        logger.warning("[sglang-eagle-paged] SGLang's alloc_extend kernel not compiled ahead (%s: %s); "
                       "it compiles on first use, as without the plugin", type(exc).__name__, str(exc)[:300])
        return 0


# num_correct_drafts reaches get_target_cache_loc as int32 from the sampling kernel, and as
# int64 in a round where a request finished (recounted in torch); the filter kernel only
# runs in the second kind of round.
TARGET_CACHE_LOC_DTYPES = (torch.int32, torch.int64)
# (batch size, survivors) of the filter's warm-up calls: one survivor, then several, the two
# shapes its dynamic compile specialises on (a round with none skips the filter).
FILTER_SHAPES = ((2, 1), (3, 2))


def _warm_kernels(device, draft_tokens: int, max_batch: int) -> int:
    target_cache_loc = resolve(api.TARGET_CACHE_LOC_KERNEL)
    filter_finished = resolve(api.FILTER_FINISHED_KERNEL)
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
    finished_filter = api.resolve_first(api.FINISHED_FILTER_NAMES)
    calls = 0
    i64 = dict(dtype=torch.int64, device=device)
    # Under the scheduler's grad mode: Dynamo guards on it, and the worker starts with grad enabled,
    # so a warm-up outside it would leave serving to compile both shapes again.
    with resolve(api.DYNAMIC_GRAD_MODE)():
        for bs, survivors in FILTER_SHAPES:
            finished_filter(torch.zeros(bs, **i64), torch.arange(survivors, **i64), torch.ones(bs, **i64))
            calls += 1
    return calls


def _warm_last_loc(req_to_token: torch.Tensor, max_batch: int) -> int:
    """SGLang's own dispatcher, so that whichever implementation it picks here is the one warmed; on
    the pool's real ``req_to_token`` (its row stride is specialised on too), which it only reads."""
    get_last_loc = resolve(api.GET_LAST_LOC)
    i64 = dict(dtype=torch.int64, device=req_to_token.device)
    sizes = int_class_sizes(max_batch)  # its batch size is an int argument
    for bs in sizes:
        # empty prefixes: every lookup is masked, nothing of the pool is read
        get_last_loc(req_to_token, torch.zeros(bs, **i64), torch.zeros(bs, **i64))
    return len(sizes)


def warm_up_verify(device, draft_tokens: int, page_size: int, max_batch: int | None,
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
