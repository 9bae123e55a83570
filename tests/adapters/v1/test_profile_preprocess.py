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
    from sglang_eagle_paged.settings import Mode
    from sglang_eagle_paged.adapters.v1.draft_preprocess import draft_preprocess_decode

    h, worker, batch = pp.bk.preprocess_case(2, 16, 4, 5)
    parts = pp.parts(worker, batch)
    assert list(parts) == ["free_list", "assign", "copy", "positions"]
    free = h.allocator.free_pages
    assert parts["free_list"]() is free  # the free-list path, which the probe is about
    layout = parts["assign"]()
    assert h.allocator.free_pages is free  # nothing allocated
    draft_preprocess_decode(worker, batch, Mode.ON)
    # The whole call assigns from the same free-list slots, so the same out_cache_loc.
    assert torch.equal(batch.out_cache_loc, layout.out_cache_loc)
    parts["copy"]()
    assert torch.equal(parts["positions"](), batch.spec_info.positions)
