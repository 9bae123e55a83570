"""Replacements of the FA3 backend's tree-draft metadata builders (on by default on v1; opt-in
on v2, whose entry point and slicing differ: :mod:`..v2.fa3_replay`).

Why: with ``--attention-backend fa3 --page-size > 1 --speculative-eagle-topk > 1``,
SGLang's draft CUDA-graph runner calls
``FlashAttentionMultiStepBackend.init_forward_metadata_replay_cuda_graph`` every
draft round. For each of its ``steps - 1`` per-step backends that runs a dozen
small torch ops, a ``.max().item()`` on the CPU lengths and
``draft_decode_set_expand_metadata``, a ``@torch.compile(dynamic=True)`` function
whose TorchDynamo guards run on the host on every call: host time on the critical
path of every round, paid only at page > 1 (measured: ``docs/performance.md``).

``SGLANG_EAGLE_PAGED_FA3_EXPAND`` (:mod:`sglang_eagle_paged.settings`) picks what
replaces it:

- ``fused`` (v1's default): the whole round's replay metadata in one host max and
  one launch for all steps (:func:`.kernels.draft_decode_metadata.
  draft_decode_metadata_all_steps`, through a table of every step's buffers built
  once per batch size), through an AROUND hook that takes the fused path only
  where it writes exactly what SGLang would (:func:`fused_replay_hook`) and calls
  SGLang otherwise; plus the expand hook below for eager draft steps. One
  launch rather than one per step, because each launch's host cost (Triton's
  launch path) adds up across the steps of a round.
- ``expand``: only ``draft_decode_set_expand_metadata`` becomes one Triton
  launch (:mod:`.kernels.expand_metadata`).
- ``off``: SGLang's own builders.

How it is installed: SGLang's ``HookRegistry``, both as AROUND hooks, so SGLang's own
builder is at hand. The registry ``setattr``s the wrapper onto the ``flashattention_backend``
module (and onto any module that did ``from ... import draft_decode_set_expand_metadata``), and
the backend looks the name up as a module global at call time, so it sees the replacement.

Nothing here may stop a running server: an exception on our path (a compile error, anything
raised on the host) makes that call and every later one run SGLang's builders, ours off for
the process, with one ERROR line (:func:`switch_off`). A partial write of ours is then
overwritten by SGLang's, which writes the same buffers.
"""

import functools
import weakref

from ...hooks import Hook, resolvable, resolve
from ...settings import FA3Expand
from ...kernels.draft_decode_metadata import (
    DraftStep,
    DraftStepTable,
    draft_decode_metadata,
    draft_decode_metadata_all_steps,
)
from ...kernels.expand_metadata import expand_draft_page_table
from .fault_switch import FaultSwitch

# FA3's tree-draft page-table builder (optional replacement, SGLANG_EAGLE_PAGED_FA3_EXPAND)
FA3_MODULE = "sglang.srt.layers.attention.flashattention_backend"
FA3_EXPAND_METADATA = FA3_MODULE + ".draft_decode_set_expand_metadata"
# FA3's per-step backend, and the multi-step draft backend's replay-metadata builder
# (optional fused replacement, SGLANG_EAGLE_PAGED_FA3_EXPAND=fused)
FA3_BACKEND = FA3_MODULE + ".FlashAttentionBackend"
FA3_MULTI_STEP_BACKEND = FA3_MODULE + ".FlashAttentionMultiStepBackend"
FA3_MULTI_STEP_REPLAY = FA3_MULTI_STEP_BACKEND + ".init_forward_metadata_replay_cuda_graph"
TARGET = FA3_EXPAND_METADATA
FUSED_TARGET = FA3_MULTI_STEP_REPLAY

# Why our builders were switched off in this process (falsy: they serve).
_switched_off = FaultSwitch("[sglang-eagle-paged] FA3 draft metadata replacements switched off for this process, "
                            "SGLang's own builders serve from now on: %s")


def switched_off() -> bool:
    return bool(_switched_off)


def switch_off(exc: Exception, say: bool = True) -> None:
    """SGLang's builders serve every later call; one ERROR line per process (``say``: this one's)."""
    _switched_off.trip(exc, say)


def targets(selection: FA3Expand) -> list:
    """The dotted targets :func:`hooks` hooks for ``selection``."""
    return {FA3Expand.OFF: [], FA3Expand.EXPAND: [TARGET], FA3Expand.FUSED: [TARGET, FUSED_TARGET]}[selection]


def hooks(selection: FA3Expand, required: bool, expand=None) -> list:
    """The hooks of ``selection``; none where this SGLang lacks one of their targets (or, for the
    fused path, the exact backend class it checks), since the replacements stand in as a set.
    ``required``: the user asked for them explicitly, so a missing target is an error. ``expand``:
    the expand builder's hook body (default :func:`expand_hook`, whose fault trips this module's
    switch; the v2 adapter's trips its own)."""
    found = {TARGET: [Hook(TARGET, expand or expand_hook, "around", required)],
             FUSED_TARGET: [Hook(FUSED_TARGET, fused_replay_hook, "around", required)]}
    wanted = targets(selection)
    checked = wanted + ([FA3_BACKEND] if selection is FA3Expand.FUSED else [])
    for target in checked:
        problem = resolvable(target)
        if problem is not None:
            if required:
                raise LookupError(f"SGLANG_EAGLE_PAGED_FA3_EXPAND={selection.value} but {target} is missing: {problem}")
            return []
    return [h for target in wanted for h in found[target]]


def expand_metadata_replacement(
    cache_seqlens_int32,
    page_table,
    last_page_lens,
    decode_length,
    cache_loc,
    topk,
    page_size,
):
    """SGLang's expand builder's parameters, same in-place effect, one Triton launch."""
    expand_draft_page_table(cache_seqlens_int32, page_table, last_page_lens, decode_length,
                            cache_loc, topk, page_size)


def expand_hook(original, *args, **kwargs):
    """AROUND hook body for :data:`TARGET`: ours, or SGLang's once ours has faulted."""
    return guarded_expand(_switched_off, original, *args, **kwargs)


def guarded_expand(switch, original, *args, **kwargs):
    """Our expand builder while ``switch`` (a :class:`FaultSwitch`) is not tripped; SGLang's after
    a fault of ours, which trips it."""
    if not switch:
        try:
            return expand_metadata_replacement(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 -- never the scheduler's: SGLang's builder serves
            switch.trip(exc)
    return original(*args, **kwargs)


def fusable_backends(multi, forward_batch, bs, cpu_lens_needed=True):
    """The per-step backends if the fused path writes exactly what SGLang would, else None.

    Anything else (topk 1, page 1, sliding window or local attention, an encoder,
    a subclass that may build its metadata differently, a missing buffer) goes
    to SGLang's own code, which also raises where it would have raised.
    ``cpu_lens_needed``: the release reads the batch's CPU lengths (v1) for its page bound.
    """
    if not batch_fusable(forward_batch, bs, cpu_lens_needed):
        return None
    n = multi.speculative_num_steps - 1
    backends = multi.attn_backends[:n]
    if len(backends) != n or fusable_steps(backends) is None:
        return None
    for b in backends:
        if (bs not in getattr(b, "draft_decode_metadata_topk_normal", ())
                or bs not in getattr(b, "draft_decode_metadata_topk_expand", ())):
            return None
    return backends


def fusable_steps(backends):
    """``backends`` (the per-step FA3 backends a fused write covers) as a tuple where each is one the
    fused path writes exactly as SGLang would at every batch size, else None: what a draft runner's
    plan decides once (v2), the batch-size tables aside."""
    backend_cls = _backend_class()
    for b in backends:
        # getattr defaults: an attribute SGLang no longer sets means "not provably equivalent"
        if (type(b) is not backend_cls or getattr(b, "topk", 0) <= 1 or getattr(b, "page_size", 1) <= 1
                or getattr(b, "use_sliding_window_kv_pool", True) or getattr(b, "has_local_attention", True)
                or getattr(b, "has_swa", True)):
            return None
    return tuple(backends)


def batch_fusable(forward_batch, bs, cpu_lens_needed=True) -> bool:
    """Whether this batch is one the fused path writes exactly as SGLang would (the per-batch part of
    :func:`fusable_backends`)."""
    spec_info = forward_batch.spec_info
    return not (spec_info is None or not spec_info.is_draft_input() or forward_batch.encoder_lens is not None
                or (cpu_lens_needed and forward_batch.seq_lens_cpu is None)
                or forward_batch.out_cache_loc is None or bs < 1
                # fewer rows than bs: torch's copy_ might broadcast them; the kernel would not
                or forward_batch.seq_lens.shape[0] < bs or forward_batch.req_pool_indices.shape[0] < bs)


@functools.lru_cache(maxsize=1)
def _backend_class():
    # resolved once: this runs every draft round
    return resolve(FA3_BACKEND)


# multi-step backend -> {bs: (key, DraftStepTable or None)}. Beside the backend, not on
# it: a deep copy of the backend (tests, benchmarks) would carry the original's addresses.
_STEP_TABLES = weakref.WeakKeyDictionary()


def step_table(multi, backends, metadata, bs):
    """The :class:`DraftStepTable` of these backends' buffers at ``bs``, or None: launch per step.

    Cached; valid while every tensor it was built from is the same object. The key
    holds their ids and the table holds the tensors themselves, so no id in a live
    entry can be taken by a later tensor. A None entry holds nothing, but a stale
    None only costs the per-step launches, which are always right. A tensor whose
    storage is swapped in place (``set_``) is not noticed, as in ``kv_copy.pool_table``.
    """
    key = tuple(x for b, (m, e) in zip(backends, metadata) for x in (
        id(m.cache_seqlens_int32), id(m.page_table), id(e.cache_seqlens_int32), id(e.page_table),
        id(b.decode_cuda_graph_metadata["strided_indices"]), id(b.req_to_token),
        b.speculative_step_id, b.topk, b.page_size, b.speculative_num_steps))
    try:
        tables = _STEP_TABLES.setdefault(multi, {})
    except TypeError:  # not weakly referenceable: derive every round
        tables = {}
    cached = tables.get(bs)
    if cached is not None and cached[0] == key:
        return cached[1]
    b0 = backends[0]
    table = None
    # one launch passes one req_to_token, topk, page_size and cache_loc width for every step
    if all(b.req_to_token is b0.req_to_token and (b.topk, b.page_size, b.speculative_num_steps)
           == (b0.topk, b0.page_size, b0.speculative_num_steps) for b in backends):
        table = DraftStepTable.from_steps([
            DraftStep(m.cache_seqlens_int32, m.page_table, e.cache_seqlens_int32, e.page_table,
                      b.decode_cuda_graph_metadata["strided_indices"], b.speculative_step_id + 1)
            for b, (m, e) in zip(backends, metadata)])
    tables[bs] = (key, table)
    return table


def fused_replay_hook(original, multi, forward_batch, bs):
    """AROUND hook body for :data:`FUSED_TARGET` (``FlashAttentionMultiStepBackend.
    init_forward_metadata_replay_cuda_graph(self, forward_batch, bs)``)."""
    if not _switched_off:
        try:
            backends = fusable_backends(multi, forward_batch, bs)
            if backends is not None:
                # SGLang's per-step seq_lens_cpu.max().item(), once: a CPU tensor, so no device sync.
                write_fused(multi, backends, forward_batch, bs, int(forward_batch.seq_lens_cpu[:bs].max()))
                return None
        except Exception as exc:  # noqa: BLE001 -- never the scheduler's: SGLang's replay serves
            switch_off(exc)
    return original(multi, forward_batch, bs)


def write_fused(multi, backends, forward_batch, bs, max_seq_len_k, live_slots=False):
    """Every step's replay metadata, as SGLang's draft-decode branch writes it with this
    ``max_seq_len_k`` (``live_slots``: v2's expand from the first ``decode_length`` slots)."""
    seq_lens = forward_batch.seq_lens[:bs]
    req_pool_indices = forward_batch.req_pool_indices[:bs]
    out_cache_loc = forward_batch.out_cache_loc
    metadata = [(b.draft_decode_metadata_topk_normal[bs], b.draft_decode_metadata_topk_expand[bs])
                for b in backends]
    table = step_table(multi, backends, metadata, bs)
    if table is not None:
        b = backends[0]
        draft_decode_metadata_all_steps(
            table, seq_lens, req_pool_indices, b.req_to_token,
            (max_seq_len_k + b.page_size - 1) // b.page_size,
            out_cache_loc.view(-1, b.speculative_num_steps), b.topk, b.page_size, live_slots,
        )
    else:
        for b, (m, e) in zip(backends, metadata):
            draft_decode_metadata(
                m.cache_seqlens_int32, m.page_table, e.cache_seqlens_int32, e.page_table,
                seq_lens, req_pool_indices, b.req_to_token,
                b.decode_cuda_graph_metadata["strided_indices"],
                (max_seq_len_k + b.page_size - 1) // b.page_size,
                out_cache_loc.view(-1, b.speculative_num_steps),
                b.speculative_step_id + 1, b.topk, b.page_size, live_slots,
            )
    for b, (m, e) in zip(backends, metadata):
        m.max_seq_len_k = max_seq_len_k
        b.forward_metadata = m
        b.forward_metadata_spec_decode_expand = e


def warm_up(device, topk: int, steps: int, page_size: int, chosen: FA3Expand, live_slots: bool = False) -> None:
    """Compile the selected replacements' kernels for every index dtype serving hands them.

    ``live_slots`` (v2): the fused kernels' variant that slices each step's slots, and the expand
    builder at every ``cache_loc`` width SGLang hands it (``decode_length`` 1 .. steps - 1 from the
    replay, all ``steps`` slots from an eager draft step): the width is a constexpr.

    SGLang's draft graph runner (0.5.11 and 0.5.12 alike) passes the batch's int64 ``seq_lens`` where the batch
    size has a graph of its own, and its int32 graph buffer where it pads the batch; FA3 derives
    ``last_page_lens`` from either. Each dtype is a Triton variant of its own, and a variant
    first met while serving stalls the scheduler for its compile (seen on a GPU: the first
    padded batch of a timed pass compiled the all-steps kernel). Every launch here
    writes only the scratch tensors made for it.
    """
    if chosen is FA3Expand.OFF or topk <= 1 or page_size <= 1:
        return
    import torch

    i32 = dict(dtype=torch.int32, device=device)
    req_to_token = torch.zeros((1, 2 * page_size), **i32)
    rows = torch.zeros(1, dtype=torch.int64, device=device)
    strided = torch.arange(0, 2 * page_size, page_size, device=device)
    cache_loc = torch.zeros((topk, steps), dtype=torch.int64, device=device)  # out_cache_loc's view

    def step(decode_length):
        return DraftStep(torch.zeros(1, **i32), torch.zeros((1, 2), **i32), torch.zeros(topk, **i32),
                         torch.zeros((topk, decode_length + 1), **i32), strided, decode_length)

    widths = range(1, steps + 1) if live_slots else (steps,)
    for dtype in (torch.int32, torch.int64):
        seq_lens = torch.ones(1, dtype=dtype, device=device)
        for width in widths:
            expand_draft_page_table(torch.zeros(topk, **i32), torch.zeros((topk, steps + 1), **i32),
                                    seq_lens % page_size, 1, cache_loc[:, :width], topk, page_size)
        if chosen is FA3Expand.FUSED and steps > 1:
            # the per-step kernel serves where one table cannot stand for every step
            draft_decode_metadata(*step(1)[:4], seq_lens, rows, req_to_token, strided, 1, cache_loc, 1, topk,
                                  page_size, live_slots)
            table = DraftStepTable.from_steps([step(d) for d in range(1, steps)])  # the multi-step backend's steps - 1
            draft_decode_metadata_all_steps(table, seq_lens, rows, req_to_token, 1, cache_loc, topk, page_size,
                                            live_slots)
