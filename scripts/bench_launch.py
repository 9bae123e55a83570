"""Host time of each Triton launch the plugin makes per draft round, taken apart.

Run 10 on the H200 left page 64 about 0.16 ms a round behind page 1 at batch 1 on the host-bound
16M testbed, with about six more Triton launches per round and otherwise fewer torch ops and the
same syncs. This says where a launch's host time goes, for each kernel of the serving path at
batch 1 and 16 (page 64, topk 8, steps 5):

- ``wrapper``: the function the plugin calls (its checks, output tensors and the launch, through
  ``kernels/launch.py`` since run 10);
- ``triton``: the same launch through ``kernel[grid](...)`` with its arguments built beforehand
  (Triton's binder, specialisation key and cache lookup, then the launcher);
- ``launcher``: the compiled kernel's launcher alone, arguments and stream prepared (what a
  launch path that skips the binder could cost);
- floors: an empty kernel with one argument and with twenty, and a torch ``add_``.

Times are host microseconds per call, calls back to back with nothing else queued (each
kernel here takes 2-15 us of device time, under its host time, so the loop is host-bound);
the median of ``--repeats`` loops of ``--calls`` calls. Before timing, each case checks that
the launcher alone writes exactly what the wrapper wrote. Needs only torch and triton and a
CUDA GPU (no SGLang): ``python scripts/bench_launch.py --out DIR`` writes ``launch.json`` and
``launch.md`` and ``launch.png``. On a machine without a GPU it runs the wrappers under the interpreter, as a
smoke test, and times nothing.
"""

import argparse
import json
import os
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
DEV = "cuda" if GPU else "cpu"


@contextmanager
def recorded_launches():
    """Every ``JITFunction.run`` call in the block: (kernel, args, kwargs)."""
    from triton.runtime.jit import JITFunction

    seen, orig = [], JITFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        seen.append((self, args, dict(kwargs, grid=grid)))
        return orig(self, *args, grid=grid, warmup=warmup, **kwargs)

    JITFunction.run = run
    try:
        yield seen
    finally:
        JITFunction.run = orig


def launcher_only(kernel, args, kwargs):
    """A call of the compiled variant's launcher with these arguments, skipping Triton's per-call
    binding, with the argument tuple ``kernels/launch.py`` passes; valid only for the variant the
    recorded launch compiled."""
    from sglang_eagle_paged.kernels.launch import _KernelLaunches

    kwargs = dict(kwargs)
    grid = kwargs.pop("grid")
    compiled = kernel.run(*args, grid=grid, warmup=False, **kwargs)
    state = _KernelLaunches(kernel)
    values = tuple(args) + state.tail(len(args), {k: v for k, v in kwargs.items() if k in state.names})
    g = tuple(grid) + (1, 1)
    stream = torch.cuda.current_stream().cuda_stream
    run, function, meta = compiled.run, compiled.function, compiled.packed_metadata
    return lambda: run(g[0], g[1], g[2], stream, function, meta, None, None, None, *values)


def per_call_us(fn, calls, repeats):
    loops = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        loops.append((time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    return round(statistics.median(loops), 2)


# ------------------------------------------------------------------ the cases

def assign_case(bs, page, topk, steps):
    from sglang_eagle_paged.kernels import assign_tree_draft_slots_from_free_pages
    from sglang_eagle_paged.kernels.layout import extension_totals

    g = torch.Generator().manual_seed(bs)
    seq_lens = torch.randint(100, 4000, (bs,), generator=g)
    _, pages = extension_totals(seq_lens, page, topk, steps)
    r2t = torch.zeros((bs + 1, 8192), dtype=torch.int32, device=DEV)
    rows, free = torch.arange(1, bs + 1, device=DEV), torch.arange(10, 10 + pages, device=DEV)
    seq_lens = seq_lens.to(DEV)
    return lambda: assign_tree_draft_slots_from_free_pages(rows, r2t, seq_lens, free, page, topk, steps)


def _pool(layers, slots=8192, heads=8, head_dim=128):
    from sglang_eagle_paged.kernels import KVBufferTable

    if not GPU:  # the interpreter's smoke test: a small pool
        heads, head_dim = 1, 8
    buffers = [torch.randn(slots, heads, head_dim, device=DEV).to(torch.bfloat16) for _ in range(2 * layers)]
    return buffers, KVBufferTable.from_buffers(buffers)


def duplicate_case(bs, page, topk, steps):
    from sglang_eagle_paged.kernels import duplicate_kv_pairs

    layout = assign_case(bs, page, topk, steps)()
    buffers, table = _pool(1)  # the table holds only the buffers' addresses: keep them alive
    return lambda: duplicate_kv_pairs(table, layout.tgt_loc, layout.src_loc) or buffers


def v2_duplicate_case(bs, page, topk, steps):
    from sglang_eagle_paged.kernels.prefix_tail import duplicate_prefix_tail
    from sglang_eagle_paged.tools.v2_harness import dense_rows, draft_args

    seq = torch.randint(1, 2 * page + 1, (bs,), generator=torch.Generator().manual_seed(bs)).tolist()
    rows, slots = dense_rows(seq, page, topk, steps, DEV)
    args = draft_args(seq, page, steps, DEV)
    buffers, table = _pool(1, slots=slots)  # kept alive by the closure, as above
    return lambda: duplicate_prefix_tail(table, rows, *args, topk, page) or buffers


def move_case(bs, page, topk, steps):
    from sglang_eagle_paged.kernels.move_rows import move_kv_rows

    buffers, table = _pool(32, slots=4096, heads=2)  # kept alive by the closure, as above
    n = bs * (steps + 1)  # about one round's accepted tokens; disjoint, so a repeat writes the same
    src = torch.arange(1000, 1000 + n, device=DEV)
    tgt = torch.arange(2000, 2000 + n, device=DEV)
    return lambda: move_kv_rows(table, tgt, src) or buffers


def bookkeeping_case(bs, page, topk, steps):
    from sglang_eagle_paged.tools.harness import verify_bookkeeping_inputs
    from sglang_eagle_paged.kernels.verify_bookkeeping import src_and_free_counts

    draft_tokens = 64
    seq_lens, ocl, ai, ncd = verify_bookkeeping_inputs(torch.Generator().manual_seed(bs), bs, draft_tokens, page)
    args = [seq_lens.to(DEV), ocl.to(DEV), ai.to(DEV).to(torch.int32), ncd.to(DEV)]
    return lambda: src_and_free_counts(*args, draft_tokens, page)


def fa3_replay_case(bs, page, topk, steps):
    from sglang_eagle_paged.kernels.draft_decode_metadata import (
        DraftStep, DraftStepTable, draft_decode_metadata_all_steps)

    max_ctx = 4096
    i32 = dict(dtype=torch.int32, device=DEV)
    strided = torch.arange(0, max_ctx, page, device=DEV)
    table = DraftStepTable.from_steps([
        DraftStep(torch.zeros(bs, **i32), torch.zeros((bs, max_ctx // page), **i32), torch.zeros(bs * topk, **i32),
                  torch.zeros((bs * topk, d + 1), **i32), strided, d) for d in range(1, steps)])
    seq_lens = torch.full((bs,), 1000, device=DEV)
    rows = torch.arange(bs, device=DEV)
    r2t = torch.arange(bs * max_ctx, dtype=torch.int32, device=DEV).view(bs, max_ctx)
    loc = (torch.arange(bs * topk, device=DEV)[:, None] * page + 1000 % page + torch.arange(steps, device=DEV))
    return lambda: draft_decode_metadata_all_steps(table, seq_lens, rows, r2t, 1000 // page + 1, loc, topk, page)


CASES = {"assign (free pages)": assign_case, "duplicate (1 layer)": duplicate_case,
         "v2 prefix-tail duplicate (1 layer)": v2_duplicate_case,
         "FA3 replay metadata (all steps)": fa3_replay_case, "verify bookkeeping": bookkeeping_case,
         "post-verify move (32 layers)": move_case}


def floors():
    import triton

    @triton.jit
    def _empty1(x):
        pass

    @triton.jit
    def _empty20(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, b0, b1, b2, b3, b4, b5, b6, b7, b8, b9):
        pass

    x = torch.empty(16, device=DEV)
    ints = list(range(3, 13))
    return {"empty kernel, 1 argument": lambda: _empty1[(1,)](x),
            "empty kernel, 20 arguments (10 tensors, 10 ints)": lambda: _empty20[(1,)](*([x] * 10), *ints),
            "torch add_": lambda: x.add_(1)}


def _tensors(args):
    return [a for a in args if isinstance(a, torch.Tensor)]


def measure_case(name, wrapper, calls, repeats):
    from sglang_eagle_paged.kernels import launch as fast_path

    fast_path._launches.clear()  # so that this first call goes through Triton and can be recorded
    with recorded_launches() as seen:
        wrapper()
    if not GPU:
        return {"case": name, "launches": len(seen)}
    kernel, args, kwargs = seen[-1]
    direct = launcher_only(kernel, args, kwargs)
    # the launcher alone must write what the wrapper's launch wrote: same arguments, same variant
    before = [t.clone() for t in _tensors(args)]
    kernel.run(*args, warmup=False, **kwargs)
    after = [t.clone() for t in _tensors(args)]
    for t, b in zip(_tensors(args), before):
        t.copy_(b)
    direct()
    torch.cuda.synchronize()
    same = all(torch.equal(t, a) for t, a in zip(_tensors(args), after))
    kw = {k: v for k, v in kwargs.items() if k != "grid"}
    triton_fn = lambda: kernel[kwargs["grid"]](*args, **kw)  # noqa: E731
    return {"case": name, "kernel": kernel.fn.__name__, "launches": len(seen), "arguments": len(args),
            "launcher_writes_the_same": same,
            "wrapper_us": per_call_us(wrapper, calls, repeats), "triton_us": per_call_us(triton_fn, calls, repeats),
            "launcher_us": per_call_us(direct, calls, repeats)}


def markdown(res) -> str:
    lines = [f"# Launch host time ({res['device']}, {res['date']})", "",
             f"torch {res['torch']}, triton {res['triton']}; page 64, topk 8, steps 5; host us per call, "
             f"median of {res['repeats']} loops of {res['calls']} back-to-back calls.", "",
             "| case | bs | kernel args | wrapper | triton `kernel[grid]` | launcher alone | launcher writes the same |",
             "|---|---|---|---|---|---|---|"]
    for r in res["cases"]:
        lines.append(f"| {r['case']} | {r['bs']} | {r.get('arguments', '-')} | {r.get('wrapper_us', '-')} | "
                     f"{r.get('triton_us', '-')} | {r.get('launcher_us', '-')} | {r.get('launcher_writes_the_same', '-')} |")
    lines += ["", "| floor | host us per call |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in res["floors"].items()]
    return "\n".join(lines) + "\n"


def plot(res, path) -> str | None:
    """Host us per call of each case and batch size, the three ways, with the floors as lines; None
    without matplotlib or timings (the CPU smoke test)."""
    rows = [r for r in res["cases"] if "wrapper_us" in r]
    if not rows:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows)), 4.2))
    xs = range(len(rows))
    for i, (key, label) in enumerate((("wrapper_us", "wrapper"), ("triton_us", "triton kernel[grid]"),
                                      ("launcher_us", "launcher alone"))):
        ax.bar([x + (i - 1) * 0.27 for x in xs], [r[key] for r in rows], 0.27, label=label)
    for (name, us), style in zip(res["floors"].items(), ("--", ":", "-.")):
        ax.axhline(us, color="gray", ls=style, lw=1, label=name)
    ax.set_xticks(list(xs), [f"{r['case']}, bs {r['bs']}" for r in rows], fontsize=6, rotation=30, ha="right")
    ax.set_ylabel("host us per call")
    ax.set_title(f"launch host time, {res['device']}", fontsize=9)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def main(argv=None):
    import triton

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs/launch")
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--bs", type=int, nargs="+", default=[1, 16])
    a = p.parse_args(argv)
    res = {"device": torch.cuda.get_device_name() if GPU else "cpu (interpreter smoke test)",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
           "triton": triton.__version__, "calls": a.calls, "repeats": a.repeats, "cases": [], "floors": {}}
    for bs in a.bs:
        for name, case in CASES.items():
            row = {"bs": bs, **measure_case(name, case(bs, 64, 8, 5), a.calls, a.repeats)}
            res["cases"].append(row)
            print(json.dumps(row), flush=True)
    if GPU:
        res["floors"] = {k: per_call_us(fn, a.calls, a.repeats) for k, fn in floors().items()}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "launch.json").write_text(json.dumps(res, indent=1))
    (out / "launch.md").write_text(markdown(res))
    plot(res, out / "launch.png")
    print(markdown(res))
    bad = [r["case"] for r in res["cases"] if r.get("launcher_writes_the_same") is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
