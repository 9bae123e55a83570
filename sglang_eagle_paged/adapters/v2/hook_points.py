"""Where the v2 adapter hooks SGLang, per release line, and how a newer release is checked.

SGLang 0.5.13 .. 0.5.23 draft through one function, ``duplicate_prefix_tail_to_draft_branches``
(the same code in every release, docstrings aside), in three module homes. Its caller, the
paged branch of the draft preparation, looks it up as a global of the same module, so hooking
the module attribute reaches it.

:func:`check_hook_points` decides whether a release newer than the last tested one still has
the hook points this adapter knows: the function resolvable in the newest home, with the same
parameters and the same code fingerprint, and its caller still looking it up by that name.
"""

import ast
import hashlib
import importlib.metadata
import inspect
import textwrap
from dataclasses import dataclass

from packaging.version import Version

from ...hooks import resolvable, resolve
# DRAFT_WORKERS, WARM_UP_METHOD: the draft workers' warm-up targets, read here by the tests and tools
from .sglang_api import DRAFT_WORKERS, DUPLICATE, DUPLICATE_HOMES, DUPLICATE_PARAMETERS, WARM_UP_METHOD  # noqa: F401

FUNCTION = DUPLICATE
PARAMETERS = DUPLICATE_PARAMETERS


@dataclass(frozen=True)
class Home:
    module: str
    caller: str        # dotted path of the paged-branch caller (module.function or module.Class.method)
    first: str         # first and last release of this home (inclusive)
    last: str

    @property
    def target(self) -> str:
        return f"{self.module}.{FUNCTION}"

    def holds(self, version: str) -> bool:
        return Version(self.first) <= Version(version) <= Version(self.last)


HOMES = tuple(Home(*home) for home in DUPLICATE_HOMES)
NEWEST = HOMES[-1]

# fingerprint() of the function in every home: measured on the published wheels of
# 0.5.13.post1, 0.5.15.post1, 0.5.17 and 0.5.23 (tests/adapters/v2/test_hook_points.py).
KNOWN_FINGERPRINTS = frozenset({"696f0ff1978c13e2"})

class _StripDocstrings(ast.NodeTransformer):
    def _strip(self, node):
        self.generic_visit(node)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Module = _strip


def fingerprint_source(source: str, name: str = FUNCTION) -> str:
    """fingerprint() of the top-level function ``name`` defined in module source text."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return _hash(node)
    raise LookupError(f"no top-level function {name} in the source")


def fingerprint(func) -> str:
    """A hash of ``func``'s code as parsed (AST without docstrings, comments or layout), 16 hex digits."""
    func = inspect.unwrap(func)
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    return _hash(tree.body[0])


def _canonical(value):
    """The AST as nested tuples that read the same on every Python: ``ast.dump`` does not (3.12
    added ``type_params`` to function nodes, 3.13 leaves empty fields out), so a field that is
    None or an empty list is left out here; fields a newer Python adds arrive empty on old code."""
    if isinstance(value, ast.AST):
        fields = tuple((name, _canonical(getattr(value, name, None))) for name in value._fields
                       if getattr(value, name, None) not in (None, []))
        return (type(value).__name__, fields)
    if isinstance(value, list):
        return tuple(_canonical(v) for v in value)
    return repr(value)


def _hash(node) -> str:
    node = _StripDocstrings().visit(node)
    return hashlib.sha256(repr(_canonical(node)).encode()).hexdigest()[:16]


def home_for(version: str | None) -> Home:
    """The home of ``version`` (the newest home for an unknown or newer release)."""
    if version is not None:
        for home in HOMES:
            if home.holds(version):
                return home
    return NEWEST


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def _caller_code(caller):
    return inspect.unwrap(caller).__code__


def check_home(home: Home) -> str | None:
    """None where ``home``'s hook points resolve in the SGLang importable here and are unchanged;
    else the first difference, in one line."""
    why = resolvable(home.target)  # an SGLang module that fails to import is named, not a missing attribute
    if why is not None:
        return f"{home.target} does not resolve ({why})"
    func = resolve(home.target)
    try:
        params = tuple(inspect.signature(inspect.unwrap(func)).parameters)
    except (TypeError, ValueError) as exc:
        return f"{home.target} has no readable signature ({exc})"
    if params != PARAMETERS:
        return f"{home.target} takes ({', '.join(params)}), not ({', '.join(PARAMETERS)})"
    try:
        fp = fingerprint(func)
    except (OSError, TypeError, SyntaxError) as exc:
        return f"{home.target}: no source to fingerprint ({exc})"
    if fp not in KNOWN_FINGERPRINTS:
        return f"{home.target} has new code (fingerprint {fp}, known {', '.join(sorted(KNOWN_FINGERPRINTS))})"
    why = resolvable(home.caller)
    if why is not None:
        return f"its caller {home.caller} does not resolve ({why})"
    caller = resolve(home.caller)
    try:
        names = _caller_code(caller).co_names
    except AttributeError:
        return f"its caller {home.caller} is not a Python function"
    if FUNCTION not in names:
        return f"its caller {home.caller} no longer looks up {FUNCTION} as a module global"
    return None


def check_hook_points(version: str | None = None) -> str | None:
    """None where every hook point this adapter needs for ``version`` (default: the installed
    SGLang, which must be the one importable here) resolves and is fingerprint-identical;
    else a one-line reason naming what changed."""
    return check_home(home_for(version if version is not None else installed_version()))
