"""What a user's ``pip install`` does: the wheel's contents, and pip's own resolver deciding what
installing the plugin would change in environments holding a real SGLang release.

The wheel is built by pip from a copy of this checkout (build isolation: pip fetches setuptools).
Each environment is a real virtualenv with SGLang's real published wheel installed ``--no-deps``
(downloaded once into ``.sglang-wheels/dist/``): as on a machine where SGLang's own dependencies
are incomplete, the case that once pulled torch, triton and a hundred packages. The resolver then
runs ``--dry-run --no-index``: with no index it can add nothing, so any dependency the plugin
declared and the environment lacks fails the resolution, and the report lists every
distribution it would install or replace.
"""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglang_eagle_paged.bench import default_run

REPO = Path(__file__).resolve().parents[1]
WHEEL_CACHE = REPO / ".sglang-wheels" / "dist"
# 0.5.7: older than any release served (the plugin stays inert there); 0.5.12.post1: the last v1
# release; 0.5.23: the newest v2 release served, what a plain `pip install sglang` gave.
RELEASES = ["0.5.7", "0.5.12.post1", "0.5.23"]


def _pip(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          cwd=cwd, capture_output=True, text=True, check=True)


@pytest.fixture(scope="module")
def plugin_wheel(tmp_path_factory) -> Path:
    """The wheel pip builds from this checkout (a copy, so no stale build/ folder leaks in)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "sglang_eagle_paged", src / "sglang_eagle_paged",
                    ignore=shutil.ignore_patterns("__pycache__"))
    # the lab beside the package (its recordings left out: large, and data either way), so that a
    # packaging rule that picked it up would show in the wheel
    shutil.copytree(REPO / "bench", src / "bench", ignore=shutil.ignore_patterns("__pycache__", "results"))
    out = tmp_path_factory.mktemp("wheel")
    _pip("wheel", "--no-deps", "-q", str(src), "-w", str(out))
    (wheel,) = out.glob("sglang_eagle_paged-*.whl")
    return wheel


# What a user runs against their own server (issue 53): the benchmark, the A/B and its pooling, KV
# sizing, reports and plots, serve-default and the statistics; nothing of the project's own GPU
# investigations (bench/ at the top of the checkout: sweeps, profilers, samplers, soak and stress
# drivers, micro-benchmarks), nor the device probes.
USER_BENCHMARK = {"__init__", "ab", "ab_pool", "configs", "default_run", "kv_sizing", "mtbench", "report", "server",
                  "server_log", "stats", "triton_cache"}
LAB = {p.stem for p in (REPO / "bench").rglob("*.py")} - {"__init__"}


def test_the_wheel_holds_the_users_benchmark_and_no_investigation_tool(plugin_wheel):
    names = zipfile.ZipFile(plugin_wheel).namelist()
    bench = {n.rsplit("/", 1)[1].removesuffix(".py") for n in names if n.startswith("sglang_eagle_paged/bench/")}
    assert bench == {f"{m}" for m in USER_BENCHMARK}, bench
    assert not [n for n in names if n.startswith(("bench/", "scripts/", "tests/"))]
    stems = {n.rsplit("/", 1)[-1].removesuffix(".py") for n in names if n.endswith(".py")}
    assert len(LAB) > 15 and not (stems & (LAB | {"gc_stats", "sync_probe", "round_marks", "sitecustomize"})), \
        stems & LAB


# What a user runs from the wheel: the package's modules and the patches `patch --apply` applies.
# Anything else (the embedded pair's configs and tokenizers, without the weights a wheel cannot
# carry) is of no use to them.
USER_DATA = ("sglang_eagle_paged/tools/patches/",)


def test_the_wheel_holds_only_what_a_user_runs(plugin_wheel):
    names = zipfile.ZipFile(plugin_wheel).namelist()
    package = [n for n in names if not n.split("/", 1)[0].endswith(".dist-info")]
    unusable = [n for n in package if not n.endswith(".py") and not n.startswith(USER_DATA)]
    assert not unusable, f"the wheel ships files no user can run: {unusable}"
    assert not [n for n in package if n.startswith(default_run.CHECKOUT_ONLY[0] + "/")]
    # every module of the package is there, but the checkout's own (the SmolLM2 converter)
    checkout_only = [m.replace(".", "/") for m in default_run.CHECKOUT_ONLY[1:]]
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "sglang_eagle_paged").rglob("*.py")
               if "__pycache__" not in p.parts}
    wanted = {m for m in modules if not m.startswith(tuple(checkout_only))}
    assert wanted <= set(names), f"modules missing from the wheel: {sorted(wanted - set(names))}"
    assert not [n for n in names if n.startswith(tuple(checkout_only))]
    patches = {p.relative_to(REPO).as_posix() for p in (REPO / "sglang_eagle_paged/tools/patches").glob("*.diff")}
    assert patches and patches <= set(names)


def _wheel_imports(names) -> dict:
    """Per module of the wheel, the ``sglang_eagle_paged`` modules it imports (absolute or relative,
    at any depth of the file: lazy imports included)."""
    import ast

    out = {}
    for name in names:
        if not (name.startswith("sglang_eagle_paged/") and name.endswith(".py")):
            continue
        here = name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        package = here if name.endswith("__init__.py") else here.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(zipfile.Path(WHEEL[0], name).read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("sglang_eagle_paged")}
            elif isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
                if target.startswith("sglang_eagle_paged"):
                    found |= {target} | {f"{target}.{a.name}" for a in node.names}
        out[name] = found
    return out


WHEEL = []


def test_no_module_of_the_wheel_needs_one_it_leaves_out_but_behind_a_from_a_checkout_line(plugin_wheel):
    names = set(zipfile.ZipFile(plugin_wheel).namelist())
    WHEEL[:] = [plugin_wheel]
    present = {n.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for n in names if n.endswith(".py")}
    # `from pkg import name` names a module or an attribute: a module of the checkout counts
    checkout = {p.relative_to(REPO).with_suffix("").as_posix().removesuffix("/__init__").replace("/", ".")
                for p in (REPO / "sglang_eagle_paged").rglob("*.py") if "__pycache__" not in p.parts}
    missing = {}
    for name, imported in _wheel_imports(names).items():
        lacking = {m for m in imported if m in checkout and m not in present}
        if lacking:
            missing[name] = sorted(lacking)
    assert missing == {"sglang_eagle_paged/bench/default_run.py": ["sglang_eagle_paged.models",
                                                                   "sglang_eagle_paged.models.smollm2"]}, missing


@pytest.fixture(scope="module")
def unpacked(plugin_wheel, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("unpacked")
    zipfile.ZipFile(plugin_wheel).extractall(out)
    return out


def _from_the_wheel(unpacked: Path, *args):
    """The console script's ``main`` on the wheel's code alone: site-packages on the path as a plain
    folder (``-S``: no .pth file runs, so no editable install of a checkout answers an import)."""
    import os
    import sysconfig

    code = ("import sys, sglang_eagle_paged as pkg\n"
            f"assert pkg.__file__.startswith({str(unpacked)!r}), pkg.__file__\n"
            "from sglang_eagle_paged.tools.cli import main\n"
            "sys.exit(main(sys.argv[1:]))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE_PAGED")}
    env["PYTHONPATH"] = os.pathsep.join([str(unpacked), sysconfig.get_paths()["purelib"]])
    return subprocess.run([sys.executable, "-S", "-c", code, *args], env=env, cwd=unpacked, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("argv", [["serve-default"], ["serve-default", "--model", "smollm2"],
                                  ["serve-default", "--model", "smollm2", "--dry-run"]])
def test_serve_default_from_the_wheel_says_from_a_checkout_in_one_line(unpacked, argv):
    p = _from_the_wheel(unpacked, *argv)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith("serve-default: ") and "come with a checkout of sglang-eagle-paged only" in line, line


def test_serve_default_from_the_wheel_serves_the_models_a_user_names(unpacked):
    p = _from_the_wheel(unpacked, "serve-default", "--dry-run", "--model-path", "/m",
                        "--speculative-draft-model-path", "/d", "--attention-backend", "flashinfer")
    assert p.returncode == 0, p.stderr
    assert "--model-path /m" in p.stdout and "--speculative-draft-model-path /d" in p.stdout


def _sglang_wheel(version: str) -> Path:
    found = sorted(WHEEL_CACHE.glob(f"sglang-{version}-*.whl"))
    if not found:
        WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
        _pip("download", "--no-deps", "-q", f"sglang=={version}", "-d", str(WHEEL_CACHE))
        found = sorted(WHEEL_CACHE.glob(f"sglang-{version}-*.whl"))
    return found[0]


@pytest.mark.parametrize("version", RELEASES)
def test_installing_the_plugin_changes_nothing_but_itself(version, plugin_wheel, tmp_path):
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = str(env / "bin" / "python")
    # --no-compile: byte-compiling SGLang's thousands of files is most of an install's time, and
    # pip's resolver reads only the installed metadata
    _pip("--python", python, "install", "--no-deps", "--no-index", "--no-compile", "-q", str(_sglang_wheel(version)))
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", python, "install",
         "--dry-run", "--no-index", "--report", str(report), str(plugin_wheel)],
        capture_output=True, text=True)
    assert result.returncode == 0, f"pip cannot install the plugin beside SGLang {version}:\n{result.stderr}"
    planned = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert planned == ["sglang-eagle-paged"], f"beside SGLang {version} pip would also install {planned}"
