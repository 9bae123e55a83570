"""The batch sizes a start-up warm-up launches SGLang's kernels with, so that serving compiles no
variant of them: one size per class a kernel is specialised on.

Two kinds of batch dependence make a Triton variant: a ``tl.constexpr`` of
``next_power_of_2(bs)`` (one variant per power of two up to the batch bound, :func:`buckets`),
and an int argument of ``bs`` (Triton specialises ints on being 1 or a multiple of 16:
:data:`INT_CLASS_SIZES`).
"""

import triton

# Above this many requests per batch a warm-up would compile for batch sizes no EAGLE tree
# deployment runs (SGLang's EAGLE default is 48).
MAX_BATCH = 1024

# One batch size per class Triton specialises an int argument on: 1, a multiple of 16, neither.
INT_CLASS_SIZES = (1, 2, 16)


def buckets(max_batch: int) -> list:
    """The ``next_power_of_2(bs)`` values of every batch size from 1 to ``max_batch`` (capped)."""
    top = triton.next_power_of_2(max(1, min(max_batch, MAX_BATCH)))
    return [1 << i for i in range(top.bit_length())]


def int_class_sizes(max_batch: int) -> list:
    """:data:`INT_CLASS_SIZES` that a batch of at most ``max_batch`` requests reaches."""
    return [bs for bs in INT_CLASS_SIZES if bs <= max_batch]
