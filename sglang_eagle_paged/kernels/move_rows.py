"""In-place-safe KV row moves for every K/V buffer of an MHA pool: gather, then scatter.

SGLang calls ``MHATokenToKVPool.move_kv_cache`` outside the draft step too: after
a paged tree verify (``page_size > 1``, ``topk > 1``) it moves each request's
accepted tokens to the front of its draft slots, where a target can be another
pair's source. SGLang's ``copy_all_layer_kv_cache_tiled`` is "safe for in-place
copy" because each program loads all pairs (at most 256) before it stores any,
and larger moves go in chunks of 256, one after the other. The price is a
``tl.constexpr`` pair count rounded to a power of two: a Triton compile (hundreds
of ms, mid-serving) for every new bucket of accepted-token totals, and one byte
tile of all pairs per program, about 15 GB/s.

:func:`move_kv_rows` keeps exactly those semantics (all reads of a chunk before
its writes, chunks in order) by staging: one launch gathers the chunk's source
rows of every buffer into a scratch tensor, a second scatters them to the
targets. The pair count is a runtime argument, so nothing ever recompiles, and
each program moves whole rows with wide loads, like :mod:`.duplicate`.
"""

import torch
import triton
import triton.language as tl

from .duplicate import _TL_TYPES, _INT_TYPES, KVBufferTable

# SGLang's chunk (``_kv_copy_config["num_locs_upper"]``): reads of a chunk happen before
# its writes, chunks run in order. Kept so that overlapping moves give SGLang's result.
CHUNK = 256


@triton.jit(do_not_specialize=["num_pairs"])
def _stage_rows_kernel(
    buf_ptrs,        # [n_buffers] int64 base addresses
    buf_row_elems,   # [n_buffers] int64 row length in ELEM units
    loc,             # [num_pairs] rows to read (GATHER) or write (scatter)
    staging,         # [n_buffers, num_pairs, ROW_ELEMS_MAX]
    num_pairs,
    GATHER: tl.constexpr,
    ELEM: tl.constexpr,
    ROW_ELEMS_MAX: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    pid_p = tl.program_id(0)
    buf = tl.program_id(1)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    rows = tl.load(loc + offs_p, mask=offs_p < num_pairs, other=-1).to(tl.int64)
    # SGLang's callers never pass a negative slot; skipping one beats writing before the buffer.
    live = rows >= 0
    base = tl.load(buf_ptrs + buf).to(tl.pointer_type(ELEM))
    row = tl.load(buf_row_elems + buf)
    stage = staging + (buf * num_pairs + offs_p.to(tl.int64)) * ROW_ELEMS_MAX
    for e0 in tl.static_range(0, ROW_ELEMS_MAX, BLOCK_E):
        offs_e = e0 + tl.arange(0, BLOCK_E)
        m = live[:, None] & (offs_e < row)[None, :]
        pool_ptr = base + rows[:, None] * row + offs_e[None, :]
        stage_ptr = stage[:, None] + offs_e[None, :]
        if GATHER:
            tl.store(stage_ptr, tl.load(pool_ptr, mask=m), mask=m)
        else:
            tl.store(pool_ptr, tl.load(stage_ptr, mask=m), mask=m)


def _stage(table: KVBufferTable, loc: torch.Tensor, staging: torch.Tensor, gather: bool) -> None:
    n = loc.numel()
    grid = (triton.cdiv(n, table.block_p), len(table.keys))
    _stage_rows_kernel[grid](
        table.ptrs, table.row_elems, loc, staging, n,
        GATHER=gather,
        ELEM=_TL_TYPES[table.elem_bytes],
        ROW_ELEMS_MAX=table.row_elems_max,
        BLOCK_P=table.block_p,
        BLOCK_E=table.block_e,
        num_warps=4,
    )


def move_kv_rows(table: KVBufferTable, tgt_loc: torch.Tensor, src_loc: torch.Tensor,
                 chunk: int = CHUNK) -> None:
    """Copy row ``src_loc[i]`` to ``tgt_loc[i]`` in every buffer, as SGLang's ``move_kv_cache`` does.

    Pairs may overlap (a target that is another pair's source): within each chunk of
    ``chunk`` pairs every source is read before any target is written, and chunks run
    in order. The pair count comes from the tensors' shapes: no device sync.
    """
    n = tgt_loc.numel()
    if n != src_loc.numel():
        raise ValueError(f"tgt_loc has {n} entries, src_loc {src_loc.numel()}")
    if n == 0:
        return
    dtype = _INT_TYPES[table.elem_bytes]
    for start in range(0, n, chunk):
        end = min(start + chunk, n)
        staging = torch.empty((len(table.keys), end - start, table.row_elems_max), dtype=dtype,
                              device=tgt_loc.device)
        _stage(table, src_loc[start:end], staging, gather=True)
        _stage(table, tgt_loc[start:end], staging, gather=False)
