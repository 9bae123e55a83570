"""Start-up compilation of SGLang's paged KV-slot allocation (alloc_warm_up.py), against SGLang 0.5.23's
own allocation functions, kernels, pools and radix cache on CPU: after the warm-up, prefills and
decode rounds of every batch size compile no new variant of any kernel they launch; without it
they do. The interpreter reports what a GPU launch would key Triton's cache on
(helpers/interpreter_order.py).

Two things are set as on the GPU machine, since the CPU differs: the runtime context names fa3 as
the attention backend (``get_last_loc`` dispatches on it; a server publishes it before its workers
start), and the allocator takes its Triton branch (``use_triton_kernels``, which SGLang derives
from the platform: the CPU platform reports no Triton).
"""

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
from sglang.kernels.ops.memory import allocator as alloc_kernels  # noqa: E402
from sglang.kernels.ops.memory import common as memory_kernels  # noqa: E402
from sglang.srt.mem_cache import allocation  # noqa: E402
from sglang.srt.mem_cache.allocation_sizing import page_aligned_decode_alloc_lens  # noqa: E402
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixCache  # noqa: E402
from sglang.srt.runtime_context import create_context, use_context  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative import eagle_utils  # noqa: E402

from helpers.interpreter_order import capture_specializations  # noqa: E402
from sglang_eagle_paged.adapters.v2 import alloc_warm_up  # noqa: E402

torch.set_num_threads(1)

# every Triton kernel 0.5.23's paged allocation launches on a CUDA machine serving fa3
KERNELS = {"alloc_extend": alloc_kernels.alloc_extend_kernel,
           "last_loc": memory_kernels.get_last_loc_kernel,
           "assign_rows": allocation.assign_req_to_token_pool}
PAGE = 16
RESERVE = 24  # the decode round's draft-and-verify reserve (get_alloc_reserve_per_decode)


@pytest.fixture(scope="module")
def fa3_context():
    args = ServerArgs(model_path="dummy", attention_backend="fa3", device="cpu")
    with use_context(create_context(args, role="test")):
        yield


def _flat(src: str) -> str:
    return re.sub(r"\s+", "", src)


def test_the_warm_up_calls_what_this_release_serving_calls_with_its_dtypes():
    """The warm-up's functions and dtypes are serving's: if SGLang changes them, it must follow."""
    extend = _flat(inspect.getsource(allocation.alloc_for_extend))
    assert _flat("prefix_lens_cpu=torch.tensor(batch.prefix_lens,dtype=torch.int64,") in extend
    assert "seq_lens=batch.seq_lens," in extend  # int64 (ScheduleBatch.prepare_for_extend)
    assert "alloc_paged_token_slots_extend(" in extend
    assert "allocator.alloc_extend(" in _flat(inspect.getsource(allocation.alloc_paged_token_slots_extend))
    decode = _flat(inspect.getsource(eagle_utils))
    assert _flat('cur_kv_lens_cpu=torch.tensor(cur_kv_lens,dtype=torch.int32,device="cpu")') in decode
    assert _flat('nxt_kv_lens_cpu=torch.tensor(nxt_kv_lens,dtype=torch.int32,device="cpu")') in decode
    spec = _flat(inspect.getsource(allocation.alloc_for_spec_decode))
    assert _flat("last_loc=get_last_loc(req_to_token_pool.req_to_token,req_pool_indices,cur_kv_lens)") in spec
    assert _flat("assign_req_to_token_pool_func(req_pool_indices,req_to_token_pool.req_to_token,cur_kv_lens,"
                 "nxt_kv_lens,out_cache_loc,len(reqs),)") in spec
    assert alloc_warm_up.resolve_first(alloc_warm_up.GET_LAST_LOC) is allocation.get_last_loc
    assert alloc_warm_up.resolve_first(alloc_warm_up.ASSIGN_ROWS) is allocation.assign_req_to_token_pool_func


def _pools(size=4096, max_reqs=48):
    kv = MHATokenToKVPool(size, PAGE, torch.bfloat16, 1, 8, 1, "cpu", enable_memory_saver=False,
                          enable_alt_stream=False, enable_kv_cache_copy=False)
    rows = ReqToTokenPool(max_reqs, 256, "cpu", enable_memory_saver=False)
    allocator = PagedTokenToKVPoolAllocator(size, PAGE, torch.bfloat16, "cpu", kv, need_sort=False)
    allocator.use_triton_kernels = True  # the GPU's branch (see the module docstring)
    allocator.debug_mode = True  # SGLang's own checks of every allocation
    cache = RadixCache(CacheInitParams(disable=False, req_to_token_pool=rows, token_to_kv_pool_allocator=allocator,
                                       page_size=PAGE, is_eagle=True))
    return rows, allocator, cache


def _worker(allocator, rows, topk=4, max_batch=24):
    return SimpleNamespace(topk=topk, speculative_num_steps=5, speculative_num_draft_tokens=8,
                           server_args=SimpleNamespace(max_running_requests=max_batch),
                           token_to_kv_pool_allocator=allocator, req_to_token_pool=rows)


def _prefill(rng, rows, cache, bs):
    """``bs`` new requests without a cached prefix, allocated as alloc_for_extend allocates them."""
    idx = rows.alloc_rows(bs)
    seq_lens_cpu = torch.tensor([rng.randint(1, 40) for _ in range(bs)], dtype=torch.int64)
    prefix_lens_cpu = torch.zeros(bs, dtype=torch.int64)
    last_loc = torch.cat([torch.full((1,), -1) for _ in range(bs)])
    out = allocation.alloc_paged_token_slots_extend(cache, prefix_lens_cpu.clone(), prefix_lens_cpu,
                                                    seq_lens_cpu.clone(), seq_lens_cpu, last_loc,
                                                    int(seq_lens_cpu.sum()))
    start = 0
    for i, n in zip(idx, seq_lens_cpu.tolist()):
        rows.req_to_token[i, :n] = out[start:start + n].to(torch.int32)
        start += n
    reqs = [SimpleNamespace(kv=SimpleNamespace(kv_allocated_len=n, kv_committed_len=n)) for n in seq_lens_cpu.tolist()]
    return torch.tensor(idx, dtype=torch.int64), reqs


def _decode_round(rng, rows, cache, idx, reqs):
    """One decode round's reservation, as eagle_prepare_for_decode makes it; then each request
    commits 1..6 accepted tokens, as a verify does."""
    cur, nxt, needed = page_aligned_decode_alloc_lens(reqs, reserve=RESERVE, page_size=PAGE)
    cur_cpu, nxt_cpu = torch.tensor(cur, dtype=torch.int32), torch.tensor(nxt, dtype=torch.int32)
    allocation.alloc_for_spec_decode(cache, rows, reqs=reqs, req_pool_indices=idx, cur_kv_lens=cur_cpu.clone(),
                                     cur_kv_lens_cpu=cur_cpu, nxt_kv_lens=nxt_cpu.clone(), nxt_kv_lens_cpu=nxt_cpu,
                                     num_needed_tokens=needed,
                                     batch=SimpleNamespace(device="cpu", hisparse_coordinator=None))
    for r in reqs:
        r.kv.kv_committed_len += rng.randint(1, 6)


def _serve(rows, allocator, cache, batch_sizes, seed=0):
    """A prefill and two decode rounds per batch size, then the requests finish; checks that every
    request's slots are distinct and continue its pages as SGLang lays them out."""
    rng = random.Random(seed)
    for bs in batch_sizes:
        idx, reqs = _prefill(rng, rows, cache, bs)
        for _ in range(2):
            _decode_round(rng, rows, cache, idx, reqs)
        slots = torch.cat([rows.req_to_token[i, :r.kv.kv_allocated_len].long() for i, r in zip(idx.tolist(), reqs)])
        assert len(torch.unique(slots)) == len(slots)
        for i, r in zip(idx.tolist(), reqs):  # within a page, slots run on: only page starts may jump
            row = rows.req_to_token[i, :r.kv.kv_allocated_len].long()
            assert torch.equal(row.view(-1, PAGE) % PAGE, torch.arange(PAGE).expand(len(row) // PAGE, PAGE))
        allocator.free(slots)
        rows.free_rows(idx.tolist())


def _capture():
    stack = ExitStack()
    return stack, {name: stack.enter_context(capture_specializations(k)) for name, k in KERNELS.items()}


def _keys(seen):
    return {name: {repr(s) for s in specs} for name, specs in seen.items()}


def test_after_the_warm_up_no_allocation_compiles_a_new_variant(fa3_context):
    rows, allocator, cache = _pools()
    free_before, rows_before = allocator.free_pages.clone(), rows.req_to_token.clone()
    stack, warm = _capture()
    with stack:
        assert alloc_warm_up.warm_up_worker(_worker(allocator, rows)) == 2 * 6 + 3 + 6
    # it allocated and wrote nothing
    assert torch.equal(allocator.free_pages, free_before) and torch.equal(rows.req_to_token, rows_before)
    stack, served = _capture()
    with stack:
        sizes = list(range(1, 25))
        random.Random(2).shuffle(sizes)
        _serve(rows, allocator, cache, sizes + [1, 16, 24])
    warm, served = _keys(warm), _keys(served)
    for name in KERNELS:
        assert served[name] <= warm[name], name
    # Not vacuous: a server without the warm-up compiles each of these on first use. Batches of
    # 1..24: alloc_extend per next_power_of_2(bs) (1..32) for int64 prefills and int32 decode
    # rounds; the last-slot lookup per batch-size class (1, 16, other); the row write per power of two.
    assert (len(served["alloc_extend"]), len(served["last_loc"]), len(served["assign_rows"])) == (12, 3, 6)


def test_a_warm_up_for_smaller_batches_leaves_variants_to_compile(fa3_context):
    """The check above can fail: warmed for batches of up to 4, batches of 5..24 compile."""
    rows, allocator, cache = _pools()
    stack, warm = _capture()
    with stack:
        alloc_warm_up.warm_up_worker(_worker(allocator, rows, max_batch=4))
    stack, served = _capture()
    with stack:
        _serve(rows, allocator, cache, [3, 9, 17])
    warm, served = _keys(warm), _keys(served)
    assert all(served[name] - warm[name] for name in ("alloc_extend", "assign_rows"))


def test_the_draft_worker_hook_warms_the_allocation_once(fa3_context):
    rows, allocator, _ = _pools()
    worker = _worker(allocator, rows, max_batch=3)
    assert alloc_warm_up.warm_up_worker(worker) == 2 * 3 + 2 + 3  # buckets 1, 2, 4; sizes 1, 2
    with capture_specializations(KERNELS["alloc_extend"]) as again:
        assert alloc_warm_up.warm_up_worker(worker) == 0  # alloc_memory_pool after __init__: nothing more
    assert again == []


def test_nothing_to_warm_for_chains_page_1_or_before_the_pools_exist(caplog):
    rows, allocator, _ = _pools()
    page1 = SimpleNamespace(page_size=1)  # the gate reads nothing else
    with caplog.at_level(logging.WARNING, logger="sglang_eagle_paged"), \
            capture_specializations(KERNELS["alloc_extend"]) as launched:
        assert alloc_warm_up.warm_up_worker(_worker(allocator, rows, topk=1)) == 0
        assert alloc_warm_up.warm_up_worker(_worker(page1, rows)) == 0
        assert alloc_warm_up.warm_up_worker(_worker(None, None)) == 0  # __init__ before alloc_memory_pool
    assert caplog.text == "" and launched == []


def test_a_failure_is_one_log_line_and_start_up_goes_on(monkeypatch, caplog):
    rows, allocator, _ = _pools()
    monkeypatch.setattr(alloc_warm_up, "GET_LAST_LOC", ("sglang.srt.mem_cache.allocation.no_such_lookup",))
    with caplog.at_level(logging.WARNING, logger="sglang_eagle_paged"):
        assert alloc_warm_up.warm_up_worker(_worker(allocator, rows, max_batch=2)) == 0
    assert len(caplog.records) == 1
    assert "paged KV-slot allocation not compiled ahead (AttributeError" in caplog.text
