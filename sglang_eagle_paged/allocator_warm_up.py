"""Compile SGLang's paged allocation kernel for every batch-size bucket before serving.

At page > 1 each verify round allocates its draft tokens' slots through SGLang's paged
allocator (``alloc_extend``), and so does every prefill. Its Triton kernel takes
``next_power_of_2(bs)`` as a constexpr and is specialised on the 16-byte alignment of the
free-page list, a slice whose start moves with every allocation: each (bucket, alignment)
pair is a variant Triton compiles on first use, with the scheduler stalled meanwhile. H200
runs 10 and 11 recorded it compiling in the middle of measured passes at pages 64 and 128
(the page-1 path has no such kernel). Compiling every variant a worker's batch sizes can
meet at start-up moves that out of serving. It runs on scratch tensors: the allocator's
state is never read or written here.
"""

import logging

import torch
import triton

from . import compat

logger = logging.getLogger("sglang_eagle_paged")

# Above this many requests per batch the buckets would take start-up time for batch sizes
# no EAGLE tree deployment runs (SGLang's EAGLE default is 48).
MAX_BUCKET = 1024


def buckets(max_batch: int) -> list:
    """The ``next_power_of_2(bs)`` values of every batch size from 1 to ``max_batch`` (capped)."""
    top = triton.next_power_of_2(max(1, min(max_batch, MAX_BUCKET)))
    return [1 << i for i in range(top.bit_length())]


def warm_up(device, page_size: int, max_batch: int | None) -> int:
    """Launch SGLang's ``alloc_extend`` kernel once per bucket and free-list alignment; returns
    the launches made (0 where the kernel or the batch bound is unknown, or a launch failed:
    serving then compiles as it would have, and the log says why)."""
    if page_size <= 1 or not max_batch:
        return 0
    try:
        kernel = compat.resolve(compat.ALLOC_EXTEND_KERNEL)
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
