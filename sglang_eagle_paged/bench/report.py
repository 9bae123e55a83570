"""Markdown tables and plots from benchmark results (single runs and sweeps)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Sequence

# Rows that differ only in page size are compared against page 1, the layout
# where tree speculation was always correct.
GROUP_KEYS = ("attention_backend", "mode", "topk")


def fmt(value: Any, digits: int = 2, thousands: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}" if thousands else f"{value:.{digits}f}"
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def served_line(found: dict) -> str:
    """What a server logged about the path it ran (:func:`.server_log.served`), in one line."""
    if found.get("plugin") is None:
        return f"Path served: not known ({found.get('read') or 'no line of the plugin in the server log'})."
    if found["plugin"] in ("off", "inactive"):
        return f"Path served: SGLang's own (plugin {found['plugin']}, from the server log)."
    return f"Path served: the plugin, mode {found['plugin']}, {found['layout']} draft layout (from the server log)."


def run_markdown(result: dict) -> str:
    """One client run: summary, server configuration, per-question table."""
    meta, srv, s = result.get("metadata", {}), result.get("server", {}), result["summary"]
    out = ["# MT-bench speculative decoding benchmark\n\n"]
    out.append(
        f"{meta.get('date', '')} on `{meta.get('hostname', '')}`"
        + (f", GPU {meta['gpu']}" if meta.get("gpu") else "")
        + f"; sglang {fmt((meta.get('versions') or {}).get('sglang'))}"
        + f"; parallel {fmt(meta.get('parallel'))}, max_new_tokens {fmt(meta.get('max_new_tokens'))}\n"
    )
    if srv:
        out.append("\n" + table(list(srv), [[fmt(v) for v in srv.values()]]))
    if "served" in result:
        out.append("\n" + served_line(result["served"]) + "\n")
    out.append("\n## Summary\n\n")
    out.append(table(
        ["requests", "errors", "accept length", "output tok/s", "req/s", "wall s", "latency p50 s", "latency p90 s"],
        [[s["num_requests"], s["num_errors"], fmt(s["acceptance_length"], 3), fmt(s["output_throughput"], 1),
          fmt(s["request_throughput"]), fmt(s["wall_s"]), fmt(s["latency_p50_s"]), fmt(s["latency_p90_s"])]],
    ))
    pq = result.get("per_question") or []
    if pq:
        out.append("\n## Per question\n\n")
        out.append(table(
            ["question", "category", "accept length", "turn 1", "turn 2", "completion tokens", "latency s", "errors"],
            [[q["question_id"], q["category"], fmt(q["accept_length"], 3),
              *[fmt(a, 3) for a in (list(q["turn_accept_length"]) + [None, None])[:2]],
              q["completion_tokens"], fmt(q["latency_s"]), "; ".join(q["errors"]) or ""] for q in pq],
        ))
    return "".join(out)


def add_page1_ratios(rows: list[dict]) -> list[dict]:
    """Throughput and acceptance of each row relative to page 1 of its group."""
    base = {
        tuple(r.get(k) for k in GROUP_KEYS): r
        for r in rows if r.get("page_size") == 1 and r.get("status") == "ok"
    }
    for r in rows:
        b = base.get(tuple(r.get(k) for k in GROUP_KEYS))
        for metric, ratio_key in (("output_throughput", "throughput_vs_page1"),
                                  ("acceptance_length", "acceptance_vs_page1")):
            num = r.get(metric) if r.get("status") == "ok" else None
            den = b.get(metric) if b else None
            r[ratio_key] = num / den if num is not None and den else None
    return rows


def sweep_markdown(rows: Sequence[dict]) -> str:
    body = [
        [r.get("mode"), r.get("attention_backend"), r.get("topk"), r.get("num_draft_tokens"), r.get("page_size"),
         fmt(r.get("acceptance_length"), 3), fmt(r.get("acceptance_vs_page1"), 3),
         fmt(r.get("output_throughput"), 1), fmt(r.get("throughput_vs_page1"), 3),
         fmt(r.get("latency_p50_s")), r.get("status"), r.get("error", "")]
        for r in rows
    ]
    return "# MT-bench sweep\n\n" + table(
        ["mode", "backend", "topk", "draft tokens", "page", "accept length", "accept / page1",
         "output tok/s", "tok/s / page1", "p50 s", "status", "error"],
        body,
    )


def plot_sweep(rows: Sequence[dict], path: str | os.PathLike) -> Path | None:
    """Throughput and acceptance vs page size, one line per (backend, mode, topk).

    Returns None when matplotlib is missing or there is nothing to draw, so a
    sweep never fails at its last step for want of a plotting library.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("status") == "ok":
            groups.setdefault(tuple(r.get(k) for k in GROUP_KEYS), []).append(r)
    if not groups:
        return None
    fig, (ax_t, ax_a) = plt.subplots(1, 2, figsize=(12, 4.5))
    for (backend, mode, topk), rs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        rs = sorted(rs, key=lambda r: r["page_size"])
        xs = [r["page_size"] for r in rs]
        label = f"{backend} {mode} topk={topk}"
        ax_t.plot(xs, [r.get("output_throughput") or float("nan") for r in rs], marker="o", label=label)
        ax_a.plot(xs, [r.get("acceptance_length") or float("nan") for r in rs], marker="o", label=label)
    for ax, title in ((ax_t, "output throughput (tok/s)"), (ax_a, "acceptance length (tokens/verify)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("page size")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    ax_a.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
