"""Every hook the v2 adapter installs, built in one place for a :class:`~sglang_eagle_paged.settings.Settings`
and a release: what SGLang calls (its names: :mod:`.sglang_api`), which body of ours it calls (the
draft step's, :mod:`.draft_step`; the warm-up's, :mod:`.warm_up`), and every AROUND and AFTER body
under the fault rule (:func:`.fault.guarded`). Imports point one way: this module imports the bodies,
nothing under it imports this module.

| target (SGLang)                                         | kind    | when                         |
|---------------------------------------------------------|---------|------------------------------|
| ``duplicate_prefix_tail_to_draft_branches`` (its home)  | around  | on, fake                     |
| the draft workers' ``init_attention_backend``           | after   | on: the plan and warm-up     |
| ``allocation_sizing.get_alloc_len_per_decode``          | around  | dense draft layout           |
| ``eagle_worker_common.prepare_for_draft``               | around  | dense draft layout           |
| triton's / flashinfer's ``generate_draft_decode_kv_indices`` | replace | dense draft layout      |
| ``FlashAttentionBackend.__init__``                      | after   | fa3 in place, dense layout   |
| ``FlashAttentionBackend.init_forward_metadata[_out_graph]`` | after | fa3 in place, dense layout |
| fa3's ``flash_attn_with_kvcache``                       | around  | fa3 in place, dense layout   |
| fa3's ``draft_decode_set_expand_metadata``              | around  | fa3 metadata expand or fused |
| ``FlashAttentionMultiStepBackend.init_forward_metadata_out_graph`` | around | fa3 metadata fused  |
| the draft workers' ``init_attention_backend``           | after   | fa3 metadata: compile ahead  |
"""

import functools
import logging
import pkgutil

from ... import releases
from ...hooks import Hook, resolvable, resolve
from ...settings import FA3Expand, Mode, Settings
from ..common import fa3_metadata
from . import dense_draft, draft_plan, draft_step, fa3_in_place, fa3_replay, fault, hook_points, warm_up
from . import sglang_api as api

logger = logging.getLogger("sglang_eagle_paged")

WARM_UP = "the draft plan, our kernels compiled ahead"
FA3_WARM_UP = "fa3 draft metadata kernels compiled ahead"


def mode_of(settings_or_mode) -> Mode:
    return Mode(settings_or_mode.mode if isinstance(settings_or_mode, Settings) else settings_or_mode)


def warm_up_targets() -> list:
    """The draft worker classes' own ``init_attention_backend`` in the SGLang importable here (after it,
    the draft pool and its decode backend exist); a class that inherits it is served by its parent's."""
    out = []
    for cls_path in api.DRAFT_WORKERS:
        try:
            cls = pkgutil.resolve_name(cls_path)
        except Exception:  # noqa: BLE001 -- an import-time error of SGLang's is left to hooks.install to report
            out.append(f"{cls_path}.{api.WARM_UP_METHOD}")
            continue
        if api.WARM_UP_METHOD in vars(cls):
            out.append(f"{cls_path}.{api.WARM_UP_METHOD}")
    return out


def hooks(settings_or_mode, version: str | None = None) -> list:
    """The v2 hooks for a settings object or a mode (on, fake; off installs nothing), for ``version``
    (default: the installed SGLang)."""
    mode = mode_of(settings_or_mode)
    if mode is Mode.OFF:
        return []
    s = settings_or_mode if isinstance(settings_or_mode, Settings) else None
    dense = dense_draft_layout(s.dense_draft, version) if mode is Mode.ON and s is not None else None
    home = hook_points.home_for(version if version is not None else hook_points.installed_version())
    out = [Hook(home.target, draft_step.duplication_hook(mode, dense), "around")]
    if mode is Mode.ON:  # fake launches nothing: nothing to compile
        after = functools.partial(warm_up.after_hook, options=draft_plan.Options(dense=dense))
        out += [Hook(t, after, "after", required=False, purpose=WARM_UP) for t in warm_up_targets()]
    # issue 61 seam: the dense layout on fa3 reads through fa3 in place's per-token form, so where the
    # layout is installed, those hooks are too (decide() admits fa3 only where they cover every step)
    if mode is Mode.ON and s is not None and (s.fa3_in_place or dense is not None):
        out += fa3_in_place_hooks(version)
    if dense is not None:
        out += dense_draft_hooks(dense)
    if s is not None:  # on and fake alike, as on v1: an A/B differs by the copy only
        out += fa3_metadata_hooks(s, version)
    return [under_the_fault_rule(h) for h in out]


def under_the_fault_rule(hook: Hook) -> Hook:
    """An AROUND or AFTER body of ours as SGLang calls it: under the fault rule whatever it raises
    (:func:`.fault.guarded`). The one REPLACE (the dense index kernel) guards its own launch."""
    if hook.kind not in ("around", "after"):
        return hook
    where = f"{hook.target.rsplit('.', 2)[-2]}.{hook.target.rsplit('.', 1)[-1]} ({hook.kind} hook)"
    return Hook(hook.target, fault.guarded(hook.function, hook.kind, where), hook.kind, hook.required, hook.purpose)


def fa3_in_place_hooks(version: str | None = None) -> list:
    """fa3's in-place draft reads where they are proven for ``version``; elsewhere none, one line."""
    problem = releases.unproven("fa3_in_place", version)
    if problem:
        logger.info("[sglang-eagle-paged] %s", problem)
        return []
    return [Hook(api.FA3_INIT, fa3_in_place.after_backend_init, "after", purpose="fa3 in place: coverage"),
            Hook(api.FA3_EAGER_METADATA, draft_step.after_metadata, "after"),
            Hook(api.FA3_GRAPH_METADATA, draft_step.after_metadata, "after"),
            Hook(api.FA3_KERNEL, draft_step.around_flash_attn, "around")]


def dense_draft_layout(asked: bool | None, version: str | None = None):
    """The :class:`.dense_draft.DenseLayout` these hooks serve, or None: asked (``1``) where it is
    CPU-proven for ``version``; by default (``auto``, None) only where the GPU suite proved it, for
    the backends it proved; one line where it is not installed although asked or by default."""
    if asked is False:
        return None
    backends = None
    if asked is None:
        backends = releases.proven_backends("dense_draft_auto", version)
        if not backends:
            logger.info("[sglang-eagle-paged] dense draft layout off: %s",
                        releases.unproven("dense_draft_auto", version) or "no draft decode backend proven")
            return None
    problem = releases.unproven("dense_draft", version)
    if problem:
        logger.info("[sglang-eagle-paged] %s", problem)
        return None
    return dense_draft.DenseLayout(backends)


def dense_draft_hooks(dense) -> list:
    """The dense layout's per-round hooks, each handed ``dense`` (a :class:`.dense_draft.DenseLayout`)."""
    out = [Hook(api.ALLOC_LEN_PER_DECODE, functools.partial(draft_step.around_len_per_decode, dense), "around"),
           Hook(api.PREPARE_FOR_DRAFT, functools.partial(draft_step.around_prepare_for_draft, dense), "around")]
    for module in (api.TRITON_MODULE, api.FLASHINFER_MODULE):
        target = f"{module}.{api.INDEX_KERNEL}"
        try:
            kernel = resolve(target)
        except Exception as exc:  # noqa: BLE001 -- a backend this machine cannot import: decide() refuses it
            logger.info("[sglang-eagle-paged] dense draft: %s does not import here (%s)", module, type(exc).__name__)
            continue
        index = dense_draft.index_kernel_hook(kernel, lambda: dense.active, draft_step.dense_index_launch)
        out.append(Hook(target, index, "replace", required=False))
    return out


def fa3_metadata_hooks(s: Settings, version: str | None = None) -> list:
    """FA3's tree-draft metadata replacements serving ``s`` on v2 (:mod:`.fa3_replay`) and their
    warm-up after each draft worker's ``init_attention_backend``."""
    selection = fa3_replay.chosen(s, version)
    if selection is FA3Expand.OFF:
        return []
    required = s.fa3_expand_explicit
    out = fa3_metadata.hooks(FA3Expand.EXPAND, required, expand=draft_step.expand_hook)
    if selection is FA3Expand.FUSED and out:
        for target in (api.FA3_FUSED_TARGET, api.FA3_BACKEND):
            problem = resolvable(target)
            if problem is not None:
                if required:
                    raise LookupError(f"SGLANG_EAGLE_PAGED_FA3_EXPAND=fused but {target} is missing: {problem}")
                return []
        out.append(Hook(api.FA3_FUSED_TARGET, draft_step.fused_out_graph_hook, "around", required))
    if not out:
        return []
    warm = fa3_replay.warm_up_hook(FA3Expand.FUSED if len(out) > 1 else FA3Expand.EXPAND)
    return out + [Hook(t, warm, "after", required=False, purpose=FA3_WARM_UP) for t in warm_up_targets()]


def dense_layout_of(hooks: list):
    """The :class:`.dense_draft.DenseLayout` a hook list from :func:`hooks` serves, or None (tests and
    tools: what the bodies were handed)."""
    for hook in hooks:
        body = getattr(hook.function, "body", hook.function)
        if hook.target == api.ALLOC_LEN_PER_DECODE and isinstance(body, functools.partial):
            return body.args[0]
    return None
