"""One draft step on SGLang's v2 worker as our hooks serve it: every line of ours that runs per
draft step, in the order SGLang calls it. Nothing here decides anything that was known before the
step: the layout, the copy, the readers and fa3's metadata path were decided once per draft runner
(:mod:`.draft_plan`), fa3's coverage once per step backend (:func:`.fa3_in_place.after_backend_init`),
the dense layout once per process (:func:`.dense_draft.decide`; the bodies that read it are handed
its :class:`.dense_draft.DenseLayout` by the hook table). A step reads plan fields after identity
checks. The arithmetic each step calls lives beside its
proof (:mod:`.fa3_in_place`, :mod:`.dense_draft`, :mod:`.fa3_replay`, the kernels).

1. The scheduler's reserve for the round (:func:`around_len_per_decode`): page 1's where the dense
   layout serves (SGLang's again after a fault).
2. ``prepare_for_draft`` (:func:`around_prepare_for_draft`): with the dense layout, the draft's
   write slots rewritten to page 1's; after a fault, the first round allocated with SGLang's reserve
   hands the layout back to SGLang's.
3. The prefix-tail duplication (:func:`duplication_hook`): the runner's plan says ours, skipped or
   SGLang's.
4. The draft decode's metadata: fa3's fused replay (:func:`fused_out_graph_hook`; in fa3 in place's
   per-token form where it covers every step, :mod:`.fa3_dense`) or its expand builder
   (:func:`expand_hook`); fa3 in place rewrites SGLang's (:func:`after_metadata`) and gives
   the expand call of each layer a per-token view (:func:`around_flash_attn`). triton's and
   flashinfer's index kernel launches with page 1 where the dense layout serves
   (:func:`dense_index_launch`).

The fault rule (:mod:`.fault`): whatever our code raises here is caught, SGLang's own path serves
that call and every later one, one ERROR line per process; each body narrows it where SGLang's plain
result is not the right one (the dense slots, the index kernel), and the hook table runs every body
under :func:`.fault.guarded` for whatever its own ``try`` does not reach.
"""

import functools

from ...kernels.prefix_tail import duplicate_prefix_tail
from ...settings import Mode
from ..common import fa3_metadata
from . import dense_draft, draft_plan, fa3_dense, fa3_in_place, fa3_replay, fault

# --------------------------------------------------------------------------- 1, 2: the dense layout


def around_len_per_decode(dense, original, *args, **kwargs):
    """The scheduler's per-step allocation (``dense``: the installed :class:`.dense_draft.DenseLayout`)."""
    value = original(*args, **kwargs)
    if not dense.active or dense.len_per_decode is None:
        return value
    if fault.SWITCH:  # SGLang's reserve for every round allocated from now on: its layout can serve them
        dense.sglang_reserve = True
        return value
    return min(value, dense.len_per_decode)  # never more than SGLang's own


def around_prepare_for_draft(dense, original, draft_input, req_to_token_pool, batch, cuda_graph_runner,
                             draft_model_runner, topk, num_steps, *args, **kwargs):
    # after a fault: the first draft whose round was allocated with SGLang's reserve (a scheduling step
    # asked for it since; none is asked inside a forward) takes SGLang's layout, before its paged branch
    if dense.active and dense.sglang_reserve:
        dense.hand_back()
    result = original(draft_input, req_to_token_pool, batch, cuda_graph_runner, draft_model_runner, topk, num_steps,
                      *args, **kwargs)
    if not dense.active or topk <= 1:
        return result
    rows, idx, lens, out = req_to_token_pool.req_to_token, batch.req_pool_indices, batch.seq_lens, batch.out_cache_loc
    try:
        if batch.forward_mode.is_idle() or batch.token_to_kv_pool_allocator.page_size <= 1:
            return result
        if not fault.SWITCH:
            dense_draft.dense_out_cache_loc(rows, idx, lens, topk, num_steps, out=out)
            return result
    except Exception as exc:  # noqa: BLE001 -- never the scheduler's: SGLang's page-1 kernel, same slots
        fault.trip("dense draft slot gather (this round's slots from SGLang's page-1 slot kernel, SGLang's "
                   "per-branch layout from the next round allocated)", exc)
    dense_draft.sglang_page_1_slots(rows, idx, lens, topk, num_steps, out)
    return result


# --------------------------------------------------------------------------- 3: the prefix-tail copy


def duplication_hook(mode: Mode, dense=None):
    """The AROUND hook for ``duplicate_prefix_tail_to_draft_branches`` in ``mode`` (on or fake);
    ``dense``: the installed :class:`.dense_draft.DenseLayout` (None: not asked)."""
    mode = Mode(mode)
    if mode is Mode.OFF:
        raise ValueError("mode off installs no hook")
    fake = mode is Mode.FAKE

    def duplicate_prefix_tail_to_draft_branches(original, token_to_kv_pool, rows, prefix_base, last_page,
                                                 num_new_pages, topk, page_size):
        # SGLang's own early return (topk 1: no other branch to fill); fake copies nothing; the dense
        # layout has no prefix tail to copy, before the fault rule too, since its rounds were
        # allocated without the per-branch pages SGLang's function would write
        if topk <= 1 or fake or (dense is not None and dense.active):
            return None
        if not fault.SWITCH:
            try:
                plan = draft_plan.current(token_to_kv_pool)
                if plan.copy == draft_plan.OURS:
                    duplicate_prefix_tail(plan.table, rows, prefix_base, last_page, num_new_pages, topk, page_size)
                if plan.copy != draft_plan.SGLANGS:
                    return None
            except Exception as exc:  # noqa: BLE001 -- any host-side failure of ours: SGLang's function serves
                fault.trip("prefix-tail duplication", exc)
        return original(token_to_kv_pool, rows, prefix_base, last_page, num_new_pages, topk, page_size)

    duplicate_prefix_tail_to_draft_branches.mode = mode
    return duplicate_prefix_tail_to_draft_branches


# --------------------------------------------------------------------------- 4: fa3's draft metadata and reads


def fused_out_graph_hook(original, multi, forward_batch, in_capture=False):
    """AROUND ``FlashAttentionMultiStepBackend.init_forward_metadata_out_graph``: every step's replay
    metadata in one launch where that writes what SGLang would (:mod:`.fa3_replay`)."""
    bs = getattr(forward_batch, "batch_size", None)
    if not in_capture and not fault.SWITCH and isinstance(bs, int):
        try:
            plan = draft_plan.for_fa3(multi)
            # a backend whose steps reach no pool has no runner's plan (tools, benchmarks): its path now
            path = plan.fa3 if plan is not None else draft_plan.fa3_path(multi)
            if path is not None:
                # issue 61 seam: where fa3 in place covers every step written, the per-token form's writer
                write = fa3_dense.wrote_per_token if path.per_token else fa3_replay.wrote_fused
                if write(multi, forward_batch, bs, path):
                    return None
        except Exception as exc:  # noqa: BLE001 -- never the scheduler's: SGLang's replay serves
            fault.trip("fa3 fused draft metadata", exc)
    return original(multi, forward_batch, in_capture=in_capture)


# AROUND fa3's ``draft_decode_set_expand_metadata``: one launch, SGLang's builder after a fault.
expand_hook = functools.partial(fa3_metadata.guarded_expand, fault.SWITCH)


def after_metadata(result, backend, forward_batch, *args, **kwargs):
    """AFTER fa3's ``init_forward_metadata`` and ``init_forward_metadata_out_graph``: a covered
    draft backend's topk > 1 draft-decode metadata in the in-place form."""
    if not getattr(backend, fa3_in_place.MARK, False):
        return None
    try:
        _to_in_place(backend, forward_batch)
    except Exception as exc:  # noqa: BLE001 -- never the scheduler's: SGLang's form, over SGLang's copy
        fault.trip("fa3 in place", exc)
        # issue 61 seam: a round allocated for the dense layout keeps the per-token form
        fa3_dense.after_rewrite_fault(backend, forward_batch, _dense_of(backend))
    return None


def _to_in_place(backend, forward_batch) -> None:
    if forward_batch.spec_info is None or not forward_batch.forward_mode.is_decode_or_idle():
        return
    expand = backend.forward_metadata_spec_decode_expand
    if expand is None or backend.speculative_num_steps <= 0:
        return
    # issue 61 seam: rounds allocated for the dense layout are read per token until it is handed back
    if fault.SWITCH and not fa3_in_place.is_per_token(expand.page_table) \
            and not fa3_dense.reads_dense(_dense_of(backend)):
        return  # SGLang's form over the copy; only tables a graph captured per token stay ours
    metadata = backend.forward_metadata
    out_cache_loc = getattr(forward_batch, "out_cache_loc", None)
    if out_cache_loc is None:  # graph capture: the replay fills the tables; only the mark counts
        fa3_in_place.mark_per_token(expand.page_table)
        return
    bs = metadata.cache_seqlens_int32.shape[0]
    fa3_in_place.rewrite_draft_metadata(metadata, expand, forward_batch.seq_lens[:bs],
                                        out_cache_loc.view(-1, backend.speculative_num_steps),
                                        backend.speculative_step_id + 1)


def _dense_of(step):
    """The dense layout handed the plan of the runner whose pool fa3's per-step backend ``step`` reads
    (None: not asked); a field read, only after a fault."""
    return draft_plan.dense_of(getattr(step, "token_to_kv_pool", None))


def dense_index_launch(launch, args, kwargs):
    """triton's and flashinfer's draft index kernel (``generate_draft_decode_kv_indices``, launched from
    SGLang's ``common_template``) with ``page_size`` 1 where the dense layout serves
    (:class:`.dense_draft.DenseDraftIndices`). A fault in ours (the argument rewrite, or the launch it
    makes) never reaches SGLang's caller: SGLang's own launch serves that call, and the layout goes
    back as after any fault (SGLang's reserve for the rounds allocated from now on, its layout from
    the first of them). A round already allocated dense then reads SGLang's per-branch positions of
    its rows: slot ids of this pool all the same (rows start zeroed and only ever hold slots), so the
    read stays in the pool and only that round's draft is off; the verify decides what is emitted."""
    try:
        dense = dense_draft.page_1_arguments(args, kwargs)
        return launch(*dense, **kwargs)
    except Exception as exc:  # noqa: BLE001 -- never the scheduler's: SGLang's launch serves this call
        fault.trip("dense draft index kernel (SGLang's launch for this call, SGLang's per-branch layout from "
                   "the next round allocated)", exc)
    return launch(*args, **kwargs)


def around_flash_attn(original, *args, **kwargs):
    """AROUND the fa3 backend module's ``flash_attn_with_kvcache``: the expand call of a rewritten
    draft decode reads the KV through a page-size-1 view (why this is the narrowest hook SGLang
    has: docs/design.md, "fa3 in place: where the view is given")."""
    if fa3_in_place.is_per_token(kwargs.get("page_table")):
        try:
            views = fa3_in_place.per_token_view(kwargs["k_cache"]), fa3_in_place.per_token_view(kwargs["v_cache"])
        except Exception as exc:  # noqa: BLE001 -- never the scheduler's: FA3 runs on SGLang's arguments
            fault.trip("fa3 in place view", exc)
        else:
            kwargs["k_cache"], kwargs["v_cache"] = views
    return original(*args, **kwargs)
