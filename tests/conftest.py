"""Test-wide setup: run Triton kernels through the interpreter unless asked for a GPU.

TRITON_INTERPRET must be set before triton (or SGLang's Triton kernels) is first
imported, so it is decided here, without importing torch. GPU runs opt in with
SGLANG_EAGLE_PAGED_TEST_GPU=1 (and ``-m gpu``); an explicit TRITON_INTERPRET
in the environment always wins.
"""

import os

GPU_RUN = os.environ.get("SGLANG_EAGLE_PAGED_TEST_GPU") == "1"
if not GPU_RUN:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = None
    if os.environ.get("E2E_REPLAY") or os.environ.get("REL_REPLAY"):
        return  # the GPU suites' assertions on recorded results: no GPU needed
    if not GPU_RUN:
        reason = "gpu test: set SGLANG_EAGLE_PAGED_TEST_GPU=1 on a CUDA machine"
    else:
        import torch

        if not torch.cuda.is_available():
            reason = "gpu test: CUDA is not available"
    if reason:
        skip = pytest.mark.skip(reason=reason)
        for item in gpu_items:
            item.add_marker(skip)


# tests/ on the path, so that every test file imports ``helpers`` wherever it sits.
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _settings_follow_the_environment(monkeypatch):
    """Serving parses the environment once per process; a test that sets a variable expects it
    to count, so within tests every read parses again (``tests/test_settings.py`` checks the
    cached form itself)."""
    from sglang_eagle_paged import settings

    monkeypatch.setattr(settings, "current", settings.parse)
    yield


@pytest.fixture
def sigint_raises():
    """Python's own SIGINT handler (KeyboardInterrupt) for a test that sends itself SIGINT, as the
    device scripts' ``timeout -s INT`` does. A process started in the background by a shell (the
    suite's two parts run side by side) inherits SIGINT ignored, and then Python installs no handler."""
    import signal

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)
