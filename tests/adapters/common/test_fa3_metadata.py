"""The fused draft-decode replay metadata (``SGLANG_EAGLE_PAGED_FA3_EXPAND=fused``).

1. the kernels (one step, every step) against their torch references on random layouts;
2. the AROUND hook against SGLang's own ``FlashAttentionMultiStepBackend.
   init_forward_metadata_replay_cuda_graph`` on CPU backends whose CUDA-graph
   buffers SGLang itself allocated and captured (``init_cuda_graph_state`` and
   ``init_forward_metadata_capture_cuda_graph`` run on backends built with
   ``object.__new__`` and only the attributes those methods read). SGLang's
   ``draft_decode_set_expand_metadata`` is a ``torch.compile`` function: the
   random sweep swaps in its undecorated body (the same source, eagerly; a
   compile per shape would take minutes), and one test runs the compiled
   function itself on a few configurations;
3. the hook hands everything it cannot prove equivalent to SGLang;
4. the environment switch and the registration.
"""

import copy
import importlib
import os
import random
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from helpers.interpreter_order import capture_specializations  # noqa: E402
from helpers.sglang_source import undecorated as _undecorated  # noqa: E402
from helpers.fa3_replay import assert_same_state, random_seq_lens, replay_batch  # noqa: E402
from helpers.hook_sandbox import hook_sandbox  # noqa: E402

from sglang_eagle_paged.adapters.v1 import sglang_api as compat  # noqa: E402
from sglang_eagle_paged.adapters.common import fa3_metadata  # noqa: E402
from sglang_eagle_paged.settings import FA3Expand  # noqa: E402
from sglang_eagle_paged.tools.harness import branch_slots  # noqa: E402
from sglang_eagle_paged.tools.harness import fa3_multi_step_backend as make_multi  # noqa: E402
from sglang_eagle_paged.kernels.draft_decode_metadata import (  # noqa: E402
    BLOCK_COLS,
    DraftStep,
    DraftStepTable,
    _draft_decode_metadata_all_steps_kernel,
    _draft_decode_metadata_kernel,
    draft_decode_metadata,
    draft_decode_metadata_all_steps,
    draft_decode_metadata_all_steps_reference,
    draft_decode_metadata_reference,
)

SENTINEL = -777
fa3 = importlib.import_module(fa3_metadata.FA3_MODULE)


# In a namespace, not module globals: HookRegistry's _propagate_patch rebinds every
# module global that is the object it wraps (the registration test below applies hooks).
SG = types.SimpleNamespace(
    replay=_undecorated(fa3.FlashAttentionMultiStepBackend.init_forward_metadata_replay_cuda_graph,
                        "init_forward_metadata_replay_cuda_graph"),
    expand_eager=_undecorated(fa3.draft_decode_set_expand_metadata, "draft_decode_set_expand_metadata"),
    expand_compiled=fa3.draft_decode_set_expand_metadata,
)


# ---------------------------------------------------------------- 1. kernel vs reference

def kernel_case(rng, adversarial=False):
    bs = rng.randint(1, 9)
    page_size = rng.choice((2, 4, 16, 64, 128))
    topk = rng.randint(2, 8)
    steps = rng.randint(2, 6)
    max_ctx = page_size * rng.choice((rng.randint(4, 40), rng.randint(130, 300)))  # > BLOCK_COLS pages too
    pool, max_bs = bs + rng.randint(0, 6), bs + rng.randint(0, 3)
    seq_lens = random_seq_lens(rng, bs, page_size, max_ctx - steps)
    req_pool_indices = torch.tensor([[r, -1] for r in rng.sample(range(pool), bs)])[:, 0]  # strided, any order
    sl_store = torch.tensor([[n, -1] for n in seq_lens])
    seq_lens_t = sl_store[:, 0]  # strided
    req_to_token = torch.randint(0, 50_000, (pool, max_ctx), dtype=torch.int32)
    strided = torch.arange(0, max_ctx, page_size)
    if adversarial:
        cache_loc = torch.randint(0, 40 * page_size, (bs * topk * steps,))
        exp_cols = steps
    else:
        cache_loc = branch_slots(rng, seq_lens, topk, page_size, steps)
        exp_cols = rng.randint(1, 3) + (page_size - 1 + steps + page_size - 1) // page_size
    max_seq_pages = (max(seq_lens) + page_size - 1) // page_size
    if rng.random() < 0.2:
        max_seq_pages = rng.randint(0, max_seq_pages)  # any prefix of the columns

    def buffers(step=0):
        # max_bs rows (capture-style) with only the first bs rows as views; later steps
        # (the all-steps kernel) get wider expand tables, as SGLang's, and other strides
        pad = step % 2
        normal_cs = torch.full((max_bs, 1 + pad), SENTINEL, dtype=torch.int32)
        normal_pt = torch.full((max_bs, max_ctx + pad), SENTINEL, dtype=torch.int32)
        exp_cs = torch.full((max_bs * topk,), SENTINEL, dtype=torch.int32)
        exp_pt = torch.full((max_bs * topk, exp_cols + step), SENTINEL, dtype=torch.int32)
        views = (normal_cs[:bs, 0], normal_pt[:bs, :max_ctx], exp_cs[:bs * topk], exp_pt[:bs * topk])
        return (normal_cs, normal_pt, exp_cs, exp_pt), views

    args = dict(seq_lens=seq_lens_t, req_pool_indices=req_pool_indices, req_to_token=req_to_token,
                strided_indices=strided, max_seq_pages=max_seq_pages,
                cache_loc=cache_loc.view(-1, steps), decode_length=rng.randint(1, steps),
                topk=topk, page_size=page_size)
    ctx = dict(bs=bs, topk=topk, page_size=page_size, steps=steps, seq_lens=seq_lens,
               max_seq_pages=max_seq_pages, max_bs=max_bs)
    return buffers, args, ctx


def run_impl(fn, buffers, args):
    backing, views = buffers()
    fn(*views, **args)
    return backing


@pytest.mark.parametrize("live_slots", [False, True])  # True: v2's cache_loc[:, :decode_length]
@pytest.mark.parametrize("adversarial", [False, True])
def test_kernel_matches_reference(adversarial, live_slots):
    rng = random.Random(2024 + adversarial + 2 * live_slots)
    for i in range(40):
        buffers, args, ctx = kernel_case(rng, adversarial)
        args["live_slots"] = live_slots
        got = run_impl(draft_decode_metadata, buffers, args)
        want = run_impl(draft_decode_metadata_reference, buffers, args)
        for name, g, w in zip(("normal_cs", "normal_pt", "exp_cs", "exp_pt"), got, want):
            assert torch.equal(g, w), (i, name, ctx)
        assert_untouched(got, ctx)


def assert_untouched(got, ctx):
    """What stays untouched, stated independently of the reference."""
    bs, topk, m = ctx["bs"], ctx["topk"], ctx["max_seq_pages"]
    assert (got[0][bs:] == SENTINEL).all() and (got[1][bs:] == SENTINEL).all()
    assert (got[1][:, m:] == SENTINEL).all()
    assert (got[2][bs * topk:] == SENTINEL).all() and (got[3][bs * topk:] == SENTINEL).all()
    assert (got[0][:, 1:] == SENTINEL).all()  # a wider row stride's gaps
    page = ctx["page_size"]
    assert got[0][:bs, 0].tolist() == [n - n % page for n in ctx["seq_lens"]]


def test_kernel_cases_cover_the_edges():
    """The generator really produces full last pages, empty prefixes, several column
    blocks and more rows than requests (so the sweep above is not vacuous)."""
    rng = random.Random(2024)
    seen = set()
    for _ in range(40):
        _, args, ctx = kernel_case(rng)
        page = ctx["page_size"]
        seen |= {"full_last_page" for n in ctx["seq_lens"] if n and n % page == 0}
        seen |= {"empty_prefix" for n in ctx["seq_lens"] if n == 0}
        seen |= {"multi_block"} if ctx["max_seq_pages"] > BLOCK_COLS else set()
        seen |= {"partial"} if any(n % page for n in ctx["seq_lens"]) else set()
        seen |= {"spare_rows"} if ctx["max_bs"] > ctx["bs"] else set()
        assert args["req_pool_indices"].stride(0) == 2 and args["seq_lens"].stride(0) == 2
    assert seen == {"full_last_page", "empty_prefix", "multi_block", "partial", "spare_rows"}, seen


def test_kernel_cache_loc_rows_differ_from_bs_topk():
    """A padded replay: cache_loc has the unpadded batch's rows only."""
    rng = random.Random(8)
    for raw_bs, bs in ((1, 2), (3, 8), (5, 5)):
        seq = [rng.randint(1, 100) for _ in range(bs)]
        topk, page, steps = 4, 16, 5
        cache_loc = branch_slots(rng, seq[:raw_bs], topk, page, steps).view(-1, steps)
        req_to_token = torch.randint(0, 9999, (bs, 128), dtype=torch.int32)
        outs = []
        for fn in (draft_decode_metadata, draft_decode_metadata_reference):
            bufs = (torch.full((bs,), SENTINEL, dtype=torch.int32), torch.full((bs, 128), SENTINEL, dtype=torch.int32),
                    torch.full((bs * topk,), SENTINEL, dtype=torch.int32),
                    torch.full((bs * topk, 3), SENTINEL, dtype=torch.int32))
            fn(*bufs, torch.tensor(seq), torch.arange(bs), req_to_token, torch.arange(0, 128, page),
               (max(seq) + page - 1) // page, cache_loc, 2, topk, page)
            outs.append(bufs)
        for g, w in zip(*outs):
            assert torch.equal(g, w), (raw_bs, bs)
        assert (outs[0][3][raw_bs * topk:] == SENTINEL).all()
        assert (outs[0][2] != SENTINEL).all()


def test_kernel_rejects_what_torch_rejects():
    seq = torch.tensor([5, 9])
    good = dict(seq_lens=seq, req_pool_indices=torch.tensor([0, 1]), req_to_token=torch.zeros(2, 64, dtype=torch.int32),
                strided_indices=torch.arange(0, 64, 4), max_seq_pages=3,
                cache_loc=torch.arange(2 * 2 * 3).view(4, 3), decode_length=1, topk=2, page_size=4)
    bufs = lambda: [torch.zeros(2, dtype=torch.int32), torch.zeros(2, 64, dtype=torch.int32),  # noqa: E731
                    torch.zeros(4, dtype=torch.int32), torch.zeros(4, 3, dtype=torch.int32)]
    draft_decode_metadata(*bufs(), **good)
    for i, bad in enumerate((torch.zeros(3, dtype=torch.int32), torch.zeros(2, 64, dtype=torch.int64),
                             torch.zeros(5, dtype=torch.int32), torch.zeros(3, 3, dtype=torch.int32))):
        b = bufs()
        b[i] = bad
        with pytest.raises((RuntimeError, TypeError)):
            draft_decode_metadata(*b, **good)
    with pytest.raises(RuntimeError):  # more pages asked than strided_indices has
        draft_decode_metadata(*bufs(), **{**good, "max_seq_pages": 17})


def _launch(bs, max_seq_pages, decode_length, topk=4, page_size=16, steps=5, seed=0):
    rng = random.Random(seed)
    seq = [rng.randint(0, max_seq_pages * page_size) for _ in range(bs)]
    cache_loc = branch_slots(rng, seq, topk, page_size, steps).view(-1, steps)
    draft_decode_metadata(
        torch.zeros(bs, dtype=torch.int32), torch.zeros(bs, 512, dtype=torch.int32),
        torch.zeros(bs * topk, dtype=torch.int32), torch.zeros(bs * topk, decode_length + 1, dtype=torch.int32),
        torch.tensor(seq), torch.arange(bs), torch.zeros(bs, 512 * page_size, dtype=torch.int32),
        torch.arange(0, 512 * page_size, page_size), max_seq_pages, cache_loc, decode_length, topk, page_size)


def test_one_specialization_across_batches_and_lengths():
    launches = [(1, 1, 1), (2, 3, 2), (3, 0, 3), (7, 130, 4), (16, 64, 1), (9, 257, 2), (4, 1, 1)]
    with capture_specializations(_draft_decode_metadata_kernel) as specs:
        for bs, m, d in launches:
            _launch(bs, m, d, seed=bs)
    assert len(specs) == len(launches) and all(s == specs[0] for s in specs[1:]), specs
    with capture_specializations(_draft_decode_metadata_kernel) as specs:  # the capture is not blind
        _launch(2, 3, 1, topk=4)
        _launch(2, 3, 1, topk=8)
        _launch(2, 3, 1, page_size=64)
        _launch(2, 3, 1, steps=3)
    assert len(set(specs)) == 4


def step_inputs(buffers, args, n_steps):
    """``n_steps`` steps as SGLang's backends hold them: own buffers (wider expand tables and
    other strides at later steps), own strided_indices (a strided copy at odd steps),
    decode_length = step + 1."""
    backing, steps = [], []
    for i in range(n_steps):
        b, views = buffers(i)
        si = args["strided_indices"]
        si = torch.stack([si, torch.full_like(si, -1)], 1)[:, 0] if i % 2 else si.clone()
        backing.append(b)
        steps.append(DraftStep(*views, si, i + 1))
    common = {k: v for k, v in args.items() if k not in ("strided_indices", "decode_length")}
    return backing, steps, common


def run_all_steps(fn, buffers, args, n_steps):
    backing, steps, common = step_inputs(buffers, args, n_steps)
    if fn is draft_decode_metadata_all_steps:
        steps = DraftStepTable.from_steps(steps)
        assert steps is not None
    fn(steps, **common)
    return backing


@pytest.mark.parametrize("live_slots", [False, True])
@pytest.mark.parametrize("adversarial", [False, True])
def test_all_steps_kernel_matches_reference(adversarial, live_slots):
    rng = random.Random(4048 + adversarial + 2 * live_slots)
    for i in range(30):
        buffers, args, ctx = kernel_case(rng, adversarial)
        args["live_slots"] = live_slots
        n_steps = rng.choice((ctx["steps"] - 1, ctx["steps"] - 1, 1, ctx["steps"]))  # SGLang's: steps - 1
        got = run_all_steps(draft_decode_metadata_all_steps, buffers, args, n_steps)
        want = run_all_steps(draft_decode_metadata_all_steps_reference, buffers, args, n_steps)
        assert len(got) == n_steps
        for s, (g_step, w_step) in enumerate(zip(got, want)):
            for name, g, w in zip(("normal_cs", "normal_pt", "exp_cs", "exp_pt"), g_step, w_step):
                assert torch.equal(g, w), (i, s, name, ctx)
            assert_untouched(g_step, ctx)
            page, topk = ctx["page_size"], ctx["topk"]
            assert g_step[2][:ctx["bs"] * topk].tolist() == [n % page + s + 1 for n in ctx["seq_lens"]
                                                              for _ in range(topk)]


@pytest.mark.parametrize("topk,page,steps", [(2, 16, 2), (4, 16, 5), (8, 64, 5), (3, 64, 6), (8, 128, 6),
                                             (5, 128, 3)])
def test_all_steps_kernel_on_padded_replays(topk, page, steps):
    """cache_loc has the unpadded batch's rows only; expand tables decode_length + 1 wide, as SGLang's."""
    rng = random.Random(topk * 1000 + page + steps)
    max_ctx = 4 * page
    for raw_bs, bs in ((1, 2), (3, 8), (5, 5)):
        seq = [rng.randint(0, max_ctx - steps) for _ in range(bs)]
        cache_loc = branch_slots(rng, seq[:raw_bs], topk, page, steps).view(-1, steps)
        common = dict(seq_lens=torch.tensor(seq), req_pool_indices=torch.randperm(bs),
                      req_to_token=torch.randint(0, 99_999, (bs, max_ctx), dtype=torch.int32),
                      max_seq_pages=(max(seq) + page - 1) // page, cache_loc=cache_loc, topk=topk, page_size=page)
        outs = []
        for fn in (draft_decode_metadata_all_steps, draft_decode_metadata_all_steps_reference):
            steps_in = [DraftStep(torch.full((bs,), SENTINEL, dtype=torch.int32),
                                  torch.full((bs, max_ctx), SENTINEL, dtype=torch.int32),
                                  torch.full((bs * topk,), SENTINEL, dtype=torch.int32),
                                  torch.full((bs * topk, d + 1), SENTINEL, dtype=torch.int32),
                                  torch.arange(0, max_ctx, page), d) for d in range(1, steps)]
            fn(DraftStepTable.from_steps(steps_in) if fn is draft_decode_metadata_all_steps else steps_in, **common)
            outs.append(steps_in)
        for d, (g_step, w_step) in enumerate(zip(*outs), start=1):
            for g, w in zip(g_step[:4], w_step[:4]):
                assert torch.equal(g, w), (raw_bs, bs, d)
            assert (g_step.expand_page_table[raw_bs * topk:] == SENTINEL).all()
            assert (g_step.expand_cache_seqlens != SENTINEL).all()


def test_step_table_only_where_one_launch_equals_per_step_launches():
    def step(bs=2, cols=64, topk=2, exp_rows=4, exp_cols=2, si_len=16, dtype=torch.int32, si_dtype=torch.int64, d=1):
        return DraftStep(torch.zeros(bs, dtype=dtype), torch.zeros(bs, cols, dtype=torch.int32),
                         torch.zeros(bs * topk, dtype=torch.int32), torch.zeros(exp_rows, exp_cols, dtype=torch.int32),
                         torch.arange(si_len, dtype=si_dtype), d)

    table = DraftStepTable.from_steps([step(), step(exp_cols=3, d=2)])
    assert table is not None and table.table.dtype == torch.int64 and table.table.shape[0] == 2
    assert DraftStepTable.from_steps([]) is None
    for other in (dict(bs=3), dict(cols=65), dict(topk=3), dict(exp_rows=5), dict(si_len=17),
                  dict(dtype=torch.int64), dict(si_dtype=torch.int32)):
        assert DraftStepTable.from_steps([step(), step(**other)]) is None, other


def test_all_steps_kernel_rejects_what_torch_rejects():
    seq = torch.tensor([5, 9])
    steps = [DraftStep(torch.zeros(2, dtype=torch.int32), torch.zeros(2, 64, dtype=torch.int32),
                       torch.zeros(4, dtype=torch.int32), torch.zeros(4, d + 1, dtype=torch.int32),
                       torch.arange(0, 64, 4), d) for d in (1, 2)]
    table = DraftStepTable.from_steps(steps)
    good = dict(seq_lens=seq, req_pool_indices=torch.tensor([0, 1]), req_to_token=torch.zeros(2, 64, dtype=torch.int32),
                max_seq_pages=3, cache_loc=torch.arange(2 * 2 * 3).view(4, 3), topk=2, page_size=4)
    draft_decode_metadata_all_steps(table, **good)
    for bad in (dict(seq_lens=torch.tensor([5, 9, 1])), dict(req_pool_indices=torch.tensor([0])),
                dict(topk=3), dict(cache_loc=torch.arange(5 * 3).view(5, 3)), dict(max_seq_pages=17)):
        with pytest.raises(RuntimeError):
            draft_decode_metadata_all_steps(table, **{**good, **bad})


def _launch_all(bs, max_seq_pages, n_steps, topk=4, page_size=16, steps=5, seed=0):
    rng = random.Random(seed)
    seq = [rng.randint(0, max_seq_pages * page_size) for _ in range(bs)]
    cache_loc = branch_slots(rng, seq, topk, page_size, steps).view(-1, steps)
    table = DraftStepTable.from_steps([
        DraftStep(torch.zeros(bs, dtype=torch.int32), torch.zeros(bs, 512, dtype=torch.int32),
                  torch.zeros(bs * topk, dtype=torch.int32), torch.zeros(bs * topk, d + 1, dtype=torch.int32),
                  torch.arange(0, 512 * page_size, page_size), d) for d in range(1, n_steps + 1)])
    draft_decode_metadata_all_steps(table, torch.tensor(seq), torch.arange(bs),
                                    torch.zeros(bs, 512 * page_size, dtype=torch.int32), max_seq_pages,
                                    cache_loc, topk, page_size)


def test_all_steps_one_specialization_across_batches_and_lengths():
    """The step count is configuration (a constexpr, like STEPS); batch sizes and lengths are not."""
    launches = [(1, 1), (2, 3), (3, 0), (7, 130), (16, 64), (9, 257), (4, 1)]
    with capture_specializations(_draft_decode_metadata_all_steps_kernel) as specs:
        for bs, m in launches:
            _launch_all(bs, m, 4, seed=bs)
    assert len(specs) == len(launches) and all(s == specs[0] for s in specs[1:]), specs
    with capture_specializations(_draft_decode_metadata_all_steps_kernel) as specs:  # the capture is not blind
        _launch_all(2, 3, 4, topk=4)
        _launch_all(2, 3, 4, topk=8)
        _launch_all(2, 3, 4, page_size=64)
        _launch_all(2, 3, 2, steps=3)
        _launch_all(2, 3, 3)
    assert len(set(specs)) == 5


# ---------------------------------------------------------------- 2. SGLang's own replay

def _recording(calls, kind, real):
    def launch(*args, **kwargs):
        calls.append((kind, args))
        return real(*args, **kwargs)
    return launch


@pytest.fixture(autouse=True)
def serving(monkeypatch):
    """Every test starts with our builders serving (a fault test switches them off)."""
    monkeypatch.setattr(fa3_metadata._switched_off, "reason", None)


@pytest.fixture
def spy_kernel(monkeypatch):
    """The hook's launches, in order: ("step", args) for each per-step launch,
    ("all", args) for each all-steps launch."""
    calls = []
    for kind, name in (("step", "draft_decode_metadata"), ("all", "draft_decode_metadata_all_steps")):
        monkeypatch.setattr(fa3_metadata, name, _recording(calls, kind, getattr(fa3_metadata, name)))
    return calls


def compare_with_sglang(multi, fb, bs, spy_kernel, expect="all"):
    """``expect``: the hook's launches this round: "all" (one), "step" (one per step) or None (SGLang's)."""
    ma, mb = copy.deepcopy(multi), copy.deepcopy(multi)
    # the deep copies keep each metadata a view of its copy's buffers
    b0 = ma.attn_backends[0]
    assert b0.draft_decode_metadata_topk_normal[bs].page_table.data_ptr() == \
        b0.draft_decode_metadata_topk_normal["page_table"].data_ptr()
    before = copy.deepcopy(multi)
    SG.replay(ma, copy.copy(fb), bs)
    n = len(spy_kernel)
    fa3_metadata.fused_replay_hook(SG.replay, mb, copy.copy(fb), bs)
    want = {"all": ["all"], "step": ["step"] * (multi.speculative_num_steps - 1), None: []}[expect]
    assert [kind for kind, _ in spy_kernel[n:]] == want
    assert_same_state(ma, mb, bs)
    # not vacuous: SGLang did write something
    changed = any(not torch.equal(x.draft_decode_metadata_topk_normal["page_table"],
                                  y.draft_decode_metadata_topk_normal["page_table"])
                  for x, y in zip(ma.attn_backends, before.attn_backends))
    assert changed or int(fb.seq_lens_cpu[:bs].max()) == 0


def _configs(rng, count):
    for _ in range(count):
        page = rng.choice((2, 4, 16, 64, 128))
        # a branch's row of cache_loc spans at most 2 pages, as SGLang's expand table
        # (decode_length + 1 columns) requires at step 0
        steps = rng.randint(2, min(6, page + 1))
        yield rng.randint(2, 8), steps, page


def test_hook_matches_sglang_replay(monkeypatch, spy_kernel):
    monkeypatch.setattr(fa3, "draft_decode_set_expand_metadata", SG.expand_eager)
    rng = random.Random(77)
    for c, (topk, steps, page) in enumerate(_configs(rng, 14)):
        capture_bs = sorted(rng.sample(range(1, 10), 3))
        multi = make_multi(topk, steps, page, capture_bs, max_ctx=page * rng.randint(3, 12), seed=c)
        for _ in range(3):
            bs = rng.choice(capture_bs)
            raw_bs = rng.randint(1, bs)
            fb = replay_batch(rng, multi, raw_bs, bs)
            compare_with_sglang(multi, fb, bs, spy_kernel)


def test_hook_matches_sglang_replay_compiled_expand(spy_kernel):
    """SGLang's torch.compile'd draft_decode_set_expand_metadata itself (CPU inductor)."""
    assert fa3.draft_decode_set_expand_metadata is SG.expand_compiled
    rng = random.Random(5)
    for topk, steps, page in ((8, 5, 64), (2, 3, 2)):
        multi = make_multi(topk, steps, page, [1, 4], max_ctx=page * 8)
        for bs, raw_bs in ((4, 4), (4, 2), (1, 1)):
            compare_with_sglang(multi, replay_batch(rng, multi, raw_bs, bs), bs, spy_kernel)


def test_hook_writes_each_step_into_its_own_buffers(monkeypatch, spy_kernel):
    """One launch for the round; its table: per step, own buffers and decode_length = step + 1."""
    monkeypatch.setattr(fa3, "draft_decode_set_expand_metadata", SG.expand_eager)
    multi = make_multi(4, 5, 16, [3])
    fb = replay_batch(random.Random(1), multi, 3, 3)
    ref = copy.deepcopy(multi)
    SG.replay(ref, copy.copy(fb), 3)
    fa3_metadata.fused_replay_hook(SG.replay, multi, fb, 3)
    assert [kind for kind, _ in spy_kernel] == ["all"]
    table = spy_kernel[0][1][0]
    assert len(table.steps) == 4
    addresses = set()
    for i, (step, row, b) in enumerate(zip(table.steps, table.table.tolist(), multi.attn_backends)):
        m, e = b.draft_decode_metadata_topk_normal[3], b.draft_decode_metadata_topk_expand[3]
        own = (m.cache_seqlens_int32, m.page_table, e.cache_seqlens_int32, e.page_table)
        assert all(x is y for x, y in zip(step[:4], own))
        assert step.strided_indices is b.decode_cuda_graph_metadata["strided_indices"]
        assert step.decode_length == i + 1
        assert {t.data_ptr() for t in own} <= set(row)
        addresses |= {t.data_ptr() for t in own}
        assert b.forward_metadata.max_seq_len_k == int(fb.seq_lens_cpu.max())
    assert len(addresses) == 16
    assert_same_state(ref, multi, 3)


def test_step_table_is_cached_and_rebuilt_when_a_buffer_changes(monkeypatch, spy_kernel):
    monkeypatch.setattr(fa3, "draft_decode_set_expand_metadata", SG.expand_eager)
    rng = random.Random(6)
    multi = make_multi(4, 5, 64, [2, 5])

    def replay(raw_bs, bs):
        fb = replay_batch(rng, multi, raw_bs, bs)
        ref = copy.deepcopy(multi)
        SG.replay(ref, copy.copy(fb), bs)
        fa3_metadata.fused_replay_hook(SG.replay, multi, fb, bs)
        assert_same_state(ref, multi, bs)
        return spy_kernel[-1][1][0]

    t5, t2, t5_again = replay(5, 5), replay(2, 2), replay(3, 5)
    assert t5_again is t5 and t2 is not t5  # one table per bs, built once
    # a backend's buffer replaced by another tensor object: the table is rebuilt and
    # the writes land in the new buffer (checked against SGLang), not the old one
    b = multi.attn_backends[2]
    metadata = b.draft_decode_metadata_topk_normal[5]
    old = metadata.page_table
    metadata.page_table = torch.full_like(old, SENTINEL)
    old_contents = old.clone()
    t5_new = replay(4, 5)
    assert t5_new is not t5 and t5_new.steps[2].page_table is metadata.page_table
    assert torch.equal(old, old_contents)
    assert (metadata.page_table[:, 0] != SENTINEL).all()
    assert replay(5, 5) is t5_new
    # the same for the expand side of another step
    e = multi.attn_backends[0].draft_decode_metadata_topk_expand[5]
    e.page_table = torch.full_like(e.page_table, SENTINEL)
    t5_newer = replay(5, 5)
    assert t5_newer is not t5_new and t5_newer.steps[0].expand_page_table is e.page_table
    assert [kind for kind, _ in spy_kernel] == ["all"] * 6


@pytest.mark.parametrize("case", ["int64_lengths", "other_req_to_token", "wider_page_table"])
def test_hook_launches_per_step_where_one_table_cannot_stand_for_all(monkeypatch, spy_kernel, case):
    """Buffers one table cannot describe (never SGLang's own layout): today's per-step launches."""
    monkeypatch.setattr(fa3, "draft_decode_set_expand_metadata", SG.expand_eager)
    multi = make_multi(4, 4, 16, [3])
    b = multi.attn_backends[1]
    m = b.draft_decode_metadata_topk_normal[3]
    if case == "int64_lengths":  # SGLang's copy_ casts; the table's int32 addresses could not
        m.cache_seqlens_int32 = m.cache_seqlens_int32.to(torch.int64)
    elif case == "other_req_to_token":
        b.req_to_token = b.req_to_token.clone()
    else:
        m.page_table = torch.cat([m.page_table, m.page_table[:, :5]], 1)
    for seed in range(2):
        compare_with_sglang(multi, replay_batch(random.Random(seed), multi, 2, 3), 3, spy_kernel, expect="step")


@pytest.mark.parametrize("case", ["cache_loc_too_long", "lengths_past_the_table"])
def test_hook_raises_where_sglang_raises(monkeypatch, spy_kernel, case):
    monkeypatch.setattr(fa3, "draft_decode_set_expand_metadata", SG.expand_eager)
    multi = make_multi(4, 4, 16, [2])
    fb = replay_batch(random.Random(9), multi, 2, 2)
    if case == "cache_loc_too_long":
        fb.out_cache_loc = torch.arange(1, 3 * 4 * 4 + 1)  # 3 requests' rows for a batch of 2
    else:
        fb.seq_lens_cpu = fb.seq_lens_cpu + multi.attn_backends[0].max_context_len
    with pytest.raises(RuntimeError):
        SG.replay(copy.deepcopy(multi), copy.copy(fb), 2)
    with pytest.raises(RuntimeError):
        fa3_metadata.fused_replay_hook(SG.replay, multi, fb, 2)


def sglang_replayed(multi, fb, bs):
    """A copy of ``multi`` after SGLang's own replay, its expand builder run eagerly."""
    ref = copy.deepcopy(multi)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fa3, "draft_decode_set_expand_metadata", SG.expand_eager)
        SG.replay(ref, copy.copy(fb), bs)
    return ref


def _fail(*args, **kwargs):
    _fail.calls += 1
    raise RuntimeError("triton compile failed")


def test_a_fault_in_the_fused_path_serves_sglangs_replay_and_switches_ours_off(monkeypatch, caplog):
    """Ours raising (not SGLang) must not reach the scheduler: SGLang's replay serves that round
    and every later one, one ERROR line."""
    import logging

    monkeypatch.setattr(fa3, "draft_decode_set_expand_metadata", SG.expand_eager)  # SGLang's body, eagerly
    monkeypatch.setattr(fa3_metadata, "draft_decode_metadata_all_steps", _fail)    # ours, not SGLang's
    _fail.calls = 0
    rng = random.Random(13)
    multi = make_multi(4, 4, 16, [2, 4])
    with caplog.at_level(logging.ERROR, logger="sglang_eagle_paged"):
        for bs in (2, 4, 4):
            fb = replay_batch(rng, multi, bs, bs)
            ref, got = copy.deepcopy(multi), copy.deepcopy(multi)
            SG.replay(ref, copy.copy(fb), bs)
            assert fa3_metadata.fused_replay_hook(SG.replay, got, copy.copy(fb), bs) is None
            assert_same_state(ref, got, bs)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "switched off for this process" in errors[0] and "triton compile failed" in errors[0]
    assert _fail.calls == 1  # ours stays off after its fault


def test_a_fault_in_the_expand_replacement_serves_sglangs_builder(monkeypatch, caplog):
    """The eager draft steps' builder: SGLang's replay with its expand builder wrapped as the
    AROUND hook wraps it; ours raising leaves SGLang's result."""
    import logging

    multi = make_multi(8, 5, 64, [3])
    fb = replay_batch(random.Random(14), multi, 3, 3)
    ref = sglang_replayed(multi, fb, 3)
    monkeypatch.setattr(fa3_metadata, "expand_draft_page_table", _fail)  # ours, not SGLang's
    _fail.calls = 0
    got = copy.deepcopy(multi)
    with caplog.at_level(logging.ERROR, logger="sglang_eagle_paged"):
        monkeypatch.setattr(fa3, "draft_decode_set_expand_metadata",
                            lambda *a, **kw: fa3_metadata.expand_hook(SG.expand_eager, *a, **kw))
        SG.replay(got, copy.copy(fb), 3)
        SG.replay(copy.deepcopy(multi), copy.copy(fb), 3)
    assert_same_state(ref, got, 3)
    assert [r.levelno for r in caplog.records].count(logging.ERROR) == 1 and fa3_metadata.switched_off()
    assert _fail.calls == 1


# ---------------------------------------------------------------- 3. fallback to SGLang

def _spy_original():
    calls = []

    def original(multi, forward_batch, bs):
        calls.append((multi, forward_batch, bs))
        return "sglang"

    return original, calls


FALLBACKS = {
    "page_1": dict(page_size=1),
    "swa": dict(has_swa=True),
    "sliding_window_pool": dict(use_sliding_window_kv_pool=True),
    "local_attention": dict(has_local_attention=True),
}


@pytest.mark.parametrize("case", sorted(FALLBACKS) + ["topk_1", "subclass", "encoder", "no_cpu_lens",
                                                      "not_draft", "no_spec_info", "uncaptured_bs",
                                                      "missing_attribute", "short_batch"])
def test_falls_back_to_sglang(case, spy_kernel):
    multi = make_multi(4, 4, 16, [2])
    fb = replay_batch(random.Random(3), multi, 2, 2)
    bs = 2
    if case in FALLBACKS:
        for b in multi.attn_backends:
            b.__dict__.update(FALLBACKS[case])
    elif case == "topk_1":
        for b in multi.attn_backends:
            b.topk = 1
    elif case == "subclass":
        sub = type("Sub", (fa3.FlashAttentionBackend,), {})
        multi.attn_backends[-1].__class__ = sub
    elif case == "encoder":
        fb.encoder_lens = torch.tensor([3, 3])
    elif case == "no_cpu_lens":
        fb.seq_lens_cpu = None
    elif case == "not_draft":
        fb.spec_info = types.SimpleNamespace(is_draft_input=lambda: False)
    elif case == "no_spec_info":
        fb.spec_info = None
    elif case == "uncaptured_bs":
        bs = 3
    elif case == "missing_attribute":
        del multi.attn_backends[0].__dict__["has_swa"]
    elif case == "short_batch":
        fb.seq_lens = fb.seq_lens[:1]
    original, calls = _spy_original()
    assert fa3_metadata.fused_replay_hook(original, multi, fb, bs) == "sglang"
    assert calls == [(multi, fb, bs)] and spy_kernel == []


def test_page_1_fallback_is_sglang_end_to_end(monkeypatch, spy_kernel):
    """page 1 through the hook: SGLang's own code runs, with the same result."""
    multi = make_multi(4, 4, 1, [3])
    fb = replay_batch(random.Random(4), multi, 2, 3)
    compare_with_sglang(multi, fb, 3, spy_kernel, expect=None)


def test_fallback_checks_every_step(spy_kernel):
    multi = make_multi(4, 5, 16, [2])
    multi.attn_backends[2].has_swa = True  # one step only
    original, calls = _spy_original()
    fa3_metadata.fused_replay_hook(original, multi, replay_batch(random.Random(0), multi, 2, 2), 2)
    assert len(calls) == 1 and spy_kernel == []


# ---------------------------------------------------------------- 4. switch and registration

@pytest.mark.parametrize("raw,want", [
    (None, "fused"), ("", "fused"), ("0", "off"), ("off", "off"), ("no", "off"),
    ("1", "expand"), ("on", "expand"), ("TRUE", "expand"),
    ("fused", "fused"), (" Fused ", "fused"),
])
def test_selection(raw, want):
    from sglang_eagle_paged.settings import FA3_EXPAND, parse

    chosen = parse({} if raw is None else {FA3_EXPAND: raw}).fa3_expand_for("v1")
    assert chosen.value == want
    assert fa3_metadata.targets(chosen) == {"off": [], "expand": [fa3_metadata.FA3_EXPAND_METADATA],
                                            "fused": [fa3_metadata.FA3_EXPAND_METADATA,
                                                      fa3_metadata.FA3_MULTI_STEP_REPLAY]}[want]


@pytest.mark.parametrize("raw", ["fuse", "2", "fused,1", "yes please"])
def test_selection_rejects_garbage(raw):
    from sglang_eagle_paged.settings import FA3_EXPAND, SettingsError, parse

    with pytest.raises(SettingsError, match="fused"):
        parse({FA3_EXPAND: raw})


def test_targets_resolve_in_this_sglang():
    from sglang_eagle_paged.hooks import resolvable
    from sglang_eagle_paged.settings import FA3Expand

    assert compat.resolve(fa3_metadata.FA3_MULTI_STEP_REPLAY) is \
        fa3.FlashAttentionMultiStepBackend.init_forward_metadata_replay_cuda_graph
    assert compat.resolve(fa3_metadata.FA3_BACKEND) is fa3.FlashAttentionBackend
    assert resolvable(fa3_metadata.FA3_EXPAND_METADATA) is None
    assert resolvable(fa3_metadata.FA3_MODULE + ".no_such_builder") is not None
    hooks = fa3_metadata.hooks(FA3Expand.FUSED, required=True)
    assert [(h.target, h.kind) for h in hooks] == [(fa3_metadata.FA3_EXPAND_METADATA, "around"),
                                                   (fa3_metadata.FA3_MULTI_STEP_REPLAY, "around")]


def test_fused_registration_through_hook_registry(monkeypatch, spy_kernel):
    """SGLang's HookRegistry wraps the class method; a replay through the class goes
    through our hook (fused) and matches SGLang."""
    cls = fa3.FlashAttentionMultiStepBackend
    multi = make_multi(4, 3, 16, [2])
    fb = replay_batch(random.Random(2), multi, 2, 2)
    ref = sglang_replayed(multi, fb, 2)
    from sglang_eagle_paged.hooks import install
    from sglang_eagle_paged.settings import FA3Expand

    targets = {"method": (cls, "init_forward_metadata_replay_cuda_graph"),
               "expand": (fa3, "draft_decode_set_expand_metadata")}
    with hook_sandbox(monkeypatch, targets) as (originals, read):
        hooked = install(fa3_metadata.hooks(FA3Expand.FUSED, required=True), "test")
        patched = read()
        assert hooked == fa3_metadata.targets(FA3Expand.FUSED)
        assert all(patched[k] is not originals[k] for k in patched)
        multi.init_forward_metadata_replay_cuda_graph(fb, 2)  # as the CUDA-graph runner calls it
        assert [kind for kind, _ in spy_kernel] == ["all"]
        assert_same_state(ref, multi, 2)


def test_plugin_registers_both_hooks_for_fused():
    """In a fresh interpreter, as SGLang loads plugins."""
    probe = (
        "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
        "from sglang.srt.plugins import load_plugins; load_plugins()\n"
        "from sglang.srt.plugins.hook_registry import HookRegistry\n"
        "from sglang_eagle_paged.adapters.common import fa3_metadata\n"
        "print('PATCHED', fa3_metadata.FA3_EXPAND_METADATA in HookRegistry._patched,"
        " fa3_metadata.FA3_MULTI_STEP_REPLAY in HookRegistry._patched)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SGLANG_EAGLE_PAGED", "SGLANG_PLUGINS")}
    env.update(TRITON_INTERPRET="1", SGLANG_EAGLE_PAGED_FA3_EXPAND="fused")
    p = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=240,
                       cwd=Path(__file__).resolve().parents[3])
    assert p.returncode == 0, p.stderr[-3000:]
    assert "PATCHED True True" in p.stdout
    assert "fa3 metadata=fused" in p.stderr


# ---------------------------------------------------------------- 5. start-up compiles what serving launches

@pytest.mark.parametrize("topk,steps,page", [(4, 3, 16), (8, 5, 64)])
def test_warm_up_compiles_the_replay_variants_of_padded_and_exact_batches(topk, steps, page):
    """SGLang's draft graph runner hands the replay the batch's int64 seq_lens at a captured batch
    size and its int32 graph buffer when it pads; FA3's eager steps pass seq_lens % page. Serving
    meets both dtypes; warm-up must have compiled each (run 10 saw the padded one compile mid-pass)."""
    from sglang_eagle_paged.kernels.expand_metadata import _expand_draft_page_table_kernel

    kernels = (_draft_decode_metadata_all_steps_kernel, _draft_decode_metadata_kernel, _expand_draft_page_table_kernel)

    def capture_all():
        import contextlib

        stack = contextlib.ExitStack()
        return stack, [stack.enter_context(capture_specializations(k)) for k in kernels]

    stack, warm = capture_all()
    with stack:
        fa3_metadata.warm_up("cpu", topk, steps, page, FA3Expand.FUSED)
    assert [len(w) for w in warm] == [2, 2, 2]

    rng = random.Random(topk * page)
    multi = make_multi(topk, steps, page, capture_bs=[1, 2, 4])
    stack, serve = capture_all()
    with stack:
        for raw_bs, bs in ((2, 2), (3, 4), (1, 1)):
            fb = replay_batch(rng, multi, raw_bs, bs)
            if raw_bs != bs:  # padded: the graph runner's int32 buffer, as SGLang 0.5.12 hands it
                fb.seq_lens = fb.seq_lens.to(torch.int32)
            fa3_metadata.fused_replay_hook(SG.replay, multi, fb, bs)
            step = multi.attn_backends[0].draft_decode_metadata_topk_normal[bs]
            draft_decode_metadata(step.cache_seqlens_int32, step.page_table,
                                  multi.attn_backends[0].draft_decode_metadata_topk_expand[bs].cache_seqlens_int32,
                                  multi.attn_backends[0].draft_decode_metadata_topk_expand[bs].page_table,
                                  fb.seq_lens[:bs], fb.req_pool_indices[:bs], multi.attn_backends[0].req_to_token,
                                  multi.attn_backends[0].decode_cuda_graph_metadata["strided_indices"], 1,
                                  fb.out_cache_loc.view(-1, steps), 1, topk, page)
            fa3_metadata.expand_metadata_replacement(
                torch.zeros(raw_bs * topk, dtype=torch.int32), torch.zeros((raw_bs * topk, 2), dtype=torch.int32),
                fb.seq_lens[:raw_bs] % page, 1, fb.out_cache_loc.view(-1, steps), topk, page)
    for w, s in zip(warm, serve):
        assert len(s) == 3 and len({repr(x) for x in s}) == 2  # both dtypes met: not vacuous
        assert {repr(x) for x in s} <= {repr(x) for x in w}


def test_warm_up_compiles_nothing_where_the_replacements_are_off():
    with capture_specializations(_draft_decode_metadata_all_steps_kernel) as seen:
        fa3_metadata.warm_up("cpu", 8, 5, 64, FA3Expand.OFF)
        fa3_metadata.warm_up("cpu", 1, 5, 64, FA3Expand.FUSED)
    with capture_specializations(_draft_decode_metadata_all_steps_kernel) as expand_only:
        fa3_metadata.warm_up("cpu", 8, 5, 64, FA3Expand.EXPAND)  # the expand replacement only
    assert seen == [] and expand_only == []
