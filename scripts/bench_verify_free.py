"""Host and wall time of the paged tree verify's free step, as ``eagle_info`` runs it, per way of running it.

From the bookkeeping to the allocator's free (``adapters/v1/verify.py``'s docstring lists the calls), on
SGLang's real paged allocator, with verify slots laid out as its allocator lays them out:

- ``sglang``: stock SGLang (``get_src_tgt_cache_loc`` under ``torch.compile``, ``get_target_cache_loc``,
  ``free`` with its ``torch.unique``);
- ``slot_list``: our bookkeeping kernel, then SGLang's split and free (what served before the page list);
- ``page_list``: what serves now (``SGLANG_EAGLE_PAGED_VERIFY_FREE``, on by default);
- ``page_1``: for scale, page 1's free of the same verify (``free(out_cache_loc[evict_mask])``).

Each call restores the allocator's lists afterwards (an attribute assignment), so every call frees
into the same free list. Also counts host syncs per call (torch's sync debug mode) and checks that
the three page-N ways free the same pages.

  python scripts/bench_verify_free.py --out DIR     # writes verify_free.json, .md, .png
"""

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("bench_kernels", ROOT / "scripts" / "bench_kernels.py")
bk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bk)  # sets TRITON_INTERPRET on a machine without a GPU

import torch  # noqa: E402
import triton  # noqa: E402

from sglang_eagle_paged.adapters.v1 import sglang_api as compat  # noqa: E402
from sglang_eagle_paged.adapters.v1 import verify as verify_compaction  # noqa: E402
from sglang_eagle_paged.adapters.v1 import verify as verify_free  # noqa: E402
from sglang_eagle_paged.tools.harness import paged_verify_inputs  # noqa: E402
from sglang_eagle_paged.kernels import verify_bookkeeping  # noqa: E402

WAYS = ("sglang", "slot_list", "page_list", "page_1")
NAMES = dict(sglang="SGLang", slot_list="ours, slot list (before)", page_list="ours, page list (now)",
             page_1="page 1 (SGLang's free of the same verify)")


def _allocator(page: int, pages: int):
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator

    if page == 1:
        return TokenToKVPoolAllocator(pages, torch.bfloat16, bk.DEV, None, need_sort=False)
    return PagedTokenToKVPoolAllocator(pages * page, page, torch.bfloat16, bk.DEV, None, need_sort=False)


def verify_free_step(way: str, bs: int, draft_tokens: int, page: int, gen):
    """A function running one verify's free step the given way, and one returning the pages it freed."""
    from sglang.srt.speculative import spec_utils

    seq_lens, out_cache_loc, accept_index, num_correct = (t.to(bk.DEV) for t in paged_verify_inputs(
        gen, bs, draft_tokens, page, max_correct=5))
    num_pages = int(out_cache_loc.max()) // page + 2
    allocator = _allocator(1 if way == "page_1" else page, num_pages * (page if way == "page_1" else 1))
    split_kernel = verify_free.TargetCacheLoc.original
    stock_free = type(allocator).free
    saved = (allocator.free_pages, allocator.release_pages)

    if way == "page_1":
        evict = torch.ones_like(out_cache_loc, dtype=torch.bool)
        evict[accept_index] = False

        def step():
            allocator.free(out_cache_loc[evict])
    else:
        bookkeeping = {"sglang": spec_utils.get_src_tgt_cache_loc, "slot_list": verify_bookkeeping.src_and_free_counts,
                       "page_list": verify_compaction.src_tgt_cache_loc}[way]
        split = verify_free.TargetCacheLoc if way == "page_list" else split_kernel

        def free(index):
            return (verify_free.free_hook(stock_free, allocator, index) if way == "page_list"
                    else stock_free(allocator, index))

        def step():
            verify_free._state["pages"] = way == "page_list"
            _, tgt, to_free_num = bookkeeping(seq_lens, out_cache_loc, accept_index, num_correct, draft_tokens, page)
            to_free = torch.empty((to_free_num.sum().item(),), dtype=torch.int64, device=to_free_num.device)
            split[(bs,)](tgt, to_free, num_correct, to_free_num, out_cache_loc, draft_tokens,
                         triton.next_power_of_2(draft_tokens), triton.next_power_of_2(bs))
            free(to_free)

    def run():
        step()
        allocator.free_pages, allocator.release_pages = saved

    def freed_pages():
        """The pages the step put at the front of the free list (a paged allocator's free prepends)."""
        step()
        got = allocator.free_pages[: len(allocator.free_pages) - len(saved[0])]
        allocator.free_pages, allocator.release_pages = saved
        return got.sort().values

    return run, freed_pages


def bench(shapes, seed=0):
    verify_free.TargetCacheLoc.original = compat.resolve(compat.TARGET_CACHE_LOC_KERNEL)
    rows = []
    for bs, draft_tokens, page in shapes:
        row = dict(bs=bs, draft_tokens=draft_tokens, page=page)
        freed = {}
        for way in WAYS:
            run, freed_pages = verify_free_step(way, bs, draft_tokens, page, torch.Generator().manual_seed(seed))
            if way != "page_1":
                freed[way] = freed_pages().cpu()
            row.update(bk.prefixed(way, bk.measure(run, f"verify free bs{bs} p{page} {way}")))
            row[f"{way}_syncs"] = bk.count_syncs(run)
        row["pages_freed"] = int(freed["sglang"].numel())
        row["same_pages"] = all(torch.equal(freed["sglang"], freed[w]) for w in ("slot_list", "page_list"))
        rows.append(row)
        print(json.dumps(row), flush=True)
    verify_free._state["pages"] = False
    return rows


def report_header(res, title: str, script: str) -> list:
    """A report's title line and its machine, versions and script, as Markdown lines."""
    return [f"# {title} ({res['device']}, {res['date']})", "",
            f"sglang {res['versions']['sglang']}, torch {res['versions']['torch']}, triton {res['versions']['triton']}; "
            f"`scripts/{script}`."]


def markdown(res) -> str:
    out = report_header(res, "Paged verify free step", "bench_verify_free.py") + [
           "Per verify round, from the bookkeeping to the allocator's free, as "
           "`eagle_info` runs it; 0-5 accepted drafts per request. **wall**: back to back, GPU drained before and "
           "after; **host**: on an idle GPU until the call returns (what a host-bound server waits for). Device "
           "time is n/a: every way syncs.", "",
           "| bs | draft tokens | page | way | wall us | host us | syncs | pages freed | same pages |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        for way in WAYS:
            shape = f"| {r['bs']} | {r['draft_tokens']} | {1 if way == 'page_1' else r['page']}"
            same = "" if way in ("sglang", "page_1") else r["same_pages"]
            pages = r["pages_freed"] if way != "page_1" else ""
            out.append(f"{shape} | {NAMES[way]} | {r[f'{way}_wall_us']} | {r[f'{way}_host_us']} | "
                       f"{r[f'{way}_syncs']} | {pages} | {same} |")
    return "\n".join(out) + "\n"


def plot_host_bars(res, path, ways, names, title):
    """Host time per verify round of each way, one group of bars per shape."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = res["rows"]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    xs = range(len(rows))
    width = 0.8 / len(ways)
    for i, way in enumerate(ways):
        ax.bar([x + (i - (len(ways) - 1) / 2) * width for x in xs], [r[f"{way}_host_us"] for r in rows], width,
               label=names[way])
    ax.set_xticks(list(xs), [f"bs{r['bs']}/p{r['page']}/d{r['draft_tokens']}" for r in rows], fontsize=7)
    ax.set_ylabel("host us per verify round")
    ax.set_title(f"{title}, {res['device']}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write_report(out_dir, stem, rows, markdown, plot):
    """``<stem>.json``, ``.md`` and ``.png`` in ``out_dir``: the rows with the machine and versions."""
    import sglang

    res = dict(device=torch.cuda.get_device_name() if bk.DEV == "cuda" else "cpu (Triton interpreter)",
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), host=platform.node(),
               versions=dict(sglang=sglang.__version__, torch=torch.__version__, triton=triton.__version__),
               rows=rows)
    with open(os.path.join(out_dir, f"{stem}.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(out_dir, f"{stem}.md"), "w") as f:
        f.write(markdown(res))
    plot(res, os.path.join(out_dir, f"{stem}.png"))
    print(markdown(res))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench_verify_free")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if bk.DEV == "cpu":
        shapes = [(3, 8, 4), (2, 16, 16)]
    else:
        shapes = [(1, 64, 64), (4, 64, 64), (16, 64, 64), (64, 64, 64), (1, 64, 128), (16, 64, 128), (16, 64, 16)]
    write_report(args.out, "verify_free", bench(shapes), markdown,
                 lambda res, path: plot_host_bars(res, path, WAYS, NAMES, "paged verify free step"))


if __name__ == "__main__":
    main()
