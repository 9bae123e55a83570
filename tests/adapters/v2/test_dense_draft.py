"""The dense draft layout's readers and writer (issue 54, docs/design.md "Page > 1 in page 1's
memory"), on SGLang's own code, 0.5.23 (``.venv``) and 0.5.17 (``.venv-517``):

- the write slots: :func:`dense_out_cache_loc` equals SGLang's own page-1 kernel
  ``assign_draft_cache_locs_contiguous`` on the same rows;
- triton's and flashinfer's draft decode index lists (``common_template`` of SGLang's multi-step
  draft backends, the code of eager metadata and CUDA-graph capture and replay alike) at page
  ``P > 1`` through :class:`DenseDraftIndices` equal, entry for entry, SGLang's own lists at page 1
  over the same rows, and never touch a row position the dense reserve did not allocate;
- fa3 in place (``fa3_in_place``'s hooks over SGLang's ``init_forward_metadata`` and its CUDA-graph
  capture and replay) with the dense ``out_cache_loc``: each branch reads exactly page 1's keys (its
  prefix, then ``L + t*steps + [0, i]``), and the two passes merged by their log-sum-exp equal one
  softmax over those keys in plain torch.

The rows are SGLang's allocation with the dense reserve: ``helpers.draft_tree``'s cases (shuffled
pages, shared prefix pages), cut at ``ceil((L + 2*max(topk*steps, draft_tokens)) / P) * P``
(``page_aligned_decode_alloc_lens`` with page 1's reserve); beyond it the row holds -1, so a read
past the allocation shows as slot -1.
"""

import random
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sglang")
ewc = pytest.importorskip("sglang.srt.speculative.eagle_worker_common")
if not hasattr(ewc, "prepare_for_draft"):
    pytest.skip("needs SGLang 0.5.16+ (module-level prepare_for_draft)", allow_module_level=True)

from sglang.kernels.ops.speculative import cache_locs  # noqa: E402
from sglang.srt.layers.attention import flashinfer_backend as fib  # noqa: E402
from sglang.srt.layers.attention import triton_backend as trb  # noqa: E402
from sglang.srt.speculative.spec_utils import draft_kv_indices_buffer_width  # noqa: E402

from helpers.draft_tree import (  # noqa: E402
    HEAD_DIM, HEADS, UNALLOCATED, draft_forward_batch, make_case, plain_translator)
from sglang_eagle_paged.adapters.v2 import fault  # noqa: E402
from sglang_eagle_paged.adapters.v2.dense_draft import DenseDraftIndices, dense_out_cache_loc  # noqa: E402
from sglang_eagle_paged.tree_layout import dense_positions  # noqa: E402
from sglang_eagle_paged.kv_reserve import reserve_per_decode  # noqa: E402
from test_fa3_in_place import (  # noqa: E402,F401  (the autouse fixture: SGLang's expand builder as written)
    SCALE, _draft_step_metadata, _expand_builder_as_written, _paged_kv, ours, two_pass)

torch.set_num_threads(1)


def _cases():
    """Seeded random batches: pages 2 .. 256, topk 2 .. 10, steps 2 .. 8, prefixes on and off page
    boundaries (few and small: the Triton interpreter runs every program on the CPU)."""
    rng = random.Random(54)
    pages, kinds = [2, 4, 16, 64, 128, 256], ["random", "aligned", "one", "tail"]
    out = []
    for n in range(8):
        page = pages[n % len(pages)]
        out.append((5400 + n, rng.randint(1, 3) if page < 128 else 1, rng.randint(2, 10), page,
                    rng.randint(2, 8), kinds[n % len(kinds)]))
    return out + [(5408, 2, 10, 64, 8, "tail"), (5409, 1, 8, 64, 5, "random")]


CASES = _cases()


def _case_id(c):
    return f"s{c[0]}-bs{c[1]}-topk{c[2]}-page{c[3]}-steps{c[4]}-{c[5]}"


def dense_case(params):
    """A case whose rows end where SGLang's allocation with the dense reserve ends."""
    case = make_case(*params)
    draft_tokens = case.rng.randint(2, case.topk * case.steps + 1)
    reserve = reserve_per_decode(case.page, case.topk, case.steps, draft_tokens, dense=True)
    for b, n in enumerate(case.lens):
        end = -(-(n + reserve) // case.page) * case.page  # page_aligned_decode_alloc_lens
        case.r2t[int(case.req_pool_indices[b]), end:] = UNALLOCATED
    loc = dense_out_cache_loc(case.r2t, case.req_pool_indices, case.seq_lens, case.topk, case.steps)
    prep = SimpleNamespace(out_cache_loc=loc, positions=case.seq_lens.repeat_interleave(case.topk))
    return case, prep


def page_1_reads(case, step):
    """What page 1 reads for each branch at draft step ``step``: its prefix's slots, then the slots at
    row positions ``L + t*steps + [0, step]``."""
    out = []
    for b in range(case.bs):
        row = case.r2t[int(case.req_pool_indices[b])].long()
        n = case.lens[b]
        for t in range(case.topk):
            start = n + t * case.steps
            out.append(torch.cat([row[:n], row[start: start + step + 1]]))
    return out


# --------------------------------------------------------------------------- the write slots


@pytest.mark.parametrize("params", CASES[:4], ids=_case_id)
def test_the_write_slots_are_sglangs_page_1_slots(params):
    case, prep = dense_case(params)
    theirs = torch.full((case.bs * case.topk * case.steps,), -9, dtype=torch.int64)
    cache_locs.assign_draft_cache_locs_contiguous[(case.bs,)](  # SGLang's page-1 kernel, as its caller launches it
        case.req_pool_indices, case.r2t, case.seq_lens, theirs, case.r2t.shape[1], case.topk, case.steps)
    assert torch.equal(prep.out_cache_loc, theirs)
    assert (prep.out_cache_loc >= 0).all()  # inside the dense allocation
    out = torch.empty_like(theirs)
    assert dense_out_cache_loc(case.r2t, case.req_pool_indices, case.seq_lens, case.topk, case.steps, out) is out
    assert torch.equal(out, theirs)
    assert dense_positions(case.seq_lens, case.topk, case.steps).shape == (case.bs, case.topk * case.steps)


# --------------------------------------------------------------------------- triton and flashinfer


def _multi_step_backend(cls, case, page):
    be = object.__new__(cls)
    be.topk, be.speculative_num_steps, be.page_size = case.topk, case.steps, page
    be.max_context_len = be.pool_len = case.r2t.shape[1]
    be.req_to_token_pool = SimpleNamespace(req_to_token=case.r2t)  # 0.5.17 reads the rows itself
    translator = plain_translator(case)
    if translator is not None:  # 0.5.19+
        be.kv_index_translator = translator
    be.kv_indptr = torch.zeros((case.steps, case.bs * case.topk + 5), dtype=torch.int32)
    be.draft_window_size = be.draft_sink_size = 0
    be.window_rail, be.cuda_graph_window_kv_indices = False, None
    return be


_forward_batch = draft_forward_batch


def _lists(reader, case, prep, page, dense, monkeypatch):
    """Per draft step, every branch's index list as SGLang's ``common_template`` builds it at page
    ``page``; ``dense``: through :class:`DenseDraftIndices` (installed where our hook would be)."""
    if reader == "triton":
        kernel = cache_locs.generate_draft_decode_kv_indices
        monkeypatch.setattr(trb, "generate_draft_decode_kv_indices", DenseDraftIndices(kernel) if dense else kernel)
        be = _multi_step_backend(trb.TritonMultiStepDraftBackend, case, page)
        dtype = torch.int64
    else:
        monkeypatch.setenv("SGLANG_OPT_FLASHINFER_DRAFT_HOST_INDPTR", "0")
        be = _multi_step_backend(fib.FlashInferMultiStepDraftBackend, case, page)
        kernel = cache_locs.generate_draft_decode_kv_indices  # what __init__ binds from the module global
        be.generate_draft_decode_kv_indices = DenseDraftIndices(kernel) if dense else kernel
        dtype = torch.int32
    width = draft_kv_indices_buffer_width(case.bs, case.topk, be.max_context_len)
    buf = torch.full((case.steps, width), -7, dtype=dtype)
    be.cuda_graph_kv_indices = buf
    seen = []

    def call_fn(i, fb):
        indptr, indices = fb.spec_info.kv_indptr, fb.spec_info.kv_indices
        seen.append([indices[int(indptr[z]): int(indptr[z + 1])].long().clone() for z in range(indptr.numel() - 1)])

    be.common_template(_forward_batch(case, prep), buf, call_fn)
    return seen


@pytest.mark.parametrize("reader", ["triton", "flashinfer"])
@pytest.mark.parametrize("params", CASES, ids=_case_id)
def test_triton_and_flashinfer_read_exactly_page_1s_keys(params, reader, monkeypatch):
    case, prep = dense_case(params)
    ours = _lists(reader, case, prep, case.page, True, monkeypatch)
    at_page_1 = _lists(reader, case, prep, 1, False, monkeypatch)  # SGLang's own launch at page 1, same rows
    assert len(ours) == len(at_page_1) == case.steps - 1
    for step, (got, want) in enumerate(zip(ours, at_page_1)):
        expected = page_1_reads(case, step)
        assert len(got) == len(want) == len(expected) == case.bs * case.topk
        for z in range(len(got)):
            assert torch.equal(got[z], want[z]) and torch.equal(got[z], expected[z]), f"step {step} branch {z}"
            assert (got[z] != UNALLOCATED).all(), f"step {step} branch {z}: read past the dense allocation"


@pytest.mark.parametrize("params", CASES[:3], ids=_case_id)
def test_sglangs_per_branch_read_of_the_dense_rows_is_wrong(params, monkeypatch):
    """The control: SGLang's own page-P launch over the same dense rows reads other positions (past
    the dense allocation where a branch's region starts beyond it), so the reader must change."""
    case, prep = dense_case(params)
    theirs = _lists("triton", case, prep, case.page, False, monkeypatch)
    expected = page_1_reads(case, 0)
    assert any(not torch.equal(theirs[0][z], expected[z]) for z in range(case.bs * case.topk))


def test_a_translated_launch_is_refused():
    launched = []
    grid = (3, 2, 4)
    kernel = {grid: lambda *a, **k: launched.append((a, k))}  # kernel[grid] -> its launcher, as Triton's
    wrapper = DenseDraftIndices(kernel, active=lambda: True)
    args = tuple(range(13))
    wrapper[grid](*args, TRANSLATE=False)
    assert launched[-1][0][12] == 1 and launched[-1][0][:12] == args[:12]
    with pytest.raises(ValueError):
        wrapper[grid](*args, TRANSLATE=True)
    with pytest.raises(ValueError):
        wrapper[grid](*args, ENTRY_PAGE_SIZE=64)
    wrapper.active = lambda: False  # not serving: SGLang's launch, its arguments untouched
    wrapper[grid](*args, TRANSLATE=True)
    assert launched[-1][0] == args


# --------------------------------------------------------------------------- fa3 in place


def _softmax_reference(q, k, v, reads):
    out = torch.zeros(q.shape, dtype=torch.float32)
    for z, slots in enumerate(reads):
        logits = torch.einsum("hd,khd->hk", q[z].float(), k[slots].float()) * SCALE
        out[z] = torch.einsum("hk,khd->hd", torch.softmax(logits, dim=-1), v[slots].float())
    return out


@pytest.mark.parametrize("builder", ["eager", "graph"])
@pytest.mark.parametrize("params", CASES[:6], ids=_case_id)
def test_fa3_in_place_reads_exactly_page_1s_keys(params, builder, monkeypatch):
    monkeypatch.setattr(fault.SWITCH, "reason", None)
    case, prep = dense_case(params)
    k, v = case.pool.k_buffer[0].clone(), case.pool.v_buffer[0].clone()
    g = torch.Generator().manual_seed(params[0])
    for step in range(case.steps - 1):
        q = torch.randn((case.bs * case.topk, HEADS, HEAD_DIM), generator=g)
        be, md, ex = _draft_step_metadata(case, prep, step, builder, in_place=True)
        out, reads = two_pass(q, *_paged_kv(be, k, v), md, ex, ours)
        expected = page_1_reads(case, step)
        for z, (got, want) in enumerate(zip(reads, expected, strict=True)):
            assert torch.equal(got, want), f"step {step} branch {z}"
        torch.testing.assert_close(out, _softmax_reference(q, k, v, expected), rtol=1e-5, atol=1e-5)
