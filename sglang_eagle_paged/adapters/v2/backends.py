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
"""

import os

# Draft decode backends proven never to read a hole, and why.
NO_HOLE_READS = {
    "flashinfer": "flashinfer's draft decode reads per-token indices (page size 1): "
    "the prefix's own slots and each branch's draft slots, never the copied ones",
    "triton": "triton's draft decode reads per-token indices: the prefix's own slots "
    "and each branch's draft slots, never the copied ones",
}
HOLE_READS = {
    "fa3": "fa3's draft decode reads each branch's first page by block id, "
    "copied slots included",
}

# Settings that change which slots, or how, the draft decode reads: not in the proof.
_HND_ENV = "SGLANG_USE_HND_KVCACHE"
_TRUE = ("1", "true", "yes", "on")


def draft_decode_backend(server_args):
    """The draft decode backend SGLang 0.5.13 - 0.5.23 builds (``DraftBackendFactory``):
    ``--speculative-draft-attention-backend``, else ``--decode-attention-backend``, else
    ``--attention-backend``; None when none is set."""
    for attr in ("speculative_draft_attention_backend", "decode_attention_backend",
                 "attention_backend"):
        value = getattr(server_args, attr, None)
        if value:
            return value
    return None


def _int(server_args, attr, default):
    value = getattr(server_args, attr, None)
    return default if value is None else value


def copy_needed(server_args) -> tuple:
    """``(True, reason)`` when the prefix-tail duplication must copy for this server's
    draft decode, ``(False, reason)`` when no reader can see what it would copy."""
    topk = _int(server_args, "speculative_eagle_topk", 1)
    page_size = _int(server_args, "page_size", 1)
    if topk <= 1 or page_size <= 1:
        return False, f"topk {topk}, page size {page_size}: no branch has copied slots"
    backend = draft_decode_backend(server_args)
    if backend in HOLE_READS:
        return True, HOLE_READS[backend]
    if backend not in NO_HOLE_READS:
        return True, f"draft decode backend {backend!r} is not covered by the proof: copy as SGLang does"
    if os.environ.get(_HND_ENV, "").strip().lower() in _TRUE:
        return True, f"{_HND_ENV} (HND pool layout) is not covered by the proof: copy as SGLang does"
    if _int(server_args, "dcp_size", 1) > 1:
        return True, "decode context parallelism is not covered by the proof: copy as SGLang does"
    return False, NO_HOLE_READS[backend]
