"""CPU checks of scripts/profile_preprocess.py: the distribution summary, and that its parts are
the preprocess's own calls on the same inputs (the free-list path, whose launch the whole call makes)."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def pp():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        spec = importlib.util.spec_from_file_location("profile_preprocess", ROOT / "scripts" / "profile_preprocess.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def test_distribution_orders_before_picking(pp):
    d = pp._distribution([5.0, 1.0, 100.0, 2.0, 3.0])
    assert d["n"] == 5 and d["median"] == 3.0 and d["p10"] == 1.0 and d["max"] == 100.0
    assert d["mean"] == pytest.approx(22.2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the tiny CPU shape")
def test_parts_reproduce_the_whole_call(pp):
    """Each profiled part does what the reference implementation says the whole call does: the
    slots and rows of the torch reference, the copy that makes every branch read the prefix."""
    from sglang_eagle_paged.adapters.v1.draft_preprocess import draft_preprocess_decode
    from sglang_eagle_paged.kernels.reference import assign_tree_draft_slots_ref, tree_slots_from_free_pages_ref
    from sglang_eagle_paged.settings import Mode

    h, worker, batch = pp.bk.preprocess_case(2, 16, 4, 5)
    cfg = (worker.page_size, worker.topk, worker.speculative_num_steps)
    parts = pp.parts(worker, batch)
    assert list(parts) == ["free_list", "assign", "copy", "positions"]
    free = h.allocator.free_pages
    assert parts["free_list"]() is free  # the free-list path, which the probe is about
    rows, seq_lens = batch.req_pool_indices, batch.seq_lens
    r2t_ref = batch.req_to_token_pool.req_to_token.clone()
    slots = tree_slots_from_free_pages_ref(r2t_ref, rows, seq_lens, free, *cfg)
    want = assign_tree_draft_slots_ref(rows, r2t_ref, seq_lens, slots, *cfg)
    layout = parts["assign"]()
    assert h.allocator.free_pages is free  # nothing allocated
    for name in ("out_cache_loc", "src_loc", "tgt_loc"):
        assert torch.equal(getattr(layout, name).long(), getattr(want, name).long()), name
    assert torch.equal(batch.req_to_token_pool.req_to_token, r2t_ref)
    parts["copy"]()
    assert h.mismatched_branches(rows.tolist()) == []
    assert torch.equal(parts["positions"](), seq_lens.repeat_interleave(worker.topk))
    draft_preprocess_decode(worker, batch, Mode.ON)
    assert torch.equal(batch.out_cache_loc.long(), want.out_cache_loc.long())


