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


def _tensor_parallel(args: Sequence[str]) -> bool:
    return any(a in ("--tp", "--tp-size", "--tensor-parallel-size") for a in args)


def run_group(specs: Sequence[ServerSpec], workloads: Mapping[str, Callable[[str], dict]], *, out_json: str,
              log_dir: str, startup_timeout: float = 600.0, launcher: Callable[..., ServerProcess] = None,
              gpus: int = 1, costs: Mapping[str, float] | None = None, triton_seeds: Sequence[str] = ()) -> dict:
    """Start ``specs`` together, then run each one's workload alone on its GPU.

    ``workloads[name](base_url)`` returns what to record. Every record gets the server
    arguments, the start-up time and :func:`scan_log` of the server's log; results are
    merged into ``out_json`` as they come, and names recorded without error are skipped.
    With ``gpus`` > 1 each server goes to the GPU with the least work so far (``costs``
    by name, default 1) and the GPUs run their workloads side by side; a tensor-parallel
    server keeps SGLang's GPU placement (from GPU 0) and counts as GPU 0's work.
    """
    out_path = Path(out_json)
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    todo = [s for s in specs if not (s.name in results and not results[s.name].get("error"))]
    launched, lanes = [], []
    load = [0.0] * max(1, gpus)
    for spec in todo:
        args = spec.args()
        gpu = 0 if _tensor_parallel(args) else load.index(min(load))
        load[gpu] += (costs or {}).get(spec.name, 1.0)
        if gpus > 1 and not _tensor_parallel(args):
            args = args + ["--base-gpu-id", str(gpu)]
        server, record, _ = launch(spec.cfg, args, port=spec.port, log_dir=log_dir,
                                   startup_timeout=startup_timeout, shared_gpu=len(todo) > 1, launcher=launcher,
                                   triton_seeds=triton_seeds)
        record["gpu"] = gpu
        launched.append((spec.name, server, record))
        lanes.append(gpu)

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
        serve_group(launched, measure, done, lanes=lanes)
    finally:
        for name, _, record in launched:
            if name not in results:
                record.setdefault("error", "interrupted before its workload ran")
                record["log_scan"] = scan_log_file(record["log"])
                results[name] = record
        _write(out_path, results)
    return results
