"""A tree-draft extension's slots read straight from the paged allocator's free pages, in one launch.

The draft's slots live only until the end of ``draft_preprocess_decode``: SGLang
(and we) back up the allocator, call ``alloc_paged_token_slots_extend`` (tree-cache
eviction, ``alloc_extend`` with its ``torch.empty``, its Triton kernel and a CPU page
count) and restore the allocator before the draft forward runs. That is about
0.5 ms of host dispatch per draft round (Python-stack profile, H200 run 6, 2026-11-30,
8B-shaped server, page 64, topk 8, steps 5), and SGLang's
``alloc_extend_kernel`` takes ``next_power_of_2(bs)`` as a constexpr, so a new
power-of-two batch size compiles a new variant mid-serving.

:func:`tree_slots_from_free_pages` writes what ``PagedTokenToKVPoolAllocator.alloc_extend``
would return for the extension (the formula: :mod:`.free_page_slots`), without changing any
allocator state. The draft step itself does not build this tensor: its assignment kernel
evaluates the same helpers where it uses each slot
(:func:`.assign.assign_tree_draft_slots_from_free_pages`). This launch is the formula on its
own, which the tests compare with SGLang's real ``alloc_extend``.

One program per request, as in :mod:`.assign`. The constexprs are configuration values only;
the batch size, strides and pointer alignment are not specialised on (``free_pages`` is a
slice of a slice, at any offset), so no batch compiles a new variant.
"""

import torch
import triton
import triton.language as tl

from sglang_eagle_paged.kernels.free_page_slots import BLOCK_BS, _extension_shape, _free_page_slots, _last_loc, _request_starts
from sglang_eagle_paged.tree_layout import check_tree_config

BLOCK = 1024     # output slots per loop iteration: page 128, topk 8 takes at most two

_RUNTIME_INTS = ["sl_stride", "rpi_stride", "rtt_stride0", "rtt_stride1", "fp_stride"]
_POINTERS = ["seq_lens", "req_pool_indices", "req_to_token", "free_pages", "out_cache_loc"]


@triton.jit(do_not_specialize=_RUNTIME_INTS, do_not_specialize_on_alignment=_POINTERS)
def _tree_alloc_kernel(
    seq_lens, sl_stride,                     # [bs] prefix lengths
    req_pool_indices, rpi_stride,            # [bs]
    req_to_token, rtt_stride0, rtt_stride1,  # [rows, max_context_len]
    free_pages, fp_stride,                   # [>= sum(new_pages)] page ids, read only
    out_cache_loc,                           # [sum(extend_lens)] (written)
    page_size: tl.constexpr,
    topk: tl.constexpr,
    steps: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_BS: tl.constexpr,
):
    pid = tl.program_id(0)
    out_start, page_start = _request_starts(seq_lens, sl_stride, pid, page_size, topk, steps, BLOCK_BS)
    prefix = tl.load(seq_lens + pid.to(tl.int64) * sl_stride).to(tl.int64)
    last, _, extend_len, _ = _extension_shape(prefix, page_size, topk, steps)
    req = tl.load(req_pool_indices + pid.to(tl.int64) * rpi_stride).to(tl.int64)
    last_loc = _last_loc(req_to_token + req * rtt_stride0, rtt_stride1, prefix, last)

    out = out_cache_loc + out_start
    for j0 in range(0, extend_len, BLOCK):
        o = j0 + tl.arange(0, BLOCK).to(tl.int64)
        live = o < extend_len
        loc = _free_page_slots(o, live, last, last_loc, free_pages, fp_stride, page_start, page_size)
        tl.store(out + o, loc, mask=live)


def tree_slots_from_free_pages(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                               free_pages: torch.Tensor, num_slots: int, page_size: int, topk: int,
                               steps: int) -> torch.Tensor:
    """``alloc_extend``'s output for the tree extension, read from ``free_pages`` (module docstring).

    ``num_slots`` is ``extend_lens(seq_lens).sum()``, known on the host; ``free_pages`` must
    hold at least ``new_pages(seq_lens).sum()`` pages (the caller checks, on the host).
    Returns an int64 tensor on ``seq_lens``'s device, as ``alloc_extend`` does.
    """
    check_tree_config(page_size=page_size, topk=topk, steps=steps)
    bs = seq_lens.shape[0]
    if req_pool_indices.shape[0] != bs:
        raise RuntimeError(f"batch mismatch: seq_lens {bs}, req_pool_indices {req_pool_indices.shape[0]}")
    out = torch.empty(num_slots, dtype=torch.int64, device=seq_lens.device)
    if bs == 0:
        return out
    _tree_alloc_kernel[(bs,)](
        seq_lens, seq_lens.stride(0),
        req_pool_indices, req_pool_indices.stride(0),
        req_to_token, req_to_token.stride(0), req_to_token.stride(1),
        free_pages, free_pages.stride(0),
        out,
        page_size=page_size, topk=topk, steps=steps, BLOCK=BLOCK, BLOCK_BS=BLOCK_BS,
    )
    return out
