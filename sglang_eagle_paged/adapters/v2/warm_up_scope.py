"""Where the v2 start-up warm-ups of SGLang's own kernels apply, and up to what batch size.

They apply where our plugin works, a paged (page size > 1) tree draft (topk > 1), once the
draft worker holds the shared pools: SGLang 0.5.14+ sets them on the worker in
``alloc_memory_pool``, after ``__init__`` has already called ``init_attention_backend`` once
(that first call finds none, the one after ``alloc_memory_pool`` warms).
"""

from ..common.batch_classes import MAX_BATCH


def shared(worker, name: str):
    """The pool ``name`` the draft worker shares with the target: set on the worker by
    alloc_memory_pool (0.5.14+); its model runner has it in every release."""
    found = getattr(worker, name, None)
    return found if found is not None else getattr(getattr(worker, "draft_runner", None), name, None)


def max_batch_size(worker) -> int | None:
    """The most requests a batch holds: --max-running-requests, else the request pool's size (its
    rows bound the running requests), at most MAX_BATCH; None where neither is known."""
    limit = getattr(getattr(worker, "server_args", None), "max_running_requests", None)
    if not limit:
        limit = getattr(shared(worker, "req_to_token_pool"), "size", None)
    return min(int(limit), MAX_BATCH) if limit else None


def paged_tree_pools(worker):
    """(token allocator, request pool, batch bound) of a paged tree draft worker whose pools exist;
    None where there is nothing to warm (a chain, page size 1, no pools yet, no batch bound)."""
    topk = getattr(worker, "topk", None)
    if not isinstance(topk, int) or topk <= 1:
        return None
    allocator, rows = shared(worker, "token_to_kv_pool_allocator"), shared(worker, "req_to_token_pool")
    max_batch = max_batch_size(worker)
    if allocator is None or rows is None or not max_batch:
        return None
    if getattr(allocator, "page_size", 1) <= 1:
        return None  # the page-1 path, which the plugin leaves alone
    return allocator, rows, max_batch
