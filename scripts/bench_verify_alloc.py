"""Host and wall time of the tree verify's slot allocation (``prepare_for_verify``), page 1 against page N.

What ``EagleVerifyInput.prepare_for_verify`` runs to give each request ``draft_tokens`` verify slots, on
SGLang's real allocators, through SGLang's own helpers:

- page 1: ``alloc_token_slots`` (a slice of the free list), then ``assign_req_to_token_pool_func``;
- page N: ``get_last_loc`` (a Triton kernel reading each request's last slot), then
  ``alloc_paged_token_slots_extend`` (new-page count from the CPU lengths, ``alloc_extend_kernel``),
  then ``assign_req_to_token_pool_func``;
- ours at page N: ``verify_alloc.prepare_for_verify_hook`` (``SGLANG_EAGLE_PAGED_VERIFY_ALLOC=1``), the
  same slots and ``req_to_token`` in one launch.

The tree cache is a chunk cache here, so the eviction check returns at once (a radix cache compares two
integers). Each call restores the allocator's free list afterwards.

  python scripts/bench_verify_alloc.py --out DIR     # writes verify_alloc.json, .md, .png
"""

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("bench_verify_free", ROOT / "scripts" / "bench_verify_free.py")
bvf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bvf)  # its report helpers; loads bench_kernels, which sets TRITON_INTERPRET without a GPU
bk = bvf.bk

import torch  # noqa: E402

from sglang_eagle_paged import compat, verify_alloc  # noqa: E402
from sglang_eagle_paged.harness import verify_harness  # noqa: E402


WAYS = ("page_n", "ours", "page_1")
NAMES = dict(page_n="SGLang", ours="ours (one launch)", page_1="SGLang at page 1")


def _prefix_lens(bs: int, page: int, seed: int) -> list:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, 4 * max(page, 64), (bs,), generator=gen).tolist()


def paged_alloc_step(bs: int, draft_tokens: int, page: int, ours: bool, seed: int = 0):
    """``prepare_for_verify``'s allocation at ``page`` > 1 (SGLang's, or ours), on a harness holding ``bs``
    real prefixes."""
    h, batch = verify_harness(page, draft_tokens, _prefix_lens(bs, page, seed), bk.DEV)
    allocator = h.allocator
    saved = allocator.free_pages

    def sglang_step():
        return verify_alloc.sglang_verify_slots(h, batch, draft_tokens)

    batch.forward_mode = SimpleNamespace(is_idle=lambda: False)
    batch.batch_size = lambda: bs
    spec = SimpleNamespace(draft_token=torch.zeros(bs * draft_tokens, dtype=torch.int64, device=bk.DEV),
                           draft_token_num=draft_tokens)

    def our_step():
        verify_alloc.prepare_for_verify_hook(None, spec, batch, page)
        return batch.out_cache_loc

    step = our_step if ours else sglang_step

    def run():
        out = step()
        allocator.free_pages = saved
        return out

    return run


def page_1_alloc_step(bs: int, draft_tokens: int):
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.common import alloc_token_slots

    allocator = TokenToKVPoolAllocator(bs * draft_tokens * 4, torch.bfloat16, bk.DEV, None, need_sort=False)
    tree_cache = SimpleNamespace(token_to_kv_pool_allocator=allocator, is_chunk_cache=lambda: True)
    saved = allocator.free_pages

    req_to_token = torch.zeros((bs, 4 * draft_tokens), dtype=torch.int32, device=bk.DEV)
    rows = torch.arange(bs, device=bk.DEV)
    start = torch.full((bs,), draft_tokens, device=bk.DEV)

    def run():
        out = alloc_token_slots(tree_cache, bs * draft_tokens)
        compat.assign_req_to_token_pool(rows, req_to_token, start, start + draft_tokens, out, bs)
        allocator.free_pages = saved
        return out

    return run


def bench(shapes):
    verify_alloc._state["on"] = True  # what SGLANG_EAGLE_PAGED_VERIFY_ALLOC=1 turns on at start-up
    rows = []
    for bs, draft_tokens, page in shapes:
        row = dict(bs=bs, draft_tokens=draft_tokens, page=page)
        slots = {}
        for way, run in (("page_n", paged_alloc_step(bs, draft_tokens, page, False)),
                         ("ours", paged_alloc_step(bs, draft_tokens, page, True)),
                         ("page_1", page_1_alloc_step(bs, draft_tokens))):
            out = slots[way] = run().cpu()
            row[f"{way}_slots_distinct"] = bool(out.numel() == bs * draft_tokens
                                                and torch.unique(out).numel() == out.numel())
            row.update(bk.prefixed(way, bk.measure(run, f"verify alloc bs{bs} p{page} {way}")))
            row[f"{way}_syncs"] = bk.count_syncs(run)
        row["same_slots"] = bool(torch.equal(slots["page_n"], slots["ours"]))
        rows.append(row)
        print(json.dumps(row), flush=True)
    verify_alloc._state["on"] = False
    return rows


def markdown(res) -> str:
    out = bvf.report_header(res, "Tree verify slot allocation", "bench_verify_alloc.py") + [
           "`prepare_for_verify`'s allocation of each request's verify slots "
           "through SGLang's helpers. **device** n/a where the step syncs; **wall**: back to back, GPU drained "
           "before and after; **host**: on an idle GPU until the call returns.", "",
           f"| bs | draft tokens | page | way | {bk.TIMING_HEAD} | syncs | slots distinct | same slots as SGLang |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        for way in WAYS:
            page = 1 if way == "page_1" else r["page"]
            out.append(f"| {r['bs']} | {r['draft_tokens']} | {page} | {NAMES[way]} | {bk.timing_cells(r, way)} | "
                       f"{r[f'{way}_syncs']} | {r[f'{way}_slots_distinct']} | {r['same_slots'] if way == 'ours' else ''} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench_verify_alloc")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from sglang_eagle_paged.harness import _ensure_global_server_args

    _ensure_global_server_args()
    shapes = [(3, 8, 4), (2, 16, 16)] if bk.DEV == "cpu" else [
        (1, 64, 64), (16, 64, 64), (48, 64, 64), (1, 64, 128), (16, 64, 128), (16, 64, 16)]
    bvf.write_report(args.out, "verify_alloc", bench(shapes), markdown,
                     lambda res, path: bvf.plot_host_bars(res, path, WAYS, NAMES, "tree verify slot allocation"))


if __name__ == "__main__":
    main()
