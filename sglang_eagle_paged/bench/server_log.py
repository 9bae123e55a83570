"""What a benchmark reads from a server's log over the passes it counts: retractions and faults.

A figure is only about the path when the server served it on that path with the batch it was given:
SGLang retracts running requests when its KV pool cannot hold the next decode step (the throughput
then measures the pool), and the plugin switches a part of itself off after a fault and lets
SGLang's path serve on (the throughput then measures SGLang's path). Both are read from the part of
the log written after :func:`log_end` was taken.
"""

from pathlib import Path

from .. import FAULT_MARK

RETRACT = "KV cache pool is full. Retract requests."


def log_end(path) -> int | None:
    """The byte offset at which the next line of a server log will be written (None: no log)."""
    try:
        return Path(path).stat().st_size
    except (OSError, TypeError):
        return None


def text_since(path, offset: int | None) -> str | None:
    """The part of a server log written after byte ``offset`` (None: no log, or no offset)."""
    if offset is None:
        return None
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except (OSError, TypeError):
        return None


def retractions(text: str) -> dict:
    """The scheduler's "KV cache pool is full" lines (``retract``) and the requests they retracted."""
    lines = [line for line in text.splitlines() if RETRACT in line]
    reqs = 0
    for line in lines:
        _, found, rest = line.partition("#retracted_reqs: ")
        digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
        reqs += int(digits) if found and digits else 0
    return {"retract": len(lines), "retracted_reqs": reqs}


def faults(text: str) -> list:
    """The plugin's fault lines (every ERROR line it logs carries :data:`sglang_eagle_paged.FAULT_MARK`)."""
    return [line.strip()[:400] for line in text.splitlines() if FAULT_MARK in line]


def retractions_since(path, offset: int | None) -> dict | None:
    """:func:`retractions` in the part of a log written after ``offset``; None where there is no log."""
    text = text_since(path, offset)
    return None if text is None else retractions(text)


def since(path, start: int | None, what: str) -> dict:
    """What a server logged since ``start`` (:func:`log_end` before ``what``): its retractions (None
    where there is no log to read) and the plugin's fault lines."""
    text = text_since(path, start)
    if text is None:
        return {"retractions": None, "retractions_counted": "no server log"}
    found = retractions(text)
    out = {"retractions": found["retract"], "retracted_reqs": found["retracted_reqs"],
           "retractions_counted": f"log lines written during {what}"}
    fault_lines = faults(text)
    if fault_lines:
        out["faults"] = fault_lines
    return out
