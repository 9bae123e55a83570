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
  (0.5.13 and 0.5.15 use other rules: :data:`~sglang_eagle_paged.releases.FA3_FUSED_V2_PROVEN`).

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

from ...hooks import Hook, resolvable
from ...settings import FA3Expand, Settings
from ..common import fa3_metadata
from . import fa3_in_place

logger = logging.getLogger("sglang_eagle_paged")

FUSED_TARGET = fa3_metadata.FA3_MULTI_STEP_BACKEND + ".init_forward_metadata_out_graph"


def chosen(settings: Settings, version=None) -> FA3Expand:
    """What serves on v2 ``version``: the setting; where the fused replay hook is not proven, an
    explicit ``fused`` comes down to ``expand`` and the unset default to SGLang's own builders (one
    line says which and why)."""
    from ...releases import fa3_fused_v2_problem

    selection = settings.fa3_expand_for("v2")
    if selection is FA3Expand.FUSED:
        problem = fa3_fused_v2_problem(version, explicit=settings.fa3_expand_explicit)
        if problem:
            logger.info("[sglang-eagle-paged] %s", problem)
            return FA3Expand.EXPAND if settings.fa3_expand_explicit else FA3Expand.OFF
    return selection


def hooks(settings: Settings, warm_up_targets, version=None) -> list:
    """The hooks serving ``settings`` on v2: the replacements and their warm-up after each of
    ``warm_up_targets`` (the draft workers' ``init_attention_backend``)."""
    selection = chosen(settings, version)
    if selection is FA3Expand.OFF:
        return []
    from . import draft_step

    required = settings.fa3_expand_explicit
    out = fa3_metadata.hooks(FA3Expand.EXPAND, required, expand=draft_step.expand_hook)
    if selection is FA3Expand.FUSED and out:
        for target in (FUSED_TARGET, fa3_metadata.FA3_BACKEND):
            problem = resolvable(target)
            if problem is not None:
                if required:
                    raise LookupError(f"SGLANG_EAGLE_PAGED_FA3_EXPAND=fused but {target} is missing: {problem}")
                return []
        out.append(Hook(FUSED_TARGET, draft_step.fused_out_graph_hook, "around", required))
    if not out:
        return []
    warm = warm_up_hook(FA3Expand.FUSED if len(out) > 1 else FA3Expand.EXPAND)
    return out + [Hook(t, warm, "after", required=False) for t in warm_up_targets]


def describe(hooked: list) -> str:
    if FUSED_TARGET in hooked:
        return "fused"
    return "expand" if fa3_metadata.TARGET in hooked else "SGLang's"


def _max_seq_len_k(backends, forward_batch, bs):
    """SGLang's page-table bound of every step (0.5.17 ..), or None where the steps disagree or
    an attribute it reads is not there."""
    out = set()
    for b in backends:
        needs = getattr(b, "needs_cpu_seq_lens", None)
        limit = getattr(b, "max_context_len", None)
        if not isinstance(needs, bool) or not isinstance(limit, int):
            return None
        cpu = forward_batch.seq_lens_cpu if needs else None
        out.add(int(cpu[:bs].max()) if cpu is not None else limit)  # a CPU tensor: no device sync
    return out.pop() if len(out) == 1 else None


def wrote_fused(multi, forward_batch, bs) -> bool:
    """Every step's metadata in one launch, where that writes exactly what SGLang would."""
    backends = fa3_metadata.fusable_backends(multi, forward_batch, bs, cpu_lens_needed=False)
    # SGLang asserts the live slots fit the expand table; where they do not, it raises
    if backends is None or not all(
            min(b.speculative_step_id + 1, b.speculative_num_steps)
            <= b.draft_decode_metadata_topk_expand[bs].page_table.shape[1] for b in backends):
        return False
    max_seq_len_k = _max_seq_len_k(backends, forward_batch, bs)
    if max_seq_len_k is None:
        return False
    fa3_metadata.write_fused(multi, backends, forward_batch, bs, max_seq_len_k, live_slots=True)
    return True


def reads_in_place(multi) -> bool:
    """Whether fa3 in place marked a step backend of ``multi``: it rewrites each step's metadata
    after SGLang's per-step builders (its AFTER hooks), and a graph captured with its per-token
    view reads only that form, which :func:`wrote_fused` does not write; so such a draft backend
    takes the per-token form's writer instead (:func:`.fa3_dense.wrote_per_token`, issue 61), or
    SGLang's builders and the rewrite (whether or not in place has switched itself off since)."""
    return any(getattr(b, fa3_in_place.MARK, False) for b in (getattr(multi, "attn_backends", None) or ()))


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
                    from . import fa3_dense

                    fa3_dense.warm_up(multi)
        except Exception as exc:  # noqa: BLE001 -- an optimisation: the kernels compile on first use instead
            logger.warning("[sglang-eagle-paged] FA3 draft metadata kernels not compiled ahead (%s: %s); "
                           "they compile on first use", type(exc).__name__, str(exc)[:300])
        return result

    return after
