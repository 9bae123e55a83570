"""Each v2 module home, on its real published wheel: the function, its fingerprint, its caller's
global lookup; hooked through SGLang's HookRegistry where the release imports here.

The wheels come from scripts/fetch_sglang_wheels.sh (.sglang-wheels/<version>/). 0.5.13.post1
and 0.5.17 do not import beside 0.5.23's transformers ('qwen3_asr' registered twice), so
their homes are checked on the parsed source; 0.5.15.post1 and 0.5.23 are also imported,
each in its own interpreter with its folder first on sys.path.
"""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle_paged.adapters.v2 import hook_points as hp

REPO = Path(__file__).resolve().parents[3]
WHEELS = Path(os.environ.get("SGLANG_WHEELS", REPO / ".sglang-wheels"))
RELEASES = {"0.5.13.post1": hp.HOMES[0], "0.5.15.post1": hp.HOMES[1], "0.5.17": hp.HOMES[2], "0.5.23": hp.HOMES[2]}
IMPORTABLE = ("0.5.15.post1", "0.5.23")


def _source(version, module):
    path = WHEELS / version / (module.replace(".", "/") + ".py")
    if not path.is_file():
        pytest.skip(f"{path} missing: run scripts/fetch_sglang_wheels.sh")
    return path.read_text()


def _function(tree, dotted):
    """The FunctionDef at ``Class.method`` or ``function`` in a module tree."""
    nodes = tree.body
    for part in dotted.split("."):
        node = next((n for n in nodes if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            return None
        nodes = node.body
    return node


@pytest.mark.parametrize("version", list(RELEASES))
def test_home_on_parsed_wheel(version):
    home = RELEASES[version]
    assert home.holds(version) and hp.home_for(version) is home
    src = _source(version, home.module)
    assert hp.fingerprint_source(src) in hp.KNOWN_FINGERPRINTS
    tree = ast.parse(src)
    func = _function(tree, hp.FUNCTION)
    assert tuple(a.arg for a in func.args.args) == hp.PARAMETERS
    caller = _function(tree, home.caller[len(home.module) + 1:])
    assert caller is not None, home.caller
    calls = [n for n in ast.walk(caller) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == hp.FUNCTION]
    assert len(calls) == 1  # looked up as a module global: hooking the module attribute reaches it
    # nobody else imports it by name (a copy of the reference would escape the hook)
    for py in (WHEELS / version / "sglang").rglob("*.py"):
        if py.name != Path(home.module.replace(".", "/")).name + ".py":
            assert hp.FUNCTION not in py.read_text(errors="ignore"), py


def test_fingerprint_sees_code_changes_not_docstrings():
    src = _source("0.5.23", hp.NEWEST.module)
    known = hp.fingerprint_source(src)
    func_src = ast.get_source_segment(src, _function(ast.parse(src), hp.FUNCTION))
    redoc = func_src.replace('"""Copy the prefix partial-tail page', '"""Another docstring. Copy the prefix partial-tail page')
    assert redoc != func_src and hp.fingerprint_source(redoc) == known
    changed = func_src.replace("< last_page.view", "<= last_page.view")
    assert changed != func_src and hp.fingerprint_source(changed) != known


def test_fingerprint_reads_the_same_on_a_python_that_adds_ast_fields():
    """The GPU machine's Python 3.12 gives function nodes a ``type_params`` field (empty on this
    code) that 3.11 has not; ``ast.dump`` then hashed differently and the plugin refused 0.5.17
    there. Here the 3.12 node is made by adding that field, empty, to every function node."""
    src = _source("0.5.17", "sglang.srt.speculative.eagle_worker_common")
    func = _function(ast.parse(src), hp.FUNCTION)
    known = hp.fingerprint_source(src)
    assert known in hp.KNOWN_FINGERPRINTS
    for node in ast.walk(func):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "type_params" not in node._fields:
            node._fields = node._fields + ("type_params",)
            node.type_params = []
    assert "type_params=[]" in ast.dump(func)  # what made ast.dump's hash differ
    assert hp._hash(func) == known


_PROBE = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
import sglang, pkgutil
from sglang_eagle_paged.adapters.v2 import hook_points as hp
import sglang_eagle_paged.adapters.v2 as v2
from sglang_eagle_paged.hooks import install
from sglang_eagle_paged.settings import Mode
home = hp.home_for(sys.argv[2])
out = {"file": sglang.__file__, "check": hp.check_home(home)}
before = pkgutil.resolve_name(home.target)
hooked = install([h for h in v2.hooks(Mode.ON, version=sys.argv[2]) if h.target == home.target], sys.argv[2])
after = pkgutil.resolve_name(home.target)
out["hooked"] = hooked
import inspect
out["replaced"] = (after.__code__.co_filename.endswith("hook_registry.py")
                   and inspect.unwrap(after).__code__.co_filename.endswith(home.module.split(".")[-1] + ".py"))
out["check_after_hooking"] = hp.check_home(home)
out["warm_up_targets"] = v2.warm_up_targets()
# the copy decision on objects of this release's own draft decode backend classes (0.5.15.post1's
# attention modules import its model configs, which do not register beside 0.5.23's transformers:
# its classes are checked on the parsed wheel, test_copy_decision.py)
from sglang_eagle_paged.adapters.v2 import backends
out["decisions"] = {}
for path, (name, _reads, _why) in backends.READERS.items() if sys.argv[2] == "0.5.23" else ():
    cls = pkgutil.resolve_name(path)
    out["decisions"][name] = backends.copy_needed(cls.__new__(cls))[0]
print("RESULT" + json.dumps(out))
"""


def _run_probe(version):
    folder = WHEELS / version if version != "0.5.23" else Path("/nonexistent")
    if version != "0.5.23" and not folder.is_dir():
        pytest.skip(f"{folder} missing: run scripts/fetch_sglang_wheels.sh")
    env = dict(os.environ, TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, "-c", _PROBE, str(folder), version], capture_output=True, text=True,
                       env=env, timeout=300, cwd=REPO)
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT")]
    assert lines, p.stdout[-2000:] + p.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT"):])


@pytest.mark.parametrize("version", IMPORTABLE)
def test_home_resolves_and_hooks_on_real_release(version):
    import importlib.metadata

    if version == "0.5.23":
        try:
            if importlib.metadata.version("sglang") != "0.5.23":
                pytest.skip("needs SGLang 0.5.23 installed")
        except importlib.metadata.PackageNotFoundError:
            pytest.skip("SGLang not installed")
    r = _run_probe(version)
    if version != "0.5.23":
        assert r["file"].startswith(str(WHEELS / version)), r["file"]
    assert r["check"] is None, r["check"]
    assert r["hooked"] == [hp.home_for(version).target]
    assert r["replaced"]
    assert r["check_after_hooking"] is None  # the check looks through SGLang's wrapper
    if version == "0.5.23":
        assert r["decisions"] == {"flashinfer": False, "triton": False, "fa3": True}, r["decisions"]
    assert r["warm_up_targets"] and all(t.endswith(".init_attention_backend") for t in r["warm_up_targets"]), r["warm_up_targets"]


def test_check_names_what_changed(monkeypatch):
    pytest.importorskip("sglang.srt.speculative.eagle_worker_common")
    assert hp.check_hook_points("0.5.23") is None
    monkeypatch.setattr(hp, "KNOWN_FINGERPRINTS", frozenset({"0" * 16}))
    reason = hp.check_hook_points("0.5.99")
    assert reason.startswith(hp.NEWEST.target) and "new code" in reason
    monkeypatch.setattr(hp, "NEWEST", hp.Home("sglang.srt.speculative.no_such_module", "x.y", "0.5.24", "9"))
    assert "does not resolve" in hp.check_hook_points("0.5.99")


def test_check_refuses_a_caller_that_does_not_look_the_function_up_as_a_module_global():
    """The check's last step: hooking the module attribute reaches the caller only while the caller
    looks the function up by its global name. A real SGLang function of the same module that does
    not (the draft extend's preparation) must be refused; the real caller must pass."""
    pytest.importorskip("sglang.srt.speculative.eagle_worker_common")
    home = hp.home_for("0.5.23")
    assert hp.check_home(home) is None
    other = hp.Home(home.module, home.module + ".prepare_for_draft_extend", home.first, home.last)
    reason = hp.check_home(other)
    assert reason is not None and "no longer looks up" in reason and hp.FUNCTION in reason
