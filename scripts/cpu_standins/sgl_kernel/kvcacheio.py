"""CPU-only shim of ``sgl_kernel.kvcacheio`` for tests and the CPU demo -- NEVER for serving.

``sglang.srt.mem_cache.memory_pool_host`` imports these HiCache transfer
kernels at module load; each raises when called.
"""

from sgl_kernel import _unavailable

_NAMES = (
    "transfer_kv_all_layer",
    "transfer_kv_all_layer_direct_lf_pf",
    "transfer_kv_all_layer_lf_pf",
    "transfer_kv_all_layer_lf_ph",
    "transfer_kv_all_layer_mla",
    "transfer_kv_all_layer_mla_lf_pf",
    "transfer_kv_direct",
    "transfer_kv_per_layer",
    "transfer_kv_per_layer_direct_pf_lf",
    "transfer_kv_per_layer_mla",
    "transfer_kv_per_layer_mla_pf_lf",
    "transfer_kv_per_layer_pf_lf",
    "transfer_kv_per_layer_ph_lf",
)
for _n in _NAMES:
    globals()[_n] = _unavailable(f"sgl_kernel.kvcacheio.{_n}")
del _n

__all__ = list(_NAMES)
