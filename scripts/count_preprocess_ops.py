"""Count the host work of one draft preprocess: torch ops and Triton launches, ours vs SGLang's.

Host time per draft step is mostly dispatch: each torch op and each Triton launch costs
microseconds on the host whatever the GPU does. This counts both on the CPU (real SGLang
pools, Triton under its interpreter, whose own tensor traffic inside a launch is not
counted), for SGLang's `_draft_preprocess_decode` at page 1 and page N and for ours at
page N, on the same batch. "scalar reads" are `.item()`-like reads; here every tensor is on
the CPU, so which of them would sync a GPU is not visible (`scripts/bench_kernels.py`
counts those on a GPU: SGLang's page-N path syncs once per step, ours never).

    TRITON_INTERPRET=1 python scripts/count_preprocess_ops.py [--page 64 --topk 8 --steps 5]
"""

import argparse
import collections
import json
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


class _Counter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()
        self.launches = collections.Counter()
        self.in_launch = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.in_launch:  # the interpreter's own copies inside a launch are not host dispatch
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def count(fn):
    from triton.runtime.interpreter import InterpretedFunction

    counter = _Counter()
    real_run = InterpretedFunction.run

    def run(self, *a, **k):
        counter.launches[self.fn.__name__] += 1
        counter.in_launch += 1
        try:
            return real_run(self, *a, **k)
        finally:
            counter.in_launch -= 1

    InterpretedFunction.run = run
    try:
        with counter:
            fn()
    finally:
        InterpretedFunction.run = real_run
    return counter


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seq-lens", default="100,257,1000,64")
    a = ap.parse_args(argv)
    from sglang.srt.speculative.eagle_worker import EAGLEWorker

    from sglang_eagle_paged.tools.harness import PagedTreeHarness
    from sglang_eagle_paged.settings import Mode
    from sglang_eagle_paged.adapters.v1.draft_preprocess import draft_preprocess_decode

    stock = EAGLEWorker._draft_preprocess_decode
    stock = getattr(stock, "__wrapped__", stock)
    lens = [int(x) for x in a.seq_lens.split(",")]
    rows = {}
    for page, impl in ((1, "sglang"), (a.page, "sglang"), (a.page, "ours")):
        h = PagedTreeHarness(page, a.topk, a.steps, num_tokens=1 << 15, max_reqs=len(lens) + 4,
                             max_context_len=max(lens) + 4 * a.page * a.topk, kv_copy=True)
        ids = [h.add_request(n) for n in lens]
        w = h.worker
        w.extend_lens = torch.empty((), dtype=torch.int64)  # SGLang's method stores these on the worker
        w.num_new_pages_per_topk = torch.empty((), dtype=torch.int64)
        batch = h.batch(ids)
        fn = (lambda: stock(w, batch)) if impl == "sglang" else (lambda: draft_preprocess_decode(w, batch, Mode.ON))
        fn()  # first call: lazy imports and caches
        c = count(fn)
        rows[f"{impl} page {page}"] = dict(torch_ops=sum(c.ops.values()), triton_launches=sum(c.launches.values()),
                                           host_reads=c.ops.get("_local_scalar_dense", 0),
                                           launches=dict(c.launches), ops=dict(c.ops.most_common()))
    for name, r in rows.items():
        print(f"{name:>16}: {r['torch_ops']:3d} torch ops, {r['triton_launches']} Triton launches, "
              f"{r['host_reads']} scalar reads ({', '.join(f'{k} x{v}' for k, v in r['launches'].items())})")
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
