"""The per-token FA3 draft-decode metadata kernel against its plain-torch reference (under
TRITON_INTERPRET). The comparison with SGLang's own builders followed by our rewrite, on SGLang's
real backend objects, is tests/adapters/v2/test_fa3_dense.py."""

import random

import pytest
import torch

from sglang_eagle_paged.kernels.draft_decode_metadata import DraftStep, DraftStepTable
from sglang_eagle_paged.kernels.per_token_draft_metadata import (
    per_token_draft_metadata_all_steps,
    per_token_draft_metadata_reference,
)


def _case(rng, page, topk, steps, bs, rows, gen, max_ctx, seq_dtype):
    """Noise-filled outputs of ``steps - 1`` draft steps (so any cell written that should not be shows),
    the batch's inputs (``rows`` <= bs * topk rows of ``cache_loc``: 0.5.17's padded replay)."""
    pool = 6
    i32 = dict(dtype=torch.int32)
    out = []
    for step in range(steps - 1):
        d = step + 1
        out.append(DraftStep(
            torch.randint(-9, 10_000, (bs,), generator=gen, **i32),
            torch.randint(-9, 10_000, (bs, max_ctx // page + 1), generator=gen, **i32),
            torch.randint(-9, 10_000, (bs * topk,), generator=gen, **i32),
            torch.randint(-9, 10_000, (bs * topk, rng.choice((d + 1, steps))), generator=gen, **i32),
            torch.arange(0, max_ctx, page), d))
    seq_lens = torch.tensor([rng.randint(0, max_ctx - topk * steps) for _ in range(bs)], dtype=seq_dtype)
    rpi = torch.tensor(rng.sample(range(pool), bs), dtype=torch.int64)
    r2t = torch.randint(0, 1 << 20, (pool, max_ctx), generator=gen, dtype=torch.int32)
    cache_loc = torch.randint(1, 1 << 20, (rows, steps), generator=gen, dtype=torch.int64)
    max_seq_pages = (max(int(seq_lens.max()), 1) + page - 1) // page
    return out, seq_lens, rpi, r2t, max_seq_pages, cache_loc


def _clone(steps):
    return [DraftStep(*(t.clone() for t in s[:4]), s.strided_indices, s.decode_length) for s in steps]


@pytest.mark.parametrize("page", [2, 4, 16, 64, 128, 256])
def test_kernel_writes_what_the_reference_writes(page):
    rng = random.Random(page)
    gen = torch.Generator().manual_seed(page)
    for c in range(4):
        topk, steps, bs = rng.randint(2, 8), rng.randint(2, 6), rng.randint(1, 4)
        rows = bs * topk if c % 2 == 0 else rng.randint(topk, bs * topk)  # padded: the batch's own rows
        ref, seq_lens, rpi, r2t, max_seq_pages, cache_loc = _case(
            rng, page, topk, steps, bs, rows, gen, page * rng.randint(2, 6) + topk * steps,
            (torch.int64, torch.int32)[c % 2])
        got = _clone(ref)
        per_token_draft_metadata_reference(ref, seq_lens, rpi, r2t, max_seq_pages, cache_loc, topk, page)
        per_token_draft_metadata_all_steps(DraftStepTable.from_steps(got), seq_lens, rpi, r2t, max_seq_pages,
                                           cache_loc, topk, page)
        for i, (a, b) in enumerate(zip(ref, got)):
            for name, x, y in zip(DraftStep._fields[:4], a[:4], b[:4]):
                assert torch.equal(x, y), f"case {c} step {i} {name}"
        # not vacuous: every step's expand rows are the slots, padding rows slot 0
        last = got[-1]
        assert torch.equal(last.expand_page_table[:rows, :last.decode_length],
                           cache_loc[:rows, :last.decode_length].to(torch.int32))
        assert (last.expand_page_table[rows:, :last.decode_length] == 0).all()


def test_a_step_wider_than_its_slots_is_refused_as_the_rewrite_refuses_it():
    gen = torch.Generator().manual_seed(0)
    steps, _, _, _, _, _ = _case(random.Random(0), 4, 2, 3, 1, 2, gen, 32, torch.int64)
    bad = [steps[0]._replace(decode_length=4)]
    with pytest.raises(RuntimeError, match="does not fit"):
        per_token_draft_metadata_all_steps(DraftStepTable.from_steps(bad), torch.ones(1, dtype=torch.int64),
                                           torch.zeros(1, dtype=torch.int64), torch.zeros((6, 32), dtype=torch.int32),
                                           1, torch.zeros((2, 3), dtype=torch.int64), 2, 4)
