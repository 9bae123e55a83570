"""Kernel and draft-preprocess micro-benchmarks: ours against SGLang's built-in, same inputs.

Writes JSON, a Markdown table and a plot to --out. Meant for a GPU; on a CPU it
runs a tiny sweep under the Triton interpreter (timings there mean nothing).

Each kernel gets three times per call, because for kernels of a few microseconds
the Python/Triton launch cost, not the GPU, bounds back-to-back calls:
  device: GPU time, from replaying a CUDA graph of the calls (no launch cost);
  wall:   back-to-back calls with the GPU drained before and after;
  host:   time to enqueue one call on an idle GPU.

  python -m bench.kernels --out bench/results/kernels
"""

import argparse
import json
import os
import pkgutil
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


# Why a graph capture failed, by label; written to the JSON next to the None it left.
CAPTURE_FAILURES = {}

# Device work one measurement may spend: SGLang's copy takes ~0.3 s a call at the
# largest shapes, where 50 calls would dominate the whole sweep.
BUDGET_US = 200_000


def graph_us(fn, reps=20, replays=5, label=None):
    """GPU time per call (us): reps calls captured in one CUDA graph, replays timed with events.

    A replay launches every captured kernel from one host call, so this leaves out
    launch cost. None on CPU, or when fn cannot be captured (a sync, a host read);
    the reason goes to CAPTURE_FAILURES[label].
    """
    if DEV != "cuda":
        return None
    try:
        # Warm-up on a side stream, as capture requires: compiles Triton kernels and
        # lets the caching allocator settle outside the graph.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(reps):
                fn()
        graph.replay()  # first replay uploads the graph
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / (replays * reps)
    except Exception as e:  # noqa: BLE001 - any capture failure means "not capturable"
        # capture_end's own error hides the one that broke the capture: report the first.
        while e.__context__ is not None:
            e = e.__context__
        CAPTURE_FAILURES[label or repr(fn)] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
        torch.cuda.synchronize()
        return None


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


def measure(fn, label, reps=50):
    """Device, wall and host time per call of fn (us), as the module docstring defines them.

    Slow fn get fewer reps (at least 3) so a row costs about BUDGET_US. The graph goes
    last: a capture that fails part-way must not disturb the other two timings.
    """
    n = max(3, min(reps, int(BUDGET_US / max(gpu_us(fn, 1), 1e-3))))
    res = dict(wall_us=round(gpu_us(fn, n), 2), host_us=round(host_us(fn, n), 2))
    device = graph_us(fn, min(n, 20), label=label)
    res["device_us"] = None if device is None else round(device, 2)
    if device is None:
        res["device_na"] = "cpu" if DEV != "cuda" else ("syncs" if count_syncs(fn) > 0 else "capture failed")
    return res


def prefixed(prefix, times):
    return {f"{prefix}_{k}": v for k, v in times.items()}


def realistic_pairs(bs, page, topk, slots, gen):
    """Pairs as the assignment kernel lays them out: capacity-padded, and the exact list."""
    from sglang_eagle_paged.tree_layout import pair_capacity

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

            def torch_index():
                for buf in pool.k_buffer + pool.v_buffer:
                    buf[tgt] = buf[src]

            row = dict(layers=layers, bs=bs, page=page, topk=topk, pairs=n, capacity=src_pad.numel())
            for name, fn in (("upstream", lambda: pool.move_kv_cache(tgt, src)),
                             ("ours", lambda: duplicate_kv_pairs(table, tgt_pad, src_pad)),
                             ("ours_exact", lambda: duplicate_kv_pairs(table, tgt, src)),
                             ("torch_index", torch_index)):
                row.update(prefixed(name, measure(fn, f"copy L{layers} bs{bs} p{page} k{topk} {name}")))
            # Bandwidth and speedup from GPU time when both sides have it; wall time
            # would mostly compare launch costs at small shapes.
            basis = "device" if row["ours_device_us"] and row["upstream_device_us"] else "wall"
            t_up, t_ours = row[f"upstream_{basis}_us"], row[f"ours_{basis}_us"]
            row.update(basis=basis, speedup=round(t_up / t_ours, 1),
                       ours_GBps=round(moved / t_ours / 1e3, 1), upstream_GBps=round(moved / t_up / 1e3, 1))
            rows.append(row)
            print(json.dumps(row), flush=True)
        pool = table = None  # free these buffers before the next layer count's pool (a del here reads as undefined to pyflakes)
    return rows


def sglang_v2_duplicate():
    """SGLang's own ``duplicate_prefix_tail_to_draft_branches`` where this SGLang has one (0.5.13+), else None."""
    try:
        from sglang_eagle_paged.adapters.v2 import hook_points

        return pkgutil.resolve_name(hook_points.home_for(hook_points.installed_version()).target)
    except Exception:  # noqa: BLE001 - a v1 release: no v2 worker, nothing of SGLang's to compare
        return None


def bench_v2_duplicate(shapes, layer_counts, heads, head_dim, gen):
    """The v2 draft's prefix-tail duplication: ours (one launch that finds the pairs itself), ours before
    (torch builds the pair buffers, then the pair-copy launch) and SGLang's own function, same pool."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    from sglang_eagle_paged.kernels import KVBufferTable, duplicate_kv_pairs
    from sglang_eagle_paged.kernels.prefix_tail import duplicate_prefix_tail, tail_pairs
    from sglang_eagle_paged.tools.v2_harness import dense_rows, draft_args

    upstream = sglang_v2_duplicate()
    rows_out = []
    for layers in layer_counts:
        for bs, page, topk, steps in shapes:
            seq = torch.randint(1, 2 * page + 1, (bs,), generator=gen).tolist()  # page-aligned ones included
            rows, slots = dense_rows(seq, page, topk, steps, DEV)
            base, last, pages = draft_args(seq, page, steps, DEV)
            pool = MHATokenToKVPool(slots, page, torch.bfloat16, heads, head_dim, layers, DEV, False,
                                    enable_kv_cache_copy=True)
            table = KVBufferTable.from_buffers(pool.k_buffer + pool.v_buffer)
            args = (rows, base, last, pages, topk, page)
            impls = [("ours", lambda: duplicate_prefix_tail(table, *args)),
                     ("ours_torch_pairs", lambda: duplicate_kv_pairs(table, *tail_pairs(*args)))]
            if upstream is not None:
                impls.append(("upstream", lambda: upstream(pool, *args)))
            row = dict(layers=layers, bs=bs, page=page, topk=topk, steps=steps,
                       pairs=int(last.sum()) * (topk - 1))
            for name, fn in impls:
                row.update(prefixed(name, measure(fn, f"v2 dup L{layers} bs{bs} p{page} k{topk} {name}")))
            rows_out.append(row)
            print(json.dumps(row), flush=True)
            pool = table = None  # free before the next shape's pool
    return rows_out


def bench_verify_move(shapes, layers, heads, head_dim, slots, gen):
    """The target pool's move_kv_cache after a paged tree verify: SGLang's vs ours (one launch per chunk).

    SGLang's kernel takes next_power_of_2(pairs) as a constexpr: its first call at a new
    bucket compiles. Both run on the same pool; each side gets its own copy of the pairs.
    """
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    from sglang_eagle_paged.tools.harness import verify_compaction_pairs
    from sglang_eagle_paged.kernels import KVBufferTable
    from sglang_eagle_paged.kernels.move_rows import move_kv_rows

    pool = MHATokenToKVPool(slots, 64, torch.bfloat16, heads, head_dim, layers, DEV, False,
                            enable_kv_cache_copy=True)
    table = KVBufferTable.from_buffers(pool.k_buffer + pool.v_buffer)
    row_bytes = heads * head_dim * 2
    rows = []
    for bs, draft_tokens, mean_accept in shapes:
        accepted = torch.clamp(torch.poisson(torch.full((bs,), float(mean_accept)), generator=gen), 1,
                               draft_tokens).long()
        tgt, src = (t.to(DEV) for t in verify_compaction_pairs(accepted, draft_tokens, slots, gen))
        n = tgt.numel()
        row = dict(layers=layers, bs=bs, draft_tokens=draft_tokens, pairs=n)
        row["upstream_first_call_ms"] = round(first_call_ms(lambda: pool.move_kv_cache(tgt, src)), 2)
        row["ours_first_call_ms"] = round(first_call_ms(lambda: move_kv_rows(table, tgt, src)), 2)
        for name, fn in (("upstream", lambda: pool.move_kv_cache(tgt, src)),
                         ("ours", lambda: move_kv_rows(table, tgt, src))):
            row.update(prefixed(name, measure(fn, f"verify move L{layers} bs{bs} n{n} {name}")))
        basis = "device" if row["ours_device_us"] and row["upstream_device_us"] else "wall"
        moved = 2 * 2 * layers * n * row_bytes
        row.update(basis=basis, speedup=round(row[f"upstream_{basis}_us"] / row[f"ours_{basis}_us"], 1),
                   ours_GBps=round(moved / row[f"ours_{basis}_us"] / 1e3, 1),
                   upstream_GBps=round(moved / row[f"upstream_{basis}_us"] / 1e3, 1))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def bench_verify_bookkeeping(shapes, gen):
    """SGLang's torch.compile'd ``get_src_tgt_cache_loc`` (run once per paged tree verify) vs ours
    (one Triton launch, the REPLACE hook's default) and the same ops in eager torch (our fallback),
    same inputs; first call includes Dynamo's or Triton's compile."""
    from sglang.srt.speculative import spec_utils

    from sglang_eagle_paged.tools.harness import verify_bookkeeping_inputs
    from sglang_eagle_paged.kernels.verify_bookkeeping import src_and_free_counts
    from sglang_eagle_paged.adapters.v1.verify import src_tgt_cache_loc_eager

    rows = []
    for bs, draft_tokens, page in shapes:
        args = [t.to(DEV) for t in verify_bookkeeping_inputs(gen, bs, draft_tokens, page)] + [draft_tokens, page]
        row = dict(bs=bs, draft_tokens=draft_tokens, page=page)
        impls = (("upstream", lambda: spec_utils.get_src_tgt_cache_loc(*args)),
                 ("ours", lambda: src_and_free_counts(*args)), ("eager", lambda: src_tgt_cache_loc_eager(*args)))
        for name, fn in impls:
            row[f"{name}_first_call_ms"] = round(first_call_ms(fn), 2)
        theirs, *mine = (fn() for _, fn in impls)
        row["identical"] = all(torch.equal(theirs[0], m[0]) and torch.equal(theirs[2], m[2]) for m in mine)
        for name, fn in impls:
            row.update(prefixed(name, measure(fn, f"verify bookkeeping bs{bs} p{page} {name}")))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def bench_assign(bs_list, page, topk, steps, gen):
    from sglang.srt.speculative.spec_utils import assign_draft_cache_locs
    from sglang.srt.utils import next_power_of_2

    from sglang_eagle_paged.kernels import (
        assign_tree_draft_slots, assign_tree_draft_slots_from_free_pages)
    from sglang_eagle_paged.tree_layout import extend_lens, new_pages, num_new_pages_per_branch

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
        # As the worker calls it: three output tensors allocated per call ...
        ours = lambda: assign_tree_draft_slots(rpi, r2t, seq, alloc, page, topk, steps)
        # ... and into buffers kept across steps, which leaves only the launch.
        layout = ours()
        ours_out = lambda: assign_tree_draft_slots(rpi, r2t, seq, alloc, page, topk, steps, out=layout)
        new_len_ms = [round(first_call_ms(lambda s=s: assign_tree_draft_slots(rpi, r2t, *inputs(s)[::2], page, topk, steps)), 3)
                      for s in (1, 2, 3)]
        # The draft step's fast path: the slots alloc_extend would give, read from a shuffled free
        # list (a slice at an offset, as the allocator's is) inside the assignment's one launch ...
        n_pages = int(new_pages(seq, page, topk, steps).sum())
        free = (torch.randperm(n_pages + 8, generator=gen) + 1).to(DEV)[3:]
        ours_free = lambda: assign_tree_draft_slots_from_free_pages(rpi, r2t, seq, free, page, topk, steps)
        # (The two-launch form it replaced, slots then assignment, is measured in results before
        # 2026-12-01; its slots kernel is now a test reference, tests/helpers/tree_alloc.py.)

        def upstream_args(seq, ext, alloc):
            """The kernel's inputs as SGLang's preprocess computes them; int() syncs."""
            last = seq % page
            dup = int(last.sum()) * (topk - 1)
            s = torch.empty(max(dup, 1), dtype=torch.int32, device=DEV)
            return (rpi, r2t, seq, ext, num_new_pages_per_branch(seq, page, steps), alloc.clone(), s, torch.empty_like(s),
                    torch.cumsum(last, 0), dup, pool_len, topk, steps, page, next_power_of_2(bs), next_power_of_2(steps + page))

        def upstream(seq, ext, alloc):
            assign_draft_cache_locs[(bs,)](*upstream_args(seq, ext, alloc))

        # The launch alone, inputs built once: the part of SGLang's step a graph can hold.
        # Replays rewrite its out_cache_loc in place; that changes values, not the work.
        args = upstream_args(seq, ext, alloc)
        upstream_kernel = lambda: assign_draft_cache_locs[(bs,)](*args)
        row = dict(bs=bs, page=page, topk=topk, steps=steps)
        for name, fn in (("ours", ours), ("ours_out", ours_out), ("ours_free_pages", ours_free),
                         ("upstream_kernel", upstream_kernel),
                         ("upstream", lambda: upstream(seq, ext, alloc))):
            row.update(prefixed(name, measure(fn, f"assign bs{bs} {name}")))
        row["ours_new_copy_len_ms"] = new_len_ms
        row["upstream_new_copy_len_ms"] = [round(first_call_ms(lambda s=s: upstream(*inputs(s))), 3) for s in (11, 12, 13)]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def preprocess_case(bs, page, topk, steps):
    """A harness holding bs requests of random prefix lengths, its worker, and one batch of them."""
    from sglang_eagle_paged.tools.harness import PagedTreeHarness

    h = PagedTreeHarness(page, topk, steps, num_tokens=max(1 << 16, bs * 4096 * 2), head_num=8, head_dim=128,
                         max_reqs=bs + 1, max_context_len=8192, device=DEV, kv_copy=True)
    g = torch.Generator().manual_seed(bs * 7 + page)
    rowids = [h.add_request(int(n)) for n in torch.randint(16, 3000, (bs,), generator=g)]
    worker = h.worker
    worker.extend_lens = torch.empty((), dtype=torch.int64, device=DEV)
    worker.num_new_pages_per_topk = torch.empty((), dtype=torch.int64, device=DEV)
    # One batch, built outside the timed calls: its host-to-device copies are the
    # scheduler's cost, not the step's, and would count as syncs.
    return h, worker, h.batch(rowids)


def bench_preprocess(shapes, steps, gen):
    """Ours vs SGLang's _draft_preprocess_decode on the same real pools and batch."""
    from sglang.srt.speculative.eagle_worker import EAGLEWorker

    from sglang_eagle_paged.settings import Mode
    from sglang_eagle_paged.adapters.v1.draft_preprocess import draft_preprocess_decode

    stock = EAGLEWorker._draft_preprocess_decode
    stock = getattr(stock, "__wrapped__", stock)
    rows = []
    for bs, page, topk in shapes:
        h, worker, batch = preprocess_case(bs, page, topk, steps)
        ours = lambda: draft_preprocess_decode(worker, batch, Mode.ON)
        theirs = lambda: stock(worker, batch)
        row = dict(bs=bs, page=page, topk=topk, steps=steps)
        for name, fn in (("ours", ours), ("upstream", theirs)):
            fn()
            row[f"{name}_syncs"] = count_syncs(fn)
            row.update(prefixed(name, measure(fn, f"preprocess bs{bs} p{page} k{topk} {name}", 20)))
        rows.append(row)
        print(json.dumps(row), flush=True)
        del h
    return rows


def _expand_inputs(bs, topk, steps, page, gen):
    """FA3's tree-draft expand inputs as the draft step builds them: each branch's drafts
    start last_page_len slots into its own first page and run on for `steps` slots."""
    last = torch.randint(0, page, (bs,), generator=gen)
    first_pages = torch.randperm(1 << 16, generator=gen)[: bs * topk].view(bs, topk) + 1
    loc = (first_pages[:, :, None] * page + last[:, None, None] + torch.arange(steps)[None, None, :])
    return last.to(DEV), loc.view(bs * topk, steps).to(DEV)


def bench_fa3_expand(shapes, gen):
    """FA3's torch.compile'd draft_decode_set_expand_metadata vs our one launch (part of the
    default fused metadata; alone with SGLANG_EAGLE_PAGED_FA3_EXPAND=1)."""
    from sglang.srt.layers.attention import flashattention_backend as fa3

    from sglang_eagle_paged.kernels.expand_metadata import expand_draft_page_table

    compiled = fa3.draft_decode_set_expand_metadata
    # On a CPU, calling the compiled function would build C++ with inductor: use its
    # eager original there (the comparison of outputs is what matters on a CPU).
    sglang_fn = compiled if DEV == "cuda" else getattr(compiled, "_torchdynamo_orig_callable", compiled)
    rows = []
    for bs, topk, steps, page in shapes:
        last, loc = _expand_inputs(bs, topk, steps, page, gen)
        decode_length = steps // 2 + 1

        def buffers():
            return (torch.zeros(bs * topk, dtype=torch.int32, device=DEV),
                    torch.full((bs * topk, steps), -7, dtype=torch.int32, device=DEV))

        a, b = buffers(), buffers()
        row = dict(bs=bs, topk=topk, steps=steps, page=page)
        row["upstream_first_call_ms"] = round(first_call_ms(
            lambda: sglang_fn(a[0], a[1], last, decode_length, loc, topk, page)), 2)  # Dynamo compile
        row["ours_first_call_ms"] = round(first_call_ms(
            lambda: expand_draft_page_table(b[0], b[1], last, decode_length, loc, topk, page)), 2)
        row["identical"] = bool(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]))
        for name, fn in (("upstream", lambda: sglang_fn(a[0], a[1], last, decode_length, loc, topk, page)),
                         ("ours", lambda: expand_draft_page_table(b[0], b[1], last, decode_length, loc, topk, page))):
            row.update(prefixed(name, measure(fn, f"fa3 expand bs{bs} k{topk} s{steps} p{page} {name}")))
        rows.append(row)
    return rows


def bench_fa3_replay(shapes, seed=0):
    """FA3's draft-decode replay metadata for all steps (FlashAttentionMultiStepBackend), as the
    draft CUDA graph runner calls it every draft round: SGLang's at page N, ours (fused) at
    page N, and SGLang's at page 1 (what page N has to match end to end)."""
    import copy
    import random
    import types
    from unittest import mock

    from sglang.srt.layers.attention import flashattention_backend as fa3

    from sglang_eagle_paged.adapters.common import fa3_metadata
    from sglang_eagle_paged.tools.harness import DraftInputStub, branch_slots, fa3_multi_step_backend

    sglang_replay = fa3.FlashAttentionMultiStepBackend.init_forward_metadata_replay_cuda_graph
    compiled = fa3.draft_decode_set_expand_metadata
    # On a CPU the compiled expand builder would build C++ with inductor: its eager original there.
    expand = compiled if DEV == "cuda" else getattr(compiled, "_torchdynamo_orig_callable", compiled)
    rng = random.Random(seed)
    rows = []
    with mock.patch.object(fa3, "draft_decode_set_expand_metadata", expand):
        for bs, topk, steps, page in shapes:
            max_ctx = 8192
            seq = [rng.randint(1, 4000) for _ in range(bs)]

            def batch(page_size):
                loc = branch_slots(rng, seq, topk, page_size, steps) if page_size > 1 else \
                    torch.tensor(rng.sample(range(1, 1 << 20), bs * topk * steps))
                seq_lens = torch.tensor(seq, dtype=torch.int64)
                return types.SimpleNamespace(
                    batch_size=bs, req_pool_indices=torch.arange(bs, device=DEV), seq_lens=seq_lens.to(DEV),
                    seq_lens_sum=sum(seq), seq_lens_cpu=seq_lens, out_cache_loc=loc.to(DEV), encoder_lens=None,
                    spec_info=DraftInputStub(), positions=None)

            multi = fa3_multi_step_backend(topk, steps, page, [bs], max_ctx=max_ctx, pool=bs, device=DEV)
            multi_p1 = fa3_multi_step_backend(topk, steps, 1, [bs], max_ctx=max_ctx, pool=bs, device=DEV)
            fb, fb1 = batch(page), batch(1)
            ma, mb = copy.deepcopy(multi), copy.deepcopy(multi)
            sglang_replay(ma, fb, bs)
            fa3_metadata.fused_replay_hook(sglang_replay, mb, fb, bs)
            same = all(torch.equal(getattr(a, d)[bs].page_table, getattr(b, d)[bs].page_table)
                       and torch.equal(getattr(a, d)[bs].cache_seqlens_int32, getattr(b, d)[bs].cache_seqlens_int32)
                       for a, b in zip(ma.attn_backends, mb.attn_backends)
                       for d in ("draft_decode_metadata_topk_normal", "draft_decode_metadata_topk_expand"))
            row = dict(bs=bs, topk=topk, steps=steps, page=page, identical=bool(same))
            for name, fn in (("upstream", lambda: sglang_replay(ma, fb, bs)),
                             ("ours", lambda: fa3_metadata.fused_replay_hook(sglang_replay, mb, fb, bs)),
                             ("upstream_p1", lambda: sglang_replay(multi_p1, fb1, bs))):
                row.update(prefixed(name, measure(fn, f"fa3 replay bs{bs} k{topk} s{steps} p{page} {name}")))
            rows.append(row)
            print(json.dumps(row), flush=True)
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


def empty_triton_launch():
    """fn that launches a Triton kernel doing nothing: the floor under any one-kernel op."""
    import triton

    @triton.jit
    def _empty(x_ptr):
        pass

    x = torch.empty(1, device=DEV)
    return lambda: _empty[(1,)](x)


def timing_cells(r, p) -> str:
    """'device | wall | host' cells of implementation p in row r."""
    device = r[f"{p}_device_us"]
    if device is None:
        device = f"n/a ({r.get(f'{p}_device_na', 'not measured')})"
    return f"{device} | {r[f'{p}_wall_us']} | {r[f'{p}_host_us']}"


TIMING_HEAD = "device us (graph) | wall us (back-to-back) | host us (enqueue)"


def _impl_table(rows, title, text, keys, impls, extras, heads=None, page_1=None) -> list:
    """A section with one line per (shape, implementation): the shape's ``keys``, the name,
    the timing cells, then ``extras`` (header, cell(row, implementation)). ``page_1`` names
    the implementation measured at page 1 whatever the row's page."""
    if not rows:
        return []
    head = " | ".join(heads or keys)
    extra_heads = "".join(f" | {h}" for h, _ in extras)
    out = ["", f"## {title}", "", text, "", f"| {head} | implementation | {TIMING_HEAD}{extra_heads} |",
           "|" + "---|" * (len(keys) + 4 + len(extras))]
    for r in rows:
        for p, name in impls:
            if not any(k.startswith(p + "_") for k in r):
                continue  # a result file from before this implementation was measured
            shape = " | ".join(str(1 if k == "page" and p == page_1 else r[k]) for k in keys)
            cells = "".join(f" | {cell(r, p)}" for _, cell in extras)
            out.append(f"| {shape} | {name} | {timing_cells(r, p)}{cells} |")
    return out


def markdown(res) -> str:
    out = [f"# Kernel benchmarks ({res['device']}, {res['date']})", "",
           f"sglang {res['versions']['sglang']}, torch {res['versions']['torch']}, triton {res['versions']['triton']}. "
           f"D2D copy: {res['d2d_GBps']} GB/s (read+write); empty torch launch (`add_`, wall back-to-back): "
           f"{res['launch_us']} us.", "",
           "Times are per call. **device**: GPU time, from timing replays of a CUDA graph holding the calls, so no "
           "launch cost. **wall**: calls back to back with the GPU drained before and after; for small kernels the "
           "Python/Triton launch cost, not the GPU, bounds it. **host**: time to enqueue one call on an idle GPU. "
           "n/a (syncs): the call waits on the GPU, so it cannot be put in a graph.", "",
           "## Duplication (move_kv_cache vs ours, same pairs)", "",
           f"| layers | bs | page | topk | pairs | implementation | {TIMING_HEAD} | vs SGLang | GB/s |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    names = dict(upstream="SGLang move_kv_cache", ours="ours (capacity-padded)", ours_exact="ours (exact pairs)",
                 torch_index="torch indexing")
    for r in res["copy"]:
        shape = f"| {r['layers']} | {r['bs']} | {r['page']} | {r['topk']} | {r['pairs']}"
        for p, name in names.items():
            extra = {"upstream": f" | | {r['upstream_GBps']}", "ours": f" | {r['speedup']}x | {r['ours_GBps']}"}.get(p, " | |")
            out.append(f"{shape} | {name} | {timing_cells(r, p)}{extra} |")
    bases = {r["basis"] for r in res["copy"]}
    basis = next(iter(bases)) if len(bases) == 1 else "device where both sides have it, else wall"
    out += ["", f"Speedup and GB/s are from {basis} time.", "", "## Assignment kernel", "",
            f"| bs | page | topk | steps | what | {TIMING_HEAD} |", "|---|---|---|---|---|---|---|---|"]
    names = dict(ours="ours, outputs allocated per call", ours_out="ours, preallocated `out=`",
                 ours_free_pages="ours from the free pages, one launch (the draft step's fast path)",
                 ours_two_launches="ours from the free pages, slots then assignment (two launches)",
                 upstream_kernel="SGLang assign_draft_cache_locs, launch only",
                 upstream="SGLang assign_draft_cache_locs with its input prep")
    for r in res["assign"]:
        for p, name in names.items():
            if f"{p}_wall_us" in r:  # results from before the free-page variant lack its rows
                out.append(f"| {r['bs']} | {r['page']} | {r['topk']} | {r['steps']} | {name} | {timing_cells(r, p)} |")
    out.append(f"| - | - | - | - | empty Triton kernel (launch floor) | {timing_cells(res, 'empty_triton')} |")
    out += ["", "First call at a new duplicate-pair count (ms): SGLang's kernel takes it as a constexpr and recompiles.", "",
            "| bs | SGLang | ours |", "|---|---|---|"]
    for r in res["assign"]:
        out.append(f"| {r['bs']} | {r['upstream_new_copy_len_ms']} | {r['ours_new_copy_len_ms']} |")
    out += ["", "## _draft_preprocess_decode", "",
            f"| bs | page | topk | implementation | {TIMING_HEAD} | syncs |", "|---|---|---|---|---|---|---|---|"]
    for r in res["preprocess"]:
        for p, name in (("upstream", "SGLang"), ("ours", "ours")):
            out.append(f"| {r['bs']} | {r['page']} | {r['topk']} | {name} | {timing_cells(r, p)} | {r[f'{p}_syncs']} |")
    out += _impl_table(
        res.get("v2_duplicate"), "v2 prefix-tail duplication (`duplicate_prefix_tail_to_draft_branches`)",
        "The v2 draft step's copy of each prefix's partial last page into every branch, same pool and inputs: "
        "ours, one launch that finds the pairs itself; ours before, torch ops building the pair buffers then one "
        "pair-copy launch; SGLang's own function (0.5.13+ only), whose boolean masks sync.",
        ("layers", "bs", "page", "topk", "steps", "pairs"),
        (("ours", "ours (one launch)"), ("ours_torch_pairs", "ours before (torch pairs + launch)"),
         ("upstream", "SGLang")), [])
    out += _impl_table(
        res.get("fa3_expand"), "FA3 tree-draft expand metadata (eager draft steps; alone: `SGLANG_EAGLE_PAGED_FA3_EXPAND=1`)",
        "SGLang's `draft_decode_set_expand_metadata` (torch.compile, dynamic) vs our one Triton launch, "
        "same inputs; first call includes compilation.",
        ("bs", "topk", "steps", "page"), (("upstream", "SGLang (torch.compile)"), ("ours", "ours")),
        [("first call ms", lambda r, p: r[f"{p}_first_call_ms"]), ("identical outputs", lambda r, p: r["identical"])])
    out += _impl_table(
        res.get("verify_move"), "Post-verify KV move (`move_kv_cache` on the target pool, overlapping pairs)",
        "After a paged tree verify SGLang moves each request's accepted tokens to the front of its "
        "draft slots, in every layer of the target pool; ours: one launch per chunk of 256 pairs (same result, "
        "tests/test_kernel_move_rows.py). First call at a new pair count includes SGLang's compile.",
        ("layers", "bs", "draft_tokens", "pairs"), (("upstream", "SGLang move_kv_cache"), ("ours", "ours")),
        [("first call ms", lambda r, p: r[f"{p}_first_call_ms"]),
         ("vs SGLang", lambda r, p: f"{r['speedup']}x" if p == "ours" else ""),
         ("GB/s", lambda r, p: r[f"{p}_GBps"])],
        heads=("layers", "bs", "draft tokens", "pairs"))
    out += _impl_table(
        res.get("verify_bookkeeping"), "Paged verify bookkeeping (`get_src_tgt_cache_loc`)",
        "SGLang's function under `torch.compile(dynamic=True)` against ours (one Triton launch, the "
        "REPLACE hook's default since run 9; eager torch before) and the eager ops (our fallback), same "
        "inputs; first call includes compilation.",
        ("bs", "draft_tokens", "page"),
        (("upstream", "SGLang (torch.compile)"), ("ours", "ours"), ("eager", "ours, eager fallback")),
        [("first call ms", lambda r, p: r[f"{p}_first_call_ms"]),
         ("identical", lambda r, p: r["identical"] if p != "upstream" else "")],
        heads=("bs", "draft tokens", "page"))
    out += _impl_table(
        res.get("fa3_replay"), "FA3 draft replay metadata, all steps (`SGLANG_EAGLE_PAGED_FA3_EXPAND=fused`, the default)",
        "`FlashAttentionMultiStepBackend.init_forward_metadata_replay_cuda_graph` as the draft graph "
        "runner calls it each draft round: SGLang's at the page size, ours (one launch for every step), and "
        "SGLang's at page 1 on the same batch shape.",
        ("bs", "topk", "steps", "page"),
        (("upstream", "SGLang"), ("ours", "ours (fused)"), ("upstream_p1", "SGLang at page 1")),
        [("identical tables", lambda r, p: r["identical"] if p == "ours" else "")],
        page_1="upstream_p1")
    if res.get("capture_failures"):
        out += ["", "Graph captures that failed:", ""] + [f"- {k}: `{v}`" for k, v in res["capture_failures"].items()]
    return "\n".join(out) + "\n"


def best_us(r, p):
    """Device time where measured, else wall: what the plot shows."""
    return r[f"{p}_device_us"] if r[f"{p}_device_us"] is not None else r[f"{p}_wall_us"]


def plot(res, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    rows = [r for r in res["copy"] if r["layers"] == 1]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [best_us(r, "upstream") for r in rows], 0.4, label="SGLang move_kv_cache")
    ax.bar([x + 0.2 for x in xs], [best_us(r, "ours") for r in rows], 0.4, label="ours (capacity-padded)")
    ax.set_yscale("log")
    ax.set_xticks(list(xs), [f"bs{r['bs']}/p{r['page']}/k{r['topk']}" for r in rows], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("us per draft step (1 layer)")
    ax.set_title("duplication", fontsize=9)
    ax.legend(fontsize=7)
    rows = res["assign"]
    xs = range(len(rows))
    for i, (p, label) in enumerate((("ours", "ours"), ("ours_out", "ours, out="), ("upstream_kernel", "SGLang launch only"))):
        bx.bar([x + (i - 1) * 0.27 for x in xs], [best_us(r, p) for r in rows], 0.27, label=label)
    bx.axhline(best_us(res, "empty_triton"), color="gray", ls="--", lw=1, label="empty Triton kernel")
    bx.set_xticks(list(xs), [f"bs{r['bs']}" for r in rows], fontsize=7)
    bx.set_ylabel("us per call")
    bx.set_title("assignment", fontsize=9)
    bx.legend(fontsize=7)
    kind = "device time (CUDA graph replay)" if DEV == "cuda" else "wall time (no GPU: no device time)"
    fig.suptitle(f"{kind}; wall where a call cannot be captured", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench_kernels", help="folder for kernels.json, kernels.md and kernels.png")
    ap.add_argument("--quick", action="store_true", help="a few shapes only")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import sglang
    import triton

    from sglang_eagle_paged.tools.harness import _ensure_global_server_args

    _ensure_global_server_args()
    gen = torch.Generator().manual_seed(0)
    if DEV == "cpu":
        shapes, layers, heads, hd, slots = [(2, 16, 4)], [1], 1, 8, 1 << 12
        a_bs, p_shapes = [2], [(2, 16, 4)]
        x_shapes = [(2, 4, 3, 16)]
        v_shapes, v_layers = [(3, 8, 2)], 2
        d_shapes = [(2, 16, 4, 3)]
        r_shapes = [(2, 4, 3, 16)]
        b_shapes = [(3, 8, 16)]
    else:
        shapes = [(1, 64, 8), (8, 64, 8), (64, 64, 8), (64, 128, 8), (256, 128, 8), (1, 16, 2), (64, 16, 4),
                  (128, 256, 10), (256, 256, 10)]
        if args.quick:  # keeps the smallest, launch-bound shape: the one where wall time has been closest
            shapes = shapes[:6]
        layers, heads, hd, slots = [1, 4], 8, 128, 1 << 21
        a_bs, p_shapes = [1, 8, 64, 256], [(1, 64, 8), (16, 64, 8), (64, 64, 8), (64, 128, 8), (128, 16, 4)]
        x_shapes = [(1, 8, 5, 64), (16, 8, 5, 64), (48, 8, 5, 64), (48, 8, 5, 128), (32, 4, 3, 16)]
        # (bs, draft tokens, mean accepted): Llama-3-8B's 32 layers of 8 x 128 bf16
        v_shapes, v_layers = [(1, 64, 2), (16, 64, 2), (16, 64, 4), (48, 64, 4), (48, 64, 6)], 32
        # (bs, page, topk, steps): the v2 draft's duplication at batch 1-64, pages 16-256
        d_shapes = [(1, 64, 8, 5), (8, 64, 8, 5), (64, 64, 8, 5), (8, 128, 8, 5), (16, 16, 4, 3), (64, 256, 10, 5)]
        r_shapes = [(1, 8, 5, 64), (16, 8, 5, 64), (32, 8, 5, 64), (16, 8, 5, 128), (16, 4, 3, 16)]
        b_shapes = [(1, 64, 64), (16, 64, 64), (48, 64, 64), (16, 64, 128), (16, 32, 16)]
    res = dict(device=torch.cuda.get_device_name() if DEV == "cuda" else "cpu (Triton interpreter)",
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), host=platform.node(),
               versions=dict(sglang=sglang.__version__, torch=torch.__version__, triton=triton.__version__),
               d2d_GBps=d2d_bandwidth(), launch_us=launch_overhead_us())
    res.update(prefixed("empty_triton", measure(empty_triton_launch(), "empty triton kernel")))
    res["copy"] = bench_copy(shapes, layers, heads, hd, slots, gen)
    res["v2_duplicate"] = bench_v2_duplicate(d_shapes, layers, heads, hd, gen)
    res["assign"] = bench_assign(a_bs, 64, 8, 5, gen)
    res["preprocess"] = bench_preprocess(p_shapes, 5, gen)
    try:
        res["verify_move"] = bench_verify_move(v_shapes, v_layers, heads, hd, min(slots, 1 << 16), gen)
    except Exception as exc:  # noqa: BLE001 - report, keep the rest
        res["verify_move_skipped"] = f"{type(exc).__name__}: {exc}"
    try:
        res["verify_bookkeeping"] = bench_verify_bookkeeping(b_shapes, gen)
    except Exception as exc:  # noqa: BLE001 - e.g. no compiler for torch.compile here: report, keep the rest
        res["verify_bookkeeping_skipped"] = f"{type(exc).__name__}: {exc}"
    try:
        res["fa3_expand"] = bench_fa3_expand(x_shapes, gen)
    except ImportError as exc:  # SGLang's FA3 backend module did not import here
        res["fa3_expand_skipped"] = f"{type(exc).__name__}: {exc}"
    try:
        res["fa3_replay"] = bench_fa3_replay(r_shapes)
    except Exception as exc:  # noqa: BLE001 - built without a model runner: report, keep the rest
        res["fa3_replay_skipped"] = f"{type(exc).__name__}: {exc}"
    res["capture_failures"] = CAPTURE_FAILURES
    with open(os.path.join(args.out, "kernels.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(args.out, "kernels.md"), "w") as f:
        f.write(markdown(res))
    plot(res, os.path.join(args.out, "kernels.png"))
    print(markdown(res))


if __name__ == "__main__":
    main()
