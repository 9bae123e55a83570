"""What a server log says about retraction, leaks, crashes and the plugin's activation per TP rank."""

from __future__ import annotations

import re
from pathlib import Path

_RE = {
    "retract": re.compile(r"KV cache pool is full\. Retract requests\."),
    "retracted_reqs": re.compile(r"#retracted_reqs: (\d+)"),
    "leak": re.compile(r"memory leak detected|Mem Leak Detected", re.I),
    "traceback": re.compile(r"Traceback \(most recent call last\)"),
    "cuda_error": re.compile(r"CUDA error|illegal memory access|device-side assert|CUBLAS_STATUS|out of memory", re.I),
    "http_error": re.compile(r"\[http_server\] Error"),
    "plugin_active": re.compile(r"^\[([^\]]*)\] \[sglang-eagle-paged\] active: mode=(\w+)"),
    "plugin_other": re.compile(r"\[sglang-eagle-paged\] (inactive|.*=off: stock)"),
    "tp_rank": re.compile(r"\b(TP\d+)\b"),
}


def scan_log(text: str, examples: int = 3) -> dict:
    """Counts (and first lines) of what matters in a server log."""
    out: dict = {k: 0 for k in ("retract", "leak", "traceback", "cuda_error", "http_error")}
    lines: dict[str, list] = {k: [] for k in out}
    retracted = 0
    active: dict[str, str] = {}
    other_plugin = []
    for line in text.splitlines():
        for k in lines:
            if _RE[k].search(line):
                out[k] += 1
                if len(lines[k]) < examples:
                    lines[k].append(line.strip()[:300])
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
    out.update(retracted_reqs=retracted, plugin_active=active, plugin_other=other_plugin, examples=lines)
    return out


def scan_log_file(path) -> dict:
    try:
        return scan_log(Path(path).read_text(errors="replace"))
    except OSError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
