"""The paged tree verify's slot bookkeeping (``get_src_tgt_cache_loc``) in one Triton launch.

After a tree verify at ``page_size > 1`` and ``topk > 1``, SGLang needs, per verify round:

- ``src_cache_loc = out_cache_loc[accept_index]``: the accepted tokens' slots (``accept_index``
  is already flattened to the accepted tokens, so its length is known on the host);
- ``to_free_num_slots[r] = max(0, seq_lens[r] + draft_token_num - kept_end[r])``, where
  ``kept_end`` is the end of the page holding request ``r``'s last accepted token
  (``seq_lens[r] + num_correct_drafts[r] + 1`` rounded up to a page);
- an uninitialised buffer the size of ``src_cache_loc`` for the targets, which SGLang fills.

SGLang computes them under ``torch.compile(dynamic=True)``; eager torch needs nine small ops.
Either way it is 120-140 us of host time per verify round on the H200 (run 9,
``bench_kernels.py``), on a path a host-bound server runs every round. Here both outputs
come from one launch: programs over ``max(len(accept_index), bs)`` elements in fixed blocks,
each writing its block of ``src`` and of ``to_free``. The block size is the only constexpr:
the batch size and the accepted-token total are runtime arguments, so nothing recompiles.
"""

import torch
import triton
import triton.language as tl

from .launch import launch

BLOCK = 1024

_RUNTIME_INTS = ["sl_stride", "ocl_stride", "ai_stride", "ncd_stride", "n_accepted", "bs", "draft_token_num",
                 "page_size"]
_POINTERS = ["seq_lens", "out_cache_loc", "accept_index", "num_correct_drafts", "src", "to_free"]


@triton.jit(do_not_specialize=_RUNTIME_INTS, do_not_specialize_on_alignment=_POINTERS)
def _src_to_free_kernel(
    seq_lens, sl_stride,                # [bs]
    out_cache_loc, ocl_stride,          # [bs * draft_token_num] the verify's slots
    accept_index, ai_stride,            # [n_accepted] positions in out_cache_loc
    num_correct_drafts, ncd_stride,     # [bs]
    src,                 # [n_accepted] out: out_cache_loc[accept_index]
    to_free,             # [bs] out
    n_accepted,
    bs,
    draft_token_num,
    page_size,
    BLOCK: tl.constexpr,
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
    tl.store(to_free + offs, tl.maximum(lens + draft_token_num - kept_end, 0).to(to_free.dtype.element_ty),
             mask=req)


def src_and_free_counts(seq_lens: torch.Tensor, out_cache_loc: torch.Tensor, accept_index: torch.Tensor,
                        num_correct_drafts: torch.Tensor, draft_token_num: int, page_size: int):
    """``(src_cache_loc, tgt_cache_loc, to_free_num_slots)`` as SGLang's ``get_src_tgt_cache_loc``
    returns them: same values, shapes and dtypes (``tgt_cache_loc`` uninitialised)."""
    if page_size < 1 or draft_token_num < 1:
        raise ValueError(f"page_size and draft_token_num must be positive, got {page_size}, {draft_token_num}")
    n, bs = accept_index.numel(), seq_lens.numel()
    src = torch.empty(n, dtype=out_cache_loc.dtype, device=out_cache_loc.device)
    # The dtype torch would give seq_lens + num_correct_drafts (int64 in SGLang's verify).
    to_free = torch.empty(bs, dtype=torch.promote_types(seq_lens.dtype, num_correct_drafts.dtype),
                          device=seq_lens.device)
    if max(n, bs):
        launch(_src_to_free_kernel, (triton.cdiv(max(n, bs), BLOCK),), (
            seq_lens, seq_lens.stride(0), out_cache_loc, out_cache_loc.stride(0),
            accept_index, accept_index.stride(0), num_correct_drafts, num_correct_drafts.stride(0), src, to_free,
            n, bs, draft_token_num, page_size,
        ), dict(BLOCK=BLOCK))
    return src, torch.empty_like(src), to_free
