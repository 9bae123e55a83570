"""The layout's rules: serving imports no user tool, benchmark or test fixture; kernels import no
SGLang; no import circle anywhere in the package, not even through imports inside functions."""

import ast
import pathlib
import subprocess
import sys

import sglang_eagle_paged

PKG = pathlib.Path(sglang_eagle_paged.__file__).resolve().parent
SERVING = ["plugin", "settings", "releases", "hooks"] + [
    ".".join(p.relative_to(PKG).with_suffix("").parts) for sub in ("kernels", "adapters")
    for p in (PKG / sub).rglob("*.py") if p.name != "__init__.py"]


def _imports(path: pathlib.Path, module: str, anywhere: bool = False) -> set:
    """Package modules imported by ``path`` at module level (``anywhere``: inside functions too)."""
    tree = ast.parse(path.read_text())
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    out = set()
    for node in ast.walk(tree) if anywhere else tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out |= {n for n in names if n.startswith("sglang_eagle_paged")}
    return out


def test_serving_modules_import_no_tool_benchmark_or_fixture():
    code = ("import importlib, sys\n"
            f"for m in {SERVING!r}:\n    importlib.import_module('sglang_eagle_paged.' + m)\n"
            "bad = sorted(m for m in sys.modules if m.startswith(('sglang_eagle_paged.tools', "
            "'sglang_eagle_paged.bench', 'helpers')))\nprint(bad)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == "[]"


def test_kernels_import_no_sglang():
    for path in (PKG / "kernels").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.split(".")[0] == "sglang" for n in names), path


def _cycles(graph: dict) -> list:
    state, found = {}, []

    def visit(m, stack):
        state[m] = "open"
        for t in sorted(graph[m]):
            if state.get(t) == "open":
                found.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack + [t])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_the_circle_finder_finds_circles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _modules() -> dict:
    modules = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def test_no_module_level_import_circles():
    modules = _modules()
    graph = {m: {t for t in _imports(p, m) if t in modules and t != m} for m, p in modules.items()}
    cycle = _cycles(graph)
    assert not cycle, cycle


def test_no_import_circle_in_the_package_not_even_through_imports_inside_functions():
    """An import put inside a function to dodge a circle is still a circle: both modules need each
    other (issue 61: adapters/v2 had one of six modules). A module's own enclosing packages are not
    counted: Python has them half-imported already, so a package ``__init__`` importing its parts
    lazily and a part importing a sibling through ``from . import`` close no circle."""
    modules = _modules()
    graph = {m: {t for t in _imports(p, m, anywhere=True)
                 if t in modules and t != m and not m.startswith(t + ".")} for m, p in modules.items()}
    cycle = _cycles(graph)
    assert not cycle, cycle


def test_the_benchmarks_have_no_circle_not_even_through_imports_inside_functions():
    # An import put inside a function to dodge a circle is still a circle: both modules need each
    # other. (The adapters' packages import their parts lazily by design: SGLang's modules load late.)
    modules = {m: p for m, p in _modules().items() if m.startswith("sglang_eagle_paged.bench")}
    graph = {m: {t for t in _imports(p, m, anywhere=True) if t in modules and t != m} for m, p in modules.items()}
    cycle = _cycles(graph)
    assert not cycle, cycle


def test_no_serving_module_imports_the_benchmarks_anywhere():
    # Not at module level, not inside a function: the serving code never reaches the benchmarks.
    modules = _modules()
    serving = {m: p for m, p in modules.items() if m.removeprefix("sglang_eagle_paged.") in SERVING
               or m == "sglang_eagle_paged"}
    assert len(serving) > 20
    bad = {m: sorted(t for t in _imports(p, m, anywhere=True) if t.startswith("sglang_eagle_paged.bench"))
           for m, p in serving.items()}
    assert not {m: t for m, t in bad.items() if t}, bad


def test_the_package_benchmark_is_what_a_user_runs_and_no_more():
    """The user's benchmark stays small (issue 53: about 3k lines, at most ~3.5k); the lab's tools
    (profilers, samplers, sweeps, soak and stress drivers, micro-benchmarks) live in bench/ beside
    bench/results/, outside the wheel."""
    files = sorted((PKG / "bench").rglob("*.py"))
    lines = sum(len(p.read_text().splitlines()) for p in files)
    assert lines <= 3500, lines
    assert len(files) <= 13, [p.name for p in files]


def test_every_module_of_the_package_imports():
    """A module moved without its importers fixed fails here rather than at its first use."""
    modules = sorted(".".join(p.relative_to(PKG.parent).with_suffix("").parts).removesuffix(".__init__")
                     for p in PKG.rglob("*.py"))
    code = ("import importlib, sys\nbad = []\n"
            f"for m in {modules!r}:\n"
            "    try:\n        importlib.import_module(m)\n"
            "    except Exception as exc:\n        bad.append(f'{m}: {type(exc).__name__}: {exc}')\n"
            "print(bad)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "TRITON_INTERPRET": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == "[]", p.stdout[-3000:]


def test_every_folder_of_code_is_a_package():
    """setuptools' find_packages ships only folders with __init__.py: one without would be missing
    from a wheel while an editable install still finds it."""
    missing = sorted(str(d.relative_to(PKG)) for d in PKG.rglob("*") if d.is_dir() and any(d.glob("*.py"))
                     and not (d / "__init__.py").is_file())
    assert not missing, missing
