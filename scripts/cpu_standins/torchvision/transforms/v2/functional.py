"""CPU-only shim of ``torchvision.transforms.v2.functional`` for tests and the CPU demo -- NEVER for serving.

transformers imports this module as ``tvF`` at module load; only the enum is
real, the functions raise when called.
"""

from torchvision.transforms.functional import InterpolationMode, pil_to_tensor

__all__ = ["InterpolationMode", "pil_to_tensor"]
