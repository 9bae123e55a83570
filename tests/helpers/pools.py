"""Build SGLang's real memory pools on CPU and drive its paged allocator.

Shared by the kernel tests and anyone else who needs real slot layouts:

- :func:`make_pools`       ``ReqToTokenPool`` + ``MHATokenToKVPool`` + ``PagedTokenToKVPoolAllocator``
- :func:`churn`            allocate/free random blocks so the free-page list is shuffled
- :func:`allocate_prefixes` prefill-style ``alloc_extend`` from empty prefixes, rows written
- :func:`alloc_tree_extension` the allocator call of ``EAGLEWorker._draft_preprocess_decode``
  (page_size > 1, topk > 1 branch), same arithmetic
"""

import random
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

_STANDINS = Path(__file__).resolve().parents[2] / "scripts" / "cpu_standins"
if _STANDINS.is_dir() and str(_STANDINS) not in sys.path:
    # after site-packages: a real torchvision / sgl_kernel wins over the stand-ins
    sys.path.append(str(_STANDINS))

import torch  # noqa: E402
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator  # noqa: E402
try:  # its home up to 0.5.12.post1
    from sglang.srt.mem_cache.common import get_last_loc_torch  # noqa: E402
except ImportError:  # 0.5.23's
    from sglang.srt.mem_cache.allocation import get_last_loc_torch  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool  # noqa: E402


@dataclass
class Pools:
    req_to_token_pool: ReqToTokenPool
    kv_pool: MHATokenToKVPool
    allocator: PagedTokenToKVPoolAllocator
    page_size: int

    @property
    def req_to_token(self) -> torch.Tensor:
        return self.req_to_token_pool.req_to_token


def make_pools(page_size: int, size: int, head_num: int = 1, head_dim: int = 1, layer_num: int = 1,
               dtype: torch.dtype = torch.bfloat16, max_reqs: int = 80, max_context_len: int = None,
               device: str = "cpu", debug: bool = True) -> Pools:
    """Real SGLang pools on ``device``; ``size`` is rounded up to whole pages.

    ``debug`` turns on the allocator's own checks (unique output, last_loc arithmetic).
    """
    size = -(-size // page_size) * page_size
    if max_context_len is None:
        max_context_len = size + page_size
    kv_pool = MHATokenToKVPool(
        size, page_size, dtype, head_num, head_dim, layer_num, device,
        enable_memory_saver=False, enable_alt_stream=False, enable_kv_cache_copy=False,
    )
    req_to_token_pool = ReqToTokenPool(max_reqs, max_context_len, device, enable_memory_saver=False)
    allocator = PagedTokenToKVPoolAllocator(size, page_size, dtype, device, kv_pool, need_sort=False)
    allocator.debug_mode = debug
    return Pools(req_to_token_pool, kv_pool, allocator, page_size)


def churn(pools: Pools, seed: int, max_pages: int = None, keep_fraction: float = 0.0) -> list:
    """Allocate random page blocks and free them in random order.

    Freed pages go to the front of SGLang's free list, so afterwards the next
    allocations come from shuffled, non-contiguous pages. A ``keep_fraction`` of
    the blocks stays allocated (returned, so a caller may free them later).
    """
    rng = random.Random(seed)
    alloc = pools.allocator
    budget = len(alloc.free_pages) if max_pages is None else min(max_pages, len(alloc.free_pages))
    blocks = []
    while budget > 0:
        n = min(budget, rng.randint(1, 3))
        blocks.append(alloc.alloc(n * pools.page_size))
        budget -= n
    rng.shuffle(blocks)
    kept = blocks[: int(len(blocks) * keep_fraction)]
    for b in blocks[len(kept):]:
        alloc.free(b)
    return kept


def allocate_prefixes(pools: Pools, seq_lens) -> torch.Tensor:
    """Give each request a req_to_token row and ``seq_lens[i]`` slots, as prefill does.

    One ``alloc_extend`` from empty prefixes for the whole batch; returns
    ``req_pool_indices`` (int64).
    """
    seq_lens = torch.as_tensor(seq_lens, dtype=torch.int64)
    bs = seq_lens.numel()
    pool = pools.req_to_token_pool
    if hasattr(pool, "alloc_rows"):  # 0.5.23: rows without a Req bound to them
        idx = pool.alloc_rows(bs)
    else:  # up to 0.5.12.post1: alloc(reqs) takes whatever has these fields
        reqs = [SimpleNamespace(req_pool_idx=None, is_chunked=0, kv_committed_len=0) for _ in range(bs)]
        idx = pool.alloc(reqs)
    assert idx is not None, "out of request slots"
    req_pool_indices = torch.tensor(idx, dtype=torch.int64)
    prefix_lens = torch.zeros(bs, dtype=torch.int64)
    last_loc = torch.full((bs,), -1, dtype=torch.int64)
    total = int(seq_lens.sum())
    out = pools.allocator.alloc_extend(prefix_lens, prefix_lens.clone(), seq_lens, seq_lens.clone(),
                                       last_loc, total)
    assert out is not None, "out of KV slots for the prefixes"
    start = 0
    for i, n in enumerate(seq_lens.tolist()):
        pools.req_to_token[idx[i], :n] = out[start:start + n].to(torch.int32)
        start += n
    return req_pool_indices


def tree_extension_args(pools: Pools, req_pool_indices, seq_lens, page_size: int, topk: int, steps: int):
    """The tensors ``_draft_preprocess_decode`` computes before allocating (topk > 1 branch).

    Same arithmetic as ``get_last_loc_large_page_size_large_top_k`` (with the
    torch ``get_last_loc``, which needs no global server args) plus the CPU copies.
    """
    prefix_lens = torch.as_tensor(seq_lens, dtype=torch.int64)
    last_page_lens = prefix_lens % page_size
    num_new_pages_per_topk = (last_page_lens + steps + page_size - 1) // page_size
    new_seq_lens = prefix_lens // page_size * page_size + num_new_pages_per_topk * (page_size * topk)
    extend_lens = new_seq_lens - prefix_lens
    last_loc = get_last_loc_torch(pools.req_to_token, req_pool_indices, prefix_lens)

    prefix_lens_cpu = prefix_lens.cpu()
    last_page_lens_cpu = prefix_lens_cpu % page_size
    num_new_pages_cpu = (last_page_lens_cpu + steps + page_size - 1) // page_size
    seq_lens_cpu = prefix_lens_cpu // page_size * page_size + num_new_pages_cpu * (page_size * topk)
    extend_num_tokens = torch.sum(seq_lens_cpu - prefix_lens_cpu).item()
    return SimpleNamespace(
        prefix_lens=prefix_lens, prefix_lens_cpu=prefix_lens_cpu, seq_lens=new_seq_lens,
        seq_lens_cpu=seq_lens_cpu, last_loc=last_loc, extend_num_tokens=extend_num_tokens,
        num_new_pages_per_topk=num_new_pages_per_topk, extend_lens=extend_lens,
        last_page_lens=last_page_lens, last_page_lens_cpu=last_page_lens_cpu,
    )


def alloc_tree_extension(pools: Pools, req_pool_indices, seq_lens, page_size: int, topk: int,
                         steps: int) -> torch.Tensor:
    """``allocator.alloc_extend`` exactly as ``_draft_preprocess_decode`` calls it; returns ``alloc_loc``."""
    a = tree_extension_args(pools, req_pool_indices, seq_lens, page_size, topk, steps)
    out = pools.allocator.alloc_extend(a.prefix_lens, a.prefix_lens_cpu, a.seq_lens, a.seq_lens_cpu,
                                       a.last_loc, a.extend_num_tokens)
    assert out is not None, "out of KV slots for the tree extension"
    return out
