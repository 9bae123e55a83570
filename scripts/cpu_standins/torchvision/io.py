"""CPU-only shim of ``torchvision.io`` for tests and the CPU demo -- NEVER for serving.

Holds only the names imported at module load: ``decode_jpeg`` (by
``sglang.srt.utils.common``), ``ImageReadMode`` and ``decode_image`` (by
``transformers.image_utils``, which believes torchvision is installed because
this shim is found on disk). The functions raise: no image decoding here.
"""

import enum


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4
    RGBA = 4


def _unavailable(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(
            f"torchvision.io.{name}: CPU-only shim (scripts/cpu_standins); "
            "install a real torchvision to decode images"
        )

    fn.__name__ = name
    return fn


decode_jpeg = _unavailable("decode_jpeg")
decode_image = _unavailable("decode_image")
