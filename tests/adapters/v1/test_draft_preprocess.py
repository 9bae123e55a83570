"""Our ``_draft_preprocess_decode`` on SGLang's real pools and allocator (CPU, Triton interpreter).

Everything goes through :class:`sglang_eagle_paged.tools.harness.PagedTreeHarness`:
SGLang's ``ReqToTokenPool``, ``MHATokenToKVPool`` and ``PagedTokenToKVPoolAllocator``
plus the namespace worker/batch that the method reads. SGLang's own method is
always taken unhooked (``__wrapped__``), since another test may have loaded the
plugin in this process.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import logging  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from sglang_eagle_paged.adapters.common import kv_copy  # noqa: E402
from sglang_eagle_paged.tools.harness import PagedTreeHarness  # noqa: E402
from sglang_eagle_paged.tree_layout import extend_lens  # noqa: E402
from sglang_eagle_paged.settings import MODE as ENV_VAR, Mode  # noqa: E402
from sglang_eagle_paged.adapters.v1.draft_preprocess import draft_preprocess_decode, draft_preprocess_decode_hook  # noqa: E402

SMALL = dict(num_tokens=8192, head_num=1, head_dim=8, layer_num=2)


def sglang_method():
    from sglang.srt.speculative.eagle_worker import EAGLEWorker

    fn = EAGLEWorker._draft_preprocess_decode
    return getattr(fn, "__wrapped__", fn)


def build(page, topk, steps, lens, **kw):
    opts = dict(SMALL, **kw)
    h = PagedTreeHarness(page, topk, steps, **opts)
    rows = [h.add_request(n) for n in lens]
    return h, rows


def random_lens(bs, page, seed, aligned_ok=True):
    rng = random.Random(seed)
    lens = [rng.randint(1, 4 * page) for _ in range(bs)]
    if not aligned_ok and all(n % page == 0 for n in lens):
        lens[0] += 1
    return lens


def kv_bytes(h):
    return [b.view(torch.uint8).reshape(b.shape[0], -1).clone() for b in h.kv_pool.k_buffer + h.kv_pool.v_buffer]


def expected_draft_slots(h, row, seq_len):
    """Where a page-table backend looks for branch b's step i: the row's own layout."""
    page, topk, steps = h.page_size, h.topk, h.steps
    last = seq_len % page
    span = ((last + steps + page - 1) // page) * page
    r2t = h.req_to_token_pool.req_to_token[row].long()
    return torch.stack([r2t[seq_len + b * span: seq_len + b * span + steps] for b in range(topk)]).flatten()


def check_step(h, rows, batch, free_before, r2t_prefix_before):
    bs, topk, steps = len(rows), h.topk, h.steps
    assert h.allocator.available_size() == free_before
    assert batch.out_cache_loc.numel() == bs * topk * steps
    assert batch.seq_lens_sum == sum(len(h.requests[r]) for r in rows)
    assert torch.equal(batch.spec_info.positions, batch.seq_lens.repeat_interleave(topk))
    assert batch.return_hidden_states is False
    assert h.mismatched_branches(rows) == []
    per_req = batch.out_cache_loc.view(bs, topk * steps).long()
    for i, r in enumerate(rows):
        n = len(h.requests[r])
        # prefix row untouched, draft slots are where the row says branch b continues
        assert torch.equal(h.req_to_token_pool.req_to_token[r, :n], r2t_prefix_before[i])
        assert torch.equal(per_req[i], expected_draft_slots(h, r, n))


def run_ours(h, rows, mode=Mode.ON):
    batch = h.batch(rows)
    free = h.allocator.available_size()
    prefix = [h.req_to_token_pool.req_to_token[r, :len(h.requests[r])].clone() for r in rows]
    draft_preprocess_decode(h.worker, batch, mode)
    return batch, free, prefix


CONFIGS = [  # bs, page, topk, steps
    (1, 4, 8, 5), (1, 16, 4, 1), (3, 4, 4, 2), (5, 16, 8, 3), (7, 64, 4, 5),
    (16, 16, 4, 3), (16, 4, 8, 4), (2, 64, 8, 1), (9, 16, 2, 5),
]


@pytest.mark.parametrize("bs,page,topk,steps", CONFIGS)
def test_ours_on_real_pools(bs, page, topk, steps):
    h, rows = build(page, topk, steps, random_lens(bs, page, seed=bs * 1000 + page * 10 + topk))
    batch, free, prefix = run_ours(h, rows)
    check_step(h, rows, batch, free, prefix)


def test_page_aligned_and_partial_mixed():
    """Requests with last_page_len 0 next to partial pages, steps > page (two pages per branch)."""
    h, rows = build(4, 4, 6, [8, 5, 12, 7, 4])
    batch, free, prefix = run_ours(h, rows)
    check_step(h, rows, batch, free, prefix)


def test_multi_layer_draft_pool():
    h, rows = build(16, 4, 3, [5, 33, 17, 48], layer_num=3)
    batch, free, prefix = run_ours(h, rows)
    assert h.kv_pool.layer_num == 3
    check_step(h, rows, batch, free, prefix)


# --- the hook: what is ours, what stays SGLang's ---------------------------------

@pytest.mark.parametrize("page,topk", [(1, 1), (1, 4), (1, 8), (4, 1), (16, 1), (64, 1)])
def test_hook_delegates_page1_or_topk1(monkeypatch, page, topk):
    monkeypatch.setenv(ENV_VAR, "on")
    calls = []
    worker, batch = SimpleNamespace(page_size=page, topk=topk, speculative_num_steps=3), object()

    def original(w, b):
        calls.append((w, b))
        return "orig"

    assert draft_preprocess_decode_hook(Mode.ON)(original, worker, batch) == "orig"
    assert calls == [(worker, batch)]


@pytest.mark.parametrize("mode", ["on", "fake"])
def test_hook_runs_ours_for_paged_tree(mode):
    h, rows = build(16, 4, 3, [5, 20])
    batch = h.batch(rows)
    calls = []

    def original(w, b):
        calls.append(1)

    draft_preprocess_decode_hook(Mode(mode))(original, h.worker, batch)
    assert calls == []
    assert batch.out_cache_loc.numel() == 2 * 4 * 3
    assert (h.mismatched_branches(rows) == []) == (mode == "on")


def test_a_fault_in_ours_serves_sglangs_own_method_then_and_after(monkeypatch, caplog):
    """The fault rule on v1: an exception in our path (here our copy, after our allocation) never
    reaches the scheduler. SGLang's own method, unhooked, serves that call as if ours had not run
    (each request counted and its penalties accumulated once, the allocator as before, every branch
    reading the prefix) and every later one; one ERROR line."""
    from sglang_eagle_paged.adapters.v1 import draft_preprocess

    monkeypatch.setattr(draft_preprocess._switched_off, "reason", None)
    ours_h, rows = build(16, 4, 3, [5, 20], kv_copy=True)
    theirs_h, rows2 = build(16, 4, 3, [5, 20], kv_copy=True)
    theirs = run_sglang(theirs_h, rows2)
    faults = []

    def broken_copy(*args, **kwargs):
        faults.append(1)
        raise RuntimeError("injected into our copy")

    monkeypatch.setattr(draft_preprocess, "move_pairs", broken_copy)
    hook = draft_preprocess_decode_hook(Mode.ON)
    batch = ours_h.batch(rows)
    # a penalized batch, SGLang's relaxed penalty accumulation once per round: the harness's batch is a
    # namespace in place of a ScheduleBatch (SGLang's orchestrator needs real requests), so its
    # orchestrator here only records what both methods hand it
    accumulated = []
    batch.sampling_info.penalizer_orchestrator = SimpleNamespace(is_required=True,
                                                                 cumulate_output_tokens=accumulated.append)
    free = ours_h.allocator.available_size()
    with caplog.at_level(logging.ERROR, logger="sglang_eagle_paged"):
        hook(sglang_method(), ours_h.worker, batch)
    assert faults == [1] and draft_preprocess._switched_off
    assert [r.decode_batch_idx for r in batch.reqs] == [1, 1] and len(accumulated) == 1
    assert ours_h.allocator.available_size() == free
    assert torch.equal(batch.out_cache_loc.long(), theirs.out_cache_loc.long())
    assert ours_h.mismatched_branches(rows) == []
    for a, b in zip(kv_bytes(ours_h), kv_bytes(theirs_h)):
        assert torch.equal(a, b)
    hook(sglang_method(), ours_h.worker, ours_h.batch(rows))  # later calls: SGLang's, ours not tried
    assert faults == [1]
    assert [r.levelno for r in caplog.records].count(logging.ERROR) == 1


def test_where_sglangs_method_fails_too_its_error_is_raised_and_ours_stays_on(monkeypatch):
    """Out of KV memory while drafting: ours raises SGLang's own error, and so does SGLang's method
    (unhooked, on the same pool), which then serves the call; the error is SGLang's to raise, as
    without us, and ours stays on. The requests are counted once, by SGLang's method."""
    from sglang_eagle_paged.adapters.v1 import draft_preprocess

    monkeypatch.setattr(draft_preprocess._switched_off, "reason", None)
    h = PagedTreeHarness(16, 8, 5, num_tokens=256, head_num=1, head_dim=8, max_reqs=8)
    h.tree_cache.pretty_print = lambda: None  # SGLang's OOM path prints the tree
    h.tree_cache.available_and_evictable_str = lambda: "test pool"
    rows = [h.add_request(n) for n in (100, 90)]
    free_pages = h.allocator.free_pages.clone()
    batch = h.batch(rows)
    with pytest.raises(RuntimeError, match="out of memory"):
        draft_preprocess_decode_hook(Mode.ON)(sglang_method(), h.worker, batch)
    assert not draft_preprocess._switched_off
    assert [r.decode_batch_idx for r in batch.reqs] == [1, 1]
    assert torch.equal(h.allocator.free_pages, free_pages)


# --- against SGLang's own method ---------------------------------------------------

def run_sglang(h, rows):
    batch = h.batch(rows)
    free = h.allocator.available_size()
    sglang_method()(h.worker, batch)
    assert h.allocator.available_size() == free
    return batch


BS1 = [(4, 8, 5, 7), (4, 4, 1, 3), (16, 4, 3, 37), (16, 8, 5, 1), (64, 4, 5, 100), (64, 8, 2, 63)]


@pytest.mark.parametrize("page,topk,steps,seq_len", BS1)
def test_bs1_equals_sglang(page, topk, steps, seq_len):
    """At bs 1 SGLang's kernel has no cross-program race: ours must give the same result."""
    ours_h, (row,) = build(page, topk, steps, [seq_len])
    theirs_h, (row2,) = build(page, topk, steps, [seq_len], kv_copy=True)
    assert row == row2 and torch.equal(ours_h.requests[row], theirs_h.requests[row])
    ours, _, _ = run_ours(ours_h, [row])
    theirs = run_sglang(theirs_h, [row])
    assert torch.equal(ours.out_cache_loc.long(), theirs.out_cache_loc.long())
    assert torch.equal(ours_h.req_to_token_pool.req_to_token, theirs_h.req_to_token_pool.req_to_token)
    for a, b in zip(kv_bytes(ours_h), kv_bytes(theirs_h)):  # every slot, every layer, K and V
        assert torch.equal(a, b)
    assert ours.seq_lens_sum == theirs.seq_lens_sum
    assert torch.equal(ours.spec_info.positions, theirs.spec_info.positions)
    assert theirs_h.mismatched_branches([row]) == []


def test_bs_many_equals_sglang_in_forward_program_order():
    """The interpreter runs SGLang's programs in ascending order, the one order in which its
    in-place use of out_cache_loc is safe (see test_upstream_race.py): there both agree."""
    lens = [5, 33, 17, 48, 2, 31]
    ours_h, rows = build(16, 4, 3, lens)
    theirs_h, rows2 = build(16, 4, 3, lens, kv_copy=True)
    assert rows == rows2
    ours, _, _ = run_ours(ours_h, rows)
    theirs = run_sglang(theirs_h, rows)
    assert torch.equal(ours.out_cache_loc.long(), theirs.out_cache_loc.long())
    assert torch.equal(ours_h.req_to_token_pool.req_to_token, theirs_h.req_to_token_pool.req_to_token)
    for a, b in zip(kv_bytes(ours_h), kv_bytes(theirs_h)):
        assert torch.equal(a, b)


@pytest.mark.upstream
@pytest.mark.parametrize("page,steps,lens", [(4, 5, [4]), (16, 3, [16, 32]), (4, 2, [8])])
def test_sglang_page_aligned_batch_leaves_padding_in_out_cache_loc(page, steps, lens):
    """SGLang 0.5.12.post1 compacts out_cache_loc (drops the padded slots) only inside
    ``if duplicate_cache_len > 0``: when every request of the batch ends on a page
    boundary it hands out the first ``bs*topk*steps`` allocated slots, so branch b > 0
    writes its draft KV where its req_to_token row does not point. Ours follows the row."""
    topk = 4
    ours_h, rows = build(page, topk, steps, lens)
    theirs_h, _ = build(page, topk, steps, lens, kv_copy=True)
    ours, free, prefix = run_ours(ours_h, rows)
    check_step(ours_h, rows, ours, free, prefix)
    theirs = run_sglang(theirs_h, rows)
    # the rows are identical; only SGLang's out_cache_loc disagrees with them
    assert torch.equal(ours_h.req_to_token_pool.req_to_token, theirs_h.req_to_token_pool.req_to_token)
    assert not torch.equal(ours.out_cache_loc.long(), theirs.out_cache_loc.long())
    n = steps * topk
    assert theirs.out_cache_loc[:n].tolist() == list(range(int(theirs.out_cache_loc[0]), int(theirs.out_cache_loc[0]) + n))


# --- fake mode ----------------------------------------------------------------------

def test_fake_mode_same_indices_no_copy():
    lens = [5, 33, 17, 48, 2]
    on_h, rows = build(16, 4, 3, lens)
    fake_h, _ = build(16, 4, 3, lens)
    before = kv_bytes(fake_h)
    on, _, _ = run_ours(on_h, rows, Mode.ON)
    fake, free, _ = run_ours(fake_h, rows, Mode.FAKE)
    assert torch.equal(on.out_cache_loc, fake.out_cache_loc)
    assert torch.equal(on_h.req_to_token_pool.req_to_token, fake_h.req_to_token_pool.req_to_token)
    assert fake_h.allocator.available_size() == free
    assert on_h.mismatched_branches(rows) == []
    bad = fake_h.mismatched_branches(rows)
    # every request has a partial page (48 % 16 == 0 is the exception): branches 1..3 differ
    want = {(r, b, layer) for r, n in zip(rows, lens) if n % 16 for b in range(1, 4) for layer in range(4)}
    assert set(bad) == want
    assert all(torch.equal(a, b) for a, b in zip(before, kv_bytes(fake_h)))  # no KV written at all


# --- no host sync ---------------------------------------------------------------------

SYNC_METHODS = {
    torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__int__,
    torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.cpu, torch.Tensor.numpy,
    torch.Tensor.nonzero, torch.nonzero, torch.Tensor.unique, torch.unique, torch.masked_select,
    torch.Tensor.masked_select,
}  # len() reads the shape, not the data: not a sync


def _in_triton_interpreter():
    # The interpreter copies kernel arguments to the host around every launch; on a GPU
    # that is an asynchronous kernel launch, so those frames are not the code under test.
    f = sys._getframe(2)
    while f is not None:
        if "triton" in f.f_code.co_filename.replace("\\", "/").split("site-packages/")[-1].split("/")[0]:
            return True
        f = f.f_back
    return False


class DeviceTensor(torch.Tensor):
    """Marks "device-side" data. torch's default subclass propagation makes every tensor
    computed from one a DeviceTensor too, so provenance follows the computation."""

    calls = None

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if cls.calls is not None:
            sync = func in SYNC_METHODS or (
                func is torch.Tensor.to and any(str(a) == "cpu" for a in list(args[1:]) + list(kwargs.values())))
            if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and len(args) > 1:
                idx = args[1] if isinstance(args[1], tuple) else (args[1],)
                sync = any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in idx)
            if sync and not _in_triton_interpreter():
                cls.calls.append(getattr(func, "__qualname__", repr(func)))
        return super().__torch_function__(func, types, args, kwargs)


def tainted(t):
    return t.as_subclass(DeviceTensor)


def count_device_syncs(fn, h, rows):
    """Run ``fn(worker, batch)`` with every device-side input tainted; return the sync calls."""
    batch = h.batch(rows)
    batch.seq_lens = tainted(batch.seq_lens)
    batch.req_pool_indices = tainted(batch.req_pool_indices)
    h.req_to_token_pool.req_to_token = tainted(h.req_to_token_pool.req_to_token)
    h.allocator.free_pages = tainted(h.allocator.free_pages)
    free = h.allocator.available_size()
    DeviceTensor.calls = []
    try:
        fn(h.worker, batch)
    finally:
        calls, DeviceTensor.calls = DeviceTensor.calls, None
    assert h.allocator.available_size() == free
    return calls


def test_no_host_sync_on_device_tensors():
    """What this proves: during our ``draft_preprocess_decode`` no ``.item()``, ``int()``,
    ``bool()``, ``float()``, ``.tolist()``, ``.cpu()``/``.to("cpu")``, ``.numpy()``,
    ``nonzero``/``unique``/``masked_select`` or boolean-mask indexing is applied to any tensor
    derived from the device-side inputs (``batch.seq_lens``, ``batch.req_pool_indices``,
    ``req_to_token``, the allocator's ``free_pages``) -- including inside SGLang's helpers we
    call (``get_last_loc``, the allocator) -- while host-side values come only from
    ``batch.seq_lens_cpu``. The positive control shows the probe sees SGLang's own
    ``torch.sum(batch.seq_lens).item()`` and ``torch.sum(last_page_lens_cpu)`` path.

    What it cannot prove: syncs that do not go through a Python-visible torch call
    (CUDA caching-allocator syncs, ``torch.cuda.synchronize``, a kernel launch that
    blocks, implicit syncs inside C++ ops such as ``repeat_interleave`` with a tensor
    ``repeats``), syncs on tensors created without any device-side input (e.g. a
    ``torch.zeros(..., device=...)`` read back), and calls made inside the Triton
    interpreter's launcher (excluded: on a GPU a launch is asynchronous). The GPU
    benchmark counts real syncs with ``torch.cuda.set_sync_debug_mode``.
    """
    h, rows = build(16, 4, 3, [5, 33, 17, 48, 2])
    assert count_device_syncs(lambda w, b: draft_preprocess_decode(w, b, Mode.ON), h, rows) == []
    h, rows = build(16, 4, 3, [5, 33, 17, 48, 2])
    assert count_device_syncs(lambda w, b: draft_preprocess_decode(w, b, Mode.FAKE), h, rows) == []

    theirs_h, rows = build(16, 4, 3, [5, 33, 17, 48, 2], kv_copy=True)
    theirs = count_device_syncs(sglang_method(), theirs_h, rows)
    assert any("item" in c for c in theirs), theirs


# --- allocator bookkeeping over many steps ----------------------------------------------

STEPS_CHURN = int(os.environ.get("SGLANG_EAGLE_PAGED_TEST_CHURN_STEPS", "1000"))


def test_allocator_restored_over_many_random_steps(monkeypatch):
    """Random arrivals, finishes and batch subsets; page 16, topk 4, steps 3, a pool small enough that
    the free list is often short. Every third step is sent down SGLang's allocation path (the
    fallback), the others read the free list where it holds the tree; both paths must run. (Running the
    pool out of memory here is not possible on a CPU: SGLang's alloc_extend kernel reads past a short
    free list, which the interpreter turns into a crash; test_allocation_failure_leaves_state_untouched
    covers that path.) After every step the free count equals the count before it; after finishing everything
    it equals the initial baseline."""
    from sglang_eagle_paged.adapters.v1 import draft_preprocess as dp

    rng = random.Random(1234)
    h = PagedTreeHarness(16, 4, 3, num_tokens=2048, head_num=1, head_dim=8, layer_num=1, max_reqs=26)
    baseline = h.allocator.available_size()
    readable, counts = dp._readable_free_pages, {"fast": 0, "fallback": 0, "oom": 0}

    def chosen(worker, batch):
        pages = readable(worker, batch) if counts["step"] % 3 else None
        counts["fast" if pages is not None else "fallback"] += 1
        return pages

    monkeypatch.setattr(dp, "_readable_free_pages", chosen)
    h.tree_cache.pretty_print = lambda: None  # SGLang's OOM path prints the tree
    h.tree_cache.available_and_evictable_str = lambda: "test pool"
    live = []
    for step in range(STEPS_CHURN):
        counts["step"] = step
        if live and rng.random() < 0.3:
            h.finish_request(live.pop(rng.randrange(len(live))))
        while len(live) < 3 or (len(live) < 12 and rng.random() < 0.3):
            try:
                live.append(h.add_request(rng.randint(1, 160)))
            except MemoryError:
                break
        if not live:
            continue
        rows = rng.sample(live, rng.randint(1, min(6, len(live))))
        batch = h.batch(rows)
        free = h.allocator.available_size()
        try:
            dp.draft_preprocess_decode(h.worker, batch, Mode.ON)
        except RuntimeError:  # out of memory for the tree: state must still be restored
            counts["oom"] += 1
        assert h.allocator.available_size() == free, f"step {step}"
        if step % 50 == 0:
            assert h.mismatched_branches(rows) == [] or batch.out_cache_loc is None
    for r in list(live):
        h.finish_request(r)
    assert h.allocator.available_size() == baseline
    assert min(counts["fast"], counts["fallback"]) > STEPS_CHURN // 5, counts


def _sorting_allocator_short_of_free_pages():
    """A need_sort allocator (PD disaggregation) whose free list is short of the batch's tree while
    its release list holds enough: SGLang's allocation merges the two lists."""
    from sglang_eagle_paged.tree_layout import extension_totals

    h = PagedTreeHarness(16, 4, 3, num_tokens=16 * 64, head_num=1, head_dim=8, max_reqs=24, need_sort=True)
    rows = []
    while True:
        try:
            rows.append(h.add_request(40))
        except MemoryError:
            break
    for r in rows[1::2]:
        h.finish_request(r)
    live = rows[0::2][:4]
    batch = h.batch(live)
    _, need = extension_totals(batch.seq_lens_cpu, 16, 4, 3)
    a = h.allocator
    assert len(a.free_pages) < need <= len(a.free_pages) + len(a.release_pages), (len(a.free_pages), need)
    return h, batch


def test_the_fallback_restores_both_lists_of_a_sorting_allocator(monkeypatch):
    h, batch = _sorting_allocator_short_of_free_pages()
    a = h.allocator
    before = (a.free_pages.clone(), a.release_pages.clone())
    draft_preprocess_decode(h.worker, batch, Mode.ON)
    assert h.mismatched_branches([int(r) for r in batch.req_pool_indices]) == []
    assert torch.equal(a.free_pages, before[0]) and torch.equal(a.release_pages, before[1])
    # the same step with a restore that forgets release_pages: the check above must see it
    h, batch = _sorting_allocator_short_of_free_pages()
    a = h.allocator
    before = (a.free_pages.clone(), a.release_pages.clone())
    monkeypatch.setattr(type(a), "restore_state", lambda self, state: setattr(self, "free_pages", state[0]))
    draft_preprocess_decode(h.worker, batch, Mode.ON)
    assert not (torch.equal(a.free_pages, before[0]) and torch.equal(a.release_pages, before[1]))


def test_allocation_failure_leaves_state_untouched():
    h = PagedTreeHarness(16, 8, 5, num_tokens=256, head_num=1, head_dim=8, max_reqs=8)
    h.tree_cache.pretty_print = lambda: None  # SGLang's OOM path prints the tree
    h.tree_cache.available_and_evictable_str = lambda: "test pool"
    rows = [h.add_request(n) for n in (100, 90)]
    free_pages = h.allocator.free_pages.clone()
    release = h.allocator.release_pages.clone()
    r2t = h.req_to_token_pool.req_to_token.clone()
    batch = h.batch(rows)
    with pytest.raises(RuntimeError, match="out of memory"):
        draft_preprocess_decode(h.worker, batch, Mode.ON)
    assert torch.equal(h.allocator.free_pages, free_pages)
    assert torch.equal(h.allocator.release_pages, release)
    assert torch.equal(h.req_to_token_pool.req_to_token, r2t)
    assert batch.out_cache_loc is None


# --- pools we do not copy ourselves ------------------------------------------------------

def _recording_pool(page=16):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    class RecordingPool(MHATokenToKVPool):
        def move_kv_cache(self, tgt_loc, src_loc):
            self.moves.append((tgt_loc, src_loc))

    pool = RecordingPool(1024, page, torch.bfloat16, 1, 8, 1, "cpu", False)
    pool.moves = []
    return pool


def test_move_pairs_forwards_sentinel_free_locations_to_other_pools():
    pool = _recording_pool()
    assert kv_copy.pool_buffers(pool) is None  # a subclass is not ours to copy
    tgt = torch.tensor([40, -1, 41, -1, 42], dtype=torch.int64)
    src = torch.tensor([20, -1, 21, 22, -1], dtype=torch.int64)
    kv_copy.move_pairs(pool, tgt, src)
    assert len(pool.moves) == 1
    t, s = pool.moves[0]
    assert t.tolist() == [40, 0, 41, 0, 42] and s.tolist() == [20, 0, 21, 22, 0]
    assert not kv_copy.is_disjoint_pairs(t)
    assert tgt.tolist() == [40, -1, 41, -1, 42]  # the caller's buffer is not modified


def test_move_kv_cache_hook_untagged_calls_original_unchanged():
    pool = _recording_pool()
    seen = []

    def original(p, t, s):
        seen.append((p, t, s))
        return "orig"

    tgt, src = torch.tensor([5, -1]), torch.tensor([3, 4])
    assert kv_copy.move_kv_cache_hook(original, pool, tgt, src) == "orig"
    assert len(seen) == 1 and seen[0][0] is pool and seen[0][1] is tgt and seen[0][2] is src

    # tagged pairs on a pool we do not copy: the original, without sentinels
    seen.clear()
    kv_copy.move_kv_cache_hook(original, pool, kv_copy.mark_disjoint_pairs(torch.tensor([5, -1])), src)
    assert seen[0][1].tolist() == [5, 0] and seen[0][2].tolist() == [3, 4]


def _plain_pool(copy_config=True, layers=2):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    pool = MHATokenToKVPool(1024, 16, torch.bfloat16, 2, 8, layers, "cpu", False,
                            enable_kv_cache_copy=copy_config)
    g = torch.Generator().manual_seed(0)
    for b in pool.k_buffer + pool.v_buffer:
        v = b.view(torch.uint8)
        v.copy_(torch.randint(0, 256, v.shape, dtype=torch.uint8, generator=g))
    return pool


# the post-verify compaction's shape: accepted tree positions onto the row's first slots
COMPACTION = (torch.tensor([300, 301, 302, 400, 401]), torch.tensor([300, 302, 305, 400, 403]))


def test_move_kv_cache_hook_untagged_plain_pool_moves_like_sglang():
    """Untagged moves (the paged verify's compaction) get SGLang's bytes without its per-count compiles."""
    from sglang.srt.mem_cache.memory_pool import move_kv_cache_native

    pool = _plain_pool()
    tgt, src = COMPACTION
    want_k, want_v = [b.clone() for b in pool.k_buffer], [b.clone() for b in pool.v_buffer]
    move_kv_cache_native(want_k, want_v, tgt, src)
    seen = []
    assert kv_copy.move_kv_cache_hook(lambda *a: seen.append(a), pool, tgt, src) is None
    assert seen == []
    for got, want in zip(pool.k_buffer + pool.v_buffer, want_k + want_v):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


@pytest.mark.parametrize("case", ["no_copy_config", "native_env"])
def test_move_kv_cache_hook_untagged_keeps_sglang_when_it_would_not_use_its_kernel(monkeypatch, case):
    pool = _plain_pool(copy_config=case != "no_copy_config")
    if case == "native_env":
        monkeypatch.setenv("SGLANG_NATIVE_MOVE_KV_CACHE", "1")
    seen = []
    kv_copy.move_kv_cache_hook(lambda *a: seen.append(a), pool, *COMPACTION)
    assert len(seen) == 1


def test_move_kv_cache_hook_tagged_plain_pool_uses_kernel():
    h, rows = build(16, 4, 3, [5])
    seen = []
    last = h.requests[rows[0]]
    tgt = kv_copy.mark_disjoint_pairs(torch.tensor([100, 101, -1, 102], dtype=torch.int64))
    src = torch.tensor([int(last[0]), int(last[1]), -1, int(last[2])], dtype=torch.int64)
    kv_copy.move_kv_cache_hook(lambda *a: seen.append(a), h.kv_pool, tgt, src)
    assert seen == []
    for b in kv_bytes(h):
        assert torch.equal(b[[100, 101, 102]], b[src[[0, 1, 3]]])


# --- the allocator call: our one-launch inputs against SGLang's helper ---------------------

def sglang_allocate_tree_extension(h, batch):
    """The allocation of SGLang's ``_draft_preprocess_decode`` (page > 1, topk > 1), transcribed."""
    from sglang.srt.mem_cache.common import alloc_paged_token_slots_extend
    from sglang.srt.speculative.spec_utils import get_last_loc_large_page_size_large_top_k

    page, topk, steps = h.page_size, h.topk, h.steps
    prefix_lens, seq_lens, last_loc, _, _, _ = get_last_loc_large_page_size_large_top_k(
        batch.req_to_token_pool.req_to_token, batch.req_pool_indices, batch.seq_lens, steps, topk, page)
    prefix_lens_cpu = batch.seq_lens_cpu
    pages_cpu = (prefix_lens_cpu % page + steps + page - 1) // page
    seq_lens_cpu = prefix_lens_cpu // page * page + pages_cpu * (page * topk)
    extend_num_tokens = torch.sum(seq_lens_cpu - prefix_lens_cpu).item()
    return alloc_paged_token_slots_extend(batch.tree_cache, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu,
                                          last_loc, extend_num_tokens, backup_state=True)


def recording_alloc_extend(h):
    seen = []
    real = h.allocator.alloc_extend

    def alloc_extend(*args):
        seen.append([a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        return real(*args)

    h.allocator.alloc_extend = alloc_extend
    return seen


ALLOC_CASES = [
    (16, 4, 3, [5, 33, 17, 48, 2, 31]),
    (64, 8, 5, [1, 63, 64, 65, 200, 128]),
    (4, 10, 8, [4, 7, 1, 9]),
    (128, 2, 1, [127, 129, 1000]),
]


def twin_harnesses(page, topk, steps, lens, **kw):
    """Two identical harnesses, on a free list that earlier finished requests left out of order."""
    harnesses = []
    for _ in range(2):
        h = PagedTreeHarness(page, topk, steps, **dict(SMALL, **kw))
        early = [h.add_request(n) for n in (3 * page + 1, page, 2 * page - 1)]
        rows = [h.add_request(n) for n in lens]
        for r in early[::-1]:
            h.finish_request(r)
        harnesses.append((h, rows))
    (ours_h, rows), (theirs_h, rows2) = harnesses
    assert rows == rows2 and torch.equal(ours_h.allocator.free_pages, theirs_h.allocator.free_pages)
    return ours_h, theirs_h, rows


def _boom(*args, **kwargs):
    raise AssertionError("the fast path called SGLang's allocation")


@pytest.mark.parametrize("page,topk,steps,lens", ALLOC_CASES)
def test_fast_path_equals_sglangs_allocation_and_changes_nothing(monkeypatch, page, topk, steps, lens):
    """SGLang's own paged allocator, debug mode off, room in the free list: the draft step assigns
    the slots SGLang's allocation hands out, read in the assignment's one launch without eviction,
    backup, alloc_extend, restore or the free-page kernel; the allocator keeps its very tensors.
    SGLang's path, once restored, also leaves them as before."""
    from helpers.interpreter_order import capture_specializations
    from sglang_eagle_paged.adapters.v1 import sglang_api as compat
    from sglang_eagle_paged.kernels import assign_tree_draft_slots
    from sglang_eagle_paged.kernels.assign import _assign_tree_draft_slots_kernel
    from helpers.tree_alloc import _tree_alloc_kernel
    from sglang_eagle_paged.kernels.tree_extension import _tree_extension_kernel

    ours_h, theirs_h, rows = twin_harnesses(page, topk, steps, lens)
    a = ours_h.allocator
    assert not a.debug_mode
    free, release = a.free_pages, a.release_pages
    free_copy, release_copy = free.clone(), release.clone()
    ours_args = recording_alloc_extend(ours_h)
    monkeypatch.setattr(a, "backup_state", _boom)
    monkeypatch.setattr(a, "restore_state", _boom)
    monkeypatch.setattr(compat, "alloc_paged_token_slots_extend", _boom)
    ours_h.tree_cache.evict = _boom

    launched = [capture_specializations(k) for k in (_assign_tree_draft_slots_kernel, _tree_alloc_kernel,
                                                     _tree_extension_kernel)]
    with launched[0] as assign_specs, launched[1] as alloc_specs, launched[2] as ext_specs:
        ours, _, _ = run_ours(ours_h, rows)
    assert len(assign_specs) == 1 and alloc_specs == [] and ext_specs == []  # one launch, no slot tensor
    assert ours_args == []
    assert a.free_pages is free and a.release_pages is release
    assert torch.equal(free, free_copy) and torch.equal(release, release_copy)
    monkeypatch.undo()

    t = theirs_h.allocator
    theirs_batch = theirs_h.batch(rows)
    alloc_loc, theirs_state = sglang_allocate_tree_extension(theirs_h, theirs_batch)
    assert t.free_pages.numel() < free_copy.numel()  # SGLang's path took pages ...
    t.restore_state(theirs_state)
    assert torch.equal(t.free_pages, free_copy) and torch.equal(t.release_pages, release_copy)  # ... and gave them back
    theirs = assign_tree_draft_slots(theirs_batch.req_pool_indices, theirs_h.req_to_token_pool.req_to_token,
                                     theirs_batch.seq_lens, alloc_loc, page, topk, steps)
    assert torch.equal(ours.out_cache_loc, theirs.out_cache_loc)
    assert torch.equal(ours_h.req_to_token_pool.req_to_token, theirs_h.req_to_token_pool.req_to_token)


@pytest.mark.parametrize("page,topk,steps,lens", ALLOC_CASES)
def test_fast_path_draft_step_equals_fallbacks(page, topk, steps, lens):
    """The whole draft step: the same rows, slots and KV whichever path allocated."""
    fast_h, slow_h, rows = twin_harnesses(page, topk, steps, lens)
    slow_h.allocator.debug_mode = True  # SGLang's checked allocation: the fallback
    fast, free, prefix = run_ours(fast_h, rows)
    slow, _, _ = run_ours(slow_h, rows)
    check_step(fast_h, rows, fast, free, prefix)
    assert torch.equal(fast.out_cache_loc, slow.out_cache_loc)
    assert torch.equal(fast_h.req_to_token_pool.req_to_token, slow_h.req_to_token_pool.req_to_token)
    assert all(torch.equal(x, y) for x, y in zip(kv_bytes(fast_h), kv_bytes(slow_h)))


@pytest.mark.parametrize("page,topk,steps,lens", ALLOC_CASES)
def test_fallback_allocation_equals_sglangs(page, topk, steps, lens):
    """Where the fast path does not apply (here: the allocator's debug mode), SGLang allocates:
    same allocator inputs, same ``out_cache_loc``, same backed-up and post-allocation state."""
    ours_h, theirs_h, rows = twin_harnesses(page, topk, steps, lens)
    for h in (ours_h, theirs_h):
        h.allocator.debug_mode = True
    ours_args, theirs_args = recording_alloc_extend(ours_h), recording_alloc_extend(theirs_h)

    from sglang_eagle_paged.adapters.v1.draft_preprocess import _allocate_tree_extension

    ours, ours_state = _allocate_tree_extension(ours_h.worker, ours_h.batch(rows))
    theirs, theirs_state = sglang_allocate_tree_extension(theirs_h, theirs_h.batch(rows))
    assert torch.equal(ours, theirs)
    assert len(ours_args) == len(theirs_args) == 1 and len(ours_args[0]) == len(theirs_args[0])
    for a, b in zip(ours_args[0], theirs_args[0]):
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and a.device == b.device and torch.equal(a, b)
        else:
            assert a == b
    for a, b in zip(ours_state, theirs_state):
        assert torch.equal(a, b)
    assert ours_h.allocator.free_pages.numel() < ours_state[0].numel()  # pages were taken
    assert torch.equal(ours_h.allocator.free_pages, theirs_h.allocator.free_pages)
    assert torch.equal(ours_h.allocator.release_pages, theirs_h.allocator.release_pages)


# --- when the fast path steps aside --------------------------------------------------------

FALLBACK_CASE = (16, 4, 3, [5, 33, 17, 48, 2, 31])


def _exact_need(h, rows):
    from sglang_eagle_paged.tree_layout import new_pages

    lens = torch.tensor([len(h.requests[r]) for r in rows])
    return int(new_pages(lens, h.page_size, h.topk, h.steps).sum())


def _leave_free_pages(h, n):
    """Allocate everything but ``n`` free pages; returns the filler slots."""
    filler = h.allocator.alloc(h.allocator.available_size() - n * h.page_size)
    assert filler is not None and len(h.allocator.free_pages) == n
    return filler


def _evicting_tree_cache(h, held):
    """A radix-cache stand-in whose eviction gives ``held`` back to the allocator."""
    evictions = []

    def evict(params):
        evictions.append(params.num_tokens)
        if held:
            h.allocator.free(held.pop())

    h.tree_cache.is_chunk_cache = lambda: False
    h.tree_cache.evict = evict
    return evictions


@pytest.mark.parametrize("path", ["fast", "fallback"])
def test_exact_need_decides_not_sglangs_over_estimate(path, monkeypatch, caplog):
    """Free pages exactly the need: the fast path, without the eviction SGLang's over-estimate
    (one more page per request) asks for. One page fewer: SGLang's path, which evicts."""
    page, topk, steps, lens = FALLBACK_CASE
    h, rows = build(page, topk, steps, lens)
    need = _exact_need(h, rows)
    filler = _leave_free_pages(h, need if path == "fast" else need - 1)
    evictions = _evicting_tree_cache(h, [filler[:page]])
    restores = []
    real_restore = h.allocator.restore_state
    h.allocator.restore_state = lambda state: (restores.append(state), real_restore(state))
    from sglang_eagle_paged.adapters.v1 import draft_preprocess as worker

    monkeypatch.setattr(worker, "_reported_fallbacks", set())
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        batch, free, prefix = run_ours(h, rows)
    check_step(h, rows, batch, free + (page if path == "fallback" else 0), prefix)
    said = [r.getMessage() for r in caplog.records if "allocated by SGLang" in r.getMessage()]
    assert len(said) == (0 if path == "fast" else 1) and all("free list is short" in m for m in said)
    if path == "fast":
        assert evictions == [] and restores == []
    else:
        assert evictions == [int(extend_lens(torch.tensor(lens), page, topk, steps).sum()) + len(lens) * page]
        assert len(restores) == 1 and restores[0] is not None


def test_too_few_free_pages_raises_sglangs_error():
    page, topk, steps, lens = FALLBACK_CASE
    h, rows = build(page, topk, steps, lens)
    _leave_free_pages(h, _exact_need(h, rows) - 1)
    h.tree_cache.available_and_evictable_str = lambda: "test pool"
    free, release = h.allocator.free_pages.clone(), h.allocator.release_pages.clone()
    batch = h.batch(rows)
    with pytest.raises(RuntimeError, match="out of memory"):
        draft_preprocess_decode(h.worker, batch, Mode.ON)
    assert torch.equal(h.allocator.free_pages, free) and torch.equal(h.allocator.release_pages, release)
    assert batch.out_cache_loc is None


@pytest.mark.parametrize("why", ["debug_mode", "subclass"])
def test_fallback_for_debug_mode_and_other_allocators(why, monkeypatch, caplog):
    """SGLang's allocation (its debug checks; a subclass's own alloc_extend) is kept."""
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator

    page, topk, steps, lens = FALLBACK_CASE
    h, rows = build(page, topk, steps, lens)
    if why == "debug_mode":
        h.allocator.debug_mode = True
    else:
        class Allocator(PagedTokenToKVPoolAllocator):
            pass

        h.allocator.__class__ = Allocator
    seen = recording_alloc_extend(h)
    from sglang_eagle_paged.adapters.v1 import draft_preprocess as worker

    monkeypatch.setattr(worker, "_reported_fallbacks", set())
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        batch, free, prefix = run_ours(h, rows)
        _allocate_tree_extension_and_restore(h, rows)  # a second round: not logged again
    assert len(seen) == 2
    check_step(h, rows, batch, free, prefix)
    said = [r.getMessage() for r in caplog.records if "allocated by SGLang" in r.getMessage()]
    assert len(said) == 1 and ("debug mode" if why == "debug_mode" else "Allocator is not") in said[0]


def _allocate_tree_extension_and_restore(h, rows):
    """The allocation of a draft round, as the step decides it (the refusal reported again)."""
    from sglang_eagle_paged.adapters.v1.draft_preprocess import _allocate_tree_extension, _readable_free_pages

    batch = h.batch(rows)
    assert _readable_free_pages(h.worker, batch) is None
    _, state = _allocate_tree_extension(h.worker, batch)
    h.allocator.restore_state(state)
