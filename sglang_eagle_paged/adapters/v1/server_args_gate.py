"""Which attention backends may draft a paged tree, checked when ServerArgs is built (v1)."""

from ...settings import ALLOW_TRITON as ALLOW_TRITON_ENV

# Backends whose draft decode reads one page table per request: the topk branches
# of a tree cannot each get their own pages, whatever is copied.
NO_PER_BRANCH_PAGE_TABLE = {
    "flashmla": "FlashMLA decodes from one page table per request",
    "trtllm_mla": "TRT-LLM MLA kernels take one page table per request",
    "cutlass_mla": "CUTLASS MLA kernels take one page table per request",
    "trtllm_mha": "TRT-LLM MHA kernels support topk = 1 only",
}

# SGLang 0.5.12 refuses triton for topk > 1 with page > 1. Our duplication makes each
# branch's pages real, but triton's paged tree drafting has not run in the GPU suite yet,
# so allowing it is an explicit opt-in until it has.
SGLANG_ALLOWED = ("flashinfer", "fa3")

_EAGLE_ALGOS = ("EAGLE", "EAGLE3", "STANDALONE")


def _paged_tree(args) -> bool:
    return (
        str(getattr(args, "speculative_algorithm", None) or "").upper() in _EAGLE_ALGOS
        and (args.speculative_eagle_topk or 1) > 1
        and args.page_size is not None
        and args.page_size > 1
    )


def _backends(args):
    """(flag, backend) pairs that are set, so a refusal can name the flag the user gave."""
    flags = (("--attention-backend", "attention_backend"),
             ("--decode-attention-backend", "decode_attention_backend"),
             ("--prefill-attention-backend", "prefill_attention_backend"))
    return [(flag, getattr(args, attr, None)) for flag, attr in flags if getattr(args, attr, None)]


def refusal(args) -> str | None:
    if not _paged_tree(args):
        return None
    for flag, backend in _backends(args):
        if backend in NO_PER_BRANCH_PAGE_TABLE:
            return (
                f"{flag} {backend} cannot run EAGLE tree drafting "
                f"(--speculative-eagle-topk {args.speculative_eagle_topk}) with "
                f"--page-size {args.page_size}: {NO_PER_BRANCH_PAGE_TABLE[backend]}. "
                f"Use --attention-backend fa3 or flashinfer (triton with {ALLOW_TRITON_ENV}=1), or "
                f"--speculative-eagle-topk 1, or --page-size 1."
            )
    return None


# SGLang 0.5.12 builds ServerArgs with any of these at 0 or below (and then fails somewhere
# later, at best); refusing them while parsing arguments names the flag.
_POSITIVE = (("--page-size", "page_size"), ("--speculative-eagle-topk", "speculative_eagle_topk"),
             ("--speculative-num-steps", "speculative_num_steps"),
             ("--speculative-num-draft-tokens", "speculative_num_draft_tokens"))


def invalid_value(args) -> str | None:
    """The first tree-drafting setting that is not a positive integer, as SGLang resolved it."""
    if str(getattr(args, "speculative_algorithm", None) or "").upper() not in _EAGLE_ALGOS:
        return None
    for flag, attr in _POSITIVE:
        value = getattr(args, attr, None)
        if value is None:
            continue  # not set and not defaulted: SGLang's own business
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{flag} {value!r} is invalid for speculative decoding: it must be a positive integer."
    return None


def spec_args_hook(allow_triton: bool):
    """AROUND hook for ``ServerArgs._handle_speculative_decoding``; ``allow_triton``:
    ``SGLANG_EAGLE_PAGED_ALLOW_TRITON``."""
    extra = ("triton",) if allow_triton else ()

    def around(original, args):
        reason = refusal(args)
        if reason:
            raise ValueError(f"[sglang-eagle-paged] {reason}")
        result = _sglang_check(original, args, extra)
        problem = invalid_value(args)  # after SGLang filled in its defaults
        if problem:
            raise ValueError(f"[sglang-eagle-paged] {problem}")
        return result

    return around


def _sglang_check(original, args, extra_allowed: tuple):
    masked = _paged_tree(args) and args.attention_backend in extra_allowed
    if not masked:
        return original(args)
    # SGLang's check reads only the name; present an allowed one for its duration.
    real = args.attention_backend
    args.attention_backend = SGLANG_ALLOWED[0]
    try:
        return original(args)
    finally:
        if args.attention_backend == SGLANG_ALLOWED[0]:
            args.attention_backend = real
