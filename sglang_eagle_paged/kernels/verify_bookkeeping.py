"""The paged tree verify's slot bookkeeping (``get_src_tgt_cache_loc``) in one Triton launch.

After a tree verify at ``page_size > 1`` and ``topk > 1``, SGLang needs, per verify round:

- ``src_cache_loc = out_cache_loc[accept_index]``: the accepted tokens' slots (``accept_index``
  is already flattened to the accepted tokens, so its length is known on the host);
- ``to_free_num_slots[r] = max(0, seq_lens[r] + draft_token_num - kept_end[r])``, where
  ``kept_end`` is the end of the page holding request ``r``'s last accepted token
  (``seq_lens[r] + num_correct_drafts[r] + 1`` rounded up to a page);
- an uninitialised buffer the size of ``src_cache_loc`` for the targets, which SGLang fills.

SGLang computes them under ``torch.compile(dynamic=True)``; eager torch needs nine small ops.
Either way it costs host time on every verify round (``bench.kernels``;
``docs/performance.md``), on a path a host-bound server runs every round. Here both outputs
come from one launch: programs over ``max(len(accept_index), bs)`` elements in fixed blocks,
each writing its block of ``src`` and of ``to_free``. The block size is the only constexpr:
the batch size and the accepted-token total are runtime arguments, so nothing recompiles.

SGLang then sizes the freed-slot list with ``to_free_num_slots.sum().item()``, lists the slots with
``get_target_cache_loc`` and frees them: the allocator maps slots to pages with ``torch.unique``, a
sort and a second host sync, in every round where a verify spilled into a page it did not keep
(nearly every round at page 64 with 64 draft tokens). :func:`src_and_free_pages` counts pages
instead and :func:`split_verify_slots` lists one slot per freed page, so the list is the page
list already and needs no sort (:mod:`..verify_free`).
"""

import torch
import triton
import triton.language as tl

from .launch import launch

BLOCK = 1024

_RUNTIME_INTS = ["sl_stride", "ocl_stride", "ai_stride", "ncd_stride", "n_accepted", "bs", "draft_token_num",
                 "page_size"]
_POINTERS = ["seq_lens", "out_cache_loc", "accept_index", "num_correct_drafts", "src", "to_free", "free_slots"]


@triton.jit(do_not_specialize=_RUNTIME_INTS, do_not_specialize_on_alignment=_POINTERS)
def _src_to_free_kernel(
    seq_lens, sl_stride,                # [bs]
    out_cache_loc, ocl_stride,          # [bs * draft_token_num] the verify's slots
    accept_index, ai_stride,            # [n_accepted] positions in out_cache_loc
    num_correct_drafts, ncd_stride,     # [bs]
    src,                 # [n_accepted] out: out_cache_loc[accept_index]
    to_free,             # [bs] out: slots to free, or with PAGES pages to free
    free_slots,          # [bs] out with PAGES: slots to free (unused otherwise)
    n_accepted,
    bs,
    draft_token_num,
    page_size,
    BLOCK: tl.constexpr,
    PAGES: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = offs < n_accepted
    idx = tl.load(accept_index + offs.to(tl.int64) * ai_stride, mask=acc, other=0).to(tl.int64)
    tl.store(src + offs, tl.load(out_cache_loc + idx * ocl_stride, mask=acc), mask=acc)

    req = offs < bs
    lens = tl.load(seq_lens + offs.to(tl.int64) * sl_stride, mask=req, other=0).to(tl.int64)
    correct = tl.load(num_correct_drafts + offs.to(tl.int64) * ncd_stride, mask=req, other=0).to(tl.int64)
    # Lengths are never negative, so Triton's truncating // is floor division here.
    kept_end = (lens + correct + page_size) // page_size * page_size
    slots = tl.maximum(lens + draft_token_num - kept_end, 0)
    if PAGES:
        # The freed slots start on a page boundary (kept_end), so they fill whole pages but the last.
        tl.store(free_slots + offs, slots, mask=req)
        slots = (slots + page_size - 1) // page_size
    tl.store(to_free + offs, slots.to(to_free.dtype.element_ty), mask=req)


def _src_and_free(seq_lens, out_cache_loc, accept_index, num_correct_drafts, draft_token_num, page_size, pages):
    if page_size < 1 or draft_token_num < 1:
        raise ValueError(f"page_size and draft_token_num must be positive, got {page_size}, {draft_token_num}")
    n, bs = accept_index.numel(), seq_lens.numel()
    src = torch.empty(n, dtype=out_cache_loc.dtype, device=out_cache_loc.device)
    # The dtype torch would give seq_lens + num_correct_drafts (int64 in SGLang's verify).
    to_free = torch.empty(bs, dtype=torch.promote_types(seq_lens.dtype, num_correct_drafts.dtype),
                          device=seq_lens.device)
    free_slots = torch.empty(bs, dtype=torch.int64, device=seq_lens.device) if pages else to_free
    if max(n, bs):
        launch(_src_to_free_kernel, (triton.cdiv(max(n, bs), BLOCK),), (
            seq_lens, seq_lens.stride(0), out_cache_loc, out_cache_loc.stride(0),
            accept_index, accept_index.stride(0), num_correct_drafts, num_correct_drafts.stride(0), src, to_free,
            free_slots, n, bs, draft_token_num, page_size,
        ), dict(BLOCK=BLOCK, PAGES=pages))
    return src, torch.empty_like(src), to_free, free_slots


def src_and_free_counts(seq_lens: torch.Tensor, out_cache_loc: torch.Tensor, accept_index: torch.Tensor,
                        num_correct_drafts: torch.Tensor, draft_token_num: int, page_size: int):
    """``(src_cache_loc, tgt_cache_loc, to_free_num_slots)`` as SGLang's ``get_src_tgt_cache_loc``
    returns them: same values, shapes and dtypes (``tgt_cache_loc`` uninitialised)."""
    return _src_and_free(seq_lens, out_cache_loc, accept_index, num_correct_drafts, draft_token_num, page_size,
                         False)[:3]


def src_and_free_pages(seq_lens: torch.Tensor, out_cache_loc: torch.Tensor, accept_index: torch.Tensor,
                       num_correct_drafts: torch.Tensor, draft_token_num: int, page_size: int):
    """``(src_cache_loc, tgt_cache_loc, pages to free, slots to free)`` per request: as
    :func:`src_and_free_counts`, with the free counts in pages, and in slots beside them for
    :func:`split_verify_slots`."""
    return _src_and_free(seq_lens, out_cache_loc, accept_index, num_correct_drafts, draft_token_num, page_size,
                         True)


BLOCK_BS = 128  # earlier requests summed per loop iteration
BLOCK_T = 64  # slots of a row copied per loop iteration

_SPLIT_INTS = ["ncd_stride", "ocl_stride", "draft_token_num", "page_size"]
_SPLIT_POINTERS = ["tgt", "free_slots", "num_correct_drafts", "page_counts", "slot_counts", "out_cache_loc"]


@triton.jit(do_not_specialize=_SPLIT_INTS, do_not_specialize_on_alignment=_SPLIT_POINTERS)
def _split_verify_slots_kernel(
    tgt,                            # [sum(num_correct_drafts + 1)] out: each request's kept slots, packed
    free_slots,                     # [sum(page_counts)] out: the first slot of each freed page, packed
    num_correct_drafts, ncd_stride,  # [bs]
    page_counts,                    # [bs] pages to free (src_and_free_pages)
    slot_counts,                    # [bs] slots to free: the tail of each request's verify slots
    out_cache_loc, ocl_stride,      # [bs * draft_token_num] the verify's slots, one row per request
    draft_token_num,
    page_size,
    BLOCK_BS: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    r = tl.program_id(0)
    # Where this request's entries start in both packed outputs: sums over the earlier requests,
    # in fixed blocks so that the batch size stays a runtime value (no variant per batch size).
    tgt_start = tl.full([], 0, tl.int64)
    page_start = tl.full([], 0, tl.int64)
    for b0 in range(0, r, BLOCK_BS):
        offs = b0 + tl.arange(0, BLOCK_BS)
        earlier = offs < r
        ncd = tl.load(num_correct_drafts + offs.to(tl.int64) * ncd_stride, mask=earlier, other=-1).to(tl.int64)
        tgt_start += tl.sum(ncd + 1, axis=0)
        page_start += tl.sum(tl.load(page_counts + offs, mask=earlier, other=0).to(tl.int64), axis=0)
    row = r.to(tl.int64) * draft_token_num
    kept = tl.load(num_correct_drafts + r.to(tl.int64) * ncd_stride).to(tl.int64) + 1
    for t0 in range(0, kept, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        m = t < kept
        tl.store(tgt + tgt_start + t, tl.load(out_cache_loc + (row + t) * ocl_stride, mask=m), mask=m)
    # The freed tail starts on a page boundary, so its k-th page starts k pages into it.
    pages = tl.load(page_counts + r).to(tl.int64)
    tail = draft_token_num - tl.load(slot_counts + r).to(tl.int64)
    for q0 in range(0, pages, BLOCK_T):
        q = q0 + tl.arange(0, BLOCK_T)
        m = q < pages
        slot = tl.load(out_cache_loc + (row + tail + q * page_size) * ocl_stride, mask=m)
        tl.store(free_slots + page_start + q, slot, mask=m)


def split_verify_slots(tgt: torch.Tensor, free_slots: torch.Tensor, num_correct_drafts: torch.Tensor,
                       page_counts: torch.Tensor, slot_counts: torch.Tensor, out_cache_loc: torch.Tensor,
                       draft_token_num: int, page_size: int) -> None:
    """Fill ``tgt`` as SGLang's ``get_target_cache_loc`` does (each request's first
    ``num_correct_drafts + 1`` verify slots, packed), and ``free_slots`` with the first slot of
    each page the verify frees (``free_slots.numel() == page_counts.sum()``), packed in batch order:
    ``free_slots // page_size`` are the freed pages, each once."""
    bs = page_counts.numel()
    if bs:
        launch(_split_verify_slots_kernel, (bs,), (
            tgt, free_slots, num_correct_drafts, num_correct_drafts.stride(0), page_counts, slot_counts,
            out_cache_loc, out_cache_loc.stride(0), draft_token_num, page_size,
        ), dict(BLOCK_BS=BLOCK_BS, BLOCK_T=BLOCK_T))
