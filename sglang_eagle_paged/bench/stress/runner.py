"""Start reliability servers together, run one workload on each alone, record as it goes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..e2e import RunConfig, launch, serve_group, server_args
from ..server import ServerProcess
from .logs import scan_log_file


@dataclass
class ServerSpec:
    """One server of a reliability run; every launch argument is explicit here or in ``cfg``
    (its environment too: ``cfg.env``)."""

    cfg: RunConfig
    target: str
    draft: str
    port: int
    max_total_tokens: int
    mem_fraction: float = 0.5
    load_format: str | None = None

    @property
    def name(self) -> str:
        return self.cfg.name

    def args(self) -> list:
        return server_args(self.cfg, self.target, self.draft, self.port, self.max_total_tokens,
                           self.mem_fraction, self.load_format)


def _write(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(path)


def run_group(specs: Sequence[ServerSpec], workloads: Mapping[str, Callable[[str], dict]], *, out_json: str,
              log_dir: str, startup_timeout: float = 600.0, launcher: Callable[..., ServerProcess] = None) -> dict:
    """Start ``specs`` together, then run each one's workload alone on the GPU.

    ``workloads[name](base_url)`` returns what to record. Every record gets the server
    arguments, the start-up time and :func:`scan_log` of the server's log; results are
    merged into ``out_json`` as they come, and names recorded without error are skipped.
    """
    out_path = Path(out_json)
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    todo = [s for s in specs if not (s.name in results and not results[s.name].get("error"))]
    launched = []
    for spec in todo:
        server, record, _ = launch(spec.cfg, spec.args(), port=spec.port, log_dir=log_dir,
                                   startup_timeout=startup_timeout, shared_gpu=len(todo) > 1, launcher=launcher)
        launched.append((spec.name, server, record))

    def measure(name, server, record):
        record.update(workloads[name](server.base_url))

    def done(name, record):
        record["log_scan"] = scan_log_file(record["log"])
        results[name] = record
        _write(out_path, results)
        s = record.get("summary") or {}
        print(f"[reliability] {name}: acc={s.get('acceptance_length')} tok/s={s.get('output_throughput')} "
              f"err={str(record.get('error', ''))[:200]}", flush=True)

    try:
        serve_group(launched, measure, done)
    finally:
        for name, _, record in launched:
            if name not in results:
                record.setdefault("error", "interrupted before its workload ran")
                record["log_scan"] = scan_log_file(record["log"])
                results[name] = record
        _write(out_path, results)
    return results
