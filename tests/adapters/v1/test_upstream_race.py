"""SGLang 0.5.12.post1's own ``assign_draft_cache_locs`` depends on program order.

With page_size > 1 and topk > 1, ``EAGLEWorker._draft_preprocess_decode`` passes
the allocator's output as ``out_cache_loc`` and the kernel uses it both ways:

- Part 1 of program ``j`` READS ``out_cache_loc[cum_j : cum_j + extend_len_j]``
  (``cum_j`` = sum of the earlier requests' ``extend_lens``) and copies it into
  its ``req_to_token`` row; Parts 2 and 3 then read that row back.
- Part 3 of program ``j`` WRITES the compacted draft slots to
  ``out_cache_loc[j * topk * steps : (j + 1) * topk * steps]``.

``extend_len >= topk * steps`` with equality only without padding, so ``cum_j``
can exceed ``j * topk * steps``: program ``j``'s write range then overlaps the
range ``[cum_{j-1}, cum_j)`` that program ``j - 1`` still has to read. On a GPU the
programs run concurrently, so ``j - 1`` may read slots that ``j`` already replaced,
and its ``req_to_token`` row, draft slots and copy pairs come out wrong. The
interpreter runs programs one at a time in ascending order, which happens to be
the safe order (every reader before the writer that follows it); running them in
reversed order shows the corruption. Our kernel never writes its input, see
``test_kernel_assign.py::test_assignment_is_program_order_independent``.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.interpreter_order import program_order  # noqa: E402
from helpers.pools import allocate_prefixes, make_pools, tree_extension_args  # noqa: E402
from sglang_eagle_paged.kernels.reference import assign_tree_draft_slots_ref  # noqa: E402

pytestmark = pytest.mark.upstream


def next_power_of_2(n):
    return 1 << (n - 1).bit_length()


def run_upstream(pools, rpi, prefix_lens, page_size, topk, steps, order):
    """Allocate and call ``assign_draft_cache_locs`` exactly as ``_draft_preprocess_decode`` does.

    Returns the kernel's view of the results plus the allocator output it consumed.
    The allocator state is restored afterwards so every order sees the same slots.
    """
    from sglang.srt.speculative.spec_utils import assign_draft_cache_locs

    r2t = pools.req_to_token
    r2t_before = r2t.clone()
    state = pools.allocator.backup_state()
    a = tree_extension_args(pools, rpi, prefix_lens, page_size, topk, steps)
    out_cache_loc = pools.allocator.alloc_extend(a.prefix_lens, a.prefix_lens_cpu, a.seq_lens, a.seq_lens_cpu,
                                                 a.last_loc, a.extend_num_tokens)
    alloc_loc = out_cache_loc.clone()
    num_seqs = rpi.numel()
    last_page_lens_cumsum = torch.cumsum(a.last_page_lens, dim=0)
    duplicate_cache_len = torch.sum(a.last_page_lens_cpu).item() * (topk - 1)
    target_cache_loc = torch.zeros(duplicate_cache_len, dtype=torch.int32)
    source_cache_loc = torch.zeros(duplicate_cache_len, dtype=torch.int32)
    with program_order(order) as launches:
        assign_draft_cache_locs[(num_seqs,)](
            rpi,
            r2t,
            prefix_lens,
            a.extend_lens,
            a.num_new_pages_per_topk,
            out_cache_loc,
            source_cache_loc,
            target_cache_loc,
            last_page_lens_cumsum,
            duplicate_cache_len,
            r2t.shape[1],
            topk,
            steps,
            page_size,
            next_power_of_2(num_seqs),
            next_power_of_2(steps + page_size),
        )
    assert len(launches) == 1 and len(launches[0]) == num_seqs
    result = dict(
        # eagle_worker uses out_cache_loc[: num_seqs * topk * steps] (the rest is stale)
        out_cache_loc=out_cache_loc[: num_seqs * topk * steps].clone(),
        src=source_cache_loc.long(),
        tgt=target_cache_loc.long(),
        req_to_token=r2t.clone(),
    )
    r2t.copy_(r2t_before)
    pools.allocator.restore_state(state)
    return result, alloc_loc


def reference(pools, rpi, prefix_lens, alloc_loc, page_size, topk, steps):
    r2t = pools.req_to_token.clone()
    ref = assign_tree_draft_slots_ref(rpi, r2t, prefix_lens, alloc_loc, page_size, topk, steps)
    live = ref.src_loc >= 0  # upstream packs the pairs without padding, same order
    return dict(out_cache_loc=ref.out_cache_loc, src=ref.src_loc[live], tgt=ref.tgt_loc[live], req_to_token=r2t)


@pytest.mark.parametrize("page_size,topk,steps,lens", [
    # request 0: last_page_len 1, extend_len 7 > topk*steps 4: program 1 writes
    # out_cache_loc[4:8], which program 0 still reads as [0:7)
    (4, 2, 2, [5, 6]),
    # the seed's configuration, with a second request
    (4, 8, 5, [7, 5]),
    (16, 3, 4, [17, 3, 30, 16]),
])
def test_upstream_assign_draft_cache_locs_depends_on_program_order(page_size, topk, steps, lens):
    pools = make_pools(page_size, 64 * page_size * topk)
    rpi = allocate_prefixes(pools, lens)
    prefix_lens = torch.tensor(lens, dtype=torch.int64)

    fwd, alloc_loc = run_upstream(pools, rpi, prefix_lens, page_size, topk, steps, "forward")
    rev, alloc_loc_rev = run_upstream(pools, rpi, prefix_lens, page_size, topk, steps, "reversed")
    assert torch.equal(alloc_loc, alloc_loc_rev)  # same slots handed to both runs

    # ascending order (what the interpreter and, mostly, a lightly loaded GPU do)
    # equals the intended result
    ref = reference(pools, rpi, prefix_lens, alloc_loc, page_size, topk, steps)
    for key in ("out_cache_loc", "src", "tgt", "req_to_token"):
        assert torch.equal(fwd[key].long(), ref[key].long()), key

    # reversed order corrupts the earlier requests' rows and draft slots
    assert not torch.equal(rev["out_cache_loc"], fwd["out_cache_loc"])
    assert not torch.equal(rev["req_to_token"], fwd["req_to_token"])
    bs_ext = tree_extension_args(pools, rpi, prefix_lens, page_size, topk, steps).extend_lens
    last = len(lens) - 1
    n = lens[last]
    # the last request has no successor writing into its range: it stays correct
    assert torch.equal(rev["req_to_token"][rpi[last], : n + bs_ext[last]],
                       fwd["req_to_token"][rpi[last], : n + bs_ext[last]])
    # the first request's row past its prefix now holds some other request's draft slots
    row0_rev = rev["req_to_token"][rpi[0], lens[0]: lens[0] + bs_ext[0]].long()
    row0_fwd = fwd["req_to_token"][rpi[0], lens[0]: lens[0] + bs_ext[0]].long()
    assert not torch.equal(row0_rev, row0_fwd)


def test_upstream_is_order_free_without_padding():
    """When every extend_len equals topk*steps (no last page, steps a page multiple)
    the read and write ranges coincide per program, and the order does not matter."""
    page_size, topk, steps, lens = 4, 2, 4, [4, 8, 12]
    pools = make_pools(page_size, 64 * page_size * topk)
    rpi = allocate_prefixes(pools, lens)
    prefix_lens = torch.tensor(lens, dtype=torch.int64)
    fwd, _ = run_upstream(pools, rpi, prefix_lens, page_size, topk, steps, "forward")
    rev, _ = run_upstream(pools, rpi, prefix_lens, page_size, topk, steps, "reversed")
    for key in ("out_cache_loc", "src", "tgt", "req_to_token"):
        assert torch.equal(fwd[key], rev[key]), key
