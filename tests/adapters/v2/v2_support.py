"""Shared by the v2 adapter tests: SGLang 0.5.23's real pools on CPU, rows laid out as its
scheduler lays them, a host-read probe and a launch counter."""

import importlib.metadata
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

TESTED = "0.5.23"


def installed_sglang():
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def require_sglang():
    """Skip the calling test module unless SGLang 0.5.23 (the v2 CPU environment) is installed."""
    v = installed_sglang()
    if v != TESTED:
        pytest.skip(f"needs SGLang {TESTED} (scripts/setup_cpu.sh builds it); installed: {v}", allow_module_level=True)
    standins = Path(__file__).resolve().parents[3] / "scripts" / "cpu_standins"
    if str(standins) not in sys.path:
        sys.path.append(str(standins))


# ------------------------------------------------------------------ host-read probe

SYNCING_CALLS = {"nonzero", "argwhere", "item", "tolist", "__bool__", "__int__", "__index__", "__float__",
                 "masked_select", "unique", "numpy", "cpu", "nonzero_static"}


class HostReads:
    """A TorchFunctionMode that records every call which makes the host wait for a device tensor's
    values: the calls in SYNCING_CALLS, and indexing with a boolean tensor. Paused while a Triton
    kernel runs (on a GPU a launch reads nothing back; the CPU interpreter does)."""

    def __init__(self):
        from torch.overrides import TorchFunctionMode

        outer = self

        class _Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if not outer.paused:
                    outer._check(func, args)
                return func(*args, **kwargs)

        self.mode = _Mode()
        self.reads = []
        self.paused = False

    def _check(self, func, args):
        import torch

        name = getattr(func, "__name__", str(func))
        if name in SYNCING_CALLS:
            self.reads.append(name)
        elif name in ("__getitem__", "__setitem__", "index_put_", "index_put") and len(args) > 1:
            idx = args[1] if isinstance(args[1], tuple) else (args[1],)
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in idx):
                self.reads.append(f"{name}[bool mask]")

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


@contextmanager
def observe():
    """``(probe, launches)``: host reads outside kernels, and the Triton kernels launched (names)."""
    from triton.runtime.interpreter import InterpretedFunction

    launches = []
    orig = InterpretedFunction.run
    probe = HostReads()

    def run(self, *args, grid, warmup, **kwargs):
        launches.append(self.fn.__name__)
        was, probe.paused = probe.paused, True
        try:
            return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            probe.paused = was

    InterpretedFunction.run = run
    try:
        with probe:
            yield probe, launches
    finally:
        InterpretedFunction.run = orig


# ------------------------------------------------------------------ pools and rows (shared with the demo)

from sglang_eagle_paged.tools.v2_harness import (  # noqa: E402,F401
    alloc_len, draft_args, fill_random, layout_rows, make_pool, restore, snapshot)
