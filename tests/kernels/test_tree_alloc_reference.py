"""The free-page kernel against its torch reference and SGLang's own ``alloc_extend``.

Every case builds SGLang's real ``PagedTokenToKVPoolAllocator`` on CPU, shuffles its free
list (:func:`helpers.pools.churn`), allocates the prefixes as prefill does, and then asks
three implementations for the tree extension's slots: ours (which must leave the
allocator alone), the reference, and SGLang's ``alloc_extend`` called exactly as
``_draft_preprocess_decode`` calls it (then restored).

The assignment's free-page variant (the draft step's one launch) evaluates the same formula
inside the assignment: it must give what the two launches (these slots, then the assignment
from them), the two torch references and SGLang's allocation give.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import random  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.interpreter_order import capture_specializations  # noqa: E402
from helpers.pools import alloc_tree_extension, allocate_prefixes, churn, make_pools  # noqa: E402
from sglang_eagle_paged.tree_layout import extend_lens, extension_totals, new_pages  # noqa: E402
from sglang_eagle_paged.kernels.assign import (  # noqa: E402
    _assign_tree_draft_slots_kernel, assign_tree_draft_slots, assign_tree_draft_slots_from_free_pages)
from sglang_eagle_paged.kernels.reference import (  # noqa: E402
    assign_tree_draft_slots_ref, tree_slots_from_free_pages_ref)
from helpers.tree_alloc import (  # noqa: E402
    BLOCK_BS, _tree_alloc_kernel, tree_slots_from_free_pages)

PAGES = [16, 64, 128]
LARGE = 1000


def edge_lens(page):
    return [0, 1, page - 1, page, page + 1, 2 * page - 1, LARGE, LARGE + page - 1]


def build(page, topk, steps, lens, seed, seq_dtype=torch.int64):
    """Pools holding ``lens`` as prefixes, with a shuffled free list that holds the tree."""
    lens_t = torch.tensor(lens, dtype=torch.int64)
    need = int(((lens_t + page - 1) // page).sum() + new_pages(lens_t, page, topk, steps).sum())
    pools = make_pools(page, (2 * need + 16) * page, max_reqs=len(lens) + 2, max_context_len=LARGE + 2 * page,
                       debug=False)
    churn(pools, seed, max_pages=need, keep_fraction=0.3)  # prefixes on scattered pages, some taken
    rpi = allocate_prefixes(pools, lens)
    churn(pools, seed + 1)  # and the whole free list out of order
    return pools, rpi, lens_t.to(seq_dtype)


def ours(pools, rpi, lens, page, topk, steps):
    a = pools.allocator
    free, release = a.free_pages, a.release_pages
    free_copy = free.clone()
    n = int(extend_lens(lens.long(), page, topk, steps).sum())
    out = tree_slots_from_free_pages(pools.req_to_token, rpi, lens, free, n, page, topk, steps)
    # nothing of the allocator changed: the same tensors, the same values
    assert a.free_pages is free and a.release_pages is release and torch.equal(free, free_copy)
    return out


def sglang(pools, rpi, lens, page, topk, steps):
    a = pools.allocator
    state = a.backup_state()
    out = alloc_tree_extension(pools, rpi, lens.long(), page, topk, steps)
    taken = state[0].numel() - a.free_pages.numel()
    a.restore_state(state)
    return out, taken


def check(page, topk, steps, lens, seed, seq_dtype=torch.int64):
    pools, rpi, lens = build(page, topk, steps, lens, seed, seq_dtype)
    got = ours(pools, rpi, lens, page, topk, steps)
    want = tree_slots_from_free_pages_ref(pools.req_to_token, rpi, lens, pools.allocator.free_pages, page, topk, steps)
    theirs, taken = sglang(pools, rpi, lens, page, topk, steps)
    assert got.dtype == theirs.dtype == torch.int64
    assert torch.equal(got, want), (page, topk, steps, lens.tolist())
    assert torch.equal(got, theirs), (page, topk, steps, lens.tolist())
    assert taken == int(new_pages(lens.long(), page, topk, steps).sum())  # the host-side page count
    # the worker's two totals, from six ops, on the lengths as the scheduler keeps them (and as given)
    for cpu_lens in (lens.long().cpu(), lens.cpu()):
        assert extension_totals(cpu_lens, page, topk, steps) == (got.numel(), taken), (page, topk, steps)
    return got


@pytest.mark.parametrize("page", PAGES)
def test_matches_reference_and_sglang(page):
    """topk 2..10, steps 1..8 (each at least once per page), batch sizes up to 300 (three
    blocks of earlier requests), every edge prefix length and random ones."""
    rng = random.Random(page)
    sizes = [1, 2, 9, BLOCK_BS + 1, 300]
    for i, topk in enumerate(range(2, 11)):
        steps = i % 8 + 1
        bs = sizes[i % len(sizes)]
        lens = [rng.choice(edge_lens(page) + [rng.randint(0, LARGE)]) for _ in range(bs)]
        check(page, topk, steps, lens, seed=page * 100 + topk)


@pytest.mark.parametrize("steps", range(1, 9))
def test_every_edge_length_at_every_steps(steps):
    for page in PAGES:
        for topk in (2, 10):
            check(page, topk, steps, edge_lens(page), seed=steps * 7 + page + topk)


def test_int32_lengths():
    check(16, 4, 3, edge_lens(16) * 3, seed=1, seq_dtype=torch.int32)


def test_strided_inputs():
    pools, rpi, lens = build(16, 4, 3, [5, 16, 33, 0, 47, 1], seed=2)
    free = pools.allocator.free_pages
    n = int(extend_lens(lens, 16, 4, 3).sum())
    want = tree_slots_from_free_pages(pools.req_to_token, rpi, lens, free, n, 16, 4, 3)
    r2t = pools.req_to_token
    wide = torch.zeros(r2t.shape[0], 2 * r2t.shape[1], dtype=r2t.dtype)
    wide[:, ::2] = r2t
    got = tree_slots_from_free_pages(wide[:, ::2], rpi.repeat_interleave(2)[::2], lens.repeat_interleave(3)[::3],
                                     free.repeat_interleave(2)[::2], n, 16, 4, 3)
    assert torch.equal(got, want)


def test_empty_batch_launches_nothing():
    r2t = torch.zeros(2, 8, dtype=torch.int32)
    e = torch.zeros(0, dtype=torch.int64)
    with capture_specializations(_tree_alloc_kernel) as specs:
        out = tree_slots_from_free_pages(r2t, e, e, torch.arange(1, 5), 0, 16, 4, 3)
    assert specs == [] and out.shape == (0,) and out.dtype == torch.int64


@pytest.mark.parametrize("name", ["page_size", "topk", "steps"])
@pytest.mark.parametrize("value", [0, -1, 2.0])
def test_bad_configuration_raises(name, value):
    kwargs = dict(page_size=16, topk=4, steps=3)
    kwargs[name] = value
    with pytest.raises(ValueError, match=name):
        tree_slots_from_free_pages(torch.zeros(2, 8, dtype=torch.int32), torch.ones(1), torch.ones(1),
                                   torch.arange(4), 8, **kwargs)


def test_batch_mismatch_raises():
    with pytest.raises(RuntimeError, match="batch mismatch"):
        tree_slots_from_free_pages(torch.zeros(2, 8, dtype=torch.int32), torch.ones(2), torch.ones(1),
                                   torch.arange(4), 8, 16, 4, 3)


def test_one_specialization_across_batches_and_lengths():
    """Batch sizes, prefix lengths, output lengths, row strides and free-list offsets
    (a slice at any element, so at any pointer alignment) vary: one variant."""
    rng = random.Random(9)
    page, topk, steps = 64, 8, 5
    calls = []
    for bs in (1, 2, 3, 7, 16, 64, BLOCK_BS + 1):
        pools, rpi, lens = build(page, topk, steps, [rng.randint(0, 3 * page) for _ in range(bs)], seed=bs)
        r2t = pools.req_to_token[:, : rng.randint(LARGE, pools.req_to_token.shape[1])]
        free = pools.allocator.free_pages[rng.randint(0, 5):]
        calls.append((r2t, rpi, lens, free, int(extend_lens(lens, page, topk, steps).sum())))
    with capture_specializations(_tree_alloc_kernel) as specs:
        for r2t, rpi, lens, free, n in calls:
            tree_slots_from_free_pages(r2t, rpi, lens, free, n, page, topk, steps)
    assert len(specs) == len(calls) and all(s == specs[0] for s in specs[1:]), specs
    with capture_specializations(_tree_alloc_kernel) as specs:  # the capture is not blind
        r2t, rpi, lens, free, _ = calls[1]
        for p, k, s in ((64, 8, 5), (16, 8, 5), (64, 4, 5), (64, 8, 3)):
            tree_slots_from_free_pages(r2t, rpi, lens, free, int(extend_lens(lens, p, k, s).sum()), p, k, s)
        tree_slots_from_free_pages(r2t, rpi, lens.int(), free, int(extend_lens(lens, 64, 8, 5).sum()), 64, 8, 5)
    assert len(set(specs)) == 5


# ---------------------------------------------------------------- the assignment's free-page variant

def strided_at_offset(t, offset):
    """``t``'s values as a stride-2 view starting ``offset`` elements into a larger buffer."""
    wide = torch.full((2 * (offset + t.numel()),), -7, dtype=t.dtype)
    view = wide[2 * offset::2]
    view.copy_(t)
    return view


def layouts_equal(a, b):
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("out_cache_loc", "src_loc", "tgt_loc"))


def check_fused(page, topk, steps, lens, seed, strided=False, seq_dtype=torch.int64):
    """One launch from the free pages == the two launches == the torch references == SGLang's allocation
    followed by the assignment: rows, draft slots and pairs, with the allocator left alone."""
    pools, rpi, lens = build(page, topk, steps, lens, seed, seq_dtype)
    a = pools.allocator
    free, release = a.free_pages, a.release_pages
    free_copy = free.clone()
    base = pools.req_to_token.clone()
    cfg = (page, topk, steps)

    r2t = base.clone()
    fused = assign_tree_draft_slots_from_free_pages(rpi, r2t, lens, strided_at_offset(free, 3) if strided else free,
                                                    *cfg)
    assert a.free_pages is free and a.release_pages is release and torch.equal(free, free_copy)

    r2t_two = base.clone()
    slots = tree_slots_from_free_pages(r2t_two, rpi, lens, free, int(extend_lens(lens.long(), *cfg).sum()), *cfg)
    two = assign_tree_draft_slots(rpi, r2t_two, lens, slots, *cfg)

    r2t_ref = base.clone()
    ref = assign_tree_draft_slots_ref(rpi, r2t_ref, lens, tree_slots_from_free_pages_ref(base, rpi, lens, free, *cfg),
                                      *cfg)

    theirs, _ = sglang(pools, rpi, lens, *cfg)  # SGLang's real allocation, restored
    r2t_sgl = base.clone()
    sgl = assign_tree_draft_slots_ref(rpi, r2t_sgl, lens, theirs, *cfg)

    for other, other_r2t in ((two, r2t_two), (ref, r2t_ref), (sgl, r2t_sgl)):
        assert layouts_equal(fused, other) and torch.equal(r2t, other_r2t), (cfg, lens.tolist())


@pytest.mark.parametrize("page", [2] + PAGES)
def test_free_page_assignment_matches_two_launches_references_and_sglang(page):
    """topk 2..10, steps 1..8, batch sizes 1 to BLOCK_BS + 1 (two blocks of earlier requests), edge
    and random prefix lengths (empty, partial and full last pages, rows clipped at the context
    limit), every other case on a stride-2 free list at an offset."""
    rng = random.Random(page + 1)
    sizes = [1, 2, 9, 40, BLOCK_BS + 1]
    for i, topk in enumerate(range(2, 11)):
        steps = (i * 3) % 8 + 1
        bs = sizes[i % len(sizes)]
        lens = [rng.choice(edge_lens(page) + [rng.randint(0, LARGE)]) for _ in range(bs)]
        check_fused(page, topk, steps, lens, seed=page * 10 + topk, strided=i % 2 == 1)


@pytest.mark.parametrize("steps", [1, 3, 8])
def test_free_page_assignment_every_edge_length(steps):
    for page in (4, 16, 64):
        for topk in (2, 10):
            check_fused(page, topk, steps, edge_lens(page), seed=steps * 5 + page + topk, strided=topk == 10)


def test_free_page_assignment_int32_lengths():
    check_fused(16, 4, 3, edge_lens(16) * 3, seed=4, strided=True, seq_dtype=torch.int32)


def test_free_page_assignment_strided_inputs():
    pools, rpi, lens = build(16, 4, 3, [5, 16, 33, 0, 47, 1], seed=2)
    free = pools.allocator.free_pages
    r2t = pools.req_to_token
    want_r2t = r2t.clone()
    want = assign_tree_draft_slots_from_free_pages(rpi, want_r2t, lens, free, 16, 4, 3)
    wide = torch.zeros(r2t.shape[0], 2 * r2t.shape[1], dtype=r2t.dtype)
    wide[:, ::2] = r2t
    got = assign_tree_draft_slots_from_free_pages(rpi.repeat_interleave(2)[::2], wide[:, ::2],
                                                  lens.repeat_interleave(3)[::3], strided_at_offset(free, 5),
                                                  16, 4, 3)
    assert layouts_equal(got, want) and torch.equal(wide[:, ::2], want_r2t)
    assert wide[:, 1::2].eq(0).all()  # nothing written between the row's entries


def test_free_page_assignment_one_specialization_across_batches():
    """Batch sizes, prefix lengths, row strides and free-list offsets vary: one variant of the
    assignment kernel, and not the variant that reads alloc_loc."""
    rng = random.Random(10)
    page, topk, steps = 64, 8, 5
    calls = []
    for bs in (1, 2, 3, 7, 16, BLOCK_BS + 1):
        pools, rpi, lens = build(page, topk, steps, [rng.randint(0, 3 * page) for _ in range(bs)], seed=bs)
        r2t = pools.req_to_token[:, : rng.randint(LARGE, pools.req_to_token.shape[1])]
        calls.append((r2t, rpi, lens, pools.allocator.free_pages[rng.randint(0, 5):]))
    with capture_specializations(_assign_tree_draft_slots_kernel) as specs:
        for r2t, rpi, lens, free in calls:
            assign_tree_draft_slots_from_free_pages(rpi, r2t, lens, free, page, topk, steps)
    assert len(specs) == len(calls) and all(s == specs[0] for s in specs[1:]), specs
    r2t, rpi, lens, free = calls[0]
    with capture_specializations(_assign_tree_draft_slots_kernel) as other:
        assign_tree_draft_slots(rpi, r2t, lens, free, page, topk, steps)  # any int64 tensor will do here
    assert other[0] != specs[0]
