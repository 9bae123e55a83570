"""Launching our Triton kernels without Triton's per-call argument binding.

``kernel[grid](...)`` binds and specialises every argument on each call to find the compiled
variant, then calls its launcher: several times the launcher's own host time (numbers in
``docs/performance.md``). A draft round at page > 1 makes
several such launches on a host-bound server's critical path.

:func:`launch` keeps each kernel's compiled variants keyed by what Triton specialises them on,
*for kernels that opt out of every value specialisation*: every runtime integer parameter in
``do_not_specialize`` and every pointer parameter in ``do_not_specialize_on_alignment``. Then a
variant depends only on the tensors' dtypes, the integers' widths, the constexprs and the launch
options, which is the key here. A key's first call goes through Triton (which compiles if it
must) and keeps the compiled variant it returns; later calls with that key go straight to the
variant's launcher. Every other call goes through Triton: the interpreter, a launch hook set
(a profiler's), a kernel's pre-run hook, a compile-pipeline inspection hook (Triton 3.8 adds it
to the variant's key), an argument of another type, a kernel that specialises on values, a
Triton release other than those this was checked on (3.6 and 3.8: ``JITFunction.run`` calls the
variant's launcher the same way in both, ``tests/kernels/test_launch.py`` reads it from the
installed Triton), or ``SGLANG_EAGLE_PAGED_DIRECT_LAUNCH=0`` (read once, from
:mod:`sglang_eagle_paged.settings`). Triton's debug and instrumentation settings are those of a
variant's first launch.
"""

import torch
import triton
from triton import knobs

CHECKED_TRITON = ("3.6", "3.8")

_UNSUPPORTED = object()


def _width(x: int) -> str:
    # Triton's type for a non-specialised Python int argument
    if -(2 ** 31) <= x < 2 ** 31:
        return "i32"
    return "i64" if -(2 ** 63) <= x < 2 ** 63 else "u64"


class _KernelLaunches:
    """One kernel's compiled variants, by key; built at its first :func:`launch`."""

    def __init__(self, kernel):
        self.names = list(kernel.arg_names)
        params = kernel.params
        self.defaults = {p.name: p.default for p in params if p.has_default}
        self.int_ok = {p.name for p in params if p.do_not_specialize}
        self.ptr_ok = {p.name for p in params if p.do_not_specialize_on_alignment}
        self.variants = {}  # key -> (compiled variant, the parameters after the runtime ones)

    def key(self, args, constexprs, options):
        parts = []
        for name, a in zip(self.names, args):
            if isinstance(a, torch.Tensor):
                if name not in self.ptr_ok:
                    return _UNSUPPORTED
                parts.append(a.dtype)
            elif type(a) is int:
                if name not in self.int_ok:
                    return _UNSUPPORTED
                parts.append(_width(a))
            else:
                return _UNSUPPORTED
        return (torch.cuda.current_device(), tuple(parts), tuple(constexprs.items()), tuple(options.items()))

    def tail(self, n_args, constexprs) -> tuple:
        """The parameters after the ``n_args`` runtime ones, in signature order (constexprs, then
        defaults): Triton passes every parameter on to the launcher. Fixed by the key."""
        return tuple(constexprs[n] if n in constexprs else self.defaults[n] for n in self.names[n_args:])


_launches = {}


def _enabled() -> bool:
    from ..settings import current  # the package's settings: no SGLang import

    release = ".".join(triton.__version__.split(".")[:2])
    return release in CHECKED_TRITON and current().direct_launch


_ENABLED = None  # decided at the first launch (settings are read once, not at import)


def _fast_path_possible(kernel) -> bool:
    global _ENABLED
    if _ENABLED is None:
        _ENABLED = _enabled()
    if not _ENABLED or not hasattr(kernel, "device_caches"):  # the interpreter's kernels: no variants
        return False
    # Triton keeps launch hooks in (normally empty) chains; a profiler adds to them
    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return False
    # hooks that Triton's run() calls or keys variants on, which the launcher alone would skip
    return not getattr(kernel, "pre_run_hooks", ()) and getattr(knobs.runtime, "add_stages_inspection_hook", None) is None


def launch(kernel, grid, args: tuple, constexprs: dict, **options) -> None:
    """``kernel[grid](*args, **constexprs, **options)``, through the compiled variant's launcher
    once Triton has resolved that variant for this key (module docstring).

    ``args`` are the leading runtime parameters in signature order; ``constexprs`` names the
    constexpr parameters after them; ``options`` are launch options (``num_warps`` ...).
    """
    if not _fast_path_possible(kernel):
        kernel[grid](*args, **constexprs, **options)
        return
    state = _launches.get(kernel)
    if state is None:
        state = _launches[kernel] = _KernelLaunches(kernel)
    key = state.key(args, constexprs, options)
    known = state.variants.get(key) if key is not _UNSUPPORTED else None
    if known is None:
        compiled = kernel[grid](*args, **constexprs, **options)
        if hasattr(compiled, "result"):  # an asynchronous compile's future
            compiled = compiled.result()
        if key is not _UNSUPPORTED and compiled is not None:
            state.variants[key] = (compiled, state.tail(len(args), constexprs))
        return
    compiled, tail = known
    g = tuple(grid) + (1, 1)
    stream = torch._C._cuda_getCurrentRawStream(key[0])
    compiled.run(g[0], g[1], g[2], stream, compiled.function, compiled.packed_metadata, None, None, None,
                 *args, *tail)
