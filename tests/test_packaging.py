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


def test_wheel_leaves_out_the_testbed_weights(plugin_wheel):
    names = set(zipfile.ZipFile(plugin_wheel).namelist())
    shipped = [n for n in names if n.endswith(".safetensors")]
    assert not shipped, f"the wheel ships model weights: {shipped}"
    # ... and nothing else of the package is lost: every module, the patches, the pair's configs
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "sglang_eagle_paged").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert modules <= names, f"modules missing from the wheel: {sorted(modules - names)}"
    patches = {p.relative_to(REPO).as_posix() for p in (REPO / "sglang_eagle_paged/tools/patches").glob("*.diff")}
    assert patches and patches <= names
    assert "sglang_eagle_paged/testbed/target/config.json" in names
    assert "sglang_eagle_paged/testbed/testbed.json" in names


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
