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


def test_resolvable_names_the_import_error_not_a_missing_attribute(tmp_path, monkeypatch):
    """A module whose own import fails (a dependency missing, as SGLang's torchvision once was):
    the reason given is that import error, with the missing module, not 'has no attribute'."""
    pkg = tmp_path / "h35pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "broken.py").write_text("import h35_missing_dependency\ndef f(): pass\n")
    (pkg / "sub" / "fine.py").write_text("def f(): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    why = resolvable("h35pkg.sub.broken.f")
    assert "No module named 'h35_missing_dependency'" in why and "has no attribute" not in why
    assert resolvable("h35pkg.sub.fine.f") is None
    assert "has no attribute 'gone'" in resolvable("h35pkg.sub.fine.gone")
    assert "has no attribute" in resolvable("h35pkg.sub.absent.f")  # a module that is not there
