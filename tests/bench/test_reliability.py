"""Reliability of the paged tree-draft step on CPU (issue 6): what it may touch and what it leaves.

- prefix integrity: random draft steps change no prefix KV byte, no prefix entry of
  ``req_to_token``, never slot 0, and nothing outside the slots they were handed;
- no leaks: ``python -m bench.soak_cpu`` (arrivals, finishes, aborts, retractions) ends
  with the allocator's initial free pages, with and without SGLang's allocator
  debug mode;
- KV pressure: SGLang's scheduler reservation covers our tree extension (its own
  ``new_tokens_required_next_decode``, called on a stand-in batch), a pool holding
  exactly the reservation is enough, and a pool too small raises SGLang's own
  "out of memory" RuntimeError with allocator, KV and ``req_to_token`` unchanged;
- row ends: our kernel never writes past a request's ``req_to_token`` row; SGLang
  0.5.12.post1's ``assign_draft_cache_locs`` writes into the next request's row;
- bad input at the kernel API: non-positive sizes, empty batches, page-multiple and
  1-token prompts.

Everything runs on SGLang's real pools (``PagedTreeHarness``) with the Triton
interpreter. The numbers behind docs/reliability.md come from the soak script.
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers import pools as _pools  # noqa: E402,F401  (puts the CPU stand-ins on sys.path)
from helpers.server_args import global_server_args  # noqa: E402
from sglang_eagle_paged.tools.harness import PagedTreeHarness  # noqa: E402
from sglang_eagle_paged.kernels import assign_tree_draft_slots, pair_capacity  # noqa: E402
from sglang_eagle_paged.kernels.assign import PAIR_SENTINEL  # noqa: E402
from sglang_eagle_paged.tree_layout import extend_lens  # noqa: E402
from sglang_eagle_paged.settings import Mode  # noqa: E402
from sglang_eagle_paged.adapters.v1.draft_preprocess import draft_preprocess_decode  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def kv_bytes(h):
    return [b.view(torch.uint8).view(b.shape[0], -1) for b in h.kv_pool.k_buffer + h.kv_pool.v_buffer]


def snapshot(h):
    a = h.allocator
    return dict(
        kv=[b.clone() for b in kv_bytes(h)],
        r2t=h.req_to_token_pool.req_to_token.clone(),
        free_pages=a.free_pages.clone(),
        release_pages=a.release_pages.clone(),
        available=a.available_size(),
    )


def make_harness(page, topk, steps, **kw):
    h = PagedTreeHarness(page, topk, steps, head_num=1, head_dim=8, layer_num=2, **kw)
    # SGLang's out-of-memory path formats its message through these two tree-cache
    # methods; the harness's chunk-cache stand-in lacks them (it would raise
    # AttributeError instead of SGLang's RuntimeError)
    h.tree_cache.available_and_evictable_str = lambda: "(harness)"
    h.tree_cache.pretty_print = lambda: None
    return h


def set_config(h, topk, steps):
    h.topk = h.worker.topk = topk
    h.steps = h.worker.speculative_num_steps = steps


# --- 1. prefix integrity ----------------------------------------------------------------

@pytest.mark.parametrize("page,seed", [(4, 0), (16, 1)])
def test_draft_steps_touch_only_their_extension(page, seed):
    """20 random draft steps (topk 2..8, steps 1..5, random batches, ON mode): every KV
    byte that changed (2 layers, K and V) is in a slot of this step's extension, never a
    live prefix slot, never slot 0; prefix entries of req_to_token stay byte-identical."""
    rng = random.Random(seed)
    h = make_harness(page, 2, 1, num_tokens=4096, max_reqs=16, max_context_len=512)
    lens = [1, page, 2 * page, page + 1, 3 * page - 1] + [rng.randint(1, 120) for _ in range(5)]
    rows = [h.add_request(n) for n in lens]
    before_all = snapshot(h)
    for _ in range(20):
        topk, steps = rng.randint(2, 8), rng.randint(1, 5)
        set_config(h, topk, steps)
        batch_rows = rng.sample(rows, rng.randint(1, len(rows)))
        snap = snapshot(h)
        batch = h.batch(batch_rows)
        draft_preprocess_decode(h.worker, batch, Mode.ON)

        r2t = h.req_to_token_pool.req_to_token
        prefix_slots = torch.cat([h.requests[r] for r in rows])
        blens = [len(h.requests[r]) for r in batch_rows]
        ext = extend_lens(torch.tensor(blens), page, topk, steps).tolist()
        ext_slots = torch.cat([r2t[r, n:n + e].long() for r, n, e in zip(batch_rows, blens, ext)])
        assert not bool(torch.isin(ext_slots, prefix_slots).any())
        assert not bool((ext_slots == 0).any())
        for now, old in zip(kv_bytes(h), snap["kv"]):
            changed = (now != old).any(dim=1).nonzero().flatten()
            assert not bool(torch.isin(changed, prefix_slots).any())
            assert not bool((changed == 0).any())
            assert bool(torch.isin(changed, ext_slots).all())
        for r in rows:
            n = len(h.requests[r])
            assert torch.equal(r2t[r, :n], snap["r2t"][r, :n])
        assert torch.equal(h.allocator.free_pages, snap["free_pages"])
        assert not h.mismatched_branches(batch_rows)
    # and cumulatively over all 20 steps: the prefixes' KV is byte-identical
    prefix_slots = torch.cat([h.requests[r] for r in rows])
    for now, old in zip(kv_bytes(h), before_all["kv"]):
        assert torch.equal(now[prefix_slots], old[prefix_slots])
        assert torch.equal(now[0], old[0])


# --- 2. no leaks: the soak script ------------------------------------------------------------

SOAK_STEPS = 150  # ~15-25 s each on one CPU core (about 0.1 s per step under the interpreter)


@pytest.mark.parametrize("debug_pool,seed", [(False, 11), (True, 12)])
def test_soak_script_leaks_nothing(debug_pool, seed):
    cmd = [sys.executable, "-m", "bench.soak_cpu", "--steps", str(SOAK_STEPS), "--seed", str(seed)]
    if debug_pool:
        cmd.append("--debug-pool")
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("SGLANG_DEBUG_MEMORY_POOL", None)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["ok"] and summary["steps"] == SOAK_STEPS
    assert summary["free_pages_end"] == summary["free_pages_baseline"]
    assert summary["debug_mode_active"] is debug_pool
    assert summary["draft_steps"] > SOAK_STEPS // 2
    assert summary["finishes"] > 0 and summary["arrivals"] > 0 and summary["retractions"] > 0
    assert summary["one_token_prompts"] > 0 and summary["page_multiple_prefixes"] > 0


# --- 3a. KV pressure: the scheduler's reservation covers the extension ------------------------

def sglang_reservation(page, topk, steps, num_draft_tokens, bs):
    """SGLang's own ``ScheduleBatch.new_tokens_required_next_decode`` (v1 EAGLE) on a stand-in batch."""
    from sglang.srt.managers import schedule_batch as sb

    fake = SimpleNamespace(
        token_to_kv_pool_allocator=SimpleNamespace(page_size=page),
        reqs=[None] * bs,
        spec_algorithm=SimpleNamespace(is_none=lambda: False),
        is_spec_v2=False,
    )
    with global_server_args(speculative_num_steps=steps, speculative_eagle_topk=topk,
                            speculative_num_draft_tokens=num_draft_tokens):
        return sb.ScheduleBatch.new_tokens_required_next_decode(fake)


def ceil_align(x, y):
    return -(-x // y) * y


def test_reservation_formula_is_sglangs():
    """The closed form the docs quote is what SGLang 0.5.12 computes."""
    rng = random.Random(0)
    for _ in range(200):
        page, topk, steps = rng.randint(2, 256), rng.randint(2, 10), rng.randint(1, 8)
        ndt, bs = rng.randint(2, topk * steps + 1), rng.randint(1, 64)
        want = max(ceil_align(steps + page, page) * topk, ceil_align(ndt, page)) * bs
        assert sglang_reservation(page, topk, steps, ndt, bs) == want


def test_reservation_covers_tree_extension_everywhere():
    """Every page 2..256, topk 2..10, steps 1..8, every last-page length 0..page-1 (so every
    prefix length, modulo the page) and random batches: reserved >= sum(extend_lens)."""
    worst_slack = None
    for page in range(2, 257):
        last = torch.arange(page, dtype=torch.int64)  # prefix lengths page*k + last
        prefix = 7 * page + last
        for topk in range(2, 11):
            for steps in range(1, 9):
                need = extend_lens(prefix, page, topk, steps)  # per request
                per_req = ceil_align(steps + page, page) * topk  # the formula's first term, bs=1
                assert int(need.max()) <= per_req, (page, topk, steps)
                slack = per_req - int(need.max())
                worst_slack = slack if worst_slack is None else min(worst_slack, slack)
    # the bound is nearly tight: when last + steps needs as many pages as steps + page,
    # the slack is last >= 1 (page 2, steps even, last 1 gives 1); otherwise >= page*topk - last
    assert worst_slack == 1
    # random batches through SGLang's own method, with num_draft_tokens as large as allowed
    rng = random.Random(1)
    for _ in range(300):
        page, topk, steps = rng.randint(2, 256), rng.randint(2, 10), rng.randint(1, 8)
        bs = rng.randint(1, 32)
        lens = torch.tensor([rng.choice([1, page, rng.randint(1, 40 * page)]) for _ in range(bs)])
        need = int(extend_lens(lens, page, topk, steps).sum())
        for ndt in (2, topk * steps + 1):
            assert sglang_reservation(page, topk, steps, ndt, bs) >= need


@pytest.mark.parametrize("page,topk,steps,lens", [
    (4, 8, 5, [7, 1, 4, 9]),     # last page 3 of 4: the worst case, 2 pages per branch
    (4, 8, 4, [7, 3, 11, 1]),    # last 3, steps 4: each extension is 3 slots short of its share
])
def test_pool_holding_exactly_the_reservation_suffices(page, topk, steps, lens):
    """Shrink the free pool to exactly what check_decode_mem demands: the draft step runs."""
    h = make_harness(page, topk, steps, num_tokens=1024, max_reqs=8, max_context_len=512)
    rows = [h.add_request(n) for n in lens]
    reserved = sglang_reservation(page, topk, steps, topk * steps + 1, len(rows))
    filler = h.allocator.alloc(h.allocator.available_size() - reserved)
    assert filler is not None and h.allocator.available_size() == reserved
    snap = snapshot(h)
    draft_preprocess_decode(h.worker, h.batch(rows), Mode.ON)
    assert not h.mismatched_branches(rows)
    assert torch.equal(h.allocator.free_pages, snap["free_pages"])
    need = int(extend_lens(torch.tensor(lens), page, topk, steps).sum())
    assert need <= reserved


# --- 3b. KV pressure: a pool too small anyway ------------------------------------------------

@pytest.mark.parametrize("page,topk,steps,lens", [
    (4, 4, 3, [5, 7, 30]),
    (16, 8, 5, [15, 1, 32]),
])
def test_out_of_memory_changes_nothing(page, topk, steps, lens):
    """alloc_paged_token_slots_extend raises SGLang's RuntimeError ("Prefill out of memory")
    before our step writes anything: free pages, KV and req_to_token are unchanged, and
    a later step with room works. SGLang's own method raises the same exception; in a
    server the scheduler's reservation (above) keeps it from happening."""
    from sglang.srt.speculative.eagle_worker import EAGLEWorker

    h = make_harness(page, topk, steps, num_tokens=1024, max_reqs=8, max_context_len=512)
    rows = [h.add_request(n) for n in lens]
    prefix = torch.tensor(lens)
    ext = extend_lens(prefix, page, topk, steps)
    # pages the allocator must hand out (the prefix's partial page is already there)
    new_pages = int(((prefix + ext + page - 1) // page - (prefix + page - 1) // page).sum())
    # leave one page fewer than that
    filler = h.allocator.alloc(h.allocator.available_size() - (new_pages - 1) * page)
    assert filler is not None and h.allocator.available_size() == (new_pages - 1) * page
    snap = snapshot(h)
    batch = h.batch(rows)
    with pytest.raises(RuntimeError, match="out of memory"):
        draft_preprocess_decode(h.worker, batch, Mode.ON)
    after = snapshot(h)
    assert torch.equal(after["free_pages"], snap["free_pages"])
    assert torch.equal(after["release_pages"], snap["release_pages"])
    assert after["available"] == snap["available"]
    assert torch.equal(after["r2t"], snap["r2t"])
    for a, b in zip(after["kv"], snap["kv"]):
        assert torch.equal(a, b)
    assert batch.out_cache_loc is None  # the batch was not half-updated either

    # the same exception from SGLang's own method (unpatched function, same stand-ins)
    with pytest.raises(RuntimeError, match="out of memory"):
        EAGLEWorker._draft_preprocess_decode(h.worker, h.batch(rows))
    assert torch.equal(h.allocator.free_pages, snap["free_pages"])

    # give one page back: the step now fits and is correct
    h.allocator.free(filler[:page])
    draft_preprocess_decode(h.worker, h.batch(rows), Mode.ON)
    assert not h.mismatched_branches(rows)


# --- 4. row ends ------------------------------------------------------------------------------

ROW_CASE = dict(page=16, topk=4, steps=3, width=256)


def near_row_end_harness():
    """Row 1: a prefix 8 slots short of the row end (SGLang's rows have context_len + 4 +
    num_draft_tokens slots, so a request at its context limit has ~13 spare); row 2: the
    next request, a full row of prefix."""
    c = ROW_CASE
    h = make_harness(c["page"], c["topk"], c["steps"], num_tokens=2048, max_reqs=4, max_context_len=c["width"])
    near = h.add_request(c["width"] - 8)
    nxt = h.add_request(c["width"])
    assert nxt == near + 1
    return h, near, nxt


def test_our_kernel_stays_in_its_row():
    c = ROW_CASE
    h, near, nxt = near_row_end_harness()
    seq_len = c["width"] - 8
    ext = int(extend_lens(torch.tensor([seq_len]), c["page"], c["topk"], c["steps"]))
    assert ext > 8  # the extension does not fit in the row
    snap = snapshot(h)
    batch = h.batch([near])
    draft_preprocess_decode(h.worker, batch, Mode.ON)
    r2t = h.req_to_token_pool.req_to_token
    assert torch.equal(r2t[nxt], snap["r2t"][nxt])  # the next request's row is untouched
    assert torch.equal(r2t[near, :seq_len], snap["r2t"][near, :seq_len])
    # the part that fits is the allocator's output; the draft slots are all there
    # (out_cache_loc is filled from the allocator's output, not from the row)
    assert batch.out_cache_loc.numel() == c["topk"] * c["steps"]
    assert not bool(torch.isin(batch.out_cache_loc, h.requests[nxt]).any())
    # the KV of the next request is untouched too
    for a, b in zip(kv_bytes(h), snap["kv"]):
        assert torch.equal(a[h.requests[nxt]], b[h.requests[nxt]])
    assert torch.equal(h.allocator.free_pages, snap["free_pages"])


@pytest.mark.upstream
def test_upstream_assign_draft_cache_locs_writes_into_the_next_row():
    """SGLang 0.5.12.post1's kernel, called as ``_draft_preprocess_decode`` calls it, stores
    ``extend_len`` entries from ``seq_len`` with no bound at the row end: the tail lands in
    the first entries of the next row, i.e. the next request's prefix page table."""
    from sglang.srt.speculative.spec_utils import (
        assign_draft_cache_locs, get_last_loc_large_page_size_large_top_k)

    c = ROW_CASE
    page, topk, steps = c["page"], c["topk"], c["steps"]
    h, near, nxt = near_row_end_harness()
    r2t = h.req_to_token_pool.req_to_token
    before = r2t.clone()
    batch = h.batch([near])
    a = h.allocator
    state = a.backup_state()
    prefix_lens, seq_lens, last_loc, num_new_pages_per_topk, ext_lens, last_page_lens = (
        get_last_loc_large_page_size_large_top_k(r2t, batch.req_pool_indices, batch.seq_lens, steps, topk, page))
    prefix_cpu = batch.seq_lens_cpu
    last_cpu = prefix_cpu % page
    pages_cpu = (last_cpu + steps + page - 1) // page
    seq_cpu = prefix_cpu // page * page + pages_cpu * (page * topk)
    extend_num_tokens = int((seq_cpu - prefix_cpu).sum())
    out_cache_loc = a.alloc_extend(prefix_lens, prefix_cpu, seq_lens, seq_cpu, last_loc, extend_num_tokens)
    alloc_loc = out_cache_loc.clone()
    dup_len = int(last_cpu.sum()) * (topk - 1)
    src = torch.zeros(dup_len, dtype=torch.int32)
    tgt = torch.zeros(dup_len, dtype=torch.int32)
    assign_draft_cache_locs[(1,)](
        batch.req_pool_indices, r2t, batch.seq_lens, ext_lens, num_new_pages_per_topk, out_cache_loc,
        src, tgt, torch.cumsum(last_page_lens, dim=0), dup_len, r2t.shape[1], topk, steps, page,
        1, 1 << (steps + page - 1).bit_length(),
    )
    a.restore_state(state)

    seq_len = c["width"] - 8
    spill = extend_num_tokens - 8
    assert spill > 0
    # the 8 entries that fit are the allocator's first 8 ...
    assert torch.equal(r2t[near, seq_len:].long(), alloc_loc[:8])
    # ... and the rest overwrote the next request's first `spill` prefix entries
    assert torch.equal(r2t[nxt, :spill].long(), alloc_loc[8:extend_num_tokens])
    assert not torch.equal(r2t[nxt, :spill], before[nxt, :spill])
    assert torch.equal(r2t[nxt, spill:], before[nxt, spill:])


# --- 5. bad input at the kernel API --------------------------------------------------------

def tiny_inputs():
    r2t = torch.zeros(2, 64, dtype=torch.int32)
    r2t[1, :5] = torch.arange(4, 9, dtype=torch.int32)
    return torch.tensor([1]), r2t, torch.tensor([5]), torch.arange(100, 200)


@pytest.mark.parametrize("name", ["page_size", "topk", "steps"])
@pytest.mark.parametrize("value", [0, -1, -16])
def test_non_positive_sizes_raise_value_error(name, value):
    rpi, r2t, lens, alloc = tiny_inputs()
    kwargs = dict(page_size=4, topk=2, steps=2)
    kwargs[name] = value
    before = r2t.clone()
    with pytest.raises(ValueError, match=name):
        assign_tree_draft_slots(rpi, r2t, lens, alloc, **kwargs)
    assert torch.equal(r2t, before)


def test_empty_batch_is_a_no_op():
    r2t = torch.randint(0, 1000, (3, 32), dtype=torch.int32)
    before = r2t.clone()
    empty = torch.empty(0, dtype=torch.int64)
    layout = assign_tree_draft_slots(empty, r2t, empty, empty, 4, 3, 2)
    assert layout.out_cache_loc.numel() == 0 and layout.src_loc.numel() == 0 and layout.tgt_loc.numel() == 0
    assert torch.equal(r2t, before)


def test_empty_batch_through_the_worker_is_a_no_op():
    h = make_harness(4, 3, 2, num_tokens=256, max_reqs=4, max_context_len=64)
    h.add_request(5)
    snap = snapshot(h)
    batch = h.batch([])
    draft_preprocess_decode(h.worker, batch, Mode.ON)
    assert batch.out_cache_loc.numel() == 0 and batch.seq_lens_sum == 0
    after = snapshot(h)
    assert torch.equal(after["r2t"], snap["r2t"]) and torch.equal(after["free_pages"], snap["free_pages"])
    for a, b in zip(after["kv"], snap["kv"]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("page,topk,steps", [(4, 2, 1), (4, 8, 4), (16, 3, 5)])
def test_page_multiple_prompts_have_no_pairs(page, topk, steps):
    """last_page_len 0: every branch starts on a fresh page, nothing is copied, KV unchanged."""
    h = make_harness(page, topk, steps, num_tokens=2048, max_reqs=8, max_context_len=256)
    lens = [page, 2 * page, 5 * page]
    rows = [h.add_request(n) for n in lens]
    snap = snapshot(h)
    batch = h.batch(rows)
    r2t = h.req_to_token_pool.req_to_token
    state = h.allocator.backup_state()
    from sglang_eagle_paged.adapters.v1.draft_preprocess import _allocate_tree_extension

    alloc_loc, _ = _allocate_tree_extension(h.worker, batch)
    h.allocator.restore_state(state)
    layout = assign_tree_draft_slots(batch.req_pool_indices, r2t.clone(), batch.seq_lens, alloc_loc,
                                     page, topk, steps)
    assert layout.src_loc.numel() == pair_capacity(len(rows), page, topk)
    assert bool((layout.src_loc == PAIR_SENTINEL).all()) and bool((layout.tgt_loc == PAIR_SENTINEL).all())
    draft_preprocess_decode(h.worker, batch, Mode.ON)
    for a, b in zip(kv_bytes(h), snap["kv"]):
        assert torch.equal(a, b)  # no pair, no copy: not one KV byte changed
    # every branch starts on a page boundary
    for r, n in zip(rows, lens):
        span = ((steps + page - 1) // page) * page
        heads = r2t[r, n + torch.arange(topk) * span].long()
        assert bool((heads % page == 0).all())
    assert not h.mismatched_branches(rows)


@pytest.mark.parametrize("page,topk,steps", [(4, 2, 1), (4, 8, 5), (16, 4, 3)])
def test_one_token_prompts(page, topk, steps):
    """A 1-token prefix: one slot copied into each of branches 1..topk-1."""
    h = make_harness(page, topk, steps, num_tokens=2048, max_reqs=8, max_context_len=256)
    rows = [h.add_request(1) for _ in range(3)]
    snap = snapshot(h)
    batch = h.batch(rows)
    draft_preprocess_decode(h.worker, batch, Mode.ON)
    assert not h.mismatched_branches(rows)
    prefix_slots = torch.cat([h.requests[r] for r in rows])
    changed = set()
    for a, b in zip(kv_bytes(h), snap["kv"]):
        changed |= set((a != b).any(dim=1).nonzero().flatten().tolist())
    assert not changed & set(prefix_slots.tolist())
    assert len(changed) == len(rows) * (topk - 1)  # exactly one duplicated slot per extra branch
    assert batch.out_cache_loc.numel() == len(rows) * topk * steps
