"""The one way of hooking: Hook records through SGLang's HookRegistry, checked by identity."""

import subprocess
import sys

import pytest

from sglang_eagle_paged.hooks import Hook, resolvable

SCRIPT = r"""
import sys, types
mod = types.ModuleType("fake_target"); sys.modules["fake_target"] = mod
class Thing:
    def f(self, x): return x + 1
def g(x): return x * 2
mod.Thing, mod.g = Thing, g
from sglang_eagle_paged.hooks import Hook, HookError, install
hooks = [Hook("fake_target.Thing.f", lambda original, self, x: original(self, x) * 10, "around"),
         Hook("fake_target.g", lambda x: -x, "replace"),
         Hook("fake_target.absent", lambda: None, "replace", required=False)]
hooked = install(hooks, "test")
print(sorted(hooked), Thing().f(1), mod.g(3))
try:
    install([Hook("fake_target.nothing_here", lambda: None, "replace")], "test")
except HookError as exc:
    print("ERROR", exc)
"""


def test_install_hooks_through_sglangs_registry_and_reports_a_missing_required_target():
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.strip().splitlines()
    assert lines[0] == "['fake_target.Thing.f', 'fake_target.g'] 20 -3"  # around: (1+1)*10; replace: -3, not 6
    assert lines[1].startswith("ERROR cannot find fake_target.nothing_here in test")


def test_a_kind_that_does_not_exist_is_refused():
    with pytest.raises(ValueError):
        Hook("x.y", print, "instead")


def test_resolvable():
    assert resolvable("os.path.join") is None
    assert "AttributeError" in resolvable("os.path.no_such_thing")
