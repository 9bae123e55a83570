"""One plan per draft runner: what serves its draft steps, decided once.

Derived at warm-up (after the draft worker's ``init_attention_backend``, when the runner's pool and
its multi-step draft decode backend exist, :mod:`.warm_up`) from what SGLang built:

- the layout: the dense draft layout where this process chose it (:mod:`.dense_draft`), else
  SGLang's per-branch one;
- the copy of the prefix tail: ours (one launch over the pool's buffer table, :mod:`.pools`),
  skipped (no reader sees the copied slots: flashinfer, triton, fa3 in place, :mod:`.backends`), or
  SGLang's own function (a pool our kernel does not copy);
- the readers: which draft decode backend reads, and whether fa3 reads the tail in place.

It is one attribute of the draft pool (the duplication hook is handed the pool, not the runner).
A draft step checks only that it still describes what SGLang holds: the runner's
``draft_attn_backend`` and the pool's K/V buffers are the very objects it was derived from (SGLang
replaces the backend when its step configuration changes, and the buffers when it re-creates them);
otherwise it is derived again, and says so in the same INFO line as at start-up.
"""

from dataclasses import dataclass, field

from ..common import kv_copy
from . import backends, dense_draft, pools
from .hook_points import FUNCTION

OURS, SKIP, SGLANGS = "ours", "skip", "sglang"
DENSE, PER_BRANCH = "dense", "per-branch"
_PATHS = {OURS: pools.OURS, SKIP: "copy skipped, nothing launched", SGLANGS: f"SGLang's own {FUNCTION}"}
_ATTR = "_eagle_paged_v2_plan"


@dataclass(frozen=True)
class DraftPlan:
    runner: object   # the draft model runner whose pool this is (None: no warm-up ran for the pool)
    backend: object  # its draft_attn_backend when derived
    buffers: object  # kv_copy's watch over the pool's K/V buffers (None: not a plain MHA pool)
    layout: str      # DENSE or PER_BRANCH
    copy: str        # OURS, SKIP or SGLANGS
    reason: str
    in_place: bool   # fa3 reads the prefix tail where it lies
    compiled: set = field(default_factory=set, compare=False)  # slot dtypes our kernel was compiled for

    @property
    def table(self):
        """The buffer table our kernel copies with (where ``copy`` is OURS)."""
        return self.buffers.table

    def holds(self, pool) -> bool:
        """Whether this plan still describes ``pool`` and its runner's backend (identities only)."""
        return (getattr(self.runner, "draft_attn_backend", None) is self.backend
                and (self.buffers is None or self.buffers.holds(pool)))


def derive(pool, runner) -> DraftPlan:
    """The plan for ``pool`` read by ``runner``'s draft decode backend; one INFO line per pool class,
    path and reason, per process."""
    backend = getattr(runner, "draft_attn_backend", None)
    buffers = kv_copy.watch_buffers(pool)
    layout = DENSE if dense_draft.PLAN.active else PER_BRANCH
    decision = backends.copy_needed(backend)
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
    return DraftPlan(runner, backend, buffers, layout, copy, reason, decision.in_place and copy == SKIP)


def _keep(pool, plan: DraftPlan) -> DraftPlan:
    try:
        setattr(pool, _ATTR, plan)
    except AttributeError:  # a pool class with __slots__: derived every step
        pass
    return plan


def record(pool, runner) -> DraftPlan:
    """``pool``'s plan for ``runner``, kept on the pool (warm-up: a worker whose hooked method runs
    twice keeps the plan it has)."""
    plan = getattr(pool, _ATTR, None)
    if plan is not None and plan.runner is runner and plan.holds(pool):
        return plan
    return _keep(pool, derive(pool, runner))


def current(pool) -> DraftPlan:
    """``pool``'s plan, derived again only where SGLang replaced the backend or the buffers."""
    plan = getattr(pool, _ATTR, None)
    if plan is not None and plan.holds(pool):
        return plan
    return _keep(pool, derive(pool, plan.runner if plan is not None else None))
