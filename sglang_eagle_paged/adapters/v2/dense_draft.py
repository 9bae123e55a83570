"""The dense draft layout at page > 1 (issue 54): the draft slots where page 1 puts them.

SGLang's v2 worker at ``--page-size P > 1`` with ``topk > 1`` gives every draft branch pages of
its own (branch ``t``, step ``s`` at row position ``prefix_base + t*N*P + last + s``) and reserves
whole pages for every branch at every decode step. The dense layout puts branch ``t``, step ``s``
at ``L + t*steps + s`` (``L``: the committed length), as SGLang's page-1 path does
(``assign_draft_cache_locs_contiguous``), so page 1's reserve suffices and nothing is copied. The
study of what in SGLang 0.5.13 .. 0.5.23 knows the per-branch layout, and what must change, is
``docs/design.md``, "Page > 1 in page 1's memory".

The two pieces SGLang cannot be told through its own arguments, proven on its own code
(``tests/adapters/v2/test_dense_draft.py``, ``test_dense_rounds.py``, ``test_dense_hooks.py``):

- :func:`dense_out_cache_loc`: the draft's write slots in the dense layout (what replaces the
  paged branch's gather in ``prepare_for_draft``);
- :class:`DenseDraftIndices`: SGLang's ``generate_draft_decode_kv_indices`` (the flashinfer and
  triton draft decode's per-token index list, eager and CUDA graph alike) launched with
  ``page_size`` 1, its page-1 formula, which is all ``page_size`` selects where reads are not
  translated.

fa3 needs nothing here: its in-place form (:mod:`.fa3_in_place`) reads each branch's draft slots
from ``out_cache_loc`` per token, so it reads the dense slots once ``out_cache_loc`` holds them
(:mod:`.fa3_dense`: its admission, fused metadata and fault rule).

Behind ``SGLANG_EAGLE_PAGED_DENSE_DRAFT`` (``1``; ``auto``, the default, where ``releases.PROVEN``'s
GPU row says, nowhere yet) the hooks are (built by :mod:`.hook_table`, each handed the one
:class:`DenseLayout` they serve):

- AROUND ``allocation_sizing.get_alloc_len_per_decode``: page 1's per-step length once the layout
  is on (``get_alloc_reserve_per_decode`` and so the allocation and the retract gate follow; the
  ``req_to_token`` rows, sized before any draft worker exists, keep SGLang's width);
- AROUND ``prepare_for_draft``: after SGLang's paged branch, its ``out_cache_loc`` rewritten in
  place with the dense slots (the duplication hook copies nothing while the layout is on);
- REPLACE the ``generate_draft_decode_kv_indices`` globals of triton's and flashinfer's backend
  modules with :class:`DenseDraftIndices` (as a class: :func:`index_kernel_hook`).

:func:`decide` turns the layout on, once per process, from the draft worker SGLang built (after its
``init_attention_backend``): flashinfer's or triton's multi-step draft backend, or fa3's where fa3
in place covers every step (:func:`.fa3_dense.refusal`), no draft window, no translated reads, the
plain MHA pool, allocation page = kernel page (no DCP), EAGLE, EAGLE3 or STANDALONE without adaptive
steps, no disaggregated decode. Anything else keeps SGLang's layout, said in one line.

The fault rule takes one round more than the other paths of ours (``docs/design.md``): a round
already allocated with the dense reserve cannot take the per-branch layout (its rows end before
the per-branch positions). So after a fault anywhere on our v2 paths (:mod:`.fault`, one ERROR
line) the reserve is SGLang's at once, for the rounds allocated from then on; the round in flight
keeps the dense slots (SGLang's own page-1 slot kernel, ``assign_draft_cache_locs_contiguous``,
writes them where our gather faulted); and the first draft whose round was allocated since then
hands the layout back (:meth:`DenseLayout.hand_back`): SGLang's per-branch slots, its prefix-tail copy and
its readers from that round on. The per-step hook bodies are the draft step's (:mod:`.draft_step`).
"""

import logging

import torch

from ...hooks import resolve
from ...tree_layout import dense_positions, len_per_decode, paged_tree, reserve_per_decode
from . import fa3_dense, fault, pools
from . import sglang_api as api

logger = logging.getLogger("sglang_eagle_paged")

_READERS = {"triton": api.TRITON_MODULE, "flashinfer": api.FLASHINFER_MODULE}
_KERNEL = api.INDEX_KERNEL
_BACKENDS = {  # the draft decode backends whose reads go through the index kernel alone
    api.TRITON_DRAFT_BACKEND: "triton",
    api.FLASHINFER_DRAFT_BACKEND: "flashinfer",
}
_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE")
_WORKERS = ("EagleDraftWorker", "StandaloneDraftWorker")

# generate_draft_decode_kv_indices' positional page_size (0.5.17 .. 0.5.23: the 13th argument; it
# follows req_pool_indices, req_to_token, paged_kernel_lens, kv_indices, kv_indptr, positions, the
# row stride or pool_len, two buffer strides and three power-of-two bounds).
PAGE_SIZE_ARG = 12


def dense_out_cache_loc(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                        topk: int, steps: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """The draft's ``out_cache_loc`` (``bs * topk * steps``, int64, branch-major) in the dense layout:
    what SGLang's ``assign_draft_cache_locs_contiguous`` writes at page 1. No host read; ``out``
    (SGLang's own ``out_cache_loc``) is written in place where given, so that whatever already
    holds that tensor (the forward batch) sees the dense slots."""
    rows = req_to_token[req_pool_indices.long()]
    slots = torch.gather(rows, 1, dense_positions(seq_lens, topk, steps)).reshape(-1)
    if out is None:
        return slots.to(torch.int64)
    out.copy_(slots)
    return out


def page_1_arguments(args: tuple, kwargs: dict) -> tuple:
    """``generate_draft_decode_kv_indices``' positional arguments with ``page_size`` 1, its page-1
    formula; ``ValueError`` where the launch is not the one the dense layout was proven on (reads
    translated by 0.5.23's ``TRANSLATE``/``ENTRY_PAGE_SIZE``, where ``page_size`` also sizes the
    translation's pages; ``page_size`` no longer the 13th positional argument)."""
    if kwargs.get("TRANSLATE") or kwargs.get("ENTRY_PAGE_SIZE", 1) != 1:
        raise ValueError("the dense draft layout does not cover translated draft reads")
    if len(args) <= PAGE_SIZE_ARG or "page_size" in kwargs:
        raise ValueError("generate_draft_decode_kv_indices: page_size is not its 13th positional argument")
    return args[:PAGE_SIZE_ARG] + (1,) + args[PAGE_SIZE_ARG + 1:]


class DenseDraftIndices:
    """SGLang's ``generate_draft_decode_kv_indices`` kernel, launched (``kernel[grid](...)``) through
    ``serve(launch, args, kwargs)`` while ``active()`` says the dense layout serves (the draft step's
    :func:`.draft_step.dense_index_launch`: :func:`page_1_arguments`, under the fault rule): each
    branch's list is then its prefix ``[0, L)`` and ``L + t*steps + [0, i]``, page 1's list. Everything
    else, the launch grid and every other argument included, is SGLang's."""

    def __init__(self, kernel, active=lambda: True, serve=None):
        self.kernel = kernel
        self.active = active
        self.serve = serve if serve is not None else (lambda launch, a, k: launch(*page_1_arguments(a, k), **k))

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        if not self.active():
            return launch
        return lambda *args, **kwargs: self.serve(launch, args, kwargs)

    def __getattr__(self, name):  # the kernel's own attributes (fn, cache, ...)
        return getattr(self.kernel, name)


def index_kernel_hook(kernel, active, serve=None):
    """What replaces a module's ``generate_draft_decode_kv_indices`` global: a class, since SGLang's
    HookRegistry substitutes a class as it is (any other REPLACE hook becomes a plain function, which
    the callers' ``kernel[grid](...)`` cannot subscript); ``kernel[grid]`` is :class:`DenseDraftIndices`'s."""
    dense = DenseDraftIndices(kernel, active, serve)

    class DenseDraftIndexKernel:
        def __class_getitem__(cls, grid):
            return dense[grid]

    DenseDraftIndexKernel.dense = dense
    return DenseDraftIndexKernel


def is_hooked(reader) -> bool:
    """Whether ``reader`` (an index-kernel global, or the attribute a backend bound from it) is ours."""
    return isinstance(getattr(reader, "dense", None), DenseDraftIndices)


# --------------------------------------------------------------------------- the plan


class DenseLayout:
    """The dense layout as one set of installed hooks serves it: built by the hook table where the
    setting asks for it and handed to the bodies that read it (the scheduler's reserve, the draft
    preparation, the index kernel, the warm-up), never a module global. It holds what is the
    process's and not one runner's: the scheduler's reserve and the fault switch are per process,
    so the layout is too; which runner it serves is that runner's plan (:mod:`.draft_plan`).
    Decided once (:func:`decide`), when the draft worker's backend exists."""

    def __init__(self, backends=None):
        self.backends = backends    # auto: the backends the GPU suite proved (None: every one covered)
        self.active = False         # the dense layout serves
        self.len_per_decode = None  # page 1's get_alloc_len_per_decode: max(steps * topk, draft tokens)
        self.decided = None         # the line that said so
        self.sglang_reserve = False  # since a fault, SGLang's reserve was handed out: rounds allocated for its layout

    def hand_back(self) -> None:
        """SGLang's per-branch layout from this round on (its rows were allocated with SGLang's reserve)."""
        self.active = False
        logger.warning("[sglang-eagle-paged] dense draft layout handed back after a fault: SGLang's per-branch "
                       "layout and reserve serve from this round on")


def refusal(worker, dense: DenseLayout) -> str | None:
    """None where the dense layout covers ``worker`` (a v2 draft worker after ``init_attention_backend``);
    else why not, in one line."""
    runner = getattr(worker, "draft_runner", None)
    backend = getattr(runner, "draft_attn_backend", None)
    cls = type(backend)
    name = _BACKENDS.get(f"{cls.__module__}.{cls.__qualname__}")
    if name is None and fa3_dense.is_fa3(backend):  # issue 61 seam: fa3 reads the dense slots per token
        name = "fa3"
    if name is None:
        return f"draft decode backend {cls.__name__} is not flashinfer's, triton's or fa3's multi-step draft backend"
    if dense.backends is not None and name not in dense.backends:
        return (f"{name} is not proven by the GPU suite (SGLANG_EAGLE_PAGED_DENSE_DRAFT=auto serves "
                f"{', '.join(dense.backends) or 'none'}; =1 asks for it)")
    if type(worker).__name__ not in _WORKERS:
        return f"{type(worker).__name__} is not covered (EAGLE, EAGLE3 and STANDALONE draft workers are)"
    args = getattr(worker, "server_args", None)
    algorithm = str(getattr(args, "speculative_algorithm", "") or "").upper()
    if algorithm not in _ALGORITHMS:
        return f"speculative algorithm {algorithm or 'unknown'} is not covered"
    if getattr(args, "speculative_adaptive", False):
        return "adaptive speculative steps move the reserve after start-up"
    if str(getattr(args, "disaggregation_mode", "null") or "null") != "null":
        return "disaggregated decode sizes its own reserve"
    if name == "fa3":  # issue 61 seam: fa3 in place's per-token reads, not an index kernel
        problem = fa3_dense.refusal(backend)
        if problem is not None:
            return problem
    elif not is_hooked(getattr(backend, _KERNEL, None) if name == "flashinfer" else getattr(
            __import__(_READERS[name], fromlist=[_KERNEL]), _KERNEL, None)):
        return f"{name}'s index kernel is not hooked"
    if getattr(backend, "draft_window_size", 0):
        return "a draft window reads through another index kernel"
    translator = getattr(backend, "kv_index_translator", None)
    if translator is not None and getattr(translator, "is_translating", True):
        return "translated KV reads"
    pool = getattr(runner, "token_to_kv_pool", None)
    problem = pools.layout_reason(pool)
    if problem is not None:
        return f"the draft KV pool: {problem}"
    allocator = getattr(worker, "token_to_kv_pool_allocator", None) or getattr(runner, "token_to_kv_pool_allocator", None)
    if getattr(allocator, "page_size", None) != getattr(pool, "page_size", None):
        return "the allocation page differs from the KV page (decode context parallelism)"
    return None


def decide(worker, dense: DenseLayout | None) -> bool:
    """Turn ``dense`` on where ``worker`` is covered; one line either way, once (None: not asked)."""
    if dense is None or dense.decided is not None:
        return dense is not None and dense.active
    topk = getattr(worker, "topk", 1) or 1
    runner = getattr(worker, "draft_runner", None)
    page = getattr(getattr(runner, "token_to_kv_pool", None), "page_size", 1) or 1
    if not paged_tree(page, topk):
        return False  # SGLang's layout is page 1's already
    try:
        problem = refusal(worker, dense)
        if problem is None:  # our gather once on the runner's own rows, before serving
            rows = runner.req_to_token_pool.req_to_token
            zero = torch.zeros(1, dtype=torch.int64, device=rows.device)
            dense_out_cache_loc(rows, zero, zero, 1, 1)
    except Exception as exc:  # noqa: BLE001 -- a check of ours: never a reason not to start
        problem = f"the check failed ({type(exc).__name__}: {exc})"
    steps = getattr(worker, "speculative_num_steps", 1) or 1
    tokens = getattr(worker, "speculative_num_draft_tokens", 0) or 0
    if problem is None:
        dense.len_per_decode = len_per_decode(page, topk, steps, tokens, dense=True)
        dense.active = True
        fault.also_say(f"the dense draft layout hands back to SGLang's per-branch layout and its reserve of "
                       f"{reserve_per_decode(page, topk, steps, tokens):,} KV slots per running request: a pool "
                       f"sized for the dense reserve ({2 * dense.len_per_decode:,}) may retract requests")
        dense.decided = (f"[sglang-eagle-paged] dense draft layout on (SGLANG_EAGLE_PAGED_DENSE_DRAFT): the draft "
                         f"slots of page 1, nothing copied, {2 * dense.len_per_decode:,} KV slots reserved per running "
                         f"request instead of {reserve_per_decode(page, topk, steps, tokens):,}")
        logger.info(dense.decided)
    else:
        dense.decided = (f"[sglang-eagle-paged] dense draft layout off, SGLang's per-branch layout serves: {problem}")
        logger.warning(dense.decided)
    return dense.active


# --------------------------------------------------------------------------- the hooks


def sglang_page_1_slots(req_to_token, req_pool_indices, seq_lens, topk, steps, out):
    resolve(api.PAGE_1_SLOTS)[(seq_lens.shape[0],)](
        req_pool_indices, req_to_token, seq_lens, out, req_to_token.shape[1], topk, steps)
