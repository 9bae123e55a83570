"""Round marks for the torch profiler in an SGLang v2 server (device probe only).

Loaded by this folder's ``sitecustomize.py`` in every Python process of a server whose environment
has ``SGLANG_EAGLE_PAGED_ROUND_MARKS=1``. When SGLang's scheduler and v2 worker modules are imported
it puts, without changing what they do, ``Scheduler.run_batch`` and ``EAGLEWorkerV2.verify`` inside
``torch.profiler.record_function`` ranges, so that a trace recorded without Python stacks (true host
times) still shows where each round starts and which rounds verify (bench.round_profile reads
them). Outside a profile each range is one small profiler op call, twice a round.
"""

from __future__ import annotations

import functools
import os
import sys

ENV_VAR = "SGLANG_EAGLE_PAGED_ROUND_MARKS"
# The names bench.round_profile looks for (kept equal there: the probe does not import the package).
RUN_BATCH_MARK = "eagle_paged::run_batch"
VERIFY_MARK = "eagle_paged::verify"
TARGETS = (("sglang.srt.managers.scheduler", "Scheduler", "run_batch", RUN_BATCH_MARK),
           ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2", "verify", VERIFY_MARK))


def mark(cls, attr: str, label: str) -> None:
    """``cls.attr`` inside a ``record_function(label)`` range."""
    import torch

    original = getattr(cls, attr)

    @functools.wraps(original)
    def marked(*args, **kwargs):
        with torch.profiler.record_function(label):
            return original(*args, **kwargs)

    setattr(cls, attr, marked)


def install(targets=TARGETS) -> bool:
    """Arm the marks in this process if ``SGLANG_EAGLE_PAGED_ROUND_MARKS`` is 1."""
    if os.environ.get(ENV_VAR) != "1":
        return False
    from sync_probe import _AfterImport

    for module, cls, attr, label in targets:
        sys.meta_path.insert(0, _AfterImport(module, lambda m, c=cls, a=attr, lb=label: mark(getattr(m, c), a, lb)))
    return True
