"""Compile our duplication kernel when the draft worker's decode backend exists, not on the
first draft, and only where our kernel will copy.

The hook runs after the draft worker's ``init_attention_backend`` (every v2 release calls it
once the pool is allocated): the runner's pool and its draft decode backend both exist. It
derives the runner's plan (:mod:`.draft_plan`); where that plan does not copy with our kernel
(flashinfer, triton, fa3 in place, a pool that is not ours), nothing compiles. A failure here
switches every v2 path of ours off for the process (:mod:`.fault`, one ERROR line): SGLang's own
function copies the prefix tail at every draft step and its own builders make fa3's draft metadata,
rather than a compile failing at the first one.

The kernel's compiled variant depends only on the pool's buffer table (its constexprs) and the
slot dtype (``req_to_token``'s): batch size, topk and page size are runtime arguments that Triton
does not specialise on, so they change the grid, never the variant. One launch whose every
prefix tail is empty (it copies nothing) therefore compiles everything serving launches.
"""

import logging

import torch

from ...kernels.prefix_tail import compile_prefix_tail
from ...tree_layout import paged_tree
from . import alloc_warm_up, dense_draft, draft_plan, fault, kv_reserve_note, move_warm_up

logger = logging.getLogger("sglang_eagle_paged")


def warm_up_pool(pool, topk: int, page_size: int, slot_dtype: torch.dtype) -> bool:
    """Compile the kernel variant serving ``pool`` with ``slot_dtype`` slots; False where its plan
    does not copy with our kernel (nothing to compile)."""
    if not paged_tree(page_size, topk):
        return False
    plan = draft_plan.current(pool)
    if plan.copy != draft_plan.OURS:
        return False
    if slot_dtype not in plan.compiled:
        compile_prefix_tail(plan.table, slot_dtype)
        plan.compiled.add(slot_dtype)
    return True


def warm_up_worker(worker, options: draft_plan.Options = draft_plan.NO_OPTIONS) -> bool:
    """Warm up for a v2 draft worker (EAGLE, STANDALONE or multi-layer EAGLE) once its draft decode
    backend exists: derive its runner's plan (``options``: what the installed hooks ask), compile
    where our kernel will copy."""
    runner = getattr(worker, "draft_runner", None)
    pool = getattr(runner, "token_to_kv_pool", None)
    topk = getattr(worker, "topk", None)
    if pool is None or not isinstance(topk, int):
        return False
    draft_plan.record(pool, runner, options)
    page_size = getattr(pool, "page_size", 1)
    req_to_token = getattr(getattr(runner, "req_to_token_pool", None), "req_to_token", None)
    slot_dtype = req_to_token.dtype if isinstance(req_to_token, torch.Tensor) else torch.int32
    return warm_up_pool(pool, topk, page_size, slot_dtype)


def after_hook(result, worker, *args, options: draft_plan.Options = draft_plan.NO_OPTIONS, **kwargs):
    """AFTER hook for the draft workers' ``init_attention_backend`` (``options``: bound by the hook table)."""
    dense_draft.decide(worker, options.dense)  # SGLANG_EAGLE_PAGED_DENSE_DRAFT: its one line; a failed check refuses
    try:
        warm_up_worker(worker, options)
    except Exception as exc:  # noqa: BLE001 -- our kernel failed before serving: SGLang's own serves instead
        fault.trip("warm-up", exc)
    move_warm_up.warm_up_worker(worker)  # SGLang's post-verify KV move; an optimisation that logs its own failure
    alloc_warm_up.warm_up_worker(worker)  # SGLang's paged KV-slot allocation; the same
    # what this pool holds of SGLang's per-request reserve: one line
    kv_reserve_note.note(worker, dense=options.dense is not None and options.dense.active)
    return result
