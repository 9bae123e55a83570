"""The paged verify's page-list free (verify_free.py) against SGLang's slot list: same kept slots, same
freed pages, each listed once, on synthetic verifies and on SGLang's real allocator, replayed as
``eagle_info`` makes the calls (the source check below keeps the replay honest)."""

import inspect
import logging
import os
import re

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

from sglang_eagle_paged.adapters.v1 import sglang_api as compat  # noqa: E402
from sglang_eagle_paged.adapters.v1 import verify as verify_compaction  # noqa: E402
from sglang_eagle_paged.adapters.v1 import verify as verify_free  # noqa: E402
from sglang_eagle_paged.tools.harness import PagedTreeHarness, accepted_rows, paged_verify_inputs  # noqa: E402
from sglang_eagle_paged.adapters.common.fault_switch import FaultSwitch  # noqa: E402
from sglang_eagle_paged.kernels import verify_bookkeeping  # noqa: E402
from sglang_eagle_paged.kernels.reference import split_verify_slots_ref  # noqa: E402
from sglang_eagle_paged.kernels.verify_bookkeeping import (  # noqa: E402
    BLOCK_BS, BLOCK_T, split_verify_slots, src_and_free_counts, src_and_free_pages)

eagle_info = pytest.importorskip("sglang.srt.speculative.eagle_info")
SGLANG_SPLIT = compat.resolve(compat.TARGET_CACHE_LOC_KERNEL)


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.setattr(verify_free, "_state", {"pages": False, "split": None, "pending": None})
    monkeypatch.setattr(verify_free.TargetCacheLoc, "original", SGLANG_SPLIT)
    monkeypatch.setitem(verify_compaction._state, "kernel", True)
    monkeypatch.setattr(verify_free, "_switched_off", FaultSwitch(verify_free._switched_off.message))


def _page_list(args, draft_tokens, page):
    src, tgt, page_counts, slot_counts = src_and_free_pages(*args, draft_tokens, page)
    listed = torch.empty(int(page_counts.sum()), dtype=torch.int64)
    split_verify_slots(tgt, listed, args[3], page_counts, slot_counts, args[1], draft_tokens, page)
    return src, tgt, page_counts, slot_counts, listed


@pytest.mark.parametrize("bs,draft_tokens,page", [
    (1, 64, 64), (3, 64, 64), (8, 16, 128), (7, 16, 4), (12, 64, 16), (5, 40, 256), (9, 6, 2), (4, 65, 64),
    (6, 4, 8),
])
def test_page_list_frees_what_sglangs_slot_list_frees(bs, draft_tokens, page):
    gen = torch.Generator().manual_seed(bs * 100 + page)
    spilled = 0
    for _ in range(6):
        args = paged_verify_inputs(gen, bs, draft_tokens, page)
        src, tgt, page_counts, slot_counts, listed = _page_list(args, draft_tokens, page)
        want_src, want_tgt, want_slots = verify_free.sglang_split(*args, draft_tokens, page)
        assert torch.equal(src, want_src) and torch.equal(tgt, want_tgt)
        assert torch.equal(slot_counts, src_and_free_counts(*args, draft_tokens, page)[2].long())
        want_pages = torch.unique(want_slots // page)
        assert torch.equal((listed // page).sort().values, want_pages)
        assert torch.equal(listed % page, torch.zeros_like(listed))  # first slots of their pages
        assert int(page_counts.sum()) == want_pages.numel()  # so SGLang's .item() sizes the list exactly
        spilled += want_pages.numel()
    assert spilled  # not vacuous: some verify freed a page


def test_long_rows_many_requests_and_a_strided_count():
    """Past one block of earlier requests, and rows that keep and free more than one tile."""
    gen = torch.Generator().manual_seed(5)
    bs, draft_tokens, page = BLOCK_BS + 9, 2 * BLOCK_T + 7, 2
    seq_lens, out, accept, correct = paged_verify_inputs(gen, bs, draft_tokens, page)
    assert int(correct.max()) + 1 > BLOCK_T
    strided = torch.stack([correct, torch.zeros_like(correct)], dim=1)[:, 0]
    args = (seq_lens, out, accept, strided)
    src, tgt, page_counts, _, listed = _page_list(args, draft_tokens, page)
    assert int(page_counts.max()) > BLOCK_T
    want_src, want_tgt, want_slots = verify_free.sglang_split(seq_lens, out, accept, correct, draft_tokens, page)
    assert torch.equal(tgt, want_tgt)
    assert torch.equal((listed // page).sort().values, torch.unique(want_slots // page))


def test_the_check_catches_a_wrong_page_list(monkeypatch):
    assert verify_free.free_check("cpu", 64, 64) is None
    from sglang_eagle_paged.kernels import verify_bookkeeping

    real = verify_bookkeeping.split_verify_slots

    def first_page_twice(tgt, listed, *rest):
        real(tgt, listed, *rest)
        if listed.numel() > 1:
            listed[1] = listed[0]

    monkeypatch.setattr(verify_bookkeeping, "split_verify_slots", first_page_twice)
    assert verify_free.free_check("cpu", 64, 64) == "its freed pages differ from SGLang's"


# --- eagle_info's calls, replayed ---------------------------------------------------------------

def _flat(src: str) -> str:
    return re.sub(r"\s+", "", src)


def test_the_replay_below_is_how_this_release_frees():
    src = _flat(inspect.getsource(eagle_info.EagleVerifyInput.verify))
    calls = ["src_cache_loc,tgt_cache_loc,to_free_num_slots=get_src_tgt_cache_loc(batch.seq_lens,"
             "batch.out_cache_loc,accept_index,num_correct_drafts,self.draft_token_num,page_size,)",
             "to_free_slots=torch.empty((to_free_num_slots.sum().item(),),dtype=torch.int64,"
             "device=to_free_num_slots.device,)",
             "get_target_cache_loc[(bs,)](tgt_cache_loc,to_free_slots,num_correct_drafts,to_free_num_slots,"
             "batch.out_cache_loc,self.draft_token_num,next_power_of_2(self.draft_token_num),next_power_of_2(bs),)",
             "token_to_kv_pool_allocator.free(to_free_slots)"]
    at = [src.find(c) for c in calls]
    assert -1 not in at and at == sorted(at)


def _serve_verify(h, rows, draft_tokens, gen, split_kernel, free):
    """prepare_for_verify's paged allocation, then the verify's split and free as eagle_info calls them."""
    batch = h.batch(rows)
    bs, page = len(rows), h.page_size
    prefix_cpu = batch.seq_lens_cpu
    last_loc = h.req_to_token_pool.req_to_token[batch.req_pool_indices, prefix_cpu - 1].long()
    out_cache_loc = compat.alloc_paged_token_slots_extend(
        h.tree_cache, batch.seq_lens, prefix_cpu, batch.seq_lens + draft_tokens, prefix_cpu + draft_tokens,
        last_loc, bs * draft_tokens)
    # about half the requests accept no draft, the rest up to the whole tree
    num_correct = (torch.randint(0, draft_tokens, (bs,), generator=gen, dtype=torch.int32)
                   * torch.randint(0, 2, (bs,), generator=gen, dtype=torch.int32))
    accept_index = accepted_rows(gen, num_correct, draft_tokens)
    src_cache_loc, tgt_cache_loc, to_free_num_slots = verify_compaction.src_tgt_cache_loc(
        batch.seq_lens, out_cache_loc, accept_index, num_correct, draft_tokens, page)
    to_free_slots = torch.empty((to_free_num_slots.sum().item(),), dtype=torch.int64)
    split_kernel[(bs,)](tgt_cache_loc, to_free_slots, num_correct, to_free_num_slots, out_cache_loc, draft_tokens,
                        triton.next_power_of_2(draft_tokens), triton.next_power_of_2(bs))
    allocated = h.allocator.available_size()
    free(to_free_slots)
    return tgt_cache_loc, h.allocator.available_size() - allocated


def _hooked_free(h):
    original = type(h.allocator).free
    return lambda index: verify_free.free_hook(original, h.allocator, index)


@pytest.mark.parametrize("page,draft_tokens,need_sort", [(64, 64, False), (16, 24, True), (128, 16, False)])
def test_real_allocator_ends_with_the_same_free_pages(page, draft_tokens, need_sort):
    stock, ours = (PagedTreeHarness(page, 4, 3, num_tokens=64 * page) for _ in range(2))
    for h in (stock, ours):
        h.allocator.need_sort = need_sort
        h.allocator.clear()
    # the last prefix ends 3 slots before a page boundary: its verify spills into a page it may free
    lens = torch.randint(1, 3 * page, (5,), generator=torch.Generator().manual_seed(page)).tolist() + [page - 3]
    rows = {id(h): [h.add_request(n) for n in lens] for h in (stock, ours)}
    freed = 0
    for round_ in range(4):
        verify_free._state["pages"] = False
        want, freed_stock = _serve_verify(stock, rows[id(stock)], draft_tokens, torch.Generator().manual_seed(round_),
                                          SGLANG_SPLIT, stock.allocator.free)
        verify_free._state["pages"] = True
        got, freed_ours = _serve_verify(ours, rows[id(ours)], draft_tokens, torch.Generator().manual_seed(round_),
                                        verify_free.TargetCacheLoc, _hooked_free(ours))
        assert torch.equal(got, want) and freed_ours == freed_stock
        for attr in ("free_pages", "release_pages"):
            a, b = getattr(stock.allocator, attr), getattr(ours.allocator, attr)
            assert torch.equal(a.sort().values, b.sort().values), attr
            assert torch.unique(b).numel() == b.numel()
        assert verify_free._state["pending"] is None  # taken by the free
        freed += freed_stock
    assert freed  # not vacuous: pages came back


def test_free_takes_only_the_list_it_was_handed(monkeypatch):
    """Any other tensor, a free group and debug mode all go through SGLang's own free."""
    h = PagedTreeHarness(16, 4, 3, num_tokens=32 * 16)
    calls = []
    original = type(h.allocator).free

    def counted(allocator, index):
        calls.append(index)
        return original(allocator, index)

    taken = torch.unique(h.allocator.alloc(4 * 16) // 16)  # pages in use, which a free may return
    pages_before = h.allocator.free_pages.clone()
    listed = taken[[2, 0]] * 16
    verify_free._state["pending"] = listed
    verify_free.free_hook(counted, h.allocator, listed.clone())  # equal, but not the one handed over
    assert len(calls) == 1 and verify_free._state["pending"] is None
    h.allocator.free_pages = pages_before.clone()
    for setting in ("is_not_in_free_group", "debug_mode"):
        monkeypatch.setattr(h.allocator, setting, setting == "debug_mode")
        verify_free._state["pending"] = listed
        verify_free.free_hook(counted, h.allocator, listed)
        monkeypatch.undo()
    assert len(calls) == 3
    h.allocator.free_pages = pages_before.clone()
    verify_free._state["pending"] = listed
    verify_free.free_hook(counted, h.allocator, listed)
    assert len(calls) == 3
    assert h.allocator.free_pages[:2].tolist() == taken[[2, 0]].tolist()  # as listed, not sorted
    assert torch.equal(h.allocator.free_pages[2:], pages_before)


def test_split_without_our_counts_is_sglangs_kernel():
    """Counts that did not come from the page-list hook (another caller, the hook off) are slot counts."""
    calls = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args: calls.append((grid, args))

    verify_free.TargetCacheLoc.original = Recorder()
    verify_free._state["split"] = (torch.zeros(2), torch.zeros(2), 64)
    verify_free.TargetCacheLoc[(2,)](*[torch.zeros(2)] * 5, 64, 64, 2)
    assert calls and calls[0][0] == (2,) and calls[0][1][-3:] == (64, 64, 2)
    assert verify_free._state["pending"] is None


# --- start-up choice ----------------------------------------------------------------------------

def _in_place(monkeypatch):
    monkeypatch.setattr(verify_free, "hooks_in_place", lambda: None)


def test_warm_up_turns_it_on_for_sglangs_allocator(monkeypatch):
    _in_place(monkeypatch)
    verify_free.warm_up_free("cpu", 64, 64, PagedTreeHarness(64, 4, 3, num_tokens=16 * 64).allocator, True)
    assert verify_free.page_list_enabled()
    args = paged_verify_inputs(torch.Generator().manual_seed(2), 3, 64, 64)
    _, _, counts = verify_compaction.src_tgt_cache_loc(*args, 64, 64)
    assert torch.equal(counts, verify_free._state["split"][0])  # the hook now counts pages


@pytest.mark.parametrize("why", ["env", "allocator", "eager", "hooks", "check"])
def test_warm_up_keeps_sglangs_free(monkeypatch, caplog, why):
    _in_place(monkeypatch)
    allocator = PagedTreeHarness(64, 4, 3, num_tokens=16 * 64).allocator
    requested = why != "env"  # SGLANG_EAGLE_PAGED_VERIFY_FREE=off
    if why == "env":
        pass
    elif why == "allocator":
        allocator = type("OtherAllocator", (), {})()
    elif why == "eager":
        monkeypatch.setitem(verify_compaction._state, "kernel", False)
    elif why == "hooks":
        monkeypatch.setattr(verify_free, "hooks_in_place", lambda: "get_target_cache_loc is not replaced")
    else:
        monkeypatch.setattr(verify_free, "free_check", lambda *a: "its freed pages differ from SGLang's")
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        verify_free.warm_up_free("cpu", 64, 64, allocator, requested)
    assert not verify_free.page_list_enabled()
    assert "verify frees SGLang's slot list" in caplog.text
    args = paged_verify_inputs(torch.Generator().manual_seed(2), 3, 64, 64)
    _, _, counts = verify_compaction.src_tgt_cache_loc(*args, 64, 64)
    assert torch.equal(counts, src_and_free_counts(*args, 64, 64)[2])  # slot counts, as SGLang's


def test_hooks_are_left_out_when_turned_off():
    from sglang_eagle_paged.adapters import v1
    from sglang_eagle_paged.settings import VERIFY_FREE, parse

    def targets(raw):
        return {h.target for h in v1.hooks(parse({VERIFY_FREE: raw}))}

    free = {compat.TARGET_CACHE_LOC_KERNEL, compat.PAGED_FREE}
    assert not targets("0") & free
    assert targets("1") >= free
    assert {(h.target, h.kind, h.required) for h in verify_free.verify_free_hooks()} == {
        (compat.TARGET_CACHE_LOC_KERNEL, "replace", False), (compat.PAGED_FREE, "around", False)}
    assert verify_free.TargetCacheLoc.original is SGLANG_SPLIT


def test_hooks_in_place_reports_what_is_missing():
    assert verify_free.hooks_in_place() == "sglang.srt.speculative.eagle_info.get_target_cache_loc is not ours"


@pytest.mark.parametrize("bs,draft_tokens,page", [(3, 64, 64), (7, 16, 4), (5, 40, 256), (9, 6, 2)])
def test_the_split_kernel_matches_its_plain_torch_reference(bs, draft_tokens, page):
    gen = torch.Generator().manual_seed(bs + page)
    for _ in range(4):
        args = paged_verify_inputs(gen, bs, draft_tokens, page)
        src, tgt, page_counts, slot_counts, listed = _page_list(args, draft_tokens, page)
        ref_tgt, ref_listed = torch.full_like(tgt, -1), torch.full_like(listed, -1)
        split_verify_slots_ref(ref_tgt, ref_listed, args[3], page_counts, slot_counts, args[1], draft_tokens, page)
        assert torch.equal(ref_tgt, tgt) and torch.equal(ref_listed, listed)


def _fails(calls_before_fault):
    """A stand-in for one of OUR kernels (never SGLang's): serves ``calls_before_fault`` calls, then raises."""
    seen = []

    def wrap(real):
        def fn(*args, **kwargs):
            seen.append(1)
            if len(seen) > calls_before_fault:
                raise RuntimeError("injected fault in our kernel")
            return real(*args, **kwargs)
        return fn
    return wrap


@pytest.mark.parametrize("where", ["counts", "split", "free"])
def test_a_fault_of_ours_mid_serving_ends_the_verify_as_sglangs_and_switches_ours_off(monkeypatch, caplog, where):
    """Each step of our page-list chain failing at its second verify: that verify keeps and frees what
    SGLang's does (the real 0.5.12.post1 allocator, eagle_info's calls replayed), later verifies too,
    through SGLang's slot counts, split and free; one ERROR line."""
    page, draft_tokens = 16, 24
    stock, ours = (PagedTreeHarness(page, 4, 3, num_tokens=64 * page) for _ in range(2))
    if where == "counts":
        monkeypatch.setattr(verify_bookkeeping, "src_and_free_pages", _fails(1)(src_and_free_pages))
    elif where == "split":
        monkeypatch.setattr(verify_bookkeeping, "split_verify_slots", _fails(1)(split_verify_slots))
    else:
        monkeypatch.setattr(compat, "release_free_pages", _fails(1)(compat.release_free_pages))
    lens = [5, 17, page - 3, 2 * page + 1]
    rows = {id(h): [h.add_request(n) for n in lens] for h in (stock, ours)}
    stock_free = stock.allocator.free
    freed = 0
    with caplog.at_level(logging.ERROR, logger="sglang_eagle_paged"):
        ours_mode = True  # page lists on at start-up; what serving leaves it at after each verify
        for round_ in range(4):
            verify_free._state["pages"] = False  # the stock replay shares the module's state: slot lists
            want, freed_stock = _serve_verify(stock, rows[id(stock)], draft_tokens,
                                              torch.Generator().manual_seed(round_), SGLANG_SPLIT, stock_free)
            verify_free._state["pages"] = ours_mode
            got, freed_ours = _serve_verify(ours, rows[id(ours)], draft_tokens,
                                            torch.Generator().manual_seed(round_), verify_free.TargetCacheLoc,
                                            _hooked_free(ours))
            assert torch.equal(got, want) and freed_ours == freed_stock, round_
            for attr in ("free_pages", "release_pages"):
                a, b = getattr(stock.allocator, attr), getattr(ours.allocator, attr)
                assert torch.equal(a.sort().values, b.sort().values), (round_, attr)
            assert verify_free._state["pending"] is None
            ours_mode = verify_free._state["pages"]
            freed += freed_stock
    assert freed  # not vacuous: pages came back
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "injected fault in our kernel" in errors[0].getMessage()
    assert verify_free._switched_off and not verify_free.page_list_enabled() and not verify_free.kernel_in_use()
