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


# What a fault also means for this process, said in its one line: set where a path of ours turns on
# whose hand-back has a cost of its own (the dense layout: a pool sized for its reserve). Part of the
# switch's state, like the switch itself the one thing of the fault rule that is the process's.
_CONSEQUENCES: list = []


def also_say(text: str) -> None:
    """Add ``text`` to the fault line, should a fault come (once per text)."""
    if text not in _CONSEQUENCES:
        _CONSEQUENCES.append(text)


def trip(where: str, fault) -> None:
    """Switch every v2 path of ours off after ``fault`` (an exception, or a text) in ``where``."""
    text = fault if isinstance(fault, str) else f"{type(fault).__name__}: {fault}"
    SWITCH.trip(f"{where}: {text}"[:300] + "".join(f"; {c}" for c in _CONSEQUENCES))


class _Sglangs:
    """SGLang's own function as a hook body of ours is handed it: whether it ran, what it returned,
    and whether the fault it raised (if any) was its own."""

    __slots__ = ("original", "state", "result")

    def __init__(self, original):
        self.original, self.state, self.result = original, None, None  # state: None, "returned", "raised"

    def __call__(self, *args, **kwargs):
        try:
            self.result = self.original(*args, **kwargs)
        except BaseException:
            self.state = "raised"
            raise
        self.state = "returned"
        return self.result


def guarded(body, kind: str, where: str):
    """``body`` (an AROUND or AFTER hook body of ours) under the fault rule, whatever it raises and
    wherever: SGLang's own result for that call (an AROUND body's ``original`` run now if it has not
    run; its own fault raised as SGLang raises it), the switch tripped, one line. The bodies keep their
    own narrower fallbacks where the right answer is not SGLang's plain result (the dense slot gather,
    the index kernel); this is what holds where a body's own ``try`` does not reach."""
    if kind == "after":
        def after(result, *args, **kwargs):
            try:
                return body(result, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 -- never SGLang's caller: its result stands
                trip(where, exc)
                return None
        after.body = body
        return after
    if kind != "around":
        raise ValueError(f"only AROUND and AFTER bodies are guarded here, not {kind}")

    def around(original, *args, **kwargs):
        sglangs = _Sglangs(original)
        try:
            return body(sglangs, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 -- ours: SGLang's own result for this call
            if sglangs.state == "raised":
                raise  # SGLang's own fault, as it would raise without us
            trip(where, exc)
            return sglangs.result if sglangs.state == "returned" else original(*args, **kwargs)
    around.body = body
    return around
