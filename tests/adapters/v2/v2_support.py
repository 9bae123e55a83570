"""Shared by the v2 adapter tests: SGLang 0.5.23's real pools on CPU, rows laid out as its
scheduler lays them, a host-read probe and a launch counter."""

import importlib.metadata
import random
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

TESTED = "0.5.23"


def installed_sglang():
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def require_sglang():
    """Skip the calling test module unless SGLang 0.5.23 (the v2 CPU environment) is installed."""
    v = installed_sglang()
    if v != TESTED:
        pytest.skip(f"needs SGLang {TESTED} (scripts/setup_cpu.sh builds it); installed: {v}", allow_module_level=True)
    standins = Path(__file__).resolve().parents[3] / "scripts" / "cpu_standins"
    if str(standins) not in sys.path:
        sys.path.append(str(standins))


# ------------------------------------------------------------------ host-read probe

SYNCING_CALLS = {"nonzero", "argwhere", "item", "tolist", "__bool__", "__int__", "__index__", "__float__",
                 "masked_select", "unique", "numpy", "cpu", "nonzero_static"}


class HostReads:
    """A TorchFunctionMode that records every call which makes the host wait for a device tensor's
    values: the calls in SYNCING_CALLS, and indexing with a boolean tensor. Paused while a Triton
    kernel runs (on a GPU a launch reads nothing back; the CPU interpreter does)."""

    def __init__(self):
        from torch.overrides import TorchFunctionMode

        outer = self

        class _Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if not outer.paused:
                    outer._check(func, args)
                return func(*args, **kwargs)

        self.mode = _Mode()
        self.reads = []
        self.paused = False

    def _check(self, func, args):
        import torch

        name = getattr(func, "__name__", str(func))
        if name in SYNCING_CALLS:
            self.reads.append(name)
        elif name in ("__getitem__", "__setitem__", "index_put_", "index_put") and len(args) > 1:
            idx = args[1] if isinstance(args[1], tuple) else (args[1],)
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in idx):
                self.reads.append(f"{name}[bool mask]")

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


@contextmanager
def observe():
    """``(probe, launches)``: host reads outside kernels, and the Triton kernels launched (names)."""
    from triton.runtime.interpreter import InterpretedFunction

    launches = []
    orig = InterpretedFunction.run
    probe = HostReads()

    def run(self, *args, grid, warmup, **kwargs):
        launches.append(self.fn.__name__)
        was, probe.paused = probe.paused, True
        try:
            return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            probe.paused = was

    InterpretedFunction.run = run
    try:
        with probe:
            yield probe, launches
    finally:
        InterpretedFunction.run = orig


# ------------------------------------------------------------------ pools and rows

def make_pool(page_size, size, *, head_num=2, head_dim=4, layer_num=2, dtype=None, v_head_dim=None, cls=None,
              **extra):
    import torch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    cls = cls or MHATokenToKVPool
    size = -(-size // page_size) * page_size
    return cls(size, page_size, dtype or torch.bfloat16, head_num, head_dim, layer_num, "cpu",
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


def layout_rows(seq_lens, page_size, topk, steps, *, seed, num_draft_tokens=None, tight=False):
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
    pool = make_pool(page_size, (pages + 3 * len(seq_lens) + 8) * page_size)
    allocator = PagedTokenToKVPoolAllocator(pool.size, page_size, torch.int64, "cpu", pool, need_sort=False)
    # churn: allocate everything in blocks, free in random order -> a shuffled free list
    blocks = []
    while len(allocator.free_pages) > 0:
        n = min(len(allocator.free_pages), rng.randint(1, 3))
        blocks.append(allocator.alloc(n * page_size))
    rng.shuffle(blocks)
    for b in blocks:
        allocator.free(b)
    width = max(lens) if tight else max(lens) + rng.randint(0, 2) * page_size
    rows = torch.zeros((len(seq_lens), width), dtype=torch.int32)
    for r, n in enumerate(lens):
        slots = allocator.alloc(n)
        assert slots is not None
        rows[r, :n] = slots.to(torch.int32)
    return pool, rows


def draft_args(seq_lens, page_size, steps):
    """The tensors SGLang 0.5.23's ``prepare_for_draft`` hands the duplication (paged branch)."""
    import torch

    seq = torch.tensor(seq_lens, dtype=torch.int64)
    last_page = seq % page_size
    prefix_base = seq - last_page
    num_new_pages = (last_page + steps + page_size - 1) // page_size
    return prefix_base, last_page, num_new_pages
