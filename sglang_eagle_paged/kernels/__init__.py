"""Triton kernels for paged tree drafting, each with a plain-torch reference.

- :mod:`.assign`    fills ``req_to_token`` for every branch, the draft slots and
  the (source, target) pairs of the last-page duplication, in one launch.
- :mod:`.duplicate` copies every pair for every K/V buffer of a pool in one launch.
- :mod:`.reference` the same two operations in plain torch, for the tests.

Everything here is free of SGLang imports: the glue lives in ``sglang_eagle_paged.worker``.
"""

from .assign import TreeDraftLayout, assign_tree_draft_slots, pair_capacity
from .duplicate import KVBufferTable, duplicate_kv_pairs

__all__ = [
    "TreeDraftLayout",
    "assign_tree_draft_slots",
    "pair_capacity",
    "KVBufferTable",
    "duplicate_kv_pairs",
]
