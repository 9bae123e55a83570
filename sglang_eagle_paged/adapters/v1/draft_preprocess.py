"""The draft-preprocess step of EAGLE tree drafting on a paged KV cache.

:func:`draft_preprocess_decode` replaces ``EAGLEWorker._draft_preprocess_decode``
for ``page_size > 1`` and ``topk > 1``; every other configuration keeps SGLang's
own method. Compared with SGLang 0.5.12.post1's version it:

- assigns slots with a kernel whose outputs do not depend on program order,
- duplicates the prefix's partial page with one launch sized by a bound the host
  already knows (no ``.item()`` to learn the copy length, no recompiles),
- takes ``seq_lens_sum`` from ``seq_lens_cpu`` (SGLang syncs for it every step),
- where SGLang's paged allocator's free list holds the draft's slots, reads them from
  its free pages inside the assignment launch itself (one launch for slots, rows and
  pairs), allocating nothing; elsewhere it allocates as SGLang does and restores the
  allocator in a ``finally``, so a failure cannot leak the draft slots;
- counts the requests and accumulates penalties after its own part (SGLang: first), so that on a
  fault SGLang's method, which then serves the call, has nothing to repeat.
"""

import contextlib
import logging
import time

import torch

from ...kernels import assign_tree_draft_slots, assign_tree_draft_slots_from_free_pages, tree_extension
from ...tree_layout import extend_lens, extension_totals
from ...settings import FA3Expand, Mode, Settings
from ..common import fa3_metadata, kv_copy
from ..common.fault_switch import FaultSwitch
from ..common.kv_copy import duplicate_in_pool, move_pairs, warm_up_moves
from . import sglang_api as compat
from . import sglang_warm_up, verify

logger = logging.getLogger("sglang_eagle_paged")


def handles(worker) -> bool:
    return worker.page_size > 1 and worker.topk > 1


def _free_list_refusal(allocator, num_new_pages: int) -> str | None:
    """Why the draft's slots cannot be read from the free list this round, or None if they can."""
    if type(allocator) is not compat.paged_allocator_class():
        return f"allocator {type(allocator).__name__} is not SGLang's paged allocator"
    if allocator.debug_mode:
        return "the allocator's debug mode is on"
    if num_new_pages > len(allocator.free_pages):
        return "the free list is short of the extension"
    return None


_reported_fallbacks: set = set()


def _report_fallback(reason: str) -> None:
    # Once per reason and process: which path serves a deployment should be visible in its
    # log (the fast path is silent), without a line per draft round.
    if reason not in _reported_fallbacks:
        _reported_fallbacks.add(reason)
        logger.info("[sglang-eagle-paged] draft slots allocated by SGLang (%s); not logged again for this reason",
                    reason)


def _readable_free_pages(worker, batch):
    """The allocator's free pages, where the draft's slots can be read from them this round; else None.

    The draft's slots are given back before anything else allocates (the verify step
    allocates its own), so allocating and restoring is host time for nothing: reading
    the pages alloc_extend would take gives the same slots. Only for the exact class,
    whose alloc_extend we reproduce; never in debug mode, whose assertions the user asked
    for. SGLang evicts from the tree cache when its over-estimate (one extra page per
    request) exceeds what is available; here the exact need is checked, so no cached
    prefix is thrown away for slots that are given back anyway. (For the same reason,
    where need_sort would have SGLang merge and sort the release pages first, these
    slots differ from SGLang's but are just as free.)
    """
    page, topk, steps = worker.page_size, worker.topk, worker.speculative_num_steps
    _, num_new_pages = extension_totals(batch.seq_lens_cpu, page, topk, steps)  # CPU: no device sync
    allocator = batch.tree_cache.token_to_kv_pool_allocator
    refusal = _free_list_refusal(allocator, num_new_pages)
    if refusal is None:
        return allocator.free_pages
    _report_fallback(refusal)
    return None


def _allocate_tree_extension(worker, batch):
    """Every branch's slots allocated by SGLang, as it does itself, and the allocator state to restore.

    The fallback, where :func:`_readable_free_pages` refuses.
    """
    page, topk, steps = worker.page_size, worker.topk, worker.speculative_num_steps
    prefix_lens_cpu = batch.seq_lens_cpu
    num_slots, _ = extension_totals(prefix_lens_cpu, page, topk, steps)
    # SGLang's get_last_loc_large_page_size_large_top_k computes these with ~10 host
    # dispatches per draft round; one launch gives the allocator the same tensors.
    seq_lens, last_loc = tree_extension(
        batch.req_to_token_pool.req_to_token, batch.req_pool_indices, batch.seq_lens, page, topk, steps,
    )
    return compat.alloc_paged_token_slots_extend(
        batch.tree_cache,
        batch.seq_lens,
        prefix_lens_cpu,
        seq_lens,
        prefix_lens_cpu + extend_lens(prefix_lens_cpu, page, topk, steps),
        last_loc,
        num_slots,
        backup_state=True,
    )


def draft_preprocess_decode(worker, batch, mode: Mode = Mode.ON) -> None:
    batch.maybe_evict_swa()
    spec_info = batch.spec_info
    rows, req_to_token = batch.req_pool_indices, batch.req_to_token_pool.req_to_token
    config = (worker.page_size, worker.topk, worker.speculative_num_steps)
    free_pages = _readable_free_pages(worker, batch)
    allocator_state = None
    try:
        if free_pages is not None:
            layout = assign_tree_draft_slots_from_free_pages(rows, req_to_token, batch.seq_lens, free_pages, *config)
        else:
            alloc_loc, allocator_state = _allocate_tree_extension(worker, batch)
            layout = assign_tree_draft_slots(rows, req_to_token, batch.seq_lens, alloc_loc, *config)
        if mode is Mode.ON:
            move_pairs(worker.draft_model_runner.token_to_kv_pool, layout.tgt_loc, layout.src_loc)
        batch.out_cache_loc = layout.out_cache_loc
        batch.seq_lens_sum = int(batch.seq_lens_cpu.sum())
        batch.return_hidden_states = False
        spec_info.positions = batch.seq_lens.repeat_interleave(worker.topk, dim=0)
    finally:
        # The draft slots live only for this step: the verify step allocates its own.
        if allocator_state is not None:
            worker.token_to_kv_pool_allocator.restore_state(allocator_state)
    # SGLang's own bookkeeping, which SGLang does first: here after our part, which does not read
    # it, so that a fault in ours leaves nothing for SGLang's method to count twice.
    for req in batch.reqs:
        req.decode_batch_idx += 1
    if batch.sampling_info.penalizer_orchestrator.is_required:
        # the relaxed penalty accumulation SGLang uses for speculative decoding
        batch.sampling_info.penalizer_orchestrator.cumulate_output_tokens(
            compat.last_verified_tokens(spec_info).to(torch.int64)
        )


@contextlib.contextmanager
def _timed(parts: dict, name: str):
    # Host seconds per part: the parts are Triton and torch.compile compiles, which run on the host.
    t0 = time.perf_counter()
    try:
        yield
    finally:
        parts[name] = time.perf_counter() - t0


def warm_up(worker, settings: Settings) -> dict:
    """Compile our kernels for this worker's configuration before serving.

    Triton compiles on first launch; without this the first decode step of a
    server pays it (seconds) in the middle of serving. Every constexpr is a
    configuration value, so these are the only variants serving will use.
    Returns each part's seconds: a server's start-up line names where the time went.
    """
    parts = {}
    if not handles(worker):
        return parts
    device = worker.device
    page, topk, steps = worker.page_size, worker.topk, worker.speculative_num_steps
    draft_tokens = getattr(worker, "speculative_num_draft_tokens", None) or steps + 1
    max_batch = compat.max_batch_size(worker)
    with _timed(parts, "tree"):
        _warm_up_tree_drafting(worker, device, page, topk, steps)
    # The post-verify compaction's kernels (the first verify would compile them): the move on the
    # target pool, and the bookkeeping, which falls back to eager ops if it cannot compile here.
    with _timed(parts, "move"):
        warm_up_moves(compat.worker_kv_pools(worker)["target"])
    with _timed(parts, "bookkeeping"):
        verify.warm_up_bookkeeping(device, draft_tokens, page)
    with _timed(parts, "free"):
        verify.warm_up_free(device, draft_tokens, page, worker.token_to_kv_pool_allocator, settings.verify_free)
    fa3_chosen = settings.fa3_expand_for("v1")
    if _draft_attention_is_fa3(worker) and fa3_chosen is not FA3Expand.OFF:
        with _timed(parts, "fa3"):
            fa3_metadata.warm_up(device, topk, steps, page, fa3_chosen)
    with _timed(parts, "allocator"):
        sglang_warm_up.warm_up_allocator(device, page, max_batch)
    with _timed(parts, "sglang verify"):
        sglang_warm_up.warm_up_verify(device, draft_tokens, page, max_batch, compat.worker_req_to_token(worker))
    return parts


def _warm_up_tree_drafting(worker, device, page: int, topk: int, steps: int) -> None:
    # Both slot paths and the copy, on scratch rows and the padding page: no KV changes.
    i64 = dict(dtype=torch.int64, device=device)
    seq_lens = torch.tensor([page + 1], **i64)  # a partial last page: every code path runs
    seq_lens_cpu = seq_lens.cpu()
    need, num_new_pages = extension_totals(seq_lens_cpu, page, topk, steps)
    scratch_rows = torch.zeros((2, 2 * page + need), dtype=torch.int32, device=device)
    rows = torch.ones(1, **i64)
    # SGLang's allocation path (the fallback): its allocator inputs, then the assignment.
    tree_extension(scratch_rows, rows, seq_lens, page, topk, steps)
    alloc_loc = torch.zeros(need, **i64)  # slot 0 is SGLang's padding slot
    assign_tree_draft_slots(rows, scratch_rows, seq_lens, alloc_loc, page, topk, steps)
    # The free-list path; every free page is page 0, the padding page.
    free_pages = torch.zeros(num_new_pages, **i64)
    layout = assign_tree_draft_slots_from_free_pages(rows, scratch_rows, seq_lens, free_pages, page, topk, steps)
    # All pairs are 0 -> 0 copies of the padding slot or sentinels: no KV changes.
    duplicate_in_pool(compat.worker_kv_pools(worker)["draft"], layout.tgt_loc, layout.src_loc)


def _draft_attention_is_fa3(worker) -> bool:
    # only a FA3 draft backend runs the FA3 replacements; compiling them elsewhere is start-up time for nothing
    cls = type(getattr(worker, "draft_attn_backend", None))
    return f"{cls.__module__}.{cls.__qualname__}" == fa3_metadata.FA3_MULTI_STEP_BACKEND


def worker_init_hook(settings: Settings):
    """AFTER hook for ``EAGLEWorker.__init__`` (and STANDALONE's): warm-up, then one line."""

    def after_init(result, worker, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            parts = warm_up(worker, settings)
        except Exception as exc:  # noqa: BLE001 -- a start-up fault of ours must not stop the server
            switch_off_everything(exc)
            parts = {}
        # SGLang loads plugins before it configures logging (launcher and schedulers alike), so
        # register()'s own line is dropped; this one comes after, once per TP rank, with its prefix.
        logger.info(
            "[sglang-eagle-paged] active: mode=%s, tree drafting=%s (page %d, topk %d, steps %d), "
            "verify free=%s, warm-up %.0f ms%s%s", settings.mode.value,
            "ours" if handles(worker) and not _switched_off else "SGLang's", worker.page_size, worker.topk,
            worker.speculative_num_steps,
            "page list" if verify.page_list_enabled() else "SGLang's", 1e3 * (time.perf_counter() - t0),
            _parts_text(parts), ", prefix check on" if settings.check_prefix else "",
        )
        return result

    return after_init


def _parts_text(parts: dict) -> str:
    return " (" + ", ".join(f"{name} {1e3 * sec:.0f} ms" for name, sec in parts.items()) + ")" if parts else ""


# Why our draft preprocess was switched off in this process (falsy: it serves).
_switched_off = FaultSwitch("[sglang-eagle-paged] v1 draft preprocess switched off for this process, SGLang's own "
                            "_draft_preprocess_decode serves from now on: %s")


def switch_off_everything(fault) -> None:
    """A fault at warm-up: every v1 path of ours off for the process (SGLang's draft preprocess, KV
    copy and move, verify bookkeeping and FA3 draft metadata serve), said in one ERROR line."""
    _switched_off.trip(fault, say=False)
    for switch_off in (kv_copy.switch_off, verify.switch_off, fa3_metadata.switch_off):
        switch_off(fault, say=False)
    logger.error("[sglang-eagle-paged] v1 warm-up failed, SGLang's own draft preprocess, KV copy, verify and FA3 "
                 "draft metadata serve this process: %s", _switched_off.reason[:300])


def draft_preprocess_decode_hook(mode: Mode):
    """AROUND hook for ``EAGLEWorker._draft_preprocess_decode``, for ``mode`` on or fake.

    A fault in ours never reaches the scheduler: SGLang's own method serves that call and every
    later one (where the method fails as well, its error is raised and ours stays on). Nothing of
    ours needs undoing first: the allocator is restored by ours, the rows, slots and copies the
    method writes again, and the request counters and penalties come after our part."""

    def around(original, worker, batch):
        if not handles(worker) or _switched_off:
            return original(worker, batch)
        try:
            return draft_preprocess_decode(worker, batch, mode)
        except Exception as exc:  # noqa: BLE001 -- never the scheduler's: SGLang's method serves
            # Where SGLang's method fails too (out of KV memory), the error is SGLang's to raise,
            # as it would without us, and ours stays on.
            result = original(worker, batch)
            _switched_off.trip(exc)
            return result

    return around
