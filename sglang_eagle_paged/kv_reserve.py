"""The KV slots SGLang's v2 worker keeps free for every running request at each decode step.

SGLang's ``get_alloc_reserve_per_decode`` (``mem_cache/common.py`` in 0.5.13.post1 and 0.5.15.post1,
``mem_cache/allocation_sizing.py`` from 0.5.17; the same formula through 0.5.23): twice one decode
step's allocation, which at page > 1 and topk > 1 is whole pages for every draft branch, from a
partly filled last page. At topk 8, 5 steps and 64 draft tokens: 128 slots at page 1, 2,048 at
page 64, 4,096 at page 128. A pool that cannot hold it for every running request retracts requests.

``dense=True``: the dense draft layout's (``docs/design.md``, "Page > 1 in page 1's memory"): branch
``t``, step ``s`` at row position ``L + t*steps + s`` as page 1 lays them out, so page 1's formula at
every page size (128 slots at topk 8, 5 steps, 64 draft tokens), allocated in whole pages.

Written out, not called, because it is needed before a server runs (the benchmarks size their pools)
and beside releases whose function reads a running server's arguments; ``tests/bench/test_kv_sizing.py``
pins it to SGLang's own function (0.5.23 run, the other releases read from their wheels).
"""


def reserve_per_decode(page_size: int, topk: int | None, steps: int | None, draft_tokens: int | None,
                       speculative: bool = True, dense: bool = False) -> int:
    """SGLang's ``get_alloc_reserve_per_decode()`` for a speculative algorithm with a draft KV cache
    (EAGLE, EAGLE3, STANDALONE), or without speculation; ``dense``: with the draft slots laid out as
    page 1 lays them out."""
    if not speculative:
        return 2
    steps, topk = steps or 1, topk or 1
    if page_size == 1 or topk == 1 or dense:
        per_step = max(steps * topk, draft_tokens or 0)
    else:  # every branch's draft tokens in pages of their own, from a partly filled last page
        per_step = max(((page_size - 1) + steps + page_size - 1) // page_size * page_size * topk, draft_tokens or 0)
    return 2 * per_step


def slots_per_request(page_size: int, context_tokens: int, reserve: int) -> int:
    """Whole pages holding a request's longest context and its last decode step's reserve (SGLang
    allocates a request's slots page by page: ``page_aligned_decode_alloc_lens``)."""
    return -(-(context_tokens + reserve) // page_size) * page_size


def held_beyond_committed(page_size: int, reserve: int) -> int:
    """The most slots a request holds past its committed tokens at a decode step: the reserve, up to
    a whole page (``page_aligned_decode_alloc_lens`` rounds ``committed + reserve`` up to a page)."""
    return reserve + page_size - 1
