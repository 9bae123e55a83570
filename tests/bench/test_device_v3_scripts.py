"""CPU tests of the SGLang 0.5.23 device bundle (issue 55), no GPU, no network.

- make_bundle_v3.sh's table: DRY_RUN downloads nothing and lists every package with its unit; its
  versions agree with sglang 0.5.23's own Requires-Dist wherever that pins one (read from the installed
  sglang, the CPU environment's 0.5.23).
- make_bundle.sh over stand-in wheels in units, slimming Triton and torch, printing the calls its pieces
  take; setup_v3.sh installing them into their own site as the units complete, waiting (not failing)
  while pieces are missing, and saying in one line what it shadows.
- bundle_size.py's call count and sampled estimate, bundle_select.py's choice, check_libs_v3.py's lines.
  The six GPU checks themselves (import, matmul, Triton, FA3, CUDA graph, NCCL) need the GPU: not run here.
"""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1].parent
DEVICE = ROOT / "scripts" / "device"
sys.path.insert(0, str(DEVICE))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bundle_select  # noqa: E402
import bundle_size  # noqa: E402
import check_libs_v3  # noqa: E402
from test_device_v2_scripts import _wheel  # noqa: E402

TOOLS = all(shutil.which(t) for t in ("bash", "xz", "split", "sha256sum", "tar"))
needs_tools = pytest.mark.skipif(not TOOLS, reason="needs bash, xz and coreutils")
UNITS = ["torch", "nccl", "triton", "core"]


def _table(script="make_bundle_v3.sh") -> list:
    text = (DEVICE / script).read_text()
    block = text.split("PKGS=$(cat <<'EOF'\n", 1)[1].split("\nEOF", 1)[0]
    block += "\n" + (DEVICE / "bundle_server_pkgs.txt").read_text()  # the server's packages, shared with v2
    return [(line.split() + ["core"])[:4] for line in block.splitlines() if line.strip()]


def _norm(name):
    return name.lower().replace("_", "-").replace(".", "-")


@needs_tools
def test_dry_run_lists_every_package_with_its_unit_and_downloads_nothing(tmp_path):
    env = {**os.environ, "DRY_RUN": "1", "DEVBUNDLE_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(["bash", str(DEVICE / "make_bundle_v3.sh"), str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith(f"bundle: SGLang 0.5.23 -> {tmp_path / 'out'} (units: torch nccl triton core;")
    lines = [ln for ln in done.stdout.splitlines() if "pip download" in ln]
    table = _table()
    assert len(lines) == len(table)
    for (name, ver, policy, unit), line in zip(table, lines):
        assert line.endswith(f" {name}=={ver}   [{policy}] [{unit}]"), line
        assert "--python-version 3.12" in line and "--no-deps" in line and "--platform manylinux_2_28_x86_64" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_the_table_holds_torch_2_14_1_triton_3_8_and_nccl_in_units_of_their_own():
    rows = {name: (ver, unit) for name, ver, _, unit in _table()}
    assert rows["torch"] == ("2.14.1", "torch") and rows["torchvision"] == ("0.29.1", "torch")
    assert rows["triton"] == ("3.8.0", "triton")  # torch 2.14.1: triton~=3.8.0
    assert rows["nvidia-nccl-cu13"] == ("2.30.7", "nccl")  # torch 2.14.1: nvidia-nccl-cu13==2.30.7
    assert rows["sglang"] == ("0.5.23", "core") and rows["sglang-kernel"][1] == "core"
    assert len(rows) == len(_table()), "a package listed twice"


def test_the_table_agrees_with_sglang_0_5_23s_pins():
    try:
        have = version("sglang")
    except PackageNotFoundError:
        pytest.skip("sglang is not installed here")
    if have != "0.5.23":
        pytest.skip(f"the installed sglang is {have}; its pins are 0.5.23's only in the 0.5.23 environment")
    pins = {}
    for req in requires("sglang"):
        spec = req.split(";")[0].strip()
        if "extra ==" in req or "==" not in spec:
            continue
        name, ver = spec.split("==", 1)
        pins[_norm(name.split("[")[0].strip())] = ver.strip()
    checked = 0
    for name, ver, _, _ in _table():
        if _norm(name) in pins:
            assert pins[_norm(name)] == ver, f"{name}: the bundle has {ver}, sglang 0.5.23 pins {pins[_norm(name)]}"
            checked += 1
    # torch, sglang-kernel, flashinfer, tvm-ffi, transformers, xgrammar, openai, compressed-tensors,
    # sentencepiece, soundfile
    assert checked >= 10, checked


# ---------------------------------------------------------------- build from stand-ins, then set up
@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    if not TOOLS:
        pytest.skip("needs bash, xz and coreutils")
    tmp = tmp_path_factory.mktemp("bundle3")
    cache = tmp / "cache"
    (cache / "wheels").mkdir(parents=True)
    for name, ver, _, _ in _table():
        mod = name.replace("-", "_")
        files = {f"{mod}/__init__.py": f"__version__ = '{ver}'\n".encode()}
        if name == "sglang-kernel":
            files = {"sgl_kernel/__init__.py": b"", "sgl_kernel/flash_ops.abi3.so": os.urandom(300 * 1024),
                     "sgl_kernel/sm90/common_ops.abi3.so": b"sm90"}
        elif name == "triton":
            files.update({"triton/backends/nvidia/bin/ptxas": b"ptxas", "triton/backends/nvidia/bin/ptxas-blackwell": b"bw",
                          "triton/backends/nvidia/lib/cupti-blackwell/libcupti.so": b"bw",
                          "triton/backends/nvidia/lib/cupti/libcupti_static.a": b"a",
                          "triton/backends/nvidia/lib/cupti/libcupti.so.2025.1.1": b"so"})
        elif name == "torch":
            files.update({"torch/bin/protoc": b"protoc", "torch/lib/libtorch_cuda.so": os.urandom(1500 * 1024)})
        elif name == "nvidia-nccl-cu13":
            files = {"nvidia/nccl/lib/libnccl.so.2": os.urandom(200 * 1024)}
        _wheel(cache / "wheels" / f"{name.replace('-', '_')}-{ver}-py3-none-any.whl", name, ver, files)
    out = tmp / "out"
    env = {**os.environ, "DEVBUNDLE_CACHE": str(cache), "PART_MIB": "1", "CALL_MIB": "3", "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(DEVICE / "make_bundle_v3.sh"), str(out)], env=env, capture_output=True,
                          text=True, timeout=170)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout


def test_the_build_writes_each_unit_in_pieces_and_says_the_calls_they_take(bundle):
    out, stdout = bundle
    pieces = sorted(p for p in out.iterdir() if ".part" in p.name or p.name.endswith(".sha256"))
    for unit in UNITS + ["fa3"]:
        assert (out / f"{unit}.sha256").exists() and list(out.glob(f"{unit}.part*")), unit
    assert len(list(out.glob("torch.part*"))) == 2  # 1.5 MiB of random bytes: two pieces of 1 MiB
    want = bundle_size.calls([p.stat().st_size for p in pieces], 3 * 1024 * 1024)
    total = sum(p.stat().st_size for p in pieces) / 2 ** 20
    assert f"{len(pieces)} pieces, {total:.1f} MiB: {want} calls of at most 3 MiB of pieces" in stdout, stdout
    sizes = (out / "sizes.txt").read_text()
    assert "SGLang 0.5.23 device bundle" in sizes and "calls of at most 3 MiB" in sizes
    for dropped in ("triton/backends/nvidia/bin/ptxas-blackwell", "cupti-blackwell/libcupti.so",
                    "cupti/libcupti_static.a", "torch/bin/protoc", "sgl_kernel/flash_ops.abi3.so"):
        assert dropped in sizes, dropped
    assert "libcupti.so.2025.1.1" not in sizes.split("# dropped members")[1]


def _carry(co: Path, out: Path, names):
    carried = co / ".devbundle-v3"
    shutil.rmtree(carried, ignore_errors=True)  # a carried folder is replaced by every call
    carried.mkdir(parents=True)
    for n in names:
        shutil.copy(out / n, carried / n)


def _setup_v3(co: Path, tmp: Path):
    env = {**os.environ, "DEVBUNDLE_SITE": str(tmp / "site-v3"), "BUNDLE": str(tmp / "devbundle-v3"),
           "SETUP_V2_IMPORT_CHECK": "0", "PYTHON": sys.executable}
    return subprocess.run(["bash", str(DEVICE / "setup_v3.sh"), str(co / "log.txt")], cwd=co, env=env,
                          capture_output=True, text=True, timeout=170)


def test_setup_v3_waits_for_every_unit_then_installs_into_its_own_site(bundle, tmp_path):
    out, _ = bundle
    co = tmp_path / "checkout"
    co.mkdir()
    shutil.copy(ROOT / "pyproject.toml", co / "pyproject.toml")
    names = lambda unit: [f"{unit}.sha256", *sorted(p.name for p in out.glob(f"{unit}.part*"))]  # noqa: E731
    _carry(co, out, names("torch") + names("nccl"))  # call 1: two units of four
    first = _setup_v3(co, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "triton: waiting for the rest of its pieces (no " in first.stdout
    assert "setup: waiting for unit(s) triton core: nothing checked until every unit is in" in first.stdout
    site = tmp_path / "site-v3"
    assert (site / "torch" / "__init__.py").exists() and (site / "nvidia" / "nccl" / "lib" / "libnccl.so.2").exists()
    assert not (site / ".devbundle" / "env.sh").exists()
    assert not (tmp_path / "site-v2").exists()
    _carry(co, out, names("triton") + names("core") + names("fa3"))  # call 2: the rest
    second = _setup_v3(co, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "torch: installed on this machine already" in second.stdout
    assert (site / "triton" / "backends" / "nvidia" / "bin" / "ptxas").exists()
    assert not (site / "triton" / "backends" / "nvidia" / "bin" / "ptxas-blackwell").exists()
    assert (site / "sgl_kernel" / "flash_ops.abi3.so").exists()
    assert "bundle shadows the machine's" not in first.stdout  # said once, when every unit is in
    shadows = [ln for ln in second.stdout.splitlines() if ln.startswith("bundle shadows the machine's ")]
    assert len(shadows) == 1 and "torch " in shadows[0], second.stdout
    # "the machine" is this Python's environment here: each package it has at another version is named
    for name, ver, _, _ in _table():
        try:
            have = version(name)
        except PackageNotFoundError:
            continue
        if have != ver and name != "typing-extensions":  # min:4.14.1: kept where new enough
            assert f"{name} {have}->{ver}" in shadows[0], (name, shadows[0])
    env_sh = (site / ".devbundle" / "env.sh").read_text()
    assert "PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1" in env_sh and f"{site}:" in env_sh


def test_a_v2_call_refuses_an_unknown_bundle(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "DRY_RUN": "1", "SGLANG_BUNDLE": "v9", "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(DEVICE / "call_v2.sh"), "correct"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "SGLANG_BUNDLE=v9: want v2 or v3" in done.stderr


# ---------------------------------------------------------------- the helpers
def test_calls_pack_pieces_largest_first_and_refuse_one_too_big():
    mib = 2 ** 20
    assert bundle_size.calls([20 * mib] * 6, 61 * mib) == 2
    assert bundle_size.calls([20 * mib] * 7 + [5 * mib], 61 * mib) == 3
    assert bundle_size.pieces(45 * mib, 20 * mib) == [20 * mib, 20 * mib, 5 * mib]
    with pytest.raises(ValueError):
        bundle_size.calls([62 * mib], 61 * mib)


def test_the_plan_carries_every_piece_once_within_the_call_limits():
    mib = 2 ** 20
    parts = [(f"torch.part{i:02d}", 20 * mib) for i in range(4)] + [("torch.part04", 7 * mib), ("fa3.part00", 20 * mib),
                                                                    ("fa3.part01", 3 * mib)]
    calls = bundle_size.plan(parts, 61 * mib, small=["torch.sha256", "fa3.sha256"])
    assert sorted(n for c in calls for n in c) == sorted([n for n, _ in parts] + ["torch.sha256", "fa3.sha256"])
    assert calls[0][:2] == ["fa3.sha256", "torch.sha256"] and len(calls) == 2  # 110 MiB: 60 + 50
    size = dict(parts)
    assert all(sum(size.get(n, 0) for n in c) <= 61 * mib and len(c) <= 8 for c in calls)
    with pytest.raises(ValueError):
        bundle_size.plan([("p", mib)] * 3, 61 * mib, small=[f"u{i}.sha256" for i in range(6)])


def test_the_estimate_scales_xz_1_by_kind_and_counts_calls_for_each_column():
    rows = bundle_size.estimate(["core 1000 600 500\n", "fa3 3000 900 800\n", "\n"])
    assert rows == [("core", 1000, 600, 500, int(500 * bundle_size.SCALE["wheels"])),
                    ("fa3", 3000, 900, 800, int(800 * bundle_size.SCALE["kernels"]))]


@needs_tools
def test_estimate_mode_measures_each_unit_and_writes_nothing(bundle, tmp_path):
    out, _ = bundle
    cache = out.parent / "cache"
    env = {**os.environ, "DEVBUNDLE_CACHE": str(cache), "ESTIMATE": "1", "PART_MIB": "1", "CALL_MIB": "3",
           "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(DEVICE / "make_bundle_v3.sh"), str(tmp_path / "none")], env=env,
                          capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "none").exists() or not any((tmp_path / "none").iterdir())
    got = dict(re.findall(r"^bytes (\w+): stored \d+ deflate (\d+) ", done.stdout, re.M))
    assert set(got) == set(UNITS + ["fa3", "total"])
    # deflate: the stand-in wheels' own compressed members, less what the bundle drops (torch's protoc)
    want = 0
    for whl in ("torch-2.14.1-py3-none-any.whl", "torchvision-0.29.1-py3-none-any.whl"):
        with zipfile.ZipFile(cache / "wheels" / whl) as z:
            want += sum(i.compress_size for i in z.infolist()
                        if not i.filename.endswith("RECORD") and i.filename != "torch/bin/protoc")
    assert int(got["torch"]) == want
    assert "xz as built (estimate): " in done.stdout and "as the wheels' deflate (exact): " in done.stdout


def test_select_installs_always_and_older_min_and_notes_what_it_shadows():
    lines = ["torch-2.14.1.whl torch 2.14.1 always\n", "te-4.16.0.whl typing-extensions 4.16.0 min:4.14.1\n",
             "new-1.0.whl brand-new 1.0 always\n", "slimmed torch-2.14.1.whl torch/bin/protoc 5463672\n",
             "same-2.0.whl same 2.0 always\n"]
    machine = {"torch": "2.11.0", "typing-extensions": "4.15.0", "same": "2.0"}
    install, shadows, kept = bundle_select.select(lines, machine.get)
    assert install == ["torch-2.14.1.whl", "new-1.0.whl", "same-2.0.whl"]
    assert shadows == ["torch 2.11.0->2.14.1"] and kept == ["typing-extensions==4.15.0 (bundle has 4.16.0)"]
    assert bundle_select.shadow_line(shadows) == "shadows the machine's torch 2.11.0->2.14.1"
    assert bundle_select.shadow_line([]) == "shadows the machine's nothing"


def test_the_library_check_says_where_each_library_came_from_and_names_a_missing_symbol():
    maps = "\n".join([
        "7f00-7f01 r-xp 00000000 08:01 1 /tmp/site-v3/nvidia/nccl/lib/libnccl.so.2",
        "7f02-7f03 r-xp 00000000 08:01 2 /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13",
        "7f04-7f05 r-xp 00000000 08:01 3 /tmp/site-v3/torch/lib/libtorch_cuda.so",
        "7f06-7f07 r-xp 00000000 08:01 4 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.03",
        "7f08-7f09 rw-p 00000000 00:00 0 ",
    ])
    origins = check_libs_v3.lib_origins(maps, "/tmp/site-v3")
    assert origins == {"libnccl.so.2": "bundle",
                       "libcublasLt.so.13": "machine:/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib",
                       "libcuda.so.580.159.03": "machine:/usr/lib/x86_64-linux-gnu"}
    assert check_libs_v3.libs_line(origins).startswith("cuda libs: libcublasLt.so.13 (machine:")
    err = OSError("/tmp/site-v3/torch/lib/libtorch_cuda.so: undefined symbol: ncclCommGrow")
    assert check_libs_v3.why(err) == ("OSError: /tmp/site-v3/torch/lib/libtorch_cuda.so: undefined symbol: ncclCommGrow "
                                      "[library libtorch_cuda.so] [symbol ncclCommGrow]")
    assert check_libs_v3.summary([("import", True, ""), ("fa3", None, "")]) == (0, "libs ok: 1 of 2 checks (fa3 waiting)")
    assert check_libs_v3.summary([("import", True, ""), ("nccl", False, "x")]) == (1, "libs FAIL: nccl")


@pytest.mark.skipif(not all(shutil.which(t) for t in ("cc", "nm")), reason="needs a C compiler and nm")
def test_lib_symbols_names_what_a_library_imports_that_the_older_version_lacks(tmp_path):
    import lib_symbols

    def build(name, source, *link):
        (tmp_path / f"{name}.c").write_text(source)
        out = tmp_path / name / f"{name}.so"
        out.parent.mkdir()
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(tmp_path / f"{name}.c"), *link], check=True)
        whl = tmp_path / f"{name}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:
            z.write(out, f"pkg/lib/{name}.so")
        return whl

    old = build("libold", "int nccl_a(void){return 1;}\n")
    new = build("libnew", "int nccl_a(void){return 1;}\nint nccl_grow(void){return 2;}\n")
    user = build("libuser", "int nccl_a(void); int nccl_grow(void);\nint use(void){return nccl_a()+nccl_grow();}\n",
                 "-L" + str(tmp_path / "libnew"), "-l:libnew.so")
    done = subprocess.run([sys.executable, str(DEVICE / "lib_symbols.py"), str(user), str(old), str(new)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "libnew-1.0-py3-none-any.whl: 2 symbols imported; libold-1.0-py3-none-any.whl lacks 1: nccl_grow"
    assert lib_symbols.missing({"a", "b", "c"}, {"a"}, {"a", "b"}) == ({"a", "b"}, ["b"])
