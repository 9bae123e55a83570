"""The Triton "expand" metadata kernel against SGLang's own function and a torch reference.

SGLang's ``draft_decode_set_expand_metadata`` is a ``torch.compile`` wrapper; the
comparisons call the undecorated function eagerly (on the CPU), so they check
the semantics of the source, not of a compiled artefact.
"""

import random
import sys
from pathlib import Path

import pytest
import torch

from helpers.interpreter_order import capture_specializations  # noqa: E402
from helpers.sglang_source import undecorated  # noqa: E402

from sglang_eagle_paged.adapters.common import fa3_metadata  # noqa: E402
from sglang_eagle_paged.kernels.expand_metadata import (  # noqa: E402
    _expand_draft_page_table_kernel,
    expand_draft_page_table,
    expand_draft_page_table_reference,
)

SENTINEL = -12345
BACKEND = "sglang.srt.layers.attention.flashattention_backend"


def _sglang_eager():
    """SGLang's function without torch.compile, or (None, reason)."""
    try:
        import importlib

        mod = importlib.import_module(BACKEND)
    except Exception as e:  # pragma: no cover - depends on the environment
        return None, f"cannot import {BACKEND}: {type(e).__name__}: {e}"
    fn = getattr(mod, "draft_decode_set_expand_metadata", None)
    if fn is None:
        return None, f"{BACKEND} has no draft_decode_set_expand_metadata"
    # The compile wrapper (or a hook wrapper around it) leads back to the source function.
    try:
        return undecorated(fn, "draft_decode_set_expand_metadata"), None
    except LookupError:
        return None, ("neither _torchdynamo_orig_callable nor __wrapped__ leads to the undecorated "
                      "draft_decode_set_expand_metadata")


SGLANG_FN, SGLANG_SKIP = _sglang_eager()
needs_sglang = pytest.mark.skipif(SGLANG_FN is None, reason=f"SGLang's function: {SGLANG_SKIP}")


# ---------------------------------------------------------------- case builders

def realistic_case(rng, bs, topk, page_size, steps, dtype=torch.int64):
    """Draft slots as SGLang's paged tree drafting lays them out: each branch owns
    whole pages starting at a page-aligned address; its drafts start last_page_len
    into the first one (the copied prefix tail fills the head)."""
    seq_lens = torch.tensor([rng.randint(1, 300) for _ in range(bs)])
    last_page_lens = seq_lens % page_size
    pages_per_branch = (page_size - 1 + steps + page_size - 1) // page_size
    free_pages = rng.sample(range(1, 4 * bs * topk * pages_per_branch + 8), bs * topk)
    rows = []
    for i in range(bs):
        lpl = int(last_page_lens[i])
        for b in range(topk):
            start = free_pages[i * topk + b] * page_size
            rows.append([start + lpl + s for s in range(steps)])
    return last_page_lens, torch.tensor(rows, dtype=dtype).view(bs * topk, steps)


def adversarial_case(rng, bs, topk, page_size, steps, negative=False):
    """Random, non-monotonic slots, with runs of equal pages and pages that come back."""
    last_page_lens = torch.tensor([rng.randrange(page_size) for _ in range(bs)])
    lo = -3 * page_size if negative else 0
    vals = []
    for _ in range(bs * topk * steps):
        if vals and rng.random() < 0.4:
            vals.append(vals[-1] + rng.choice((0, 1, -1)))  # often the same page
        else:
            vals.append(rng.randint(lo, 6 * page_size))
    return last_page_lens, torch.tensor(vals, dtype=torch.int64).view(bs * topk, steps)


def outputs(n_lens, rows, cols, cs_dtype=torch.int32, layout="contiguous"):
    """Sentinel-filled outputs; ``page_table`` possibly a non-contiguous view. Returns
    (cache_seqlens, page_table, backing storage of page_table to check outside the view)."""
    cs = torch.full((n_lens,), SENTINEL, dtype=cs_dtype)
    if layout == "contiguous":
        big = torch.full((rows, cols), SENTINEL, dtype=torch.int32)
        pt = big
    elif layout == "column_slice":  # wider buffer, a column window of it
        big = torch.full((rows + 2, cols + 5), SENTINEL, dtype=torch.int32)
        pt = big[:rows, 2:2 + cols]
    elif layout == "transposed":  # column-major
        big = torch.full((cols, rows), SENTINEL, dtype=torch.int32)
        pt = big.t()
    else:
        raise ValueError(layout)
    return cs, pt, big


IMPLS = [("kernel", expand_draft_page_table), ("reference", expand_draft_page_table_reference)]


def run_all(args_builder, with_sglang=True):
    """Run every implementation on fresh copies of the outputs; return {name: (cs, big)}."""
    impls = list(IMPLS)
    if with_sglang and SGLANG_FN is not None:
        impls.append(("sglang", SGLANG_FN))
    results = {}
    for name, fn in impls:
        cs, pt, big, kwargs = args_builder()
        fn(cache_seqlens_int32=cs, page_table=pt, **kwargs)
        results[name] = (cs.clone(), big.clone())
    return results


def assert_all_equal(results, ctx):
    names = list(results)
    base_cs, base_big = results[names[0]]
    for n in names[1:]:
        cs, big = results[n]
        assert torch.equal(cs, base_cs), (ctx, n, names[0], cs, base_cs)
        assert torch.equal(big, base_big), (ctx, n, names[0], big, base_big)


def _layouts(seed_count=60):
    rng = random.Random(1234)
    for i in range(seed_count):
        bs = rng.randint(1, 20)
        topk = rng.randint(1, 8)
        page_size = rng.choice((1, 2, 16, 64))
        steps = rng.randint(1, 6)
        decode_length = rng.randint(1, steps)
        yield i, bs, topk, page_size, steps, decode_length


# ---------------------------------------------------------------- 1. realistic layouts

@pytest.mark.parametrize("layout", ["contiguous", "column_slice", "transposed"])
def test_realistic_layouts_match(layout):
    rng = random.Random({"contiguous": 1, "column_slice": 2, "transposed": 3}[layout])
    for i, bs, topk, page_size, steps, decode_length in _layouts(40):
        lpl, cache_loc = realistic_case(rng, bs, topk, page_size, steps)
        n = bs * topk
        extra_rows = rng.randint(0, 3)  # rows past num_seqs stay untouched
        extra_cols = rng.randint(0, 3)

        def build():
            cs, pt, big = outputs(n, n + extra_rows, steps + extra_cols, layout=layout)
            return cs, pt, big, dict(last_page_lens=lpl, decode_length=decode_length,
                                     cache_loc=cache_loc, topk=topk, page_size=page_size)

        res = run_all(build)
        assert_all_equal(res, (layout, i, bs, topk, page_size, steps, decode_length))
        cs, big = res["kernel"]
        # the part the semantics pin down, stated independently
        assert cs.tolist() == [decode_length + int(lpl[r // topk]) for r in range(n)]
        assert (big == SENTINEL).sum() > 0 or (extra_rows == 0 and extra_cols == 0 and layout == "contiguous")


def test_realistic_page_ids_repeat_and_change():
    """The builder really produces repeated pages and page changes (not vacuous)."""
    rng = random.Random(7)
    lpl, cache_loc = realistic_case(rng, 6, 4, 2, 6)
    pages = cache_loc // 2
    assert (pages[:, 1:] == pages[:, :-1]).any()
    assert (pages[:, 1:] != pages[:, :-1]).any()
    cs, pt, big = outputs(24, 24, 6)
    expand_draft_page_table(cs, pt, lpl, 3, cache_loc, 4, 2)
    written = (pt != SENTINEL).sum(dim=1)
    assert (written < 6).any() and (written > 1).all()


def test_replay_width_page_table():
    """The CUDA-graph path's table has decode_length + 1 columns (here enough, page >= steps)."""
    rng = random.Random(11)
    for bs, topk, steps in ((3, 4, 5), (17, 8, 6), (1, 2, 1)):
        for decode_length in range(1, steps + 1):
            lpl, cache_loc = realistic_case(rng, bs, topk, 16, steps)

            def build():
                cs, pt, big = outputs(bs * topk, bs * topk, decode_length + 1)
                return cs, pt, big, dict(last_page_lens=lpl, decode_length=decode_length,
                                         cache_loc=cache_loc, topk=topk, page_size=16)

            assert_all_equal(run_all(build), (bs, topk, steps, decode_length))


# ---------------------------------------------------------------- 2. adversarial inputs

@pytest.mark.parametrize("negative", [False, True])
def test_adversarial_cache_loc_matches(negative):
    rng = random.Random(99 + negative)
    for i, bs, topk, page_size, steps, decode_length in _layouts(40):
        lpl, cache_loc = adversarial_case(rng, bs, topk, page_size, steps, negative=negative)
        n = bs * topk
        layout = rng.choice(["contiguous", "column_slice", "transposed"])

        def build():
            cs, pt, big = outputs(n, n + 1, steps + 1, layout=layout)
            return cs, pt, big, dict(last_page_lens=lpl, decode_length=decode_length,
                                     cache_loc=cache_loc, topk=topk, page_size=page_size)

        assert_all_equal(run_all(build), ("adv", negative, i, bs, topk, page_size, steps))


def test_floor_division_of_negative_slots():
    lpl = torch.tensor([0])
    cache_loc = torch.tensor([[-1, -4, -5, 3, 4]])
    cs, pt, _ = outputs(1, 1, 5)
    expand_draft_page_table(cs, pt, lpl, 1, cache_loc, 1, 4)
    assert pt.tolist() == [[-1, -2, 0, 1, SENTINEL]]


@pytest.mark.parametrize("page_size", [1, 2, 16, 64])
def test_one_dimensional_cache_loc(page_size):
    rng = random.Random(page_size)
    for steps in range(1, 7):
        lpl, cache_loc = realistic_case(rng, 1, 1, page_size, steps)
        cache_loc = cache_loc.view(-1)  # 1-D: one row

        def build():
            cs, pt, big = outputs(1, 3, steps + 2)
            return cs, pt, big, dict(last_page_lens=lpl, decode_length=steps, cache_loc=cache_loc,
                                     topk=1, page_size=page_size)

        res = run_all(build)
        assert_all_equal(res, ("1d", page_size, steps))
        big = res["kernel"][1]
        assert (big[1:] == SENTINEL).all()


def test_non_contiguous_inputs_and_int32_dtypes():
    rng = random.Random(5)
    bs, topk, page_size, steps = 7, 3, 2, 5
    lpl, cache_loc = adversarial_case(rng, bs, topk, page_size, steps)
    wide = torch.full((bs * topk, steps + 3), 10**6, dtype=torch.int64)
    wide[:, 1:1 + steps] = cache_loc
    cl_view = wide[:, 1:1 + steps]  # non-contiguous cache_loc
    lpl_view = torch.stack([lpl, lpl + 100], dim=1)[:, 0].to(torch.int32)  # strided, int32
    cs_store = torch.full((2 * bs * topk,), SENTINEL, dtype=torch.int32)
    for cl in (cl_view, cl_view.to(torch.int32)):
        results = {}
        impls = list(IMPLS) + ([("sglang", SGLANG_FN)] if SGLANG_FN else [])
        for name, fn in impls:
            cs_store.fill_(SENTINEL)
            cs = cs_store[::2]  # strided cache_seqlens
            big = torch.full((bs * topk, steps), SENTINEL, dtype=torch.int32)
            fn(cs, big, lpl_view, 4, cl, topk, page_size)
            results[name] = (cs_store.clone(), big.clone())
        assert_all_equal(results, ("non-contiguous", cl.dtype))
        assert (results["kernel"][0][1::2] == SENTINEL).all()


def test_rows_of_cache_loc_differ_from_bs_topk():
    """cache_seqlens covers bs * topk rows, the page table cache_loc's rows, independently."""
    rng = random.Random(3)
    for rows in (2, 12, 20):  # fewer, equal, more than bs * topk = 12
        lpl = torch.tensor([1, 5, 0])
        cache_loc = torch.randint(0, 200, (rows, 4), generator=torch.Generator().manual_seed(rows))

        def build():
            cs, pt, big = outputs(12, 22, 6)
            return cs, pt, big, dict(last_page_lens=lpl, decode_length=2, cache_loc=cache_loc,
                                     topk=4, page_size=16)

        res = run_all(build)
        assert_all_equal(res, ("rows", rows))
        big = res["kernel"][1]
        assert (big[rows:] == SENTINEL).all() and not (big[:rows, 0] == SENTINEL).any()
    del rng


def test_single_value_broadcasts_like_copy():
    """bs * topk == 1 and a longer cache_seqlens: torch's copy_ broadcasts the one value."""
    def build():
        cs, pt, big = outputs(5, 1, 2)
        return cs, pt, big, dict(last_page_lens=torch.tensor([3]), decode_length=2,
                                 cache_loc=torch.tensor([[64, 65]]), topk=1, page_size=64)

    res = run_all(build)
    assert_all_equal(res, "broadcast")
    assert res["kernel"][0].tolist() == [5] * 5


def test_empty_batch_writes_nothing():
    cs, pt, big = outputs(0, 2, 3)
    expand_draft_page_table(cs, pt, torch.zeros(0, dtype=torch.int64), 1,
                            torch.zeros(0, 3, dtype=torch.int64), 4, 16)
    assert (big == SENTINEL).all()


# ---------------------------------------------------------------- 3. inputs torch rejects

@pytest.mark.parametrize("case", ["too_few_rows", "seqlens_mismatch", "int64_table"])
def test_rejects_what_torch_rejects(case):
    lpl = torch.tensor([1, 2])
    cache_loc = torch.arange(2 * 4 * 3).view(8, 3)
    cs = torch.zeros(8, dtype=torch.int32)
    pt = torch.zeros(8, 3, dtype=torch.int32)
    if case == "too_few_rows":
        pt = torch.zeros(5, 3, dtype=torch.int32)
    elif case == "seqlens_mismatch":
        cs = torch.zeros(6, dtype=torch.int32)
    else:
        pt = torch.zeros(8, 3, dtype=torch.int64)
    if SGLANG_FN is not None:
        with pytest.raises(Exception):
            SGLANG_FN(cs.clone(), pt.clone(), lpl, 1, cache_loc, 4, 2)
    with pytest.raises((ValueError, TypeError, RuntimeError)):
        expand_draft_page_table(cs, pt, lpl, 1, cache_loc, 4, 2)


def test_too_narrow_table_is_clipped_not_overrun():
    """The one documented divergence: torch raises, the kernel keeps what fits and never
    writes outside the table (here a column window of a larger buffer)."""
    lpl = torch.tensor([1])
    cache_loc = torch.tensor([[1, 2, 3, 4, 5]])  # page 2: pages 0,1,1,2,2 -> 3 distinct
    if SGLANG_FN is not None:
        with pytest.raises(Exception):
            SGLANG_FN(torch.zeros(1, dtype=torch.int32), torch.zeros(1, 2, dtype=torch.int32),
                      lpl, 1, cache_loc, 1, 2)
    with pytest.raises(IndexError):
        expand_draft_page_table_reference(torch.zeros(1, dtype=torch.int32),
                                          torch.zeros(1, 2, dtype=torch.int32), lpl, 1, cache_loc, 1, 2)
    cs, pt, big = outputs(1, 1, 2, layout="column_slice")
    expand_draft_page_table(cs, pt, lpl, 1, cache_loc, 1, 2)
    assert pt.tolist() == [[0, 1]]
    assert (big == SENTINEL).sum() == big.numel() - 2


# ---------------------------------------------------------------- 4. one compiled kernel

def _launch(bs, topk=4, page_size=64, steps=5, decode_length=2, cols=None, seed=0):
    rng = random.Random(seed)
    lpl, cache_loc = realistic_case(rng, bs, topk, page_size, steps)
    cs, pt, _ = outputs(bs * topk, bs * topk, cols or steps)
    expand_draft_page_table(cs, pt, lpl, decode_length, cache_loc, topk, page_size)


def test_one_specialization_across_batches():
    """Batch size, decode_length, contents and (replay) table width: one compiled kernel."""
    launches = [dict(bs=bs, decode_length=d, seed=bs) for bs, d in
                ((1, 1), (2, 2), (3, 3), (5, 1), (8, 4), (13, 5), (16, 2), (20, 1))]
    launches += [dict(bs=4, cols=c) for c in (2, 3, 16)]
    with capture_specializations(_expand_draft_page_table_kernel) as specs:
        for kw in launches:
            _launch(**kw)
    assert len(specs) == len(launches)
    assert all(s == specs[0] for s in specs[1:]), specs


def test_specialization_capture_sees_config_changes():
    """The capture is not vacuous: a different configuration is a different kernel."""
    with capture_specializations(_expand_draft_page_table_kernel) as specs:
        _launch(bs=3, topk=4)
        _launch(bs=3, topk=8)
        _launch(bs=3, page_size=16)
        _launch(bs=3, steps=3)
    assert len(specs) == 4 and len(set(specs)) == 4


# ---------------------------------------------------------------- 5. glue

# The switch's parsing (default, values, typos): tests/test_fa3_draft_metadata.py::test_selection*


def test_replacement_signature_matches_sglang():
    import inspect

    if SGLANG_FN is None:
        pytest.skip(SGLANG_SKIP)
    want = list(inspect.signature(SGLANG_FN).parameters)
    assert list(inspect.signature(fa3_metadata.expand_metadata_replacement).parameters) == want
    assert list(inspect.signature(expand_draft_page_table).parameters) == want
    assert fa3_metadata.TARGET == f"{BACKEND}.draft_decode_set_expand_metadata"


@needs_sglang
def test_replace_hook_reaches_the_backend_global(monkeypatch):
    """Through SGLang's HookRegistry: the backend's module global becomes a wrapper that
    calls the replacement with the backend's keyword arguments."""
    import importlib
    from collections import defaultdict

    from sglang.srt.plugins.hook_registry import HookRegistry

    mod = importlib.import_module(BACKEND)
    original = mod.draft_decode_set_expand_metadata
    # isolated registry state; the module attribute restored afterwards
    monkeypatch.setattr(HookRegistry, "_hooks", defaultdict(list))
    monkeypatch.setattr(HookRegistry, "_patched", set())
    monkeypatch.setattr(mod, "draft_decode_set_expand_metadata", original)
    calls = []
    real = fa3_metadata.expand_draft_page_table
    monkeypatch.setattr(fa3_metadata, "expand_draft_page_table",
                        lambda *a, **k: (calls.append(a), real(*a, **k)))
    from sglang_eagle_paged.hooks import install
    from sglang_eagle_paged.settings import FA3Expand

    patched = None
    try:
        assert install(fa3_metadata.hooks(FA3Expand.EXPAND, required=True), "test") == [fa3_metadata.TARGET]
        patched = mod.draft_decode_set_expand_metadata
        assert patched is not original and patched.__wrapped__ is original
        assert fa3_metadata.TARGET in HookRegistry._patched
        lpl, cache_loc = realistic_case(random.Random(0), 2, 3, 16, 4)
        cs, pt, _ = outputs(6, 6, 4)
        patched(cache_seqlens_int32=cs, page_table=pt, last_page_lens=lpl, decode_length=2,
                cache_loc=cache_loc, topk=3, page_size=16)  # as the backend calls it
        assert len(calls) == 1
        cs2, pt2, _ = outputs(6, 6, 4)
        SGLANG_FN(cs2, pt2, lpl, 2, cache_loc, 3, 16)
        assert torch.equal(cs, cs2) and torch.equal(pt, pt2)
    finally:
        if patched is not None and patched is not original:
            for m in list(sys.modules.values()):  # _propagate_patch may have touched importers
                for k, v in list(getattr(m, "__dict__", {}).items()):
                    if v is patched:
                        setattr(m, k, original)


def test_no_hooks_when_off():
    from sglang_eagle_paged.settings import FA3Expand

    assert fa3_metadata.hooks(FA3Expand.OFF, required=True) == []
