"""FA3's tree-draft metadata builders on the v2 worker, replaced where asked
(``SGLANG_EAGLE_PAGED_FA3_EXPAND`` unset or ``fused``: the fused replay metadata, on the releases where
it is proven; ``expand``; ``off``: SGLang's own; see :mod:`sglang_eagle_paged.settings`).

The same host cost as on v1 (:mod:`..common.fa3_metadata`), reached another way. Every v2
release's draft CUDA-graph runner calls, per draft round,
``FlashAttentionMultiStepBackend.init_forward_metadata_out_graph(forward_batch)`` (v1's
``init_forward_metadata_replay_cuda_graph`` is gone from the class), which hands each per-step
backend's ``init_forward_metadata_out_graph(inner_fb, in_capture)`` the batch; the replay ends in
``_apply_cuda_graph_metadata``, whose topk > 1 draft-decode branch is v1's but for two things:

- the expand builder ``draft_decode_set_expand_metadata`` (same name, parameters and body as
  0.5.12's in every v2 release) gets ``cache_loc[:, :decode_length]``, not the whole row;
- from 0.5.17 the page-table bound ``max_seq_len_k`` is ``seq_lens_cpu.max()`` only where the
  per-step backend's ``needs_cpu_seq_lens`` is set (the default is not), else ``max_context_len``
  (0.5.13 and 0.5.15 use other rules: :data:`~sglang_eagle_paged.releases.PROVEN`).

So: ``expand`` installs v1's replacement of the expand builder (it takes any ``cache_loc`` width);
``fused`` adds an AROUND hook on the multi-step backend's ``init_forward_metadata_out_graph`` that
writes every step's metadata in one launch with the kernels' ``live_slots`` (the slice) where it
writes exactly what SGLang would (:func:`wrote_fused`), and calls SGLang otherwise (capture,
anything :func:`..common.fa3_metadata.fusable_backends` refuses, per-step backends that disagree
on the bound). The hook bodies are the draft step's (:mod:`.draft_step`), with the v2 fault rule
(:mod:`.fault`): an exception on our path never reaches the scheduler; SGLang's builders serve
that call and every later one.
"""

import logging

from ...settings import FA3Expand, Settings
from ..common import fa3_metadata
from . import draft_plan, fa3_dense
from .sglang_api import FA3_FUSED_TARGET

logger = logging.getLogger("sglang_eagle_paged")

FUSED_TARGET = FA3_FUSED_TARGET


def chosen(settings: Settings, version=None) -> FA3Expand:
    """What serves on v2 ``version``: the setting; where the fused replay hook is not proven, an
    explicit ``fused`` comes down to ``expand`` and the unset default to SGLang's own builders (one
    line says which and why)."""
    from ...releases import unproven

    selection = settings.fa3_expand_for("v2")
    if selection is FA3Expand.FUSED:
        problem = unproven("fa3_fused_v2" if settings.fa3_expand_explicit else "fa3_fused_v2_default", version)
        if problem:
            logger.info("[sglang-eagle-paged] %s", problem)
            return FA3Expand.EXPAND if settings.fa3_expand_explicit else FA3Expand.OFF
    return selection


def describe(hooked: list) -> str:
    if FUSED_TARGET in hooked:
        return "fused"
    return "expand" if fa3_metadata.TARGET in hooked else "SGLang's"


def wrote_fused(multi, forward_batch, bs, path) -> bool:
    """Every step's metadata in one launch, where that writes exactly what SGLang would; ``path``: the
    draft runner's :class:`.draft_plan.Fa3Path` (the steps, their bound rule, the batch sizes that fit)."""
    max_seq_len_k = path.batch_bound(forward_batch, bs) if path.fused else None
    if max_seq_len_k is None:
        return False
    fa3_metadata.write_fused(multi, list(path.steps), forward_batch, bs, max_seq_len_k, live_slots=True)
    return True


def warm_up_hook(selection: FA3Expand):
    """AFTER hook for the draft workers' ``init_attention_backend``: compile the replacements'
    kernel variants for this worker's FA3 draft backend before serving."""

    def after(result, worker, *args, **kwargs):
        multi = getattr(worker, "draft_attn_backend", None)
        cls = type(multi)
        if f"{cls.__module__}.{cls.__qualname__}" != fa3_metadata.FA3_MULTI_STEP_BACKEND:
            return result  # another backend: the replacements never run
        try:
            first = multi.attn_backends[0] if multi.attn_backends else None
            if first is not None:
                fa3_metadata.warm_up(first.device, multi.topk, multi.speculative_num_steps, first.page_size,
                                     selection, live_slots=True)
                if selection is FA3Expand.FUSED:  # issue 61 seam: the per-token form's writer, where it serves
                    fa3_dense.warm_up(multi, draft_plan.fa3_path(multi))  # start-up: the plan's own rule
        except Exception as exc:  # noqa: BLE001 -- our kernels failed before serving: SGLang's builders serve
            from . import fault

            fault.trip("fa3 draft metadata warm-up", exc)
        return result

    return after
