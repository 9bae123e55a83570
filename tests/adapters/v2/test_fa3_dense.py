"""fa3 in the per-token form (issue 61, point 1): the fused draft-decode metadata writer, and the
dense draft layout read by fa3, on the installed release's own code: 0.5.23 (``.venv``) and 0.5.17
(``.venv-517``, scripts/test.sh's V517_TESTS).

- The fused writer (:func:`fa3_dense.wrote_per_token`, through the draft step's AROUND hook on
  ``FlashAttentionMultiStepBackend.init_forward_metadata_out_graph``) against SGLang's own replay
  builders (that method, each step backend's ``init_forward_metadata_out_graph``) followed by our
  rewrite (:func:`draft_step.after_metadata`, as SGLang's HookRegistry runs it): the same state,
  every buffer, at pages 2 .. 256, exact and padded (graph) batches, per-branch and dense slots.
- The dense layout on fa3: SGLang's real ``FlashAttentionBackend`` at page ``P`` (eager builder, and
  CUDA-graph capture then replay through the fused writer) with our hooks reads, for every branch
  and draft step, exactly the slots SGLang's own backend at page 1 reads from the same rows with
  page 1's draft slots (SGLang's ``assign_draft_cache_locs_contiguous``), and gets its attention.

What is a stand-in: FA3's CUDA kernel cannot run on the CPU. ``fa3_reference`` (from
test_fa3_in_place.py) stands in for ``flash_attn_with_kvcache``: plain torch, reading
``k_cache[page_table[z, j // page], j % page]`` for ``j < cache_seqlens[z]`` (the page taken from
the ``k_cache`` view it is given), non-causal, returning the output and log-sum-exp. That this is
the real kernel's contract for a page-size-1 view (a ``(slots, 1, heads, dim)`` cache with a
per-token page table) is for the GPU run to check against the real kernel (the GPU matrix issue);
everything else here (the builders, the allocator-shaped rows, the page-1 slot kernel) is SGLang's.
"""

import copy
import random
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
fa3b = pytest.importorskip("sglang.srt.layers.attention.flashattention_backend")
if not hasattr(fa3b.FlashAttentionMultiStepBackend, "init_forward_metadata_out_graph"):
    pytest.skip("a v1 SGLang", allow_module_level=True)

from helpers.draft_tree import HEAD_DIM, HEADS, draft_decode_set_expand_metadata, make_case  # noqa: E402
from helpers.fa3_replay import assert_same_state  # noqa: E402
from helpers.fa3_replay import replay_batch as v1_replay_batch  # noqa: E402
from test_fa3_in_place import (  # noqa: E402
    _backend, _graph_backend, _paged_kv, fa3_reference, ours, two_pass)

from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

from sglang_eagle_paged.adapters.v2 import dense_draft, draft_plan, draft_step, fa3_dense, fa3_in_place, fault  # noqa: E402
from sglang_eagle_paged.adapters.v2.fa3_in_place import after_backend_init, is_per_token  # noqa: E402
from sglang_eagle_paged.kv_reserve import reserve_per_decode  # noqa: E402
from sglang_eagle_paged.tools.harness import fa3_multi_step_backend as make_multi  # noqa: E402
from test_dense_draft import CASES, dense_case  # noqa: E402
from test_dense_hooks import _worker, installed  # noqa: E402,F401  (the fixture: the dense hooks installed)
from test_dense_rounds import FAULT, _serve, dense_hooks, fa3_context  # noqa: E402,F401  (fixtures)

torch.set_num_threads(1)
PAGES = (2, 4, 16, 64, 128, 256)
SG_OUT_GRAPH = fa3b.FlashAttentionMultiStepBackend.__dict__["init_forward_metadata_out_graph"]


@pytest.fixture(autouse=True)
def _as_served(monkeypatch):
    """Our paths serving (a fault test trips the switch); SGLang's expand builder as written, not its
    torch.compile wrapper (inductor on the CPU: minutes per shape, the same arithmetic)."""
    monkeypatch.setattr(fault.SWITCH, "reason", None)
    monkeypatch.setattr(fa3b, "draft_decode_set_expand_metadata", draft_decode_set_expand_metadata)


@pytest.fixture
def launches(monkeypatch):
    calls = []
    real = fa3_dense.per_token_draft_metadata_all_steps
    monkeypatch.setattr(fa3_dense, "per_token_draft_metadata_all_steps",
                        lambda *a, **kw: (calls.append("per_token"), real(*a, **kw)))
    return calls


# --------------------------------------------------------------------------- the fused writer


def _plain_pool(page):
    return MHATokenToKVPool(64 * page, page, torch.bfloat16, 2, 4, 1, "cpu", enable_memory_saver=False,
                            enable_alt_stream=False, enable_kv_cache_copy=False)


def _in_place_multi(topk, steps, page, capture_bs, max_ctx, seed):
    """The harness's SGLang ``FlashAttentionMultiStepBackend`` (captured, buffers noise-filled), its
    step backends on a real plain pool and marked by our backend hook as a server's are."""
    overrides = dict(token_to_kv_pool=_plain_pool(page))
    if not hasattr(fa3b.FlashAttentionBackend, "get_paged_mha_kv_cache"):  # 0.5.17: no translator
        from sglang.srt.layers.attention.unified_mem_hooks import unified_mla_hooks
        from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator

        pool = overrides["token_to_kv_pool"]
        overrides["_unified_hooks"] = unified_mla_hooks(
            PagedTokenToKVPoolAllocator(pool.size, page, torch.float32, "cpu", pool, need_sort=False))
    multi = make_multi(topk, steps, page, capture_bs, max_ctx=max_ctx, seed=seed, **overrides)
    for b in multi.attn_backends:
        after_backend_init(None, b)
        assert getattr(b, fa3_in_place.MARK), fa3_in_place.not_covered(b)
        for name in overrides:  # read by the coverage check only; the pool does not deep-copy
            delattr(b, name)
    return multi


def _warmed_up(multi, dense):
    """``multi``'s step backends on a real plain pool whose draft runner's plan was recorded at warm-up
    with the dense layout ``dense`` (a :class:`dense_draft.DenseLayout`), as a server's are."""
    pool = _plain_pool(multi.attn_backends[0].page_size)
    for b in multi.attn_backends:
        b.token_to_kv_pool = pool
    plan = draft_plan.record(pool, SimpleNamespace(draft_attn_backend=multi), draft_plan.Options(dense=dense))
    assert plan.fa3 is not None and plan.fa3.per_token and draft_plan.dense_of(pool) is dense


def _replay_batch(rng, multi, raw_bs, bs, dense, padded_loc):
    """v1's replay batch (padded to ``bs``, its ``out_cache_loc`` the batch's own) plus v2's forward mode;
    ``dense``: the draft slots of the dense layout instead of per-branch pages; ``padded_loc``: the
    slots padded to ``bs`` as 0.5.23's runner pads them (0.5.17 passes the batch's own)."""
    fb = v1_replay_batch(rng, multi, raw_bs, bs)
    fb.forward_mode = ForwardMode.DECODE
    b0 = multi.attn_backends[0]
    topk, steps = multi.topk, multi.speculative_num_steps
    if dense:  # the dense slots lie past each prefix inside its row
        fb.seq_lens[:raw_bs].clamp_(max=b0.max_context_len - topk * steps)
        fb.seq_lens_cpu, fb.seq_lens_sum = fb.seq_lens.clone(), int(fb.seq_lens.sum())
        fb.out_cache_loc = dense_draft.dense_out_cache_loc(b0.req_to_token, fb.req_pool_indices[:raw_bs],
                                                           fb.seq_lens[:raw_bs], topk, steps)
    if padded_loc:
        loc = torch.zeros(bs * topk * steps, dtype=torch.int64)
        loc[:fb.out_cache_loc.numel()] = fb.out_cache_loc
        fb.out_cache_loc = loc
    return fb


def _after_each_build(b):
    """Our AFTER hook on step backend ``b``'s CUDA-graph builder, as SGLang's HookRegistry runs it."""
    def hooked(forward_batch, *args, _build=b.init_forward_metadata_out_graph, **kwargs):
        result = _build(forward_batch, *args, **kwargs)
        draft_step.after_metadata(result, b, forward_batch, *args, **kwargs)
        return result

    b.init_forward_metadata_out_graph = hooked


def sglangs_then_ours(multi, fb):
    """A copy of ``multi`` after SGLang's own replay of ``fb``, each step backend's builder followed
    by our rewrite (the AFTER hook fa3 in place installs on it)."""
    ref = copy.deepcopy(multi)
    for b in ref.attn_backends:
        _after_each_build(b)
    SG_OUT_GRAPH(ref, copy.copy(fb))
    for b in ref.attn_backends:
        del b.init_forward_metadata_out_graph
    return ref


@pytest.mark.parametrize("page", PAGES)
def test_the_fused_writer_writes_what_sglangs_builders_and_our_rewrite_write(page, launches):
    rng = random.Random(6100 + page)
    for c in range(4):
        topk, steps = rng.randint(2, 8), rng.randint(2, 6)
        capture_bs = sorted(rng.sample(range(1, 7), 3))
        multi = _in_place_multi(topk, steps, page, capture_bs, page * rng.randint(3, 6) + topk * steps + page,
                                seed=c)
        for b in multi.attn_backends:
            b.needs_cpu_seq_lens = c % 3 == 0  # the page-table bound from the CPU lengths, or the static one
        for r in range(3):
            bs = rng.choice(capture_bs)
            raw_bs = bs if r == 0 else rng.randint(1, bs)  # exact, then (likely) padded graph batches
            fb = _replay_batch(rng, multi, raw_bs, bs, dense=c % 2 == 1, padded_loc=r == 2)
            ref, got = sglangs_then_ours(multi, fb), copy.deepcopy(multi)
            n = len(launches)
            assert draft_step.fused_out_graph_hook(SG_OUT_GRAPH, got, copy.copy(fb)) is None
            assert launches[n:] == ["per_token"] and not fault.SWITCH, fault.SWITCH.reason
            assert_same_state(ref, got, bs)
            for a, b in zip(ref.attn_backends, got.attn_backends):
                assert is_per_token(a.forward_metadata_spec_decode_expand.page_table)
                assert is_per_token(b.forward_metadata_spec_decode_expand.page_table)
                assert a.forward_metadata.max_seq_len_k == b.forward_metadata.max_seq_len_k


def test_the_fused_writer_leaves_a_backend_not_every_step_of_which_is_in_place_to_sglang(launches):
    multi = _in_place_multi(4, 4, 16, [2], 128, seed=1)
    setattr(multi.attn_backends[1], fa3_in_place.MARK, False)
    fb = _replay_batch(random.Random(1), multi, 2, 2, dense=True, padded_loc=False)
    calls = []
    assert draft_step.fused_out_graph_hook(lambda *a, **kw: calls.append(1), multi, fb) is None
    assert calls == [1] and launches == []


@pytest.mark.parametrize("dense", [True, False], ids=["dense-rounds", "per-branch"])
def test_a_fault_in_the_fused_writer_serves_sglangs_builders_then_the_form_the_round_needs(
        dense, monkeypatch, caplog):
    """The fault rule: SGLang's builders serve that call, one ERROR line. While drafts run on rounds
    allocated dense, our rewrite follows them (the per-token form: SGLang's split cannot read those
    rounds); otherwise SGLang's split form stays (over its copy), as fa3 in place did before."""
    import logging

    layout = dense_draft.DenseLayout()  # what the hook table hands the runner's plan
    layout.active = dense
    multi = _in_place_multi(4, 4, 16, [2, 3], 160, seed=2)
    fb = _replay_batch(random.Random(2), multi, 2, 3, dense=True, padded_loc=False)
    if dense:
        ref = sglangs_then_ours(multi, fb)  # before any fault: SGLang's builders, our rewrite
    else:
        ref = copy.deepcopy(multi)
        SG_OUT_GRAPH(ref, copy.copy(fb))  # SGLang's own, nothing of ours

    def broken(*a, **kw):
        raise RuntimeError("injected into the fused writer")

    monkeypatch.setattr(fa3_dense, "per_token_draft_metadata_all_steps", broken)
    got = copy.deepcopy(multi)
    _warmed_up(got, layout)
    for b in got.attn_backends:  # as installed: our AFTER hook on each step backend's builder
        _after_each_build(b)
    with caplog.at_level(logging.ERROR, logger="sglang_eagle_paged"):
        for _ in range(2):  # the next round: SGLang's builders straight away, no second line
            draft_step.fused_out_graph_hook(SG_OUT_GRAPH, got, copy.copy(fb))
    for b in got.attn_backends:
        del b.init_forward_metadata_out_graph
    assert_same_state(ref, got, 3)
    assert all(is_per_token(b.forward_metadata_spec_decode_expand.page_table) is dense for b in got.attn_backends)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "[fault]" in errors[0] and "injected into the fused writer" in errors[0]


# --------------------------------------------------------------------------- the dense layout's reads


def _dense_case(seed, bs, topk, page, steps):
    """A batch on rows shaped as SGLang's paged allocator fills them (``helpers.draft_tree``), the
    draft slots of the dense layout (ours) and of page 1 (SGLang's own page-1 slot kernel on the same
    rows): equal, as the dense layout promises."""
    case = make_case(seed, bs, topk, page, steps, ("random", "aligned", "one", "tail")[seed % 4])
    ours_loc = dense_draft.dense_out_cache_loc(case.r2t, case.req_pool_indices, case.seq_lens, topk, steps)
    page_1_loc = torch.empty_like(ours_loc)
    dense_draft.sglang_page_1_slots(case.r2t, case.req_pool_indices, case.seq_lens, topk, steps, page_1_loc)
    assert torch.equal(ours_loc, page_1_loc)
    page_1 = SimpleNamespace(**{**vars(case), "page": 1})  # the same rows and pool, read at page 1
    return case, page_1, ours_loc


def _batch(case, out_cache_loc):
    return SimpleNamespace(
        forward_mode=ForwardMode.DECODE, batch_size=case.bs, seq_lens=case.seq_lens.clone(),
        seq_lens_cpu=case.seq_lens.clone(), seq_lens_sum=int(case.seq_lens.sum()),
        req_pool_indices=case.req_pool_indices.clone(), out_cache_loc=out_cache_loc.clone(),
        spec_info=SimpleNamespace(is_draft_input=lambda: True), encoder_lens=None, kv_loc_plan=None,
        positions=torch.zeros(case.bs * case.topk, dtype=torch.int64))


def _page_1_metadata(page_1, loc, step):
    """SGLang's own eager draft-decode metadata at page 1 (its per-token form, no split)."""
    be = _backend(page_1, step)
    be.init_forward_metadata(_batch(page_1, loc))
    return be, be.forward_metadata, be.forward_metadata_spec_decode_expand


def _our_steps(case, loc, builder):
    """``[(backend, metadata, expand)]`` per draft step at page ``P`` with our hooks: SGLang's eager
    builder and our rewrite; or graph capture then replay through the fused writer."""
    if builder == "eager":
        out = []
        for step in range(case.steps - 1):
            be = _backend(case, step)
            after_backend_init(None, be)
            fb = _batch(case, loc)
            draft_step.after_metadata(be.init_forward_metadata(fb), be, fb)
            out.append((be, be.forward_metadata, be.forward_metadata_spec_decode_expand))
        return out
    multi = object.__new__(fa3b.FlashAttentionMultiStepBackend)
    multi.topk, multi.speculative_num_steps, multi.attn_backends = case.topk, case.steps, []
    for step in range(case.steps - 1):
        be = _graph_backend(case, step)
        after_backend_init(None, be)
        _after_each_build(be)
        multi.attn_backends.append(be)
    SG_OUT_GRAPH(multi, _batch(case, loc), in_capture=True)  # SGLang's capture; our AFTER hook marks the tables
    draft_step.fused_out_graph_hook(SG_OUT_GRAPH, multi, _batch(case, loc))  # the replay
    return [(be, be.forward_metadata, be.forward_metadata_spec_decode_expand) for be in multi.attn_backends]


DENSE_CASES = [(6110 + i, 1 if page >= 128 else 1 + i % 3, 2 + (3 * i) % 7, page, 2 + (5 * i) % 6)
               for i, page in enumerate(PAGES + (16, 4))]


@pytest.mark.parametrize("builder", ["eager", "graph"])
@pytest.mark.parametrize("params", DENSE_CASES, ids=lambda c: f"s{c[0]}-bs{c[1]}-topk{c[2]}-page{c[3]}-steps{c[4]}")
def test_fa3_reads_the_dense_layout_as_page_1_reads_it(params, builder, launches):
    seed, bs, topk, page, steps = params
    case, page_1, loc = _dense_case(*params)
    g = torch.Generator().manual_seed(seed)
    for step, (be, md, ex) in enumerate(_our_steps(case, loc, builder)):
        assert is_per_token(ex.page_table) and not fault.SWITCH, fault.SWITCH.reason
        q = torch.randn((bs * topk, HEADS, HEAD_DIM), generator=g)
        k, v = case.pool.k_buffer[0].clone(), case.pool.v_buffer[0].clone()
        be1, md1, ex1 = _page_1_metadata(page_1, loc, step)
        theirs, their_reads = two_pass(q, *_paged_kv(be1, k, v), md1, ex1, fa3_reference)
        out, our_reads = two_pass(q, *_paged_kv(be, k, v), md, ex, ours)
        for z, (got, want) in enumerate(zip(our_reads, their_reads, strict=True)):
            assert torch.equal(got, want), f"step {step} branch {z}"
        # the expand pass's lengths and table are page 1's (the first pass's table is SGLang's pages)
        d = step + 1
        assert torch.equal(ex.cache_seqlens_int32[:bs * topk], ex1.cache_seqlens_int32)
        assert torch.equal(ex.page_table[:bs * topk, :d], ex1.page_table[:, :d])
        torch.testing.assert_close(out, theirs, rtol=1e-6, atol=1e-6)
    assert launches == (["per_token"] if builder == "graph" else [])


def test_sglangs_split_does_not_read_the_dense_layout_as_page_1_does():
    """The control: SGLang's own page > 1 metadata (no rewrite) over the dense slots reads other
    slots than page 1 for some branch; the comparison above can fail."""
    case, page_1, loc = _dense_case(6130, 2, 4, 16, 4)
    step = case.steps - 2
    be = _backend(case, step)
    be.init_forward_metadata(_batch(case, loc))
    q = torch.zeros((case.bs * case.topk, HEADS, HEAD_DIM))
    k, v = case.pool.k_buffer[0], case.pool.v_buffer[0]
    _, reads = two_pass(q, *_paged_kv(be, k, v), be.forward_metadata, be.forward_metadata_spec_decode_expand,
                        fa3_reference)
    be1, md1, ex1 = _page_1_metadata(page_1, loc, step)
    _, page_1_reads = two_pass(q, *_paged_kv(be1, k, v), md1, ex1, fa3_reference)
    assert any(not torch.equal(a, b) for a, b in zip(reads, page_1_reads))


# --------------------------------------------------------------------------- the start-up decision


def test_the_dense_layout_takes_fa3_where_fa3_in_place_covers_every_step(installed, caplog):
    """``dense_draft.decide`` on a draft worker whose backend is SGLang's ``FlashAttentionMultiStepBackend``
    of real step backends on the case's plain pool (marked by our backend hook): on; with one step
    backend not covered: off, one line saying why."""
    import logging

    case, _ = dense_case(CASES[1])
    multi = object.__new__(fa3b.FlashAttentionMultiStepBackend)
    multi.attn_backends = [_backend(case, step) for step in range(case.steps - 1)]
    for be in multi.attn_backends:
        after_backend_init(None, be)
    dense = installed[3]  # the layout the hook table built for SGLANG_EAGLE_PAGED_DENSE_DRAFT=1
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        assert dense_draft.refusal(_worker(case, multi), dense) is None
        setattr(multi.attn_backends[-1], fa3_in_place.MARK, False)
        assert not dense_draft.decide(_worker(case, multi), dense) and not dense.active
    lines = [r.getMessage() for r in caplog.records if "dense draft" in r.getMessage()]
    assert len(lines) == 1 and "fa3 in place does not cover" in lines[0]
    again = dense_draft.DenseLayout()  # another process's
    setattr(multi.attn_backends[-1], fa3_in_place.MARK, True)
    assert dense_draft.decide(_worker(case, multi), again) and again.active


def test_the_default_auto_does_not_take_fa3():
    """``SGLANG_EAGLE_PAGED_DENSE_DRAFT=auto`` serves only the backends a GPU row proved: fa3 is not
    among them, whatever in place covers."""
    case, _ = dense_case(CASES[1])
    multi = object.__new__(fa3b.FlashAttentionMultiStepBackend)
    multi.attn_backends = [_backend(case, step) for step in range(case.steps - 1)]
    for be in multi.attn_backends:
        after_backend_init(None, be)
    assert "fa3 is not proven by the GPU suite" in dense_draft.refusal(
        _worker(case, multi), dense_draft.DenseLayout(("flashinfer", "triton")))


def test_asking_for_the_dense_layout_installs_fa3_in_place_s_hooks():
    from sglang_eagle_paged import hooks as hooks_mod
    from sglang_eagle_paged.adapters import v2
    from sglang_eagle_paged.settings import Settings

    targets = {h.target for h in v2.hooks(Settings(dense_draft=True), "0.5.23")}
    assert set(fa3_in_place.TARGETS.values()) <= targets
    assert all(hooks_mod.resolvable(t) is None for t in fa3_in_place.TARGETS.values())
    assert not set(fa3_in_place.TARGETS.values()) & {h.target for h in v2.hooks(Settings(), "0.5.23")}


# --------------------------------------------------------------------------- rounds


def _reads(server, rows, seq_lens, loc, topk, steps, builder, dense):
    """The KV values each branch's draft attention reads at every draft step, in reading order:
    SGLang's own metadata at page 1; at page ``P`` SGLang's builders with our hooks (``builder``:
    eager, or CUDA-graph capture then replay through the fused writer), through FA3's stand-in."""
    case = SimpleNamespace(pool=server.kv, r2t=server.rows.req_to_token, page=server.page, topk=topk, steps=steps,
                           bs=len(rows), seq_lens=seq_lens, req_pool_indices=rows)
    k = server.kv.k_buffer[0]
    if server.page == 1:
        metadata = [_page_1_metadata(case, loc, step) for step in range(steps - 1)]
        attn = fa3_reference
    else:  # the draft runner's plan, recorded at warm-up with the dense layout the hooks were handed
        draft_plan.record(server.kv, None, draft_plan.Options(dense=dense))
        metadata = _our_steps(case, loc, builder)
        attn = ours
    q = torch.zeros((len(rows) * topk, k.shape[1], k.shape[2]))
    kv = k.view(-1, server.page, *k.shape[1:])
    out = []
    for _, md, ex in metadata:
        _, reads = two_pass(q, kv, kv, md, ex, attn)
        out.append([k[r.long()].clone() for r in reads])
    return out


ROUND_CASES = [(16, 4, 3, 61), (64, 8, 5, 62), (4, 3, 2, 63), (256, 2, 4, 64)]


def _rounds(dense, page, topk, steps, seed, builder, monkeypatch, before_round=None):
    """test_dense_rounds' rounds (SGLang's allocation, verify window, move and allocator at page 1 and
    ``P``), each draft prepared by SGLang's own ``prepare_for_draft`` with our hooks, its draft KV a
    function of request, branch and step, and fa3's reads at every draft step compared with page 1's.
    Returns ``(reserves, tokens, layouts)``: the reserve of each round at ``P``, whether it drafted dense."""
    from helpers.draft_tree import prepare_for_draft

    page_1_reads, layouts = [], []

    def draft(server, rows, seq_lens):
        case = SimpleNamespace(pool=server.kv, seq_lens=seq_lens, req_pool_indices=rows, page=server.page,
                               r2t=server.rows.req_to_token, topk=topk, steps=steps)
        loc = prepare_for_draft(case, monkeypatch).out_cache_loc
        for i, slot in enumerate(loc.tolist()):  # request b, branch t, step s: the same KV at either page
            server.k()[slot] = torch.tensor([float(i), -1.0 - i % steps])
        got = _reads(server, rows, seq_lens, loc, topk, steps, builder, dense)
        if server.page == 1:
            page_1_reads.append(got)
        else:
            layouts.append(dense.active)
            for step, (ours_, theirs) in enumerate(zip(got, page_1_reads.pop(), strict=True)):
                for z, (a, b) in enumerate(zip(ours_, theirs, strict=True)):
                    assert torch.equal(a, b), f"round {len(layouts) - 1} step {step} branch {z}"
        return loc

    reserves, tokens = _serve(dense, page, topk, steps, seed, draft, before_round)
    return reserves, tokens, layouts


@pytest.mark.parametrize("builder", ["eager", "graph"])
@pytest.mark.parametrize("page,topk,steps,seed", ROUND_CASES)
def test_rounds_on_fa3_commit_page_1s_kv_read_page_1s_keys_and_return_every_slot(
        page, topk, steps, seed, builder, fa3_context, dense_hooks, monkeypatch):
    reserves, tokens, layouts = _rounds(dense_hooks, page, topk, steps, seed, builder, monkeypatch)
    assert set(reserves) == {reserve_per_decode(page, topk, steps, tokens, dense=True)} and all(layouts)
    assert not fault.SWITCH, fault.SWITCH.reason


def _broken(what):
    def broken(*_a, **_k):
        raise KeyError(f"{what} broken on purpose")

    return broken


# where the fault is injected: (builder, module, attribute)
FAULTS = {
    "gather": ("eager", dense_draft, "dense_out_cache_loc"),
    "rewrite": ("eager", fa3_in_place, "rewrite_draft_metadata"),
    "fused writer": ("graph", fa3_dense, "per_token_draft_metadata_all_steps"),
}
# Not here: a fault in the page-size-1 view itself (``fa3_in_place.per_token_view``, a ``view`` of the
# pool's contiguous buffers, which the coverage check requires). Without the view nothing reads a dense
# round correctly; FA3 then runs on SGLang's arguments (test_fa3_in_place.py's view-fault test).


@pytest.mark.parametrize("where", FAULTS)
@pytest.mark.parametrize("page,topk,steps,seed", ROUND_CASES[:3])
def test_a_fault_in_any_part_reads_dense_rounds_per_token_then_hands_back_to_sglangs_layout(
        page, topk, steps, seed, where, fa3_context, dense_hooks, monkeypatch, caplog):
    """A fault in round ``FAULT`` (the slot gather, the rewrite, the fused writer, or the view): that
    round's drafts still read page 1's keys (the per-token form over the dense slots), the next
    allocation takes SGLang's reserve, and from that round on SGLang's per-branch layout serves, its
    keys page 1's too; committed KV equals page 1's throughout, every slot comes back, one ERROR line
    and one hand-back line."""
    import logging

    builder, module, name = FAULTS[where]

    def before_round(i):
        if i == FAULT:
            monkeypatch.setattr(module, name, _broken(where))

    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        reserves, tokens, layouts = _rounds(dense_hooks, page, topk, steps, seed, builder, monkeypatch, before_round)
    dense = reserve_per_decode(page, topk, steps, tokens, dense=True)
    assert reserves == [dense] * (FAULT + 1) + [reserve_per_decode(page, topk, steps, tokens)] * (5 - FAULT)
    assert layouts == [True] * (FAULT + 1) + [False] * (5 - FAULT)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    handed = [r.getMessage() for r in caplog.records if "handed back" in r.getMessage()]
    assert len(errors) == 1 and "[fault]" in errors[0] and f"{where} broken" in errors[0], errors
    assert len(handed) == 1, handed


# --------------------------------------------------------------------------- warm-up


def test_warm_up_compiles_the_per_token_writer_variants_serving_launches():
    """After the draft worker's ``init_attention_backend`` (fa3_replay's warm-up hook): every variant of
    the per-token writer that replays launch (exact batches: int64 lengths; padded: the graph
    runner's int32 buffer) is compiled; nothing where no step backend reads in place."""
    from helpers.interpreter_order import capture_specializations

    from sglang_eagle_paged.adapters.v2 import fa3_replay
    from sglang_eagle_paged.kernels.per_token_draft_metadata import _per_token_all_steps_kernel
    from sglang_eagle_paged.settings import FA3Expand

    multi = _in_place_multi(4, 4, 16, [1, 2, 4], 160, seed=3)
    with capture_specializations(_per_token_all_steps_kernel) as warm:
        fa3_replay.warm_up_hook(FA3Expand.FUSED)(None, SimpleNamespace(draft_attn_backend=multi))
    rng = random.Random(3)
    with capture_specializations(_per_token_all_steps_kernel) as serve:
        for raw_bs, bs in ((2, 2), (3, 4)):
            fb = _replay_batch(rng, multi, raw_bs, bs, dense=True, padded_loc=False)
            if raw_bs != bs:
                fb.seq_lens = fb.seq_lens.to(torch.int32)  # the graph runner's buffer when it pads
            draft_step.fused_out_graph_hook(SG_OUT_GRAPH, multi, fb)
    assert serve and {repr(x) for x in serve} <= {repr(x) for x in warm}
    for b in multi.attn_backends:
        setattr(b, fa3_in_place.MARK, False)
    with capture_specializations(_per_token_all_steps_kernel) as none:
        fa3_replay.warm_up_hook(FA3Expand.FUSED)(None, SimpleNamespace(draft_attn_backend=multi))
    assert none == []
