"""The tree-draft slot assignment kernel against its torch reference and the seed design.

Both variants: from ``alloc_loc`` (SGLang's allocation) and from the allocator's free pages
(the draft step's fast path), which must assign exactly what SGLang's allocation would.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")


import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from helpers.interpreter_order import capture_specializations, program_order  # noqa: E402
from helpers.pools import (  # noqa: E402
    allocate_prefixes, alloc_tree_extension, churn, make_pools)
from sglang_eagle_paged.kernels.assign import (  # noqa: E402
    PAIR_SENTINEL, _assign_tree_draft_slots_kernel, assign_tree_draft_slots, assign_tree_draft_slots_from_free_pages)
from sglang_eagle_paged.tree_layout import (  # noqa: E402
    extend_lens, max_new_pages_per_branch, new_pages, num_new_pages_per_branch, pair_capacity)
from sglang_eagle_paged.kernels.reference import assign_tree_draft_slots_ref  # noqa: E402

PAGE_SIZES = [1, 2, 4, 16, 64, 128, 256]


def run_both(req_pool_indices, req_to_token, seq_lens, alloc_loc, page_size, topk, steps):
    """Kernel on ``req_to_token`` itself, reference on a copy; both results returned."""
    r2t_ref = req_to_token.clone()
    ref = assign_tree_draft_slots_ref(req_pool_indices, r2t_ref, seq_lens, alloc_loc, page_size, topk, steps)
    out = assign_tree_draft_slots(req_pool_indices, req_to_token, seq_lens, alloc_loc, page_size, topk, steps)
    return out, ref, r2t_ref


def run_from_free_pages(req_pool_indices, req_to_token, seq_lens, free_pages, page_size, topk, steps):
    """The free-page variant on a copy of ``req_to_token``; its result and that copy."""
    r2t = req_to_token.clone()
    out = assign_tree_draft_slots_from_free_pages(req_pool_indices, r2t, seq_lens, free_pages, page_size, topk, steps)
    return out, r2t


def assert_same(out, ref, r2t, r2t_ref):
    assert torch.equal(out.out_cache_loc.long(), ref.out_cache_loc.long())
    assert torch.equal(out.src_loc.long(), ref.src_loc.long())
    assert torch.equal(out.tgt_loc.long(), ref.tgt_loc.long())
    assert torch.equal(r2t, r2t_ref)


# ---------------------------------------------------------------- 1. the seed's worked example

SEED_OUT = [11, 12, 13, 14, 15] + [x for b in range(1, 8) for x in range(8 * b + 11, 8 * b + 16)]
SEED_SRC = [8, 9, 10] * 7
SEED_TGT = [x for b in range(1, 8) for x in (8 + 8 * b, 9 + 8 * b, 10 + 8 * b)]


# The worked example as the design text that started this project states it (prefix slots 4..10,
# page 4, topk 8, steps 5), quoted here so that the test needs nothing outside the repository; each
# list ends in "..." there.
DESIGN_SRC = [8, 9, 10, 8, 9, 10]
DESIGN_TGT = [16, 17, 18, 24, 25, 26]
DESIGN_OUT = [11, 12, 13, 14, 15, 19, 20, 21, 22, 23, 24]


def test_the_expected_values_are_the_designs_own():
    """SEED_* against the numbers the design states: its last out_cache_loc value, 24, is a typo
    for 27 (branch 1's run of five starts at slot 19 and ends at 23; branch 2's page starts at 24
    with the three copied prefix slots, so its run starts at 27)."""
    assert SEED_SRC[: len(DESIGN_SRC)] == DESIGN_SRC and len(SEED_SRC) == 21
    assert SEED_TGT[: len(DESIGN_TGT)] == DESIGN_TGT and len(SEED_TGT) == 21
    assert SEED_OUT[: len(DESIGN_OUT) - 1] == DESIGN_OUT[:-1] and SEED_OUT[len(DESIGN_OUT) - 1] == 27
    assert SEED_TGT[3] == DESIGN_OUT[-1]  # 24 is branch 2's first copied slot, not a draft slot


@pytest.mark.parametrize("impl", ["kernel", "reference", "free pages"])
def test_seed_worked_example(impl):
    steps, page, topk = 5, 4, 8
    seq_lens = torch.tensor([7])
    assert num_new_pages_per_branch(seq_lens, page, steps).tolist() == [2]
    ext = int(extend_lens(seq_lens, page, topk, steps))
    assert ext == 61
    r2t = torch.zeros(2, 128, dtype=torch.int32)
    r2t[1, :7] = torch.arange(4, 11, dtype=torch.int32)
    rpi = torch.tensor([1])
    alloc_loc = torch.arange(11, 11 + ext, dtype=torch.int64)  # slot 11 fills the prefix page
    if impl == "free pages":  # slot 11 continues the prefix's page 2, then pages 3.. hold the rest
        out = assign_tree_draft_slots_from_free_pages(rpi, r2t, seq_lens, torch.arange(3, 18), page, topk, steps)
    else:
        fn = assign_tree_draft_slots if impl == "kernel" else assign_tree_draft_slots_ref
        out = fn(rpi, r2t, seq_lens, alloc_loc, page, topk, steps)
    assert out.out_cache_loc.tolist() == SEED_OUT
    assert out.src_loc.tolist() == SEED_SRC  # capacity 1 * 7 * 3 == 21: no padding here
    assert out.tgt_loc.tolist() == SEED_TGT
    assert r2t[1, :7 + ext].tolist() == list(range(4, 72))
    assert r2t[1, 7 + ext:].eq(0).all() and r2t[0].eq(0).all()


def test_seed_worked_example_through_sglang_allocator():
    steps, page, topk = 5, 4, 8
    pools = make_pools(page, 4 * 32)
    rpi = allocate_prefixes(pools, [7])
    assert pools.req_to_token[rpi[0], :7].tolist() == list(range(4, 11))  # page 0 is SGLang's padding page
    seq_lens = torch.tensor([7])
    alloc_loc = alloc_tree_extension(pools, rpi, seq_lens, page, topk, steps)
    assert alloc_loc.tolist() == list(range(11, 72))
    out = assign_tree_draft_slots(rpi, pools.req_to_token, seq_lens, alloc_loc, page, topk, steps)
    assert out.out_cache_loc.tolist() == SEED_OUT
    assert out.src_loc.tolist() == SEED_SRC
    assert out.tgt_loc.tolist() == SEED_TGT


# ---------------------------------------------------------------- 2. properties on real layouts

MAX_WORK = 4096  # bs * page_size * topk cap: bounds interpreter time and pool size


@st.composite
def tree_cases(draw):
    page = draw(st.sampled_from(PAGE_SIZES))
    topk = draw(st.integers(1, 10))
    steps = draw(st.integers(1, 8))
    bs = draw(st.integers(1, max(1, min(64, MAX_WORK // (page * topk)))))
    kind = st.sampled_from(["aligned", "short", "any"])
    lens = []
    for _ in range(bs):
        k = draw(kind)
        if k == "aligned":      # exact page multiple: last_page_len == 0
            n = page * draw(st.integers(1, 3))
        elif k == "short":      # shorter than one page
            n = draw(st.integers(1, page))
        else:
            n = draw(st.integers(1, 3 * page + page - 1))
        lens.append(n)
    seed = draw(st.integers(0, 2**31 - 1))
    return page, topk, steps, lens, seed


def build_case(page, topk, steps, lens, seed):
    """Real pools holding ``lens`` on scattered pages, SGLang's allocation of the tree extension,
    and the allocator's free list just before it (the pages that allocation took from)."""
    bs = len(lens)
    need_pages = sum(-(-n // page) for n in lens) + bs * topk * max_new_pages_per_branch(page, steps)
    pages = need_pages + 8 + need_pages // 4
    pools = make_pools(page, pages * page, max_reqs=bs + 8,
                       max_context_len=max(lens) + topk * max_new_pages_per_branch(page, steps) * page + page)
    churn(pools, seed, max_pages=pages - need_pages - 1, keep_fraction=0.5)
    rpi = allocate_prefixes(pools, lens)
    churn(pools, seed + 1)  # shuffle the free list again before the extension
    seq_lens = torch.tensor(lens, dtype=torch.int64)
    free = pools.allocator.free_pages  # a slice at an offset, as serving sees it; never written in place
    alloc_loc = alloc_tree_extension(pools, rpi, seq_lens, page, topk, steps)
    return pools, rpi, seq_lens, alloc_loc, free


def check_invariants(out, r2t_before, r2t, rpi, seq_lens, alloc_loc, page, topk, steps):
    bs = seq_lens.numel()
    lens = seq_lens.tolist()
    ext = extend_lens(seq_lens, page, topk, steps).tolist()
    span = (num_new_pages_per_branch(seq_lens, page, steps) * page).tolist()
    cap = pair_capacity(bs, page, topk)
    assert out.out_cache_loc.numel() == bs * topk * steps
    assert out.src_loc.numel() == out.tgt_loc.numel() == cap
    occ = out.out_cache_loc.long().view(bs, topk, steps)
    src = out.src_loc.long().view(bs, max(topk - 1, 0), max(page - 1, 0))
    tgt = out.tgt_loc.long().view(bs, max(topk - 1, 0), max(page - 1, 0))

    # only the rows of the batch, and only past each prefix, changed
    untouched = torch.ones(r2t.shape[0], dtype=torch.bool)
    untouched[rpi] = False
    assert torch.equal(r2t[untouched], r2t_before[untouched])
    prefix_slots = []
    start = 0
    for i in range(bs):
        row, row0 = r2t[rpi[i]].long(), r2t_before[rpi[i]].long()
        n, last = lens[i], lens[i] % page
        assert torch.equal(row[:n], row0[:n]), "prefix entries of req_to_token changed"
        assert torch.equal(row[n + ext[i]:], row0[n + ext[i]:]), "req_to_token written past the extension"
        assert torch.equal(row[n:n + ext[i]], alloc_loc[start:start + ext[i]].long())
        start += ext[i]
        prefix_slots.append(row[:n])
        # page-table view: row position x holds a slot of the same in-page offset
        pos = torch.arange(n + ext[i])
        assert torch.equal(row[:n + ext[i]] % page, pos % page)
        page_start = n - last
        for b in range(topk):
            head = page_start + b * span[i]
            # every slot of the branch's pages is a page-aligned run of its region
            pages_b = row[head:head + span[i]].view(-1, page)
            assert torch.equal(pages_b - pages_b[:, :1], torch.arange(page).expand_as(pages_b))
            assert torch.equal(occ[i, b], row[head + last:head + last + steps])
            if b == 0:
                continue
            s, t = src[i, b - 1], tgt[i, b - 1]
            assert (s[last:] == PAIR_SENTINEL).all() and (t[last:] == PAIR_SENTINEL).all()
            assert (s[:last] >= 0).all() and (t[:last] >= 0).all()
            # sources: the prefix's last page, in order
            assert torch.equal(s[:last], row[page_start:n])
            if last:
                assert (s[:last] // page == row[n - 1] // page).all()
            # targets: the head of branch b's own first page, same in-page offsets
            head_page = row[head] // page
            assert torch.equal(t[:last], head_page * page + torch.arange(last))
            # the branch's first draft slot shares that page (last < page)
            assert (t[:last] // page == occ[i, b, 0] // page).all()
    live_t = tgt[tgt >= 0]
    assert live_t.numel() == (src >= 0).sum() == (topk - 1) * sum(n % page for n in lens)
    handed = torch.cat([occ.reshape(-1), live_t])
    assert handed.unique().numel() == handed.numel(), "a slot is handed out twice"
    prefix_all = torch.cat(prefix_slots)
    assert not torch.isin(handed, prefix_all).any(), "a draft/target slot is a prefix slot"
    assert not torch.isin(src[src >= 0], handed).any()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tree_cases())
def test_kernel_matches_reference_on_sglang_layouts(case):
    page, topk, steps, lens, seed = case
    pools, rpi, seq_lens, alloc_loc, free = build_case(page, topk, steps, lens, seed)
    r2t = pools.req_to_token
    r2t_before = r2t.clone()
    out, ref, r2t_ref = run_both(rpi, r2t, seq_lens, alloc_loc, page, topk, steps)
    assert_same(out, ref, r2t, r2t_ref)
    check_invariants(out, r2t_before, r2t, rpi, seq_lens, alloc_loc, page, topk, steps)
    # the free-page variant assigns exactly what SGLang's allocation led to
    fast, r2t_fast = run_from_free_pages(rpi, r2t_before, seq_lens, free, page, topk, steps)
    assert_same(fast, ref, r2t_fast, r2t_ref)


@pytest.mark.parametrize("page,topk,steps,lens", [
    (4, 3, 2, [4, 8, 12]),           # every prefix page-aligned: no pairs, all sentinel
    (16, 1, 3, [5, 16, 33]),         # topk 1: empty pair buffers
    (1, 4, 3, [1, 7, 2]),            # page 1: nothing to duplicate
    (256, 2, 8, [255, 1]),           # the longest possible last page
    (2, 10, 8, [1] * 64),            # bs 64 with the largest topk/steps
])
def test_edge_layouts(page, topk, steps, lens):
    pools, rpi, seq_lens, alloc_loc, free = build_case(page, topk, steps, lens, seed=7)
    r2t = pools.req_to_token
    r2t_before = r2t.clone()
    out, ref, r2t_ref = run_both(rpi, r2t, seq_lens, alloc_loc, page, topk, steps)
    assert_same(out, ref, r2t, r2t_ref)
    check_invariants(out, r2t_before, r2t, rpi, seq_lens, alloc_loc, page, topk, steps)
    fast, r2t_fast = run_from_free_pages(rpi, r2t_before, seq_lens, free, page, topk, steps)
    assert_same(fast, ref, r2t_fast, r2t_ref)


@pytest.mark.parametrize("variant", ["alloc_loc", "free pages"])
def test_reused_out_buffers_are_fully_overwritten(variant):
    page, topk, steps, lens = 4, 3, 2, [5, 6, 8]
    pools, rpi, seq_lens, alloc_loc, free = build_case(page, topk, steps, lens, seed=3)
    r2t_ref = pools.req_to_token.clone()
    ref = assign_tree_draft_slots_ref(rpi, r2t_ref, seq_lens, alloc_loc, page, topk, steps)
    garbage = assign_tree_draft_slots_ref(rpi, r2t_ref.clone(), seq_lens, alloc_loc, page, topk, steps)
    for t in (garbage.out_cache_loc, garbage.src_loc, garbage.tgt_loc):
        t.fill_(12345)
    if variant == "alloc_loc":
        out = assign_tree_draft_slots(rpi, pools.req_to_token, seq_lens, alloc_loc, page, topk, steps, out=garbage)
    else:
        out = assign_tree_draft_slots_from_free_pages(rpi, pools.req_to_token, seq_lens, free, page, topk, steps,
                                                      out=garbage)
    assert out is garbage
    assert_same(out, ref, pools.req_to_token, r2t_ref)


@pytest.mark.parametrize("fn", [assign_tree_draft_slots, assign_tree_draft_slots_from_free_pages])
def test_empty_batch(fn):
    r2t = torch.zeros(2, 8, dtype=torch.int32)
    e = torch.zeros(0, dtype=torch.int64)
    with capture_specializations(_assign_tree_draft_slots_kernel) as specs:
        out = fn(e, r2t, e, e, 4, 3, 2)
    assert specs == []
    assert out.out_cache_loc.numel() == out.src_loc.numel() == 0
    assert r2t.eq(0).all()


# ---------------------------------------------------------------- 4. program order independence

@pytest.mark.parametrize("page,topk,steps,lens", [
    (4, 8, 5, [7, 5, 4, 3, 9, 1]),
    (16, 3, 8, [15, 1, 17, 32, 9]),
    (2, 10, 1, [1, 2, 3, 4, 5, 6, 7]),
])
@pytest.mark.parametrize("variant", ["alloc_loc", "free pages"])
def test_assignment_is_program_order_independent(page, topk, steps, lens, variant):
    """The free-page variant also reads each prefix's last slot from the rows the launch writes:
    only from the program's own row, below where it writes."""
    pools, rpi, seq_lens, alloc_loc, free = build_case(page, topk, steps, lens, seed=11)
    base = pools.req_to_token.clone()
    results = {}
    for order in ("forward", "reversed", "shuffled"):
        r2t = base.clone()
        with program_order(order, seed=5) as launches:
            if variant == "alloc_loc":
                out = assign_tree_draft_slots(rpi, r2t, seq_lens, alloc_loc, page, topk, steps)
            else:
                out = assign_tree_draft_slots_from_free_pages(rpi, r2t, seq_lens, free, page, topk, steps)
        ran = [p[0] for p in launches[0]]
        assert sorted(ran) == list(range(len(lens)))
        if order == "reversed":
            assert ran == list(range(len(lens)))[::-1]
        results[order] = (out, r2t)
    out_f, r2t_f = results["forward"]
    for order in ("reversed", "shuffled"):
        out_o, r2t_o = results[order]
        assert_same(out_o, out_f, r2t_o, r2t_f)


# ---------------------------------------------------------------- 6. no recompiles

def test_assignment_specialization_independent_of_contents():
    """Same batch size and config, different prefix lengths (so different copy lengths,
    pair counts and allocator output lengths): one specialization."""
    page, topk, steps = 4, 3, 5
    cases = (([4, 8, 12, 16], 1), ([1, 2, 3, 5], 2), ([7, 30, 2, 9], 3), ([3, 3, 3, 3], 4))
    built = [build_case(page, topk, steps, lens, seed) for lens, seed in cases]
    with capture_specializations(_assign_tree_draft_slots_kernel) as specs:
        for pools, rpi, seq_lens, alloc_loc, _ in built:
            assign_tree_draft_slots(rpi, pools.req_to_token, seq_lens, alloc_loc, page, topk, steps)
    assert len(specs) == len(cases)
    assert all(s == specs[0] for s in specs[1:]), specs
    # the free-page variant: its own single specialization, whatever the free list's offset
    with capture_specializations(_assign_tree_draft_slots_kernel) as fast:
        for pools, rpi, seq_lens, _, free in built:
            assert len(free) - 3 >= int(new_pages(seq_lens, page, topk, steps).sum())  # room at every offset
            for offset in (0, 1, 3):
                assign_tree_draft_slots_from_free_pages(rpi, pools.req_to_token.clone(), seq_lens, free[offset:],
                                                        page, topk, steps)
    assert len(fast) == 3 * len(cases) and all(s == fast[0] for s in fast[1:]), fast
    assert fast[0] != specs[0]
