"""Start-up compilation of SGLang's paged-tree verify (verify_warm_up.py): every variant a verify
launches must be one warm-up launched. The verify's calls are replayed here as eagle_info makes
them (the source check below keeps the replay honest), under the interpreter, which reports what
a GPU launch would key Triton's cache on."""

import inspect
import logging
import os
import re

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

from helpers.interpreter_order import capture_specializations  # noqa: E402
from sglang_eagle_paged.adapters.v1 import sglang_api as compat  # noqa: E402
from sglang_eagle_paged.adapters.v1 import verify as verify_compaction  # noqa: E402
from sglang_eagle_paged.adapters.v1 import sglang_warm_up as verify_warm_up  # noqa: E402
from sglang_eagle_paged.tools.harness import verify_bookkeeping_inputs  # noqa: E402

eagle_info = pytest.importorskip("sglang.srt.speculative.eagle_info")


def _flat(src: str) -> str:
    return re.sub(r"\s+", "", src)


def test_the_replay_below_is_how_this_release_launches_them():
    """If SGLang changes these call sites, the replay (and the warm-up) must follow."""
    src = _flat(inspect.getsource(eagle_info.EagleVerifyInput.verify))
    assert _flat("""get_target_cache_loc[(bs,)](tgt_cache_loc, to_free_slots, num_correct_drafts,
        to_free_num_slots, batch.out_cache_loc, self.draft_token_num, next_power_of_2(self.draft_token_num),
        next_power_of_2(bs),)""") in src
    assert _flat("""filter_finished_cache_loc_kernel[(bs,)](batch.out_cache_loc, tgt_cache_loc, num_correct_drafts,
        num_accept_tokens_filter, next_power_of_2(bs), next_power_of_2(self.draft_token_num),)""") in src
    assert "num_correct_drafts=(accept_index!=-1).sum(dim=1)-1" in src  # the int64 recount of a finishing round


def _verify_like_sglang(gen, bs, draft_tokens, page, finished):
    """The paged tree verify's slot split (and, where a request finished, the survivors' compaction),
    with SGLang's kernels and dtypes and our bookkeeping hook's outputs."""
    seq_lens, out_cache_loc, accept_index, num_correct = verify_bookkeeping_inputs(gen, bs, draft_tokens, page)
    if finished:
        num_correct = num_correct.to(torch.int64)
    src, tgt, to_free_num_slots = verify_compaction.src_tgt_cache_loc(
        seq_lens, out_cache_loc, accept_index, num_correct, draft_tokens, page)
    to_free = torch.empty((int(to_free_num_slots.sum().item()),), dtype=torch.int64)
    compat.resolve(compat.TARGET_CACHE_LOC_KERNEL)[(bs,)](
        tgt, to_free, num_correct, to_free_num_slots, out_cache_loc, draft_tokens,
        triton.next_power_of_2(draft_tokens), triton.next_power_of_2(bs))
    if finished and bs > 1:
        survivors = torch.arange(bs - 1)
        kept = torch.zeros_like(num_correct)
        kept[survivors] = num_correct[survivors] + 1
        out = torch.empty(int(kept.sum()), dtype=torch.int64)
        compat.resolve(compat.FILTER_FINISHED_KERNEL)[(bs,)](
            out, tgt, num_correct, kept, triton.next_power_of_2(bs), triton.next_power_of_2(draft_tokens))


@pytest.mark.parametrize("draft_tokens,page", [(64, 64), (16, 128)])
def test_warm_up_launches_every_variant_a_verify_launches(draft_tokens, page, monkeypatch):
    monkeypatch.setattr(verify_warm_up, "_warm_filter", lambda device: 0)  # torch.compile: tested below
    kernels = [compat.resolve(compat.TARGET_CACHE_LOC_KERNEL), compat.resolve(compat.FILTER_FINISHED_KERNEL)]
    with capture_specializations(kernels[0]) as warm_split, capture_specializations(kernels[1]) as warm_filter:
        launched = verify_warm_up.warm_up_verify("cpu", draft_tokens, page, 8)
    assert launched == 4 * 3  # buckets 1, 2, 4, 8 x (two split dtypes + the filter)
    gen = torch.Generator().manual_seed(page)
    with capture_specializations(kernels[0]) as split, capture_specializations(kernels[1]) as filt:
        for bs in range(1, 9):
            for finished in (False, True):
                _verify_like_sglang(gen, bs, draft_tokens, page, finished)
    assert len({repr(s) for s in split}) == 8 and len({repr(s) for s in filt}) == 3  # not vacuous
    assert {repr(s) for s in split} <= {repr(s) for s in warm_split}
    assert {repr(s) for s in filt} <= {repr(s) for s in warm_filter}


def test_warm_up_compiles_the_finished_request_filter_for_both_of_its_shapes(monkeypatch):
    calls = []
    monkeypatch.setattr(compat, "resolve_first", lambda targets: (
        calls.append(tuple(targets)) or (lambda ncd, unfinished, seq_lens: calls.append(
            (ncd.shape[0], unfinished.shape[0], ncd.dtype, unfinished.dtype, seq_lens.dtype)))))
    assert verify_warm_up._warm_filter("cpu") == 2
    assert calls == [compat.FINISHED_FILTER_NAMES, (2, 1, torch.int64, torch.int64, torch.int64),
                     (3, 2, torch.int64, torch.int64, torch.int64)]
    # The name each supported release has: 0.5.12 renamed 0.5.11's.
    assert compat.resolve_first(compat.FINISHED_FILTER_NAMES) is not None


def test_the_filter_warm_up_really_compiles_what_serving_calls():
    """torch.compile's own recompile counter: after the warm-up, the shapes a finishing round
    can hand the filter compile nothing more (one survivor, several, larger batches)."""
    pytest.importorskip("torch._dynamo")
    from torch._dynamo.utils import counters

    import torch._dynamo

    fn = compat.resolve_first(compat.FINISHED_FILTER_NAMES)
    torch._dynamo.reset()  # whatever an earlier test compiled, this one starts from nothing
    try:
        verify_warm_up._warm_filter("cpu")
    except Exception as exc:  # no C++ compiler for Inductor on this machine
        pytest.skip(f"torch.compile cannot run here: {type(exc).__name__}")
    def serve(shapes):
        # as the scheduler calls it: inside its event loop's grad mode
        with compat.resolve(compat.DYNAMIC_GRAD_MODE)():
            for bs, survivors in shapes:
                ncd = torch.randint(0, 5, (bs,))
                unfinished = torch.randperm(bs)[:survivors]
                want = torch.zeros_like(ncd)
                want[unfinished] = ncd[unfinished] + 1
                assert torch.equal(fn(ncd, unfinished, torch.ones(bs, dtype=torch.int64)), want)

    graphs = lambda: counters["stats"].get("unique_graphs", 0)  # noqa: E731
    before = graphs()
    serve(((2, 1), (5, 1), (3, 2), (9, 4), (48, 47)))
    assert graphs() == before
    # Not vacuous: outside the scheduler's grad mode (where a worker's __init__ runs) the same shapes
    # compile again, which is what a warm-up without the grad mode would have left to serving.
    fn(torch.zeros(2, dtype=torch.int64), torch.arange(1), torch.ones(2, dtype=torch.int64))
    assert torch.is_grad_enabled() and graphs() == before + 1


def test_warm_up_skips_page_1_and_an_unknown_batch_bound():
    assert verify_warm_up.warm_up_verify("cpu", 64, 1, 48) == 0
    assert verify_warm_up.warm_up_verify("cpu", 64, 64, None) == 0


def test_a_part_that_fails_is_logged_and_the_rest_still_warms(monkeypatch, caplog):
    def missing(targets):
        raise AttributeError("none of them")

    monkeypatch.setattr(compat, "resolve_first", missing)
    with caplog.at_level(logging.WARNING, logger="sglang_eagle_paged"):
        assert verify_warm_up.warm_up_verify("cpu", 8, 16, 2) == 2 * 3  # the kernels still warmed
    assert "finished-request filter not compiled ahead (AttributeError: none of them)" in caplog.text


def test_last_slot_lookup_warm_up_launches_every_variant_a_verify_launches():
    """prepare_for_verify's get_last_loc, through SGLang's dispatcher (its Triton kernel here, as on
    CUDA), over every batch size up to the bound; nothing of the pool is written."""
    from sglang_eagle_paged.tools.harness import PagedTreeHarness

    common = pytest.importorskip("sglang.srt.mem_cache.common")
    h = PagedTreeHarness(16, 4, 3, num_tokens=4096, head_num=2, head_dim=8, layer_num=2)
    rows = [h.add_request(n) for n in (5, 16, 33, 40)]
    req_to_token = h.req_to_token_pool.req_to_token
    before = req_to_token.clone()
    with capture_specializations(common.get_last_loc_kernel) as warm:
        assert verify_warm_up._warm_last_loc(req_to_token, 48) == 3
    assert torch.equal(req_to_token, before)
    with capture_specializations(common.get_last_loc_kernel) as served:
        for bs in range(1, 49):
            picks = torch.tensor([rows[i % len(rows)] for i in range(bs)])
            lens = torch.tensor([len(h.requests[int(r)]) for r in picks])
            last = compat.resolve(compat.GET_LAST_LOC)(req_to_token, picks, lens)
            assert torch.equal(last, req_to_token[picks, lens - 1].to(torch.int64))
    assert len({repr(s) for s in served}) == 3  # 1, multiples of 16, the rest: not vacuous
    assert {repr(s) for s in served} <= {repr(s) for s in warm}
    assert verify_warm_up._warm_last_loc(req_to_token, 8) == 2  # no batch of 16 to warm
