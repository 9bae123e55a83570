"""Geometry of one request's tree-draft extension on a paged KV cache.

For a prefix of ``seq_len`` tokens, ``last_page_len = seq_len % page_size`` of them
sit on a partial last page. Every branch gets ``num_new_pages`` pages:

    req_to_token row:  | prefix .... | b0: -- x x x . | b1: ~~ x x x . | b2: ~~ x x x . |
                                       ^ page_start

- ``b0`` continues in the prefix's own partial page ("--" are prefix slots),
- ``b1..`` start on fresh pages whose first ``last_page_len`` slots ("~~") receive a
  copy of the prefix's last-page KV, so a page-table backend sees the same prefix,
- "x" are the ``speculative_num_steps`` draft slots, "." padding up to the page end.

The allocator hands out ``extend_len = num_new_pages * page_size * topk - last_page_len``
slots per request, packed in batch order (it first fills the partial page).
These helpers are shared by the Triton launcher, the torch reference and the glue,
so the three can never disagree on the arithmetic.
"""

import numpy as np
import torch


def num_new_pages_per_branch(seq_lens: torch.Tensor, page_size: int, steps: int) -> torch.Tensor:
    last_page_len = seq_lens % page_size
    return (last_page_len + steps + page_size - 1) // page_size


def extend_lens(seq_lens: torch.Tensor, page_size: int, topk: int, steps: int) -> torch.Tensor:
    pages = num_new_pages_per_branch(seq_lens, page_size, steps)
    return pages * page_size * topk - seq_lens % page_size


def new_pages(seq_lens: torch.Tensor, page_size: int, topk: int, steps: int) -> torch.Tensor:
    """Pages each request's extension takes from the allocator's free list: every branch's
    pages but the prefix's own partial page, which branch 0 continues.

    SGLang's ``get_num_new_pages`` for the tree's page-aligned new lengths; on CPU lengths
    this is what decides, without a sync, whether the free list holds the extension.
    """
    last = seq_lens % page_size  # once: this runs every draft round
    return (last + steps + page_size - 1) // page_size * topk - (last > 0).to(seq_lens.dtype)


def extension_totals(seq_lens: torch.Tensor, page_size: int, topk: int, steps: int) -> tuple[int, int]:
    """``(int(extend_lens(...).sum()), int(new_pages(...).sum()))`` of CPU lengths.

    The draft step needs only these two totals on its fast path, every round, on the host.
    Per-request vectors of small CPU-tensor ops cost tens of microseconds there; a NumPy
    view of the same memory does the arithmetic at about half the cost of torch's CPU
    dispatch (``docs/performance.md``).
    """
    last = seq_lens.numpy() % page_size
    pages_total = int(((last + (steps + page_size - 1)) // page_size).sum())  # per branch, summed
    return (pages_total * page_size * topk - int(last.sum()),
            pages_total * topk - int(np.count_nonzero(last)))


def max_new_pages_per_branch(page_size: int, steps: int) -> int:
    # worst case: last_page_len = page_size - 1
    return (page_size - 1 + steps + page_size - 1) // page_size


def pair_capacity(batch_size: int, page_size: int, topk: int) -> int:
    """Upper bound on the number of duplicated slots, known on the host.

    Each of the ``topk - 1`` extra branches copies at most ``page_size - 1`` slots.
    Sizing the pair buffers by this bound is what removes the host sync the
    reference design needed to learn the exact copy length.
    """
    return batch_size * max(topk - 1, 0) * max(page_size - 1, 0)


def check_tree_config(**values: int) -> None:
    """Every configuration value (page size, topk, steps) a positive int: the kernels take
    them as constexprs, so anything else would compile a variant or fail inside Triton."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
