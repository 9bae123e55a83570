"""``sglang-eagle-paged kv-size``: the KV pool (``--max-total-tokens``) a server needs to run its
requests without SGLang retracting any, at each page size asked.

SGLang's v2 worker keeps a reserve free for every running request at each decode step
(:mod:`sglang_eagle_paged.kv_reserve`); with topk > 1 it is whole pages for every draft branch, so a
pool that serves page 1 can retract at page 64. Beside it, the same for the dense draft layout (page
1's slots at every page size; ``docs/design.md``, "Page > 1 in page 1's memory": opt-in with
``SGLANG_EAGLE_PAGED_DENSE_DRAFT`` for flashinfer and triton). ``--layout`` picks one of the two.

The tree's shape is taken as SGLang 0.5.23 takes it: with topk 1 its server arguments set the draft
tokens to steps + 1 (with a warning), and the figures are for that; more draft tokens than the tree
proposes are accepted at start-up by SGLang but fail its first draft, so they are refused here.
Pure arithmetic: no SGLang import, no GPU.
"""

import sys

from ..kv_reserve import held_beyond_committed, reserve_per_decode, slots_per_request
from .arg_types import at_least_one

LAYOUTS = ("both", "per-branch", "dense")
PER_BRANCH = ("reserve per request", "slots per request", "--max-total-tokens for the batch")
DENSE = ("dense: reserve (held at most)", "dense: slots per request", "dense: --max-total-tokens")


def tree_tokens(topk: int, steps: int) -> int:
    """The most tokens SGLang can verify per round for this tree: the root and every candidate its
    draft proposes, ``topk`` at the first step and ``topk * topk`` at each later one (from which
    ``organize_draft_results`` takes the best ``draft_tokens - 1`` with ``torch.topk``). Worked
    example: topk 8, 5 steps: 1 + 8 + 4 * 64 = 265."""
    return 1 + topk + (steps - 1) * topk * topk


def draft_tokens_served(topk: int, steps: int, asked: int) -> tuple[int, str | None]:
    """The draft tokens a server of SGLang 0.5.23 runs with ``asked``, and what it changed, in one
    line (None: nothing). Raises ``ValueError`` where its draft would fail."""
    if topk == 1:  # speculative_hook._handle_eagle_family: adjusted, with a warning
        if asked != steps + 1:
            return steps + 1, (f"--draft-tokens {asked} with --topk 1: SGLang sets --speculative-num-draft-tokens "
                               f"to steps + 1 = {steps + 1} for a chain (its server arguments warn so); "
                               f"the figures are for {steps + 1}")
        return asked, None
    most = tree_tokens(topk, steps)
    if asked > most:
        raise ValueError(f"--draft-tokens {asked} is more than a tree of topk {topk} and {steps} steps proposes "
                         f"({most} = 1 + {topk} + {steps - 1} x {topk}^2): SGLang starts with it and its first "
                         f"draft fails (torch.topk in organize_draft_results); ask at most {most}")
    return asked, None


def add_arguments(parser) -> None:
    parser.add_argument("--page-size", type=at_least_one, nargs="+", default=[1, 16, 64, 128],
                        help="KV cache page sizes to compare")
    parser.add_argument("--topk", type=at_least_one, default=8, help="--speculative-eagle-topk")
    parser.add_argument("--steps", type=at_least_one, default=5, help="--speculative-num-steps")
    parser.add_argument("--draft-tokens", type=at_least_one, default=64,
                        help="--speculative-num-draft-tokens (with --topk 1 SGLang uses steps + 1)")
    parser.add_argument("--running", type=at_least_one, default=48, help="requests decoding at once "
                        "(--max-running-requests)")
    parser.add_argument("--context", type=at_least_one, default=2048,
                        help="tokens of a request's prompt and output at its longest")
    parser.add_argument("--layout", choices=LAYOUTS, default="both",
                        help="the draft layout(s) to show: SGLang's per-branch pages, the dense layout "
                             "(SGLANG_EAGLE_PAGED_DENSE_DRAFT) or both")


def _layouts(layout: str) -> tuple:
    return {"both": (False, True), "per-branch": (False,), "dense": (True,)}[layout]


def table(a, draft_tokens: int | None = None) -> str:
    draft_tokens = a.draft_tokens if draft_tokens is None else draft_tokens
    layouts = _layouts(getattr(a, "layout", "both"))
    headers = ["page"] + [h for dense in layouts for h in (DENSE if dense else PER_BRANCH)]
    rows = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for page in a.page_size:
        cells = [str(page)]
        for dense in layouts:
            reserve = reserve_per_decode(page, a.topk, a.steps, draft_tokens, dense=dense)
            per_request = slots_per_request(page, a.context, reserve)
            held = f" ({held_beyond_committed(page, reserve):,})" if dense else ""
            cells += [f"{reserve:,}{held}", f"{per_request:,}", f"{a.running * per_request:,}"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _requests(n: int) -> str:
    return f"{n} running request" + ("" if n == 1 else "s")


def run(args) -> int:
    try:
        draft_tokens, note = draft_tokens_served(args.topk, args.steps, args.draft_tokens)
    except ValueError as exc:
        print(f"kv-size: {exc}", file=sys.stderr)
        return 2
    if note:
        print(f"kv-size: {note}\n")
    print(f"SGLang's KV reserve (topk {args.topk}, {args.steps} steps, {draft_tokens} draft tokens), "
          f"{_requests(args.running)} of up to {args.context:,} tokens each:\n")
    print(table(args, draft_tokens))
    layouts = _layouts(args.layout)
    print("\nA smaller pool retracts requests under that load; a larger --max-running-requests needs "
          "proportionally more (docs/configuration.md: Page size and KV memory).", end="")
    if True in layouts:
        print(" The dense columns: the draft slots laid out as page 1 lays them out (SGLANG_EAGLE_PAGED_DENSE_DRAFT=1, "
              "flashinfer and triton draft backends; docs/design.md, 'Page > 1 in page 1's memory'); in brackets the "
              "most slots a request holds beyond its committed tokens.", end="")
        if False in layouts:
            print(" Without it a server needs the per-branch columns' figures.", end="")
    print()
    return 0
