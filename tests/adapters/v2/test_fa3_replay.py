"""FA3's tree-draft metadata replacements on the v2 worker (``SGLANG_EAGLE_PAGED_FA3_EXPAND``,
fused by default where proven), against the installed SGLang's own replay.

The backends are SGLang's (``tools.harness.fa3_multi_step_backend``: ``object.__new__`` plus
the attributes its methods read, CUDA-graph buffers allocated by ``init_cuda_graph_state`` and
captured by ``init_forward_metadata_out_graph(in_capture=True)``). SGLang's replay is its own
``FlashAttentionMultiStepBackend.init_forward_metadata_out_graph``; its
``draft_decode_set_expand_metadata`` is a ``torch.compile`` function, for which the sweep runs
its undecorated body (the same source, eagerly), as the v1 tests do.
"""

import copy
import importlib
import logging
import os
import random
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from helpers.fa3_replay import assert_same_state
from helpers.fa3_replay import replay_batch as v1_replay_batch
from helpers.hook_sandbox import hook_sandbox
from helpers.interpreter_order import capture_specializations
from helpers.sglang_source import undecorated

from sglang_eagle_paged import settings
from sglang_eagle_paged.adapters import v2
from sglang_eagle_paged.adapters.common import fa3_metadata
from sglang_eagle_paged.adapters.v2 import draft_plan, draft_step, fa3_replay, fault, hook_table
from sglang_eagle_paged.kernels.draft_decode_metadata import (
    _draft_decode_metadata_all_steps_kernel,
    _draft_decode_metadata_kernel,
)
from sglang_eagle_paged.kernels.expand_metadata import _expand_draft_page_table_kernel
from sglang_eagle_paged.settings import FA3Expand
from sglang_eagle_paged.tools.harness import fa3_multi_step_backend as make_multi

fa3 = importlib.import_module(fa3_metadata.FA3_MODULE)

pytestmark = pytest.mark.skipif(not hasattr(fa3.FlashAttentionMultiStepBackend, "init_forward_metadata_out_graph"),
                                reason="a v1 SGLang: tests/adapters/common/test_fa3_metadata.py covers it")

# In a namespace, not module globals: HookRegistry rebinds every module global that is the
# object it wraps.
SG = types.SimpleNamespace(
    out_graph=fa3.FlashAttentionMultiStepBackend.__dict__["init_forward_metadata_out_graph"],
    expand_eager=undecorated(fa3.draft_decode_set_expand_metadata, "draft_decode_set_expand_metadata"),
)


def replay_batch(rng, multi, raw_bs, bs):
    """v1's replay batch plus the forward mode v2's ``build_inner_fb_view`` reads."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    fb = v1_replay_batch(rng, multi, raw_bs, bs)
    fb.forward_mode = ForwardMode.DECODE
    return fb


@pytest.fixture(autouse=True)
def serving(monkeypatch):
    """Every test starts with our builders serving (a fault test switches them off)."""
    monkeypatch.setattr(fault.SWITCH, "reason", None)


@pytest.fixture
def launches(monkeypatch):
    """The fused hook's launches, in order ("all" or "step")."""
    calls = []
    for kind, name in (("step", "draft_decode_metadata"), ("all", "draft_decode_metadata_all_steps")):
        real = getattr(fa3_metadata, name)
        monkeypatch.setattr(fa3_metadata, name, lambda *a, _k=kind, _r=real, **kw: (calls.append(_k), _r(*a, **kw)))
    return calls


def sglang_replay(multi, fb):
    """A copy of ``multi`` after SGLang's own replay of ``fb`` (its expand builder's body, eagerly)."""
    ref = copy.deepcopy(multi)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fa3, "draft_decode_set_expand_metadata", SG.expand_eager)
        SG.out_graph(ref, copy.copy(fb))
    return ref


def _differs(ma, mb):
    return any(not torch.equal(x.draft_decode_metadata_topk_expand["page_table"],
                               y.draft_decode_metadata_topk_expand["page_table"])
               for x, y in zip(ma.attn_backends, mb.attn_backends))


def test_fused_hook_matches_sglang_replay(launches):
    rng = random.Random(23)
    slicing_mattered = 0
    for c in range(12):
        page = rng.choice((2, 4, 16, 64, 128))
        topk, steps = rng.randint(2, 8), rng.randint(2, min(6, page + 1))
        capture_bs = sorted(rng.sample(range(1, 10), 3))
        multi = make_multi(topk, steps, page, capture_bs, max_ctx=page * rng.randint(3, 12), seed=c)
        cpu_lens = c % 3 == 0  # a backend that asks for the CPU lengths bounds the table by them
        for b in multi.attn_backends:
            b.needs_cpu_seq_lens = cpu_lens
        for _ in range(3):
            bs = rng.choice(capture_bs)
            fb = replay_batch(rng, multi, rng.randint(1, bs), bs)
            ma, mb, v1_style = sglang_replay(multi, fb), copy.deepcopy(multi), copy.deepcopy(multi)
            n = len(launches)
            assert draft_step.fused_out_graph_hook(SG.out_graph, mb, copy.copy(fb)) is None
            assert launches[n:] == ["all"]
            assert_same_state(ma, mb, bs)
            assert _differs(ma, multi) or int(fb.seq_lens.max()) == 0  # SGLang wrote something
            # v1's unsliced expand rows would differ here: the slice is what this test checks
            backends = fa3_metadata.fusable_backends(v1_style, fb, bs, cpu_lens_needed=False)
            bound = draft_plan.fa3_path(v1_style).page_bound(fb, bs)
            fa3_metadata.write_fused(v1_style, backends, fb, bs, bound)
            slicing_mattered += _differs(ma, v1_style)
    assert slicing_mattered > 0


def test_expand_replacement_matches_sglang_replay():
    """``expand`` alone: SGLang's own replay, its expand builder our replacement."""
    rng = random.Random(5)
    for c, (topk, steps, page) in enumerate(((4, 3, 16), (8, 5, 64), (2, 6, 4))):
        multi = make_multi(topk, steps, page, [1, 3], seed=c)
        fb = replay_batch(rng, multi, 2, 3)
        ma, mb = sglang_replay(multi, fb), copy.deepcopy(multi)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(fa3, "draft_decode_set_expand_metadata", fa3_metadata.expand_metadata_replacement)
            SG.out_graph(mb, copy.copy(fb))
        assert_same_state(ma, mb, 3)
        assert _differs(ma, multi)


def _original():
    calls = []

    def original(multi, forward_batch, in_capture=False):
        calls.append(in_capture)
        return "sglang"

    return original, calls


@pytest.mark.parametrize("case", ["capture", "page_1", "sliding_window_pool", "steps_disagree", "flag_not_bool",
                                  "not_draft", "narrow_expand_table"])
def test_fused_hook_leaves_to_sglang_what_it_cannot_prove(case, launches):
    multi = make_multi(4, 4, 16, [2])
    fb = replay_batch(random.Random(3), multi, 2, 2)
    in_capture = case == "capture"
    if case == "page_1":
        for b in multi.attn_backends:
            b.page_size = 1
    elif case == "sliding_window_pool":
        multi.attn_backends[1].use_sliding_window_kv_pool = True
    elif case == "steps_disagree":
        multi.attn_backends[1].needs_cpu_seq_lens = True
    elif case == "flag_not_bool":  # not what this release sets: not provably SGLang's reading of it
        multi.attn_backends[0].needs_cpu_seq_lens = None
    elif case == "not_draft":
        fb.spec_info = types.SimpleNamespace(is_draft_input=lambda: False)
    elif case == "narrow_expand_table":  # SGLang asserts the live slots fit; it raises, not us
        e = multi.attn_backends[2].draft_decode_metadata_topk_expand[2]
        e.page_table = e.page_table[:, :2]
    original, calls = _original()
    assert draft_step.fused_out_graph_hook(original, multi, fb, in_capture=in_capture) == "sglang"
    assert calls == [in_capture] and launches == []


FAILED_CALLS = []


def _fail(*args, **kwargs):
    FAILED_CALLS.append(1)
    raise RuntimeError("triton compile failed")


def test_a_fault_in_the_fused_path_serves_sglangs_replay_and_switches_ours_off(monkeypatch, launches, caplog):
    rng = random.Random(11)
    multi = make_multi(4, 4, 16, [2, 4])
    monkeypatch.setattr(fa3_metadata, "draft_decode_metadata_all_steps", _fail)  # ours, not SGLang's
    FAILED_CALLS.clear()
    with pytest.MonkeyPatch.context() as m, caplog.at_level(logging.ERROR, logger="sglang_eagle_paged"):
        m.setattr(fa3, "draft_decode_set_expand_metadata", SG.expand_eager)  # SGLang's body, eagerly
        for bs in (2, 4, 4):
            fb = replay_batch(rng, multi, bs, bs)
            ref, got = sglang_replay(multi, fb), copy.deepcopy(multi)
            assert draft_step.fused_out_graph_hook(SG.out_graph, got, copy.copy(fb)) is None
            assert_same_state(ref, got, bs)  # SGLang's replay, whatever ours began to write
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "switched off for this process" in errors[0] and "triton compile failed" in errors[0]
    assert len(FAILED_CALLS) == 1  # ours is off after its fault: the later rounds never try it


def test_a_fault_in_the_expand_replacement_serves_sglangs_builder(monkeypatch, caplog):
    rng = random.Random(12)
    multi = make_multi(8, 5, 64, [3])
    fb = replay_batch(rng, multi, 3, 3)
    ref = sglang_replay(multi, fb)
    monkeypatch.setattr(fa3_metadata, "expand_draft_page_table", _fail)  # ours, not SGLang's
    got = copy.deepcopy(multi)
    with pytest.MonkeyPatch.context() as m, caplog.at_level(logging.ERROR, logger="sglang_eagle_paged"):
        # SGLang's replay with its expand builder wrapped as the AROUND hook wraps it
        m.setattr(fa3, "draft_decode_set_expand_metadata",
                  lambda *a, **kw: draft_step.expand_hook(SG.expand_eager, *a, **kw))
        SG.out_graph(got, copy.copy(fb))
        SG.out_graph(copy.deepcopy(multi), copy.copy(fb))
    assert_same_state(ref, got, 3)
    assert [r.levelno for r in caplog.records].count(logging.ERROR) == 1 and fault.SWITCH
    assert not fa3_metadata.switched_off()  # the v2 switch, not v1's


# ---------------------------------------------------------------- selection and registration

def _targets(hooks):
    return [h.target for h in hooks]


def test_the_default_is_fused_where_proven_and_each_value_installs_its_hooks(caplog):
    fused = fa3_replay.FUSED_TARGET
    default = _targets(v2.hooks(settings.parse({})))  # this environment's release: proven
    assert fa3_metadata.TARGET in default and fused in default
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):  # unproven: SGLang's builders, one line why
        assert not {fa3_metadata.TARGET, fused} & set(_targets(v2.hooks(settings.parse({}), version="0.5.13.post1")))
    assert any("the v2 default" in r.getMessage() and "0.5.13.post1" in r.getMessage() for r in caplog.records)
    got = _targets(v2.hooks(settings.parse({settings.FA3_EXPAND: "fused"})))
    assert fa3_metadata.TARGET in got and fused in got
    assert sum(t.endswith(".init_attention_backend") for t in got) >= 2  # theirs and the copy's warm-up
    got = _targets(v2.hooks(settings.parse({settings.FA3_EXPAND: "expand"})))
    assert fa3_metadata.TARGET in got and fused not in got
    assert not {fa3_metadata.TARGET, fused} & set(_targets(v2.hooks(settings.parse({settings.FA3_EXPAND: "off"}))))
    fake = _targets(v2.hooks(settings.parse({settings.MODE: "fake", settings.FA3_EXPAND: "fused"})))
    assert fa3_metadata.TARGET in fake and fused in fake  # an A/B against fake differs by the copy only


def test_fused_is_expand_only_where_the_replay_hook_is_unproven(caplog):
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        got = _targets(v2.hooks(settings.parse({settings.FA3_EXPAND: "fused"}), version="0.5.15.post1"))
    assert fa3_metadata.TARGET in got and fa3_replay.FUSED_TARGET not in got
    assert any("FA3_EXPAND=fused" in r.getMessage() and "0.5.15.post1" in r.getMessage() for r in caplog.records)


def test_fused_registration_through_hook_registry(monkeypatch, launches):
    """SGLang's HookRegistry wraps the class method; the runner's call goes through our hook."""
    from sglang_eagle_paged.hooks import install

    cls = fa3.FlashAttentionMultiStepBackend
    multi = make_multi(4, 3, 16, [2])
    fb = replay_batch(random.Random(2), multi, 2, 2)
    ref = sglang_replay(multi, fb)
    targets = {"method": (cls, "init_forward_metadata_out_graph"), "expand": (fa3, "draft_decode_set_expand_metadata")}
    monkeypatch.setattr(cls, "init_forward_metadata_out_graph", SG.out_graph)  # SGLang's, whatever ran before
    with hook_sandbox(monkeypatch, targets) as (originals, read):
        hooks = [h for h in hook_table.fa3_metadata_hooks(settings.parse({settings.FA3_EXPAND: "fused"}))
                 if h.kind != "after"]
        hooked = install(hooks, "test")
        patched = read()
        assert sorted(hooked) == sorted([fa3_metadata.TARGET, fa3_replay.FUSED_TARGET])
        assert all(patched[k] is not originals[k] for k in patched)
        multi.init_forward_metadata_out_graph(fb)  # as the draft CUDA-graph runner's replay calls it
        assert launches == ["all"]
        assert_same_state(ref, multi, 2)
        assert v2.describe(settings.parse({}), hooked).endswith("fa3 metadata=fused")


# ---------------------------------------------------------------- warm-up

@pytest.mark.parametrize("chosen", [FA3Expand.FUSED, FA3Expand.EXPAND])
def test_warm_up_compiles_what_serving_launches(chosen, monkeypatch):
    """After the draft worker's init_attention_backend: every variant a replay (exact and padded
    batches: int64 and int32 lengths) and an eager draft step (all slots) launch is compiled."""
    topk, steps, page = 4, 4, 16
    kernels = (_draft_decode_metadata_all_steps_kernel, _draft_decode_metadata_kernel, _expand_draft_page_table_kernel)

    def capture_all():
        import contextlib

        stack = contextlib.ExitStack()
        return stack, [stack.enter_context(capture_specializations(k)) for k in kernels]

    multi = make_multi(topk, steps, page, [1, 2, 4])
    worker = types.SimpleNamespace(draft_attn_backend=multi)
    stack, warm = capture_all()
    with stack:
        assert fa3_replay.warm_up_hook(chosen)("result", worker) == "result"
    assert all(warm) if chosen is FA3Expand.FUSED else (warm[0] == [] and warm[1] == [] and warm[2])

    monkeypatch.setattr(fa3, "draft_decode_set_expand_metadata", fa3_metadata.expand_metadata_replacement)
    rng = random.Random(1)
    stack, serve = capture_all()
    with stack:
        for raw_bs, bs in ((2, 2), (3, 4)):
            fb = replay_batch(rng, multi, raw_bs, bs)
            if raw_bs != bs:
                fb.seq_lens = fb.seq_lens.to(torch.int32)  # the graph runner's buffer when it pads
            if chosen is FA3Expand.FUSED:
                draft_step.fused_out_graph_hook(SG.out_graph, multi, fb)
            else:
                SG.out_graph(multi, fb)
            fa3_metadata.expand_metadata_replacement(  # an eager draft step: every slot of the row
                torch.zeros(raw_bs * topk, dtype=torch.int32), torch.zeros((raw_bs * topk, steps), dtype=torch.int32),
                fb.seq_lens[:raw_bs] % page, 1, fb.out_cache_loc.view(-1, steps), topk, page)
    assert serve[2] and (serve[0] if chosen is FA3Expand.FUSED else serve[0] == [])  # not vacuous
    for w, s in zip(warm, serve):
        assert {repr(x) for x in s} <= {repr(x) for x in w}


def test_warm_up_skips_other_backends():
    with capture_specializations(_expand_draft_page_table_kernel) as seen:
        fa3_replay.warm_up_hook(FA3Expand.FUSED)(None, types.SimpleNamespace(draft_attn_backend=object()))
    assert seen == []


@pytest.mark.parametrize("raw,hooked", [("fused", "True True"), ("", "True True"), ("off", "False False")])
def test_plugin_load_installs_the_replacements_unless_switched_off(raw, hooked):
    """In a fresh interpreter, as SGLang loads plugins: fused by default on the releases it is
    proven on (this environment's), SGLang's own builders with =off."""
    probe = ("import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
             "from sglang.srt.plugins import load_plugins; load_plugins()\n"
             "from sglang.srt.plugins.hook_registry import HookRegistry as R\n"
             "from sglang_eagle_paged.adapters.v2.fa3_replay import FUSED_TARGET, fa3_metadata as m\n"
             "print('HOOKED', m.TARGET in R._patched, FUSED_TARGET in R._patched)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE_PAGED") and k != "SGLANG_PLUGINS"}
    env.update(TRITON_INTERPRET="1", SGLANG_EAGLE_PAGED_FA3_EXPAND=raw)
    p = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parents[3])
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"HOOKED {hooked}" in p.stdout
    assert f"fa3 metadata={'SGLang' + chr(39) + 's' if raw == 'off' else 'fused'}" in p.stderr
