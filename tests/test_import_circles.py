"""No import circle anywhere under sglang_eagle_paged (issue 61, point 3): each module's imports, at
its top and inside its functions alike, point one way. A function-level import that closes a circle
works at run time but hides which module depends on which; this test reads every import statement
(no module is imported here) and fails on a circle, naming it.

A module importing a package's submodule depends on that submodule and on the package's
``__init__`` (Python runs it first); a module's own enclosing packages are not counted (Python has
them half-imported already, and every submodule would otherwise close a circle with its
``__init__``)."""

import ast
from pathlib import Path

import sglang_eagle_paged

ROOT = Path(sglang_eagle_paged.__file__).resolve().parent
PKG = "sglang_eagle_paged"


def _modules() -> dict:
    """dotted name -> path of every module under the package."""
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict) -> set:
    """The package's modules ``name`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    out = set()

    def add(target: str):
        parts = target.split(".")
        for end in range(2, len(parts) + 1):  # every package on the way, and the module itself
            candidate = ".".join(parts[:end])
            if candidate in modules and not (name == candidate or name.startswith(candidate + ".")):
                out.add(candidate)

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PKG):
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith(PKG):
                continue
            add(source)
            for alias in node.names:  # ``from . import fault``: the submodule itself
                add(f"{source}.{alias.name}")
    return out


def circles(graph: dict) -> list:
    """Every strongly connected set of two or more modules (Tarjan), each sorted."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_circle_finder_finds_a_circle():
    """The control: a circle through a function-level import, as adapters/v2 had one."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_under_the_package():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert circles(graph) == []
