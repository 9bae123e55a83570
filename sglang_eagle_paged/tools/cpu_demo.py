"""The main job on a CPU: the real duplication path on SGLang's real pools.

Runs our ``_draft_preprocess_decode`` (Triton kernels under ``TRITON_INTERPRET=1``
when there is no GPU) on SGLang's ``ReqToTokenPool``, ``MHATokenToKVPool`` and
``PagedTokenToKVPoolAllocator``: first the reference design's worked example, then
a random batch, printing each branch's pages and checking that every branch reads
the prefix's KV. The same batch in ``fake`` mode shows what index-only assignment
leaves behind.
"""

import os
import random

from ..settings import Mode


def _setup_device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    # must precede the first import of a Triton kernel
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return "cpu"


def add_arguments(parser):
    parser.add_argument("--batch-size", type=int, default=6)
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--topk", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)


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
    device = _setup_device()
    from .. import plugin
    from .harness import PagedTreeHarness

    plugin.register()
    if plugin.active_mode() != Mode.ON.value:
        print(f"the plugin is not active here ({plugin.active_mode()}): see `sglang-eagle-paged doctor`")
        return 1
    print(f"device: {device}" + (" (Triton interpreter)" if device == "cpu" else ""))
    print("\n1) The reference design's worked example: page 4, topk 8, steps 5, prefix slots 4..10")
    h = PagedTreeHarness(page_size=4, topk=8, steps=5, device=device)
    row = h.add_request(7)
    batch = _step(h, [row], Mode.ON)
    out = batch.out_cache_loc.cpu().tolist()
    print(f"  prefix slots   {h.requests[row].tolist()}")
    print(f"  out_cache_loc  {out[:15]} ...")
    _show(h, row, 7, limit=3)
    expected = [11, 12, 13, 14, 15, 19, 20, 21, 22, 23, 27, 28, 29, 30, 31]
    ok_example = out[:15] == expected and not h.mismatched_branches([row])
    print(f"  matches the worked example (last value 27, the text's 24 is a typo): {ok_example}")

    print(f"\n2) A random batch: {args.batch_size} requests, page {args.page_size}, topk {args.topk}, steps {args.steps}")
    rng = random.Random(args.seed)
    results = {}
    for mode in (Mode.ON, Mode.FAKE):
        h = PagedTreeHarness(args.page_size, args.topk, args.steps, device=device, seed=args.seed)
        lens = [rng.randint(1, 5 * args.page_size) for _ in range(args.batch_size)]
        rows = [h.add_request(n) for n in lens]
        _step(h, rows, mode)
        if mode is Mode.ON:
            for r, n in list(zip(rows, lens))[:2]:
                _show(h, r, n)
        bad = h.mismatched_branches(rows)
        total = len(rows) * args.topk * 2 * h.kv_pool.layer_num
        results[mode] = bad
        print(f"  mode={mode.value:4s}: {total - len(bad)}/{total} (request, branch, K/V buffer) read the prefix's KV")
    ok = ok_example and not results[Mode.ON] and (results[Mode.FAKE] or args.topk == 1)
    print("\nOK: every branch reads the prefix's KV; index-only (fake) does not." if ok else "\nFAILED")
    return 0 if ok else 1
