"""SGLang's v2 (0.5.13 .. 0.5.23) pools on any device, with rows laid out as its scheduler lays
them at draft time, and SGLang's own paged draft preparation run on them: for the CPU demo,
``doctor``'s self-test and the tests. Not imported by serving code."""

import random

def make_pool(page_size, size, *, head_num=2, head_dim=4, layer_num=2, dtype=None, v_head_dim=None, cls=None,
              device="cpu", **extra):
    import torch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    cls = cls or MHATokenToKVPool
    size = -(-size // page_size) * page_size
    return cls(size, page_size, dtype or torch.bfloat16, head_num, head_dim, layer_num, device,
               enable_memory_saver=False, v_head_dim=v_head_dim, enable_alt_stream=False,
               enable_kv_cache_copy=True, **extra)


def fill_random(pool, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    for b in (*pool.k_buffer, *pool.v_buffer):
        raw = b.view(torch.uint8)
        raw.copy_(torch.randint(0, 256, raw.shape, generator=g, dtype=torch.uint8))


def snapshot(pool):
    return [b.clone() for b in (*pool.k_buffer, *pool.v_buffer)]


def restore(pool, snap):
    for b, s in zip((*pool.k_buffer, *pool.v_buffer), snap):
        b.copy_(s)


def alloc_len(page_size, topk, steps, num_draft_tokens):
    """SGLang 0.5.23's per-request draft allocation at page > 1, topk > 1
    (``allocation_sizing.get_alloc_len_per_decode``), doubled as ``get_alloc_reserve_per_decode``."""
    pages_per_branch = ((page_size - 1) + steps + page_size - 1) // page_size
    return 2 * max(pages_per_branch * page_size * topk, num_draft_tokens)


def layout_rows(seq_lens, page_size, topk, steps, *, seed, num_draft_tokens=None, tight=False, device="cpu"):
    """Rows as the v2 scheduler holds them at draft time: each request's prefix and its decode
    reservation (committed + reserve, rounded up to whole pages, as ``page_aligned_decode_alloc_lens``)
    in whole pages taken from a shuffled free list (SGLang's paged allocator after churn).
    ``tight``: the row width is exactly the longest reservation (a request at the context limit)."""
    import torch
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator

    num_draft_tokens = num_draft_tokens or topk * steps
    reserve = alloc_len(page_size, topk, steps, num_draft_tokens)
    lens = [-(-(L + reserve) // page_size) * page_size for L in seq_lens]
    pages = sum(lens) // page_size
    rng = random.Random(seed)
    pool = make_pool(page_size, (pages + 3 * len(seq_lens) + 8) * page_size, device=device)
    allocator = PagedTokenToKVPoolAllocator(pool.size, page_size, torch.int64, device, pool, need_sort=False)
    # churn: allocate everything in blocks, free in random order -> a shuffled free list
    blocks = []
    while len(allocator.free_pages) > 0:
        n = min(len(allocator.free_pages), rng.randint(1, 3))
        blocks.append(allocator.alloc(n * page_size))
    rng.shuffle(blocks)
    for b in blocks:
        allocator.free(b)
    width = max(lens) if tight else max(lens) + rng.randint(0, 2) * page_size
    rows = torch.zeros((len(seq_lens), width), dtype=torch.int32, device=device)
    for r, n in enumerate(lens):
        slots = allocator.alloc(n)
        assert slots is not None
        rows[r, :n] = slots.to(torch.int32)
    return pool, rows


def draft_args(seq_lens, page_size, steps, device="cpu"):
    """The tensors SGLang 0.5.23's ``prepare_for_draft`` hands the duplication (paged branch)."""
    import torch

    seq = torch.tensor(seq_lens, dtype=torch.int64, device=device)
    last_page = seq % page_size
    prefix_base = seq - last_page
    num_new_pages = (last_page + steps + page_size - 1) // page_size
    return prefix_base, last_page, num_new_pages


def dense_rows(seq_lens, page_size, topk, steps, device="cpu"):
    """``(rows, slots)`` without an allocator (the benchmarks): request r's row holds distinct slots,
    every branch's pages included, and ``slots`` (a page multiple) covers them; slot 0 stays the pool's
    padding slot."""
    import torch

    prefix_base, _, num_new_pages = draft_args(seq_lens, page_size, steps)
    width = int((prefix_base + topk * num_new_pages * page_size).max())
    rows = (torch.arange(len(seq_lens) * width, dtype=torch.int32, device=device) + 1).view(len(seq_lens), width)
    return rows, -(-(rows.numel() + 1) // page_size) * page_size


def prepare_for_draft(pool, rows, seq_lens, page_size, topk, steps):
    """SGLang 0.5.23's own ``prepare_for_draft`` on ``pool`` and ``rows``, through its paged branch
    (the slots it gathers, and the prefix-tail duplication it calls by its module global, hooked
    or not). Returns ``(out_cache_loc, stopped)``: the batch's draft slots, and where SGLang stopped.
    Its last step builds the model's ``ForwardBatch`` from a scheduler batch, which this stand-in
    batch does not carry: it stops there, after the paged branch has run."""
    from types import SimpleNamespace

    import torch
    from sglang.srt.speculative import eagle_worker_common as ewc

    bs, device = len(seq_lens), rows.device
    batch = SimpleNamespace(
        forward_mode=SimpleNamespace(is_idle=lambda: False),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int64, device=device), seq_lens_cpu=torch.tensor(seq_lens),
        token_to_kv_pool_allocator=SimpleNamespace(page_size=page_size),
        req_pool_indices=torch.arange(bs, device=device), device=device, multimodal_inputs=[None] * bs)
    stopped = None
    try:
        ewc.prepare_for_draft(SimpleNamespace(), SimpleNamespace(req_to_token=rows), batch, None,
                              SimpleNamespace(token_to_kv_pool=pool), topk, steps)
    except Exception as exc:  # noqa: BLE001 -- the ForwardBatch step; the paged branch ran before it
        stopped = f"{type(exc).__name__}: {str(exc)[:120]}"
    return getattr(batch, "out_cache_loc", None), stopped


def branch_mismatches(pool, rows, seq_lens, page_size, topk, steps) -> list:
    """(request, branch, buffer) triples whose first-page prefix tail differs from the prefix's own
    last partial page: what a page-table reader of that branch would attend to."""
    bad = []
    buffers = [*pool.k_buffer, *pool.v_buffer]
    for r, n in enumerate(seq_lens):
        last, base = n % page_size, n - n % page_size
        if last == 0:
            continue
        pages = (last + steps + page_size - 1) // page_size
        prefix = rows[r, base:base + last].long()
        for t in range(1, topk):
            start = base + t * pages * page_size
            copy = rows[r, start:start + last].long()
            for i, buf in enumerate(buffers):
                if not torch_equal(buf[copy], buf[prefix]):
                    bad.append((r, t, i))
    return bad


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
