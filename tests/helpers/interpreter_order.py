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
