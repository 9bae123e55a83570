"""The allocator-input kernel against its torch reference and SGLang's own function.

SGLang's ``get_last_loc_large_page_size_large_top_k`` reaches ``get_last_loc``, which
picks its implementation from the global server args' attention backend: a Triton
kernel for page-table backends (what a GPU server runs), torch for ``torch_native``.
Both are compared, the backend set for the call through SGLang's own server-args setter.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import random  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.interpreter_order import capture_specializations  # noqa: E402
from helpers.server_args import global_server_args  # noqa: E402
from sglang_eagle_paged.kernels.reference import tree_extension_ref  # noqa: E402
from sglang_eagle_paged.kernels.tree_extension import (  # noqa: E402
    BLOCK, _tree_extension_kernel, tree_extension)

PAGES = [2, 16, 64, 128]
LARGE = 5000


def sglang_tree_extension(backend, req_to_token, req_pool_indices, seq_lens, page, topk, steps):
    from sglang.srt.speculative.spec_utils import get_last_loc_large_page_size_large_top_k

    with global_server_args(attention_backend=backend):
        _, new_lens, last_loc, _, _, _ = get_last_loc_large_page_size_large_top_k(
            req_to_token, req_pool_indices, seq_lens, steps, topk, page)
    return new_lens, last_loc


def edge_lens(page):
    return [0, 1, page - 1, page, page + 1, 2 * page - 1, LARGE, LARGE + page - 1]


def random_batch(rng, page, bs, seq_dtype=torch.int64, r2t_dtype=torch.int32, rpi_dtype=torch.int64):
    rows = bs + 3
    req_to_token = torch.randint(0, 1 << 20, (rows, LARGE + 2 * page), dtype=r2t_dtype)
    lens = [rng.choice(edge_lens(page) + [rng.randint(0, LARGE)]) for _ in range(bs)]
    req_pool_indices = torch.tensor(rng.sample(range(rows), bs), dtype=rpi_dtype)
    return req_to_token, req_pool_indices, torch.tensor(lens, dtype=seq_dtype)


def assert_same(out, want):
    assert out.seq_lens.dtype == want[0].dtype and out.last_loc.dtype == want[1].dtype
    assert torch.equal(out.seq_lens, want[0]), (out.seq_lens, want[0])
    assert torch.equal(out.last_loc, want[1]), (out.last_loc, want[1])


@pytest.mark.parametrize("page", PAGES)
def test_matches_reference_and_sglang(page):
    rng = random.Random(page)
    for topk in range(1, 11):
        steps = rng.randint(1, 8)
        bs = rng.choice([1, 2, 5, 17])
        batch = random_batch(rng, page, bs)
        out = tree_extension(*batch, page, topk, steps)
        assert_same(out, tree_extension_ref(*batch, page, topk, steps))
        for backend in ("fa3", "torch_native"):
            assert_same(out, sglang_tree_extension(backend, *batch, page, topk, steps))


@pytest.mark.parametrize("steps", range(1, 9))
def test_every_edge_length_at_every_steps(steps):
    """Every edge length in one batch, each page size, topk 1 and 10."""
    for page in PAGES:
        lens = torch.tensor(edge_lens(page))
        bs = lens.numel()
        req_to_token = torch.randint(0, 1 << 20, (bs, LARGE + 2 * page), dtype=torch.int32)
        req_pool_indices = torch.arange(bs - 1, -1, -1)
        for topk in (1, 10):
            batch = (req_to_token, req_pool_indices, lens)
            out = tree_extension(*batch, page, topk, steps)
            assert_same(out, sglang_tree_extension("fa3", *batch, page, topk, steps))
            assert out.last_loc[0] == -1  # prefix 0
            assert torch.equal(out.last_loc[1:], req_to_token[req_pool_indices[1:], lens[1:] - 1].long())


@pytest.mark.parametrize("seq_dtype,r2t_dtype,rpi_dtype", [
    (torch.int64, torch.int32, torch.int64),  # what SGLang's ScheduleBatch and ReqToTokenPool hold
    (torch.int32, torch.int32, torch.int32),
    (torch.int64, torch.int64, torch.int64),
    (torch.int32, torch.int64, torch.int64),
])
def test_dtypes_follow_sglang(seq_dtype, r2t_dtype, rpi_dtype):
    """Both outputs take ``seq_lens``'s dtype, as SGLang's Triton ``get_last_loc`` does (its torch
    fallback promotes to int64 for an int64 ``req_to_token``: values compared there, not dtypes)."""
    rng = random.Random(3)
    batch = random_batch(rng, 16, 9, seq_dtype, r2t_dtype, rpi_dtype)
    out = tree_extension(*batch, 16, 4, 3)
    assert out.seq_lens.dtype == out.last_loc.dtype == seq_dtype
    assert_same(out, sglang_tree_extension("fa3", *batch, 16, 4, 3))
    assert_same(out, tree_extension_ref(*batch, 16, 4, 3))
    theirs = sglang_tree_extension("torch_native", *batch, 16, 4, 3)
    assert torch.equal(out.seq_lens.long(), theirs[0].long()) and torch.equal(out.last_loc.long(), theirs[1].long())


def test_batches_over_one_program():
    rng = random.Random(5)
    for bs in (BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 7):
        batch = random_batch(rng, 64, bs)
        assert_same(tree_extension(*batch, 64, 8, 5), tree_extension_ref(*batch, 64, 8, 5))


def test_strided_inputs():
    rng = random.Random(6)
    r2t, rpi, lens = random_batch(rng, 16, 6)
    wide = torch.zeros(r2t.shape[0], 2 * r2t.shape[1], dtype=r2t.dtype)
    wide[:, ::2] = r2t
    out = tree_extension(wide[:, ::2], rpi.repeat_interleave(2)[::2], lens.repeat_interleave(3)[::3], 16, 4, 3)
    assert_same(out, tree_extension_ref(r2t, rpi, lens, 16, 4, 3))


def test_empty_batch_launches_nothing():
    r2t = torch.zeros(2, 8, dtype=torch.int32)
    for dtype in (torch.int64, torch.int32):
        e = torch.zeros(0, dtype=dtype)
        with capture_specializations(_tree_extension_kernel) as specs:
            out = tree_extension(r2t, e, e, 16, 4, 3)
        assert specs == []
        assert out.seq_lens.shape == out.last_loc.shape == (0,)
        assert out.seq_lens.dtype == out.last_loc.dtype == dtype


@pytest.mark.parametrize("name", ["page_size", "topk", "steps"])
@pytest.mark.parametrize("value", [0, -1, 2.0])
def test_bad_configuration_raises(name, value):
    kwargs = dict(page_size=16, topk=4, steps=3)
    kwargs[name] = value
    with pytest.raises(ValueError, match=name):
        tree_extension(torch.zeros(2, 8, dtype=torch.int32), torch.ones(1), torch.ones(1), **kwargs)


def test_batch_mismatch_raises():
    with pytest.raises(RuntimeError, match="batch mismatch"):
        tree_extension(torch.zeros(2, 8, dtype=torch.int32), torch.ones(2), torch.ones(1), 16, 4, 3)


def test_one_specialization_across_batches_and_lengths():
    rng = random.Random(9)
    batches = []
    for bs in (1, 2, 3, 7, 16, 64, BLOCK + 1):
        r2t, rpi, lens = random_batch(rng, 64, bs)
        batches.append((r2t[:, : rng.randint(LARGE + 1, r2t.shape[1])].contiguous(), rpi, lens))  # row strides vary
    with capture_specializations(_tree_extension_kernel) as specs:
        for batch in batches:
            tree_extension(*batch, 64, 8, 5)
    assert len(specs) == len(batches) and all(s == specs[0] for s in specs[1:]), specs
    with capture_specializations(_tree_extension_kernel) as specs:  # the capture is not blind
        r2t, rpi, lens = batches[1]
        for page, topk, steps in ((64, 8, 5), (16, 8, 5), (64, 4, 5), (64, 8, 3)):
            tree_extension(r2t, rpi, lens, page, topk, steps)
        tree_extension(r2t, rpi, lens.int(), 64, 8, 5)
    assert len(set(specs)) == 5
