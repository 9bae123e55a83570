"""The CPU test environment (scripts/setup_cpu.sh) works: SGLang imports, Triton interprets.

If this fails, the setup broke; every other test's result is then meaningless.
"""

import importlib
import importlib.metadata
import os
from pathlib import Path

import pytest

# What scripts/setup_cpu.sh imports for each generation (the v1 worker's modules are gone in v2).
V1_MODULES = [
    "sglang.srt.speculative.eagle_worker",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.mem_cache.allocator",
    "sglang.srt.mem_cache.common",
    "sglang.srt.server_args",
    "sglang.srt.plugins",
    "sglang.srt.plugins.hook_registry",
    "sglang.srt.speculative.spec_utils",
    "sglang.srt.speculative.eagle_info",
    "sglang.srt.managers.schedule_batch",
]
V2_MODULES = [
    "sglang.srt.speculative.eagle_worker_common",
    "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.speculative.standalone_worker_v2",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.mem_cache.allocator",
    "sglang.srt.plugins",
    "sglang.srt.plugins.hook_registry",
]
SGLANG_MODULES = V1_MODULES if importlib.metadata.version("sglang") == "0.5.12.post1" else V2_MODULES

cpu_only = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="checks the CPU (interpreted Triton) setup"
)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", SGLANG_MODULES)
def test_sglang_module_imports(name):
    importlib.import_module(name)


def test_standins_stay_out_of_the_package():
    import sglang_eagle_paged

    pkg = Path(sglang_eagle_paged.__file__).resolve().parent
    for name in ("torchvision", "sgl_kernel"):
        assert not (pkg / name).exists()
    shims = Path(__file__).resolve().parents[2] / "scripts" / "cpu_standins"
    assert (shims / "torchvision" / "__init__.py").is_file()
    assert (shims / "sgl_kernel" / "__init__.py").is_file()


@cpu_only
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_triton_interpreter_runs_sglang_kv_copy_on_cpu():
    import torch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    # enable_kv_cache_copy=True runs a Triton warm-up in the constructor.
    pool = MHATokenToKVPool(
        size=32, page_size=4, dtype=torch.float16, head_num=2, head_dim=8,
        layer_num=2, device="cpu", enable_memory_saver=False,
        enable_kv_cache_copy=True,
    )
    for layer in range(2):
        pool.get_key_buffer(layer)[4:7] = torch.arange(3, dtype=torch.float16)[:, None, None]
    src = torch.tensor([4, 5, 6])
    tgt = torch.tensor([8, 9, 10])
    pool.move_kv_cache(tgt, src)
    for layer in range(2):
        k = pool.get_key_buffer(layer)
        assert torch.equal(k[8:11], k[4:7])


def test_triton_is_the_one_the_installed_sglang_brings():
    """The suite runs on the Triton each generation's users have: `pip install sglang==0.5.23`
    brings triton 3.8.0; the v1 environment (and the GPU machine's torch 2.11) keep 3.6.0."""
    import triton

    want = {"0.5.23": "3.8.0", "0.5.12.post1": "3.6.0"}[importlib.metadata.version("sglang")]
    assert triton.__version__ == want


def test_the_set_up_s_import_check_says_where_sglang_s_own_lines_come_from():
    """The set-up's last step (scripts/cpu_import_check.py, what setup_cpu.sh runs) in its own process:
    the one line SGLang 0.5.23 logs at import on a machine without a GPU ("Cannot detect CUDA
    architecture.", from its JIT helper asked by the trtllm_mla backend) never stands bare in the
    output; it comes once, in a line of ours naming SGLang's module and that no GPU is the cause."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(root)}
    p = subprocess.run([sys.executable, "-W", "ignore", str(root / "scripts" / "cpu_import_check.py"),
                        importlib.metadata.version("sglang"), *SGLANG_MODULES], env=env, cwd="/",
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = (p.stdout + p.stderr).splitlines()
    assert all(line.startswith("[setup_cpu] ") for line in lines), lines
    assert lines[-1].startswith("[setup_cpu] OK: ") and len(lines) == len(set(lines))
    if importlib.metadata.version("sglang") == "0.5.23":
        (arch,) = [line for line in lines if "Cannot detect CUDA architecture" in line]
        assert "sglang.kernels.jit.utils.arch" in arch and "no GPU on this machine" in arch
