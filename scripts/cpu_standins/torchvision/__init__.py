"""CPU-only shim of ``torchvision`` for tests and the CPU demo -- NEVER for serving.

``scripts/setup_cpu.sh`` puts this folder on the venv's path because the
torchvision wheel pip picks next to CPU torch needs CUDA libraries. SGLang only
imports torchvision at module import time (``sglang.srt.utils.common`` does
``from torchvision.io import decode_jpeg``); nothing here does real vision work.
It is a real package on disk because transformers probes it with
``importlib.util.find_spec``. A real torchvision installed in site-packages
takes precedence over this shim.
"""

__version__ = "0.0.0+cpu.shim"
