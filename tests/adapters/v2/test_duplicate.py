"""The sync-free duplication equals SGLang 0.5.23's own, byte for byte, on its real pool:
0 host reads, no torch op, one launch, one compiled variant for every batch."""

import random
from types import SimpleNamespace

import pytest

import v2_support as support

support.require_sglang()

import torch  # noqa: E402
from sglang.srt.speculative import eagle_worker_common as ewc  # noqa: E402

from helpers.interpreter_order import capture_specializations  # noqa: E402
from helpers.op_count import count  # noqa: E402
from sglang_eagle_paged.adapters.v2 import draft_plan, draft_step, pools  # noqa: E402
from sglang_eagle_paged.kernels import duplicate_kv_pairs  # noqa: E402
from sglang_eagle_paged.tree_layout import pair_capacity  # noqa: E402
from sglang_eagle_paged.kernels.prefix_tail import (  # noqa: E402
    _duplicate_prefix_tail_kernel, duplicate_prefix_tail_reference, tail_pairs,
    tail_pairs_reference)
from sglang_eagle_paged.settings import Mode  # noqa: E402

torch.set_num_threads(1)
SGLANG_FN = ewc.duplicate_prefix_tail_to_draft_branches
OURS = draft_step.duplication_hook(Mode.ON)  # no draft runner recorded for these pools: it copies
KERNEL = "_duplicate_prefix_tail_kernel"




def run_both(pool, rows, seq_lens, page, topk, steps):
    """(SGLang's result, ours, what ours saw): every K/V buffer after each function, from the same start."""
    prefix_base, last_page, nnp = support.draft_args(seq_lens, page, steps)
    start = support.snapshot(pool)
    SGLANG_FN(pool, rows, prefix_base, last_page, nnp, topk, page)
    theirs = support.snapshot(pool)
    support.restore(pool, start)
    with support.observe() as (probe, launches):
        OURS(SGLANG_FN, pool, rows, prefix_base, last_page, nnp, topk, page)
    ours = support.snapshot(pool)
    return start, theirs, ours, probe.reads, launches


def assert_same(theirs, ours):
    for i, (a, b) in enumerate(zip(theirs, ours)):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), f"buffer {i} differs"


def test_reference_design_worked_example():
    # steps 5, page 4, topk 8; prefix [4..10] -> last page [8, 9, 10] copied into 7 branches
    page, topk, steps = 4, 8, 5
    pool = support.make_pool(page, 256, layer_num=1)
    support.fill_random(pool, 0)
    nnp = 2
    # the design's slots: position p holds slot p + 4 (prefix [4..10], then whole pages from 12)
    row = torch.arange(4, 4 + 4 + topk * nnp * page, dtype=torch.int32).view(1, -1)
    seq = [7]  # 7 tokens at positions 0..6 -> prefix_base 4, last_page 3
    prefix_base, last_page, num_new_pages = support.draft_args(seq, page, steps)
    assert (prefix_base.item(), last_page.item(), num_new_pages.item()) == (4, 3, nnp)
    tgt, src = tail_pairs(row, prefix_base, last_page, num_new_pages, topk, page)
    live = tgt >= 0
    assert src[live].tolist() == [8, 9, 10] * 7
    assert tgt[live].tolist()[:6] == [16, 17, 18, 24, 25, 26]
    start, theirs, ours, reads, launches = run_both(pool, row, seq, page, topk, steps)
    assert_same(theirs, ours)
    k = ours[0]
    for t in tgt[live].tolist():
        assert torch.equal(k[t].view(torch.uint8), k[8 + (t - 16) % 8].view(torch.uint8)), t  # every branch's hole holds the prefix tail
    assert not torch.equal(start[0].view(torch.uint8), ours[0].view(torch.uint8))  # the copy did change the pool
    assert reads == [] and launches == [KERNEL]


def _cases():
    # Kept small for the interpreter: SGLang's own copy runs there too, tile by tile.
    rng = random.Random(2026)
    shapes = [(2, 64), (4, 20), (16, 9), (64, 3), (128, 2), (256, 1), (8, 5)]
    out = []
    for i, (page, bs) in enumerate(shapes):
        topk = rng.randint(2, 10) if page <= 16 else rng.randint(2, 4)
        steps = rng.randint(1, 8)
        seq = []
        for _ in range(bs):
            kind = rng.random()
            if kind < 0.25:
                seq.append(page * rng.randint(1, 4))          # at a page multiple: nothing to copy
            elif kind < 0.4:
                seq.append(1)                                  # a one-token prefix
            else:
                seq.append(rng.randint(2, 5 * page))
        out.append((page, topk, steps, seq, i % 2 == 0))
    return out


@pytest.mark.parametrize("page,topk,steps,seq,tight", _cases())
def test_random_batches_equal_sglang(page, topk, steps, seq, tight):
    pool, rows = support.layout_rows(seq, page, topk, steps, seed=page * 31 + topk, tight=tight)
    support.fill_random(pool, page + topk)
    start, theirs, ours, reads, launches = run_both(pool, rows, seq, page, topk, steps)
    assert_same(theirs, ours)
    assert reads == [], reads
    assert launches == [KERNEL]
    prefix_base, last_page, nnp = support.draft_args(seq, page, steps)
    support.restore(pool, start)
    duplicate_prefix_tail_reference(list(pool.k_buffer) + list(pool.v_buffer), rows, prefix_base, last_page, nnp,
                                     topk, page)
    assert_same(theirs, support.snapshot(pool))  # the kernel tests' torch reference is SGLang's copy too
    tgt, src = tail_pairs(rows, prefix_base, last_page, nnp, topk, page)
    ref_tgt, ref_src = tail_pairs_reference(rows, prefix_base, last_page, nnp, topk, page)
    live = tgt >= 0
    assert tgt.numel() == pair_capacity(len(seq), page, topk)
    assert tgt[live].tolist() == ref_tgt and src[live].tolist() == ref_src
    assert torch.equal(live, src >= 0)
    if ref_tgt:
        assert not all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(start, ours))


def test_probe_catches_sglang_own_syncs():
    """The probe can fail: SGLang's function, under it, makes its two boolean-mask reads."""
    page, topk, steps, seq = 4, 3, 2, [5, 9]
    pool, rows = support.layout_rows(seq, page, topk, steps, seed=1)
    prefix_base, last_page, nnp = support.draft_args(seq, page, steps)
    with support.observe() as (probe, launches):
        SGLANG_FN(pool, rows, prefix_base, last_page, nnp, topk, page)
    assert [r for r in probe.reads if "bool mask" in r] == ["__getitem__[bool mask]"] * 2
    assert launches  # SGLang's own copy kernel ran


def test_sglang_launches_grow_with_pairs_ours_do_not():
    page, topk, steps = 64, 8, 4
    seq = [63] * 3  # 3 * 7 * 63 = 1323 pairs
    pool, rows = support.layout_rows(seq, page, topk, steps, seed=5, tight=True)
    prefix_base, last_page, nnp = support.draft_args(seq, page, steps)
    with support.observe() as (_, theirs):
        SGLANG_FN(pool, rows, prefix_base, last_page, nnp, topk, page)
    with support.observe() as (_, ours):
        OURS(SGLANG_FN, pool, rows, prefix_base, last_page, nnp, topk, page)
    assert len(theirs) >= 1323 // 256 and len(ours) == 1


def test_the_duplication_is_one_launch_and_no_torch_op():
    """The whole v2 duplication: nothing dispatched to torch, one Triton launch (on a GPU: one kernel).
    The draft runner's plan is derived once (the warm-up does it at start-up), so the count starts at
    a pool whose plan exists, as every draft step does."""
    page, topk, steps, seq = 16, 4, 5, [17, 1, 32, 30]
    pool, rows = support.layout_rows(seq, page, topk, steps, seed=12)
    args = support.draft_args(seq, page, steps)
    assert draft_plan.current(pool).copy == draft_plan.OURS
    c = count(lambda: OURS(SGLANG_FN, pool, rows, *args, topk, page))
    assert dict(c.ops) == {} and dict(c.launches) == {KERNEL: 1}, (c.ops, c.launches)


def test_the_op_counter_sees_a_torch_pair_build():
    """The count above can fail: the torch pair build this replaced (the reference's pairs, then the
    pair-copy kernel) dispatches torch ops before its launch, as SGLang's own function does."""
    page, topk, steps, seq = 16, 4, 5, [17, 1, 32, 30]
    pool, rows = support.layout_rows(seq, page, topk, steps, seed=12)
    args = support.draft_args(seq, page, steps)
    table = pools.copy_table(pool)
    torch_built = count(lambda: duplicate_kv_pairs(table, *tail_pairs(rows, *args, topk, page)))
    assert sum(torch_built.ops.values()) > 0 and dict(torch_built.launches) == {"_duplicate_kv_kernel": 1}
    theirs = count(lambda: SGLANG_FN(pool, rows, *args, topk, page))
    assert sum(theirs.ops.values()) > 0 and theirs.ops["gather"] == 2


@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
def test_one_variant_for_every_batch(slot_dtype):
    page, topk, steps = 8, 4, 3
    pool = None
    batches = [[1], [7, 7, 7], [8, 16], [3, 5, 6, 2, 1, 7, 7, 7, 9]]
    with capture_specializations(_duplicate_prefix_tail_kernel) as specs:
        for i, seq in enumerate(batches):
            p, rows = support.layout_rows(seq, page, topk, steps, seed=i)
            if pool is None:
                pool = p
            # one pool for all batches (as in serving): rows from layout i, slots valid in every pool of this size
            rows = rows.clamp_max(pool.size).to(slot_dtype)
            prefix_base, last_page, nnp = support.draft_args(seq, page, steps)
            OURS(SGLANG_FN, pool, rows, prefix_base, last_page, nnp, topk, page)
    assert len(specs) == len(batches)
    assert all(s == specs[0] for s in specs), specs


def test_int64_rows_equal_sglang():
    page, topk, steps, seq = 16, 5, 6, [17, 3, 32, 31]
    pool, rows = support.layout_rows(seq, page, topk, steps, seed=9)
    support.fill_random(pool, 9)
    start, theirs, ours, reads, launches = run_both(pool, rows.to(torch.int64), seq, page, topk, steps)
    assert_same(theirs, ours)
    assert reads == [] and launches == [KERNEL]


def test_fake_mode_changes_no_kv():
    page, topk, steps, seq = 4, 4, 3, [5, 6, 7]
    pool, rows = support.layout_rows(seq, page, topk, steps, seed=3)
    support.fill_random(pool, 3)
    start = support.snapshot(pool)
    prefix_base, last_page, nnp = support.draft_args(seq, page, steps)
    with support.observe() as (probe, launches):
        draft_step.duplication_hook(Mode.FAKE)(SGLANG_FN, pool, rows, prefix_base, last_page, nnp, topk, page)
    assert_same(start, support.snapshot(pool))
    assert launches == [] and probe.reads == []
    with pytest.raises(ValueError):
        draft_step.duplication_hook(Mode.OFF)


def test_topk_one_does_nothing_like_sglang():
    page, seq = 4, [5]
    pool, rows = support.layout_rows(seq, page, 2, 2, seed=4)
    prefix_base, last_page, nnp = support.draft_args(seq, page, 2)
    with support.observe() as (probe, launches):
        assert OURS(SGLANG_FN, pool, rows, prefix_base, last_page, nnp, 1, page) is None
    assert launches == [] and pools.copy_table(pool) is not None


def test_a_backend_that_never_reads_the_copy_gets_no_copy_and_no_launch(monkeypatch):
    page, topk, steps, seq = 4, 4, 3, [5, 6, 7]
    pool, rows = support.layout_rows(seq, page, topk, steps, seed=5)
    support.fill_random(pool, 5)
    start = support.snapshot(pool)
    prefix_base, last_page, nnp = support.draft_args(seq, page, steps)
    from sglang.srt.layers.attention import flashinfer_backend as fib

    runner = SimpleNamespace(draft_attn_backend=object.__new__(fib.FlashInferMultiStepDraftBackend))
    derived = []
    real_derive = draft_plan.derive
    monkeypatch.setattr(draft_plan, "derive", lambda *a: derived.append(1) or real_derive(*a))
    draft_plan.record(pool, runner)  # the warm-up: decided once per draft runner
    hook = draft_step.duplication_hook(Mode.ON)
    with support.observe() as (probe, launches):
        for _ in range(3):
            hook(SGLANG_FN, pool, rows, prefix_base, last_page, nnp, topk, page)
    assert_same(start, support.snapshot(pool))
    assert launches == [] and probe.reads == [] and derived == [1]  # no draft step decided it again
    runner.draft_attn_backend = object.__new__(fib.FlashInferMultiStepDraftBackend)  # SGLang swapped it
    hook(SGLANG_FN, pool, rows, prefix_base, last_page, nnp, topk, page)
    assert derived == [1, 1]


def test_the_plan_follows_buffers_sglang_re_creates():
    """SGLang re-creates the pool's K/V buffers with its own ``_create_buffers`` (as its constructor
    does): the next draft step derives the runner's plan again and copies into the new buffers,
    exactly as SGLang's function does; the plan is the one attribute of ours on the pool."""
    from sglang_eagle_paged.adapters.v2 import warm_up

    page, topk, steps, seq = 4, 3, 2, [5, 6, 7]
    pool, rows = support.layout_rows(seq, page, topk, steps, seed=21)
    args = support.draft_args(seq, page, steps)
    runner = SimpleNamespace(token_to_kv_pool=pool, req_to_token_pool=SimpleNamespace(req_to_token=rows))
    warm_up.after_hook(None, SimpleNamespace(topk=topk, draft_runner=runner))
    old = draft_plan.current(pool)
    kept = list(pool.k_buffer) + list(pool.v_buffer)  # alive, so a stale table could only write into them
    pool._create_buffers()
    assert not any(b is k for b, k in zip(pool.k_buffer, kept))
    support.fill_random(pool, 21)
    start = support.snapshot(pool)
    SGLANG_FN(pool, rows, *args, topk, page)
    theirs = support.snapshot(pool)
    support.restore(pool, start)
    OURS(SGLANG_FN, pool, rows, *args, topk, page)
    assert_same(theirs, support.snapshot(pool))
    assert draft_plan.current(pool) is not old and draft_plan.current(pool).copy == draft_plan.OURS
    assert [k for k in vars(pool) if "eagle_paged" in k] == [draft_plan._ATTR]
    del kept
