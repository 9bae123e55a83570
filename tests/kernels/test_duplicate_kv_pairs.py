"""The one-launch KV duplication kernel: byte-exact copies, nothing else touched."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from helpers.interpreter_order import capture_specializations  # noqa: E402
from helpers.pools import allocate_prefixes, alloc_tree_extension, churn, make_pools  # noqa: E402
from sglang_eagle_paged.kernels.assign import assign_tree_draft_slots  # noqa: E402
from sglang_eagle_paged.kernels.duplicate import (  # noqa: E402
    KVBufferTable, _duplicate_kv_kernel, duplicate_kv_pairs)
from sglang_eagle_paged.kernels.reference import duplicate_kv_pairs_ref  # noqa: E402

FP8 = getattr(torch, "float8_e4m3fn", None)


def as_bytes(t):
    return t.contiguous().view(torch.uint8).reshape(t.shape[0], -1)


def randomize(buffers, gen):
    for b in buffers:
        v = as_bytes(b)
        v.copy_(torch.randint(0, 256, v.shape, dtype=torch.uint8, generator=gen))


def random_pairs(num_slots, n, gen, lo=0):
    """``n`` disjoint (src, tgt) pairs among slots [lo, num_slots)."""
    perm = torch.randperm(num_slots - lo, generator=gen)[: 2 * n] + lo
    return perm[:n], perm[n:]


def pad_with_sentinels(src, tgt, extra, gen, num_slots=None):
    """Scatter ``extra`` dead pairs among the live ones: both sides -1, or -1 on one side
    only and an otherwise unused slot on the other (a pair is skipped when either
    side is negative)."""
    n = src.numel() + extra
    pos = torch.randperm(n, generator=gen)
    live = pos[: src.numel()]
    s = torch.full((n,), -1, dtype=torch.int64)
    t = torch.full((n,), -1, dtype=torch.int64)
    s[live], t[live] = src, tgt
    if num_slots is not None:
        used = torch.zeros(num_slots, dtype=torch.bool)
        used[src], used[tgt] = True, True
        spare = (~used).nonzero().flatten()
        dead = pos[src.numel():]
        k = min(extra // 3, spare.numel())
        s[dead[:k]] = spare[torch.randint(0, spare.numel(), (k,), generator=gen)]    # live src, dead tgt
        t[dead[k:2 * k]] = spare[torch.randperm(spare.numel(), generator=gen)[:k]]  # dead src, live tgt
    return s, t


def check_copy(buffers, before, src, tgt):
    live = (src >= 0) & (tgt >= 0)
    s, t = src[live].long(), tgt[live].long()
    for b, b0 in zip(buffers, before):
        nb, n0 = as_bytes(b), as_bytes(b0)
        assert torch.equal(nb[t], n0[s]), "target row differs from its source"
        other = torch.ones(nb.shape[0], dtype=torch.bool)
        other[t] = False
        assert torch.equal(nb[other], n0[other]), "a non-target row changed"


def run_and_check(buffers, src, tgt, loc_dtype=torch.int64):
    before = [b.clone() for b in buffers]
    ref = [b.clone() for b in buffers]
    duplicate_kv_pairs_ref(ref, tgt, src)
    duplicate_kv_pairs(KVBufferTable.from_buffers(buffers), tgt.to(loc_dtype), src.to(loc_dtype))
    check_copy(buffers, before, src, tgt)
    for b, r in zip(buffers, ref):
        assert torch.equal(as_bytes(b), as_bytes(r))


DTYPES = [torch.bfloat16, torch.float16] + ([FP8] if FP8 is not None else [])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dtype=st.sampled_from(DTYPES),
    shape=st.sampled_from([(3, 5), (1, 1), (2, 8), (4, 3), (1, 64)]),
    layers=st.integers(1, 3),
    page=st.sampled_from([1, 4, 16]),
    n_pairs=st.integers(0, 40),
    extra=st.integers(0, 20),
    seed=st.integers(0, 2**31 - 1),
    loc_dtype=st.sampled_from([torch.int32, torch.int64]),
)
def test_duplicate_on_sglang_mha_pool(dtype, shape, layers, page, n_pairs, extra, seed, loc_dtype):
    head_num, head_dim = shape
    pools = make_pools(page, 128, head_num=head_num, head_dim=head_dim, layer_num=layers, dtype=dtype)
    kv = pools.kv_pool
    buffers = list(kv.k_buffer) + list(kv.v_buffer)
    assert len(buffers) == 2 * layers
    gen = torch.Generator().manual_seed(seed)
    randomize(buffers, gen)
    rows = buffers[0].shape[0]
    src, tgt = random_pairs(rows, n_pairs, gen)
    if extra:
        src, tgt = pad_with_sentinels(src, tgt, extra, gen, rows)
    run_and_check(buffers, src, tgt, loc_dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("loc_dtype", [torch.int32, torch.int64])
def test_duplicate_plain_tensors_mixed_rows(dtype, padded, loc_dtype):
    """K and V of different widths, odd sizes, a row longer than one 512-lane tile."""
    gen = torch.Generator().manual_seed(0)
    rows = 96
    shapes = [(3, 5), (3, 7), (5, 129), (1, 1), (2, 300)]
    buffers = [torch.empty((rows, *s), dtype=dtype) for s in shapes]
    randomize(buffers, gen)
    src, tgt = random_pairs(rows, 33, gen)
    if padded:
        src, tgt = pad_with_sentinels(src, tgt, 21, gen, rows)
    table = KVBufferTable.from_buffers(buffers)
    assert table.row_elems_max > 512 or table.elem_bytes > 1
    run_and_check(buffers, src, tgt, loc_dtype)


def test_row_width_exercises_every_tile():
    # fp16 5 x 129 = 1290 bytes -> 2-byte lanes, 645 lanes: two 512-lane tiles
    gen = torch.Generator().manual_seed(1)
    buffers = [torch.empty((40, 5, 129), dtype=torch.float16) for _ in range(2)]
    randomize(buffers, gen)
    table = KVBufferTable.from_buffers(buffers)
    assert (table.elem_bytes, table.row_elems_max) == (2, 645)
    src, tgt = random_pairs(40, 7, gen)
    run_and_check(buffers, src, tgt)


def test_all_sentinel_and_empty_are_noops():
    gen = torch.Generator().manual_seed(2)
    buffers = [torch.empty((16, 3, 5), dtype=torch.bfloat16) for _ in range(4)]
    randomize(buffers, gen)
    before = [b.clone() for b in buffers]
    table = KVBufferTable.from_buffers(buffers)
    duplicate_kv_pairs(table, torch.full((37,), -1, dtype=torch.int64), torch.full((37,), -1, dtype=torch.int64))
    e = torch.zeros(0, dtype=torch.int64)
    duplicate_kv_pairs(table, e, e)
    duplicate_kv_pairs(table, e.int(), e.int())
    for b, b0 in zip(buffers, before):
        assert torch.equal(as_bytes(b), as_bytes(b0))


@pytest.mark.parametrize("page,topk,steps,lens,dtype", [
    (4, 8, 5, [7, 5, 4, 3, 9, 1], torch.bfloat16),
    (16, 3, 2, [15, 1, 17, 32, 9], FP8 or torch.float16),
])
def test_assign_then_duplicate_gives_every_branch_the_prefix_page(page, topk, steps, lens, dtype):
    """End to end on real pools: after the copy, reading branch b's first page through
    req_to_token gives the prefix's last-page KV in every layer."""
    pools = make_pools(page, 64 * page * topk, head_num=3, head_dim=5, layer_num=2, dtype=dtype)
    churn(pools, 9, keep_fraction=0.3, max_pages=40)
    rpi = allocate_prefixes(pools, lens)
    seq_lens = torch.tensor(lens)
    alloc_loc = alloc_tree_extension(pools, rpi, seq_lens, page, topk, steps)
    out = assign_tree_draft_slots(rpi, pools.req_to_token, seq_lens, alloc_loc, page, topk, steps)
    kv = pools.kv_pool
    buffers = list(kv.k_buffer) + list(kv.v_buffer)
    randomize(buffers, torch.Generator().manual_seed(4))
    before = [b.clone() for b in buffers]
    duplicate_kv_pairs(KVBufferTable.from_buffers(buffers), out.tgt_loc, out.src_loc)
    check_copy(buffers, before, out.src_loc, out.tgt_loc)
    pages = (seq_lens % page + steps + page - 1) // page
    for i, n in enumerate(lens):
        last = n % page
        row = pools.req_to_token[rpi[i]].long()
        prefix_page = row[n - last:n]
        for b in range(1, topk):
            head = n - last + b * int(pages[i]) * page
            for buf in buffers:
                assert torch.equal(as_bytes(buf)[row[head:head + last]], as_bytes(buf)[prefix_page])


# ---------------------------------------------------------------- no recompiles

def test_duplicate_specialization_independent_of_pair_count():
    """Different live-pair counts and different num_pairs (buffer lengths): one specialization."""
    gen = torch.Generator().manual_seed(3)
    buffers = [torch.empty((64, 3, 5), dtype=torch.bfloat16) for _ in range(2)]
    randomize(buffers, gen)
    table = KVBufferTable.from_buffers(buffers)
    inputs = []
    for n_live, extra in ((1, 0), (5, 16), (16, 1), (0, 33), (30, 0), (3, 97)):
        src, tgt = random_pairs(64, n_live, gen)
        inputs.append(pad_with_sentinels(src, tgt, extra, gen, 64))
    with capture_specializations(_duplicate_kv_kernel) as specs:
        for src, tgt in inputs:
            duplicate_kv_pairs(table, tgt, src)
    assert len(specs) == len(inputs)
    assert all(c == specs[0] for c in specs[1:]), specs
