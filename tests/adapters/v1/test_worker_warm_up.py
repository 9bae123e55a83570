"""Worker start-up compiles exactly the kernel variants that serving launches.

Under the interpreter nothing is compiled, so the check is on what a compiled
launch would key Triton's cache on (argument types, alignment, constexprs, options):
the set seen during serving must be a subset of the set warm-up produced.
"""

import random

import re

import pytest
import torch

from helpers.interpreter_order import capture_specializations
from sglang_eagle_paged.tools.harness import PagedTreeHarness
from sglang_eagle_paged.kernels.assign import _assign_tree_draft_slots_kernel
from sglang_eagle_paged.kernels.duplicate import _duplicate_kv_kernel
from sglang_eagle_paged.kernels.move_rows import _move_rows_kernel
from sglang_eagle_paged.kernels.tree_extension import _tree_extension_kernel
from sglang_eagle_paged.adapters.common import kv_copy
from sglang_eagle_paged import settings
from sglang_eagle_paged.settings import Mode
from sglang_eagle_paged.adapters.v1.draft_preprocess import draft_preprocess_decode, warm_up


def _keys(specs):
    return {repr(s) for s in specs}


@pytest.mark.parametrize("page,topk,steps", [(16, 4, 3), (64, 8, 5)])
def test_serving_uses_only_warmed_up_variants(page, topk, steps):
    h = PagedTreeHarness(page, topk, steps, num_tokens=32768, head_num=2, head_dim=8, layer_num=2)
    with capture_specializations(_assign_tree_draft_slots_kernel) as a_warm, \
            capture_specializations(_duplicate_kv_kernel) as d_warm:
        warm_up(h.worker, settings.parse({}))
    assert len(a_warm) == 2 and len(d_warm) == 1  # the assignment from alloc_loc and from the free pages

    rng = random.Random(page * topk)
    with capture_specializations(_assign_tree_draft_slots_kernel) as a_serve, \
            capture_specializations(_duplicate_kv_kernel) as d_serve:
        for bs in (1, 3, 5):
            rows = [h.add_request(rng.choice([1, page, page + 1, 3 * page - 1, rng.randint(1, 4 * page)]))
                    for _ in range(bs)]
            draft_preprocess_decode(h.worker, h.batch(rows), Mode.ON)
            for r in rows:
                h.finish_request(r)
    assert len(a_serve) == 3 and len(d_serve) == 3
    assert _keys(a_serve) <= _keys(a_warm)
    assert _keys(d_serve) <= _keys(d_warm)


@pytest.mark.parametrize("page,topk,steps", [(16, 4, 3), (64, 8, 5)])
def test_allocation_kernels_are_compiled_at_start_up(page, topk, steps):
    """Both paths' kernels: the assignment's free-page variant (SGLang's paged allocator, debug
    mode off), and the allocator-inputs kernel with the assignment's alloc_loc variant (SGLang's
    allocation, the fallback; here through the allocator's debug mode). Each path serves
    from one variant of the assignment, not the other's, and warm-up compiled both."""
    served = {}
    for path in ("fast", "fallback"):
        h = PagedTreeHarness(page, topk, steps, num_tokens=32768, head_num=2, head_dim=8, layer_num=2)
        h.allocator.debug_mode = path == "fallback"
        with capture_specializations(_assign_tree_draft_slots_kernel) as a_warm, \
                capture_specializations(_tree_extension_kernel) as e_warm:
            warm_up(h.worker, settings.parse({}))
        assert len(_keys(a_warm)) == 2 and len(e_warm) == 1
        rng = random.Random(page + topk)
        with capture_specializations(_assign_tree_draft_slots_kernel) as a_serve, \
                capture_specializations(_tree_extension_kernel) as e_serve:
            for bs in (1, 3, 5):
                rows = [h.add_request(rng.choice([1, page - 1, page, page + 1, rng.randint(1, 4 * page)]))
                        for _ in range(bs)]
                draft_preprocess_decode(h.worker, h.batch(rows), Mode.ON)
                for r in rows:
                    h.finish_request(r)
        assert len(a_serve) == 3 and _keys(a_serve) <= _keys(a_warm)
        assert len(e_serve) == (3 if path == "fallback" else 0) and _keys(e_serve) <= _keys(e_warm)
        served[path] = _keys(a_serve)
    assert len(served["fast"]) == len(served["fallback"]) == 1 and served["fast"] != served["fallback"]


def test_post_verify_move_is_compiled_at_start_up():
    """The target pool's compaction kernel (one launch per chunk) compiles in warm-up, not at the first verify."""
    h = PagedTreeHarness(16, 4, 3, num_tokens=4096, head_num=2, head_dim=8, layer_num=2, kv_copy=True)
    with capture_specializations(_move_rows_kernel) as warm:
        warm_up(h.worker, settings.parse({}))
    assert len(warm) == 2  # the small tile (a few pairs) and the chunk's
    with capture_specializations(_move_rows_kernel) as serve:
        for n in (1, 7, 40):  # accepted-token totals of three verify steps
            kv_copy.move_kv_cache_hook(None, h.kv_pool, torch.arange(100, 100 + n), torch.arange(200, 200 + n))
    assert len(serve) == 3 and _keys(serve) == _keys(warm)


def test_warm_up_leaves_kv_and_allocator_untouched():
    h = PagedTreeHarness(16, 4, 3, num_tokens=8192, head_num=2, head_dim=8, layer_num=2, kv_copy=True)
    row = h.add_request(21)
    # bytes, not values: the random KV holds NaN patterns, and NaN != NaN
    before = [b.view(torch.uint8).clone() for b in h.kv_pool.k_buffer + h.kv_pool.v_buffer]
    free = h.allocator.available_size()
    r2t = h.req_to_token_pool.req_to_token.clone()
    warm_up(h.worker, settings.parse({}))
    assert all(torch.equal(a, b.view(torch.uint8)) for a, b in zip(before, h.kv_pool.k_buffer + h.kv_pool.v_buffer))
    assert h.allocator.available_size() == free
    assert torch.equal(r2t, h.req_to_token_pool.req_to_token)
    assert h.requests[row].numel() == 21


def test_warm_up_skips_configurations_sglang_handles():
    h = PagedTreeHarness(1, 4, 3, num_tokens=4096)
    with capture_specializations(_assign_tree_draft_slots_kernel) as specs, \
            capture_specializations(_tree_extension_kernel) as ext_specs:
        warm_up(h.worker, settings.parse({}))
    assert specs == []
    assert ext_specs == []


@pytest.mark.parametrize("page,handled", [(16, "ours"), (1, "SGLang's")])
def test_worker_start_logs_activation_per_rank(caplog, monkeypatch, page, handled):
    """The line the reliability suite looks for on every TP rank (register()'s own is lost:
    SGLang loads plugins before it sets up logging)."""
    from bench.stress.logs import scan_log
    from sglang_eagle_paged.adapters.v1.draft_preprocess import worker_init_hook

    monkeypatch.setenv("SGLANG_EAGLE_PAGED", "on")
    h = PagedTreeHarness(page, 4, 3, num_tokens=4096, head_num=2, head_dim=8, layer_num=2)
    with caplog.at_level("INFO", logger="sglang_eagle_paged"):
        assert worker_init_hook(settings.parse({"SGLANG_EAGLE_PAGED": "on"}))("result", h.worker) == "result"
    line = next(r.getMessage() for r in caplog.records if "active: mode=" in r.getMessage())
    assert f"tree drafting={handled} (page {page}, topk 4, steps 3)" in line
    assert scan_log(f"[2026-11-30 07:11:48 TP1] {line}")["plugin_active"] == {"TP1": "on"}
    # Where the start-up time went (run 15 saw 13-14 s in all): each part by name, none where SGLang drafts.
    parts = re.search(r"warm-up \d+ ms(?: \((.*)\))?", line).group(1)
    if handled == "ours":
        names = [re.fullmatch(r"(.+) \d+ ms", part).group(1) for part in parts.split(", ")]
        assert names == ["tree", "move", "bookkeeping", "free", "allocator", "sglang verify"]
    else:
        assert parts is None


@pytest.mark.parametrize("part", ["_warm_up_tree_drafting", "warm_up_moves"])
def test_a_warm_up_fault_of_ours_leaves_the_server_to_sglangs_paths_in_one_error_line(caplog, monkeypatch, part):
    """A kernel of ours that cannot compile on this machine must not stop the server's start:
    the worker starts, every v1 path of ours is off, one ERROR line says why."""
    from sglang_eagle_paged.adapters.common import fa3_metadata
    from sglang_eagle_paged.adapters.common.fault_switch import FaultSwitch
    from sglang_eagle_paged.adapters.v1 import draft_preprocess, verify

    for module in (draft_preprocess, kv_copy, verify, fa3_metadata):
        monkeypatch.setattr(module, "_switched_off", FaultSwitch(module._switched_off.message))
    monkeypatch.setattr(verify, "_state", {"kernel": True, "pages": False, "split": None, "pending": None})

    def broken(*args, **kwargs):
        raise RuntimeError("injected compile failure")

    monkeypatch.setattr(draft_preprocess, part, broken)
    h = PagedTreeHarness(16, 4, 3, num_tokens=4096, head_num=2, head_dim=8, layer_num=2)
    with caplog.at_level("INFO", logger="sglang_eagle_paged"):
        hook = draft_preprocess.worker_init_hook(settings.parse({"SGLANG_EAGLE_PAGED": "on"}))
        assert hook("result", h.worker) == "result"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= 40]
    assert len(errors) == 1 and "v1 warm-up failed" in errors[0] and "injected compile failure" in errors[0]
    assert "tree drafting=SGLang's" in next(r.getMessage() for r in caplog.records if "active: mode=" in r.getMessage())
    assert draft_preprocess._switched_off and kv_copy._switched_off and fa3_metadata.switched_off()
    assert verify._switched_off and not verify.kernel_in_use() and not verify.page_list_enabled()


def test_fa3_replay_kernels_warm_up_only_under_a_fa3_draft_backend(monkeypatch):
    from sglang_eagle_paged.adapters.v1 import sglang_api as compat
    from sglang_eagle_paged.adapters.common import fa3_metadata

    calls = []
    monkeypatch.setattr(fa3_metadata, "warm_up", lambda *a: calls.append(a))
    h = PagedTreeHarness(16, 4, 3, num_tokens=4096, head_num=2, head_dim=8, layer_num=2)
    warm_up(h.worker, settings.parse({}))  # the harness's worker has no FA3 draft backend
    assert calls == []
    module, name = fa3_metadata.FA3_MULTI_STEP_BACKEND.rsplit(".", 1)
    h.worker.draft_attn_backend = type(name, (), {"__module__": module})()
    warm_up(h.worker, settings.parse({}))
    assert calls == [(h.worker.device, 4, 3, 16, settings.FA3Expand.FUSED)]
    warm_up(h.worker, settings.parse({"SGLANG_EAGLE_PAGED_FA3_EXPAND": "off"}))  # nothing to compile
    assert len(calls) == 1


def test_sglangs_allocation_kernel_warms_up_for_the_workers_batch_bound(monkeypatch):
    from types import SimpleNamespace

    from sglang_eagle_paged.adapters.v1 import sglang_warm_up

    calls, verify_calls = [], []
    monkeypatch.setattr(sglang_warm_up, "warm_up_allocator", lambda *a: calls.append(a))
    monkeypatch.setattr(sglang_warm_up, "warm_up_verify", lambda *a: verify_calls.append(a))
    h = PagedTreeHarness(16, 4, 3, num_tokens=4096, head_num=2, head_dim=8, layer_num=2)
    h.worker.server_args = SimpleNamespace(max_running_requests=48)  # what SGLang sets for EAGLE
    h.worker.speculative_num_draft_tokens = 12
    h.worker.req_to_token_pool = h.req_to_token_pool  # as EAGLEWorker holds it (the harness leaves it out)
    warm_up(h.worker, settings.parse({}))
    assert calls == [(h.worker.device, 16, 48)]
    # and the paged verify's own kernels and filter, for the same batch bound and draft tokens
    assert verify_calls == [(h.worker.device, 12, 16, 48, h.worker.req_to_token_pool.req_to_token)]
