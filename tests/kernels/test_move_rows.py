"""In-place-safe KV row moves (the post-verify compaction's ``move_kv_cache``): SGLang's results."""

import inspect
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.interpreter_order import ORDERS, capture_specializations, program_order  # noqa: E402
from helpers.pools import make_pools  # noqa: E402
from sglang_eagle_paged.tools.harness import verify_compaction_pairs  # noqa: E402
from sglang_eagle_paged.kernels.duplicate import KVBufferTable  # noqa: E402
from sglang_eagle_paged.kernels.move_rows import (  # noqa: E402
    SMALL_PAIRS, _move_rows_kernel, move_kv_rows, warm_up_pair_counts)
from sglang_eagle_paged.kernels.reference import move_kv_rows_ref  # noqa: E402
from test_duplicate_kv_pairs import randomize  # noqa: E402


def pool_buffers(layers=2, head_num=2, head_dim=8, dtype=torch.bfloat16, size=512, seed=0):
    pools = make_pools(page_size=16, size=size, head_num=head_num, head_dim=head_dim, layer_num=layers, dtype=dtype)
    buffers = list(pools.kv_pool.k_buffer) + list(pools.kv_pool.v_buffer)
    randomize(buffers, torch.Generator().manual_seed(seed))
    return pools.kv_pool, buffers


def expected_after(buffers, tgt, src, chunk=256):
    ref = [b.clone() for b in buffers]
    move_kv_rows_ref(ref, tgt, src, chunk)
    return ref


@pytest.mark.parametrize("seed", range(4))
def test_compaction_equals_sglang_native_move(seed):
    """Overlapping pairs as the paged verify makes them: same bytes as SGLang's own torch path."""
    pool, buffers = pool_buffers(size=4096, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    accepted = torch.randint(1, 7, (9,), generator=gen).tolist()
    tgt, src = verify_compaction_pairs(accepted, draft_tokens=16, num_slots=4016, gen=gen, first_slot=16)
    assert bool(torch.isin(tgt, src).any()) or seed > 0  # overlap is the point (seed 0 has it)
    from sglang.srt.mem_cache.memory_pool import move_kv_cache_native

    want_k = [b.clone() for b in pool.k_buffer]
    want_v = [b.clone() for b in pool.v_buffer]
    move_kv_cache_native(want_k, want_v, tgt, src)
    move_kv_rows(KVBufferTable.from_buffers(buffers), tgt, src)
    for got, want in zip(buffers, want_k + want_v):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


@pytest.mark.parametrize("order", ORDERS)
def test_swaps_and_cycles_read_before_write_in_any_program_order(order):
    """A cycle (a->b, b->c, c->a) needs every read before any write; a one-pass copy breaks it."""
    _, buffers = pool_buffers(layers=1, seed=3)
    src = torch.tensor([10, 11, 12, 20, 21, 40])
    tgt = torch.tensor([11, 12, 10, 21, 20, 41])
    want = expected_after(buffers, tgt, src)
    with program_order(order):
        move_kv_rows(KVBufferTable.from_buffers(buffers), tgt, src)
    for got, w in zip(buffers, want):
        assert torch.equal(got.view(torch.uint8), w.view(torch.uint8))


def test_chunks_run_in_order_like_sglang():
    """Past 256 pairs SGLang moves chunk after chunk: a later chunk reads what an earlier one wrote."""
    _, buffers = pool_buffers(layers=1, size=1024, seed=5)
    src = torch.arange(100, 100 + 300)
    tgt = torch.arange(500, 500 + 300)
    src[270] = 510  # chunk 2 reads a slot chunk 1 writes (pair 10's target)
    want = expected_after(buffers, tgt, src, chunk=256)
    all_at_once = expected_after(buffers, tgt, src, chunk=10_000)
    assert not all(torch.equal(a, b) for a, b in zip(want, all_at_once))  # the case tells them apart
    move_kv_rows(KVBufferTable.from_buffers(buffers), tgt, src)
    for got, w in zip(buffers, want):
        assert torch.equal(got.view(torch.uint8), w.view(torch.uint8))


@pytest.mark.parametrize("chunk", [128, 256])
def test_cycle_across_a_chunk_boundary_with_the_pool_chunk(chunk):
    """A cycle whose pairs straddle a chunk boundary: the later chunk sees the earlier one's writes."""
    _, buffers = pool_buffers(layers=1, size=1024, seed=9)
    src = torch.arange(600, 600 + chunk + 3)
    tgt = torch.arange(300, 300 + chunk + 3)
    src[chunk - 2:chunk + 1] = torch.tensor([70, 71, 72])  # 70->a, 71->b | 72->c in the next chunk
    tgt[chunk - 2:chunk + 1] = torch.tensor([71, 72, 70])
    want = expected_after(buffers, tgt, src, chunk=chunk)
    assert not all(torch.equal(a, b) for a, b in zip(want, expected_after(buffers, tgt, src, chunk=10_000)))
    with program_order("reversed"):
        move_kv_rows(KVBufferTable.from_buffers(buffers), tgt, src, chunk=chunk)
    for got, w in zip(buffers, want):
        assert torch.equal(got.view(torch.uint8), w.view(torch.uint8))


def test_rows_of_several_tiles_and_of_different_lengths():
    """Rows wider than one program's tile, and a shorter buffer whose last tiles have nothing to do."""
    gen = torch.Generator().manual_seed(11)
    buffers = [torch.randint(-2**15, 2**15, (128, 4, 16), generator=gen, dtype=torch.int16).view(torch.bfloat16),
               torch.randint(-2**15, 2**15, (128, 2, 4), generator=gen, dtype=torch.int16).view(torch.bfloat16)]
    src, tgt = torch.tensor([5, 6, 7, 9, 100]), torch.tensor([6, 7, 5, 100, 9])
    want = expected_after(buffers, tgt, src)
    table = KVBufferTable.from_buffers(buffers)
    assert table.row_elems.tolist() == [16, 2]  # 8-byte lanes: four tiles of 4 for K, part of one for V
    move_kv_rows(table, tgt, src)
    for got, w in zip(buffers, want):
        assert torch.equal(got.view(torch.uint8), w.view(torch.uint8))


@pytest.mark.parametrize("dtype,head_dim", [(torch.bfloat16, 8), (torch.float32, 3), (torch.uint8, 5)])
def test_row_widths_and_untouched_rows(dtype, head_dim):
    _, buffers = pool_buffers(layers=3, head_dim=head_dim, dtype=dtype, seed=7)
    tgt, src = torch.tensor([30, 31, 7]), torch.tensor([31, 30, 99])
    want = expected_after(buffers, tgt, src)
    move_kv_rows(KVBufferTable.from_buffers(buffers), tgt, src)
    for got, w in zip(buffers, want):
        assert torch.equal(got.view(torch.uint8), w.view(torch.uint8))  # also: nothing else changed


def _variants(table, counts, chunk=256):
    with capture_specializations(_move_rows_kernel) as specs:
        for n in counts:
            move_kv_rows(table, torch.arange(200, 200 + n), torch.arange(n), chunk=chunk)
    return specs


def test_pair_count_never_compiles_a_new_variant():
    _, buffers = pool_buffers(layers=1, seed=1)
    table = KVBufferTable.from_buffers(buffers)
    small = _variants(table, (1, 3, 16))
    large = _variants(table, (17, 64, 100, 256))
    # one variant for launches of up to SMALL_PAIRS pairs, one for the rest; the count never specialises
    assert SMALL_PAIRS == 16 and len({str(s) for s in small}) == 1 and len({str(s) for s in large}) == 1
    assert {str(s) for s in small} != {str(s) for s in large}
    # 300 pairs: a chunk of 256, then 44; 260 pairs: 256, then 4 on the small tile
    assert {str(s) for s in _variants(table, (300, 260))} == {str(s) for s in small + large}


@pytest.mark.parametrize("chunk", [128, 256])
def test_warm_up_compiles_every_variant_serving_launches(chunk):
    _, buffers = pool_buffers(layers=1, size=1024, seed=1)
    table = KVBufferTable.from_buffers(buffers)
    warmed = {str(s) for s in _variants(table, warm_up_pair_counts(chunk), chunk)}
    served = {str(s) for s in _variants(table, range(1, 2 * chunk + 20, 7), chunk)}
    assert served <= warmed and len(warmed) == 2


@pytest.mark.parametrize("order", ORDERS)
def test_small_tile_holds_whole_rows_and_keeps_cycles(order):
    """At most SMALL_PAIRS pairs take the small tile, whose programs span more of each row: a cycle
    and a shift over 128-byte rows, in one launch, under every program order."""
    gen = torch.Generator().manual_seed(13)
    buffers = [torch.randint(-2**15, 2**15, (64, 4, 16), generator=gen, dtype=torch.int16).view(torch.bfloat16)
               for _ in range(3)]
    src, tgt = torch.tensor([5, 6, 7, 30, 31]), torch.tensor([6, 7, 5, 31, 32])
    want = expected_after(buffers, tgt, src)
    with program_order(order):
        move_kv_rows(KVBufferTable.from_buffers(buffers), tgt, src)
    for got, w in zip(buffers, want):
        assert torch.equal(got.view(torch.uint8), w.view(torch.uint8))


def test_barrier_sits_between_the_tile_load_and_its_store():
    """The interpreter runs a program's tile as one array operation, so no result here can show
    one warp storing before another has loaded; on a GPU the CTA barrier prevents it."""
    src = inspect.getsource(_move_rows_kernel.fn)
    assert src.count("tl.store(") == 1 and src.count("tl.debug_barrier()") == 1
    assert src.index("vals = tl.load(") < src.index("tl.debug_barrier()") < src.index("tl.store(")


def test_empty_and_mismatched():
    _, buffers = pool_buffers(layers=1)
    table = KVBufferTable.from_buffers(buffers)
    move_kv_rows(table, torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64))
    with pytest.raises(ValueError):
        move_kv_rows(table, torch.tensor([1, 2]), torch.tensor([3]))
