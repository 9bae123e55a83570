"""Start-up compilation of SGLang's post-verify KV move (move_warm_up.py), against SGLang 0.5.23's
own function, kernels and pools on CPU: after the warm-up, post-verify moves of every batch size
compile no new variant of any kernel the move launches; without it they do. The interpreter
reports what a GPU launch would key Triton's cache on (helpers/interpreter_order.py)."""

import v2_support as support

support.require_sglang()

import inspect  # noqa: E402
import logging  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
from contextlib import ExitStack  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from sglang.kernels.ops.kvcache import cache_move  # noqa: E402
from sglang.kernels.ops.speculative import cache_locs, eagle  # noqa: E402
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool, move_kv_cache_native  # noqa: E402
from sglang.srt.speculative import eagle_info, eagle_utils, eagle_worker_common, spec_utils  # noqa: E402

from helpers.interpreter_order import capture_specializations  # noqa: E402
from sglang_eagle_paged.adapters.v2 import move_warm_up, warm_up, warm_up_scope  # noqa: E402

torch.set_num_threads(1)

# every Triton kernel 0.5.23's post-verify move launches
KERNELS = {"copy": cache_move.copy_all_layer_kv_cache_tiled,
           "front": cache_locs.assign_extend_cache_locs,
           "accept": eagle.fill_accept_out_cache_loc}


def _flat(src: str) -> str:
    return re.sub(r"\s+", "", src)


def test_the_warm_up_calls_the_move_as_this_release_verify_does():
    """The warm-up's dtypes and shapes are the verify's: if SGLang changes them, it must follow."""
    sample = _flat(inspect.getsource(eagle_utils.eagle_sample))
    assert _flat("accept_index=torch.full((bs,verify_input.max_tree_depth),-1,dtype=torch.int32,device=device)") \
        in sample
    assert _flat("num_correct_drafts=torch.empty((bs,),dtype=torch.int32,device=device)") in sample
    assert "accept_lens=num_correct_drafts+1" in sample
    assert _flat("move_accept_tokens_to_target_kvcache(batch,accept_index,accept_lens-1,token_to_kv_pool_allocator)") \
        in _flat(inspect.getsource(eagle_worker_common._finalize_accept_tree_path))
    assert "returnself.spec_steps+1" in _flat(inspect.getsource(eagle_info.EagleVerifyInput.max_tree_depth.fget))
    assert move_warm_up.resolve(move_warm_up.MOVE) is spec_utils.move_accept_tokens_to_target_kvcache


def _pools(page, head_num, head_dim, size=512, max_reqs=64):
    kv = MHATokenToKVPool(size, page, torch.bfloat16, head_num, head_dim, 1, "cpu", enable_memory_saver=False,
                          enable_alt_stream=False, enable_kv_cache_copy=True)
    rows = ReqToTokenPool(max_reqs, 256, "cpu", enable_memory_saver=False)
    return kv, rows, PagedTokenToKVPoolAllocator(size, page, torch.bfloat16, "cpu", kv, need_sort=False)


def _worker(allocator, rows, topk=4, steps=5, draft_tokens=8, max_batch=24):
    return SimpleNamespace(topk=topk, speculative_num_steps=steps, speculative_num_draft_tokens=draft_tokens,
                           server_args=SimpleNamespace(max_running_requests=max_batch),
                           token_to_kv_pool_allocator=allocator, req_to_token_pool=rows)


def _buffers(pool):
    return [b.view(torch.uint8) for b in pool.k_buffer + pool.v_buffer]


def _verified_batch(rng, bs, depth, draft_tokens, slots):
    """A verify's outputs for ``bs`` requests: each request's window of ``draft_tokens`` slots and an
    accepted root-to-leaf path of 1..depth tree nodes (the root first), as eagle_sample leaves them."""
    out_cache_loc = torch.tensor(rng.sample(slots, bs * draft_tokens), dtype=torch.int64)
    accept_index = torch.full((bs, depth), -1, dtype=torch.int32)
    for i in range(bs):
        path = [0] + sorted(rng.sample(range(1, draft_tokens), rng.randint(0, depth - 1)))
        accept_index[i, :len(path)] = torch.tensor(path, dtype=torch.int32) + i * draft_tokens
    accept_lens = (accept_index != -1).sum(dim=1, dtype=torch.int32)
    batch = SimpleNamespace(seq_lens=torch.full((bs,), 40, dtype=torch.int64), out_cache_loc=out_cache_loc)
    return batch, accept_index, accept_lens


def _serve(pool, allocator, batch_sizes, depth, draft_tokens, seed=0):
    """SGLang's post-verify move for each batch size, checked against the move it means to make."""
    rng = random.Random(seed)
    slots = list(range(pool.page_size, pool.size))
    for bs in batch_sizes:
        batch, accept_index, accept_lens = _verified_batch(rng, bs, depth, draft_tokens, slots)
        window = batch.out_cache_loc.view(bs, draft_tokens)
        tgt = torch.cat([window[i, :n] for i, n in enumerate(accept_lens.tolist())])
        src = batch.out_cache_loc[accept_index[accept_index != -1].long()]
        want = [b.clone() for b in _buffers(pool)]
        move_kv_cache_native(want[:1], want[1:], tgt, src)
        spec_utils.move_accept_tokens_to_target_kvcache(batch, accept_index, accept_lens - 1, allocator)
        assert all(torch.equal(a, b) for a, b in zip(_buffers(pool), want))  # a real move, as SGLang makes it


def _capture():
    stack = ExitStack()
    return stack, {name: stack.enter_context(capture_specializations(k)) for name, k in KERNELS.items()}


def _keys(seen):
    return {name: {repr(s) for s in specs} for name, specs in seen.items()}


# 8 KiB rows: the pool moves in chunks of at most 128 slots (the 24-request batches in two); 32 B rows: of 256
@pytest.mark.parametrize("head_num,head_dim", [(8, 512), (2, 8)])
def test_after_the_warm_up_no_post_verify_move_compiles_a_new_variant(head_num, head_dim):
    steps, draft_tokens, max_batch = 5, 8, 24
    stack, own = _capture()
    with stack:  # SGLang's own start-up launch (the pool's first copy)
        pool, rows, allocator = _pools(16, head_num, head_dim)
    for b in _buffers(pool):
        b.copy_(torch.randint(0, 256, b.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(1)))
    before = [b.clone() for b in _buffers(pool)]
    stack, warm = _capture()
    with stack:
        assert move_warm_up.warm_up_worker(_worker(allocator, rows, steps=steps, max_batch=max_batch)) == max_batch
    assert all(torch.equal(a, b) for a, b in zip(before, _buffers(pool)))  # it moved nothing
    stack, served = _capture()
    with stack:
        sizes = list(range(1, max_batch + 1))
        random.Random(2).shuffle(sizes)
        _serve(pool, allocator, sizes + [1, 16, max_batch], steps + 1, draft_tokens)
    own, warm, served = _keys(own), _keys(warm), _keys(served)
    for name in KERNELS:
        assert served[name] <= warm[name], name
    # Not vacuous. N = 6 bs slot pairs for bs 1..24 (6..144): copy launches of (next_power_of_2(chunk),
    # chunk a multiple of 16 or not) 8, 16, 32, 64, 64/16, 128, 128/16 and, above the chunk bound,
    # 256, 256/16 (chunks of 256) or 4 and 16/16 remainders after a 128/16 chunk (chunks of 128);
    # front and accepted slots: next_power_of_2 of bs (1..32) and of 6 bs (8..256).
    assert (len(served["copy"]), len(served["front"]), len(served["accept"])) == (9, 6, 6)
    assert not served["copy"] & own["copy"]  # SGLang's own start-up compiles one chunk of 1 slot


def test_the_draft_worker_hook_warms_the_move_once(caplog):
    pool, rows, allocator = _pools(16, 2, 8)
    worker = _worker(allocator, rows, max_batch=3)
    worker.draft_runner = SimpleNamespace(token_to_kv_pool=pool, req_to_token_pool=rows)
    with caplog.at_level(logging.WARNING, logger="sglang_eagle_paged"), \
            capture_specializations(KERNELS["copy"]) as first:
        assert warm_up.after_hook("result", worker) == "result"
    with capture_specializations(KERNELS["copy"]) as second:
        warm_up.after_hook(None, worker)  # alloc_memory_pool after __init__: nothing more
    assert len(first) == 3 and second == [] and "move" not in caplog.text


def test_nothing_to_warm_for_chains_page_1_or_before_the_pools_exist(caplog):
    pool, rows, allocator = _pools(16, 2, 8)
    _, _, allocator1 = _pools(1, 2, 8)
    with caplog.at_level(logging.WARNING, logger="sglang_eagle_paged"):
        assert move_warm_up.warm_up_worker(_worker(allocator, rows, topk=1)) == 0
        assert move_warm_up.warm_up_worker(_worker(allocator1, rows)) == 0
        assert move_warm_up.warm_up_worker(_worker(None, None)) == 0  # __init__ before alloc_memory_pool
    assert caplog.text == ""


def test_a_failure_is_one_log_line_and_start_up_goes_on(monkeypatch, caplog):
    pool, rows, allocator = _pools(16, 2, 8)
    monkeypatch.setattr(move_warm_up, "MOVE", "sglang.srt.speculative.spec_utils.no_such_move")
    with caplog.at_level(logging.WARNING, logger="sglang_eagle_paged"):
        assert move_warm_up.warm_up_worker(_worker(allocator, rows, max_batch=2)) == 0
    assert len(caplog.records) == 1
    assert "post-verify KV move not compiled ahead (AttributeError" in caplog.text


def test_the_batch_bound_is_the_running_request_limit_else_the_request_pool():
    bound = warm_up_scope.max_batch_size
    assert bound(SimpleNamespace(server_args=SimpleNamespace(max_running_requests=48))) == 48
    assert bound(SimpleNamespace(server_args=SimpleNamespace(max_running_requests=None),
                                 req_to_token_pool=SimpleNamespace(size=200))) == 200
    assert bound(SimpleNamespace(req_to_token_pool=SimpleNamespace(size=10 ** 6))) == warm_up_scope.MAX_BATCH
    assert bound(SimpleNamespace()) is None
