"""Where the host time of our draft preprocess goes, per part, at chosen shapes.

H200 run 7 measured ours at 705 us wall / 727 us host at bs 64 / page 128 / topk 8 against
about 190 us at the other shapes (run 6: 232 us at the same shape), with the GPU busy 52 us.
This times each part of the call on its own (the host's check that the free list holds the
draft's slots, the assignment launch that reads them from it, the KV copy, the rest) as a
distribution over many calls, not a mean, and writes a cProfile of the whole call per shape,
so an outlier shows which part and whether it is every call or a few slow ones.

  python scripts/profile_preprocess.py --out /tmp/pp --shapes 64,64,8 64,128,8
"""

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_kernels as bk  # noqa: E402 - the same harness and timing helpers as the sweep


def _distribution(samples_us):
    s = sorted(samples_us)
    pick = lambda q: round(s[min(len(s) - 1, int(q * len(s)))], 1)
    return dict(n=len(s), median=pick(0.5), p10=pick(0.1), p90=pick(0.9), max=round(s[-1], 1),
                mean=round(sum(s) / len(s), 1))


def host_samples(fn, reps):
    """Host time of each call (us), the GPU drained before each (bench_kernels.host_us, unaveraged)."""
    out = []
    for _ in range(reps):
        bk.sync()
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    bk.sync()
    return out


def parts(worker, batch):
    """The preprocess's parts as separate calls, on the same inputs as the whole (the free-list path)."""
    from sglang_eagle_paged.adapters.v1 import draft_preprocess as w
    from sglang_eagle_paged.kernels import assign_tree_draft_slots_from_free_pages
    from sglang_eagle_paged.adapters.common.kv_copy import move_pairs

    page, topk, steps = worker.page_size, worker.topk, worker.speculative_num_steps
    free_pages = w._readable_free_pages(worker, batch)
    assert free_pages is not None, "this shape took SGLang's allocation, not the free list"
    assign = lambda: assign_tree_draft_slots_from_free_pages(
        batch.req_pool_indices, batch.req_to_token_pool.req_to_token, batch.seq_lens, free_pages, page, topk, steps)
    layout = assign()
    pool = worker.draft_model_runner.token_to_kv_pool
    return {
        "free_list": lambda: w._readable_free_pages(worker, batch),  # host only: the page count and the checks
        "assign": assign,  # one launch: the slots from the free pages, the rows, draft slots and pairs
        "copy": lambda: move_pairs(pool, layout.tgt_loc, layout.src_loc),
        "positions": lambda: batch.seq_lens.repeat_interleave(topk, dim=0),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="profile_preprocess")
    ap.add_argument("--shapes", nargs="+", default=["64,64,8", "64,128,8"], help="bs,page,topk")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from sglang_eagle_paged.tools.harness import _ensure_global_server_args
    from sglang_eagle_paged.settings import Mode
    from sglang_eagle_paged.adapters.v1.draft_preprocess import draft_preprocess_decode

    _ensure_global_server_args()
    res = dict(device=torch.cuda.get_device_name() if bk.DEV == "cuda" else "cpu (Triton interpreter)",
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), shapes={})
    reps = args.reps if bk.DEV == "cuda" else 3
    for spec in args.shapes:
        bs, page, topk = map(int, spec.split(","))
        h, worker, batch = bk.preprocess_case(bs, page, topk, 5)
        whole = lambda: draft_preprocess_decode(worker, batch, Mode.ON)
        whole()
        row = {"whole": _distribution(host_samples(whole, reps)), "syncs": bk.count_syncs(whole)}
        for name, fn in parts(worker, batch).items():
            fn()
            row[name] = _distribution(host_samples(fn, reps))
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(reps):
            whole()
        bk.sync()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(30)
        with open(os.path.join(args.out, f"cprofile_bs{bs}_p{page}_k{topk}.txt"), "w") as f:
            f.write(text.getvalue())
        res["shapes"][spec] = row
        print(spec, json.dumps(row), flush=True)
        del h
    with open(os.path.join(args.out, "profile_preprocess.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
