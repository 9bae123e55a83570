"""What a benchmark reads from a server's log: retractions and faults over the passes it counts, and
the path the server ran (:func:`served`).

A figure is only about the path when the server served it on that path with the batch it was given:
SGLang retracts running requests when its KV pool cannot hold the next decode step (the throughput
then measures the pool), and the plugin switches a part of itself off after a fault and lets
SGLang's path serve on (the throughput then measures SGLang's path). Both are read from the part of
the log written after :func:`log_end` was taken.
"""

from pathlib import Path

from .. import FAULT_MARK

RETRACT = "KV cache pool is full. Retract requests."
PLUGIN = "[sglang-eagle-paged] "
# What the plugin's start-up lines say, as :func:`served` reads them (tests/bench/test_server_log.py
# checks that the package still logs each): whether it serves and in which mode, and the draft layout.
ACTIVE = "active: mode="
INACTIVE = "inactive: "
OFF = "=off: stock SGLang"
DENSE_ON = "dense draft layout on"
DENSE_OFF = "dense draft layout off"
DENSE_HANDED_BACK = "dense draft layout handed back"


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


def plugin_lines(text: str) -> list:
    """The plugin's own lines, faults left out, each once (every process of a server logs its start-up),
    from the plugin's mark on: the time and process SGLang's format puts before it go."""
    found = {}
    for line in text.splitlines():
        at = line.find(PLUGIN)
        if at >= 0 and FAULT_MARK not in line:
            found.setdefault(line[at:].strip()[:400], None)
    return list(found)


def served(text: str | None) -> dict:
    """The path a server ran, from what it logged (not from the configuration asked for): ``plugin`` is
    the mode the plugin served in (``on``, ``fake``), ``off``, ``inactive`` (SGLang's own path, the
    plugin said why) or None (no line of it: not installed, or its lines did not reach this log);
    ``layout`` is the draft layout, ``dense`` or SGLang's ``per-branch`` (None where there is no draft
    layout to name: no plugin line); ``lines``: every start-up line of the plugin, verbatim. The
    plugin's INFO lines reach the log at SGLang's ``--log-level warning`` too (the package logger's
    filter); where it is ``error`` they do not, and ``plugin`` is None."""
    if text is None:
        return {"plugin": None, "layout": None, "lines": [], "read": "no server log"}
    lines = plugin_lines(text)
    plugin = None
    for line in lines:
        said = line.removeprefix(PLUGIN)
        if said.startswith(ACTIVE):
            plugin = said[len(ACTIVE):].split(",", 1)[0]
        elif said.startswith(INACTIVE) and plugin is None:
            plugin = "inactive"
        elif OFF in said and plugin is None:
            plugin = "off"
    layout = None
    if plugin is not None:
        # the last word counts: a fault hands the dense layout back to SGLang's for the rest of the run
        layout = "per-branch"
        for line in lines:
            if DENSE_ON in line:
                layout = "dense"
            elif DENSE_OFF in line or DENSE_HANDED_BACK in line:
                layout = "per-branch"
    return {"plugin": plugin, "layout": layout, "lines": lines}
