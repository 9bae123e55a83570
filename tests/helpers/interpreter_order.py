"""Run a Triton-interpreter launch's programs in a chosen order.

Triton 3.6's ``GridExecutor.__call__`` (triton/runtime/interpreter.py) runs a
launch as::

    interpreter_builder.set_grid_dim(*grid)
    for x in range(grid[0]):
        for y ...: for z ...:
            interpreter_builder.set_grid_idx(x, y, z)
            self.fn(**args)

and ``tl.program_id`` reads ``interpreter_builder.grid_idx``. So overriding the two
setters on the module's ``interpreter_builder`` instance (instance attributes,
removed on exit) with a bijection of the linear program index changes which
program runs at each step, i.e. the execution order, without touching anything
else. The programs still run one after another; this exposes any dependence of
the result on program order (a cross-program race on a GPU).
"""

import inspect
import os
import random
from contextlib import contextmanager

ORDERS = ("forward", "reversed", "shuffled")


def _check_structure(interp):
    src = inspect.getsource(interp.GridExecutor.__call__)
    if "interpreter_builder.set_grid_idx" not in src or "interpreter_builder.set_grid_dim" not in src:
        raise RuntimeError("triton's interpreter no longer launches through "
                           "interpreter_builder.set_grid_dim/set_grid_idx; update interpreter_order.py")


@contextmanager
def program_order(order: str = "reversed", seed: int = 0):
    """Within the block, every interpreted launch runs its programs in ``order``.

    Yields a list that receives, per launch, the (x, y, z) program ids in the order
    they ran, so a test can check the order really changed.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("1", "true", "True"):
        raise RuntimeError("program_order needs TRITON_INTERPRET=1")
    from triton.runtime import interpreter as interp

    _check_structure(interp)
    builder = interp.interpreter_builder
    orig_dim, orig_idx = builder.set_grid_dim, builder.set_grid_idx
    rng = random.Random(seed)
    launches = []
    state = {}

    def set_grid_dim(nx, ny, nz):
        orig_dim(nx, ny, nz)
        perm = list(range(nx * ny * nz))
        if order == "reversed":
            perm.reverse()
        elif order == "shuffled":
            rng.shuffle(perm)
        state["dims"], state["perm"] = (nx, ny, nz), perm
        launches.append([])

    def set_grid_idx(x, y, z):
        nx, ny, nz = state["dims"]
        p = state["perm"][(x * ny + y) * nz + z]
        x2, rem = divmod(p, ny * nz)
        y2, z2 = divmod(rem, nz)
        launches[-1].append((x2, y2, z2))
        orig_idx(x2, y2, z2)

    builder.set_grid_dim, builder.set_grid_idx = set_grid_dim, set_grid_idx
    try:
        yield launches
    finally:
        del builder.set_grid_dim
        del builder.set_grid_idx


def specialization_of(jit_fn, args, kwargs):
    """What a compiled (non-interpreted) launch of ``jit_fn`` would key its kernel cache on.

    Under the interpreter there is no compile cache, so this rebuilds the
    ``JITFunction`` binder for the same Python function and ``do_not_specialize``
    lists and applies it to the launch's arguments: the result holds the argument
    types, alignment and value specialisations, every constexpr value, and the
    launch options. Two launches with equal results share one compiled kernel.
    """
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    jf = JITFunction(jit_fn.fn, do_not_specialize=jit_fn.kwargs.get("do_not_specialize"),
                     do_not_specialize_on_alignment=jit_fn.kwargs.get("do_not_specialize_on_alignment"))
    # BaseBackend's static int/tensor specialisation rules are what the GPU backends use
    binder = create_function_from_signature(jf.signature, jf.params, BaseBackend)
    _, spec, options = binder(*args, **kwargs)
    return tuple(spec), tuple(sorted(options.items()))


@contextmanager
def capture_specializations(kernel):
    """Within the block, record :func:`specialization_of` for every launch of ``kernel``."""
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(kernel, InterpretedFunction):
        raise RuntimeError("capture_specializations needs TRITON_INTERPRET=1 before triton kernels are imported")
    seen = []
    orig = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        if self is kernel:
            seen.append(specialization_of(self, args, kwargs))
        return orig(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    try:
        yield seen
    finally:
        InterpretedFunction.run = orig
