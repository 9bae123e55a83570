"""Free a paged tree verify's unkept pages as a page list: no sort, no second host sync.

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
(a free group, debug mode) still frees the right pages. The mode is chosen once, at worker
start-up (:func:`warm_up`): only on SGLang's own paged allocator, with both replacements in
place and checked against SGLang's kernels on a synthetic verify.
"""

import logging
import os

import torch

from . import compat
from .kernels import verify_bookkeeping

logger = logging.getLogger("sglang_eagle_paged")

ENV_VAR = "SGLANG_EAGLE_PAGED_VERIFY_FREE"

# pages: page-list mode is on for this process. split: (page counts, slot counts, page size) the
# bookkeeping hook returned last, for get_target_cache_loc. pending: the page list to free.
_state = {"pages": False, "split": None, "pending": None}


def requested() -> bool:
    """False where ``SGLANG_EAGLE_PAGED_VERIFY_FREE`` turns the page list off (SGLang's slot list stays)."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "off", "false", "no")


def enabled() -> bool:
    return _state["pages"]


def src_tgt_cache_loc(seq_lens, out_cache_loc, accept_index, num_correct_drafts, draft_token_num, page_size):
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
        verify_bookkeeping.split_verify_slots(tgt, to_free_slots, num_correct_drafts, page_counts, slot_counts,
                                              out_cache_loc, draft_token_num, page_size)
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
    compat.release_free_pages(allocator, free_index // allocator.page_size)


def hooks() -> dict:
    """The plugin's hooks for this module (none where ``SGLANG_EAGLE_PAGED_VERIFY_FREE`` is off)."""
    if not requested():
        return {}
    kernel = compat.resolve(compat.TARGET_CACHE_LOC_KERNEL)
    if kernel is not TargetCacheLoc:
        TargetCacheLoc.original = kernel
    return {compat.TARGET_CACHE_LOC_KERNEL: (TargetCacheLoc, "REPLACE"), compat.PAGED_FREE: (free_hook, "AROUND")}


def hooks_in_place() -> str | None:
    """None where the verify reaches our split and free; otherwise which one it does not."""
    if TargetCacheLoc.original is None:
        return "get_target_cache_loc is not replaced"
    for module in compat.VERIFY_MODULES:
        try:
            if getattr(compat.resolve(module), "get_target_cache_loc", TargetCacheLoc) is not TargetCacheLoc:
                return f"{module}.get_target_cache_loc is not ours"
        except ImportError:
            continue
    if getattr(compat.paged_allocator_class().free, "__wrapped__", None) is None:
        return "the paged allocator's free is not hooked"
    return None


def check(device, draft_token_num: int, page_size: int) -> str | None:
    """Why the page list cannot stand in for SGLang's slot list here: a kernel error, or other kept
    slots, other freed pages or a page listed twice against SGLang's kernels on synthetic paged
    verifies (every index dtype a verify passes); None where it can."""
    from .harness import paged_verify_inputs
    from .verify_compaction import INDEX_DTYPES

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
    kernel = TargetCacheLoc.original or compat.resolve(compat.TARGET_CACHE_LOC_KERNEL)
    kernel[(bs,)](tgt, to_free, num_correct_drafts, slot_counts, out_cache_loc, draft_token_num,
                  triton.next_power_of_2(draft_token_num), triton.next_power_of_2(bs))
    return src, tgt, to_free


def warm_up(device, draft_token_num: int, page_size: int, allocator) -> None:
    """Choose this process's mode, compiling and checking the page-list kernels where it may be on."""
    from . import verify_compaction

    _state.update(pages=False, split=None, pending=None)
    if page_size <= 1:
        return
    if not requested():
        reason = f"{ENV_VAR} is off"
    elif type(allocator) is not compat.paged_allocator_class():
        reason = f"allocator {type(allocator).__name__} is not SGLang's paged allocator"
    elif not verify_compaction.kernel_in_use():
        reason = "the bookkeeping kernel is not in use"
    else:
        reason = hooks_in_place() or check(device, draft_token_num, page_size)
    if reason is None:
        _state["pages"] = True
        return
    # A warning only where the plugin put the hooks in and they still cannot be used.
    level = logging.WARNING if requested() and TargetCacheLoc.original is not None else logging.INFO
    logger.log(level, "[sglang-eagle-paged] verify frees SGLang's slot list, with its sort and sync (%s)",
               reason[:500])
