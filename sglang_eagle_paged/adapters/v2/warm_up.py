"""Compile our duplication kernel when the draft worker's decode backend exists, not on the
first draft, and only where our kernel will copy.

The hook runs after the draft worker's ``init_attention_backend`` (every v2 release calls it
once the pool is allocated): the runner's pool and its draft decode backend both exist. It
records the runner on the pool (the duplication hook's reader, :mod:`.backends`); where that
backend never reads the copy (flashinfer, triton) or the pool is not ours, nothing compiles.
A failure here switches every v2 path of ours off for the process (one ERROR line): SGLang's own
function copies the prefix tail at every draft step and its own builders make fa3's draft metadata,
rather than a compile failing at the first one. FA3 in place goes off with the copy: without
our duplication SGLang's copies anyway, and reading in place as well would be ours still on.

The kernel's compiled variant depends only on the pool's buffer table (its constexprs) and the
slot dtype (``req_to_token``'s): batch size, topk and page size are runtime arguments that Triton
does not specialise on, so they change the grid, never the variant. One launch whose every
prefix tail is empty (it copies nothing) therefore compiles everything serving launches.
"""

import logging

import torch

from ...kernels.prefix_tail import compile_prefix_tail
from ..common import fa3_metadata
from . import alloc_warm_up, backends, dense_draft, duplicate, fa3_in_place, kv_reserve_note, move_warm_up, pools

logger = logging.getLogger("sglang_eagle_paged")

_WARM_ATTR = "_eagle_paged_v2_warm"


def warm_up_pool(pool, topk: int, page_size: int, slot_dtype: torch.dtype) -> bool:
    """Compile the kernel variant serving ``pool`` with ``slot_dtype`` slots; False where our
    kernel will not copy for this configuration (nothing to compile). FA3 in place copies
    nothing but is compiled for: a fault there brings the copy back while serving."""
    if topk <= 1 or page_size <= 1:
        return False
    table = pools.copy_table(pool)
    if table is None:
        return False
    decision = backends.pool_decision(pool)
    if not decision.copy and not decision.in_place:
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
    """Warm up for a v2 draft worker (EAGLE, STANDALONE or multi-layer EAGLE) once its draft decode
    backend exists: record its runner as the pool's reader, compile where our kernel will copy."""
    runner = getattr(worker, "draft_runner", None)
    pool = getattr(runner, "token_to_kv_pool", None)
    topk = getattr(worker, "topk", None)
    if pool is None or not isinstance(topk, int):
        return False
    backends.record_reader(pool, runner)
    page_size = getattr(pool, "page_size", 1)
    req_to_token = getattr(getattr(runner, "req_to_token_pool", None), "req_to_token", None)
    slot_dtype = req_to_token.dtype if isinstance(req_to_token, torch.Tensor) else torch.int32
    return warm_up_pool(pool, topk, page_size, slot_dtype)


def switch_off_everything(fault: str) -> None:
    """A fault at warm-up: every v2 path of ours off for the process (SGLang's prefix-tail copy and
    FA3 draft metadata serve; fa3 in place off), said in one ERROR line per process."""
    said = duplicate.switched_off() is not None
    duplicate.switch_off(fault, say=False)
    fa3_in_place.SWITCH.trip(fault, say=False)
    fa3_metadata.switch_off(fault, say=False)
    if not said:
        logger.error("[sglang-eagle-paged] v2 warm-up failed, SGLang's own prefix-tail copy and FA3 draft "
                     "metadata serve this process (fa3 in place off): %s", fault[:300])


def after_hook(result, worker, *args, **kwargs):
    """AFTER hook for the draft workers' ``init_attention_backend``."""
    dense_draft.decide(worker)  # SGLANG_EAGLE_PAGED_DENSE_DRAFT: its one line; a check that fails refuses
    try:
        warm_up_worker(worker)
    except Exception as exc:  # noqa: BLE001 -- our kernel failed before serving: SGLang's own serves instead
        switch_off_everything(f"warm-up: {type(exc).__name__}: {exc}")
    move_warm_up.warm_up_worker(worker)  # SGLang's post-verify KV move; an optimisation that logs its own failure
    alloc_warm_up.warm_up_worker(worker)  # SGLang's paged KV-slot allocation; the same
    kv_reserve_note.note(worker)  # what this pool holds of SGLang's per-request reserve: one line
    return result
