#!/usr/bin/env python3
"""Survey the published SGLang wheels for what sglang-eagle-paged depends on.

For every release from 0.5.2 to 0.5.12.post1 (``pip index versions sglang``,
or ``--versions``) this downloads the wheel once into a cache directory
(``pip download --no-deps``), reads the relevant sources straight out of the zip
and, with ``ast``, records:

* how ``EAGLEWorker._draft_preprocess_decode`` fills the draft KV of the
  branches for topk > 1 and page_size > 1: index-only ("fake": the indices are
  copied by ``assign_draft_cache_locs``, the KV is not) or SGLang's own
  duplication (``source_cache_loc``/``target_cache_loc`` + ``move_kv_cache``);
* whether ``sglang/srt/plugins/__init__.py`` defines ``load_plugins``;
* whether the v1 ``EAGLEWorker._draft_preprocess_decode`` exists;
* which attention backends ``server_args`` accepts for EAGLE topk > 1 with
  page_size > 1;
* where and with which parameters ``alloc_paged_token_slots_extend`` and
  ``assign_draft_cache_locs`` are defined, plus the other internals a version
  adapter needs (``get_last_loc_large_page_size_large_top_k``,
  ``MHATokenToKVPool.move_kv_cache``/``data_ptrs``/``data_strides``, ...).

It writes ``docs/release_survey.md``. With ``--write-patches`` it also
(re)generates ``sglang_eagle_paged/tools/patches/sglang-<version>.diff`` for the
releases that have the v1 EAGLEWorker but no plugin framework, deduplicating
byte-identical diffs, and checks them against ``patching.PATCHES``.

    python scripts/survey_sglang_releases.py [--write-patches] [--cache DIR]
"""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglang_eagle_paged.tools import patching  # noqa: E402  (does not import sglang)

try:
    from packaging.version import Version
except ImportError:  # pragma: no cover
    from pip._vendor.packaging.version import Version  # type: ignore

FIRST, LAST = Version("0.5.2"), Version("0.5.12.post1")
DEFAULT_CACHE = Path(
    os.environ.get("SGLANG_EAGLE_PAGED_WHEEL_CACHE", Path.home() / ".cache" / "sglang-eagle-paged" / "wheels")
)

EAGLE = "sglang/srt/speculative/eagle_worker.py"
PLUGINS = "sglang/srt/plugins/__init__.py"
SCHEDULER = "sglang/srt/managers/scheduler.py"
SERVER_ARGS = "sglang/srt/server_args.py"
MEMORY_POOL = "sglang/srt/mem_cache/memory_pool.py"


# --------------------------------------------------------------------------
# Wheels.
# --------------------------------------------------------------------------


def list_versions() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"],
        capture_output=True, text=True, check=False,
    ).stdout
    m = re.search(r"Available versions:\s*(.+)", out)
    if not m:
        raise SystemExit("cannot list SGLang releases (pip index versions sglang failed); pass --versions")
    found = [v.strip() for v in m.group(1).split(",")]
    return sorted((v for v in found if FIRST <= Version(v) <= LAST), key=Version)


def cached_wheel(version: str, cache: Path) -> Path | None:
    hits = sorted(cache.glob(f"sglang-{version}-*.whl"))
    return hits[0] if hits else None


def fetch_wheel(version: str, cache: Path) -> Path:
    """The wheel of ``version`` from ``cache``, downloaded on first use."""
    hit = cached_wheel(version, cache)
    if hit:
        return hit
    cache.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
            "-d", str(cache), f"sglang=={version}"]
    # Newer releases ship CPython/manylinux wheels only; the sources are the same
    # for every tag, so any one will do if none matches this interpreter.
    for extra in ([], ["--python-version", "3.11", "--implementation", "cp", "--platform", "manylinux_2_34_x86_64"]):
        subprocess.run(base + extra, capture_output=True, text=True, check=False)
        hit = cached_wheel(version, cache)
        if hit:
            return hit
    raise RuntimeError(f"could not download the sglang=={version} wheel")


class Wheel:
    def __init__(self, path: Path):
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        self._trees: dict[str, ast.Module] = {}

    def text(self, name: str) -> str | None:
        return self.zip.read(name).decode("utf-8") if name in self.names else None

    def tree(self, name: str) -> ast.Module | None:
        if name not in self._trees:
            text = self.text(name)
            self._trees[name] = None if text is None else ast.parse(text)  # type: ignore[assignment]
        return self._trees[name]

    def find_defs(self, func: str) -> list[tuple[str, str | None, ast.FunctionDef]]:
        """(module, class or None, node) of every ``def func`` under sglang/srt."""
        found = []
        needle = f"def {func}("
        for name in sorted(self.names):
            if not (name.startswith("sglang/srt/") and name.endswith(".py")):
                continue
            if needle not in (self.text(name) or ""):
                continue
            tree = self.tree(name)
            for node in tree.body:  # type: ignore[union-attr]
                if isinstance(node, ast.FunctionDef) and node.name == func:
                    found.append((name, None, node))
                elif isinstance(node, ast.ClassDef):
                    for sub in node.body:
                        if isinstance(sub, ast.FunctionDef) and sub.name == func:
                            found.append((name, node.name, sub))
        return found


# --------------------------------------------------------------------------
# Analysis.
# --------------------------------------------------------------------------


def _class(tree: ast.Module | None, name: str) -> ast.ClassDef | None:
    for node in (tree.body if tree else []):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _method(cls: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
    for node in (cls.body if cls else []):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.args + fn.args.kwonlyargs if a.arg != "self"]


def _module(name: str) -> str:
    return name[:-3].replace("/", ".").removeprefix("sglang.srt.")


def _signature(defs, mod_name: str) -> str:
    if not defs:
        return "absent"
    module, cls, fn = defs[0]
    where = f"{_module(module)}.{cls + '.' if cls else ''}{mod_name}"
    return f"{where}({', '.join(_params(fn))})"


def draft_mode(fn: ast.FunctionDef | None) -> str:
    if fn is None:
        return "n/a"
    names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    calls_move = any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "move_kv_cache"
        for n in ast.walk(fn)
    )
    if calls_move and "source_cache_loc" in names:
        return "dup"
    return "fake"


def server_args_gate(tree: ast.Module | None) -> str:
    """Backends allowed for EAGLE topk>1 with page_size>1 ("any" if no check)."""
    if tree is None:
        return "?"
    results = []

    def visit(node: ast.AST, ngram: bool) -> None:
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "speculative_algorithm" in test and "NGRAM" in test:
                ngram = True
            raises = any(isinstance(s, ast.Raise) for s in node.body)
            if raises and "speculative_eagle_topk" in test and "page_size" in test and "attention_backend" in test:
                allowed: list[str] = []
                for cmp in ast.walk(node.test):
                    if (isinstance(cmp, ast.Compare) and "attention_backend" in ast.unparse(cmp.left)):
                        op, right = cmp.ops[0], cmp.comparators[0]
                        if isinstance(op, ast.NotEq) and isinstance(right, ast.Constant):
                            allowed.append(right.value)
                        elif isinstance(op, ast.NotIn) and isinstance(right, (ast.List, ast.Tuple, ast.Set)):
                            allowed += [e.value for e in right.elts if isinstance(e, ast.Constant)]
                results.append((ngram, allowed))
        for child in ast.iter_child_nodes(node):
            visit(child, ngram)

    visit(tree, False)
    eagle = [allowed for ngram, allowed in results if not ngram]
    if not eagle:
        return "any"
    return "+".join(sorted(set().union(*map(set, eagle))))


def last_loc_helper(wheel: Wheel) -> str:
    defs = wheel.find_defs("get_last_loc_large_page_size_large_top_k")
    if not defs:
        return "absent"
    module, _, fn = defs[0]
    arity = {len(r.value.elts) for r in ast.walk(fn)
             if isinstance(r, ast.Return) and isinstance(r.value, ast.Tuple)}
    return f"{_module(module)}, returns {'/'.join(map(str, sorted(arity)))} values"


def mha_pool(wheel: Wheel) -> dict[str, str]:
    cls = _class(wheel.tree(MEMORY_POOL), "MHATokenToKVPool")
    attrs = {
        t.attr for n in ast.walk(cls) if isinstance(n, ast.Assign) for t in n.targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    } if cls else set()
    init = _method(cls, "__init__")
    move = _method(cls, "move_kv_cache")
    if move is None:
        impl = "absent"
    else:
        src = ast.unparse(move)
        impl = ("tiled Triton copy + native fallback (SGLANG_NATIVE_MOVE_KV_CACHE)" if "move_kv_cache_native" in src
                else "tiled Triton copy (needs enable_kv_cache_copy=True)" if "copy_all_layer_kv_cache_tiled" in src
                else "single Triton copy (copy_all_layer_kv_cache)")
    return {
        "move_kv_cache": impl,
        "data_ptrs/data_strides": "yes" if {"data_ptrs", "data_strides"} <= attrs else "no",
        "enable_kv_cache_copy": "yes" if init is not None and "enable_kv_cache_copy" in _params(init) else "no",
    }


def analyse(version: str, wheel_path: Path) -> dict:
    wheel = Wheel(wheel_path)
    worker = _class(wheel.tree(EAGLE), "EAGLEWorker")
    dpd = _method(worker, "_draft_preprocess_decode")
    plugins_tree = wheel.tree(PLUGINS)
    has_plugins = plugins_tree is not None and any(
        isinstance(n, ast.FunctionDef) and n.name == "load_plugins" for n in plugins_tree.body)
    info = {
        "version": version,
        "wheel": wheel_path.name,
        "v1_worker": dpd is not None,
        "draft": draft_mode(dpd),
        "plugins": has_plugins,
        "scheduler_loads_plugins": "load_plugins()" in (wheel.text(SCHEDULER) or ""),
        "gate": server_args_gate(wheel.tree(SERVER_ARGS)),
        "alloc_extend": _signature(wheel.find_defs("alloc_paged_token_slots_extend"), "alloc_paged_token_slots_extend"),
        "assign": _signature(wheel.find_defs("assign_draft_cache_locs"), "assign_draft_cache_locs"),
        "alloc_token_slots": _signature(wheel.find_defs("alloc_token_slots"), "alloc_token_slots"),
        "last_loc": last_loc_helper(wheel),
        "eagle_text": wheel.text(EAGLE),
    }
    info.update(mha_pool(wheel))
    spec_field = "?"
    if dpd is not None:
        attrs = {n.attr for n in ast.walk(dpd) if isinstance(n, ast.Attribute)}
        spec_field = "bonus_tokens" if "bonus_tokens" in attrs else "verified_id" if "verified_id" in attrs else "?"
    info["spec_field"] = spec_field
    return info


# --------------------------------------------------------------------------
# Patches.
# --------------------------------------------------------------------------


def make_patch(original: str) -> str:
    if not original.endswith("\n"):
        raise ValueError(f"{EAGLE} does not end with a newline")
    new = original + patching.HOOK_BLOCK
    body = "".join(difflib.unified_diff(
        original.splitlines(keepends=True), new.splitlines(keepends=True),
        f"a/{patching.HOOK_FILE}", f"b/{patching.HOOK_FILE}", n=3,
    ))
    # Self-check with our own applier.
    fp, = patching.parse_unified_diff(body)
    assert patching.apply_file_patch(original, fp) == new
    assert patching.apply_file_patch(new, fp, reverse=True) == original
    return body


def _patched_release(version: str) -> bool:
    from packaging.version import Version

    from sglang_eagle_paged.releases import V1_PATCHED

    return V1_PATCHED[0] <= Version(version) <= V1_PATCHED[1]


def write_patches(infos: list[dict]) -> dict[str, str]:
    """Write the deduplicated diffs; return release -> file name."""
    out_dir = patching.patch_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    groups: dict[str, list[str]] = {}
    for info in infos:
        # only the releases the v1 adapter serves through a patch (releases.V1_PATCHED)
        if info["v1_worker"] and not info["plugins"] and _patched_release(info["version"]):
            groups.setdefault(make_patch(info["eagle_text"]), []).append(info["version"])
    mapping = {}
    keep = set()
    for body, versions in groups.items():
        name = f"sglang-{versions[0]}.diff"
        header = (
            f"sglang-eagle-paged: make SGLang {', '.join(versions)} load the plugin\n"
            "(these releases have the v1 EAGLEWorker but no sglang.srt.plugins).\n"
            "Apply with `sglang-eagle-paged patch --apply`; paths are relative to site-packages.\n"
            "Generated by scripts/survey_sglang_releases.py --write-patches; do not edit.\n\n"
        )
        (out_dir / name).write_text(header + body, encoding="utf-8")
        keep.add(name)
        for v in versions:
            mapping[v] = name
    for stale in out_dir.glob("sglang-*.diff"):
        if stale.name not in keep:
            stale.unlink()
    return mapping


# --------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------

ADAPTER_KEYS = ("draft", "alloc_extend", "assign", "alloc_token_slots", "last_loc", "move_kv_cache",
                "data_ptrs/data_strides", "enable_kv_cache_copy", "spec_field", "gate")


def _lines_of_releases(infos: list[dict]) -> list[list[dict]]:
    """Consecutive releases with the same adapter-relevant internals."""
    groups: list[list[dict]] = []
    for info in infos:
        key = tuple(info[k] for k in ADAPTER_KEYS) + (info["plugins"],)
        if groups and groups[-1][0]["_key"] == key:
            groups[-1].append(info)
        else:
            info["_key"] = key
            groups.append([info])
        info["_key"] = key
    return groups


def _span(group: list[dict]) -> str:
    a, b = group[0]["version"], group[-1]["version"]
    return a if a == b else f"{a} .. {b}"


def render(infos: list[dict], mapping: dict[str, str]) -> str:
    sigs: dict[str, str] = {}
    ref = infos[-1]

    def label(kind: str, sig: str) -> str:
        key = f"{kind}:{sig}"
        if key not in sigs:
            sigs[key] = f"{kind}{sum(k.startswith(kind + ':') for k in sigs) + 1}"
        return sigs[key]

    rows = []
    for i in infos:
        draft = {"dup": "SGLang duplicates (move_kv_cache)", "fake": "index-only (fake)"}.get(i["draft"], i["draft"])
        if i["plugins"]:
            patch = "none needed (plugin framework)"
        else:
            patch = f"`{mapping[i['version']]}`" if i["version"] in mapping else "none (no v1 EAGLEWorker)"
        rows.append(
            f"| {i['version']} | {draft} | {'yes' if i['plugins'] else 'no'} "
            f"| {'yes' if i['v1_worker'] else 'no'} | {i['gate']} "
            f"| {label('A', i['alloc_extend'])} | {label('D', i['assign'])} | {patch} |"
        )

    out = [
        "# SGLang releases surveyed",
        "",
        "Generated by `python scripts/survey_sglang_releases.py` from the published wheels "
        "(`pip download --no-deps sglang==X`, sources read with `ast`); do not edit by hand, "
        "re-run the script instead.",
        "",
        "## Supported range",
        "",
        f"* **{patching.PLUGIN_FRAMEWORK_RELEASES[0]} .. {patching.PLUGIN_FRAMEWORK_RELEASES[-1]}** is the "
        "supported range: these releases have both the v1 `EAGLEWorker` and `sglang.srt.plugins`, so SGLang "
        "loads `sglang-eagle-paged` through its `eagle_paged` entry point with no patch. On a GPU, "
        "0.5.12.post1 ran the end-to-end suite's core set (H200, 2026-11-30, `bench/results/`); 0.5.11 and "
        "0.5.12 have the same draft-preprocess code (0.5.11 names the penalizer input `verified_id`, handled in "
        "`compat.py`) and are covered by the CPU tests only.",
        "* **Older releases with the v1 `EAGLEWorker`** are reachable only through the patches in "
        "`sglang_eagle_paged/tools/patches/` (`sglang-eagle-paged patch --apply`). They are covered only by CPU "
        "checks (`tests/test_patches.py`: each patch applies to the real wheel, the patched file byte-compiles, "
        "and reverting restores the tree byte for byte) and by the internals listed below; nothing has run "
        "on a GPU with them. Our worker runs on **0.5.8 .. 0.5.10.post1**, whose draft preprocess for "
        "page > 1 and topk > 1 is identical to 0.5.11's (compared function by function); on 0.5.7 and older "
        "`sglang_eagle_paged.adapters.v1.legacy` declines with a warning and `patch --apply` refuses, since those need "
        "the adapters listed under \"Adapter needs\", which are not written.",
        "",
        "## Table",
        "",
        "Columns: *draft KV (topk>1, page>1)*: how `EAGLEWorker._draft_preprocess_decode` gives each branch "
        "the prefix's last partial page: **index-only (fake)** means `assign_draft_cache_locs` copies the "
        "token indices only and no KV is copied (the branches share slots, wrong for paged kernels); "
        "**SGLang duplicates** means it builds `source_cache_loc`/`target_cache_loc` and calls "
        "`move_kv_cache`. *plugins*: `sglang/srt/plugins/__init__.py` defines `load_plugins`. *v1 DPD*: "
        "`EAGLEWorker._draft_preprocess_decode` exists. *server_args allows*: attention backends "
        "`server_args` accepts for EAGLE with topk>1 and page_size>1 (all others raise `ValueError`). "
        "*alloc extend* / *assign locs*: signatures of `alloc_paged_token_slots_extend` and "
        "`assign_draft_cache_locs`, spelled out below the table.",
        "",
        "| release | draft KV (topk>1, page>1) | plugins | v1 DPD | server_args allows | alloc extend "
        "| assign locs | patch |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Signatures (module relative to `sglang.srt`):",
        "",
    ]
    for key, lab in sigs.items():
        out.append(f"* **{lab}**: `{key.split(':', 1)[1]}`")
    out += [
        "",
        "In every release `server_args` also refuses topk>1 outright for `trtllm_mha`, and the NGRAM "
        "algorithm keeps its own flashinfer-only check. The patches do not touch `server_args`: on patched "
        "releases the backend gate of the table still applies.",
        "",
        "## Hook point of the patches",
        "",
        f"Each patch only appends a guarded block to `{patching.HOOK_FILE}` that imports "
        "`sglang_eagle_paged.adapters.v1.legacy` and calls `install_legacy()` (a missing `sglang_eagle_paged` is "
        "ignored, so uninstalling the package without `--revert` leaves stock SGLang behaviour). That module "
        "is imported by the scheduler subprocess itself (`scheduler.py` / `spec_info.py` import "
        "`EAGLEWorker` lazily when they build the draft worker), so the hook runs in the process that needs it, "
        "before any `EAGLEWorker` exists, after every name of the module is defined, and only when EAGLE is in "
        "use. The target model's KV pool may already exist at that point; `install_legacy()` must therefore "
        "patch `EAGLEWorker` and `MHATokenToKVPool` at class level (importing "
        "`sglang.srt.mem_cache.memory_pool` itself), which reaches existing instances too, and be idempotent "
        "(other processes may import the module as well). The block is the only change; the fix itself stays "
        "in the package. `server_args.py` would also run in the main process, but it is imported for every "
        "launch, EAGLE or not, and before the classes to patch exist; `scheduler.py` is much larger and "
        "changes in every release, so its diffs would break more often.",
        "",
        "## Adapter needs per release line",
        "",
        "Consecutive releases grouped by the internals a version adapter in `sglang_eagle_paged.adapters.v1.legacy` "
        f"depends on; the last bullet compares each line with {ref['version']}:",
        "",
    ]
    for group in _lines_of_releases(infos):
        first = group[0]
        out.append(f"### {_span(group)}")
        out.append("")
        out.append(f"* plugin framework: {'yes' if first['plugins'] else 'no'}"
                   f"{' (scheduler calls `load_plugins()`)' if first['scheduler_loads_plugins'] else ''}; "
                   f"v1 `_draft_preprocess_decode`: {'yes' if first['v1_worker'] else 'no'}; "
                   f"draft KV for topk>1/page>1: {first['draft']}")
        out.append(f"* `alloc_paged_token_slots_extend`: `{first['alloc_extend']}`")
        out.append(f"* `alloc_token_slots`: `{first['alloc_token_slots']}`")
        out.append(f"* `assign_draft_cache_locs`: `{first['assign']}`")
        out.append(f"* `get_last_loc_large_page_size_large_top_k`: {first['last_loc']}")
        out.append(f"* `MHATokenToKVPool.move_kv_cache`: {first['move_kv_cache']}; `data_ptrs`/`data_strides`: "
                   f"{first['data_ptrs/data_strides']}; `enable_kv_cache_copy` init flag: "
                   f"{first['enable_kv_cache_copy']}")
        out.append(f"* penalty input in `_draft_preprocess_decode`: `spec_info.{first['spec_field']}`")
        diffs = [k for k in ADAPTER_KEYS if first[k] != ref[k]]
        out.append(f"* differs from {ref['version']} in: "
                   + (", ".join(f"`{k}`" for k in diffs) if diffs else "nothing listed here"))
        out.append("")
    out += [
        "## Wheels",
        "",
        ", ".join(f"`{i['wheel']}`" for i in infos),
        "",
    ]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"wheel cache (default {DEFAULT_CACHE})")
    ap.add_argument("--versions", nargs="*", help="releases to survey (default: pip index, 0.5.2..0.5.12.post1)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "release_survey.md")
    ap.add_argument("--write-patches", action="store_true",
                    help="regenerate sglang_eagle_paged/tools/patches/*.diff and check patching.PATCHES")
    args = ap.parse_args(argv)

    versions = sorted(args.versions or list_versions(), key=Version)
    infos = []
    for v in versions:
        wheel = fetch_wheel(v, args.cache)
        info = analyse(v, wheel)
        print(f"{v:14s} draft={info['draft']:5s} plugins={info['plugins']!s:5s} "
              f"v1={info['v1_worker']!s:5s} gate={info['gate']}", file=sys.stderr)
        infos.append(info)

    if args.write_patches:
        mapping = write_patches(infos)
        if mapping != patching.PATCHES:
            print("patching.PATCHES is out of date; it should read:\nPATCHES = {", file=sys.stderr)
            for v, name in mapping.items():
                print(f'    "{v}": "{name}",', file=sys.stderr)
            print("}", file=sys.stderr)
            return 1
    else:
        mapping = {v: n for v, n in patching.PATCHES.items() if v in versions}

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(infos, mapping), encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
