"""Does the draft's attention backend read the prefix-tail copy? (SGLang 0.5.13 - 0.5.23)

With EAGLE tree drafting at ``--page-size > 1``, branch ``t >= 1`` of a request starts
on a fresh page at the in-page offset of the prefix's tail (``last = seq_len % page``),
so the first ``last`` slots of that page are holes that SGLang fills with a copy of the
prefix's tail. Only a reader that reaches a branch's tokens through whole pages can see
the holes:

- fa3 does: its expand pass reads branch ``t`` as ``last + step + 1`` tokens from the
  branch's pages by block id (``draft_decode_set_expand_metadata``), holes first.
- flashinfer and triton do not: both read a per-token list built by
  ``generate_draft_decode_kv_indices`` -- the prefix's own ``seq_len`` slots, then the
  branch's draft slots from offset ``last`` on -- flashinfer planned with page size 1,
  triton addressing each slot by its own id. No other pass reads a hole before writing
  it (verify and the draft extend write their window first; later rounds read only
  committed positions).

The argument, with file:function references and the CPU proof, is in
docs/backend_reads.md. Where the proof does not reach, the answer is "copy", as SGLang
does. SGLang is not imported here.

What decides is the draft decode backend object itself: every v2 release (0.5.13 ..
0.5.23) builds it in the draft worker's ``init_attention_backend`` and stores it on the
draft runner (``draft_runner.draft_attn_backend``), the runner whose pool the duplication
is handed. Its class says which reader runs; no process-wide accessor is asked (0.5.23
retired ``get_global_server_args``, and its raw server arguments need not name the
backend in effect). The draft runner's plan asks once, and again when SGLang replaces the
backend (:mod:`.draft_plan`).
"""

import os
from typing import NamedTuple

from .sglang_api import FA3_MULTI_STEP_BACKEND, FLASHINFER_DRAFT_BACKEND, TRITON_DRAFT_BACKEND


class CopyDecision(NamedTuple):
    """Whether the duplication copies for a draft decode backend, and why. ``in_place``: no copy
    because FA3 reads the prefix's tail where it lies (opt-in)."""

    copy: bool
    reason: str
    in_place: bool = False

# SGLang's multi-step draft decode backends by class (module.qualname, the same in 0.5.13.post1,
# 0.5.15.post1, 0.5.17 and 0.5.23): the backend name, whether its draft decode reads the copied
# slots, and why. Exact classes only: a subclass may read differently, so it copies.
READERS = {
    FLASHINFER_DRAFT_BACKEND: (
        "flashinfer", False, "flashinfer's draft decode reads per-token indices (page size 1): "
        "the prefix's own slots and each branch's draft slots, never the copied ones"),
    TRITON_DRAFT_BACKEND: (
        "triton", False, "triton's draft decode reads per-token indices: the prefix's own slots "
        "and each branch's draft slots, never the copied ones"),
    FA3_MULTI_STEP_BACKEND: (
        "fa3", True, "fa3's (and fa4's) draft decode reads each branch's first page by block id, "
        "copied slots included"),
}

# Settings that change which slots, or how, the draft decode reads: not in the proof.
_HND_ENV = "SGLANG_USE_HND_KVCACHE"
_TRUE = ("1", "true", "yes", "on")


def class_path(obj) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


REASON_IN_PLACE = ("fa3 in place (SGLANG_EAGLE_PAGED_FA3_IN_PLACE): the first pass reads the prefix's "
                   "partial last page, the expand pass only each branch's own draft slots")


def copy_needed(draft_backend, in_place: bool = False) -> CopyDecision:
    """Copy (and why) when the prefix-tail duplication must copy for a draft decode run by
    ``draft_backend`` (SGLang's multi-step draft backend object, or None); no copy where no reader
    can see what it would copy, or FA3 reads the tail in place (``in_place``: every step backend of
    ``draft_backend`` covered, as the draft plan decides)."""
    if draft_backend is None:
        return CopyDecision(True, "no multi-step draft decode backend (steps <= 1, or not built yet): "
                                  "copy as SGLang does")
    path = class_path(draft_backend)
    entry = READERS.get(path)
    if entry is None:
        return CopyDecision(True, f"draft decode backend {path} is not covered by the proof: copy as SGLang does")
    _name, reads, why = entry
    if reads:
        if in_place:  # SGLANG_EAGLE_PAGED_FA3_IN_PLACE, covered backends
            return CopyDecision(False, REASON_IN_PLACE, in_place=True)
        return CopyDecision(True, why)
    if os.environ.get(_HND_ENV, "").strip().lower() in _TRUE:
        return CopyDecision(True, f"{_HND_ENV} (HND pool layout) is not covered by the proof: copy as SGLang does")
    if any((getattr(step, "dcp_size", 1) or 1) > 1 for step in getattr(draft_backend, "attn_backends", ()) or ()):
        return CopyDecision(True, "decode context parallelism is not covered by the proof: copy as SGLang does")
    return CopyDecision(False, why)
