"""``sglang-eagle-paged kv-size``: the KV pool (``--max-total-tokens``) a server needs to run its
requests without SGLang retracting any, at each page size asked.

SGLang's v2 worker keeps a reserve free for every running request at each decode step
(:mod:`sglang_eagle_paged.kv_reserve`); with topk > 1 it is whole pages for every draft branch, so a
pool that serves page 1 can retract at page 64. Beside it, the same for the dense draft layout (page
1's slots at every page size; ``docs/design.md``, "Page > 1 in page 1's memory": opt-in with
``SGLANG_EAGLE_PAGED_DENSE_DRAFT`` for flashinfer and triton). Pure arithmetic: no SGLang import, no GPU.
"""

import argparse

from ..kv_reserve import held_beyond_committed, reserve_per_decode, slots_per_request


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_arguments(parser) -> None:
    parser.add_argument("--page-size", type=_positive, nargs="+", default=[1, 16, 64, 128],
                        help="KV cache page sizes to compare")
    parser.add_argument("--topk", type=_positive, default=8, help="--speculative-eagle-topk")
    parser.add_argument("--steps", type=_positive, default=5, help="--speculative-num-steps")
    parser.add_argument("--draft-tokens", type=_positive, default=64, help="--speculative-num-draft-tokens")
    parser.add_argument("--running", type=_positive, default=48, help="requests decoding at once "
                        "(--max-running-requests)")
    parser.add_argument("--context", type=_positive, default=2048,
                        help="tokens of a request's prompt and output at its longest")


def table(a) -> str:
    rows = ["| page | reserve per request | slots per request | --max-total-tokens for the batch "
            "| dense: reserve (held at most) | dense: slots per request | dense: --max-total-tokens |",
            "|---|---|---|---|---|---|---|"]
    for page in a.page_size:
        cells = [str(page)]
        for dense in (False, True):
            reserve = reserve_per_decode(page, a.topk, a.steps, a.draft_tokens, dense=dense)
            per_request = slots_per_request(page, a.context, reserve)
            held = f" ({held_beyond_committed(page, reserve):,})" if dense else ""
            cells += [f"{reserve:,}{held}", f"{per_request:,}", f"{a.running * per_request:,}"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def run(args) -> int:
    print(f"SGLang's KV reserve (topk {args.topk}, {args.steps} steps, {args.draft_tokens} draft tokens), "
          f"{args.running} running requests of up to {args.context:,} tokens each:\n")
    print(table(args))
    print("\nA smaller pool retracts requests under that load; a larger --max-running-requests needs "
          "proportionally more (README: Page size and KV memory). The dense columns: the draft slots laid out "
          "as page 1 lays them out (SGLANG_EAGLE_PAGED_DENSE_DRAFT=1, flashinfer and triton draft backends; "
          "docs/design.md, 'Page > 1 in page 1's memory'); without it a server reserves the first three columns' figures.")
    return 0
