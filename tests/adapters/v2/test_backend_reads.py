"""flashinfer's and triton's draft decode never read the slots the prefix-tail copy writes;
fa3's does (SGLang 0.5.16+, v2 worker, EAGLE topk > 1 at page > 1).

Everything that decides which slots are read is SGLang's own code, run on CPU (Triton
kernels under TRITON_INTERPRET=1):

- the tree's rows: SGLang's whole-page allocation length per request (its
  ``get_alloc_len_per_decode`` formula, doubled as ``get_alloc_reserve_per_decode``
  does), pages from a shuffled free list, full prefix pages shared between requests as
  the radix cache shares them;
- the copy targets: SGLang's ``prepare_for_draft`` (paged branch) on a real
  ``MHATokenToKVPool``, its ``move_kv_cache`` calls recorded;
- the read indices: ``TritonMultiStepDraftBackend.common_template`` and
  ``FlashInferMultiStepDraftBackend.common_template`` (both of its launch variants), so
  ``generate_draft_decode_kv_indices`` with the arguments those backends give it;
- what flashinfer is told the indices are: ``FlashInferIndicesUpdaterDecode.call_begin_forward``;
- what triton does with them: ``decode_attention_fwd`` with the backend's page size, run
  on the pool with SGLang's copy and on the pool without it (copy targets set to NaN);
- fa3's reads: its ``draft_decode_set_expand_metadata``, the control that shows the
  detector finds copied slots where they are read.
"""

import importlib.util
import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

_STANDINS = Path(__file__).resolve().parents[3] / "scripts" / "cpu_standins"
if _STANDINS.is_dir() and str(_STANDINS) not in sys.path:
    sys.path.append(str(_STANDINS))  # after site-packages: a real sgl_kernel wins

torch = pytest.importorskip("torch")
pytest.importorskip("sglang")
ewc = pytest.importorskip("sglang.srt.speculative.eagle_worker_common")
if not hasattr(ewc, "prepare_for_draft") or not hasattr(ewc, "duplicate_prefix_tail_to_draft_branches"):
    pytest.skip("needs SGLang 0.5.16+ (module-level prepare_for_draft)", allow_module_level=True)
# These readers take 0.5.23's KVIndexTranslator (0.5.17's read req_to_token ids themselves).
pytest.importorskip("sglang.srt.mem_cache.kv_index_translator")

from sglang.kernels.ops.speculative import cache_locs  # noqa: E402
from sglang.srt.layers.attention import flashinfer_backend as fib  # noqa: E402
from sglang.srt.layers.attention import triton_backend as trb  # noqa: E402
from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd  # noqa: E402
from sglang.srt.speculative.spec_utils import draft_kv_indices_buffer_width  # noqa: E402

from helpers.draft_tree import (  # noqa: E402
    HEAD_DIM, HEADS, UNALLOCATED, draft_decode_set_expand_metadata, draft_forward_batch, expected_reads, make_case,
    plain_translator, prepare_for_draft)

torch.set_num_threads(1)


# --------------------------------------------------------------------------- the readers


_forward_batch = draft_forward_batch


def _recorder(steps_seen):
    def call_fn(i, fb):
        steps_seen.append((i, fb.spec_info.kv_indptr.clone(), fb.spec_info.kv_indices.clone()))
    return call_fn


def _max_bs(case):
    return case.bs * case.topk + 4


def _triton_indices(case, prep):
    """Per draft step (kv_indptr, kv_indices) as TritonMultiStepDraftBackend builds them."""
    be = object.__new__(trb.TritonMultiStepDraftBackend)
    be.topk, be.speculative_num_steps, be.page_size = case.topk, case.steps, case.page
    be.max_context_len = case.r2t.shape[1]
    be.kv_index_translator = plain_translator(case)
    be.kv_indptr = torch.zeros((case.steps, _max_bs(case) + 1), dtype=torch.int32)
    be.draft_window_size = be.draft_sink_size = 0
    be.window_rail, be.cuda_graph_window_kv_indices = False, None
    width = draft_kv_indices_buffer_width(case.bs, case.topk, be.max_context_len)
    buf = torch.full((case.steps, width), -7, dtype=torch.int64)
    be.cuda_graph_kv_indices = buf
    seen = []
    be.common_template(_forward_batch(case, prep), buf, _recorder(seen))
    return seen


def _flashinfer_indices(case, prep, monkeypatch, host_indptr):
    """Per draft step (kv_indptr, kv_indices) as FlashInferMultiStepDraftBackend builds
    them; ``host_indptr`` picks its token-block launch (SGLANG_OPT_FLASHINFER_DRAFT_HOST_INDPTR)."""
    monkeypatch.setenv("SGLANG_OPT_FLASHINFER_DRAFT_HOST_INDPTR", "1" if host_indptr else "0")
    be = object.__new__(fib.FlashInferMultiStepDraftBackend)
    be.topk, be.speculative_num_steps, be.page_size = case.topk, case.steps, case.page
    be.generate_draft_decode_kv_indices = cache_locs.generate_draft_decode_kv_indices
    be.pool_len = case.r2t.shape[1]
    be.kv_index_translator = plain_translator(case)
    be.kv_indptr = torch.zeros((case.steps, _max_bs(case) + 1), dtype=torch.int32)
    be.draft_window_size = be.draft_sink_size = 0
    width = draft_kv_indices_buffer_width(case.bs, case.topk, be.pool_len)
    buf = torch.full((case.steps, width), -7, dtype=torch.int32)
    seen, host = [], []

    def call_fn(i, fb):
        seen.append((i, fb.spec_info.kv_indptr.clone(), fb.spec_info.kv_indices.clone()))
        host.append(fib.global_override_indptr_cpu.clone())

    be.common_template(_forward_batch(case, prep), buf, call_fn)
    for (_, indptr, _), h in zip(seen, host):  # the host plan flashinfer schedules by agrees
        assert torch.equal(h[: indptr.numel()].to(indptr.dtype), indptr)
    return seen


def _read_slots(seen):
    """Every slot a decode kernel reads from per-token (kv_indptr, kv_indices): branch z reads
    kv_indices[kv_indptr[z] : kv_indptr[z + 1]] (triton's _fwd_kernel_stage1; flashinfer
    with page size 1 and last_page_len 1)."""
    out = []
    for _, indptr, indices in seen:
        for z in range(indptr.numel() - 1):
            out.append(indices[int(indptr[z]): int(indptr[z + 1])].long())
    return torch.cat(out) if out else torch.empty(0, dtype=torch.int64)


def _fa3_read_slots(case, prep):
    """Slots fa3's draft decode reads: the normal pass over the prefix's full pages, the
    expand pass over each branch's pages as draft_decode_set_expand_metadata lays them."""
    last = case.seq_lens % case.page
    reads = []
    for b in range(case.bs):  # normal pass: cache_seqlens = seq_len - last_page_len
        row = case.r2t[int(case.req_pool_indices[b])]
        reads.append(row[: int(case.seq_lens[b] - last[b])].long())
    cache_loc = prep.out_cache_loc.view(-1, case.steps)
    for i in range(case.steps - 1):
        n = case.bs * case.topk
        seqlens = torch.zeros(n, dtype=torch.int32)
        table = torch.zeros((n, case.steps), dtype=torch.int32)
        draft_decode_set_expand_metadata(
            cache_seqlens_int32=seqlens, page_table=table, last_page_lens=last,
            decode_length=i + 1, cache_loc=cache_loc[:, : i + 1], topk=case.topk,
            page_size=case.page,
        )
        for z in range(n):
            tok = torch.arange(int(seqlens[z]))
            reads.append((table[z, tok // case.page].long() * case.page + tok % case.page))
    return torch.cat(reads)


def _hits(reads, targets):
    return int(torch.isin(reads, targets).sum())


# --------------------------------------------------------------------------- the cases

CASES = [
    # (seed, bs, topk, page, steps, prefix kind)
    (1, 3, 2, 2, 2, "random"),
    (2, 4, 4, 4, 3, "random"),
    (3, 2, 8, 16, 5, "random"),
    (4, 3, 3, 64, 4, "random"),
    (5, 5, 2, 8, 1, "random"),
    (6, 3, 4, 16, 3, "aligned"),
    (7, 4, 5, 32, 2, "one"),
    (8, 2, 6, 4, 5, "tail"),
    (9, 2, 2, 64, 5, "tail"),
    (10, 4, 3, 2, 4, "tail"),
    (11, 2, 3, 16, 3, "long"),
    (12, 5, 7, 8, 2, "random"),
]


def _case_id(c):
    return f"s{c[0]}-bs{c[1]}-topk{c[2]}-page{c[3]}-steps{c[4]}-{c[5]}"


@pytest.fixture(params=CASES, ids=_case_id)
def prepared(request, monkeypatch):
    case = make_case(*request.param)
    return case, prepare_for_draft(case, monkeypatch)


# triton's launch and flashinfer's tiled (host-indptr) launch on every case; flashinfer's
# eager launch is triton's kernel variant behind flashinfer's own wrapper: on a few.
READERS = [(c, r) for c in CASES for r in ("triton", "flashinfer-host-indptr")] + [
    (c, "flashinfer") for c in CASES if c[0] in (2, 7, 8, 11)]


def test_copy_targets_are_the_holes(prepared):
    """SGLang's duplication writes exactly the first ``seq_len % page`` slots of each branch
    t >= 1's first page: the set every reader below is checked against."""
    case, prep = prepared
    expected = []
    for b in range(case.bs):
        row = case.r2t[int(case.req_pool_indices[b])]
        n, last = case.lens[b], case.lens[b] % case.page
        new_pages = (last + case.steps + case.page - 1) // case.page
        for t in range(1, case.topk):
            start = n - last + t * new_pages * case.page
            expected.append(row[start: start + last].long())
    expected = torch.cat(expected)
    assert sorted(prep.tgt.tolist()) == sorted(expected.tolist())
    assert (prep.tgt >= 0).all()  # inside each request's allocation


@pytest.mark.parametrize("params, reader", READERS, ids=[f"{_case_id(c)}-{r}" for c, r in READERS])
def test_flashinfer_and_triton_never_read_a_copied_slot(params, reader, monkeypatch):
    case = make_case(*params)
    prep = prepare_for_draft(case, monkeypatch)
    if reader == "triton":
        seen = _triton_indices(case, prep)
    else:
        seen = _flashinfer_indices(case, prep, monkeypatch, host_indptr=reader.endswith("indptr"))
    assert [i for i, _, _ in seen] == list(range(case.steps - 1))
    for i, indptr, indices in seen:  # each branch reads its prefix, then its own draft slots
        expected = expected_reads(case, prep, i)
        got = [indices[int(indptr[z]): int(indptr[z + 1])].long() for z in range(len(expected))]
        assert all(torch.equal(g, e) for g, e in zip(got, expected)), f"step {i}"
    reads = _read_slots(seen)
    assert (reads != UNALLOCATED).all()
    assert _hits(reads, prep.tgt) == 0


def test_fa3_reads_every_copied_slot(prepared):
    """The control: fa3's page-table reads include every copy target whenever it decodes,
    so the detector finds copied slots where they are read."""
    case, prep = prepared
    reads = _fa3_read_slots(case, prep)
    if case.steps == 1 or prep.tgt.numel() == 0:
        assert _hits(reads, prep.tgt) == 0  # no draft decode, or nothing copied
        return
    assert _hits(reads, prep.tgt) > 0
    assert torch.isin(prep.tgt, reads).all()


DECODE_CASES = [  # small bs * topk: the interpreter runs one decode program per branch
    (21, 2, 3, 4, 4, "tail"),
    (22, 2, 2, 16, 3, "random"),
    (23, 1, 4, 64, 5, "tail"),
    (24, 2, 2, 2, 2, "one"),
]


@pytest.mark.parametrize("params", DECODE_CASES, ids=_case_id)
def test_triton_decode_output_does_not_depend_on_the_copy(params, monkeypatch):
    """SGLang's triton decode kernel, with the backend's page size, gives the same bytes on
    the pool after SGLang's copy and on one where every copy target is NaN; reading the
    tree fa3's way (a branch's first page from offset 0) is right with the copy and NaN
    without it. The draft's last decode step: the most draft slots per branch."""
    case = make_case(*params)
    prep = prepare_for_draft(case, monkeypatch)
    assert prep.tgt.numel() > 0
    pool_on = case.pool  # prepare_for_draft ran SGLang's copy on it
    k_fake, v_fake = pool_on.k_buffer[0].clone(), pool_on.v_buffer[0].clone()
    k_fake[prep.tgt] = float("nan")
    v_fake[prep.tgt] = float("nan")
    i, indptr, indices = _triton_indices(case, prep)[-1]
    n = indptr.numel() - 1
    q = torch.randn((n, HEADS, HEAD_DIM), generator=torch.Generator().manual_seed(99))
    on = _triton_decode(q, pool_on.k_buffer[0], pool_on.v_buffer[0], indptr, indices, case.page)
    fake = _triton_decode(q, k_fake, v_fake, indptr, indices, case.page)
    assert torch.isfinite(on).all()
    assert torch.equal(on, fake)
    # fa3's view of each branch: the prefix's full pages, then the branch's pages from offset 0
    fa3_rows = []
    for b in range(case.bs):
        row = case.r2t[int(case.req_pool_indices[b])]
        last = case.lens[b] % case.page
        full = case.lens[b] - last
        new_pages = (last + case.steps + case.page - 1) // case.page
        for t in range(case.topk):
            start = full + t * new_pages * case.page  # the branch's first page
            fa3_rows.append(torch.cat([row[:full], row[start: start + last + i + 1]]).long())
    fa3_indptr = torch.zeros(n + 1, dtype=torch.int32)
    fa3_indptr[1:] = torch.cumsum(torch.tensor([r.numel() for r in fa3_rows]), 0)
    fa3_indices = torch.cat(fa3_rows)
    fa3_on = _triton_decode(q, pool_on.k_buffer[0], pool_on.v_buffer[0], fa3_indptr, fa3_indices, case.page)
    fa3_fake = _triton_decode(q, k_fake, v_fake, fa3_indptr, fa3_indices, case.page)
    assert torch.allclose(fa3_on, on, rtol=1e-5, atol=1e-6)
    assert torch.isnan(fa3_fake).any()


def _triton_decode(q, k_buffer, v_buffer, kv_indptr, kv_indices, page_size, splits=1):
    n = q.shape[0]
    o = torch.empty_like(q)
    logits = torch.empty((n, HEADS, splits, HEAD_DIM), dtype=torch.float32)
    lse = torch.empty((n, HEADS, splits), dtype=torch.float32)
    num_splits = torch.full((n,), splits, dtype=torch.int32)
    decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices.long(), logits, lse,
                         num_splits, splits, 1.0 / math.sqrt(HEAD_DIM), 1.0, 1.0,
                         page_size=page_size)
    return o


def test_flashinfer_is_planned_with_page_size_one():
    """flashinfer reads the draft's indices as pages of one slot: SGLang plans its decode
    wrapper with the spec indices, page size 1 and every last page length 1."""
    calls = []
    wrapper = SimpleNamespace(begin_forward=lambda *a, **kw: calls.append((a, kw)))
    upd = object.__new__(fib.FlashInferIndicesUpdaterDecode)
    upd.attn_backend = SimpleNamespace(kv_index_translator=SimpleNamespace(reads_are_translated=False))
    upd.kv_last_page_len = torch.ones(16, dtype=torch.int32)
    upd.num_qo_heads, upd.num_kv_heads, upd.head_dim = 4, 2, 8
    upd.data_type = upd.q_data_type = torch.float16
    upd._swa_kv_pool = None
    indptr = torch.tensor([0, 5, 9, 14], dtype=torch.int32)
    indices = torch.arange(100, 114, dtype=torch.int32)
    spec = SimpleNamespace(kv_indptr=indptr, kv_indices=indices)
    upd.call_begin_forward(wrapper, torch.tensor([5, 4, 5]), 14, torch.zeros(4, dtype=torch.int32),
                           None, spec, None, plan=None, req_pool_indices=torch.arange(3))
    (args, _), = calls
    assert args[0] is indptr and args[1] is indices
    assert torch.equal(args[2], torch.ones(3, dtype=torch.int32))
    assert args[6] == 1  # flashinfer's plan(indptr, indices, last_page_len, qo, kv, head_dim, page_size)


# --------------------------------------------------------------------------- other releases


def _extra_kernels():
    """``generate_draft_decode_kv_indices`` of other releases, from unpacked wheels named by
    SGLANG_EAGLE_PAGED_EXTRA_SGLANG_SRC (os.pathsep-separated folders holding ``sglang/``)."""
    out = []
    wheels = Path(__file__).resolve().parents[3] / ".sglang-wheels"  # scripts/fetch_sglang_wheels.sh
    default = os.pathsep.join(str(wheels / v) for v in ("0.5.13.post1", "0.5.15.post1", "0.5.17")
                              if (wheels / v / ".unpacked").is_file())
    for root in filter(None, os.environ.get("SGLANG_EAGLE_PAGED_EXTRA_SGLANG_SRC", default).split(os.pathsep)):
        homes = ("kernels/ops/speculative/cache_locs.py",  # 0.5.16+
                 "srt/speculative/triton_ops/cache_locs.py")  # 0.5.13 - 0.5.15.post1
        path = next((Path(root) / "sglang" / h for h in homes if (Path(root) / "sglang" / h).is_file()), None)
        if path is None:
            raise FileNotFoundError(f"no cache_locs.py under {root}/sglang ({', '.join(homes)})")
        name = f"_cache_locs_{abs(hash(root))}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out.append(pytest.param(module.generate_draft_decode_kv_indices, id=Path(root).name))
    return out or [pytest.param(None, marks=pytest.mark.skip(reason="no other release's source: run scripts/fetch_sglang_wheels.sh"))]


@pytest.mark.parametrize("kernel", _extra_kernels())
@pytest.mark.parametrize("seed", [2, 8, 11])
def test_other_release_kernel_never_reads_a_copied_slot(kernel, seed, monkeypatch):
    case = make_case(*next(c for c in CASES if c[0] == seed))
    prep = prepare_for_draft(case, monkeypatch)
    bs = case.bs * case.topk
    width = draft_kv_indices_buffer_width(case.bs, case.topk, case.r2t.shape[1])
    indices = torch.full((case.steps, width), -7, dtype=torch.int64)
    indptr = torch.zeros((case.steps, _max_bs(case) + 1), dtype=torch.int32)
    npow2 = lambda x: 1 << (x - 1).bit_length()  # noqa: E731
    common = (case.req_pool_indices, case.r2t, case.seq_lens, indices, indptr, prep.positions,
              case.r2t.shape[1], indices.shape[1], indptr.shape[1], npow2(case.bs),
              npow2(case.steps), npow2(bs), case.page)
    kernel[(case.steps, case.bs, case.topk)](*common)  # row stride / pool_len: same position
    seen = [(i, indptr[i, : bs + 1], indices[i]) for i in range(case.steps - 1)]
    for i, ip, ix in seen:
        expected = expected_reads(case, prep, i)
        got = [ix[int(ip[z]): int(ip[z + 1])] for z in range(len(expected))]
        assert all(torch.equal(g, e) for g, e in zip(got, expected)), f"step {i}"
    assert _hits(_read_slots(seen), prep.tgt) == 0
