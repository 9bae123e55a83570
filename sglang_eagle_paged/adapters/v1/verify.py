"""The slot bookkeeping and the free of SGLang's paged tree verify (v1 generation).

**Bookkeeping.** After verifying a tree at page > 1 and topk > 1, SGLang keeps each request's
accepted tokens at the front of its verify slots and frees what lies past the page that holds
the last of them. ``spec_utils.get_src_tgt_cache_loc`` computes the move's source slots, an
output buffer for the targets and the per-request count of slots to free: a gather and a
handful of elementwise ops under ``torch.compile(dynamic=True)``, whose guards cost host time
on every verify round. The REPLACE hook :func:`src_tgt_cache_loc` computes them in one Triton
launch (:func:`.kernels.verify_bookkeeping.src_and_free_counts`), compiled and checked against
the eager ops at worker start-up (:func:`warm_up_bookkeeping`); should either fail, the process
serves with the eager ops and says so once, rather than failing a verify mid-serving.

**Free.**
After a tree verify at page > 1 and topk > 1, SGLang's ``EagleVerifyInput.verify`` frees each
request's verify slots past the page holding its last accepted token::

    src, tgt, to_free_num_slots = get_src_tgt_cache_loc(...)       # our REPLACE hook
    to_free_slots = torch.empty((to_free_num_slots.sum().item(),))  # host sync 1
    get_target_cache_loc[(bs,)](tgt, to_free_slots, ..., to_free_num_slots, out_cache_loc, ...)
    allocator.free(to_free_slots)  # torch.unique(slots // page): a sort, host sync 2

With 64 draft tokens at page 64 a verify always reaches into a page it then frees, so that
second sync and its sort run in nearly every round; at page 1 there are none of them.
Here the three steps agree on counting pages instead of slots:

- the bookkeeping hook returns pages to free per request (so sync 1 sizes a page list), and
  remembers the slot counts beside them;
- :class:`TargetCacheLoc` (REPLACE for ``get_target_cache_loc``) lists the first slot of each
  freed page, already distinct (:func:`.kernels.verify_bookkeeping.split_verify_slots`);
- :func:`free_hook` (AROUND ``PagedTokenToKVPoolAllocator.free``) returns that list's pages to
  the free list without ``torch.unique``.

Each step checks that it got what the one before it made (by object identity) and otherwise
does exactly what SGLang does. The list holds valid slots, one per page, so SGLang's own free
(a free group, debug mode) still frees the right pages. A fault of ours while serving (the fault
rule) ends that verify as SGLang's would, each step by its own means, and SGLang's steps serve
from then on. The mode is chosen once, at worker
start-up (:func:`warm_up_free`): only on SGLang's own paged allocator, with both replacements in
place and checked against SGLang's kernels on a synthetic verify.

The synthetic verifies both checks run on are at the end of this module.
"""

import itertools
import logging

import torch

from ...hooks import Hook, resolve
from ...kernels import verify_bookkeeping
from ...kernels.reference import split_verify_slots_ref
from ..common.fault_switch import FaultSwitch
from . import sglang_api as api

logger = logging.getLogger("sglang_eagle_paged")

# kernel: the bookkeeping kernel is in use (False after a failed check). pages: page-list mode is on
# for this process. split: (page counts, slot counts, page size) the bookkeeping hook returned last,
# for get_target_cache_loc. pending: the page list to free.
_state = {"kernel": True, "pages": False, "split": None, "pending": None}

# A fault of ours while serving: that call ends as SGLang's would, and the eager slot counts, SGLang's
# split kernel and SGLang's free serve every later verify (the state above, kernel and pages off).
_switched_off = FaultSwitch("[sglang-eagle-paged] v1 verify bookkeeping switched off for this process, SGLang's "
                            "slot counts, split and free serve from now on: %s")


def switch_off(fault, say: bool = True) -> None:
    """SGLang's slot counts, split and free for every later verify (``say``: the ERROR line)."""
    _state.update(kernel=False, pages=False, split=None)
    _switched_off.trip(fault, say)


def src_tgt_cache_loc_eager(seq_lens: torch.Tensor, out_cache_loc: torch.Tensor, accept_index: torch.Tensor,
                            num_correct_drafts: torch.Tensor, draft_token_num: int, page_size: int):
    """The same results in eager torch: the fallback, and what :func:`kernel_problem` checks against."""
    src_cache_loc = out_cache_loc[accept_index]
    # The accepted tokens (num_correct_drafts + 1 per request) end inside one page; that
    # page stays whole, every verify slot after it is freed.
    kept_end = (seq_lens + num_correct_drafts + page_size) // page_size * page_size
    to_free_num_slots = (seq_lens + draft_token_num - kept_end).clamp_(min=0)
    return src_cache_loc, torch.empty_like(src_cache_loc), to_free_num_slots


def src_tgt_cache_loc(seq_lens: torch.Tensor, out_cache_loc: torch.Tensor, accept_index: torch.Tensor,
                      num_correct_drafts: torch.Tensor, draft_token_num: int, page_size: int):
    """Same parameters and results as SGLang's ``get_src_tgt_cache_loc`` (REPLACE hook body).

    0.5.11 names the fourth parameter ``num_accepted_drafts``; its callers (``eagle_info``,
    ``ngram_info``), like 0.5.12's, pass every argument by position."""
    args = (seq_lens, out_cache_loc, accept_index, num_correct_drafts, draft_token_num, page_size)
    try:
        if _state["pages"]:  # free counts in pages (below); chosen at start-up, with the kernel
            return _page_list_counts(*args)
        if _state["kernel"]:
            return verify_bookkeeping.src_and_free_counts(*args)
    except Exception as exc:  # noqa: BLE001 -- never the scheduler's: the eager ops (SGLang's values) serve
        switch_off(exc)
    return src_tgt_cache_loc_eager(*args)


def kernel_in_use() -> bool:
    """Whether the hook computes with the kernel (False after a failed warm-up: the eager ops)."""
    return _state["kernel"]


def kernel_problem(args) -> str | None:
    """Why the kernel cannot stand in for the eager ops on ``args`` (the hook's arguments): its
    error, or a difference in the source slots or the free counts; None where it can."""
    try:
        got = verify_bookkeeping.src_and_free_counts(*args)
    except Exception as exc:  # a Triton or driver error
        return f"{type(exc).__name__}: {exc}"
    want = src_tgt_cache_loc_eager(*args)
    if torch.equal(got[0], want[0]) and torch.equal(got[2], want[2]) and got[2].dtype == want[2].dtype:
        return None
    return "its results differ from the eager ops"


# The index dtypes SGLang's verify (0.5.11 and 0.5.12) hands the hook: int32 from its sampling kernel, and an
# int64 num_correct_drafts in a round where a request finished mid-tree (recounted in torch).
# Each combination is a Triton variant of its own; one first met while serving stalls the
# scheduler for its compile, so warm-up compiles them all.
INDEX_DTYPES = tuple(itertools.product((torch.int32, torch.int64), repeat=2))  # (accept_index, num_correct_drafts)


def warm_up_bookkeeping(device, draft_token_num: int, page_size: int) -> None:
    """Compile the kernel for this process and check it on a few verifies; fall back to eager if not."""
    if not _state["kernel"]:
        return
    seq_lens, out_cache_loc, accept_index, num_correct = verify_bookkeeping_inputs(
        torch.Generator().manual_seed(0), 8, draft_token_num, page_size)
    problem = None
    for ai_dtype, ncd_dtype in INDEX_DTYPES:
        args = [seq_lens, out_cache_loc, accept_index.to(ai_dtype), num_correct.to(ncd_dtype)]
        problem = kernel_problem([t.to(device) for t in args] + [draft_token_num, page_size])
        if problem is not None:
            break
    if problem is not None:
        _state["kernel"] = False
        logger.warning("[sglang-eagle-paged] verify bookkeeping kernel not used (%s); eager torch ops instead",
                       problem[:500])


# --- the page-list free ----------------------------------------------------------------------

def page_list_enabled() -> bool:
    return _state["pages"]


def _page_list_counts(seq_lens, out_cache_loc, accept_index, num_correct_drafts, draft_token_num, page_size):
    """The bookkeeping hook's page-list form: free counts in pages; the slot counts kept for the split."""
    src, tgt, page_counts, slot_counts = verify_bookkeeping.src_and_free_pages(
        seq_lens, out_cache_loc, accept_index, num_correct_drafts, draft_token_num, page_size)
    _state["split"] = (page_counts, slot_counts, page_size)
    return src, tgt, page_counts


class _Split:
    def __init__(self, original, grid):
        self.original, self.grid = original, grid

    def __call__(self, tgt, to_free_slots, num_correct_drafts, to_free_num, out_cache_loc, draft_token_num,
                 *constexprs):
        split = _state["split"]
        if split is None or split[0] is not to_free_num:
            # Counts that did not come from the page-list hook are SGLang's slot counts.
            return self.original[self.grid](tgt, to_free_slots, num_correct_drafts, to_free_num, out_cache_loc,
                                            draft_token_num, *constexprs)
        _state["split"] = None
        page_counts, slot_counts, page_size = split
        args = (tgt, to_free_slots, num_correct_drafts, page_counts, slot_counts, out_cache_loc, draft_token_num,
                page_size)
        try:
            verify_bookkeeping.split_verify_slots(*args)
        except Exception as exc:  # noqa: BLE001 -- SGLang sized the list in pages: the reference fills it
            split_verify_slots_ref(*args)
            switch_off(exc)
            return  # a page list SGLang's own free frees right (module docstring): not handed to ours
        _state["pending"] = to_free_slots


class TargetCacheLoc:
    """REPLACE for SGLang's ``get_target_cache_loc`` Triton kernel, launched as ``kernel[grid](...)``.

    A class, because the hook registry substitutes a class as it is (a function would be wrapped
    in one, which cannot be subscripted); :attr:`original` is SGLang's kernel, set before the hook
    is applied."""

    original = None

    def __class_getitem__(cls, grid):
        return _Split(cls.original, grid)


def free_hook(original, allocator, free_index):
    """AROUND hook for ``PagedTokenToKVPoolAllocator.free``: a page list from :class:`TargetCacheLoc`
    goes back to the free list as it is; anything else is SGLang's free."""
    pending, _state["pending"] = _state["pending"], None
    if (pending is None or free_index is not pending or not free_index.numel()
            or not allocator.is_not_in_free_group or allocator.debug_mode):
        return original(allocator, free_index)
    try:
        # assigns the allocator's list once, after every step that can fail
        api.release_free_pages(allocator, free_index // allocator.page_size)
    except Exception as exc:  # noqa: BLE001 -- SGLang's free takes the page list as it is
        switch_off(exc)
        return original(allocator, free_index)


def verify_free_hooks() -> list:
    """The page-list free's hooks (see the module docstring); SGLang's kernel is kept for the split."""
    kernel = resolve(api.TARGET_CACHE_LOC_KERNEL)
    if kernel is not TargetCacheLoc:
        TargetCacheLoc.original = kernel
    return [Hook(api.TARGET_CACHE_LOC_KERNEL, TargetCacheLoc, "replace", required=False),
            Hook(api.PAGED_FREE, free_hook, "around", required=False)]


def hooks_in_place() -> str | None:
    """None where the verify reaches our split and free; otherwise which one it does not."""
    if TargetCacheLoc.original is None:
        return "get_target_cache_loc is not replaced"
    for module in api.VERIFY_MODULES:
        try:
            if getattr(api.resolve(module), "get_target_cache_loc", TargetCacheLoc) is not TargetCacheLoc:
                return f"{module}.get_target_cache_loc is not ours"
        except ImportError:
            continue
    if getattr(api.paged_allocator_class().free, "__wrapped__", None) is None:
        return "the paged allocator's free is not hooked"
    return None


def free_check(device, draft_token_num: int, page_size: int) -> str | None:
    """Why the page list cannot stand in for SGLang's slot list here: a kernel error, or other kept
    slots, other freed pages or a page listed twice against SGLang's kernels on synthetic paged
    verifies (every index dtype a verify passes); None where it can."""
    gen = torch.Generator().manual_seed(0)
    for ai_dtype, ncd_dtype in INDEX_DTYPES:
        seq_lens, out_cache_loc, accept_index, num_correct = (t.to(device) for t in paged_verify_inputs(
            gen, 8, draft_token_num, page_size))
        args = (seq_lens, out_cache_loc, accept_index.to(ai_dtype), num_correct.to(ncd_dtype), draft_token_num,
                page_size)
        try:
            src, tgt, page_counts, slot_counts = verify_bookkeeping.src_and_free_pages(*args)
            listed = torch.empty(int(page_counts.sum()), dtype=torch.int64, device=device)
            verify_bookkeeping.split_verify_slots(tgt, listed, args[3], page_counts, slot_counts, out_cache_loc,
                                                  draft_token_num, page_size)
        except Exception as exc:  # a Triton or driver error
            return f"{type(exc).__name__}: {exc}"
        want_src, want_tgt, want_slots = sglang_split(*args)
        pages = (listed // page_size).sort().values
        if not (torch.equal(src, want_src) and torch.equal(tgt, want_tgt)):
            return "its kept slots differ from SGLang's"
        if not torch.equal(pages, torch.unique(want_slots // page_size)):
            return "its freed pages differ from SGLang's"
    return None


def sglang_split(seq_lens, out_cache_loc, accept_index, num_correct_drafts, draft_token_num, page_size):
    """``(src, tgt, to_free_slots)`` as SGLang's verify computes them (with our slot-count kernel,
    which matches SGLang's function), through SGLang's own ``get_target_cache_loc``."""
    import triton

    src, tgt, slot_counts = verify_bookkeeping.src_and_free_counts(
        seq_lens, out_cache_loc, accept_index, num_correct_drafts, draft_token_num, page_size)
    to_free = torch.empty(int(slot_counts.sum()), dtype=torch.int64, device=seq_lens.device)
    bs = seq_lens.numel()
    kernel = TargetCacheLoc.original or resolve(api.TARGET_CACHE_LOC_KERNEL)
    kernel[(bs,)](tgt, to_free, num_correct_drafts, slot_counts, out_cache_loc, draft_token_num,
                  triton.next_power_of_2(draft_token_num), triton.next_power_of_2(bs))
    return src, tgt, to_free


def warm_up_free(device, draft_token_num: int, page_size: int, allocator, requested: bool) -> None:
    """Choose this process's mode, compiling and checking the page-list kernels where it may be on.
    ``requested``: ``SGLANG_EAGLE_PAGED_VERIFY_FREE`` (on unless turned off)."""
    _state.update(pages=False, split=None, pending=None)
    if page_size <= 1:
        return
    if not requested:
        reason = "SGLANG_EAGLE_PAGED_VERIFY_FREE is off"
    elif type(allocator) is not api.paged_allocator_class():
        reason = f"allocator {type(allocator).__name__} is not SGLang's paged allocator"
    elif not kernel_in_use():
        reason = "the bookkeeping kernel is not in use"
    else:
        reason = hooks_in_place() or free_check(device, draft_token_num, page_size)
    if reason is None:
        _state["pages"] = True
        return
    # A warning only where the plugin put the hooks in and they still cannot be used.
    level = logging.WARNING if requested and TargetCacheLoc.original is not None else logging.INFO
    logger.log(level, "[sglang-eagle-paged] verify frees SGLang's slot list, with its sort and sync (%s)",
               reason[:500])


# --- synthetic verifies, for the start-up checks ---------------------------------------------

def accepted_rows(gen, num_correct, draft_token_num: int) -> torch.Tensor:
    """``accept_index`` as a verify flattens it: per request its root (row position 0) and
    ``num_correct[i]`` more distinct tree positions, ascending, offset by the request's row."""
    return torch.cat([
        i * draft_token_num + torch.cat([torch.zeros(1, dtype=torch.int64),
                                         torch.randperm(draft_token_num - 1, generator=gen)[: int(c)].sort().values + 1])
        for i, c in enumerate(num_correct)])


def verify_bookkeeping_inputs(gen, bs: int, draft_token_num: int, page_size: int):
    """(seq_lens, out_cache_loc, accept_index, num_correct_drafts) of a paged tree verify, as
    ``eagle_info`` passes them to ``get_src_tgt_cache_loc``: per request ``draft_token_num``
    fresh slots, 0..5 accepted drafts after the root, ``accept_index`` listing accepted rows."""
    seq_lens = torch.randint(1, 5 * page_size + 2, (bs,), generator=gen)
    out_cache_loc = torch.randperm(bs * draft_token_num * 4, generator=gen)[: bs * draft_token_num] + 1
    num_correct = torch.randint(0, min(draft_token_num, 6), (bs,), generator=gen, dtype=torch.int32)
    accept_index = accepted_rows(gen, num_correct, draft_token_num)
    return seq_lens, out_cache_loc, accept_index, num_correct


def paged_verify_inputs(gen, bs: int, draft_token_num: int, page_size: int, max_correct: int | None = None):
    """As :func:`verify_bookkeeping_inputs`, with ``out_cache_loc`` laid out as SGLang's paged
    allocator lays out a verify's extension: each request's positions ``seq_len ..`` on its own
    pages (distinct across the batch), position ``p`` at ``page_of[p // page] * page + p % page``;
    0 .. ``max_correct`` accepted drafts (default: up to the whole tree, so some keep pages the
    verify added)."""
    seq_lens = torch.randint(1, 5 * page_size + 2, (bs,), generator=gen)
    ends = seq_lens + draft_token_num
    pages_per_row = (ends + page_size - 1) // page_size
    physical = torch.randperm(int(pages_per_row.sum()) * 2, generator=gen)[: int(pages_per_row.sum())] + 1
    rows, first = [], 0
    for n, end, count in zip(seq_lens.tolist(), ends.tolist(), pages_per_row.tolist()):
        pos = torch.arange(n, end)
        rows.append(physical[first + pos // page_size] * page_size + pos % page_size)
        first += count
    top = draft_token_num - 1 if max_correct is None else min(max_correct, draft_token_num - 1)
    num_correct = torch.randint(0, top + 1, (bs,), generator=gen, dtype=torch.int32)
    accept_index = accepted_rows(gen, num_correct, draft_token_num)
    return seq_lens, torch.cat(rows), accept_index, num_correct
