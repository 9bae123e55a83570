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

This module holds the two pieces, both sync-free tensor ops that a CUDA graph can capture:
:func:`rewrite_draft_metadata` (after SGLang's builders, eager or graph replay) and
:func:`per_token_view` (the KV buffers the expand call must be given). The CPU proof is
``tests/adapters/v2/test_fa3_in_place.py``; the argument is in docs/backend_reads.md.
SGLang is not imported here.
"""

# An attribute on the expand page table: read it through per_token_view, not by page.
PER_TOKEN = "_sglang_eagle_paged_per_token"


def rewrite_draft_metadata(metadata, expand, seq_lens, cache_loc, decode_length: int) -> None:
    """Turn SGLang's page > 1 draft-decode metadata into the in-place form, in place.

    ``metadata``/``expand``: the first and expand pass's ``FlashAttentionMetadata`` as SGLang's
    builder left them for this draft step; ``seq_lens``: the requests' committed lengths (bs,);
    ``cache_loc``: ``out_cache_loc`` viewed ``(bs * topk, num_steps)`` (branch-major, as SGLang
    views it); ``decode_length``: ``speculative_step_id + 1``. The expand page table must be at
    least ``decode_length`` wide (SGLang's is ``num_steps`` wide, and ``decode_length < num_steps``).
    """
    n = expand.cache_seqlens_int32.shape[0]
    metadata.cache_seqlens_int32.copy_(seq_lens)  # the whole prefix, partial last page included
    expand.cache_seqlens_int32.fill_(decode_length)  # the branch's own draft tokens only
    expand.page_table[:n, :decode_length].copy_(cache_loc[:n, :decode_length])
    setattr(expand.page_table, PER_TOKEN, True)


def is_per_token(page_table) -> bool:
    """Whether ``page_table`` is an expand page table :func:`rewrite_draft_metadata` wrote."""
    return getattr(page_table, PER_TOKEN, False)


def per_token_view(paged_cache):
    """The ``(pages, page_size, heads, dim)`` KV view FA3 reads by page, as pages of one slot:
    ``(pages * page_size, 1, heads, dim)``, the same memory (no copy)."""
    return paged_cache.view(-1, 1, *paged_cache.shape[2:])
