"""What compiling SGLang's paged ``alloc_extend`` kernel ahead costs at start-up, and whether
serving-like allocations then compile anything (sglang_eagle_paged/adapters/v1/sglang_warm_up.py).

In a fresh Triton cache directory: time ``sglang_warm_up.warm_up_allocator`` cold (every variant
compiled), then again (Triton's in-process cache) and in a second process (its disk cache);
then extend batches of 1..max-batch requests through SGLang's real ``PagedTokenToKVPoolAllocator``
as prefill and the paged verify do, and count the variants compiled meanwhile (from the cache
directory), which should be none. Writes ``alloc_warm_up.json`` and ``alloc_warm_up.md``.
Needs SGLang and a CUDA GPU; on a CPU (interpreter) it runs the same steps and times nothing
that means anything (nothing compiles there).

    python scripts/check_alloc_warm_up.py --out DIR [--page 64] [--max-batch 48]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _timed_warm_up(device, page, max_batch) -> dict:
    import torch

    from sglang_eagle_paged.adapters.v1 import sglang_warm_up as allocator_warm_up
    from sglang_eagle_paged.adapters.v1 import sglang_api as compat

    compat.resolve(compat.ALLOC_EXTEND_KERNEL)  # SGLang's import and the CUDA context are not the warm-up's
    torch.zeros(1, device=device)
    t = time.perf_counter()
    launches = allocator_warm_up.warm_up_allocator(device, page, max_batch)
    if device == "cuda":
        torch.cuda.synchronize()
    return {"launches": launches, "seconds": round(time.perf_counter() - t, 3)}


def _serve(device, page, max_batch) -> int:
    """Allocations of every batch size up to max_batch (harness.extend_batches); the slots handed out."""
    from sglang_eagle_paged.tools.harness import PagedTreeHarness

    h = PagedTreeHarness(page, 2, 1, num_tokens=1 << 20, device=device)
    return h.extend_batches(range(1, max_batch + 1), free=True)


def child(args) -> int:
    import torch

    device = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    print(json.dumps({"device": device, **_timed_warm_up(device, args.page, args.max_batch)}))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--max-batch", type=int, default=48, help="SGLang's --max-running-requests (48 for EAGLE)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    cache = tempfile.mkdtemp(prefix="triton_cache_")
    os.environ["TRITON_CACHE_DIR"] = cache  # before triton is imported, here and in the children
    import torch

    from sglang_eagle_paged.bench import triton_cache
    from sglang_eagle_paged.tools.harness import _ensure_global_server_args

    _ensure_global_server_args()
    device = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    cmd = [sys.executable, __file__, "--out", args.out, "--page", str(args.page), "--max-batch",
           str(args.max_batch), "--child"]
    res = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "page": args.page,
           "max_batch": args.max_batch}
    for step in ("cold_process", "disk_cache_process"):
        res[step] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        print(step, res[step], flush=True)  # a time limit may stop what follows
    before = triton_cache.variant_entries(cache)
    res["variants_after_warm_up"] = sum(1 for n in before.values() if n == "alloc_extend_kernel")
    res["in_process_first"] = _timed_warm_up(device, args.page, args.max_batch)  # loads from disk
    res["in_process_again"] = _timed_warm_up(device, args.page, args.max_batch)
    t = time.perf_counter()
    res["served_slots"] = _serve(device, args.page, args.max_batch)
    res["serve_seconds"] = round(time.perf_counter() - t, 3)
    _, compiled, signatures = triton_cache.compiled_since(before, cache)
    res["compiled_while_serving"] = {k: v for k, v in compiled.items() if v}
    res["compiled_while_serving_signatures"] = signatures
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "alloc_warm_up.json").write_text(json.dumps(res, indent=1))
    md = (f"# SGLang's alloc_extend kernel compiled ahead ({res['device']}, {res['date']})\n\n"
          f"page {args.page}, batch sizes 1..{args.max_batch}\n\n| step | launches | seconds |\n|---|---|---|\n"
          f"| warm-up, fresh Triton cache (new process) | {res['cold_process']['launches']} | "
          f"{res['cold_process']['seconds']} |\n"
          f"| warm-up, Triton's disk cache (new process) | {res['disk_cache_process']['launches']} | "
          f"{res['disk_cache_process']['seconds']} |\n"
          f"| warm-up again, same process | {res['in_process_again']['launches']} | "
          f"{res['in_process_again']['seconds']} |\n\n"
          f"Variants in the cache after warm-up: {res['variants_after_warm_up']}. Then {res['served_slots']} slots "
          f"allocated by SGLang's allocator over every batch size, twice each: variants compiled meanwhile "
          f"{res['compiled_while_serving'] or 'none'}.\n")
    (out / "alloc_warm_up.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
