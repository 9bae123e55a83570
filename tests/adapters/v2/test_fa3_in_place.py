"""FA3 tree drafting at page > 1 reading the prefix tail in place (issue 38, the CPU proof):
SGLang's metadata over the copied KV and ours over the uncopied KV give the same attention at
every draft step, and ours reads only the prefix and the branch's own draft slots.

SGLang's own code decides everything but the attention arithmetic, run on CPU:

- the tree, the rows and the copy targets: ``helpers.draft_tree``'s cases (SGLang's allocation
  sizes, shared prefix pages) and SGLang's ``prepare_for_draft`` on a real ``MHATokenToKVPool``
  (bf16), its copy recorded;
- both passes' metadata: ``FlashAttentionBackend.init_forward_metadata`` itself (eager, the
  ``topk > 1`` draft-decode branch and its ``page_size > 1`` split), and its CUDA-graph
  counterpart (``init_cuda_graph_state``, then ``init_forward_metadata_out_graph`` capturing,
  then replaying), then for ours the AFTER hooks :mod:`fa3_in_place` installs on them, called
  as SGLang's HookRegistry calls them;
- the KV views: ``FlashAttentionBackend.get_paged_mha_kv_cache`` where the release has it
  (0.5.23), else the view ``forward_decode`` takes inline (0.5.17: ``get_kv_buffer`` viewed
  ``(-1, page_size, heads, dim)``), the one both of SGLang's calls get; through our AROUND hook
  on ``flash_attn_with_kvcache`` for ours.

It runs on each release with that release's own code: 0.5.23 (``.venv``) and 0.5.17
(``.venv-517``, scripts/test.sh's v517 part), whose builders differ (docs/backend_reads.md,
"fa3 in place on 0.5.17"), and 0.5.18 .. 0.5.22 (scripts/check_fa3_proofs.sh).

FA3's CUDA kernel cannot run on CPU. :func:`fa3_reference` stands in for it: plain torch,
reading ``k_cache[page_table[z, j // P], j % P]`` for ``j < cache_seqlens[z]`` with the queries
of ``cu_seqlens_q``, non-causal, returning the output and the log-sum-exp; the two passes are
merged as ``merge_state_v2`` merges them.
"""

import logging
import math
import random
import sys
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sglang")
fa3b = pytest.importorskip("sglang.srt.layers.attention.flashattention_backend")
ewc = pytest.importorskip("sglang.srt.speculative.eagle_worker_common")
if not hasattr(ewc, "prepare_for_draft") or not hasattr(ewc, "duplicate_prefix_tail_to_draft_branches"):
    pytest.skip("needs SGLang 0.5.16+ (module-level prepare_for_draft)", allow_module_level=True)

from helpers.draft_tree import (  # noqa: E402
    HEAD_DIM, HEADS, draft_decode_set_expand_metadata, expected_reads, make_case, plain_translator,
    prepare_for_draft)

from sglang.srt.mem_cache import memory_pool as mp  # noqa: E402
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

try:  # 0.5.17: the unified pool's hooks stand where 0.5.23's KVIndexTranslator does
    from sglang.srt.layers.attention.unified_mem_hooks import unified_mla_hooks
except ImportError:  # 0.5.23
    unified_mla_hooks = None

from sglang_eagle_paged.adapters.v2 import fa3_in_place, fault  # noqa: E402
from sglang_eagle_paged.adapters.v2.draft_step import after_metadata, around_flash_attn  # noqa: E402
from sglang_eagle_paged.adapters.v2.fa3_in_place import after_backend_init, is_per_token  # noqa: E402

torch.set_num_threads(1)

SCALE = 1.0 / math.sqrt(HEAD_DIM)


# --------------------------------------------------------------------------- FA3, in plain torch


def fa3_reference(*, q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, **_):
    """What ``flash_attn_with_kvcache`` computes for paged, non-causal decode, in fp32:
    ``(out, lse, slots)``, ``slots[z]`` being the slots batch entry ``z`` read (as
    ``page * page_size + offset`` in the buffer's own slot numbering)."""
    page = k_cache.shape[1]
    k_flat = k_cache.reshape(-1, *k_cache.shape[2:]).float()
    v_flat = v_cache.reshape(-1, *v_cache.shape[2:]).float()
    out = torch.zeros(q.shape, dtype=torch.float32)
    lse = torch.full(q.shape[:2], -math.inf, dtype=torch.float32)
    slots = []
    for z in range(cache_seqlens.numel()):
        j = torch.arange(int(cache_seqlens[z]))
        s = page_table[z, j // page].long() * page + j % page
        slots.append(s)
        if s.numel() == 0:
            continue
        rows = slice(int(cu_seqlens_q[z]), int(cu_seqlens_q[z + 1]))
        logits = torch.einsum("qhd,khd->qhk", q[rows].float(), k_flat[s]) * SCALE
        lse[rows] = torch.logsumexp(logits, dim=-1)
        out[rows] = torch.einsum("qhk,khd->qhd", torch.softmax(logits, dim=-1), v_flat[s])
    return out, lse, slots


def merge(o_a, lse_a, o_b, lse_b):
    """``merge_state_v2``: the two passes' softmax-weighted outputs by their log-sum-exp."""
    m = torch.maximum(lse_a, lse_b)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    return (o_a * w_a[..., None] + o_b * w_b[..., None]) / (w_a + w_b)[..., None]


def two_pass(q, key_cache, value_cache, metadata, expand, attn=fa3_reference):
    """SGLang's ``forward_decode`` cascade (``use_cascade_attn``): both passes through ``attn``
    (the module's ``flash_attn_with_kvcache``, with SGLang's keyword arguments), merged; plus
    every slot the two passes read, per branch."""
    o, lse, first_slots = attn(q=q, k_cache=key_cache, v_cache=value_cache,
                               page_table=metadata.page_table,
                               cache_seqlens=metadata.cache_seqlens_int32,
                               cu_seqlens_q=metadata.cu_seqlens_q)
    o_e, lse_e, expand_slots = attn(q=q, k_cache=key_cache, v_cache=value_cache,
                                    page_table=expand.page_table,
                                    cache_seqlens=expand.cache_seqlens_int32,
                                    cu_seqlens_q=expand.cu_seqlens_q,
                                    cu_seqlens_k_new=expand.cu_seqlens_k)
    topk = q.shape[0] // len(first_slots)
    reads = [torch.cat([first_slots[z // topk], expand_slots[z]]) for z in range(q.shape[0])]
    return merge(o, lse, o_e, lse_e), reads


def ours(*, k_cache, v_cache, **kwargs):
    """The hooked ``flash_attn_with_kvcache``: our AROUND hook over FA3's stand-in."""
    return around_flash_attn(fa3_reference, k_cache=k_cache, v_cache=v_cache, **kwargs)


# --------------------------------------------------------------------------- SGLang's builders


def _backend(case, step_id):
    """SGLang's ``FlashAttentionBackend`` as its ``__init__`` leaves it for a draft runner on a
    plain MHA pool (the attributes ``init_forward_metadata``'s draft-decode path reads)."""
    be = object.__new__(fa3b.FlashAttentionBackend)
    be.topk, be.speculative_num_steps, be.speculative_step_id = case.topk, case.steps, step_id
    be.page_size, be.device = case.page, "cpu"
    be.max_context_len = case.r2t.shape[1]
    be.req_to_token_pool = SimpleNamespace(req_to_token=case.r2t)
    be.req_to_token = case.r2t
    be.token_to_kv_pool = case.pool
    be.use_sliding_window_kv_pool = False
    be._kv_shard_pool = None
    be.local_attn_builder = None  # no chunked local attention (llama4): SGLang checks it
    be.is_prefill_aware_swa = False
    be.use_mla, be.attn_cp_size, be.is_draft_runner = False, 1, True
    be.has_swa, be.fa_impl_ver = False, 3
    be.has_local_attention = False  # 0.5.17's name for local attention (0.5.23 derives it too)
    translator = plain_translator(case)
    if translator is not None:  # 0.5.19+
        be.kv_index_translator = translator
    else:  # 0.5.17, 0.5.18: no translator; __init__ asks the allocator whether ids are virtual (MLA only)
        allocator = PagedTokenToKVPoolAllocator(case.pool.size, case.page, torch.float32, "cpu", case.pool,
                                                need_sort=False)  # a plain pool's allocator
        be._unified_hooks = unified_mla_hooks(allocator)
        be._unified_dense = be._unified_hooks.enabled and be.use_mla
    be.forward_metadata_spec_decode_expand = None
    return be


@pytest.fixture(autouse=True)
def _expand_builder_as_written(monkeypatch):
    """SGLang's ``draft_decode_set_expand_metadata`` as written, not its torch.compile wrapper
    (which compiles per shape with inductor on CPU: minutes, same arithmetic)."""
    monkeypatch.setattr(fa3b, "draft_decode_set_expand_metadata", draft_decode_set_expand_metadata)


def _forward_batch(case, prep):
    return SimpleNamespace(
        forward_mode=ForwardMode.DECODE, batch_size=case.bs, seq_lens=case.seq_lens.clone(),
        seq_lens_cpu=case.seq_lens.clone(), seq_lens_sum=int(case.seq_lens.sum()),
        req_pool_indices=case.req_pool_indices.clone(),
        out_cache_loc=prep.out_cache_loc, spec_info=SimpleNamespace(), encoder_lens=None,
        kv_loc_plan=None, positions=torch.zeros(case.bs * case.topk, dtype=torch.int64),
    )


def _graph_backend(case, step_id, max_bs=None):
    """The backend after ``init_cuda_graph_state`` (as a CUDA-graph draft runner leaves it), its
    buffers sized for ``max_bs`` requests (default: the case's batch)."""
    max_bs = max_bs or case.bs
    be = _backend(case, step_id)
    be.is_draft_runner, be.is_encoder_decoder, be.skip_prefill, be.use_mla = True, False, False, False
    be.sliding_window_size, be._verify_mask = None, None
    be._get_scheduler_metadata = None  # sgl_kernel's FA3 scheduler: CUDA only
    be._decode_uses_static_max_seqlen_k = False  # FA4 only
    be.needs_cpu_seq_lens = False
    be.speculative_num_draft_tokens = case.topk * case.steps + 1
    be.init_cuda_graph_state(max_bs, max_bs * case.topk)
    return be


def _draft_step_metadata(case, prep, step_id, builder, in_place=False):
    """``(backend, metadata, expand)`` SGLang builds for draft step ``step_id``: eagerly
    (``init_forward_metadata``), or as a CUDA graph is captured then replayed
    (``init_forward_metadata_out_graph`` with ``in_capture`` True, then False). ``in_place``:
    with our AFTER hooks run as SGLang's HookRegistry runs them (after the backend's
    ``__init__``, after each builder)."""
    after = after_metadata if in_place else (lambda *a, **kw: None)
    if builder == "eager":
        be = _backend(case, step_id)
        if in_place:
            after_backend_init(None, be)
        fb = _forward_batch(case, prep)
        after(be.init_forward_metadata(fb), be, fb)
    else:
        be = _graph_backend(case, step_id)
        if in_place:
            after_backend_init(None, be)
        for capture in (True, False):
            fb = _forward_batch(case, prep)
            after(be.init_forward_metadata_out_graph(fb, in_capture=capture), be, fb, in_capture=capture)
    return be, be.forward_metadata, be.forward_metadata_spec_decode_expand


LAYER = SimpleNamespace(layer_id=0, tp_k_head_num=HEADS, tp_v_head_num=HEADS, head_dim=HEAD_DIM,
                        v_head_dim=HEAD_DIM)


def _paged_kv(be, k, v):
    """The backend's paged view of the pool's layer-0 buffers after writing ``k``, ``v`` into them."""
    be.token_to_kv_pool.k_buffer[0].copy_(k)
    be.token_to_kv_pool.v_buffer[0].copy_(v)
    if hasattr(be, "get_paged_mha_kv_cache"):  # 0.5.23
        return be.get_paged_mha_kv_cache(LAYER)
    # 0.5.17 has no accessor: forward_decode's MHA branch views get_kv_buffer inline, so.
    key_cache, value_cache = be.token_to_kv_pool.get_kv_buffer(LAYER.layer_id)
    return (key_cache.view(-1, be.page_size, LAYER.tp_k_head_num, LAYER.head_dim),
            value_cache.view(-1, be.page_size, LAYER.tp_v_head_num, LAYER.v_head_dim))


# --------------------------------------------------------------------------- the cases


def _cases():
    rng = random.Random(38)
    out = []
    kinds = ["random", "aligned", "one", "tail"]
    pages = [2, 4, 16, 64, 128, 256]
    for n in range(16):
        page = pages[n % len(pages)] if n < 12 else rng.choice(pages)
        topk = rng.randint(2, 10)
        steps = rng.randint(2, 8)
        bs = rng.randint(1, 3) if page < 128 else 1
        out.append((3800 + n, bs, topk, page, steps, kinds[n % len(kinds)]))
    # the ends of the ranges (steps 1 runs no draft decode forward: nothing to read)
    return out + [(3816, 2, 2, 256, 8, "random"), (3817, 3, 10, 2, 8, "tail")]


CASES = _cases()


def _case_id(c):
    return f"s{c[0]}-bs{c[1]}-topk{c[2]}-page{c[3]}-steps{c[4]}-{c[5]}"


def _bf16_case(params, monkeypatch):
    case = make_case(*params)
    for buf in case.pool.k_buffer + case.pool.v_buffer:  # bf16 KV, as served
        buf.copy_(buf.bfloat16().float())
    prep = prepare_for_draft(case, monkeypatch)
    return case, prep


@pytest.mark.parametrize("builder", ["eager", "graph"])
@pytest.mark.parametrize("params", CASES, ids=_case_id)
def test_in_place_reads_give_sglangs_attention_without_the_copy(params, builder, monkeypatch):
    """At every draft step: SGLang's two passes over the KV after its copy, and ours over the
    KV without it (every copy target NaN), give the same attention within bf16 rounding, and
    each branch of ours reads exactly its prefix, then its own draft slots."""
    case, prep = _bf16_case(params, monkeypatch)
    pool = case.pool
    k_copied, v_copied = pool.k_buffer[0].clone(), pool.v_buffer[0].clone()  # prepare_for_draft copied
    k_holes, v_holes = k_copied.clone(), v_copied.clone()
    k_holes[prep.tgt] = float("nan")
    v_holes[prep.tgt] = float("nan")
    g = torch.Generator().manual_seed(params[0])
    for step in range(case.steps - 1):  # SGLang's draft runs steps - 1 decode forwards
        q = torch.randn((case.bs * case.topk, HEADS, HEAD_DIM), generator=g).bfloat16().float()
        be, md, ex = _draft_step_metadata(case, prep, step, builder)
        theirs, their_reads = two_pass(q, *_paged_kv(be, k_copied, v_copied), md, ex)

        be, md, ex = _draft_step_metadata(case, prep, step, builder, in_place=True)
        assert is_per_token(ex.page_table)
        out, our_reads = two_pass(q, *_paged_kv(be, k_holes, v_holes), md, ex, ours)

        assert torch.isfinite(out).all(), f"step {step}: a hole was read"
        torch.testing.assert_close(out, theirs, rtol=2 ** -8, atol=2 ** -8, msg=f"step {step}")
        expected = expected_reads(case, prep, step)
        for z, (got, want) in enumerate(zip(our_reads, expected, strict=True)):
            assert torch.equal(got, want), f"step {step} branch {z}"


@pytest.mark.parametrize("builder", ["eager", "graph"])
@pytest.mark.parametrize("params", [c for c in CASES if c[5] in ("random", "tail")][:3], ids=_case_id)
def test_sglangs_split_over_the_uncopied_kv_is_wrong(params, builder, monkeypatch):
    """The control, so the comparison above can fail: SGLang's own metadata over the KV without
    the copy reads holes (NaN out), and reads every copy target."""
    case, prep = _bf16_case(params, monkeypatch)
    assert prep.tgt.numel() > 0
    k_holes, v_holes = case.pool.k_buffer[0].clone(), case.pool.v_buffer[0].clone()
    k_holes[prep.tgt] = float("nan")
    v_holes[prep.tgt] = float("nan")
    q = torch.randn((case.bs * case.topk, HEADS, HEAD_DIM), generator=torch.Generator().manual_seed(1))
    step = case.steps - 2
    be, md, ex = _draft_step_metadata(case, prep, step, builder)
    out, reads = two_pass(q, *_paged_kv(be, k_holes, v_holes), md, ex, ours)  # unmarked: as SGLang
    assert torch.isnan(out).any()
    assert torch.isin(prep.tgt, torch.cat(reads)).all()


# --------------------------------------------------------------------------- the glue


ABSENT = object()  # the attribute is not there at all (0.5.17 has no kv_index_translator)
ON_517 = {"kv_index_translator": ABSENT}


def _pool(**switched):
    """A real ``MHATokenToKVPool`` as its constructor builds it on CPU, then ``switched`` as its
    constructor would set them elsewhere (AITER's ``vectorized_5d`` layout needs ROCm)."""
    pool = MHATokenToKVPool(64, 16, torch.bfloat16, 2, 4, 1, "cpu", enable_memory_saver=False,
                            enable_alt_stream=False, enable_kv_cache_copy=False)
    vars(pool).update(switched)
    return pool


def _draft_backend(**kw):
    be = SimpleNamespace(is_draft_runner=True, topk=4, page_size=16, use_mla=False, has_swa=False, fa_impl_ver=3,
                         use_sliding_window_kv_pool=False, local_attn_builder=None, has_local_attention=False,
                         _kv_shard_pool=None, token_to_kv_pool=_pool(),
                         kv_index_translator=SimpleNamespace(is_translating=False), attn_cp_size=1)
    vars(be).update(kw)
    for name in [k for k, v in vars(be).items() if v is ABSENT]:
        delattr(be, name)
    return be


def _decision(multi):
    """(copy, reason, in place): what a draft runner's plan decides for its multi-step backend ``multi``
    (on a plain pool of SGLang's, so the pool decides nothing)."""
    from sglang_eagle_paged.adapters.v2 import draft_plan as plans

    plan = plans.derive(_pool(), SimpleNamespace(draft_attn_backend=multi))
    return plan.copy != plans.SKIP, plan.reason, plan.in_place


@pytest.mark.parametrize("backends, in_place", [
    ([], False),  # the hooks never ran (setting off, or no FA3 draft backend)
    ([{}, {}], True),
    ([{}, {"use_mla": True}], False),
    ([{}, {"use_sliding_window_kv_pool": True}], False),
    ([{"kv_index_translator": SimpleNamespace(is_translating=True)}], False),
    ([{"local_attn_builder": object()}], False),
    ([{"attn_cp_size": 2}], False),
    ([{"fa_impl_ver": 4}], False),
    ([{"has_swa": True}], False),
    ([{"has_local_attention": True}], False),
    # 0.5.17: no translator; the unified pool's allocator hooks say whether ids are virtual
    ([{**ON_517, "_unified_hooks": SimpleNamespace(enabled=False)}] * 2, True),
    ([{**ON_517, "_unified_hooks": SimpleNamespace(enabled=True)}], False),
    ([ON_517], False),  # neither: cannot tell, so copy
    ([{}, {"is_draft_runner": False, "use_mla": True}], True),  # the target's backend: not drafting
    # the pool: SGLang's plain MHATokenToKVPool in its NHD layout only
    ([{}, {"token_to_kv_pool": None}], False),
    ([{"token_to_kv_pool": _pool(kv_cache_layout="vectorized_5d")}], False),
    ([{"token_to_kv_pool": object.__new__(mp.MHATokenToKVPoolFP4)}], False),
    ([{"token_to_kv_pool": object.__new__(mp.MLATokenToKVPool)}], False),
])
def test_fa3s_copy_is_skipped_only_when_every_draft_backend_reads_in_place(backends, in_place, monkeypatch):
    """The decision a server takes (the draft runner's plan over its own multi-step backend, an object
    of SGLang's real class) once the backend hook has marked its step backends."""
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionMultiStepBackend

    monkeypatch.delenv("SGLANG_USE_HND_KVCACHE", raising=False)
    built = [_draft_backend(**kw) for kw in backends]
    for be in built:
        after_backend_init(None, be)
    multi = object.__new__(FlashAttentionMultiStepBackend)
    multi.attn_backends = [be for be in built if be.is_draft_runner]  # a target's backend is not a draft step
    copy, reason, by_reading_in_place = _decision(multi)
    assert copy is (not in_place) and by_reading_in_place is in_place and reason
    if in_place:
        multi.attn_backends[0].dcp_size = 2  # decode context parallelism: not in the proof
        assert _decision(multi)[0] is True


def test_sglangs_own_backend_is_covered_until_its_reads_are_translated(monkeypatch):
    """``not_covered`` on the backend the proof above builds (SGLang's class, with the installed
    release's own translator: 0.5.23's ``KVIndexTranslator``, or 0.5.17's ``unified_mla_hooks`` of
    a real paged allocator), then with that release's translation switched on."""
    monkeypatch.delenv("SGLANG_USE_HND_KVCACHE", raising=False)
    be = _backend(make_case(*CASES[0]), 0)
    assert fa3_in_place.not_covered(be) is None
    if hasattr(be, "kv_index_translator"):  # 0.5.23: a unified pool or a fused draft
        be.kv_index_translator.is_translating = True
    else:  # 0.5.17: an allocator with a virtual-to-physical page table (the unified pool)
        assert not hasattr(fa3b.FlashAttentionBackend, "get_paged_mha_kv_cache")
        be._unified_hooks = unified_mla_hooks(SimpleNamespace(full_v2p_page_table=torch.zeros(4, dtype=torch.int32)))
        assert be._unified_hooks.enabled
    assert "translated" in fa3_in_place.not_covered(be)


def test_an_hnd_pool_keeps_the_copy(monkeypatch):
    """The pool's constructor reads SGLANG_USE_HND_KVCACHE and lays its buffers out head-major:
    not the layout the proof reads per token."""
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionMultiStepBackend

    from sglang_eagle_paged.adapters.v2 import backends as readers

    monkeypatch.setenv("SGLANG_USE_HND_KVCACHE", "1")
    be = _draft_backend(token_to_kv_pool=_pool())
    assert be.token_to_kv_pool.kv_cache_layout == "hnd"
    assert "HND" in fa3_in_place.not_covered(be)
    after_backend_init(None, be)
    multi = object.__new__(FlashAttentionMultiStepBackend)
    multi.attn_backends = [be]
    assert readers.copy_needed(multi)[0] is True


# --------------------------------------------------------------------------- a fault in our path


def _errors(caplog):
    return [r for r in caplog.records if r.levelno == logging.ERROR]


def _reference(case, prep, step, builder, q):
    """SGLang's own two passes over the copied KV for draft step ``step``."""
    be, md, ex = _draft_step_metadata(case, prep, step, builder)
    return two_pass(q, *_paged_kv(be, case.pool.k_buffer[0].clone(), case.pool.v_buffer[0].clone()), md, ex)[0]


def test_a_fault_in_the_rewrite_brings_the_copy_back_and_sglangs_eager_metadata_serves(monkeypatch, caplog):
    """The fault rule (never the scheduler's): our rewrite raising leaves SGLang's metadata as its
    builder made it, SGLang's own function copies the prefix tail again although the runner's plan
    (kept: nothing SGLang holds changed) says in place, and one ERROR line says so, however many
    faults follow."""
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionMultiStepBackend

    from sglang_eagle_paged.adapters.v2 import draft_plan, draft_step
    from sglang_eagle_paged.settings import Mode

    monkeypatch.setattr(fault.SWITCH, "reason", None)
    monkeypatch.delenv("SGLANG_USE_HND_KVCACHE", raising=False)
    case, prep = _bf16_case(CASES[0], monkeypatch)
    step = case.steps - 2
    q = torch.randn((case.bs * case.topk, HEADS, HEAD_DIM), generator=torch.Generator().manual_seed(2))
    theirs = _reference(case, prep, step, "eager", q)

    be, _, _ = _draft_step_metadata(case, prep, step, "eager", in_place=True)
    multi = object.__new__(FlashAttentionMultiStepBackend)
    multi.attn_backends = [be]
    pool = _pool()
    plan = draft_plan.record(pool, SimpleNamespace(draft_attn_backend=multi))
    assert plan.copy == draft_plan.SKIP and plan.in_place  # in place: no copy, before any fault
    duplication, sglangs = draft_step.duplication_hook(Mode.ON), []
    no_tail = (torch.zeros((1, 4), dtype=torch.int32),) + (torch.zeros(1, dtype=torch.int64),) * 3 + (2, 16)
    duplication(lambda *a: sglangs.append(a), pool, *no_tail)
    assert sglangs == []

    def broken(*args, **kwargs):
        raise RuntimeError("injected into our rewrite")

    monkeypatch.setattr(fa3_in_place, "rewrite_draft_metadata", broken)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        for _ in range(2):
            be, md, ex = _draft_step_metadata(case, prep, step, "eager", in_place=True)
    assert len(_errors(caplog)) == 1 and "injected into our rewrite" in _errors(caplog)[0].getMessage()
    assert fault.SWITCH and not is_per_token(ex.page_table)
    out, _ = two_pass(q, *_paged_kv(be, case.pool.k_buffer[0].clone(), case.pool.v_buffer[0].clone()), md, ex, ours)
    torch.testing.assert_close(out, theirs, rtol=0, atol=0)  # SGLang's own split, over the copy
    assert draft_plan.current(pool) is plan and _decision(multi)[0] is True
    duplication(lambda *a: sglangs.append(a), pool, *no_tail)
    assert len(sglangs) == 1 and sglangs[0][0] is pool  # SGLang's own copy, from the next round on


def test_a_graph_captured_in_place_keeps_its_tables_rewritten_after_a_fault(monkeypatch):
    """A CUDA graph captured with our per-token view reads its expand table per token whatever
    happens later, so after a fault its replays are still rewritten: the same attention as
    SGLang's, without reading a hole."""
    monkeypatch.setattr(fault.SWITCH, "reason", None)
    case, prep = _bf16_case(CASES[3], monkeypatch)
    step = case.steps - 2
    q = torch.randn((case.bs * case.topk, HEADS, HEAD_DIM), generator=torch.Generator().manual_seed(3))
    theirs = _reference(case, prep, step, "graph", q)

    be = _graph_backend(case, step)
    after_backend_init(None, be)
    fb = _forward_batch(case, prep)
    after_metadata(be.init_forward_metadata_out_graph(fb, in_capture=True), be, fb, in_capture=True)
    fault.SWITCH.trip(RuntimeError("a fault elsewhere in our path"))
    fb = _forward_batch(case, prep)
    after_metadata(be.init_forward_metadata_out_graph(fb, in_capture=False), be, fb, in_capture=False)
    md, ex = be.forward_metadata, be.forward_metadata_spec_decode_expand
    assert is_per_token(ex.page_table)
    k_holes, v_holes = case.pool.k_buffer[0].clone(), case.pool.v_buffer[0].clone()
    k_holes[prep.tgt] = float("nan")
    v_holes[prep.tgt] = float("nan")
    out, _ = two_pass(q, *_paged_kv(be, k_holes, v_holes), md, ex, ours)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, theirs, rtol=2 ** -8, atol=2 ** -8)


def test_a_fault_in_the_view_runs_fa3_on_sglangs_own_arguments(monkeypatch, caplog):
    monkeypatch.setattr(fault.SWITCH, "reason", None)
    table = torch.zeros(2, 3, dtype=torch.int32)
    setattr(table, fa3_in_place.PER_TOKEN, True)
    k_cache = torch.zeros(8, 4, HEADS, HEAD_DIM).transpose(0, 1)  # pages and offsets no view can merge
    v_cache = torch.zeros(4, 8, HEADS, HEAD_DIM)
    seen = {}

    def fa3(**kwargs):
        seen.update(kwargs)
        return "out"

    with caplog.at_level(logging.ERROR, logger="sglang_eagle_paged"):
        assert around_flash_attn(fa3, page_table=table, k_cache=k_cache, v_cache=v_cache) == "out"
    assert seen["k_cache"] is k_cache and seen["v_cache"] is v_cache
    assert len(_errors(caplog)) == 1 and fault.SWITCH


def test_a_fault_in_the_coverage_check_keeps_the_copy(monkeypatch, caplog):
    monkeypatch.setattr(fault.SWITCH, "reason", None)
    be = _draft_backend()
    monkeypatch.setattr(fa3_in_place, "not_covered", lambda backend: 1 / 0)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        after_backend_init(None, be)
    assert getattr(be, fa3_in_place.MARK) is False
    assert "the check failed (ZeroDivisionError" in caplog.text


def test_the_hooks_follow_the_setting_and_the_release():
    from sglang_eagle_paged import hooks, settings
    from sglang_eagle_paged.adapters import v2

    def targets(env, version="0.5.23"):
        return {h.target for h in v2.hooks(settings.parse(env), version)} & set(fa3_in_place.TARGETS.values())

    assert targets({}) == set()  # off by default
    assert targets({settings.FA3_IN_PLACE: "1", settings.MODE: "fake"}) == set()
    assert targets({settings.FA3_IN_PLACE: "1"}, "0.5.16") == set()  # not proven there: copy as before
    on = targets({settings.FA3_IN_PLACE: "1"})
    assert on == set(fa3_in_place.TARGETS.values())
    assert targets({settings.FA3_IN_PLACE: "1"}, "0.5.17") == on  # this file's proof runs there too
    assert all(hooks.resolvable(t) is None for t in on)


def test_the_plugin_installs_the_hooks_only_with_the_setting():
    """Through SGLang's own plugin loading and HookRegistry (each run in its own interpreter: the
    hooks cannot be undone): with the setting every in-place hook takes, without it none is there."""
    import json
    import os
    import subprocess

    probe = ("from sglang.srt.plugins import load_plugins; load_plugins(); "
             "from sglang.srt.plugins.hook_registry import HookRegistry; import json; "
             "print('RESULT ' + json.dumps(sorted(HookRegistry._patched)))")
    targets = set(fa3_in_place.TARGETS.values())
    for value, want in (("1", targets), ("", set())):
        env = {k: v for k, v in os.environ.items() if k not in ("SGLANG_EAGLE_PAGED", "SGLANG_PLUGINS")}
        env.update(TRITON_INTERPRET="1", SGLANG_EAGLE_PAGED_FA3_IN_PLACE=value)
        p = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
        lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        assert p.returncode == 0 and lines, p.stderr[-3000:]
        assert set(json.loads(lines[-1][len("RESULT "):])) & targets == want


# --------------------------------------------------------------------------- serving's batches
#
# A server's draft batches differ from the metadata SGLang built for them: SGLang's CUDA-graph draft
# runner pads a batch to the next captured size (``EAGLEDraftCudaGraphRunner.execute``), and with
# overlap scheduling the next batch can lose or gain requests against the one before. The tests below
# run the runner's own ``execute`` on CPU, an object of SGLang's class with the state its
# ``__init__`` builds for these shapes; only the CUDA-graph launch itself (``_replay_graph``) cannot
# run here: it is left out on the instance and the attention it would compute is taken from the
# metadata the runner's ``execute`` left in the step backends, as the graph reads it.


def _hooked_draft_backend(case, max_bs, in_place, fused=False):
    """SGLang's ``FlashAttentionMultiStepBackend`` of CUDA-graph step backends for ``max_bs``
    requests, each builder followed by our AFTER hook as SGLang's HookRegistry runs it; ``fused``:
    with the fused FA3 replay metadata's AROUND hook on the multi-step builder too."""
    multi = object.__new__(fa3b.FlashAttentionMultiStepBackend)
    if fused:
        from sglang_eagle_paged.adapters.v2.draft_step import fused_out_graph_hook

        build = fa3b.FlashAttentionMultiStepBackend.init_forward_metadata_out_graph
        multi.init_forward_metadata_out_graph = lambda fb, in_capture=False: fused_out_graph_hook(
            build, multi, fb, in_capture=in_capture)
    multi.attn_backends = []
    multi.speculative_num_steps, multi.topk = case.steps, case.topk
    for step in range(case.steps - 1):
        be = _graph_backend(case, step, max_bs)
        if in_place:
            after_backend_init(None, be)
            for name in ("init_forward_metadata", "init_forward_metadata_out_graph"):
                def hooked(forward_batch, *args, _be=be, _build=getattr(be, name), **kwargs):
                    result = _build(forward_batch, *args, **kwargs)
                    after_metadata(result, _be, forward_batch, *args, **kwargs)
                    return result

                setattr(be, name, hooked)
        multi.attn_backends.append(be)
    return multi


def _draft_graph_runner(case, multi, capture_bs):
    """SGLang's ``EAGLEDraftCudaGraphRunner`` with the buffers and fields its ``__init__`` sets for
    ``capture_bs`` (no rejection sampling, no DP attention, no KV canary), its graphs captured as
    its ``capture`` does it for the metadata (``init_forward_metadata_out_graph`` in capture)."""
    import dataclasses

    from sglang.srt.speculative import eagle_draft_cuda_graph_runner as rmod

    runner = object.__new__(rmod.EAGLEDraftCudaGraphRunner)
    max_bs = max(capture_bs)
    tokens = max_bs * case.topk
    fill = multi.attn_backends[0].get_cuda_graph_seq_len_fill_value()
    zeros = lambda *shape, dtype=torch.int64: torch.zeros(shape, dtype=dtype)  # noqa: E731
    buffers = dict(
        input_ids=zeros(tokens), req_pool_indices=zeros(max_bs), out_cache_loc=zeros(tokens * case.steps),
        positions=zeros(tokens), mrope_positions=zeros(3, tokens), rids_int=None, bootstrap_room_ids_int=None,
        seq_lens=torch.full((max_bs,), fill, dtype=torch.int64), seq_lens_cpu=torch.full((max_bs,), fill),
        extend_seq_lens=torch.ones(max_bs, dtype=torch.int32), topk_p=zeros(max_bs, case.topk, dtype=torch.float32),
        topk_index=zeros(max_bs, case.topk), draft_probs=None, hidden_states=None, global_num_tokens_gpu=None,
        global_num_tokens_for_logprob_gpu=None, dsa_seed_topk=None, sampling_seed=None)
    names = {f.name for f in dataclasses.fields(rmod.EagleDraftInputBuffers)}
    runner.buffers = rmod.EagleDraftInputBuffers(**{k: v for k, v in buffers.items() if k in names})
    vars(runner).update(
        draft_attn_backend=multi, attn_backend=multi, capture_bs=sorted(capture_bs), max_bs=max_bs,
        captured_req_width=case.topk, speculative_num_steps=case.steps, topk=case.topk, seq_len_fill_value=fill,
        require_mlp_tp_gather=False, require_gathered_buffer=False, disable_padding=False,
        deepep_adapter=rmod.DeepEPCudaGraphRunnerAdapter(), temperatures=torch.ones(max_bs, 1),
        model_runner=SimpleNamespace(
            server_args=SimpleNamespace(speculative_use_rejection_sampling=False), device_timer=None,
            model_config=SimpleNamespace(vocab_size=32000, model_is_mrope=False)))
    for bs in capture_bs:
        n = bs * case.topk
        multi.init_forward_metadata_out_graph(SimpleNamespace(
            forward_mode=ForwardMode.DECODE, batch_size=bs, seq_lens=runner.buffers.seq_lens[:bs],
            seq_lens_cpu=runner.buffers.seq_lens_cpu[:bs], seq_lens_sum=None,
            req_pool_indices=runner.buffers.req_pool_indices[:bs], positions=runner.buffers.positions[:n],
            out_cache_loc=runner.buffers.out_cache_loc[:n * case.steps], encoder_lens=None,
            spec_info=SimpleNamespace(is_draft_input=lambda: True)), in_capture=True)
    replayed = []
    runner._replay_graph = lambda key, forward_batch: (  # the graph launch: CUDA only
        replayed.append(forward_batch.batch_size) or tuple(torch.zeros(forward_batch.batch_size) for _ in range(4)))
    return runner, replayed


def _served_batch(case, prep, requests):
    """The v2 worker's draft forward batch for ``requests`` (indices into the case's batch): their
    lengths, rows and draft slots as ``prepare_for_draft`` assigned them."""
    loc = prep.out_cache_loc.view(case.bs, case.topk * case.steps)[requests].reshape(-1)
    idx = torch.tensor(requests)
    return SimpleNamespace(
        forward_mode=ForwardMode.DECODE, batch_size=len(requests), seq_lens=case.seq_lens[idx].clone(),
        seq_lens_cpu=case.seq_lens[idx].clone(), seq_lens_sum=int(case.seq_lens[idx].sum()),
        req_pool_indices=case.req_pool_indices[idx].clone(), out_cache_loc=loc.clone(),
        positions=torch.zeros(len(requests) * case.topk, dtype=torch.int64), encoder_lens=None,
        spec_info=SimpleNamespace(is_draft_input=lambda: True, topk_p=torch.zeros(len(requests), case.topk),
                                  topk_index=torch.zeros(len(requests), case.topk, dtype=torch.int64),
                                  hidden_states=None, draft_probs=None, dsa_topk_indices=None,
                                  num_tokens_per_req=case.topk),
        rids_int=None, bootstrap_room_ids_int=None, mrope_positions=None, sampling_info=None,
        global_num_tokens_cpu=None, kv_loc_plan=None)


def _server_context(case):
    """The process's published server arguments where the release reads them through a context
    (0.5.23's ``get_spec``); 0.5.17's runner reads its own ``model_runner.server_args``."""
    import contextlib

    try:
        from sglang.srt.runtime_context import create_context, use_context
    except ImportError:
        return contextlib.nullcontext()
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path="dummy", device="cpu", attention_backend="fa3", page_size=case.page,
                      speculative_algorithm="EAGLE", speculative_draft_model_path="dummy",
                      speculative_eagle_topk=case.topk, speculative_num_steps=case.steps,
                      speculative_num_draft_tokens=case.topk * case.steps + 1)
    return use_context(create_context(args, role="test"))


# Batches in serving order: each padded to a captured size of (1, 2) unless it is one, or run
# eagerly when it is larger than the largest (as the draft worker does when the runner cannot run
# it); the overlap scheduler's next batch drops a request, then requests come back.
SERVED = [[0, 1, 2], [0, 2], [4], [3, 0, 2], [0, 1, 2, 3, 4], [2, 3, 1, 4], [4, 1, 0], [3, 1]]
CAPTURED = [1, 2, 4]


@pytest.mark.parametrize("fused", [False, True], ids=["sglangs-builders", "fused-asked"])
@pytest.mark.parametrize("params", [(5201, 5, 3, 16, 4, "random"), (5202, 5, 2, 64, 3, "tail"),
                                    (5203, 5, 4, 4, 5, "aligned")], ids=_case_id)
def test_in_place_reads_through_sglangs_graph_runner_with_padded_and_changing_batches(params, fused, monkeypatch):
    """Through SGLang's own draft CUDA-graph runner, batch after batch as a server sends them (padded
    to a captured size, larger ones eagerly on the same backends, requests finished and added
    between them): every real branch of ours reads
    exactly its prefix and its own draft slots and gets SGLang's attention over the copy, and the
    padding rows read slots inside the pool. On today's 0.5.17 this raised (a graph padded past the
    batch's ``out_cache_loc``), which switched the path off in the first serving passes. With the
    fused replay metadata asked for too, an in-place draft backend's replays are written by the
    per-token form's fused writer (``fa3_dense.wrote_per_token``), not the split form's: else the
    graph would read the holes."""
    monkeypatch.setattr(fault.SWITCH, "reason", None)
    case, prep = _bf16_case(params, monkeypatch)
    k_copied, v_copied = case.pool.k_buffer[0].clone(), case.pool.v_buffer[0].clone()
    k_holes, v_holes = k_copied.clone(), v_copied.clone()
    k_holes[prep.tgt] = float("nan")
    v_holes[prep.tgt] = float("nan")
    multi = _hooked_draft_backend(case, max(CAPTURED), in_place=True, fused=fused)
    from sglang_eagle_paged.adapters.v2 import fa3_dense

    per_token, write = [], fa3_dense.per_token_draft_metadata_all_steps
    monkeypatch.setattr(fa3_dense, "per_token_draft_metadata_all_steps",
                        lambda *a, **kw: (per_token.append(1), write(*a, **kw)))
    runner, replayed = _draft_graph_runner(case, multi, CAPTURED)
    g = torch.Generator().manual_seed(params[0])
    seen = set()  # padding rows per batch: the shapes below must include padded ones
    for requests in SERVED:
        batch = _served_batch(case, prep, requests)
        if len(requests) > max(CAPTURED):
            multi.init_forward_metadata(batch)  # eager: the same step backends, SGLang's eager builder
            padded = len(requests)
        else:
            with _server_context(case):
                runner.execute(batch)
            padded = replayed[-1]
        seen.add(padded - len(requests))
        assert padded >= len(requests) and not fault.SWITCH, fault.SWITCH.reason
        real = [r * case.topk + t for r in requests for t in range(case.topk)]
        for step, be in enumerate(multi.attn_backends):
            md, ex = be.forward_metadata, be.forward_metadata_spec_decode_expand
            assert is_per_token(ex.page_table) and md.cache_seqlens_int32.shape[0] == padded
            q_all = torch.randn((case.bs * case.topk, HEADS, HEAD_DIM), generator=g).bfloat16().float()
            _, smd, sex = _draft_step_metadata(case, prep, step, "eager")
            theirs, _ = two_pass(q_all, *_paged_kv(_backend(case, step), k_copied, v_copied), smd, sex)
            q = torch.zeros((padded * case.topk, HEADS, HEAD_DIM))
            q[:len(real)] = q_all[real]
            out, reads = two_pass(q, *_paged_kv(be, k_holes, v_holes), md, ex, ours)
            assert torch.isfinite(out[:len(real)]).all(), f"{requests} step {step}: a hole was read"
            torch.testing.assert_close(out[:len(real)], theirs[real], rtol=2 ** -8, atol=2 ** -8)
            expected = expected_reads(case, prep, step)
            for z, want in zip(range(len(real)), [expected[i] for i in real], strict=True):
                assert torch.equal(reads[z], want), f"{requests} step {step} branch {z}"
            for z in range(len(real), padded * case.topk):  # padding: inside the pool, never a fault
                assert reads[z].numel() == 0 or int(reads[z].max()) < case.pool.size + case.page
    assert seen >= {0, 1}, seen  # padded (size 3 to 4) and unpadded graph batches, and eager ones
    assert bool(per_token) is fused  # the graph replays' metadata from the per-token writer where fused


def test_an_idle_draft_batch_passes_through(monkeypatch):
    """An idle batch (no request on this rank) through SGLang's eager builder and our hook: nothing to
    rewrite, no fault."""
    monkeypatch.setattr(fault.SWITCH, "reason", None)
    case, prep = _bf16_case(CASES[0], monkeypatch)
    be = _backend(case, 0)
    after_backend_init(None, be)
    fb = SimpleNamespace(forward_mode=ForwardMode.IDLE, batch_size=0, seq_lens=torch.zeros(0, dtype=torch.int64),
                         seq_lens_cpu=torch.zeros(0, dtype=torch.int64), seq_lens_sum=0,
                         req_pool_indices=torch.zeros(0, dtype=torch.int64), out_cache_loc=torch.zeros(0, dtype=torch.int64),
                         spec_info=SimpleNamespace(), encoder_lens=None, kv_loc_plan=None,
                         positions=torch.zeros(0, dtype=torch.int64))
    try:
        result = be.init_forward_metadata(fb)
    except Exception as exc:  # noqa: BLE001 -- SGLang's own builder: what it does with an idle batch is its own
        pytest.skip(f"SGLang's eager builder does not take an idle draft batch on CPU: {type(exc).__name__}: {exc}")
    after_metadata(result, be, fb)
    assert not fault.SWITCH, fault.SWITCH.reason


# --------------------------------------------------------------------------- where the view is given


def _fa3_calls(fn):
    """``(callee, page_table, k_cache)`` of every FA3 kernel call written in ``fn``'s own body (nested
    functions excluded: they are other call sites), as source text."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(fn)))).body[0]
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("flash_attn_with_kvcache"):
            kw = {k.arg: ast.unparse(k.value) for k in node.keywords}
            out.append((ast.unparse(node.func), kw.get("page_table"), kw.get("k_cache")))
        todo += list(ast.iter_child_nodes(node))
    return out


def test_the_expand_call_is_reached_only_through_the_module_global():
    """Why fa3 in place hooks the backend module's ``flash_attn_with_kvcache`` global, not something
    of the draft backend alone (docs/design.md, "fa3 in place: where the view is given"): in the
    installed release (0.5.23, and 0.5.17 in scripts/test.sh's v517 part) the draft decode's expand
    call is written inline in ``FlashAttentionBackend.forward_decode``, through that module global,
    with the same ``k_cache`` as its first pass; so no method of the draft's backend object, and no
    argument SGLang computes for the expand call alone, can give that one call another view. Where a
    release calls the kernel through the instance (``self.flash_attn_with_kvcache``) or a method of
    its own, this fails: a narrower hook exists there."""
    calls = _fa3_calls(fa3b.FlashAttentionBackend.forward_decode)
    expand = [c for c in calls if c[1] == "self.forward_metadata_spec_decode_expand.page_table"]
    mha = [c for c in expand if c[2] == "key_cache"]
    assert len(mha) == 1, calls  # the MHA expand pass (the other one is MLA's, not covered)
    assert all(callee == "flash_attn_with_kvcache" for callee, _, _ in calls), calls  # the module global
    first = [c for c in calls if c[1] == "page_table"]
    assert first and all(k == "key_cache" for _, _, k in first), calls  # the first pass: the same k_cache
    assert fa3b.flash_attn_with_kvcache is not None  # what our AROUND hook wraps
