"""The tree verify's slot allocation at page > 1 in one launch (opt-in: ``SGLANG_EAGLE_PAGED_VERIFY_ALLOC=1``).

``EagleVerifyInput.prepare_for_verify`` at page > 1 looks up each request's last slot, allocates the
verify's slots with ``alloc_paged_token_slots_extend`` and writes them to ``req_to_token``: three
launches and host arithmetic on CPU tensors, where page 1 slices the free list and makes one launch.
The AROUND hook here does the same with one launch (:mod:`.kernels.verify_alloc`), reading the slots
from the allocator's free list as ``alloc_extend`` would hand them out, then taking those pages off
the list as ``alloc_extend`` does.

Only on SGLang's own paged allocator outside debug mode, without the mamba track buffers, and where
the free list holds the pages the verify needs; every other call is SGLang's method, which evicts
from the tree cache or raises its own out-of-memory error as before. Off by default: on the H200
(run 15) it cut the step's host time from about 180 us to 40 us at page 64, but the throughput did
not move, because the host is not the critical path at this point of the verify. Turned on, it is
compiled and checked against SGLang's allocation at worker start-up (:func:`warm_up`), and stays off
if that fails.
"""

import logging
import os

import torch

from . import compat
from .kernels.verify_alloc import new_pages_total, verify_slots

logger = logging.getLogger("sglang_eagle_paged")

ENV_VAR = "SGLANG_EAGLE_PAGED_VERIFY_ALLOC"

_state = {"on": False}


def requested() -> bool:
    return os.environ.get(ENV_VAR, "0").strip().lower() in ("1", "on", "true", "yes")


def enabled() -> bool:
    return _state["on"]


def _refusal(batch, page_size: int) -> str | None:
    """Why this verify's slots are SGLang's to allocate; None where the hook allocates them."""
    if not _state["on"] or page_size <= 1 or batch.forward_mode.is_idle():
        return "not ours"
    tree_cache = batch.tree_cache
    allocator = getattr(tree_cache, "token_to_kv_pool_allocator", None)
    if type(allocator) is not compat.paged_allocator_class() or allocator.debug_mode:
        return "allocator"
    if compat.mamba_extra_buffer():
        return "mamba"
    return None


def prepare_for_verify_hook(original, spec_info, batch, page_size):
    """AROUND hook for ``EagleVerifyInput.prepare_for_verify``."""
    if _refusal(batch, page_size) is not None:
        return original(spec_info, batch, page_size)
    allocator = batch.tree_cache.token_to_kv_pool_allocator
    draft_tokens = spec_info.draft_token_num
    bs = batch.batch_size()
    # As alloc_paged_token_slots_extend: evict for an over-estimate of one extra page a request, and
    # merge the release pages where the allocator keeps them sorted and the free list runs short.
    compat.evict_from_tree_cache(batch.tree_cache, bs * draft_tokens + bs * page_size)
    if allocator.need_sort and bs * draft_tokens // page_size + bs + 1 > len(allocator.free_pages):
        allocator.merge_and_sort_free()
    num_new_pages = new_pages_total(batch.seq_lens_cpu, draft_tokens, page_size)
    if num_new_pages > len(allocator.free_pages):
        return original(spec_info, batch, page_size)  # SGLang's own out-of-memory path
    batch.input_ids = spec_info.draft_token
    batch.out_cache_loc = verify_slots(batch.req_to_token_pool.req_to_token, batch.req_pool_indices,
                                       batch.seq_lens, allocator.free_pages, draft_tokens, page_size)
    allocator.free_pages = allocator.free_pages[num_new_pages:]


def hooks() -> dict:
    """The plugin's hook for this module (none unless ``SGLANG_EAGLE_PAGED_VERIFY_ALLOC`` asks for it)."""
    return {compat.PREPARE_FOR_VERIFY: (prepare_for_verify_hook, "AROUND")} if requested() else {}


def check(device, draft_tokens: int, page_size: int) -> str | None:
    """Why the kernel cannot stand in for SGLang's allocation here: its error, or other slots, another
    ``req_to_token`` or another free list than SGLang's helpers give on a few verifies; None where it can."""
    try:
        for seed, bs in ((0, 1), (1, 5)):
            got, want = (_one_verify(device, draft_tokens, page_size, seed, bs, ours) for ours in (True, False))
            for name, a, b in zip(("slots", "req_to_token", "free list"), got, want):
                if not torch.equal(a, b):
                    return f"its {name} differ from SGLang's"
    except Exception as exc:  # a Triton or driver error
        return f"{type(exc).__name__}: {exc}"
    return None


def _one_verify(device, draft_tokens, page_size, seed, bs, ours):
    from .harness import verify_harness

    gen = torch.Generator().manual_seed(seed)
    h, batch = verify_harness(page_size, draft_tokens, torch.randint(1, 3 * page_size + 2, (bs,), generator=gen).tolist(),
                              device)
    if ours:
        out = verify_slots(h.req_to_token_pool.req_to_token, batch.req_pool_indices, batch.seq_lens,
                           h.allocator.free_pages, draft_tokens, page_size)
        h.allocator.free_pages = h.allocator.free_pages[new_pages_total(batch.seq_lens_cpu, draft_tokens,
                                                                        page_size):]
    else:
        out = sglang_verify_slots(h, batch, draft_tokens)
    return out, h.req_to_token_pool.req_to_token.clone(), h.allocator.free_pages.clone()


def sglang_verify_slots(h, batch, draft_tokens: int) -> torch.Tensor:
    """``prepare_for_verify``'s allocation and assignment at page > 1, through SGLang's helpers."""
    last_loc = compat.resolve(compat.GET_LAST_LOC)(h.req_to_token_pool.req_to_token, batch.req_pool_indices,
                                                   batch.seq_lens)
    end, end_cpu = batch.seq_lens + draft_tokens, batch.seq_lens_cpu + draft_tokens
    out = compat.alloc_paged_token_slots_extend(h.tree_cache, batch.seq_lens, batch.seq_lens_cpu, end, end_cpu,
                                                last_loc, len(batch.seq_lens_cpu) * draft_tokens)
    compat.assign_req_to_token_pool(batch.req_pool_indices, h.req_to_token_pool.req_to_token, batch.seq_lens, end,
                                    out, len(batch.seq_lens_cpu))
    return out


def warm_up(device, draft_tokens: int, page_size: int) -> None:
    """Turn the hook on for this process if asked, compiling and checking the kernel first."""
    _state["on"] = False
    if page_size <= 1 or not requested():
        return
    problem = check(device, draft_tokens, page_size)
    if problem is None:
        _state["on"] = True
        return
    logger.warning("[sglang-eagle-paged] %s=1 but the verify's slots stay SGLang's (%s)", ENV_VAR, problem[:500])
