"""CPU-only shim of ``torchvision.transforms`` for tests and the CPU demo -- NEVER for serving.

Only ``InterpolationMode`` (an enum, imported by ``transformers.image_utils`` at
module load). No transform is implemented.
"""

import enum


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"
