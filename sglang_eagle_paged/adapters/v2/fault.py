"""The v2 adapter's one fault switch: nothing on our path may stop a running server.

Every path of ours on the v2 worker (the prefix-tail duplication, fa3's draft metadata, fa3 in
place, the dense slot gather, the warm-up) catches whatever its own code raises, trips this switch
and lets SGLang's path serve that call; from then on SGLang's own path serves every call of every
one of them, and one ERROR line per process says why (the first fault's). What cannot be handed
back at once is said where it stays: a CUDA graph captured with fa3's per-token view keeps reading
per token, and the dense draft layout keeps the rounds allocated for it, SGLang's layout serving
from the first round allocated after the fault (:mod:`.dense_draft`).
"""

from ..common.fault_switch import FaultSwitch

SWITCH = FaultSwitch("[sglang-eagle-paged] v2 paths of ours switched off for this process after a fault, "
                     "SGLang's own serve from now on: %s")


def trip(where: str, fault) -> None:
    """Switch every v2 path of ours off after ``fault`` (an exception, or a text) in ``where``."""
    text = fault if isinstance(fault, str) else f"{type(fault).__name__}: {fault}"
    SWITCH.trip(f"{where}: {text}")
