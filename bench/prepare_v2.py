"""The v2 draft preparation's prefix-tail duplication on the GPU: SGLang's function against ours.

  python -m bench.prepare_v2 --out DIR [--batches 1,8,64,256] [--pages 16,64,128]

For each page size and batch: rows laid out as SGLang's paged allocator leaves them after churn
(whole pages from a shuffled free list, each request's prefix then its decode reservation), random
prefix lengths, and the tensors SGLang's ``prepare_for_draft`` hands the duplication. Both sides
run on the same pool and rows, alternating, each call behind ``--queued-ms`` of GPU work (a
serving step has work in flight when it prepares the next draft):

- host ms: from the call to its return (a call that waits for the GPU returns after the queue);
- GPU ms: CUDA events around the call, so the span of what it launched (and any wait inside it);

median and 90th percentile over ``--iters`` calls. Writes DIR/prepare_v2.json, .md and .png.
Needs a CUDA GPU and an SGLang of the v2 generation (0.5.13 .. 0.5.23).
"""

import argparse
import json
import platform
import statistics
import time
from pathlib import Path


def layout(seq_lens, page_size, topk, steps, *, layers, heads, head_dim, seed, device="cuda"):
    """SGLang's pool and the batch's rows: every request's prefix and decode reservation in whole
    pages drawn from a shuffled free list."""
    import torch

    from sglang_eagle_paged.tools import v2_harness as vh

    reserve = vh.alloc_len(page_size, topk, steps, topk * steps)
    lens = [-(-(n + reserve) // page_size) * page_size for n in seq_lens]
    pages = sum(lens) // page_size
    pool = vh.make_pool(page_size, (pages + 2) * page_size, head_num=heads, head_dim=head_dim, layer_num=layers,
                        device=device)
    g = torch.Generator().manual_seed(seed)
    order = (torch.randperm(pages, generator=g) + 1).tolist()  # page 0 is SGLang's padding page
    rows = torch.zeros((len(seq_lens), max(lens)), dtype=torch.int32)
    at = 0
    for r, n in enumerate(lens):
        row_pages = torch.tensor(order[at:at + n // page_size])
        at += n // page_size
        rows[r, :n] = (row_pages[:, None] * page_size + torch.arange(page_size)).flatten().to(torch.int32)
    return pool, rows.to(device)


def time_calls(fn, iters: int, queued_ms: float) -> dict:
    import torch

    cycles = int(queued_ms * 1e-3 * torch.cuda.get_device_properties(0).clock_rate * 1e3)
    host, gpu = [], []
    for _ in range(iters):
        torch.cuda._sleep(cycles)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e3)
        end.record()
        torch.cuda.synchronize()
        gpu.append(start.elapsed_time(end))

    def stats(xs):
        xs = sorted(xs)
        return {"median": statistics.median(xs), "p90": xs[int(0.9 * (len(xs) - 1))]}

    return {"host_ms": stats(host), "gpu_ms": stats(gpu)}


def measure(page_size, batch, a) -> dict:
    import random

    import torch
    from sglang.srt.speculative import eagle_worker_common as ewc

    from sglang_eagle_paged.adapters.v2 import draft_step, fault
    from sglang_eagle_paged.settings import Mode
    from sglang_eagle_paged.tools import v2_harness as vh

    rng = random.Random(a.seed + page_size * 1000 + batch)
    seq_lens = [rng.randint(a.min_len, a.max_len) for _ in range(batch)]
    pool, rows = layout(seq_lens, page_size, a.topk, a.steps, layers=a.layers, heads=a.heads,
                        head_dim=a.head_dim, seed=a.seed)
    base, last, new_pages = vh.draft_args(seq_lens, page_size, a.steps, device="cuda")
    sglang_fn = ewc.duplicate_prefix_tail_to_draft_branches  # this process loads no plugin: SGLang's own
    ours = draft_step.duplication_hook(Mode.ON)  # no draft runner recorded for the pool: it copies
    args = (pool, rows, base, last, new_pages, a.topk, page_size)
    sides = {"sglang": lambda: sglang_fn(*args), "ours": lambda: ours(sglang_fn, *args)}
    for fn in sides.values():  # compile and warm both before anything is timed
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    if fault.SWITCH:  # the fault rule would time SGLang's function on both sides
        raise RuntimeError(f"our duplication switched itself off while warming up: {fault.SWITCH.reason}")
    out = {name: time_calls(fn, a.iters, a.queued_ms) for name, fn in sides.items()}
    copied = (a.topk - 1) * sum(n % page_size for n in seq_lens)
    del pool, rows, args, sides  # the lambdas hold the pool too: without them every row's pool stays
    torch.cuda.empty_cache()
    return {"page_size": page_size, "batch": batch, "copied_slots": copied, **out}


def markdown(res: dict) -> str:
    lines = [f"v2 prefix-tail duplication, {res['gpu']}, SGLang {res['sglang']}, topk {res['topk']}, "
             f"steps {res['steps']}, {res['layers']} layers x {res['heads']} KV heads x {res['head_dim']}, "
             f"{res['queued_ms']} ms queued ahead, {res['iters']} calls each (median / p90)", "",
             "| page | batch | slots copied | SGLang host ms | ours host ms | SGLang GPU ms | ours GPU ms |",
             "|---|---|---|---|---|---|---|"]
    f = lambda s: f"{s['median']:.3f} / {s['p90']:.3f}"  # noqa: E731
    for r in res["rows"]:
        lines.append(f"| {r['page_size']} | {r['batch']} | {r['copied_slots']} | {f(r['sglang']['host_ms'])} | "
                     f"{f(r['ours']['host_ms'])} | {f(r['sglang']['gpu_ms'])} | {f(r['ours']['gpu_ms'])} |")
    lines += [f"\nNot measured (page {r['page_size']}, batch {r['batch']}): {r['why']}." for r in res.get("skipped", [])]
    return "\n".join(lines) + "\n"


def plot(res: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pages = sorted({r["page_size"] for r in res["rows"]})
    fig, axes = plt.subplots(1, len(pages), figsize=(4 * len(pages), 3.2), squeeze=False)
    for ax, page in zip(axes[0], pages):
        rows = [r for r in res["rows"] if r["page_size"] == page]
        xs = [r["batch"] for r in rows]
        for side, style in (("sglang", "o-"), ("ours", "s-")):
            ax.plot(xs, [r[side]["gpu_ms"]["median"] for r in rows], style, label=f"{side} GPU")
            ax.plot(xs, [r[side]["host_ms"]["median"] for r in rows], style, alpha=0.4, label=f"{side} host")
        ax.set(xscale="log", yscale="log", xlabel="batch", ylabel="ms", title=f"page {page}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="GPU and host time of the v2 prefix-tail duplication, "
                                            "SGLang's function against ours.")
    p.add_argument("--out", required=True, help="directory for prepare_v2.json, .md, .png")
    p.add_argument("--batches", default="1,8,64,256", help="comma-separated batch sizes")
    p.add_argument("--pages", default="16,64,128", help="comma-separated page sizes")
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--layers", type=int, default=16, help="KV layers of the pool (memory: batch 256 at page 128)")
    p.add_argument("--heads", type=int, default=8, help="KV heads")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--min-len", type=int, default=64, help="shortest prefix")
    p.add_argument("--max-len", type=int, default=1024, help="longest prefix")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--queued-ms", type=float, default=2.0, help="GPU work queued ahead of every call")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)

    import sglang
    import torch
    from tqdm import tqdm

    if not torch.cuda.is_available():
        raise SystemExit("prepare_v2 needs a CUDA GPU")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = [(int(pg), int(b)) for pg in a.pages.split(",") for b in a.batches.split(",")]
    res = {"gpu": torch.cuda.get_device_name(0), "sglang": sglang.__version__, "torch": torch.__version__,
           "host": platform.node(), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           **{k: getattr(a, k) for k in ("topk", "steps", "layers", "heads", "head_dim", "iters", "queued_ms",
                                         "min_len", "max_len", "seed")}, "rows": []}
    for page, batch in tqdm(cases, desc="prepare_v2"):
        try:
            res["rows"].append(measure(page, batch, a))
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            res.setdefault("skipped", []).append({"page_size": page, "batch": batch, "why": "out of GPU memory"})
        (out / "prepare_v2.json").write_text(json.dumps(res, indent=1))
    md = markdown(res)
    (out / "prepare_v2.md").write_text(md)
    plot(res, str(out / "prepare_v2.png"))
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
