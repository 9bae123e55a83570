"""The v2 prefix-tail duplication kernel against its plain-torch reference: every branch's first-page
holes get the prefix tail's KV, nothing else changes, one compiled variant for every batch."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import random  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.interpreter_order import capture_specializations, program_order  # noqa: E402
from sglang_eagle_paged.kernels.duplicate import KVBufferTable  # noqa: E402
from sglang_eagle_paged.kernels.prefix_tail import (  # noqa: E402
    _duplicate_prefix_tail_kernel, compile_prefix_tail, duplicate_prefix_tail, duplicate_prefix_tail_reference,
    tail_pairs, tail_pairs_reference)

torch.set_num_threads(1)


def draft_args(seq_lens, page, steps, dtype=torch.int64):
    """(prefix_base, last_page, num_new_pages) as SGLang's prepare_for_draft computes them."""
    seq = torch.tensor(seq_lens, dtype=dtype)
    last = seq % page
    return seq - last, last, (last + steps + page - 1) // page


def layout(seq_lens, page, topk, steps, seed, slot_dtype=torch.int32, spare_cols=0):
    """Rows of distinct random slots, wide enough for every branch's pages (plus ``spare_cols``)."""
    base, last, nnp = draft_args(seq_lens, page, steps)
    width = int((base + topk * nnp * page).max()) + spare_cols
    slots = len(seq_lens) * width + 1  # slot 0 stays the padding slot, as in SGLang's pools
    g = torch.Generator().manual_seed(seed)
    rows = (torch.randperm(slots - 1, generator=g) + 1).view(len(seq_lens), width).to(slot_dtype)
    return rows, slots


def buffers_for(slots, seed, shapes=((1, 8),), dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in shapes:
        for _ in range(2):  # K and V
            b = torch.empty((slots, *s), dtype=dtype)
            b.view(torch.uint8).copy_(torch.randint(0, 256, b.view(torch.uint8).shape, dtype=torch.uint8, generator=g))
            out.append(b)
    return out


def as_bytes(bufs):
    return [b.view(torch.uint8).reshape(b.shape[0], -1).clone() for b in bufs]


def kernel_and_reference(bufs, rows, args, topk, page):
    """(start, kernel's result, reference's result), each as bytes per buffer."""
    start = as_bytes(bufs)
    ref = [b.clone() for b in bufs]
    duplicate_prefix_tail_reference(ref, rows, *args, topk, page)
    duplicate_prefix_tail(KVBufferTable.from_buffers(bufs), rows, *args, topk, page)
    return start, as_bytes(bufs), as_bytes(ref)


def _cases():
    # Interpreter-sized: few requests, one or two layers, short rows; pages 2..256, topk 1..10,
    # steps 1..8, page-aligned and one-token prefixes in every batch that can hold them.
    rng = random.Random(34)
    out = []
    for i, page in enumerate([2, 3, 7, 16, 64, 128, 256]):
        topk = [1, 10, rng.randint(2, 10), rng.randint(2, 10), rng.randint(2, 6), rng.randint(2, 4), 10][i]
        steps = [8, 1, rng.randint(1, 8), rng.randint(1, 8), rng.randint(1, 8), rng.randint(1, 8), 8][i]
        seq = [page * rng.randint(1, 3), 1] + [rng.randint(2, 4 * page) for _ in range(rng.randint(0, 2))]
        rng.shuffle(seq)
        out.append(pytest.param(page, topk, steps, seq, [torch.int32, torch.int64][i % 2], id=f"p{page}-k{topk}-s{steps}"))
    return out


@pytest.mark.parametrize("page,topk,steps,seq,slot_dtype", _cases())
def test_random_batches_equal_the_torch_reference(page, topk, steps, seq, slot_dtype):
    rows, slots = layout(seq, page, topk, steps, seed=page + topk, slot_dtype=slot_dtype)
    bufs = buffers_for(slots, seed=page)
    args = draft_args(seq, page, steps)
    start, ours, ref = kernel_and_reference(bufs, rows, args, topk, page)
    assert all(torch.equal(a, b) for a, b in zip(ours, ref))
    tgt, src = tail_pairs_reference(rows, *args, topk, page)
    assert bool(tgt) == (topk > 1)  # every batch holds a one-token prefix: something to copy unless topk is 1
    for a, b in zip(ours, start):
        assert torch.equal(a[tgt], b[src])                      # each branch's holes hold the prefix tail
        untouched = torch.ones(a.shape[0], dtype=torch.bool)
        untouched[tgt] = False
        assert torch.equal(a[untouched], b[untouched])           # and nothing else moved


def test_reference_pairs_are_sglangs_order():
    page, topk, steps, seq = 4, 3, 5, [7, 4, 1]
    rows, _ = layout(seq, page, topk, steps, seed=1)
    args = draft_args(seq, page, steps)
    tgt, src = tail_pairs(rows, *args, topk, page)
    live = tgt >= 0
    assert torch.equal(live, src >= 0) and tgt.numel() == len(seq) * (topk - 1) * (page - 1)
    assert (tgt[live].tolist(), src[live].tolist()) == tail_pairs_reference(rows, *args, topk, page)


def test_mixed_row_widths_and_a_row_longer_than_one_tile():
    # fp16 rows of 5 x 129 (645 two-byte lanes: two 512-lane tiles) next to narrow ones
    page, topk, steps, seq = 8, 4, 2, [5, 13, 1]
    rows, slots = layout(seq, page, topk, steps, seed=2)
    bufs = buffers_for(slots, seed=2, shapes=((5, 129), (1, 3)), dtype=torch.float16)
    table = KVBufferTable.from_buffers(bufs)
    assert (table.elem_bytes, table.row_elems_max) == (2, 645)
    _, ours, ref = kernel_and_reference(bufs, rows, draft_args(seq, page, steps), topk, page)
    assert all(torch.equal(a, b) for a, b in zip(ours, ref))


def test_strided_rows_and_positions():
    """A slice of a wider req_to_token and positions read through strides, as views can hand them."""
    page, topk, steps, seq = 8, 3, 4, [9, 3, 16, 7]
    rows, slots = layout(seq, page, topk, steps, seed=3, spare_cols=5)
    wide = torch.zeros((len(seq) * 2, rows.shape[1] + 7), dtype=rows.dtype)
    wide[::2, : rows.shape[1]] = rows
    view = wide[::2, : rows.shape[1]]
    args = tuple(torch.stack([a.to(torch.int32), torch.full((len(seq),), 99, dtype=torch.int32)], 1)[:, 0]
                 for a in draft_args(seq, page, steps))
    assert view.stride(0) != view.shape[1] and all(a.stride(0) == 2 for a in args)
    bufs = buffers_for(slots, seed=3)
    _, ours, ref = kernel_and_reference(bufs, view, args, topk, page)
    assert all(torch.equal(a, b) for a, b in zip(ours, ref))


def test_a_position_past_the_row_reads_and_writes_nothing_outside_it():
    # Branch 2's first page lies past rows cut short: the kernel must not follow the memory after
    # row 0 (row 1's first slots) nor after the tensor; branch 1 still gets its copy.
    page, topk, steps, seq = 4, 3, 2, [5, 6]
    full, slots = layout(seq, page, topk, steps, seed=4)
    base, last, nnp = draft_args(seq, page, steps)
    cut = int(base[0] + 2 * nnp[0] * page)  # row 0's branch 2 starts here
    rows = full[:, :cut].contiguous()
    bufs = buffers_for(slots, seed=4)
    start = as_bytes(bufs)
    duplicate_prefix_tail(KVBufferTable.from_buffers(bufs), rows, base, last, nnp, topk, page)
    ours = as_bytes(bufs)
    copied_to = {int(rows[0, base[0] + nnp[0] * page + o]) for o in range(int(last[0]))}
    changed = {int(s) for a, b in zip(ours, start) for s in (a != b).any(1).nonzero().flatten()}
    assert copied_to <= changed
    assert not changed & {int(rows[1, o]) for o in range(int(last[0]))}  # what lies past row 0


@pytest.mark.parametrize("order", ["reversed", "shuffled"])
def test_program_order_does_not_matter(order):
    page, topk, steps, seq = 16, 5, 3, [17, 31, 1]
    rows, slots = layout(seq, page, topk, steps, seed=5)
    bufs = buffers_for(slots, seed=5)
    with program_order(order, seed=5) as launches:
        _, ours, ref = kernel_and_reference(bufs, rows, draft_args(seq, page, steps), topk, page)
    assert len(launches) == 1 and launches[0] != sorted(launches[0])
    assert all(torch.equal(a, b) for a, b in zip(ours, ref))


def test_one_variant_for_every_batch_topk_and_page():
    """Batch size, topk and page size are runtime arguments: the warm-up's launch compiles what serving runs."""
    _, slots = layout([64], 64, 10, 8, seed=0)
    bufs = buffers_for(slots, seed=6)  # the table holds only their addresses: keep them alive
    table = KVBufferTable.from_buffers(bufs)
    with capture_specializations(_duplicate_prefix_tail_kernel) as specs:
        compile_prefix_tail(table, torch.int32)
        for seq, page, topk, steps in (([1], 2, 2, 1), ([5, 8, 13], 8, 4, 3), ([63, 1], 64, 10, 8), ([3] * 6, 4, 7, 2)):
            rows, _ = layout(seq, page, topk, steps, seed=len(seq))
            duplicate_prefix_tail(table, rows.clamp_max(slots - 1), *draft_args(seq, page, steps), topk, page)
        rows64, _ = layout([5], 8, 3, 2, seed=7, slot_dtype=torch.int64)
        duplicate_prefix_tail(table, rows64, *draft_args([5], 8, 2), 3, 8)
    assert len(specs) == 6
    assert all(s == specs[0] for s in specs[:5]), specs
    assert specs[5] != specs[0]  # the slot dtype does count: the warm-up compiles the rows' own


def test_warm_up_launch_copies_nothing():
    bufs = buffers_for(16, seed=8)
    start = as_bytes(bufs)
    compile_prefix_tail(KVBufferTable.from_buffers(bufs), torch.int64)
    assert all(torch.equal(a, b) for a, b in zip(as_bytes(bufs), start))


def test_nothing_to_launch():
    bufs = buffers_for(16, seed=9)
    table = KVBufferTable.from_buffers(bufs)
    rows = torch.arange(16, dtype=torch.int32).view(1, 16)
    args = draft_args([5], 4, 2)
    with capture_specializations(_duplicate_prefix_tail_kernel) as specs:
        duplicate_prefix_tail(table, rows, *args, 1, 4)              # topk 1: no other branch
        duplicate_prefix_tail(table, rows, *draft_args([5], 1, 2), 4, 1)  # page 1: no partial page
        duplicate_prefix_tail(table, rows[:0], *(a[:0] for a in args), 4, 4)  # empty batch
    assert specs == []
