"""fa3 and the per-token draft form (issue 61): the fused metadata writer for fa3 in place, and the
dense draft layout on fa3.

The per-token form (:mod:`.fa3_in_place`) reads the whole prefix through SGLang's page table and
each branch's draft slots one slot per "page" of a page-size-1 view: whatever slots
``out_cache_loc`` names. So it reads SGLang's per-branch layout (its copied tail unread) and the
dense layout (:mod:`.dense_draft`: branch ``t``, step ``s`` at row position ``L + t*steps + s``)
alike, and each branch's index list is then page 1's: ``req_to_token[r, :L]`` and its own slots.

Three pieces, each called from one seam in :mod:`.draft_step`, :mod:`.dense_draft` and
:mod:`.fa3_replay`; what serves was decided once per draft runner (its plan's :class:`.draft_plan.Fa3Path`,
``per_token``) and the dense layout's state is the one :class:`.dense_draft.DenseLayout` the hook
table handed the runner's plan, so each piece only reads:

- :func:`wrote_per_token`: the draft CUDA graph's replay metadata of every step, in the per-token
  form, in one sync-free launch (:mod:`...kernels.per_token_draft_metadata`), in place of SGLang's
  per-step builders (a dozen small ops each and a ``torch.compile``'d one) and our rewrite after
  them. It writes exactly what they write (tests/adapters/v2/test_fa3_dense.py, on SGLang's real
  backends), and only where the plan found every step it writes covered by fa3 in place; anything
  else is SGLang's builders and the rewrite, as before.
- :func:`refusal`: whether the dense layout may serve a draft runner whose backend is fa3's
  multi-step draft backend: every step backend covered by fa3 in place (its hooks rewrite every
  draft decode to the per-token form and give the expand call its view), no decode context
  parallelism.
- the fault rule for the dense layout on fa3 (:func:`reads_dense`, :func:`after_rewrite_fault`):
  a round allocated with the dense reserve has no per-branch pages, so SGLang's split cannot read
  it. Until the layout is handed back (:meth:`.dense_draft.DenseLayout.hand_back`: the first round
  allocated with SGLang's reserve after the fault), fa3's draft keeps the per-token form: after a
  fault in the fused writer, SGLang's builders and our rewrite (plain torch ops); after a fault in
  the rewrite itself, the plain-torch reference of the fused writer, for that call. From the hand
  back on, SGLang's per-branch layout with SGLang's own metadata (or the per-token form where a
  CUDA graph was captured with it, which reads that layout too).
"""

import torch

from ...kernels.draft_decode_metadata import DraftStep, DraftStepTable
from ...kernels.per_token_draft_metadata import (
    per_token_draft_metadata_all_steps,
    per_token_draft_metadata_reference,
)
from ..common import fa3_metadata
from . import fa3_in_place
from .sglang_api import FA3_MULTI_STEP_BACKEND


def is_fa3(draft_backend) -> bool:
    """Whether ``draft_backend`` is SGLang's multi-step FA3 draft backend (by its class's own name)."""
    cls = type(draft_backend)
    return f"{cls.__module__}.{cls.__qualname__}" == FA3_MULTI_STEP_BACKEND


def refusal(draft_backend) -> str | None:
    """None where the dense layout may serve fa3's multi-step draft backend ``draft_backend``."""
    steps = list(getattr(draft_backend, "attn_backends", ()) or ())
    if not steps:
        return "fa3's multi-step draft backend has no step backends"
    if not all(fa3_in_place.covered(b) for b in steps):
        return ("fa3 reads the dense slots only in the per-token form, and fa3 in place does not cover every "
                "draft step backend (its start-up line says why)")
    if any((getattr(b, "dcp_size", 1) or 1) > 1 for b in steps):
        return "decode context parallelism is not covered by fa3 in place"
    return None


def reads_dense(dense) -> bool:
    """Whether drafts still run on rounds allocated for the dense layout ``dense`` (the runner's plan's
    :class:`.dense_draft.DenseLayout`, None where not asked): it serves, or a fault has not yet handed
    it back. fa3's draft must then read per token, even after a fault."""
    return dense is not None and dense.active


def wrote_per_token(multi, forward_batch, bs, path) -> bool:
    """Every step's replay metadata of ``multi`` in the per-token form, in one launch, where the draft
    runner's :class:`.draft_plan.Fa3Path` ``path`` found every step it writes covered by fa3 in place,
    SGLang's tables at ``bs`` take the write and the steps agree on the page bound; False (nothing
    written) elsewhere: SGLang's builders and our rewrite serve."""
    max_seq_len_k = path.batch_bound(forward_batch, bs) if path.per_token else None
    if max_seq_len_k is None:
        return False
    backends = list(path.steps)
    metadata = [(b.draft_decode_metadata_topk_normal[bs], b.draft_decode_metadata_topk_expand[bs]) for b in backends]
    table = fa3_metadata.step_table(multi, backends, metadata, bs)
    if table is None:  # the steps disagree on what one launch passes: SGLang's builders and the rewrite
        return False
    b = backends[0]
    steps = b.speculative_num_steps
    per_token_draft_metadata_all_steps(
        table, forward_batch.seq_lens[:bs], forward_batch.req_pool_indices[:bs], b.req_to_token,
        (max_seq_len_k + b.page_size - 1) // b.page_size, forward_batch.out_cache_loc.view(-1, steps), b.topk,
        b.page_size)
    for b, (m, e) in zip(backends, metadata):  # what SGLang's builder leaves besides the buffers
        m.max_seq_len_k = max_seq_len_k
        b.forward_metadata = m
        b.forward_metadata_spec_decode_expand = e
        fa3_in_place.mark_per_token(e.page_table)
    return True


def after_rewrite_fault(backend, forward_batch, dense) -> None:
    """After our rewrite of one step backend's metadata faulted: where the draft reads a round
    allocated for the dense layout ``dense`` (see :func:`reads_dense`), the per-token form from the
    fused writer's plain-torch reference (SGLang's split cannot read that round); elsewhere nothing
    (SGLang's split over its copy serves)."""
    if not reads_dense(dense):
        return
    metadata, expand = backend.forward_metadata, backend.forward_metadata_spec_decode_expand
    out_cache_loc = getattr(forward_batch, "out_cache_loc", None)
    if expand is None or out_cache_loc is None or forward_batch.spec_info is None \
            or not forward_batch.forward_mode.is_decode_or_idle():
        return
    bs = metadata.cache_seqlens_int32.shape[0]
    # The first pass's page table is SGLang's own already (no column to write: max_seq_pages 0);
    # only the lengths and the expand pass change.
    no_columns = torch.empty(0, dtype=torch.int64, device=metadata.page_table.device)
    step = DraftStep(metadata.cache_seqlens_int32, metadata.page_table, expand.cache_seqlens_int32,
                     expand.page_table, no_columns, backend.speculative_step_id + 1)
    try:
        per_token_draft_metadata_reference([step], forward_batch.seq_lens[:bs], forward_batch.req_pool_indices[:bs],
                                           backend.req_to_token, 0, out_cache_loc.view(-1, backend.speculative_num_steps),
                                           backend.topk, backend.page_size)
    except Exception:  # noqa: BLE001 -- never the scheduler's; the switch is tripped and said once already:
        return  # this draft reads SGLang's split over the dense slots, which costs its drafts only (verify decides)
    fa3_in_place.mark_per_token(expand.page_table)


def warm_up(multi, path) -> None:
    """Compile the per-token writer's variants (the batch's int64 lengths, a padded replay's int32
    graph buffer) for ``multi``'s step count, before serving, where its :class:`.draft_plan.Fa3Path`
    ``path`` says the per-token writer serves: a variant first met while serving stalls the scheduler
    for its compile. Writes only scratch."""
    steps = getattr(multi, "speculative_num_steps", 0) or 0
    backends = list(getattr(multi, "attn_backends", ()) or ())
    if steps < 2 or not backends or path is None or not path.per_token:
        return
    first = backends[0]
    topk, page, device = multi.topk, first.page_size, first.device
    i32 = dict(dtype=torch.int32, device=device)
    strided = torch.arange(0, 2 * page, page, device=device)
    table = DraftStepTable.from_steps([
        DraftStep(torch.zeros(1, **i32), torch.zeros((1, 2), **i32), torch.zeros(topk, **i32),
                  torch.zeros((topk, d + 1), **i32), strided, d) for d in range(1, steps)])
    for dtype in (torch.int32, torch.int64):
        per_token_draft_metadata_all_steps(
            table, torch.ones(1, dtype=dtype, device=device), torch.zeros(1, dtype=torch.int64, device=device),
            torch.zeros((1, 2 * page), **i32), 1, torch.zeros((topk, steps), dtype=torch.int64, device=device),
            topk, page)
