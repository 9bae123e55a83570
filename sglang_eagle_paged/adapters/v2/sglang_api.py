"""Every SGLang name the v2 adapter hooks or reads (0.5.13 .. 0.5.23), in one place: where a release
moves or renames one, this is the module to read. Names only (dotted paths and attribute names);
nothing here imports SGLang. The modules that hook or read a name take it from here; which release
has which is said beside it (the check of the duplication's homes is :mod:`.hook_points`).

The FA3 names the v1 adapter shares (the expand builder, the multi-step replay) are the common
module's (:mod:`..common.fa3_metadata`), listed here too so that this module names them all.
"""

from ..common.fa3_metadata import FA3_BACKEND, FA3_EXPAND_METADATA, FA3_MODULE, FA3_MULTI_STEP_BACKEND  # noqa: F401

SPEC = "sglang.srt.speculative."
ATTENTION = "sglang.srt.layers.attention."
MEM_CACHE = "sglang.srt.mem_cache."

# ---------------------------------------------------------------- the prefix-tail duplication

# The function every v2 release drafts through, and its parameters (same code in every release).
DUPLICATE = "duplicate_prefix_tail_to_draft_branches"
DUPLICATE_PARAMETERS = ("token_to_kv_pool", "rows", "prefix_base", "last_page", "num_new_pages", "topk", "page_size")
# Its module homes, each with its paged-branch caller (which looks it up as a module global) and
# the first and last release of that home: (module, caller, first, last).
DUPLICATE_HOMES = (
    (SPEC + "eagle_info_v2", SPEC + "eagle_info_v2.EagleDraftInputV2Mixin.prepare_for_v2_draft", "0.5.13",
     "0.5.13.post1"),
    (SPEC + "base_spec_worker", SPEC + "base_spec_worker.EagleDraftWorkerBase.prepare_for_draft", "0.5.14",
     "0.5.15.post1"),
    (SPEC + "eagle_worker_common", SPEC + "eagle_worker_common.prepare_for_draft", "0.5.16", "0.5.23"),
)

# ---------------------------------------------------------------- the draft workers (warm-up)

# Whose pool and draft decode backend exist once WARM_UP_METHOD returns (0.5.13.post1 .. 0.5.23:
# EagleDraftWorker and MultiLayerEagleDraftWorker, a sibling class; StandaloneDraftWorker inherits
# EagleDraftWorker's). What the warm-up reads of them: ``draft_runner`` (its ``token_to_kv_pool``,
# ``draft_attn_backend``, ``req_to_token_pool``), ``topk``, ``speculative_num_steps``,
# ``speculative_num_draft_tokens``, ``server_args``, ``token_to_kv_pool_allocator``.
WARM_UP_METHOD = "init_attention_backend"
DRAFT_WORKERS = (
    SPEC + "eagle_worker_v2.EagleDraftWorker",
    SPEC + "standalone_worker_v2.StandaloneDraftWorker",
    SPEC + "multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker",
)
# SGLang's own kernels the warm-up compiles ahead.
MOVE = SPEC + "spec_utils.move_accept_tokens_to_target_kvcache"
PAGED_ALLOCATOR = MEM_CACHE + "allocator.PagedTokenToKVPoolAllocator"
GET_LAST_LOC = (MEM_CACHE + "allocation.get_last_loc", MEM_CACHE + "common.get_last_loc")  # 0.5.17+, before
ASSIGN_ROWS = (MEM_CACHE + "allocation.assign_req_to_token_pool_func",
               MEM_CACHE + "common.assign_req_to_token_pool_func")

# ---------------------------------------------------------------- the draft decode backends

TRITON_MODULE = ATTENTION + "triton_backend"
FLASHINFER_MODULE = ATTENTION + "flashinfer_backend"
TRITON_DRAFT_BACKEND = TRITON_MODULE + ".TritonMultiStepDraftBackend"
FLASHINFER_DRAFT_BACKEND = FLASHINFER_MODULE + ".FlashInferMultiStepDraftBackend"
# (the same module.qualname in 0.5.13.post1, 0.5.15.post1, 0.5.17 and 0.5.23; FA3_MULTI_STEP_BACKEND too)

# ---------------------------------------------------------------- the dense draft layout (0.5.17 .. 0.5.23)

ALLOC_LEN_PER_DECODE = MEM_CACHE + "allocation_sizing.get_alloc_len_per_decode"
PREPARE_FOR_DRAFT = SPEC + "eagle_worker_common.prepare_for_draft"
INDEX_KERNEL = "generate_draft_decode_kv_indices"  # a global of TRITON_MODULE and FLASHINFER_MODULE
PAGE_1_SLOTS = "sglang.kernels.ops.speculative.cache_locs.assign_draft_cache_locs_contiguous"

# ---------------------------------------------------------------- fa3

FA3_INIT = FA3_BACKEND + ".__init__"
FA3_EAGER_METADATA = FA3_BACKEND + ".init_forward_metadata"
FA3_GRAPH_METADATA = FA3_BACKEND + ".init_forward_metadata_out_graph"
FA3_KERNEL = FA3_MODULE + ".flash_attn_with_kvcache"
FA3_FUSED_TARGET = FA3_MULTI_STEP_BACKEND + ".init_forward_metadata_out_graph"

# ---------------------------------------------------------------- settings read

ENVIRON = "sglang.srt.environ.envs"  # SGLANG_NATIVE_MOVE_KV_CACHE
