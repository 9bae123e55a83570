"""Optional replacement of the FA3 backend's tree-draft "expand" metadata builder.

Why: with ``--attention-backend fa3 --page-size > 1 --speculative-eagle-topk > 1``,
SGLang 0.5.12's ``FlashAttentionBackend`` calls
``draft_decode_set_expand_metadata`` once per draft step (from
``init_forward_metadata`` and ``init_forward_metadata_replay_cuda_graph``). That
function is ``@torch.compile(dynamic=True)``; its device work is a handful of
tiny ops, but every call goes through TorchDynamo's guard checks and wrapper on
the host (5 calls per decode step): 2.4 ms per step in an H200 torch.profiler
trace with Python stacks, which inflate such wrappers; Dynamo's own ops took
about 0.2 ms per step in the same trace. The real gain is for a GPU run to say. :func:`expand_metadata_replacement` does the same writes with a
single Triton launch (:mod:`.kernels.expand_metadata`), compiled once per
configuration, never per batch size.

It is OFF by default until a GPU measurement shows the gain end to end; set
``SGLANG_EAGLE_PAGED_FA3_EXPAND=1`` (or ``on``) to turn it on.

How it is installed: SGLang's ``HookRegistry`` with ``HookType.REPLACE``. A
REPLACE hook is called as ``hook(*args, **kwargs)`` with exactly the arguments
the backend passes (keywords, here) and is NOT given the original; the registry
``setattr``s the wrapper onto the ``flashattention_backend`` module (and onto
any module that did ``from ... import draft_decode_set_expand_metadata``), and
the backend looks the name up as a module global at call time, so it sees the
replacement. Hence the replacement has the original's exact parameter names.
"""

import os

from .kernels.expand_metadata import expand_draft_page_table

from .compat import FA3_EXPAND_METADATA as TARGET
ENV_VAR = "SGLANG_EAGLE_PAGED_FA3_EXPAND"

_ON = ("1", "on", "true", "yes")
_OFF = ("", "0", "off", "false", "no")


def enabled() -> bool:
    """Whether ``SGLANG_EAGLE_PAGED_FA3_EXPAND`` asks for the replacement (default: off)."""
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if raw in _ON:
        return True
    if raw in _OFF:
        return False
    raise ValueError(f"{ENV_VAR}={raw!r}: use one of {_ON + _OFF[1:]}")


def expand_metadata_replacement(
    cache_seqlens_int32,
    page_table,
    last_page_lens,
    decode_length,
    cache_loc,
    topk,
    page_size,
):
    """REPLACE hook body for :data:`TARGET`: same parameters, same in-place effect."""
    expand_draft_page_table(cache_seqlens_int32, page_table, last_page_lens, decode_length,
                            cache_loc, topk, page_size)


def register_hook() -> bool:
    """Register the REPLACE hook with SGLang's HookRegistry if :func:`enabled`.

    Returns whether it registered; ``HookRegistry.apply_hooks()`` must run after.
    """
    if not enabled():
        return False
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, expand_metadata_replacement, HookType.REPLACE)
    return True
