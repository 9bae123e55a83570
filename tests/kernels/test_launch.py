"""The launch path that skips Triton's per-call binding (kernels/launch.py), on a stand-in kernel.

The interpreter has no compiled variants, so a stand-in for ``JITFunction`` records what goes
through Triton and what goes straight to a variant's launcher. On the GPU, ``doctor`` checks
that the launcher writes what Triton's launch writes.
"""

import pytest
import torch
from triton import knobs

from sglang_eagle_paged.kernels import launch as launch_mod
from sglang_eagle_paged.kernels.launch import launch


class Param:
    def __init__(self, num, name, constexpr=False, dns=False, dns_align=False, default=None):
        self.num, self.name, self.is_constexpr = num, name, constexpr
        self.do_not_specialize, self.do_not_specialize_on_alignment = dns, dns_align
        self.has_default, self.default = default is not None, default


class Variant:
    function, packed_metadata = "cu_function", "packed"

    def __init__(self, key, log):
        self.key, self.log = key, log

    @property
    def run(self):
        return lambda *a: self.log.append(("launcher", self.key, a))


class StandIn:
    """``kernel[grid](*args, **kwargs)`` returns the variant Triton would pick: one per dtype
    signature, constexprs and options, as for a kernel that specialises on no value."""
    device_caches = {}

    def __init__(self, align_exempt=True):
        self.params = [Param(0, "x", dns_align=align_exempt), Param(1, "n", dns=True),
                       Param(2, "BLOCK", constexpr=True), Param(3, "FLAG", constexpr=True, default=7)]
        self.arg_names = [p.name for p in self.params]
        self.log, self.variants, self.pre_run_hooks = [], {}, []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            key = (args[0].dtype, args[1] >= 2 ** 31, tuple(sorted(kwargs.items())))
            self.log.append(("triton", key, args, kwargs))
            return self.variants.setdefault(key, Variant(key, self.log))
        return run


@pytest.fixture(autouse=True)
def no_gpu_needed(monkeypatch):
    monkeypatch.setattr(launch_mod, "_ENABLED", True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 1234, raising=False)
    monkeypatch.setattr(launch_mod, "_launches", {})


def test_a_key_goes_through_triton_once_then_straight_to_its_launcher():
    k, x = StandIn(), torch.zeros(4, dtype=torch.int64)
    launch(k, (3,), (x, 5), dict(BLOCK=64), num_warps=4)
    launch(k, (2, 2), (x, 9), dict(BLOCK=64), num_warps=4)
    assert [e[0] for e in k.log] == ["triton", "launcher"]
    # grid padded to three axes, the current stream, no launch metadata or hooks, then every
    # parameter in signature order: constexprs included, defaults for those not passed
    _, _, a = k.log[1]
    assert a[:9] == (2, 2, 1, 1234, "cu_function", "packed", None, None, None)
    assert a[9] is x and a[10:] == (9, 64, 7)


def test_what_triton_specialises_on_picks_another_variant():
    k = StandIn()
    i64, i32 = torch.zeros(4, dtype=torch.int64), torch.zeros(4, dtype=torch.int32)
    calls = [((i64, 5), dict(BLOCK=64), 4), ((i32, 5), dict(BLOCK=64), 4),  # dtype
             ((i64, 2 ** 31), dict(BLOCK=64), 4),  # an int wider than 32 bits
             ((i64, 5), dict(BLOCK=128), 4),  # a constexpr
             ((i64, 5), dict(BLOCK=64), 8)]  # a launch option
    for args, constexprs, warps in calls * 2:
        launch(k, (1,), args, constexprs, num_warps=warps)
    assert [e[0] for e in k.log] == ["triton"] * 5 + ["launcher"] * 5
    # each launcher call went to the variant Triton picked for the same arguments
    assert [e[1] for e in k.log[5:]] == [e[1] for e in k.log[:5]] and len(k.variants) == 5


def test_an_alignment_specialised_pointer_always_goes_through_triton():
    k, x = StandIn(align_exempt=False), torch.zeros(4, dtype=torch.int64)
    for _ in range(3):
        launch(k, (1,), (x, 5), dict(BLOCK=64))
    assert [e[0] for e in k.log] == ["triton"] * 3


def test_other_argument_types_and_launch_hooks_go_through_triton(monkeypatch):
    k, x = StandIn(), torch.zeros(4, dtype=torch.int64)
    launch(k, (1,), (x, 5), dict(BLOCK=64))
    launch(k, (1,), (x, True), dict(BLOCK=64))  # a bool is not an int to Triton
    chain = type(knobs.runtime.launch_exit_hook)()
    chain.add(lambda *a: None)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", chain)
    launch(k, (1,), (x, 5), dict(BLOCK=64))  # a profiler's hook must see the launch
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", type(knobs.runtime.launch_exit_hook)())
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda *a: None)  # a bare callable too
    launch(k, (1,), (x, 5), dict(BLOCK=64))
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", type(knobs.runtime.launch_exit_hook)())
    launch(k, (1,), (x, 5), dict(BLOCK=64))  # empty chains again: the launcher
    assert [e[0] for e in k.log] == ["triton"] * 4 + ["launcher"]


def test_hooks_that_tritons_run_calls_or_keys_on_go_through_triton(monkeypatch):
    k, x = StandIn(), torch.zeros(4, dtype=torch.int64)
    launch(k, (1,), (x, 5), dict(BLOCK=64))
    k.pre_run_hooks.append(lambda *a, **kw: None)  # Triton calls these before every launch
    launch(k, (1,), (x, 5), dict(BLOCK=64))
    k.pre_run_hooks.clear()
    # Triton 3.8 adds the inspection hook's hash to the variant's key; 3.6 has the knob too
    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", lambda: ("k", "h"), raising=False)
    launch(k, (1,), (x, 5), dict(BLOCK=64))
    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", None)
    launch(k, (1,), (x, 5), dict(BLOCK=64))
    assert [e[0] for e in k.log] == ["triton"] * 3 + ["launcher"]


def test_the_installed_triton_calls_the_launcher_as_launch_does():
    """``launch`` calls a variant's launcher the way the installed Triton's ``JITFunction.run``
    does (read from its source: the stand-ins above cannot see a changed convention), and the
    installed Triton is one of the checked releases, so the direct path is on in this
    environment (3.8 with SGLang 0.5.23, 3.6 in the v1 environment and on the GPU machine)."""
    import inspect

    import triton
    from triton.runtime.jit import JITFunction

    assert ".".join(triton.__version__.split(".")[:2]) in launch_mod.CHECKED_TRITON, triton.__version__
    src = inspect.getsource(JITFunction.run)
    start = src.index("kernel.run(") + len("kernel.run(")
    depth, end = 1, start
    while depth:  # to the call's closing parenthesis
        depth += {"(": 1, ")": -1}.get(src[end], 0)
        end += 1
    args = [a.strip() for a in src[start:end - 1].split(",")]
    assert args == ["grid_0", "grid_1", "grid_2", "stream", "kernel.function", "kernel.packed_metadata",
                    "launch_metadata", "knobs.runtime.launch_enter_hook", "knobs.runtime.launch_exit_hook",
                    "*bound_args.values()"], args
    # every parameter, constexprs and defaults included, in signature order: what launch's tail adds
    assert "binder(*args, **kwargs)" in src


def test_the_interpreter_launches_as_before():
    class Interpreted:  # no device_caches: the interpreter's stand-in for a kernel
        def __init__(self):
            self.log = []

        def __getitem__(self, grid):
            return lambda *a, **kw: self.log.append((grid, a, kw))

    k, x = Interpreted(), torch.zeros(2)
    launch(k, (2,), (x, 3), dict(BLOCK=8), num_warps=1)
    assert k.log == [((2,), (x, 3), dict(BLOCK=8, num_warps=1))]


@pytest.mark.parametrize("version,env,enabled", [("3.6.0", None, True), ("3.6.1", "1", True), ("3.6.0", "0", False),
                                                 ("3.6.0", "off", False), ("3.7.0", None, False), ("3.5.1", None, False),
                                                 ("3.8.0", None, True), ("3.8.0", "0", False), ("3.9.0", None, False)])
def test_only_on_the_checked_triton_release_and_unless_turned_off(monkeypatch, version, env, enabled):
    import triton

    monkeypatch.setattr(triton, "__version__", version)
    if env is None:
        monkeypatch.delenv("SGLANG_EAGLE_PAGED_DIRECT_LAUNCH", raising=False)
    else:
        monkeypatch.setenv("SGLANG_EAGLE_PAGED_DIRECT_LAUNCH", env)
    assert launch_mod._enabled() is enabled
    monkeypatch.setattr(launch_mod, "_ENABLED", enabled)
    k, x = StandIn(), torch.zeros(4, dtype=torch.int64)
    for _ in range(2):
        launch(k, (1,), (x, 5), dict(BLOCK=64))
    assert [e[0] for e in k.log] == ["triton", "launcher" if enabled else "triton"]


def test_every_serving_kernel_can_take_the_direct_path():
    """Each kernel the plugin launches per round opts out of every value and alignment
    specialisation, or launch() would send it through Triton every time."""
    import inspect

    from sglang_eagle_paged.kernels.assign import _assign_tree_draft_slots_kernel
    from sglang_eagle_paged.kernels.draft_decode_metadata import (
        _draft_decode_metadata_all_steps_kernel, _draft_decode_metadata_kernel)
    from sglang_eagle_paged.kernels.duplicate import _duplicate_kv_kernel
    from sglang_eagle_paged.kernels.expand_metadata import _expand_draft_page_table_kernel
    from sglang_eagle_paged.kernels.move_rows import _move_rows_kernel
    from sglang_eagle_paged.kernels.prefix_tail import _duplicate_prefix_tail_kernel
    from sglang_eagle_paged.kernels.tree_extension import _tree_extension_kernel
    from sglang_eagle_paged.kernels.verify_bookkeeping import _src_to_free_kernel

    for k in (_assign_tree_draft_slots_kernel, _duplicate_kv_kernel, _move_rows_kernel, _src_to_free_kernel,
              _draft_decode_metadata_all_steps_kernel, _draft_decode_metadata_kernel,
              _expand_draft_page_table_kernel, _tree_extension_kernel, _duplicate_prefix_tail_kernel):
        opts = k.kwargs  # the interpreter keeps triton.jit's options here
        exempt = set(opts["do_not_specialize"] or []) | set(opts["do_not_specialize_on_alignment"] or [])
        runtime = {p.name for p in inspect.signature(k.fn).parameters.values() if "constexpr" not in str(p.annotation)}
        assert runtime <= exempt, (k.fn.__name__, runtime - exempt)
