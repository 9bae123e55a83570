"""One start-up line on the KV memory SGLang reserves for a paged tree draft (page > 1, topk > 1).

SGLang keeps ``reserve_per_decode`` free slots for every running request at each decode step
(:mod:`sglang_eagle_paged.kv_reserve`): whole pages for every draft branch, 16 times page 1's at
page 64 and topk 8. A pool sized for page 1 then retracts requests under load, which costs more
throughput than any copy, and nothing in SGLang's log says why until it happens. The line says what
this pool holds; it is a WARNING where the running-request cap cannot fit even the reserves. Reading
only: a failure is logged at debug level and changes nothing.
"""

from ...tree_layout import reserve_per_decode
from .warm_up_scope import logger, paged_tree_pools, shared

_NOTED_ATTR = "_eagle_paged_v2_reserve_noted"


def note(worker, dense: bool = False) -> str | None:
    """Log (once per pool) and return the line for a paged tree draft worker whose pools exist
    (``dense``: the dense draft layout serves it)."""
    try:
        found = paged_tree_pools(worker)
        if found is None:
            return None
        allocator = found[0]
        if getattr(allocator, _NOTED_ATTR, False):
            return None
        page, topk = allocator.page_size, worker.topk
        steps, draft = worker.speculative_num_steps, worker.speculative_num_draft_tokens
        reserve = reserve_per_decode(page, topk, steps, draft, dense=dense)
        size = int(allocator.size)
        cap = getattr(getattr(worker, "server_args", None), "max_running_requests", None) or \
            getattr(shared(worker, "req_to_token_pool"), "size", None)
        at_page_1 = reserve_per_decode(1, topk, steps, draft)
        line = (f"[sglang-eagle-paged] SGLang keeps {reserve:,} KV slots free per running request at each "
                f"decode step here (page {page}, topk {topk}, {steps} steps, {draft} draft tokens; {at_page_1:,} "
                f"at page 1): this pool's {size:,} slots hold that for {size // reserve:,} requests before "
                f"their contexts; beyond that SGLang retracts requests (README: Page size and KV memory)")
        too_small = bool(cap) and int(cap) * reserve > size
        if too_small:
            line += f". --max-running-requests {int(cap)} needs {int(cap) * reserve:,} for the reserves alone"
        (logger.warning if too_small else logger.info)(line)
        setattr(allocator, _NOTED_ATTR, True)
        return line
    except Exception as exc:  # noqa: BLE001 -- a note only: never a reason not to start
        logger.debug("[sglang-eagle-paged] no KV reserve note: %s: %s", type(exc).__name__, exc)
        return None
