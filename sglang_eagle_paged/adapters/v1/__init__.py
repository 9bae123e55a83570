"""The v1 adapter: SGLang's ``EAGLEWorker`` (0.5.8 .. 0.5.12.post1).

The hot path of one draft step is :func:`.draft_preprocess.draft_preprocess_decode` (slots,
rows and pairs in one launch, then the copy through :mod:`..common.kv_copy`). The verify's
bookkeeping and free are :mod:`.verify`; SGLang's own kernels compiled ahead are
:mod:`.sglang_warm_up`; the backend check at argument parsing is :mod:`.server_args_gate`;
releases without the plugin API install the same hooks through :mod:`.legacy`.
"""

from ...hooks import Hook
from ...settings import Mode, Settings

GENERATION = "v1"


def hooks(settings: Settings) -> list:
    """The v1 hooks for ``settings`` (mode on or fake: off installs nothing)."""
    from ..common import fa3_metadata, kv_copy, prefix_check
    from . import draft_preprocess, server_args_gate, verify
    from . import sglang_api as api

    init = draft_preprocess.worker_init_hook(settings)
    out = [
        Hook(api.DRAFT_PREPROCESS, draft_preprocess.draft_preprocess_decode_hook(settings.mode), "around"),
        Hook(api.WORKER_INIT, init, "after"),
        Hook(api.SPEC_ARGS_CHECK, server_args_gate.spec_args_hook(settings.allow_triton), "around"),
        # In both modes: fake differs from on by the draft copy alone (the worker skips it),
        # while the post-verify move, which has nothing to do with the bug, is ours in both.
        Hook(kv_copy.MOVE_KV_CACHE, kv_copy.move_kv_cache_hook, "around"),
    ]
    if settings.check_prefix:  # debug only: costs a sync and two reads of every prefix per step
        out += prefix_check.hooks(api.DRAFT_STEP, api.VERIFY_STEP, api.worker_kv_pools)
    out += fa3_metadata.hooks(settings.fa3_expand_for(GENERATION), required=settings.fa3_expand_explicit)
    # Without these serving is still right, only slower: STANDALONE's warm-up (its kernels would
    # compile on the first draft step) and the verify's bookkeeping (SGLang's torch.compile'd one stays).
    out += [Hook(api.STANDALONE_WORKER_INIT, init, "after", required=False),
            Hook(api.SRC_TGT_CACHE_LOC, verify.src_tgt_cache_loc, "replace", required=False)]
    if settings.verify_free:
        out += verify.verify_free_hooks()
    return out


def installed(hooked: list) -> None:
    """After the hooks took: the draft copy may go through the pool's hooked ``move_kv_cache``."""
    from ..common import kv_copy

    if kv_copy.MOVE_KV_CACHE in hooked:
        kv_copy.hook_installed["move_kv_cache"] = True


def describe(settings: Settings, hooked: list) -> str:
    from ..common import fa3_metadata

    chosen = settings.fa3_expand_for(GENERATION)
    fa3 = [t for t in fa3_metadata.targets(chosen) if t in hooked]
    return (f"draft preprocess=EAGLEWorker._draft_preprocess_decode (paged tree drafting), kv copy="
            f"{'one-launch duplication' if settings.mode is Mode.ON else 'skipped (fake)'}, fa3 metadata="
            f"{chosen.value if fa3 else 'SGLang' + chr(39) + 's'}, prefix check={'on' if settings.check_prefix else 'off'}")
