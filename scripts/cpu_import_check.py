"""The last step of scripts/setup_cpu.sh: import the SGLang modules the project hooks and tests, on
the CPU with TRITON_INTERPRET=1, and say in one line that they do.

  python scripts/cpu_import_check.py SGLANG_VERSION MODULE...

SGLang logs a few lines of its own while these modules load; on a machine without a GPU some are
about the missing GPU and nothing else (0.5.23's trtllm_mla backend asks for the CUDA architecture
at import, and its JIT helper warns "Cannot detect CUDA architecture."). A bare line like that in the
set-up's output reads as our failure: each one SGLang logs is printed once, in one line of ours that
names where it comes from.
"""

import importlib
import logging
import sys

# Messages about the GPU this machine does not have: (start of the message, why it is harmless here)
NO_GPU = {"Cannot detect CUDA architecture": "no GPU on this machine; SGLang's JIT kernels are not built here"}


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def _said(record) -> str:
    message = record.getMessage().strip()
    why = next((w for start, w in NO_GPU.items() if message.startswith(start)), None)
    source = f"{record.name} ({record.pathname.rsplit('site-packages/', 1)[-1]}:{record.lineno})"
    return (f"[setup_cpu] SGLang's {source} logged while importing: {message!r}"
            + (f": expected, {why}" if why else ""))


def main(version: str, modules: list) -> int:
    collect = _Collect()
    root = logging.getLogger()
    root.addHandler(collect)
    try:
        for name in modules:
            importlib.import_module(name)
    finally:
        root.removeHandler(collect)
    for line in dict.fromkeys(_said(r) for r in collect.records):
        print(line)
    import numpy
    import sglang
    import torch
    import triton

    import sglang_eagle_paged  # noqa: F401

    assert sglang.__version__ == version, f"expected sglang {version}, got {sglang.__version__}"
    assert torch.version.cuda is None, f"expected a CPU torch build, got CUDA {torch.version.cuda}"
    print(f"[setup_cpu] OK: {len(modules)} SGLang modules import on CPU (TRITON_INTERPRET=1): "
          f"sglang {sglang.__version__}, torch {torch.__version__}, triton {triton.__version__}, "
          f"numpy {numpy.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
