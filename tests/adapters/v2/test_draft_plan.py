"""The draft plan (issue 61, point 2): one per draft runner, decided once per (runner, backend objects,
pool buffers), on SGLang 0.5.23's real pool and real backend classes (``object.__new__``: the plan
reads their classes and attributes, nothing their constructors need a GPU for)."""

from types import SimpleNamespace

import pytest

import v2_support as support

support.require_sglang()

import torch  # noqa: E402
from sglang.srt.layers.attention import flashattention_backend as fa3b  # noqa: E402
from sglang.srt.layers.attention import triton_backend as trb  # noqa: E402

from sglang_eagle_paged.adapters.v2 import draft_plan  # noqa: E402

torch.set_num_threads(1)


def _runner(pool, cls):
    return SimpleNamespace(draft_attn_backend=object.__new__(cls), token_to_kv_pool=pool)


def test_a_plan_recorded_for_one_draft_runner_never_serves_another(monkeypatch):
    """Two draft runners over one pool (a draft worker built again over the pool SGLang keeps): the
    triton runner's plan skips the copy (its reader never sees it); the fa3 runner's must copy
    (its reader reads the copied slots). Recording for the second runner derives its own plan,
    though the first one's still holds for the pool and for the first runner's backend."""
    monkeypatch.delenv("SGLANG_USE_HND_KVCACHE", raising=False)
    pool = support.make_pool(4, 64)
    triton, fa3 = _runner(pool, trb.TritonMultiStepDraftBackend), _runner(pool, fa3b.FlashAttentionMultiStepBackend)
    first = draft_plan.record(pool, triton)
    assert first.copy == draft_plan.SKIP and first.runner is triton
    second = draft_plan.record(pool, fa3)
    assert second.runner is fa3 and second.backend is fa3.draft_attn_backend
    assert second.copy == draft_plan.OURS  # never the triton runner's skip
    assert draft_plan.current(pool) is second  # what the duplication reads from now on
    assert draft_plan.record(pool, fa3) is second  # and recording it again keeps it


def test_a_plan_is_derived_again_where_sglang_replaced_the_backend(monkeypatch):
    """The control for the identity checks: same runner, a new backend object (SGLang rebuilt it)."""
    monkeypatch.delenv("SGLANG_USE_HND_KVCACHE", raising=False)
    pool = support.make_pool(4, 64)
    runner = _runner(pool, trb.TritonMultiStepDraftBackend)
    first = draft_plan.record(pool, runner)
    assert draft_plan.current(pool) is first
    runner.draft_attn_backend = object.__new__(fa3b.FlashAttentionMultiStepBackend)
    again = draft_plan.current(pool)
    assert again is not first and again.backend is runner.draft_attn_backend and again.copy == draft_plan.OURS


# ------------------------------------------------------------------ a draft step re-derives nothing

# Everything a plan decides from: a call of any of these during a draft step re-derives a start-up decision.
DERIVATIONS = {
    "draft_plan.derive": ("sglang_eagle_paged.adapters.v2.draft_plan", "derive"),
    "draft_plan.fa3_path": ("sglang_eagle_paged.adapters.v2.draft_plan", "fa3_path"),
    "backends.copy_needed": ("sglang_eagle_paged.adapters.v2.backends", "copy_needed"),
    "pools.decline_reason": ("sglang_eagle_paged.adapters.v2.pools", "decline_reason"),
    "pools.layout_reason": ("sglang_eagle_paged.adapters.v2.pools", "layout_reason"),
    "fa3_in_place.not_covered": ("sglang_eagle_paged.adapters.v2.fa3_in_place", "not_covered"),
    "fa3_in_place.reads_in_place": ("sglang_eagle_paged.adapters.v2.fa3_in_place", "reads_in_place"),
    "dense_draft.refusal": ("sglang_eagle_paged.adapters.v2.dense_draft", "refusal"),
    "fa3_metadata.fusable_steps": ("sglang_eagle_paged.adapters.common.fa3_metadata", "fusable_steps"),
    "fa3_metadata.fusable_backends": ("sglang_eagle_paged.adapters.common.fa3_metadata", "fusable_backends"),
    "kv_copy.watch_buffers": ("sglang_eagle_paged.adapters.common.kv_copy", "watch_buffers"),
}


def _count(monkeypatch) -> dict:
    import importlib

    counts = dict.fromkeys(DERIVATIONS, 0)
    for name, (module, attr) in DERIVATIONS.items():
        mod = importlib.import_module(module)
        real = getattr(mod, attr)

        def counted(*a, _real=real, _name=name, **k):
            counts[_name] += 1
            return _real(*a, **k)

        monkeypatch.setattr(mod, attr, counted)
    return counts


def test_a_draft_step_rederives_nothing_decided_at_start_up(monkeypatch):
    """A draft runner whose decode backend is SGLang's multi-step FA3 backend (its per-step backends
    as SGLang's graph capture leaves them, ``tools.harness``), warmed up as a server warms it up; then
    draft steps through our hook bodies as SGLang calls them: the prefix-tail duplication (our copy),
    fa3's fused replay metadata. Each step may read the plan's fields and check identities; it may not
    call anything the plan was decided from. Then the control: SGLang replaces the backend, and the
    next step derives the plan again, once."""
    import random

    from sglang_eagle_paged.adapters.v2 import draft_step, fault, warm_up
    from sglang_eagle_paged.settings import Mode
    from sglang_eagle_paged.tools.harness import fa3_multi_step_backend
    from test_fa3_replay import replay_batch

    monkeypatch.delenv("SGLANG_USE_HND_KVCACHE", raising=False)
    monkeypatch.setattr(fault.SWITCH, "reason", None)
    topk, steps, page, seq = 3, 3, 4, [5, 6]
    pool, rows = support.layout_rows(seq, page, topk, steps, seed=11)
    multi = fa3_multi_step_backend(topk, steps, page, [2, 4])
    for step in multi.attn_backends:
        step.token_to_kv_pool = pool  # the draft runner's pool, as the backend's __init__ takes it
    runner = SimpleNamespace(draft_attn_backend=multi, token_to_kv_pool=pool,
                             req_to_token_pool=SimpleNamespace(req_to_token=rows))
    warm_up.after_hook(None, SimpleNamespace(topk=topk, speculative_num_steps=steps, speculative_num_draft_tokens=4,
                                             draft_runner=runner))
    plan = draft_plan.current(pool)
    assert plan.copy == draft_plan.OURS and plan.fa3 is not None and plan.fa3.fused
    duplication = draft_step.duplication_hook(Mode.ON)
    rng = random.Random(11)
    counts = _count(monkeypatch)
    sglangs = []
    for _ in range(3):
        duplication(lambda *a: sglangs.append("copy"), pool, rows, *support.draft_args(seq, page, steps), topk, page)
        fb = replay_batch(rng, multi, 2, 2)
        draft_step.fused_out_graph_hook(lambda *a, **k: sglangs.append("replay"), multi, fb)
    assert sglangs == []  # ours served every step: our copy, our fused metadata
    assert counts == dict.fromkeys(DERIVATIONS, 0), counts
    assert not fault.SWITCH
    # the control: a new backend object (SGLang rebuilt it), so the plan is derived again, once
    runner.draft_attn_backend = object.__new__(trb.TritonMultiStepDraftBackend)
    duplication(lambda *a: None, pool, rows, *support.draft_args(seq, page, steps), topk, page)
    duplication(lambda *a: None, pool, rows, *support.draft_args(seq, page, steps), topk, page)
    assert counts["draft_plan.derive"] == 1 and counts["backends.copy_needed"] == 1, counts
