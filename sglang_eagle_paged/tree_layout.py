"""The page/topk layout arithmetic of a tree draft, in one place: the per-branch layout SGLang's v2
worker (and its v1 paged tree) gives the draft at page > 1, the dense layout (page 1's positions at
every page size), and the KV reserve each costs per running request. Shared by the kernels, their
torch references, the adapters, the tools and the benchmarks, so they can never disagree.

The per-branch layout. For a prefix of ``seq_len`` tokens, ``last_page_len = seq_len % page_size`` of
them sit on a partial last page. Every branch gets ``num_new_pages`` pages:

    req_to_token row:  | prefix .... | b0: -- x x x . | b1: ~~ x x x . | b2: ~~ x x x . |
                                       ^ page_start

- ``b0`` continues in the prefix's own partial page ("--" are prefix slots),
- ``b1..`` start on fresh pages whose first ``last_page_len`` slots ("~~") receive a
  copy of the prefix's last-page KV, so a page-table backend sees the same prefix,
- "x" are the ``speculative_num_steps`` draft slots, "." padding up to the page end.

The allocator hands out ``extend_len = num_new_pages * page_size * topk - last_page_len``
slots per request, packed in batch order (it first fills the partial page).

The dense layout (``docs/design.md``, "Page > 1 in page 1's memory"): branch ``t``, step ``s`` at row
position ``L + t*steps + s`` (``L``: the committed length), as SGLang's page-1 path puts them
(``assign_draft_cache_locs_contiguous``). Worked example, ``L = 5``, topk 3, 2 steps: positions
``[5, 6, 7, 8, 9, 10]`` (branch 0: 5, 6; branch 1: 7, 8; branch 2: 9, 10), at any page size.

The reserve: SGLang's ``get_alloc_reserve_per_decode`` (``mem_cache/common.py`` in 0.5.13.post1 and
0.5.15.post1, ``mem_cache/allocation_sizing.py`` from 0.5.17; the same formula through 0.5.23):
twice one decode step's allocation, which at page > 1 and topk > 1 is whole pages for every draft
branch, from a partly filled last page. At topk 8, 5 steps and 64 draft tokens: 128 slots at page 1,
2,048 at page 64, 4,096 at page 128; the dense layout's is page 1's at every page size. A pool that
cannot hold it for every running request retracts requests. Written out, not called, because it is
needed before a server runs (the benchmarks size their pools) and beside releases whose function
reads a running server's arguments; ``tests/bench/test_kv_sizing.py`` pins it to SGLang's own function.
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
    """Upper bound on the number of duplicated slots, known on the host: every slot that can hold a
    prefix tail, in every branch but the first.

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


def paged_tree(page_size: int, topk: int) -> bool:
    """Whether SGLang lays the draft out per branch (page > 1 and topk > 1); elsewhere its layout is
    page 1's already."""
    return page_size > 1 and topk > 1


def dense_positions(seq_lens: torch.Tensor, topk: int, steps: int) -> torch.Tensor:
    """Row positions of the draft slots in the dense layout, ``(bs, topk * steps)`` branch-major:
    ``L + t*steps + s``."""
    offsets = torch.arange(topk * steps, device=seq_lens.device, dtype=torch.int64)
    return seq_lens.to(torch.int64).view(-1, 1) + offsets.view(1, -1)




def reserve_per_decode(page_size: int, topk: int | None, steps: int | None, draft_tokens: int | None,
                       speculative: bool = True, dense: bool = False) -> int:
    """SGLang's ``get_alloc_reserve_per_decode()`` for a speculative algorithm with a draft KV cache
    (EAGLE, EAGLE3, STANDALONE), or without speculation; ``dense``: with the draft slots laid out as
    page 1 lays them out."""
    if not speculative:
        return 2
    return 2 * len_per_decode(page_size, topk, steps, draft_tokens, dense)


def len_per_decode(page_size: int, topk: int | None, steps: int | None, draft_tokens: int | None,
                   dense: bool = False) -> int:
    """SGLang's ``get_alloc_len_per_decode()`` for a speculative algorithm with a draft KV cache: one
    decode step's allocation per request (``dense``: page 1's, at every page size)."""
    steps, topk = steps or 1, topk or 1
    if not paged_tree(page_size, topk) or dense:
        return max(steps * topk, draft_tokens or 0)
    # every branch's draft tokens in pages of their own, from a partly filled last page
    return max(max_new_pages_per_branch(page_size, steps) * page_size * topk, draft_tokens or 0)


def slots_per_request(page_size: int, context_tokens: int, reserve: int) -> int:
    """Whole pages holding a request's longest context and its last decode step's reserve (SGLang
    allocates a request's slots page by page: ``page_aligned_decode_alloc_lens``)."""
    return -(-(context_tokens + reserve) // page_size) * page_size


def held_beyond_committed(page_size: int, reserve: int) -> int:
    """The most slots a request holds past its committed tokens at a decode step: the reserve, up to
    a whole page (``page_aligned_decode_alloc_lens`` rounds ``committed + reserve`` up to a page)."""
    return reserve + page_size - 1
