"""Start reliability servers together, run one workload on each alone, record as it goes."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from sglang_eagle_paged.bench.configs import RunConfig, launch, server_args
from sglang_eagle_paged.bench.server import ServerProcess

from ..e2e import serve_group
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


_TP_FLAGS = ("--tp", "--tp-size", "--tensor-parallel-size")


def tp_size(args: Sequence[str]) -> int:
    """The tensor-parallel size ``args`` ask SGLang for (1 without a flag)."""
    size = 1
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if flag in _TP_FLAGS:
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "1")
            size = int(value)
    return size


def gpu_memory_used_mib() -> list | None:
    """Memory in use on each GPU, from nvidia-smi (None where it cannot tell)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
        return [int(float(v)) for v in out.stdout.split()] if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def wait_gpus_free(timeout_s: float = 120.0, max_used_mib: int = 2048,
                   used: Callable[[], list | None] = gpu_memory_used_mib, poll_s: float = 1.0) -> dict:
    """Wait until no GPU holds more than ``max_used_mib`` (the stopped servers' processes, children
    included, have let go of their memory); what it saw, for the record. Gives up after ``timeout_s``."""
    t0 = time.monotonic()
    while True:
        now = used()
        waited = round(time.monotonic() - t0, 1)
        if now is None:
            return {"used_mib": None, "waited_s": waited, "free": None}  # cannot tell: do not wait
        if max(now, default=0) <= max_used_mib or waited >= timeout_s:
            return {"used_mib": now, "waited_s": waited, "free": max(now, default=0) <= max_used_mib}
        time.sleep(poll_s)


def run_group(specs: Sequence[ServerSpec], workloads: Mapping[str, Callable[[str], dict]], *, out_json: str,
              log_dir: str, startup_timeout: float = 600.0, launcher: Callable[..., ServerProcess] = None,
              gpus: int = 1, costs: Mapping[str, float] | None = None, triton_seeds: Sequence[str] = (),
              wait_free: Callable[[], dict] | None = None) -> dict:
    """Start ``specs`` together, then run each one's workload alone on its GPU.

    ``workloads[name](base_url)`` returns what to record. Every record gets the server
    arguments, the start-up time and :func:`scan_log` of the server's log; results are
    merged into ``out_json`` as they come, and names recorded without error are skipped.
    With ``gpus`` > 1 each server goes to the GPU with the least work so far (``costs``
    by name, default 1) and the GPUs run their workloads side by side.

    A tensor-parallel server (TP > 1) keeps SGLang's GPU placement (from GPU 0) and runs
    alone: SGLang refuses to start TP ranks whose GPUs have unequal free memory ("The memory
    capacity is unbalanced"), which other servers starting beside it cause (run 4). TP servers
    go first, while the GPUs are still empty: run 5 put them last and the call's time limit
    came before the TP=2 server had served anything. ``wait_free()`` (e.g.
    :func:`wait_gpus_free`), if given, is called before each such start and its answer
    recorded as ``gpus_before_start``.
    """
    out_path = Path(out_json)
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    todo = [s for s in specs if not (s.name in results and not results[s.name].get("error"))]
    shared = [s for s in todo if tp_size(s.args()) == 1]
    stages = [[s] for s in todo if tp_size(s.args()) > 1] + ([shared] if shared else [])
    launched, finished = [], set()

    def done(name, record):
        record["log_scan"] = scan_log_file(record["log"])
        results[name] = record
        finished.add(name)
        _write(out_path, results)
        s = record.get("summary") or {}
        print(f"[reliability] {name}: acc={s.get('acceptance_length')} tok/s={s.get('output_throughput')} "
              f"err={str(record.get('error', ''))[:200]}", flush=True)

    def measure(name, server, record):
        record.update(workloads[name](server.base_url))

    try:
        for stage in stages:
            alone = len(stage) == 1 and tp_size(stage[0].args()) > 1
            before = wait_free() if alone and wait_free is not None else None
            group, lanes = [], []
            load = [0.0] * max(1, gpus)
            for spec in stage:
                args = spec.args()
                gpu = 0 if alone else load.index(min(load))
                load[gpu] += (costs or {}).get(spec.name, 1.0)
                if gpus > 1 and not alone:
                    args = args + ["--base-gpu-id", str(gpu)]
                server, record, _ = launch(spec.cfg, args, port=spec.port, log_dir=log_dir,
                                           startup_timeout=startup_timeout, shared_gpu=len(stage) > 1,
                                           launcher=launcher, triton_seeds=triton_seeds)
                record["gpu"] = gpu
                if before is not None:
                    record["gpus_before_start"] = before
                group.append((spec.name, server, record))
                lanes.append(gpu)
            launched += group
            serve_group(group, measure, done, lanes=lanes)
    finally:
        for name, _, record in launched:
            if name not in finished:  # (an earlier run's record of it may be in results)
                record.setdefault("error", "not measured: interrupted before its workload ran")
                record["log_scan"] = scan_log_file(record["log"])
                results[name] = record
        started = {name for name, _, _ in launched}
        for spec in todo:
            if spec.name not in started:
                record = {"config": asdict(spec.cfg), "server_args": spec.args(),
                          "error": "not measured: interrupted before its server started"}
                if (results.get(spec.name) or {}).get("error"):
                    record["earlier_error"] = results[spec.name]["error"]  # of a run before this one
                results[spec.name] = record
        _write(out_path, results)
    return results
