"""Where the v2 start-up warm-ups of SGLang's own kernels apply, up to what batch size, and how each
runs: once per configuration, one log line, a failure never stopping start-up.

They apply where our plugin works, a paged (page size > 1) tree draft (topk > 1), once the
draft worker holds the shared pools: SGLang 0.5.14+ sets them on the worker in
``alloc_memory_pool``, after ``__init__`` has already called ``init_attention_backend`` once
(that first call finds none, the one after ``alloc_memory_pool`` warms).
"""

import logging
import re
import time

from ..common.batch_classes import MAX_BATCH

logger = logging.getLogger("sglang_eagle_paged")


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


def warm_up_once(what: str, worker, plan) -> int:
    """Warm ``what`` (SGLang's, named in the log) for a paged tree draft worker; returns the calls made
    (0 where there is nothing to warm, it was warmed already, or it failed: one WARNING line).

    ``plan(worker, allocator, rows, max_batch)`` gives (holder, key, warm): ``warm()`` compiles and
    returns its calls, unless ``holder`` records ``key`` as warmed already; or None: nothing to warm."""
    try:
        found = paged_tree_pools(worker)
        planned = plan(worker, *found) if found is not None else None
        if planned is None:
            return 0
        holder, key, warm = planned
        attr = "_eagle_paged_v2_warm_" + re.sub(r"\W", "_", what)
        done = getattr(holder, attr, frozenset())
        if key in done:
            return 0
        start = time.perf_counter()
        calls = warm()
        setattr(holder, attr, done | {key})
        logger.info("[sglang-eagle-paged] SGLang's %s compiled ahead for batches of 1..%d (%.0f ms host time)",
                    what, found[2], 1e3 * (time.perf_counter() - start))
        return calls
    except Exception as exc:  # noqa: BLE001 -- an optimisation only: never a reason not to start
        logger.warning("[sglang-eagle-paged] SGLang's %s not compiled ahead (%s: %s); it compiles on first use, "
                       "as without the plugin", what, type(exc).__name__, str(exc)[:300])
        return 0
