"""Kernel and draft-preprocess micro-benchmarks: ours against SGLang's built-in, same inputs.

Writes JSON, a Markdown table and a plot to --out. Meant for a GPU; on a CPU it
runs a tiny sweep under the Triton interpreter (timings there mean nothing).

  python scripts/bench_kernels.py --out bench/results/kernels
"""

import argparse
import json
import os
import platform
import time
import warnings

import torch

DEV = "cuda" if torch.cuda.is_available() else "cpu"
if DEV == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def gpu_us(fn, reps=50):
    """Mean wall time per call with the GPU drained before and after (us)."""
    fn()
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t) / reps * 1e6


def host_us(fn, reps=50):
    """Host time to enqueue one call, GPU drained between calls (us)."""
    total = 0.0
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        fn()
        total += time.perf_counter() - t
    sync()
    return total / reps * 1e6


def first_call_ms(fn):
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t) * 1e3


def count_syncs(fn) -> int:
    """Synchronising CUDA calls made by fn, as torch's sync debug mode reports them."""
    if DEV != "cuda":
        return -1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message).lower() for w in caught)


def realistic_pairs(bs, page, topk, slots, gen):
    """Pairs as the assignment kernel lays them out: capacity-padded, and the exact list."""
    from sglang_eagle_paged.kernels.layout import pair_capacity

    last = torch.randint(0, page, (bs,), generator=gen)
    cap = pair_capacity(bs, page, topk)
    n_live = int(last.sum()) * (topk - 1)
    perm = torch.randperm(slots - 1, generator=gen)[: 2 * n_live] + 1
    src_exact, tgt_exact = perm[:n_live], perm[n_live:]
    src_pad = torch.full((cap,), -1, dtype=torch.int64)
    tgt_pad = torch.full((cap,), -1, dtype=torch.int64)
    k = 0
    for i in range(bs):
        for b in range(topk - 1):
            base = (i * (topk - 1) + b) * (page - 1)
            n = int(last[i])
            src_pad[base:base + n] = src_exact[k:k + n]
            tgt_pad[base:base + n] = tgt_exact[k:k + n]
            k += n
    to = lambda x: x.to(DEV)
    return to(src_exact), to(tgt_exact), to(src_pad), to(tgt_pad)


def bench_copy(shapes, layer_counts, heads, head_dim, slots, gen):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    from sglang_eagle_paged.kernels import KVBufferTable, duplicate_kv_pairs

    rows = []
    for layers in layer_counts:
        pool = MHATokenToKVPool(slots, 64, torch.bfloat16, heads, head_dim, layers, DEV, False,
                                enable_kv_cache_copy=True)
        table = KVBufferTable.from_buffers(pool.k_buffer + pool.v_buffer)
        row_bytes = heads * head_dim * 2
        for bs, page, topk in shapes:
            src, tgt, src_pad, tgt_pad = realistic_pairs(bs, page, topk, slots, gen)
            n = src.numel()
            if n == 0:
                continue
            moved = 2 * 2 * layers * n * row_bytes  # K and V, read + write
            t_up = gpu_us(lambda: pool.move_kv_cache(tgt, src))
            t_ours = gpu_us(lambda: duplicate_kv_pairs(table, tgt_pad, src_pad))
            t_ours_exact = gpu_us(lambda: duplicate_kv_pairs(table, tgt, src))

            def torch_index():
                for buf in pool.k_buffer + pool.v_buffer:
                    buf[tgt] = buf[src]

            t_idx = gpu_us(torch_index)
            rows.append(dict(layers=layers, bs=bs, page=page, topk=topk, pairs=n, capacity=src_pad.numel(),
                             upstream_us=round(t_up, 2), ours_us=round(t_ours, 2), ours_exact_us=round(t_ours_exact, 2),
                             torch_index_us=round(t_idx, 2), speedup=round(t_up / t_ours, 1),
                             ours_GBps=round(moved / t_ours / 1e3, 1), upstream_GBps=round(moved / t_up / 1e3, 1)))
            print(json.dumps(rows[-1]), flush=True)
        del pool
    return rows


def bench_assign(bs_list, page, topk, steps, gen):
    from sglang.srt.speculative.spec_utils import assign_draft_cache_locs
    from sglang.srt.utils import next_power_of_2

    from sglang_eagle_paged.kernels import assign_tree_draft_slots
    from sglang_eagle_paged.kernels.layout import extend_lens, num_new_pages_per_branch

    rows = []
    pool_len = 8192
    for bs in bs_list:
        r2t = torch.zeros((bs + 1, pool_len), dtype=torch.int32, device=DEV)
        rpi = torch.arange(1, bs + 1, device=DEV)

        def inputs(seed):
            g = torch.Generator().manual_seed(seed)
            seq = torch.randint(100, 4000, (bs,), generator=g).to(DEV)
            ext = extend_lens(seq, page, topk, steps)
            alloc = torch.arange(int(ext.sum()), dtype=torch.int64, device=DEV) + 1
            return seq, ext, alloc

        seq, ext, alloc = inputs(0)
        t_ours = gpu_us(lambda: assign_tree_draft_slots(rpi, r2t, seq, alloc, page, topk, steps))
        new_len_ms = [round(first_call_ms(lambda s=s: assign_tree_draft_slots(rpi, r2t, *inputs(s)[::2], page, topk, steps)), 3)
                      for s in (1, 2, 3)]

        def upstream(seq, ext, alloc):
            last = seq % page
            dup = int(last.sum()) * (topk - 1)
            s = torch.empty(max(dup, 1), dtype=torch.int32, device=DEV)
            t = torch.empty_like(s)
            assign_draft_cache_locs[(bs,)](rpi, r2t, seq, ext, num_new_pages_per_branch(seq, page, steps), alloc.clone(),
                                           s, t, torch.cumsum(last, 0), dup, pool_len, topk, steps, page,
                                           next_power_of_2(bs), next_power_of_2(steps + page))

        t_up = gpu_us(lambda: upstream(seq, ext, alloc))
        up_new_len_ms = [round(first_call_ms(lambda s=s: upstream(*inputs(s))), 3) for s in (11, 12, 13)]
        rows.append(dict(bs=bs, page=page, topk=topk, steps=steps, ours_us=round(t_ours, 2), upstream_us=round(t_up, 2),
                         ours_new_copy_len_ms=new_len_ms, upstream_new_copy_len_ms=up_new_len_ms))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def bench_preprocess(shapes, steps, gen):
    """Ours vs SGLang's _draft_preprocess_decode on the same real pools and batch."""
    from sglang.srt.speculative.eagle_worker import EAGLEWorker

    from sglang_eagle_paged.harness import PagedTreeHarness
    from sglang_eagle_paged.mode import Mode
    from sglang_eagle_paged.worker import draft_preprocess_decode

    stock = EAGLEWorker._draft_preprocess_decode
    stock = getattr(stock, "__wrapped__", stock)
    rows = []
    for bs, page, topk in shapes:
        h = PagedTreeHarness(page, topk, steps, num_tokens=max(1 << 16, bs * 4096 * 2), head_num=8, head_dim=128,
                             max_reqs=bs + 1, max_context_len=8192, device=DEV, kv_copy=True)
        g = torch.Generator().manual_seed(bs * 7 + page)
        rowids = [h.add_request(int(n)) for n in torch.randint(16, 3000, (bs,), generator=g)]
        worker = h.worker
        worker.extend_lens = torch.empty((), dtype=torch.int64, device=DEV)
        worker.num_new_pages_per_topk = torch.empty((), dtype=torch.int64, device=DEV)
        # One batch, built outside the timed calls: its host-to-device copies are the
        # scheduler's cost, not the step's, and would count as syncs.
        batch = h.batch(rowids)
        ours = lambda: draft_preprocess_decode(worker, batch, Mode.ON)
        theirs = lambda: stock(worker, batch)
        row = dict(bs=bs, page=page, topk=topk, steps=steps)
        for name, fn in (("ours", ours), ("upstream", theirs)):
            fn()
            row[f"{name}_gpu_us"] = round(gpu_us(fn, 20), 1)
            row[f"{name}_host_us"] = round(host_us(fn, 20), 1)
            row[f"{name}_syncs"] = count_syncs(fn)
        rows.append(row)
        print(json.dumps(row), flush=True)
        del h
    return rows


def d2d_bandwidth():
    if DEV != "cuda":
        return None
    x = torch.empty(2 << 30, dtype=torch.uint8, device=DEV)
    y = torch.empty_like(x)
    us = gpu_us(lambda: y.copy_(x), 10)
    return round(2 * x.numel() / us / 1e3, 1)


def launch_overhead_us():
    e = torch.empty(1, device=DEV)
    return round(gpu_us(lambda: e.add_(1), 200), 2)


def markdown(res) -> str:
    out = [f"# Kernel benchmarks ({res['device']}, {res['date']})", "",
           f"sglang {res['versions']['sglang']}, torch {res['versions']['torch']}, triton {res['versions']['triton']}. "
           f"D2D copy: {res['d2d_GBps']} GB/s (read+write); empty launch: {res['launch_us']} us.", "",
           "## Duplication (move_kv_cache vs ours, same pairs)", "",
           "| layers | bs | page | topk | pairs | SGLang us | ours us (padded) | ours us (exact) | torch index us | speedup | ours GB/s |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["copy"]:
        out.append(f"| {r['layers']} | {r['bs']} | {r['page']} | {r['topk']} | {r['pairs']} | {r['upstream_us']} | {r['ours_us']} | "
                   f"{r['ours_exact_us']} | {r['torch_index_us']} | {r['speedup']}x | {r['ours_GBps']} |")
    out += ["", "## Assignment kernel", "", "| bs | page | topk | steps | SGLang us | ours us | SGLang new copy length (ms) | ours new copy length (ms) |",
            "|---|---|---|---|---|---|---|---|"]
    for r in res["assign"]:
        out.append(f"| {r['bs']} | {r['page']} | {r['topk']} | {r['steps']} | {r['upstream_us']} | {r['ours_us']} | "
                   f"{r['upstream_new_copy_len_ms']} | {r['ours_new_copy_len_ms']} |")
    out += ["", "## _draft_preprocess_decode", "", "| bs | page | topk | SGLang GPU us | ours GPU us | SGLang host us | ours host us | SGLang syncs | ours syncs |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in res["preprocess"]:
        out.append(f"| {r['bs']} | {r['page']} | {r['topk']} | {r['upstream_gpu_us']} | {r['ours_gpu_us']} | {r['upstream_host_us']} | "
                   f"{r['ours_host_us']} | {r['upstream_syncs']} | {r['ours_syncs']} |")
    return "\n".join(out) + "\n"


def plot(res, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    rows = [r for r in res["copy"] if r["layers"] == 1]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["upstream_us"] for r in rows], 0.4, label="SGLang move_kv_cache")
    ax.bar([x + 0.2 for x in xs], [r["ours_us"] for r in rows], 0.4, label="ours (capacity-padded)")
    ax.set_yscale("log")
    ax.set_xticks(list(xs), [f"bs{r['bs']}/p{r['page']}/k{r['topk']}" for r in rows], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("us per draft step (1 layer)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench_kernels")
    ap.add_argument("--quick", action="store_true", help="a few shapes only")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import sglang
    import triton

    from sglang_eagle_paged.harness import _ensure_global_server_args

    _ensure_global_server_args()
    gen = torch.Generator().manual_seed(0)
    if DEV == "cpu":
        shapes, layers, heads, hd, slots = [(2, 16, 4)], [1], 1, 8, 1 << 12
        a_bs, p_shapes = [2], [(2, 16, 4)]
    else:
        shapes = [(1, 64, 8), (8, 64, 8), (64, 64, 8), (64, 128, 8), (256, 128, 8), (1, 16, 2), (64, 16, 4),
                  (128, 256, 10), (256, 256, 10)]
        if args.quick:
            shapes = shapes[:5]
        layers, heads, hd, slots = [1, 4], 8, 128, 1 << 21
        a_bs, p_shapes = [1, 8, 64, 256], [(1, 64, 8), (16, 64, 8), (64, 64, 8), (64, 128, 8), (128, 16, 4)]
    res = dict(device=torch.cuda.get_device_name() if DEV == "cuda" else "cpu (Triton interpreter)",
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), host=platform.node(),
               versions=dict(sglang=sglang.__version__, torch=torch.__version__, triton=triton.__version__),
               d2d_GBps=d2d_bandwidth(), launch_us=launch_overhead_us())
    res["copy"] = bench_copy(shapes, layers, heads, hd, slots, gen)
    res["assign"] = bench_assign(a_bs, 64, 8, 5, gen)
    res["preprocess"] = bench_preprocess(p_shapes, 5, gen)
    with open(os.path.join(args.out, "kernels.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(args.out, "kernels.md"), "w") as f:
        f.write(markdown(res))
    plot(res, os.path.join(args.out, "kernels.png"))
    print(markdown(res))


if __name__ == "__main__":
    main()
