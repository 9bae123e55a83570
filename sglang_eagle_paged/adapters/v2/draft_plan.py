"""One plan per draft runner: everything its draft steps read, decided once.

Derived at warm-up (after the draft worker's ``init_attention_backend``, when the runner's pool and
its multi-step draft decode backend exist, :mod:`.warm_up`) from what SGLang built and what the
installed hooks ask (:class:`Options`, built by :mod:`.hook_table`):

- the layout: the dense draft layout where it serves this process (:mod:`.dense_draft`), else
  SGLang's per-branch one;
- the copy of the prefix tail: ours (one launch over the pool's buffer table, :mod:`.pools`),
  skipped (no reader sees the copied slots: flashinfer, triton, fa3 in place, :mod:`.backends`), or
  SGLang's own function (a pool our kernel does not copy);
- the readers: which draft decode backend reads, and whether fa3 reads the tail in place;
- fa3's draft metadata path (:class:`Fa3Path`): whether the fused writer may serve this backend, in
  SGLang's split form or fa3 in place's per-token form, the per-step backends it writes, the page-table bound rule of those steps, and per batch size whether
  SGLang's tables take the fused write.

A draft step costs identity checks and field reads: :func:`current` and :func:`for_fa3` check that
the plan still describes what SGLang holds (the runner's ``draft_attn_backend`` and the pool's K/V
buffers are the very objects it was derived from: SGLang replaces the backend when its step
configuration changes, and the buffers when it re-creates them); otherwise it is derived again and
says so in the same INFO line as at start-up.

Its one home is an attribute of the draft pool: the duplication is handed the pool, not the runner,
and fa3's per-step backends reach the runner's plan only through the pool they read
(``token_to_kv_pool``); nothing else of ours is set on SGLang's objects for it.
"""

from dataclasses import dataclass, field

from ..common import fa3_metadata, kv_copy
from . import backends, dense_draft, fa3_in_place, pools
from .hook_points import FUNCTION
from .sglang_api import FA3_MULTI_STEP_BACKEND

OURS, SKIP, SGLANGS = "ours", "skip", "sglang"
DENSE, PER_BRANCH = "dense", "per-branch"
_PATHS = {OURS: pools.OURS, SKIP: "copy skipped, nothing launched", SGLANGS: f"SGLang's own {FUNCTION}"}
_ATTR = "_eagle_paged_v2_plan"


@dataclass(frozen=True)
class Options:
    """What the installed hooks ask of every draft runner's plan (one per installed hook set)."""

    dense: object = None  # the dense layout's :class:`.dense_draft.DenseLayout` where the setting asks for it


NO_OPTIONS = Options()


@dataclass
class Fa3Path:
    """fa3's draft metadata path for one multi-step FA3 backend, decided with the runner's plan."""

    fused: bool          # the fused writer may serve (fa3 in place rewrites SGLang's form instead: SGLang's builders)
    steps: tuple | None  # the per-step backends the fused writer writes (None: a step it does not cover)
    bound: tuple | None  # the page-table bound rule: (limits of steps bounded by max_context_len, limits of
    #                      steps bounded by the CPU lengths); None: an attribute SGLang no longer sets
    fits: dict = field(default_factory=dict)  # batch size -> whether SGLang's tables at that size take the fused write
    per_token: bool = False  # the fused writer writes fa3 in place's per-token form instead: fa3 in place
    #                          covers every step it writes (:func:`.fa3_dense.wrote_per_token`, issue 61)

    def page_bound(self, forward_batch, bs):
        """SGLang's page-table bound of every step (0.5.17 ..), or None where the steps disagree."""
        fixed, by_cpu = self.bound
        out = set(fixed)
        if by_cpu:
            cpu = forward_batch.seq_lens_cpu
            out |= {int(cpu[:bs].max())} if cpu is not None else set(by_cpu)  # a CPU tensor: no device sync
        return out.pop() if len(out) == 1 else None

    def batch_bound(self, forward_batch, bs):
        """The page-table bound a fused writer writes this batch with, where it writes exactly what SGLang
        would (the batch's form, SGLang's tables at ``bs``, the steps agreeing on the bound); else None."""
        if not fa3_metadata.batch_fusable(forward_batch, bs, cpu_lens_needed=False) or not self.fits_at(bs):
            return None
        return self.page_bound(forward_batch, bs)

    def fits_at(self, bs) -> bool:
        """Whether SGLang's per-batch-size tables hold ``bs`` and its expand tables take every live slot
        (SGLang asserts they do, and raises where they do not); decided once per batch size."""
        got = self.fits.get(bs)
        if got is None:
            got = self.fits[bs] = all(
                bs in getattr(b, "draft_decode_metadata_topk_normal", ())
                and bs in getattr(b, "draft_decode_metadata_topk_expand", ())
                and min(b.speculative_step_id + 1, b.speculative_num_steps)
                <= b.draft_decode_metadata_topk_expand[bs].page_table.shape[1] for b in self.steps)
        return got


@dataclass(frozen=True)
class DraftPlan:
    runner: object   # the draft model runner whose pool this is (None: no warm-up ran for the pool)
    backend: object  # its draft_attn_backend when derived
    buffers: object  # kv_copy's watch over the pool's K/V buffers (None: not a plain MHA pool)
    options: Options
    layout: str      # DENSE or PER_BRANCH
    copy: str        # OURS, SKIP or SGLANGS
    reason: str
    in_place: bool   # fa3 reads the prefix tail where it lies
    fa3: Fa3Path | None = None  # where the backend is SGLang's multi-step FA3 backend
    compiled: set = field(default_factory=set, compare=False)  # slot dtypes our kernel was compiled for

    @property
    def table(self):
        """The buffer table our kernel copies with (where ``copy`` is OURS)."""
        return self.buffers.table

    def holds(self, pool) -> bool:
        """Whether this plan still describes ``pool``, its runner's backend and the dense layout's state
        (identities and one field only)."""
        return ((self.runner is None or getattr(self.runner, "draft_attn_backend", None) is self.backend)
                and (self.buffers is None or self.buffers.holds(pool))
                and (self.layout != DENSE or self.options.dense.active))


def fa3_path(backend) -> Fa3Path | None:
    cls = type(backend)
    if f"{cls.__module__}.{cls.__qualname__}" != FA3_MULTI_STEP_BACKEND:
        return None
    steps = tuple(getattr(backend, "attn_backends", None) or ())
    # fa3 in place rewrites each step's metadata after SGLang's per-step builders, and a graph captured
    # with its per-token view reads only that form, which the split form's fused writer does not write;
    # where it covers every step written, the per-token form's writer serves instead (``per_token``)
    in_place = any(fa3_in_place.covered(b) for b in steps)
    n = (getattr(backend, "speculative_num_steps", 0) or 0) - 1
    fused = fa3_metadata.fusable_steps(steps[:n]) if n >= 1 and len(steps) >= n else None
    bound = None
    if fused is not None:
        needs = [getattr(b, "needs_cpu_seq_lens", None) for b in fused]
        limits = [getattr(b, "max_context_len", None) for b in fused]
        if all(isinstance(x, bool) for x in needs) and all(isinstance(x, int) for x in limits):
            bound = (frozenset(lim for lim, cpu in zip(limits, needs) if not cpu),
                     frozenset(lim for lim, cpu in zip(limits, needs) if cpu))
    writable = fused is not None and bound is not None
    return Fa3Path(fused=not in_place and writable, steps=fused, bound=bound,
                   per_token=writable and all(fa3_in_place.covered(b) for b in fused))


def derive(pool, runner, options: Options = NO_OPTIONS, backend=None) -> DraftPlan:
    """The plan for ``pool`` read by ``runner``'s draft decode backend (``backend``: a multi-step
    backend met without its runner); one INFO line per pool class, path and reason, per process."""
    if runner is not None:
        backend = getattr(runner, "draft_attn_backend", None)
    buffers = kv_copy.watch_buffers(pool)
    dense = options.dense
    layout = DENSE if dense is not None and dense.active else PER_BRANCH
    fa3 = fa3_path(backend)
    in_place = fa3 is not None and fa3_in_place.reads_in_place(backend)
    decision = backends.copy_needed(backend, in_place)
    declined = pools.decline_reason(pool)
    if declined is None and (buffers is None or buffers.table is None):
        declined = "no buffer table for its K/V buffers"
    if layout == DENSE:
        copy, reason = SKIP, "the dense draft layout has no prefix tail to copy"
    elif declined is not None:
        copy, reason = SGLANGS, declined
    else:
        copy, reason = (OURS if decision.copy else SKIP), decision.reason
    pools.log_path(pool, _PATHS[copy], reason)
    return DraftPlan(runner, backend, buffers, options, layout, copy, reason, decision.in_place and copy == SKIP, fa3)


def _keep(pool, plan: DraftPlan) -> DraftPlan:
    try:
        setattr(pool, _ATTR, plan)
    except AttributeError:  # a pool class with __slots__: derived every step
        pass
    return plan


def record(pool, runner, options: Options = NO_OPTIONS) -> DraftPlan:
    """``pool``'s plan for ``runner``, kept on the pool (warm-up: a worker whose hooked method runs
    twice keeps the plan it has)."""
    plan = getattr(pool, _ATTR, None)
    if plan is not None and plan.runner is runner and plan.options is options and plan.holds(pool):
        return plan
    return _keep(pool, derive(pool, runner, options))


def current(pool) -> DraftPlan:
    """``pool``'s plan, derived again only where SGLang replaced the backend or the buffers, or the
    dense layout was handed back."""
    plan = getattr(pool, _ATTR, None)
    if plan is not None and plan.holds(pool):
        return plan
    if plan is None:
        return _keep(pool, derive(pool, None))
    return _keep(pool, derive(pool, plan.runner, plan.options, plan.backend))


def dense_of(pool):
    """The :class:`.dense_draft.DenseLayout` the installed hooks handed ``pool``'s plan, or None (not
    asked, or no plan kept on ``pool``): read, never derived (fa3's fault rule reads it per step)."""
    plan = getattr(pool, _ATTR, None)
    return plan.options.dense if plan is not None else None


def for_fa3(multi) -> DraftPlan | None:
    """The plan of the draft runner whose multi-step FA3 backend ``multi`` is, through the pool its
    steps read; derived (and kept) where none holds ``multi``. None: ``multi`` has no step."""
    steps = getattr(multi, "attn_backends", None)
    pool = getattr(steps[0], "token_to_kv_pool", None) if steps else None
    if pool is None:
        return None
    plan = getattr(pool, _ATTR, None)
    if plan is not None and plan.backend is multi and plan.holds(pool):
        return plan
    return _keep(pool, derive(pool, None, plan.options if plan is not None else NO_OPTIONS, multi))
