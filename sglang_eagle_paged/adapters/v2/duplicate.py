"""The v2 worker's prefix-tail duplication, sync-free: an AROUND hook on SGLang's
``duplicate_prefix_tail_to_draft_branches`` (same arguments, same resulting KV bytes).

SGLang's own function (0.5.13 .. 0.5.23) selects the live pairs with two boolean-mask
indexings (two host syncs per draft step) and copies them through the pool's
``move_kv_cache`` in ceil(N/256) launches whose Triton variant depends on N. Here one launch
of :func:`~sglang_eagle_paged.kernels.prefix_tail.duplicate_prefix_tail` finds the pairs and
copies them, with no torch op before it; batch size, topk and page size are runtime arguments:
the same compiled variant for every batch.

Which of the three serves is decided once per draft runner (:mod:`.draft_plan`): the pool first
-- pools other than the plain NHD ``MHATokenToKVPool`` (:mod:`.pools`) run SGLang's function
unchanged, whatever reads them; then the reader (:mod:`.backends`): the draft decode backend object
of the runner that owns the pool. fa3 reads the copied slots, flashinfer and triton provably never
do, so for them the hook returns without a launch (nothing to copy is the fastest copy); anything
the proof does not cover copies, as SGLang does. Each pool class's path is logged once. The hook
body is the draft step's (:func:`.draft_step.duplication_hook`).

A failure on our path (an exception raised on the host while deciding, building the pairs or
launching, compile errors included) never reaches SGLang's scheduler: that call runs SGLang's
own function, every v2 path of ours is switched off for the process, and one ERROR line says why
(:mod:`.fault`). A copy our kernel began writes the same bytes SGLang's function then writes, so
the KV ends as SGLang's function leaves it.

Mode ``fake`` copies nothing (the old index-only behaviour, for benchmarks); mode ``off``
installs no hook at all.
"""

from ...kernels.prefix_tail import duplicate_prefix_tail
from . import pools


def duplicate_in_pool(token_to_kv_pool, rows, prefix_base, last_page, num_new_pages, topk: int,
                      page_size: int) -> bool:
    """Copy every branch's first-page prefix tail with our kernel; False where ``token_to_kv_pool``
    is not one we copy (nothing done: the caller runs SGLang's function)."""
    table = pools.copy_table(token_to_kv_pool)
    if table is None:
        return False
    duplicate_prefix_tail(table, rows, prefix_base, last_page, num_new_pages, topk, page_size)
    return True
