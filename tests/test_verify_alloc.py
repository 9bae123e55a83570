"""The verify's one-launch slot allocation (verify_alloc.py) against SGLang's own ``prepare_for_verify``
on its real allocator: same slots, same ``req_to_token``, same free list afterwards."""

import inspect
import os
import re
from types import SimpleNamespace

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from sglang_eagle_paged import compat, verify_alloc  # noqa: E402
from sglang_eagle_paged.harness import PagedTreeHarness, verify_harness  # noqa: E402
from sglang_eagle_paged.kernels import verify_alloc as kernel  # noqa: E402

eagle_info = pytest.importorskip("sglang.srt.speculative.eagle_info")
SGLANG_PREPARE = eagle_info.EagleVerifyInput.prepare_for_verify


@pytest.fixture(autouse=True)
def server_args(monkeypatch):
    from sglang.srt import server_args as sa

    PagedTreeHarness(4, 2, 1, num_tokens=64)  # sets the global server args a harness needs
    args = SimpleNamespace(**vars(sa.get_global_server_args()))
    args.enable_mamba_extra_buffer = lambda: False
    monkeypatch.setattr(sa, "_global_server_args", args)
    monkeypatch.setitem(verify_alloc._state, "on", True)
    return args


def _flat(src: str) -> str:
    return re.sub(r"\s+", "", src)


def test_the_hook_replaces_what_this_release_does():
    src = _flat(inspect.getsource(SGLANG_PREPARE))
    for call in ("batch.input_ids=self.draft_token",
                 "last_loc=get_last_loc(batch.req_to_token_pool.req_to_token,batch.req_pool_indices,prefix_lens,)",
                 "batch.out_cache_loc=alloc_paged_token_slots_extend(batch.tree_cache,prefix_lens,prefix_lens_cpu,"
                 "end_offset,end_offset_cpu,last_loc,len(batch.input_ids),)",
                 "assign_req_to_token_pool_func(batch.req_pool_indices,batch.req_to_token_pool.req_to_token,"
                 "batch.seq_lens,end_offset,batch.out_cache_loc,bs,)",
                 "ifget_global_server_args().enable_mamba_extra_buffer():"):
        assert call in src, call


@pytest.mark.parametrize("draft_tokens,page", [(64, 64), (16, 128), (8, 4), (6, 2), (64, 16), (3, 256)])
def test_kernel_check_passes(draft_tokens, page):
    assert verify_alloc.check("cpu", draft_tokens, page) is None


def test_the_check_catches_wrong_slots(monkeypatch):
    real = verify_alloc.verify_slots
    monkeypatch.setattr(verify_alloc, "verify_slots", lambda *a: real(*a).flip(0))
    assert verify_alloc.check("cpu", 16, 16) == "its slots differ from SGLang's"


def _verify_batch(page, draft_tokens, lens, seed=0):
    h, batch = verify_harness(page, draft_tokens, lens, seed=seed)
    batch.forward_mode = SimpleNamespace(is_idle=lambda: False)
    batch.input_ids = None
    batch.batch_size = lambda: len(lens)
    spec = SimpleNamespace(draft_token=torch.arange(len(lens) * draft_tokens), draft_token_num=draft_tokens)
    return h, batch, spec


@pytest.mark.parametrize("page,draft_tokens,lens", [
    (64, 64, [1, 63, 64, 65, 127, 200]), (16, 24, [16, 3, 47]), (128, 16, [120, 1]),
    (4, 8, list(range(1, kernel.BLOCK_BS + 12))),  # past one block of earlier requests
])
def test_hook_gives_what_sglangs_prepare_for_verify_gives(page, draft_tokens, lens):
    (h1, b1, s1), (h2, b2, s2) = (_verify_batch(page, draft_tokens, lens) for _ in range(2))
    SGLANG_PREPARE(s1, b1, page)
    called = []
    verify_alloc.prepare_for_verify_hook(lambda *a: called.append(a), s2, b2, page)
    assert not called  # ours served it
    assert torch.equal(b2.out_cache_loc, b1.out_cache_loc)
    assert torch.equal(b2.input_ids, b1.input_ids)
    assert torch.equal(h2.req_to_token_pool.req_to_token, h1.req_to_token_pool.req_to_token)
    assert torch.equal(h2.allocator.free_pages, h1.allocator.free_pages)


@pytest.mark.parametrize("why", ["off", "page 1", "idle", "debug", "other allocator", "mamba", "short free list"])
def test_everything_else_is_sglangs(why, server_args, monkeypatch):
    h, batch, spec = _verify_batch(16, 24, [5, 40])
    page = 16
    if why == "off":
        monkeypatch.setitem(verify_alloc._state, "on", False)
    elif why == "page 1":
        page = 1
    elif why == "idle":
        batch.forward_mode = SimpleNamespace(is_idle=lambda: True)
    elif why == "debug":
        h.allocator.debug_mode = True
    elif why == "other allocator":
        batch.tree_cache = SimpleNamespace(token_to_kv_pool_allocator=object())
    elif why == "mamba":
        server_args.enable_mamba_extra_buffer = lambda: True
    else:
        h.allocator.free_pages = h.allocator.free_pages[:1]  # the verify needs 2
    called = []
    verify_alloc.prepare_for_verify_hook(lambda *a: called.append(a), spec, batch, page)
    assert called == [(spec, batch, page)]
    assert batch.out_cache_loc is None


def test_off_unless_asked(monkeypatch):
    monkeypatch.delenv(verify_alloc.ENV_VAR, raising=False)
    assert verify_alloc.hooks() == {}
    verify_alloc.warm_up("cpu", 16, 16)
    assert not verify_alloc.enabled()
    monkeypatch.setenv(verify_alloc.ENV_VAR, "1")
    assert set(verify_alloc.hooks()) == {compat.PREPARE_FOR_VERIFY}
    verify_alloc.warm_up("cpu", 16, 16)
    assert verify_alloc.enabled()


def test_a_failed_check_keeps_sglangs_allocation(monkeypatch, caplog):
    monkeypatch.setenv(verify_alloc.ENV_VAR, "1")
    monkeypatch.setattr(verify_alloc, "check", lambda *a: "its slots differ from SGLang's")
    with caplog.at_level("WARNING", logger="sglang_eagle_paged"):
        verify_alloc.warm_up("cpu", 16, 16)
    assert not verify_alloc.enabled() and "stay SGLang's" in caplog.text
