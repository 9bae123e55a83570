"""FA3 tree drafting at page > 1 that reads the prefix tail in place: nothing to copy (issue 38).

SGLang's FA3 draft decode with topk > 1 (``FlashAttentionBackend``, 0.5.13 .. 0.5.23) attends in
two passes merged by their log-sum-exp. At page > 1 it splits them so that the copy is needed:

- the first pass reads the prefix minus its partial last page (``cache_seqlens = seq_len - last``);
- the expand pass reads ``last + decode_length`` tokens of each branch through a page table of the
  branch's own pages (``draft_decode_set_expand_metadata``): from offset 0 of its first page, so
  the ``last`` holes that the prefix-tail copy fills, then its draft tokens.

Nothing forces that split. Here the first pass reads the whole prefix, its partial last page in
place (the page table SGLang built already holds that page: its width covers the full
``seq_len``), and the expand pass reads only the branch's ``decode_length`` draft slots through
a per-token page table (the slot ids themselves) over a page-size-1 view of the same KV buffer,
as SGLang's own page-size-1 mode reads it. Same keys, same log-sum-exp merge, no hole read.

The two pieces are sync-free tensor ops that a CUDA graph can capture:
:func:`rewrite_draft_metadata` (after SGLang's builders, eager or graph capture/replay) and
:func:`per_token_view` (the KV buffers the expand call must be given). The hooks (behind
``SGLANG_EAGLE_PAGED_FA3_IN_PLACE``, off by default, on the releases ``releases.py`` lists as
proven) are the thinnest glue SGLang allows:

- AFTER ``FlashAttentionBackend.__init__``: a draft runner's backend says once whether it is a
  plain MHA one on a plain pool the proof covers (:func:`after_backend_init`);
- per draft step (:mod:`.draft_step`): AFTER ``init_forward_metadata`` and
  ``init_forward_metadata_out_graph``, the rewrite, on the draft decode's topk > 1 metadata only;
  AROUND the backend module's ``flash_attn_with_kvcache`` global, the page-size-1 view for a call
  whose page table the rewrite marked. Only the expand call of the draft decode passes that table:
  the expand metadata is set only by the draft decode and target-verify builders, and the target
  verify's is a different object SGLang already reads per token. That global is the narrowest
  point both releases give the view at (docs/design.md, "fa3 in place: where the view is given").

The duplication skips the copy for a draft runner only when every step backend of its multi-step
FA3 backend is covered (:func:`reads_in_place`, asked once per draft runner by its plan).

A fault in our part of a forward never reaches the scheduler (:mod:`.fault`): one ERROR line,
and from the next draft round on SGLang's own function copies the tail again, which makes both
forms right: SGLang's split reads the copied tail, ours never reads it. Eager drafts then keep
SGLang's metadata; a CUDA graph captured with our per-token view keeps its tables rewritten on
replay, since the graph reads them per token whatever the setting says now. The CPU proof is
``tests/adapters/v2/test_fa3_in_place.py``; the argument is in docs/backend_reads.md. SGLang is
not imported here.
"""

import logging

from ...tree_layout import paged_tree
from . import backends, fault, pools
from . import sglang_api as api

TARGETS = {"init": api.FA3_INIT, "eager": api.FA3_EAGER_METADATA, "graph": api.FA3_GRAPH_METADATA,
           "kernel": api.FA3_KERNEL}
REASON = backends.REASON_IN_PLACE

logger = logging.getLogger("sglang_eagle_paged")

# An attribute on the expand page table: read it through per_token_view, not by page.
PER_TOKEN = "_sglang_eagle_paged_per_token"


def rewrite_draft_metadata(metadata, expand, seq_lens, cache_loc, decode_length: int) -> None:
    """Turn SGLang's page > 1 draft-decode metadata into the in-place form, in place.

    ``metadata``/``expand``: the first and expand pass's ``FlashAttentionMetadata`` as SGLang's
    builder left them for this draft step; ``seq_lens``: the requests' committed lengths (bs,);
    ``cache_loc``: ``out_cache_loc`` viewed ``(bs * topk, num_steps)`` (branch-major, as SGLang
    views it). Either may hold fewer rows than a CUDA graph's padded metadata; ``decode_length``: ``speculative_step_id + 1``. The expand page table must be at
    least ``decode_length`` wide (SGLang's eager one is ``num_steps`` wide, its CUDA-graph one
    ``decode_length + 1``).
    """
    # A CUDA graph replays at a captured batch size: its metadata has rows past the batch's.
    # SGLang 0.5.17 pads ``seq_lens`` to that size but passes ``out_cache_loc`` as the batch's
    # own (0.5.23 pads both), so the rows each tensor holds are counted apart.
    bs, n = metadata.cache_seqlens_int32.shape[0], expand.cache_seqlens_int32.shape[0]
    have, rows = min(bs, seq_lens.shape[0]), min(n, cache_loc.shape[0])
    metadata.cache_seqlens_int32[:have].copy_(seq_lens[:have])  # the whole prefix, its partial last page too
    expand.cache_seqlens_int32.fill_(decode_length)  # the branch's own draft tokens only
    expand.page_table[:rows, :decode_length].copy_(cache_loc[:rows, :decode_length])
    # Padding rows (their output is dropped) read slot 0, the pool's padding slot, not whatever
    # an earlier, larger batch left in the table.
    expand.page_table[rows:n, :decode_length].zero_()
    mark_per_token(expand.page_table)


def mark_per_token(page_table) -> None:
    """Say that ``page_table`` is read per token (a graph captured before its replays write it)."""
    setattr(page_table, PER_TOKEN, True)


def is_per_token(page_table) -> bool:
    """Whether ``page_table`` is an expand page table :func:`rewrite_draft_metadata` wrote."""
    return getattr(page_table, PER_TOKEN, False)


def per_token_view(paged_cache):
    """The ``(pages, page_size, heads, dim)`` KV view FA3 reads by page, as pages of one slot:
    ``(pages * page_size, 1, heads, dim)``, the same memory (no copy)."""
    return paged_cache.view(-1, 1, *paged_cache.shape[2:])


# --------------------------------------------------------------------------- the hooks

# Set on every draft-runner FA3 backend at page > 1, topk > 1: True where the proof covers it (the
# metadata hooks rewrite its draft decode; the duplication's decision reads it, :func:`reads_in_place`).
MARK = "_sglang_eagle_paged_in_place"


def not_covered(backend) -> str | None:
    """None where the proof covers ``backend`` (FA3, MHA, a plain pool in its token-major layout,
    no translated reads, no sliding-window layers, no local attention, no KV sharding); else why
    not, in one line."""
    if getattr(backend, "fa_impl_ver", 3) != 3:
        return f"FlashAttention {backend.fa_impl_ver} is not covered by the proof (FA3 is)"
    # The proof's pool holds slot s as row s of (slots, heads, dim) buffers: that is what lets
    # per_token_view read FA3's pages one slot at a time. Other pools lay slots out otherwise.
    pool_problem = pools.layout_reason(getattr(backend, "token_to_kv_pool", None))
    if pool_problem is not None:
        return f"the draft KV pool is not covered by the proof: {pool_problem}"
    checks = (
        ("use_mla", True, "MLA"),
        ("has_swa", True, "sliding-window attention"),
        ("use_sliding_window_kv_pool", True, "a sliding-window pool"),
        ("local_attn_builder", None, "chunked local attention"),
        ("has_local_attention", True, "chunked local attention"),  # 0.5.17 has no builder object
        ("_kv_shard_pool", None, "KV sharding"),
    )
    for attr, bad, what in checks:
        value = getattr(backend, attr, bad)
        if (value is not None) if bad is None else bool(value):
            return f"{what} is not covered by the proof"
    if _translated(backend):
        return "translated KV reads are not covered by the proof"
    if (getattr(backend, "attn_cp_size", 1) or 1) > 1:
        return "attention context parallelism is not covered by the proof"
    return None


def _translated(backend) -> bool:
    """Whether the backend's ``req_to_token`` ids are not the KV buffer's own slots (or we cannot
    tell). 0.5.23: its ``KVIndexTranslator`` says (unified pools, a fused draft). 0.5.17 has no
    translator: its ids are virtual only on the unified pool, whose allocator hooks ``__init__``
    keeps as ``_unified_hooks`` (enabled: the allocator has a virtual-to-physical page table);
    its sliding-window pool is refused above (``use_sliding_window_kv_pool``)."""
    if hasattr(backend, "kv_index_translator"):
        translator = backend.kv_index_translator
        return translator is None or getattr(translator, "is_translating", True)
    hooks = getattr(backend, "_unified_hooks", None)
    return hooks is None or getattr(hooks, "enabled", True)


def after_backend_init(result, backend, *args, **kwargs):
    if not getattr(backend, "is_draft_runner", False) or not paged_tree(backend.page_size, backend.topk):
        return None
    try:
        problem = not_covered(backend)
    except Exception as exc:  # noqa: BLE001 -- our check, never a reason not to start: SGLang's split and copy
        fault.trip("fa3 in place coverage check", exc)
        problem = f"the check failed ({type(exc).__name__}: {exc})"
    setattr(backend, MARK, problem is None)
    if problem is not None:
        logger.info("[sglang-eagle-paged] fa3 in place off, the prefix tail is copied: %s", problem)
    return None


def covered(step) -> bool:
    """Whether :func:`after_backend_init` found ``step`` (a per-step FA3 backend) covered."""
    return getattr(step, MARK, False)


def reads_in_place(draft_backend) -> bool:
    """True where every per-step backend of SGLang's multi-step FA3 draft backend reads the prefix
    tail in place (marked covered by :func:`after_backend_init`), so no reader sees the copy."""
    steps = list(getattr(draft_backend, "attn_backends", ()) or ())
    return not fault.SWITCH and bool(steps) and all(
        getattr(step, MARK, False) and (getattr(step, "dcp_size", 1) or 1) <= 1 for step in steps)
