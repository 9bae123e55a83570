"""The fault rule's switch: nothing on our path may stop a running server.

Each hooked path of ours (the duplication, the FA3 metadata replacements, FA3 in place) catches
whatever its own code raises, trips its switch and lets SGLang's path serve that call; a tripped
switch stays off for the rest of the process and says so in one ERROR line, the first fault's.
"""

import logging

logger = logging.getLogger("sglang_eagle_paged")


class FaultSwitch:
    """Falsy while our path serves; once tripped, truthy and holding the first fault's text."""

    def __init__(self, message: str):
        self.message = message  # the ERROR line, with one %s for the fault
        self.reason: str | None = None

    def __bool__(self) -> bool:
        return self.reason is not None

    def trip(self, fault, say: bool = True) -> None:
        """``fault``: the exception, or a text saying what failed. Later faults add nothing.
        ``say=False``: the caller says it, once for several switches tripped by one fault."""
        if self.reason is not None:
            return
        self.reason = fault if isinstance(fault, str) else f"{type(fault).__name__}: {fault}"
        if say:
            logger.error(self.message, self.reason[:600])  # the fault's text and what it means, not a whole dump
