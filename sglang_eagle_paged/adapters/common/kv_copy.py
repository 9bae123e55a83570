"""Backs ``MHATokenToKVPool.move_kv_cache`` with our kernels.

- Pair buffers produced by the tree-draft assignment (tagged by the worker) go to
  the one-launch duplication kernel: they are disjoint by construction (no target
  is also a source) and padded with sentinels.
- Every other call on a plain MHA pool (the post-verify compaction of a paged
  tree in ``eagle_info.py``, whose targets can be other pairs' sources) goes to
  :func:`.kernels.move_rows.move_kv_rows`: SGLang's in-place-safe semantics
  (per chunk of 256 pairs, every read before any write), without SGLang's Triton
  compile for every new power-of-two pair count, mid-serving.
- Other pool types, SGLANG_NATIVE_MOVE_KV_CACHE, and pools built without SGLang's
  copy configuration keep SGLang's own method.
"""

import functools
import weakref

import torch

from ...hooks import resolve
from ...kernels import KVBufferTable, duplicate_kv_pairs
from ...kernels.move_rows import move_kv_rows, warm_up_pair_counts
from .fault_switch import FaultSwitch

# Attribute set on the target tensor by the worker. A tensor attribute rather than
# a global registry: it dies with the tensor and cannot match a reused address.
DISJOINT_PAIRS_ATTR = "_eagle_paged_disjoint_pairs"
_TABLE_ATTR = "_eagle_paged_kv_table"

# Set by the plugin once its move_kv_cache hook is applied in this process.
hook_installed = {"move_kv_cache": False}


MHA_POOL = "sglang.srt.mem_cache.memory_pool.MHATokenToKVPool"
MOVE_KV_CACHE = MHA_POOL + ".move_kv_cache"


@functools.lru_cache(maxsize=1)
def mha_pool_class():
    """SGLang's plain MHA pool class, resolved once (checked every draft and verify step)."""
    return resolve(MHA_POOL)


def kv_move_chunk(pool) -> int | None:
    """Pairs per chunk of SGLang's in-place-safe ``move_kv_cache`` on ``pool``, or None
    where SGLang would not use that kernel (its torch path was asked for, or the pool
    was built without the copy configuration): those calls keep SGLang's method."""
    cfg = getattr(pool, "_kv_copy_config", None)
    if cfg is None:
        return None
    try:
        from sglang.srt.environ import envs

        if envs.SGLANG_NATIVE_MOVE_KV_CACHE.get():
            return None
    except (ImportError, AttributeError):
        pass
    return int(cfg.get("num_locs_upper", 256))


def mark_disjoint_pairs(tgt_loc: torch.Tensor) -> torch.Tensor:
    setattr(tgt_loc, DISJOINT_PAIRS_ATTR, True)
    return tgt_loc


def is_disjoint_pairs(tgt_loc: torch.Tensor) -> bool:
    return getattr(tgt_loc, DISJOINT_PAIRS_ATTR, False)


def pool_buffers(pool) -> list | None:
    """The K and V buffers of a plain MHA pool, or None for layouts we do not copy.

    Exact type match on purpose: subclasses (FP4 with scale buffers, no-op pools)
    may hold state beside ``k_buffer``/``v_buffer`` that a row copy would miss.
    """
    if type(pool) is not mha_pool_class():
        return None
    k, v = pool.k_buffer, pool.v_buffer
    buffers = list(k) + list(v)
    if not buffers or not all(b.is_contiguous() for b in buffers):
        return None
    return buffers


class _PoolTable:
    """``pool_buffers`` and their :class:`KVBufferTable` (None: not ours to copy), derived once.

    Valid while the pool's buffers are the very tensor objects it was derived from:
    ``ids`` holds their ids, and a weak reference to each clears ``alive`` when one
    of them dies, so an id cannot be matched by a later tensor at the same address.
    Weak, so that buffers the pool has replaced are not kept alive (GPU memory) here.
    A tensor whose storage is swapped in place (``set_``, ``.data =``) is not noticed;
    SGLang's own copy kernel makes the same assumption (``data_ptrs`` is built once,
    in ``_create_buffers``).
    """

    __slots__ = ("ids", "table", "alive", "refs")

    def __init__(self, ids: tuple, buffers: list, table: KVBufferTable | None):
        self.ids, self.table = ids, table
        alive = self.alive = [True]  # not self: no cycle through the callbacks

        def died(_ref, alive=alive):
            alive[0] = False

        self.refs = [weakref.ref(b, died) for b in buffers]

    def holds(self, pool) -> bool:
        """Whether ``pool``'s buffers are still the tensor objects this entry was derived from."""
        return self.alive[0] and self.ids == _buffer_ids(pool)


def _buffer_ids(pool) -> tuple:
    return (*map(id, pool.k_buffer), *map(id, pool.v_buffer))


def watch_buffers(pool) -> _PoolTable | None:
    """A fresh entry for a plain MHA pool's buffers (its table None where :func:`pool_buffers`
    declines them); None for another pool class, or buffers without weak references."""
    if type(pool) is not mha_pool_class():
        return None
    buffers = pool_buffers(pool)
    table = KVBufferTable.from_buffers(buffers) if buffers is not None else None
    try:
        return _PoolTable(_buffer_ids(pool), list(pool.k_buffer) + list(pool.v_buffer), table)
    except TypeError:  # a buffer type without weak references
        return None


def pool_table(pool) -> KVBufferTable | None:
    """The :class:`KVBufferTable` of a plain MHA pool's buffers, or None where
    :func:`pool_buffers` is None. Cached on the pool, re-derived whenever its K or V
    buffer list holds other tensor objects (re-created, replaced, reordered).

    Runs every verify step (and every draft step outside a plugin-loaded process):
    a cache hit reads only the buffers' ids, not ``data_ptr``/strides of each.
    """
    if type(pool) is not mha_pool_class():
        return None
    cached = getattr(pool, _TABLE_ATTR, None)
    if cached is not None and cached.holds(pool):
        return cached.table
    entry = watch_buffers(pool)
    if entry is None:  # a buffer type without weak references: derive every call
        buffers = pool_buffers(pool)
        return KVBufferTable.from_buffers(buffers) if buffers is not None else None
    setattr(pool, _TABLE_ATTR, entry)
    return entry.table


def duplicate_in_pool(pool, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> bool:
    """Copy with our kernel if the pool is one we handle; False means "not handled"."""
    table = pool_table(pool)
    if table is None:
        return False
    duplicate_kv_pairs(table, tgt_loc, src_loc)
    return True


def _sentinels_to_dummy_slot(loc: torch.Tensor) -> torch.Tensor:
    # SGLang reserves slot 0 of every KV pool for padded tokens, so a 0 -> 0 copy is
    # a harmless no-op for implementations that do not know our sentinel. clamp
    # keeps the length (and so the host's knowledge of it): no sync.
    return loc.clamp_min(0)


def move_pairs(pool, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
    """Duplicate draft KV through the pool's own ``move_kv_cache`` (the design card's call).

    Plain MHA pools reach our kernel through the hook, which checks their buffers once
    (this runs every draft step); wrapper pools (SWA, hybrid) forward to their inner
    pools, and get sentinel-free locations they can translate.
    """
    if type(pool) is mha_pool_class():
        if hook_installed["move_kv_cache"]:
            pool.move_kv_cache(mark_disjoint_pairs(tgt_loc), src_loc)
            return
        if duplicate_in_pool(pool, tgt_loc, src_loc):  # outside a plugin-loaded process (benchmarks, tests)
            return
    pool.move_kv_cache(_sentinels_to_dummy_slot(tgt_loc), _sentinels_to_dummy_slot(src_loc))


def move_in_pool(pool, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> bool:
    """SGLang's in-place-safe move with our one-launch-per-chunk kernel; False means "not handled" (the
    pool is not a plain MHA pool, or SGLang would not use its own kernel for it either)."""
    chunk = kv_move_chunk(pool)
    table = pool_table(pool) if chunk else None
    if table is None:
        return False
    move_kv_rows(table, tgt_loc, src_loc, chunk=chunk)
    return True


def warm_up_moves(pool) -> None:
    """Compile every variant of the post-verify move for ``pool`` by moving the padding slot onto
    itself (no KV changes)."""
    table, chunk = pool_table(pool), kv_move_chunk(pool)
    if table is None or not chunk:  # move_in_pool would leave the pool to SGLang
        return
    for pairs in warm_up_pair_counts(chunk):
        zero = torch.zeros(pairs, dtype=torch.int64, device=table.ptrs.device)
        move_kv_rows(table, zero, zero, chunk=chunk)


# A fault of ours while serving: SGLang's method moves that call's pairs and every later call's.
_switched_off = FaultSwitch("[sglang-eagle-paged] KV copy and move switched off for this process, SGLang's "
                            "move_kv_cache serves from now on: %s")


def switch_off(fault, say: bool = True) -> None:
    """SGLang's ``move_kv_cache`` for every later call (``say``: the ERROR line)."""
    _switched_off.trip(fault, say)


def move_kv_cache_hook(original, pool, tgt_loc, src_loc):
    """AROUND hook for ``MHATokenToKVPool.move_kv_cache``. Ours raises on the host before its launch,
    so SGLang's method after a fault starts from untouched KV."""
    disjoint = is_disjoint_pairs(tgt_loc)
    if not _switched_off:
        try:
            if (duplicate_in_pool if disjoint else move_in_pool)(pool, tgt_loc, src_loc):
                return None
        except Exception as exc:  # noqa: BLE001 -- never the scheduler's: SGLang's method serves
            switch_off(exc)
    if disjoint:
        return original(pool, _sentinels_to_dummy_slot(tgt_loc), _sentinels_to_dummy_slot(src_loc))
    return original(pool, tgt_loc, src_loc)
