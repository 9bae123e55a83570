"""Host cost of ``kv_copy.move_in_pool`` before any kernel launch (CPU only).

Builds SGLang's ``MHATokenToKVPool`` on CPU (32 layers, the copy configuration on,
as a served target pool), replaces the launch (``move_kv_rows``) with a no-op and
times many calls: what is left is the Python run once per verify step for the
post-verify KV move (pool checks, buffer table look-up, chunk size).

  .venv/bin/python scripts/bench_move_prepare.py [--layers 32] [--calls 20000]
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "scripts" / "cpu_standins"))  # after site-packages, as the tests do

import torch  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool  # noqa: E402

from sglang_eagle_paged.adapters.common import kv_copy  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    pool = MHATokenToKVPool(256, 16, torch.bfloat16, 8, 128, args.layers, "cpu", False,
                            enable_kv_cache_copy=True)
    tgt, src = torch.arange(10, 20), torch.arange(30, 40)
    launches = []
    kv_copy.move_kv_rows = lambda table, t, s, chunk: launches.append(1)  # no kernel: Python only
    assert kv_copy.move_in_pool(pool, tgt, src) and launches

    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.calls):
            kv_copy.move_in_pool(pool, tgt, src)
        best = min(best, (time.perf_counter() - t0) / args.calls * 1e6)
    print(f"move_in_pool, {args.layers}-layer pool, launch stubbed: {best:.2f} us/call "
          f"(best of {args.repeats} x {args.calls} calls)")


if __name__ == "__main__":
    main()
