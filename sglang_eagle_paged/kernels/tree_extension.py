"""The allocator's inputs for a tree-draft extension on a paged KV cache, in one launch.

Before asking SGLang's paged allocator for every branch's pages, SGLang 0.5.12's
``_draft_preprocess_decode`` calls ``spec_utils.get_last_loc_large_page_size_large_top_k``:
about eight small torch ops, then ``mem_cache.common.get_last_loc``, which reads the
global server args and launches a Triton kernel of its own. All of it is host
dispatch on the critical path of every draft round (its profiled cost: ``docs/performance.md``).
Of its outputs the allocator needs two, which
:func:`tree_extension` writes with one launch, per request ``r``
(``prefix = seq_lens[r]``)::

    seq_lens_new[r] = prefix // page * page + ceil((prefix % page + steps) / page) * page * topk
    last_loc[r]     = req_to_token[req_pool_indices[r], prefix - 1] if prefix > 0 else -1

Both in ``seq_lens``'s dtype and on its device, as SGLang returns them (its
``get_last_loc_triton`` and ``get_last_loc_torch`` both give ``seq_lens``'s dtype).
The constexprs are configuration values only (page size, topk, steps); the batch
size and strides are runtime arguments Triton is told not to specialise on (values
nor pointer alignment), so no batch compiles a new variant. Nothing is read back to
the host.
"""

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from .launch import launch
from ..tree_layout import check_tree_config

BLOCK = 256  # requests per program, as in SGLang's get_last_loc: a typical batch is one program

_RUNTIME_INTS = ["sl_stride", "rpi_stride", "rtt_stride0", "rtt_stride1", "bs"]
_POINTERS = ["seq_lens", "req_pool_indices", "req_to_token", "seq_lens_new", "last_loc"]


@triton.jit(do_not_specialize=_RUNTIME_INTS, do_not_specialize_on_alignment=_POINTERS)
def _tree_extension_kernel(
    seq_lens, sl_stride,                     # [bs] prefix lengths
    req_pool_indices, rpi_stride,            # [bs]
    req_to_token, rtt_stride0, rtt_stride1,  # [rows, max_context_len]
    seq_lens_new,                            # [bs] (written)
    last_loc,                                # [bs] (written)
    bs,
    page_size: tl.constexpr,
    topk: tl.constexpr,
    steps: tl.constexpr,
    BLOCK: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = r < bs
    # Lengths are never negative, so Triton's truncating // is torch's floor division.
    prefix = tl.load(seq_lens + r * sl_stride, mask=live, other=0).to(tl.int64)
    pages_per_branch = (prefix % page_size + steps + page_size - 1) // page_size
    new_len = prefix // page_size * page_size + pages_per_branch * (page_size * topk)
    tl.store(seq_lens_new + r, new_len.to(seq_lens_new.dtype.element_ty), mask=live)

    req = tl.load(req_pool_indices + r * rpi_stride, mask=live, other=0).to(tl.int64)
    has_prefix = live & (prefix > 0)
    loc = tl.load(req_to_token + req * rtt_stride0 + (prefix - 1) * rtt_stride1, mask=has_prefix, other=0)
    loc = tl.where(has_prefix, loc.to(tl.int64), -1)
    tl.store(last_loc + r, loc.to(last_loc.dtype.element_ty), mask=live)


class TreeExtension(NamedTuple):
    seq_lens: torch.Tensor  # each request's length once every branch's pages are allocated
    last_loc: torch.Tensor  # the slot of each prefix's last token, -1 for an empty prefix


def tree_extension(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                   page_size: int, topk: int, steps: int) -> TreeExtension:
    """``seq_lens`` and ``last_loc`` of ``get_last_loc_large_page_size_large_top_k`` (module docstring)."""
    check_tree_config(page_size=page_size, topk=topk, steps=steps)
    bs = seq_lens.shape[0]
    if req_pool_indices.shape[0] != bs:
        raise RuntimeError(f"batch mismatch: seq_lens {bs}, req_pool_indices {req_pool_indices.shape[0]}")
    like = dict(dtype=seq_lens.dtype, device=seq_lens.device)
    out = TreeExtension(torch.empty(bs, **like), torch.empty(bs, **like))
    if bs == 0:
        return out
    launch(_tree_extension_kernel, (triton.cdiv(bs, BLOCK),), (
        seq_lens, seq_lens.stride(0),
        req_pool_indices, req_pool_indices.stride(0),
        req_to_token, req_to_token.stride(0), req_to_token.stride(1),
        out.seq_lens, out.last_loc,
        bs,
    ), dict(page_size=page_size, topk=topk, steps=steps, BLOCK=BLOCK))
    return out
