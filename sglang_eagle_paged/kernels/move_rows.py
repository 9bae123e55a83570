"""In-place-safe KV row moves for every K/V buffer of an MHA pool: one launch per chunk.

SGLang calls ``MHATokenToKVPool.move_kv_cache`` outside the draft step too: after
a paged tree verify (``page_size > 1``, ``topk > 1``) it moves each request's
accepted tokens to the front of its draft slots, where a target can be another
pair's source. SGLang's ``copy_all_layer_kv_cache_tiled`` is "safe for in-place
copy" because each program loads all pairs (at most 256) before it stores any,
and larger moves go in chunks of 256, one after the other. The price is a
``tl.constexpr`` pair count rounded to a power of two: a Triton compile (hundreds
of ms, mid-serving) for every new bucket of accepted-token totals.

:func:`move_kv_rows` keeps those semantics (all reads of a chunk before its
writes, chunks in order) with one launch per chunk and no scratch tensor: the
launch runs every verify round on a host-bound server, so each launch and each
allocation costs serving time. A program owns one (buffer, element tile) for all
pairs of the chunk; programs touch disjoint bytes, so reading the whole tile
before storing it orders every read of the chunk before its writes. Within a
program the warps would still race (one warp's store to a row another warp has
yet to load), hence a CTA barrier between the load and the store.

Only configuration values are constexpr: the tile's pair axis is the chunk (a pool
setting, 256 or 128) or, for launches of at most ``SMALL_PAIRS`` pairs, that small
axis; the pair count stays a runtime argument, so no accepted-token total compiles a
variant beyond those two, and warm-up compiles both (:func:`warm_up_pair_counts`). The
small axis is for one or two requests a round (at most ``steps + 1`` pairs each): a
256-pair tile there spends most of its lanes masked, and was slower than SGLang's 8-pair
variant on such moves (``docs/performance.md``). The whole
tile sits in registers between the load and the store, so it holds a fixed number of
elements: 64 bytes of each of the chunk's rows (16 registers of data per thread, see
``_TILE_ROW_BYTES``), and proportionally more of each row at the small axis.
"""

import torch
import triton
import triton.language as tl

from .duplicate import _TL_TYPES, PAIR_KERNEL_OPTIONS, KVBufferTable
from .launch import launch

# SGLang's chunk (``_kv_copy_config["num_locs_upper"]``): reads of a chunk happen before
# its writes, chunks run in order. Kept so that overlapping moves give SGLang's result.
CHUNK = 256

# A program's tile is 64 bytes of each of the chunk's rows: at 8 warps and a chunk of 256,
# 64 B (16 registers) of data a thread, as at 32 B and 4 warps, but half the programs, each
# of which reloads the chunk's indices (faster on the GPU it was measured on). Past 16 elements a row, narrow lanes (rows not a multiple of 4 or 8
# bytes) would each add a 64-bit address per thread: the cap keeps those variants unspilled.
_TILE_ROW_BYTES = 64
_MAX_BLOCK_E = 16
_NUM_WARPS = 8

# Launches of at most this many pairs use a tile of this many pair lanes, with rows as much wider.
SMALL_PAIRS = 16


@triton.jit(**PAIR_KERNEL_OPTIONS)
def _move_rows_kernel(
    buf_ptrs,        # [n_buffers] int64 base addresses
    buf_row_elems,   # [n_buffers] int64 row length in ELEM units
    src_loc,
    tgt_loc,
    num_pairs,       # <= PAIR_AXIS
    ELEM: tl.constexpr,
    PAIR_AXIS: tl.constexpr,  # the tile's pair lanes: the chunk, or SMALL_PAIRS
    BLOCK_E: tl.constexpr,
):
    pid_e = tl.program_id(0)
    buf = tl.program_id(1)
    row = tl.load(buf_row_elems + buf)
    if pid_e * BLOCK_E >= row:
        return  # past this buffer's (shorter) row; the whole program leaves, so the barrier still holds
    offs_p = tl.arange(0, PAIR_AXIS)
    in_range = offs_p < num_pairs
    src = tl.load(src_loc + offs_p, mask=in_range, other=-1).to(tl.int64)
    tgt = tl.load(tgt_loc + offs_p, mask=in_range, other=-1).to(tl.int64)
    # SGLang's callers never pass a negative slot; skipping the pair beats touching memory before the buffer.
    live = (src >= 0) & (tgt >= 0)
    base = tl.load(buf_ptrs + buf).to(tl.pointer_type(ELEM))
    offs_e = pid_e * BLOCK_E + tl.arange(0, BLOCK_E)
    m = live[:, None] & (offs_e < row)[None, :]
    vals = tl.load(base + src[:, None] * row + offs_e[None, :], mask=m)
    # No warp stores before every warp of the program has loaded: otherwise one could overwrite
    # a row (a cycle's next source) that another has yet to read. The interpreter runs a
    # program's tile as one array operation, so the tests cannot show this race.
    tl.debug_barrier()
    tl.store(base + tgt[:, None] * row + offs_e[None, :], vals, mask=m)


def _pair_axis(pairs: int, chunk_pow2: int) -> int:
    return SMALL_PAIRS if pairs <= SMALL_PAIRS < chunk_pow2 else chunk_pow2


def _block_e(table: KVBufferTable, pair_axis: int, chunk_pow2: int) -> int:
    # The chunk's tile size in elements, whatever the pair axis: as many registers per thread.
    # No wider than the row, so that short rows (tests, tiny models) do not mask most lanes.
    chunk_block_e = min(max(1, _TILE_ROW_BYTES // table.elem_bytes), _MAX_BLOCK_E)
    return min(chunk_block_e * chunk_pow2 // pair_axis, triton.next_power_of_2(table.row_elems_max))


def warm_up_pair_counts(chunk: int = CHUNK) -> tuple:
    """Pair counts whose moves, together, compile every variant ``move_kv_rows`` launches for ``chunk``."""
    chunk_pow2 = triton.next_power_of_2(chunk)
    return tuple(sorted({1, min(chunk, SMALL_PAIRS + 1)})) if SMALL_PAIRS < chunk_pow2 else (1,)


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
    elem, chunk_pow2 = _TL_TYPES[table.elem_bytes], triton.next_power_of_2(chunk)
    for start in range(0, n, chunk):
        end = min(start + chunk, n)
        pair_axis = _pair_axis(end - start, chunk_pow2)
        block_e = _block_e(table, pair_axis, chunk_pow2)
        launch(_move_rows_kernel, (triton.cdiv(table.row_elems_max, block_e), len(table.keys)),
               (table.ptrs, table.row_elems, src_loc[start:end], tgt_loc[start:end], end - start),
               dict(ELEM=elem, PAIR_AXIS=pair_axis, BLOCK_E=block_e), num_warps=_NUM_WARPS)
