"""The v2 worker's prefix-tail duplication, sync-free: an AROUND hook on SGLang's
``duplicate_prefix_tail_to_draft_branches`` (same arguments, same resulting KV bytes).

SGLang's own function (0.5.13 .. 0.5.23) selects the live pairs with two boolean-mask
indexings (two host syncs per draft step) and copies them through the pool's
``move_kv_cache`` in ceil(N/256) launches whose Triton variant depends on N. Here one launch
of :func:`~sglang_eagle_paged.kernels.prefix_tail.duplicate_prefix_tail` finds the pairs and
copies them, with no torch op before it; batch size, topk and page size are runtime arguments:
the same compiled variant for every batch.

Copy only where it is read: the server's draft decode backend decides, once per process
(:mod:`.backends`): fa3 reads the copied slots, flashinfer and triton provably never do, so for
them the hook returns without a launch (nothing to copy is the fastest copy); anything the proof
does not cover copies, as SGLang does.

Pools other than the plain NHD ``MHATokenToKVPool`` (:mod:`.pools`) run SGLang's function
unchanged. Mode ``fake`` copies nothing (the old index-only behaviour, for benchmarks);
mode ``off`` installs no hook at all.
"""

import logging

from ...kernels.prefix_tail import duplicate_prefix_tail
from ...settings import Mode
from . import backends, fa3_in_place, pools

logger = logging.getLogger("sglang_eagle_paged")


def server_copy_decision() -> tuple:
    """``backends.copy_needed`` for this process's server arguments; copy where they are unknown."""
    try:
        from sglang.srt.server_args import get_global_server_args

        args = get_global_server_args()
    except Exception:  # noqa: BLE001 -- no server here (a tool, a test): copy, as SGLang does
        args = None
    if args is None:
        return True, "no server arguments in this process: copy as SGLang does"
    copy, reason = backends.copy_needed(args)
    if copy and backends.draft_decode_backend(args) == "fa3":  # fa3 reading in place needs no copy
        in_place, why = fa3_in_place.engaged(args)
        return (False, why) if in_place else (copy, f"{reason}; {why}")
    return copy, reason


def duplicate_in_pool(token_to_kv_pool, rows, prefix_base, last_page, num_new_pages, topk: int,
                      page_size: int) -> bool:
    """Copy every branch's first-page prefix tail with our kernel; False where ``token_to_kv_pool``
    is not one we copy (nothing done: the caller runs SGLang's function)."""
    table = pools.copy_table(token_to_kv_pool)
    if table is None:
        return False
    duplicate_prefix_tail(table, rows, prefix_base, last_page, num_new_pages, topk, page_size)
    return True


def make_hook(mode: Mode, copy_decision=server_copy_decision):
    """The AROUND hook for ``duplicate_prefix_tail_to_draft_branches`` in ``mode`` (on or fake).
    ``copy_decision() -> (copy, reason)`` is asked once, at the first draft step."""
    mode = Mode(mode)
    if mode is Mode.OFF:
        raise ValueError("mode off installs no hook")
    fake = mode is Mode.FAKE
    decided = []

    def duplicate_prefix_tail_to_draft_branches(original, token_to_kv_pool, rows, prefix_base, last_page,
                                                 num_new_pages, topk, page_size):
        if topk <= 1:  # SGLang's own early return: no other branch to fill
            return None
        if fake:
            return None
        if not decided:
            decided.append(copy_decision())
            logger.info("[sglang-eagle-paged] draft prefix-tail copy: %s (%s)",
                        "on" if decided[0][0] else "skipped", decided[0][1])
        if not decided[0][0]:
            return None
        if duplicate_in_pool(token_to_kv_pool, rows, prefix_base, last_page, num_new_pages, topk, page_size):
            return None
        return original(token_to_kv_pool, rows, prefix_base, last_page, num_new_pages, topk, page_size)

    duplicate_prefix_tail_to_draft_branches.mode = mode
    return duplicate_prefix_tail_to_draft_branches
