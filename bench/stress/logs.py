"""What a server log says about retraction, leaks, crashes and the plugin's activation per TP rank.

One traceback is SGLang's own and harmless: its HTTP server's start-up tries its optional OpenAI
endpoints and logs a failed one as ``Can not initialize <Name>, error: Traceback ...`` (e.g.
``OpenAIServingResponses`` without the optional ``openai_harmony`` package) and serves on without
it. Those are counted as ``optional_endpoint``, each example followed by the exception that ended
it; every other traceback counts as ``traceback``.

``plugin_active`` (rank -> mode) sees only plugin lines that reach the log. SGLang 0.5.12.post1
runs plugins (``load_plugins``) in the launcher and in each scheduler before that process
configures logging (``configure_logger``), so an INFO line from the plugin's ``register()`` is
dropped there: run 4's logs, ``--log-level info`` included, hold no plugin line at all.

``prefix_checks`` (rank -> last reported steps, requests, violations) and ``prefix_violations`` (ERROR
lines) come from :mod:`sglang_eagle_paged.adapters.common.prefix_check`, on with ``SGLANG_EAGLE_PAGED_CHECK_PREFIX=1``;
its periodic line is INFO, so the server needs ``--log-level info``.
"""

from __future__ import annotations

import re
from pathlib import Path

from sglang_eagle_paged.bench.server_log import log_end, retractions_since  # noqa: F401 (this package's API)

_RE = {
    "retract": re.compile(r"KV cache pool is full\. Retract requests\."),
    "retracted_reqs": re.compile(r"#retracted_reqs: (\d+)"),
    "leak": re.compile(r"memory leak detected|Mem Leak Detected", re.I),
    "traceback": re.compile(r"Traceback \(most recent call last\)"),
    "optional_endpoint": re.compile(r"Can not initialize (\w+), error: Traceback \(most recent call last\)"),
    "exception_line": re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(: |$)"),
    "cuda_error": re.compile(r"CUDA error|illegal memory access|device-side assert|CUBLAS_STATUS|out of memory", re.I),
    "http_error": re.compile(r"\[http_server\] Error"),
    "plugin_active": re.compile(r"^\[([^\]]*)\] \[sglang-eagle-paged\] active: mode=(\w+)"),
    # not active, or active on a fallback: SGLang's allocation for the draft's slots
    # (worker._report_fallback), eager verify bookkeeping (verify_compaction.warm_up)
    "plugin_other": re.compile(r"\[sglang-eagle-paged\] (inactive|.*=off: stock|draft slots allocated by SGLang"
                               r"|verify bookkeeping kernel not used)"),
    "tp_rank": re.compile(r"\b(TP\d+)\b"),
    # prefix_check's periodic INFO line (cumulative counts of that process) and its ERROR line
    "prefix_check": re.compile(r"^\[([^\]]*)\] \[sglang-eagle-paged\] prefix check: (\d+) steps, (\d+) request-checks, "
                               r"(\d+) violations"),
    "prefix_violation": re.compile(r"\[sglang-eagle-paged\] (\[fault\] )?prefix integrity violated"),
}


def scan_log(text: str, examples: int = 3) -> dict:
    """Counts (and first lines) of what matters in a server log."""
    out: dict = {k: 0 for k in ("retract", "leak", "traceback", "optional_endpoint", "cuda_error", "http_error",
                                "prefix_violation")}
    lines: dict[str, list] = {k: [] for k in out}
    retracted = 0
    active: dict[str, str] = {}
    prefix_checks: dict[str, dict] = {}
    other_plugin = []
    open_optional = None  # index of the optional-endpoint example still waiting for its exception line
    for line in text.splitlines():
        optional = _RE["optional_endpoint"].search(line)
        for k in lines:
            if _RE[k].search(line) and not (k == "traceback" and optional):
                out[k] += 1
                if len(lines[k]) < examples:
                    lines[k].append(line.strip()[:300])
        if optional:
            open_optional = len(lines["optional_endpoint"]) - 1 if out["optional_endpoint"] <= examples else None
        elif open_optional is not None and not line[:1].isspace():
            # The traceback's frames are indented; its first unindented line is the exception.
            if _RE["exception_line"].search(line):
                lines["optional_endpoint"][open_optional] += " -> " + line.strip()[:200]
            open_optional = None
        m = _RE["retracted_reqs"].search(line)
        if m and _RE["retract"].search(line):
            retracted += int(m.group(1))
        m = _RE["plugin_active"].search(line)
        if m:
            rank = _RE["tp_rank"].search(m.group(1))
            # The launcher process loads plugins too: its line has no rank.
            active[rank.group(1) if rank else "main"] = m.group(2)
        elif _RE["plugin_other"].search(line) and len(other_plugin) < examples:
            other_plugin.append(line.strip()[:300])
        m = _RE["prefix_check"].search(line)
        if m:
            rank = _RE["tp_rank"].search(m.group(1))
            prefix_checks[rank.group(1) if rank else "main"] = dict(
                zip(("steps", "requests", "violations"), map(int, m.group(2, 3, 4))))
    out.update(retracted_reqs=retracted, plugin_active=active, plugin_other=other_plugin, prefix_checks=prefix_checks,
               prefix_violations=out.pop("prefix_violation"), examples=lines)
    return out


def scan_log_file(path) -> dict:
    """:func:`scan_log` of a server log, plain or gzipped (``.gz``: how large committed logs are kept)."""
    path = Path(path)
    try:
        if path.suffix == ".gz":
            import gzip

            with gzip.open(path, "rt", errors="replace") as f:
                return scan_log(f.read())
        return scan_log(path.read_text(errors="replace"))
    except OSError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}

