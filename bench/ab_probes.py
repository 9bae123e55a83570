"""What the lab measures around every counted pass of ``bench.ab``, beside the throughput: the
CPU seconds of each server's processes and of the host (:mod:`.proc_cpu`), and the GPU's
utilisation and SM clock sampled by nvidia-smi (:mod:`.gpu_sampler`). The package's A/B takes
them as ``run_pairs(..., probes=probes)``; its summary turns ``cpu_s`` and ``gpu`` into the
scheduler's CPU share and the GPU's utilisation per side.
"""

import time

from . import proc_cpu
from .gpu_sampler import GpuSampler


def _pgid(server) -> int | None:
    """The server's process group (its own session: every process it forks), None if not running."""
    proc = getattr(server, "proc", None)
    return proc.pid if proc is not None else None


class CpuSeconds:
    def before(self, server):
        return proc_cpu.snapshot(_pgid(server))

    def after(self, server, state) -> dict:
        return {"cpu_s": proc_cpu.difference(state, proc_cpu.snapshot(_pgid(server)))}


class GpuUtilisation:
    def __init__(self, sampler: GpuSampler):
        self.sampler = sampler

    def before(self, server):
        return time.time()

    def after(self, server, state) -> dict:
        return {"gpu": self.sampler.between(state, time.time())}

    def close(self) -> None:
        self.sampler.stop()


def probes(out, gpu: int) -> list:
    """The probes of one GPU's pair (``bench.ab.run_pairs``'s ``probes``)."""
    sampler = GpuSampler.start_if_available(out / "logs" / f"gpu{gpu}_samples.csv", gpu)
    return [CpuSeconds()] + ([GpuUtilisation(sampler)] if sampler is not None else [])
