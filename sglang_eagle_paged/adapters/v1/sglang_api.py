"""The v1 generation's SGLang surface (0.5.8 .. 0.5.12.post1): the dotted targets the v1
adapter hooks and the SGLang internals it calls, in one file, so that a difference between
releases is fixed here. Which releases are v1 is :mod:`sglang_eagle_paged.releases`' business.
"""

import functools

import torch

from ...hooks import resolve, resolve_first  # noqa: F401  (resolve_first: the warm-up looks it up here)

# Dotted targets of the hooks, in the form SGLang's HookRegistry takes.
EAGLE_WORKER = "sglang.srt.speculative.eagle_worker.EAGLEWorker"
DRAFT_PREPROCESS = EAGLE_WORKER + "._draft_preprocess_decode"
WORKER_INIT = EAGLE_WORKER + ".__init__"
# STANDALONE's worker subclasses EAGLEWorker but skips its __init__: warm-up needs its own hook.
STANDALONE_WORKER_INIT = "sglang.srt.speculative.standalone_worker.StandaloneWorker.__init__"
MHA_POOL = "sglang.srt.mem_cache.memory_pool.MHATokenToKVPool"
MOVE_KV_CACHE = MHA_POOL + ".move_kv_cache"
PAGED_ALLOCATOR = "sglang.srt.mem_cache.allocator.PagedTokenToKVPoolAllocator"
# Its Triton kernel, launched as alloc_extend_kernel[(bs,)](prefix_lens, seq_lens, last_loc, free_pages,
# out_indices, next_power_of_2(bs), page_size) in 0.5.11 .. 0.5.12.post1 (allocator_warm_up.py)
ALLOC_EXTEND_KERNEL = "sglang.srt.mem_cache.allocator.alloc_extend_kernel"
# Its free: an AROUND hook takes a paged verify's page list without torch.unique (verify_free.py).
PAGED_FREE = PAGED_ALLOCATOR + ".free"
SPEC_ARGS_CHECK = "sglang.srt.server_args.ServerArgs._handle_speculative_decoding"
# The paged tree verify's slot bookkeeping (torch.compile'd in SGLang; ours is one Triton launch). Imported by
# name into eagle_info and ngram_info: the registry patches those modules' references too.
SRC_TGT_CACHE_LOC = "sglang.srt.speculative.spec_utils.get_src_tgt_cache_loc"
# The paged tree verify's other per-batch-size kernels, launched by eagle_info (and ngram_info) as
#   get_target_cache_loc[(bs,)](tgt, to_free, num_correct_drafts, to_free_num_slots, out_cache_loc,
#                               draft_tokens, next_power_of_2(draft_tokens), next_power_of_2(bs))
#   filter_finished_cache_loc_kernel[(bs,)](out_cache_loc, tgt, num_correct_drafts, filter,
#                                           next_power_of_2(bs), next_power_of_2(draft_tokens))
# and the torch.compile'd filter of a round where a request finished, renamed in 0.5.12
# (verify_warm_up.py).
TARGET_CACHE_LOC_KERNEL = "sglang.srt.speculative.spec_utils.get_target_cache_loc"
FILTER_FINISHED_KERNEL = "sglang.srt.speculative.spec_utils.filter_finished_cache_loc_kernel"
# The EAGLE verify's module, whose imported get_target_cache_loc must be our page-list split.
VERIFY_MODULES = ("sglang.srt.speculative.eagle_info",)
FINISHED_FILTER_NAMES = ("sglang.srt.speculative.spec_utils.create_num_accept_tokens_filter",  # 0.5.12
                         "sglang.srt.speculative.spec_utils.create_num_accepted_drafts_filter")  # 0.5.11
# prepare_for_verify's last-slot lookup at page > 1 (a Triton kernel on CUDA whose int arguments,
# the batch size among them, Triton specialises on: 1, a multiple of 16, other).
GET_LAST_LOC = "sglang.srt.mem_cache.common.get_last_loc"
# The grad mode the scheduler serves under (no_grad, or inference_mode where SGLang's env asks for it):
# torch.compile guards on it, so a warm-up compiled outside it compiles again on the first real call.
DYNAMIC_GRAD_MODE = "sglang.srt.utils.common.DynamicGradMode"
# The verify's slot allocation and assignment (verify_alloc.py, opt-in).
PREPARE_FOR_VERIFY = "sglang.srt.speculative.eagle_info.EagleVerifyInput.prepare_for_verify"
# Whole draft and verify steps: wrapped only by the debug prefix check (SGLANG_EAGLE_PAGED_CHECK_PREFIX).
DRAFT_STEP = EAGLE_WORKER + ".draft"
VERIFY_STEP = EAGLE_WORKER + ".verify"


# --- SGLang internals the worker calls (same names in 0.5.11 .. 0.5.12.post1) ---

def alloc_paged_token_slots_extend(*args, **kwargs):
    from sglang.srt.mem_cache.common import alloc_paged_token_slots_extend as impl

    return impl(*args, **kwargs)


def evict_from_tree_cache(tree_cache, num_tokens: int) -> None:
    from sglang.srt.mem_cache.common import evict_from_tree_cache as impl

    impl(tree_cache, num_tokens)


def assign_req_to_token_pool(req_pool_indices, req_to_token, start, end, out_cache_loc, bs: int) -> None:
    from sglang.srt.speculative.spec_utils import assign_req_to_token_pool_func

    assign_req_to_token_pool_func(req_pool_indices, req_to_token, start, end, out_cache_loc, bs)


def mamba_extra_buffer() -> bool:
    """Whether the verify also tracks mamba state buffers (``prepare_for_verify``'s last part)."""
    from sglang.srt.server_args import get_global_server_args

    enabled = getattr(get_global_server_args(), "enable_mamba_extra_buffer", None)
    return bool(enabled and enabled())


def release_free_pages(allocator, pages: torch.Tensor) -> None:
    """``PagedTokenToKVPoolAllocator.free``'s outside a free group, for pages already distinct: the
    same lists, in the same order, without its ``torch.unique`` (0.5.11 .. 0.5.12.post1)."""
    if allocator.need_sort:
        allocator.release_pages = torch.cat((pages, allocator.release_pages))
    else:
        allocator.free_pages = torch.cat((pages, allocator.free_pages))


def last_verified_tokens(spec_info):
    """The tokens the penalizer accumulates: renamed verified_id -> bonus_tokens in 0.5.12."""
    tokens = getattr(spec_info, "bonus_tokens", None)
    return tokens if tokens is not None else spec_info.verified_id


@functools.lru_cache(maxsize=1)
def paged_allocator_class():
    """SGLang's paged allocator class, resolved once (checked every draft step)."""
    return resolve(PAGED_ALLOCATOR)


def max_batch_size(worker) -> int | None:
    """The most requests one of the worker's batches can hold: --max-running-requests (SGLang sets
    48 for EAGLE when it is not given), else the request pool's size; None where neither is known."""
    limit = getattr(getattr(worker, "server_args", None), "max_running_requests", None)
    if limit is None:
        limit = getattr(getattr(worker, "req_to_token_pool", None), "size", None)
    return int(limit) if limit else None


def worker_req_to_token(worker):
    """The worker's request-to-slot table (shared with the target), or None where it has none."""
    return getattr(getattr(worker, "req_to_token_pool", None), "req_to_token", None)


def worker_kv_pools(worker) -> dict:
    """An EAGLEWorker's KV pools by part: the draft model's own, and the target model's."""
    return {"draft": worker.draft_model_runner.token_to_kv_pool,
            "target": worker.target_worker.model_runner.token_to_kv_pool}
