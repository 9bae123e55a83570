"""The v2 worker's prefix-tail duplication, sync-free: an AROUND hook on SGLang's
``duplicate_prefix_tail_to_draft_branches`` (same arguments, same resulting KV bytes).

SGLang's own function (0.5.13 .. 0.5.23) selects the live pairs with two boolean-mask
indexings (two host syncs per draft step) and copies them through the pool's
``move_kv_cache`` in ceil(N/256) launches whose Triton variant depends on N. Here one launch
of :func:`~sglang_eagle_paged.kernels.prefix_tail.duplicate_prefix_tail` finds the pairs and
copies them, with no torch op before it; batch size, topk and page size are runtime arguments:
the same compiled variant for every batch.

Order of the decision, every call: the pool first -- pools other than the plain NHD
``MHATokenToKVPool`` (:mod:`.pools`) run SGLang's function unchanged, whatever reads them;
then the reader (:mod:`.backends`): the draft decode backend object of the runner that owns
the pool. fa3 reads the copied slots, flashinfer and triton provably never do, so for them the
hook returns without a launch (nothing to copy is the fastest copy); anything the proof does
not cover copies, as SGLang does. Each pool class's path is logged once (``pools.log_path``).

A failure on our path (an exception raised on the host while deciding, building the pairs or
launching, compile errors included) never reaches SGLang's scheduler: that call runs SGLang's
own function, our path is switched off for the process, and one ERROR line says why. A copy
our kernel began writes the same bytes SGLang's function then writes, so the KV ends as
SGLang's function leaves it.

Mode ``fake`` copies nothing (the old index-only behaviour, for benchmarks); mode ``off``
installs no hook at all.
"""

from ...kernels.prefix_tail import duplicate_prefix_tail
from ...settings import Mode
from ..common.fault_switch import FaultSwitch
from . import backends, dense_draft, pools
from .hook_points import FUNCTION


# Why our path was switched off in this process (falsy: it serves).
_switched_off = FaultSwitch("[sglang-eagle-paged] v2 draft duplication switched off for this process, SGLang's own "
                            f"{FUNCTION} serves from now on: %s")


def switch_off(reason: str, say: bool = True) -> None:
    """Serve every later call with SGLang's own function; one ERROR line per process (``say``:
    this one's)."""
    _switched_off.trip(reason, say)


def switched_off() -> str | None:
    return _switched_off.reason


def duplicate_in_pool(token_to_kv_pool, rows, prefix_base, last_page, num_new_pages, topk: int,
                      page_size: int) -> bool:
    """Copy every branch's first-page prefix tail with our kernel; False where ``token_to_kv_pool``
    is not one we copy (nothing done: the caller runs SGLang's function)."""
    table = pools.copy_table(token_to_kv_pool)
    if table is None:
        return False
    duplicate_prefix_tail(table, rows, prefix_base, last_page, num_new_pages, topk, page_size)
    return True


_SGLANGS = f"SGLang's own {FUNCTION}"
_SKIPPED = "copy skipped, nothing launched"


def _served(copy_decision, pool, rows, prefix_base, last_page, num_new_pages, topk, page_size) -> bool:
    """Our path: True where it served the call (copied, or nothing to copy for this reader);
    False where SGLang's function must run."""
    table, declined = pools.verdict(pool)
    if table is None:
        pools.log_path(pool, _SGLANGS, declined)
        return False
    decision = copy_decision(pool)
    if not decision.copy:
        pools.log_path(pool, _SKIPPED, decision.reason)
        return True
    pools.log_path(pool, pools.OURS, decision.reason)
    duplicate_prefix_tail(table, rows, prefix_base, last_page, num_new_pages, topk, page_size)
    return True


def make_hook(mode: Mode, copy_decision=backends.pool_decision):
    """The AROUND hook for ``duplicate_prefix_tail_to_draft_branches`` in ``mode`` (on or fake).
    ``copy_decision(pool) ->`` :class:`.backends.CopyDecision` is asked on every call our kernel could
    serve."""
    mode = Mode(mode)
    if mode is Mode.OFF:
        raise ValueError("mode off installs no hook")
    fake = mode is Mode.FAKE

    def duplicate_prefix_tail_to_draft_branches(original, token_to_kv_pool, rows, prefix_base, last_page,
                                                 num_new_pages, topk, page_size):
        if topk <= 1:  # SGLang's own early return: no other branch to fill
            return None
        if fake or dense_draft.PLAN.active:  # the dense layout has no prefix tail to copy
            return None
        if not _switched_off:
            try:
                if _served(copy_decision, token_to_kv_pool, rows, prefix_base, last_page, num_new_pages, topk,
                           page_size):
                    return None
            except Exception as exc:  # noqa: BLE001 -- any host-side failure of ours: SGLang's function serves
                switch_off(f"{type(exc).__name__}: {exc}")
        return original(token_to_kv_pool, rows, prefix_base, last_page, num_new_pages, topk, page_size)

    duplicate_prefix_tail_to_draft_branches.mode = mode
    return duplicate_prefix_tail_to_draft_branches
