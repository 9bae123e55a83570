"""Triton kernels for paged tree drafting, each with a plain-torch reference.

- :mod:`.assign`    fills ``req_to_token`` for every branch, the draft slots and
  the (source, target) pairs of the last-page duplication, in one launch, from the
  allocator's output or (``assign_tree_draft_slots_from_free_pages``) straight from
  its free pages.
- :mod:`.duplicate` copies every pair for every K/V buffer of a pool in one launch.
- :mod:`.prefix_tail` the v2 worker's prefix-tail duplication: finds its pairs from the draft's
  rows and page geometry and copies them, in one launch; with its torch reference.
- :mod:`.reference` the same two operations in plain torch, for the tests.
- :mod:`.expand_metadata` FA3's tree-draft "expand" metadata, in one launch.
- :mod:`.draft_decode_metadata` all of one FA3 draft step's replay metadata
  (normal and expand), in one launch; with its torch reference.
- :mod:`.tree_extension` the paged allocator's ``seq_lens`` and ``last_loc`` for a
  tree-draft extension, in one launch.
- :mod:`.free_page_slots` the slots the paged allocator would hand out for a tree-draft
  extension, read from its free pages without allocating, as Triton helpers that
  :mod:`.assign` inlines.
- :mod:`.move_rows` the post-verify KV move (overlapping pairs, SGLang's chunked
  read-before-write order), one launch per chunk.
- :mod:`.verify_bookkeeping` the paged verify's source slots and per-request free
  counts (SGLang's ``get_src_tgt_cache_loc``), in one launch.
- :mod:`.launch` how the others launch: through the compiled variant's launcher once
  Triton has resolved the variant, skipping its per-call argument binding.

Everything here is free of SGLang imports: the glue lives in ``sglang_eagle_paged.adapters``
(``adapters.v1.draft_preprocess`` and ``adapters.v2`` for the draft step, ``adapters.common`` for
the pool copy and the FA3 metadata, ``adapters.v1.verify`` for the verify's bookkeeping).
"""

from .assign import TreeDraftLayout, assign_tree_draft_slots, assign_tree_draft_slots_from_free_pages, pair_capacity
from .draft_decode_metadata import draft_decode_metadata, draft_decode_metadata_reference
from .duplicate import KVBufferTable, duplicate_kv_pairs
from .tree_extension import TreeExtension, tree_extension
from .verify_bookkeeping import src_and_free_counts

__all__ = [
    "TreeDraftLayout",
    "assign_tree_draft_slots",
    "assign_tree_draft_slots_from_free_pages",
    "pair_capacity",
    "KVBufferTable",
    "duplicate_kv_pairs",
    "draft_decode_metadata",
    "draft_decode_metadata_reference",
    "TreeExtension",
    "tree_extension",
    "src_and_free_counts",
]
