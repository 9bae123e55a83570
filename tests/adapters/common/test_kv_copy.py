"""``kv_copy.pool_table``: the per-pool cache of the KV buffer table (CPU, Triton interpreter).

The table is derived once per pool and served from the pool until its buffers are
other tensor objects; a move must always land in the buffers the pool holds now.
"""

import gc
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, move_kv_cache_native  # noqa: E402

from sglang_eagle_paged.adapters.common import kv_copy  # noqa: E402

# overlapping pairs, as in the post-verify compaction: 302 is a target and a source
TGT, SRC = torch.tensor([300, 301, 302, 400]), torch.tensor([302, 305, 306, 403])


def _pool(layers=2, size=1024):
    pool = MHATokenToKVPool(size, 16, torch.bfloat16, 2, 8, layers, "cpu", False,
                            enable_kv_cache_copy=True)
    _randomize(pool.k_buffer + pool.v_buffer, seed=0)
    return pool


def _randomize(buffers, seed):
    g = torch.Generator().manual_seed(seed)
    for b in buffers:
        u = b.view(torch.uint8)
        u.copy_(torch.randint(0, 256, u.shape, dtype=torch.uint8, generator=g))


def _moved(buffers, tgt=TGT, src=SRC):
    """SGLang's result of the move on copies of ``buffers`` (bytes: random KV holds NaNs)."""
    n = len(buffers) // 2
    k, v = [b.clone() for b in buffers[:n]], [b.clone() for b in buffers[n:]]
    move_kv_cache_native(k, v, tgt, src)
    return [b.view(torch.uint8) for b in k + v]


def _assert_bytes(buffers, want):
    assert len(buffers) == len(want)
    for got, w in zip(buffers, want):
        assert torch.equal(got.view(torch.uint8), w)


def test_table_is_derived_once_per_pool():
    pool = _pool()
    table = kv_copy.pool_table(pool)
    assert table is not None and kv_copy.pool_table(pool) is table
    assert table.keys == tuple((b.data_ptr(), b.stride(0) * b.element_size())
                               for b in pool.k_buffer + pool.v_buffer)
    assert kv_copy.pool_table(_pool()) is not table  # per pool, not per layout


@pytest.mark.parametrize("how", ["new_lists", "one_layer_in_place", "reordered", "other_shape", "other_dtype"])
def test_move_lands_in_replaced_buffers(how):
    pool = _pool()
    assert kv_copy.move_in_pool(pool, TGT, SRC)  # caches the table of the first buffers
    old = pool.k_buffer + pool.v_buffer
    old_bytes = [b.view(torch.uint8).clone() for b in old]
    if how == "new_lists":  # _create_buffers again (e.g. a rebuilt pool)
        pool.k_buffer = [b.clone() for b in pool.k_buffer]
        pool.v_buffer = [b.clone() for b in pool.v_buffer]
    elif how == "one_layer_in_place":  # the same list object, one element replaced
        pool.v_buffer[1] = pool.v_buffer[1].clone()
    elif how == "reordered":  # the same tensors, other places: the table's order matters
        pool.k_buffer.reverse()
    elif how == "other_shape":  # wider rows
        pool.k_buffer = [torch.empty(1040, 4, 8, dtype=torch.bfloat16) for _ in pool.k_buffer]
    else:
        pool.v_buffer = [torch.empty(1040, 2, 8, dtype=torch.float32) for _ in pool.v_buffer]
    new = pool.k_buffer + pool.v_buffer
    _randomize([b for b in new if not any(b is o for o in old)], seed=1)
    want = _moved(new)

    assert kv_copy.move_in_pool(pool, TGT, SRC)
    _assert_bytes(new, want)
    assert kv_copy.pool_table(pool).keys == tuple((b.data_ptr(), b.stride(0) * b.element_size()) for b in new)
    for b, before in zip(old, old_bytes):  # replaced buffers are not written any more
        if not any(b is n for n in new):
            assert torch.equal(b.view(torch.uint8), before)


def test_duplicate_uses_the_same_cache_and_sees_replaced_buffers():
    pool = _pool()
    table = kv_copy.pool_table(pool)
    tgt, src = torch.tensor([500, -1, 501]), torch.tensor([20, -1, 21])
    assert kv_copy.duplicate_in_pool(pool, tgt, src)
    assert kv_copy.pool_table(pool) is table
    pool.k_buffer = [b.clone() for b in pool.k_buffer]
    _randomize(pool.k_buffer, seed=2)
    assert kv_copy.duplicate_in_pool(pool, tgt, src)
    assert kv_copy.pool_table(pool) is not table
    for b in pool.k_buffer + pool.v_buffer:
        assert torch.equal(b[[500, 501]].view(torch.uint8), b[[20, 21]].view(torch.uint8))


def test_a_dead_buffer_invalidates_even_if_its_id_comes_back():
    """An id alone could be matched by a new tensor at a freed address: a death clears the entry."""
    pool = _pool()
    kv_copy.pool_table(pool)
    entry = getattr(pool, kv_copy._TABLE_ATTR)
    pool.k_buffer[0] = pool.k_buffer[0].clone()  # the first layer's old tensor dies here
    gc.collect()
    assert not entry.alive[0]
    # fake the worst case: the new tensor got the dead one's id
    entry.ids = (id(pool.k_buffer[0]),) + entry.ids[1:]
    table = kv_copy.pool_table(pool)
    assert table.keys[0][0] == pool.k_buffer[0].data_ptr()


def test_cache_keeps_neither_old_buffers_nor_the_pool_alive():
    import weakref

    pool = _pool()
    kv_copy.pool_table(pool)
    old = weakref.ref(pool.k_buffer[0])
    pool.k_buffer = [b.clone() for b in pool.k_buffer]
    gc.collect()
    assert old() is None  # the cached entry holds weak references only
    kv_copy.pool_table(pool)
    p = weakref.ref(pool)
    del pool
    gc.collect()
    assert p() is None


def test_not_ours_is_cached_too_and_re_derived():
    pool = _pool()
    pool.k_buffer[0] = pool.k_buffer[0].transpose(1, 2)  # not contiguous: SGLang's method
    assert kv_copy.pool_table(pool) is None
    assert not kv_copy.move_in_pool(pool, TGT, SRC)
    pool.k_buffer[0] = pool.k_buffer[0].contiguous()
    assert kv_copy.pool_table(pool) is not None
    assert kv_copy.pool_buffers(pool) is not None


@pytest.mark.parametrize("disjoint", [False, True])
def test_a_fault_of_ours_moves_with_sglangs_method_from_then_on(monkeypatch, caplog, disjoint):
    """Our kernel raising on the host (as a launch failure does): that call's pairs and every later
    call's are moved by SGLang's own ``move_kv_cache`` on the real pool; one ERROR line."""
    import logging

    from sglang_eagle_paged.adapters.common.fault_switch import FaultSwitch

    monkeypatch.setattr(kv_copy, "_switched_off", FaultSwitch(kv_copy._switched_off.message))
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("injected fault in our kernel")

    monkeypatch.setattr(kv_copy, "duplicate_kv_pairs" if disjoint else "move_kv_rows", broken)
    # disjoint pairs (the draft's copies) padded with a sentinel; overlapping ones (the verify's move)
    tgt, src = (torch.tensor([300, 301, -1]), torch.tensor([305, 306, -1])) if disjoint else (TGT, SRC)
    if disjoint:
        kv_copy.mark_disjoint_pairs(tgt)
    pool = _pool()
    with caplog.at_level(logging.ERROR, logger="sglang_eagle_paged"):
        for _ in range(2):  # the faulting call, then one after it
            want = _moved(pool.k_buffer + pool.v_buffer, tgt.clamp_min(0), src.clamp_min(0))
            kv_copy.move_kv_cache_hook(MHATokenToKVPool.move_kv_cache, pool, tgt, src)
            _assert_bytes(pool.k_buffer + pool.v_buffer, want)
    assert len(calls) == 1  # switched off after the first
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "injected fault in our kernel" in errors[0].getMessage()
