"""CPU-only shim of ``sgl_kernel`` for tests and the CPU demo -- NEVER for serving.

The real ``sgl_kernel`` (PyPI ``sglang-kernel``) loads CUDA libraries
(libnvrtc) at import and cannot be imported on a CPU-only machine.
``scripts/setup_cpu.sh`` puts this folder on the venv's path so the SGLang
modules this project subclasses can be imported. Only the names SGLang
imports at module load exist; calling any of them raises.
"""

__version__ = "0.0.0+cpu.shim"


def _unavailable(qualname):
    def fn(*args, **kwargs):
        raise NotImplementedError(
            f"{qualname}: CPU-only shim (scripts/cpu_standins); "
            "the real sgl_kernel needs CUDA"
        )

    fn.__name__ = qualname.rsplit(".", 1)[-1]
    fn.__qualname__ = fn.__name__
    return fn


# ``sglang.srt.layers.attention.flashattention_backend`` imports this at module
# load (needed on the CPU only to import that module, e.g. for its metadata
# helpers); calling it raises like every other shim.
merge_state_v2 = _unavailable("sgl_kernel.merge_state_v2")
