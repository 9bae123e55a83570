"""The CPU demo: the real duplication path on SGLang's real pools.

With the plugin registered as SGLang registers it, on the installed release's generation:

- v2 (0.5.13 and later): SGLang's own ``prepare_for_draft`` runs its paged branch on a real
  ``MHATokenToKVPool``, calling the duplication by its module global, which is ours once hooked;
- v1: SGLang's ``EAGLEWorker._draft_preprocess_decode``, hooked, on its real ``ReqToTokenPool``,
  ``MHATokenToKVPool`` and ``PagedTokenToKVPoolAllocator``.

Each runs a worked example (page 4, topk 8, steps 5, a 7-token prefix), then a random batch, printing each branch's
pages and checking that every branch reads the prefix's KV (Triton kernels under
``TRITON_INTERPRET=1`` where there is no GPU). The same batch in ``fake`` mode shows what
index-only assignment leaves behind.
"""

import os
import random

from ..settings import Mode
from .arg_types import at_least_one


def _setup_device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    # must precede the first import of a Triton kernel
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return "cpu"


def add_arguments(parser):
    parser.add_argument("--batch-size", type=at_least_one, default=6, help="requests in the random batch")
    parser.add_argument("--page-size", type=at_least_one, default=16,
                        help="KV cache page size of the random batch (1: nothing to copy)")
    parser.add_argument("--topk", type=at_least_one, default=4,
                        help="draft branches per request (1: nothing to copy)")
    parser.add_argument("--steps", type=at_least_one, default=3, help="draft steps per branch")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random batch's prefix lengths and KV")


def _copies_expected(lens, page_size, topk) -> bool:
    """Whether the random batch has anything to copy: a partial last page and more than one
    branch. Without it index-only (fake) is right too, and the demo says OK for both."""
    return topk > 1 and any(n % page_size for n in lens)


def _show(h, row, seq_len, limit=None):
    last = seq_len % h.page_size
    print(f"  request row {row}: prefix {seq_len} tokens, last page holds {last}")
    for b, (page_id, slots) in enumerate(h.branch_pages(row, seq_len)[:limit]):
        role = "continues the prefix page" if b == 0 else f"copy of {last} slots"
        print(f"    branch {b}: page {page_id:4d} (slots {page_id * h.page_size}..{(page_id + 1) * h.page_size - 1}), {role}")


def _step(h, rows, mode):
    from ..adapters.v1 import sglang_api
    from ..adapters.v1.draft_preprocess import draft_preprocess_decode
    from ..hooks import resolve

    batch = h.batch(rows)
    free_before = h.allocator.available_size()
    if mode is Mode.ON:
        # through SGLang's own method, as the server calls it once the plugin is loaded
        resolve(sglang_api.DRAFT_PREPROCESS)(h.worker, batch)
    else:
        draft_preprocess_decode(h.worker, batch, mode)
    assert h.allocator.available_size() == free_before, "allocator state not restored"
    return batch


def run(args) -> int:
    import sys

    from .quiet import quiet_sglang, torch_missing

    problem = torch_missing("demo")
    if problem:
        print(problem, file=sys.stderr)
        return 1
    quiet_sglang()
    device = _setup_device()
    from ..releases import support

    generation = support().generation
    if generation == "v2":
        return _run_v2(args, device)
    from .. import plugin
    from .harness import PagedTreeHarness

    plugin.register()
    if plugin.active_mode() != Mode.ON.value:
        print(f"the plugin is not active here ({plugin.active_mode()}): see `sglang-eagle-paged doctor`")
        return 1
    print(f"device: {device}" + (" (Triton interpreter)" if device == "cpu" else ""))
    print("\n1) A worked example: page 4, topk 8, steps 5, prefix slots 4..10")
    h = PagedTreeHarness(page_size=4, topk=8, steps=5, device=device)
    row = h.add_request(7)
    batch = _step(h, [row], Mode.ON)
    out = batch.out_cache_loc.cpu().tolist()
    print(f"  prefix slots   {h.requests[row].tolist()}")
    print(f"  out_cache_loc  {out[:15]} ...")
    _show(h, row, 7, limit=3)
    expected = [11, 12, 13, 14, 15, 19, 20, 21, 22, 23, 27, 28, 29, 30, 31]
    ok_example = out[:15] == expected and not h.mismatched_branches([row])
    print(f"  draft slots as expected (branch 2 starts at slot 27), every branch reads the prefix: {ok_example}")

    print(f"\n2) A random batch: {args.batch_size} requests, page {args.page_size}, topk {args.topk}, steps {args.steps}")
    rng = random.Random(args.seed)
    lens = [rng.randint(1, 5 * args.page_size) for _ in range(args.batch_size)]
    results = {}
    for mode in (Mode.ON, Mode.FAKE):
        h = PagedTreeHarness(args.page_size, args.topk, args.steps, device=device, seed=args.seed)
        rows = [h.add_request(n) for n in lens]
        _step(h, rows, mode)
        if mode is Mode.ON:
            for r, n in list(zip(rows, lens))[:2]:
                _show(h, r, n)
        bad = h.mismatched_branches(rows)
        total = len(rows) * args.topk * 2 * h.kv_pool.layer_num
        results[mode] = bad
        print(f"  mode={mode.value:4s}: {total - len(bad)}/{total} (request, branch, K/V buffer) read the prefix's KV")
    return _verdict(ok_example, results, _copies_expected(lens, args.page_size, args.topk))


def _verdict(ok_example, results, copies_expected) -> int:
    """OK when every branch reads the prefix and, where there is something to copy, index-only
    (fake) does not."""
    ok = ok_example and not results[Mode.ON] and (bool(results[Mode.FAKE]) or not copies_expected)
    if not ok:
        print("\nFAILED")
    elif copies_expected:
        print("\nOK: every branch reads the prefix's KV; index-only (fake) does not.")
    else:
        print("\nOK: every branch reads the prefix's KV (this batch has nothing to copy, so fake is right too).")
    return 0 if ok else 1


# --- v2: SGLang's own prepare_for_draft, with the plugin's duplication hooked in -------------------

def _v2_step(pool, rows, seq_lens, page, topk, steps, mode):
    from . import v2_harness as vh

    if mode is Mode.ON:  # SGLang's caller, reaching the hooked function by its module global
        out, stopped = vh.prepare_for_draft(pool, rows, seq_lens, page, topk, steps)
        return out, stopped
    return None, None  # fake: the index-only path copies nothing


def _show_v2(rows, n, page, topk, steps, limit=None):
    last, base = n % page, n - n % page
    pages = (last + steps + page - 1) // page
    print(f"  request: prefix {n} tokens, last page holds {last}")
    for t in range(topk)[:limit]:
        start = base + t * pages * page
        first = int(rows[start]) // page
        role = "continues the prefix page" if t == 0 else f"copy of {last} slots"
        print(f"    branch {t}: page {first:4d} (slots {first * page}..{(first + 1) * page - 1}), {role}")


def _run_v2(args, device) -> int:
    import torch

    from .. import plugin
    from . import v2_harness as vh

    plugin.register()
    if plugin.active_mode() != Mode.ON.value:
        print(f"the plugin is not active here ({plugin.active_mode()}): see `sglang-eagle-paged doctor`")
        return 1
    print(f"device: {device}" + (" (Triton interpreter)" if device == "cpu" else "")
          + "; SGLang's v2 prepare_for_draft with the plugin's duplication hooked in")
    print("\n1) A worked example: page 4, topk 8, steps 5, prefix slots 4..10")
    page, topk, steps = 4, 8, 5
    pool = vh.make_pool(page, 256, device=device)
    vh.fill_random(pool, 0)
    rows = (torch.arange(96, dtype=torch.int32, device=device) + 4).view(1, -1)  # the scheduler's row: slot 4 on
    out, _ = _v2_step(pool, rows, [7], page, topk, steps, Mode.ON)
    got = out.cpu().tolist() if out is not None else []
    print(f"  prefix slots   {rows[0, :7].tolist()}")
    print(f"  out_cache_loc  {got[:15]} ...")
    _show_v2(rows[0], 7, page, topk, steps, limit=3)
    expected = [11, 12, 13, 14, 15, 19, 20, 21, 22, 23, 27, 28, 29, 30, 31]
    ok_example = got[:15] == expected and not vh.branch_mismatches(pool, rows, [7], page, topk, steps)
    print(f"  draft slots as expected (branch 2 starts at slot 27), every branch reads the prefix: {ok_example}")

    print(f"\n2) A random batch: {args.batch_size} requests, page {args.page_size}, topk {args.topk}, "
          f"steps {args.steps}")
    rng = random.Random(args.seed)
    lens = [rng.randint(1, 5 * args.page_size) for _ in range(args.batch_size)]
    results = {}
    for mode in (Mode.ON, Mode.FAKE):
        pool, rows = vh.layout_rows(lens, args.page_size, args.topk, args.steps, seed=args.seed, device=device)
        vh.fill_random(pool, args.seed)
        _v2_step(pool, rows, lens, args.page_size, args.topk, args.steps, mode)
        if mode is Mode.ON:
            for r, n in list(enumerate(lens))[:2]:
                _show_v2(rows[r], n, args.page_size, args.topk, args.steps)
        bad = vh.branch_mismatches(pool, rows, lens, args.page_size, args.topk, args.steps)
        copies = sum(1 for n in lens if n % args.page_size) * (args.topk - 1) * 2 * pool.layer_num
        results[mode] = bad
        print(f"  mode={mode.value:4s}: {copies - len(bad)}/{copies} (request, branch, K/V buffer) copies "
              "read the prefix's KV")
    return _verdict(ok_example, results, _copies_expected(lens, args.page_size, args.topk))
