"""CPU-only shim of ``torchvision.transforms.v2`` for tests and the CPU demo -- NEVER for serving."""
