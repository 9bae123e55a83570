"""CPU-only shim of ``torchvision.transforms.functional`` for tests and the CPU demo -- NEVER for serving.

Only the names imported at module load by transformers; calling them raises.
"""

from torchvision.io import _unavailable
from torchvision.transforms import InterpolationMode

pil_to_tensor = _unavailable("pil_to_tensor")

__all__ = ["InterpolationMode", "pil_to_tensor"]
