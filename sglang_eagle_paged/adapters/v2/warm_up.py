"""Compile our duplication kernel when the draft worker's pool exists, not on the first draft.

The kernel's compiled variant depends only on the pool's buffer table (its constexprs) and the
slot dtype (``req_to_token``'s): batch size, topk and page size are runtime arguments that Triton
does not specialise on, so they change the grid, never the variant. One launch whose every
prefix tail is empty (it copies nothing) therefore compiles everything serving launches.
"""

import logging

import torch

from ...kernels.prefix_tail import compile_prefix_tail
from . import move_warm_up, pools

logger = logging.getLogger("sglang_eagle_paged")

_WARM_ATTR = "_eagle_paged_v2_warm"


def warm_up_pool(pool, topk: int, page_size: int, slot_dtype: torch.dtype) -> bool:
    """Compile the kernel variant serving ``pool`` with ``slot_dtype`` slots; False where our
    kernel does not serve this configuration (nothing to compile)."""
    if topk <= 1 or page_size <= 1:
        return False
    table = pools.copy_table(pool)
    if table is None:
        return False
    done = getattr(pool, _WARM_ATTR, None)
    key = (table.keys, slot_dtype)
    if done is not None and key in done:
        return True
    compile_prefix_tail(table, slot_dtype)
    try:
        setattr(pool, _WARM_ATTR, (done or frozenset()) | {key})
    except AttributeError:
        pass
    return True


def warm_up_worker(worker) -> bool:
    """Warm up for a v2 draft worker (EAGLE, STANDALONE or multi-layer EAGLE) once its pool exists."""
    runner = getattr(worker, "draft_runner", None)
    pool = getattr(runner, "token_to_kv_pool", None)
    topk = getattr(worker, "topk", None)
    if pool is None or not isinstance(topk, int):
        return False  # called before the pool is allocated (__init__ of 0.5.14+): its alloc_memory_pool follows
    page_size = getattr(pool, "page_size", 1)
    req_to_token = getattr(getattr(runner, "req_to_token_pool", None), "req_to_token", None)
    slot_dtype = req_to_token.dtype if isinstance(req_to_token, torch.Tensor) else torch.int32
    return warm_up_pool(pool, topk, page_size, slot_dtype)


def after_hook(result, worker, *args, **kwargs):
    """AFTER hook for the draft workers' ``__init__`` / ``alloc_memory_pool``."""
    try:
        warm_up_worker(worker)
    except Exception as exc:  # noqa: BLE001 -- a failed warm-up costs one compile at the first draft, not the server
        logger.warning("[sglang-eagle-paged] v2 warm-up skipped (%s: %s); the kernel compiles at the first draft",
                       type(exc).__name__, exc)
    move_warm_up.warm_up_worker(worker)  # SGLang's post-verify KV move; logs its own failure
    return result
