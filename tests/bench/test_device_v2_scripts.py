"""CPU dry runs of the v2-worker device scripts (issue 30), no GPU, no network.

- make_bundle_v2.sh builds a bundle from stand-in wheels (a pre-filled cache: nothing downloads),
  slimming what it says it slims; setup_v2.sh installs that very bundle from its pieces, once,
  with the FA3 library arriving in a later "call" and bad pieces refused.
- call_v2.sh's argument handling: subcommands, time limits, configuration and pair names.
- the host-sync probe's counting and wrapping, on a stand-in of SGLang's v2 worker module.
- v2_run's resume rule and v2_report's tables.
"""

import base64
import csv
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import types
import warnings
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "scripts" / "device"
PROBES = DEVICE / "probes"
sys.path.insert(0, str(PROBES))
import sync_probe  # noqa: E402

needs_tools = pytest.mark.skipif(not all(shutil.which(t) for t in ("bash", "xz", "split", "sha256sum", "tar")),
                                 reason="needs bash, xz and coreutils")


# ---------------------------------------------------------------- bundle: build, then install
def _wheel(path: Path, dist: str, version: str, files: dict) -> None:
    tag = dist.replace("-", "_")
    info = f"{tag}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rows = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
            for n, d in files.items()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr(f"{info}/RECORD", "\n".join(rows + [f"{info}/RECORD,,"]) + "\n")


def _packages() -> list:
    text = (DEVICE / "make_bundle_v2.sh").read_text()
    block = text.split("PKGS=$(cat <<'EOF'\n", 1)[1].split("\nEOF", 1)[0]
    block += "\n" + (DEVICE / "bundle_server_pkgs.txt").read_text()  # the rows it shares with make_bundle_v3.sh
    return [line.split() for line in block.splitlines() if line.strip()]


FA3_BYTES = os.urandom(1536 * 1024)  # incompressible, 1.5 MiB: two parts at PART_MIB=1


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """make_bundle_v2.sh over stand-in wheels of every package it lists; returns (cache, bundle dir)."""
    if not all(shutil.which(t) for t in ("bash", "xz", "split", "sha256sum", "tar")):
        pytest.skip("needs bash, xz and coreutils")
    tmp = tmp_path_factory.mktemp("bundle")
    cache = tmp / "cache"
    (cache / "wheels").mkdir(parents=True)
    for name, ver, _ in _packages():
        mod = name.replace("-", "_")
        files = {f"{mod}/__init__.py": f"__version__ = '{ver}'\n".encode()}
        if name == "sglang-kernel":
            mod = "sgl_kernel"
            files = {"sgl_kernel/__init__.py": b"", "sgl_kernel/flash_ops.abi3.so": FA3_BYTES,
                     "sgl_kernel/sm90/common_ops.abi3.so": b"sm90", "sgl_kernel/sm100/common_ops.abi3.so": b"sm100",
                     "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so": b"infllm",
                     "sgl_kernel/flashmla_ops.abi3.so": b"mla"}
        elif name == "xgrammar":
            files[f"{mod}/lib/libxgrammar.a"] = b"static"
            files[f"{mod}/libxgrammar_bindings.so"] = b"bindings"
        elif name == "sglang":
            files["sglang/srt/server/_core.cpython-312-x86_64-linux-gnu.so"] = b"rust"
            files["sglang/srt/speculative/eagle_worker_common.py"] = b"# stand-in\n"
            files["sglang/configs/E=64,N=1536,device_name=H200.json"] = b"{}"
            files["sglang/payload.bin"] = os.urandom(1200 * 1024)  # makes core two parts
        _wheel(cache / "wheels" / f"{name.replace('-', '_')}-{ver}-py3-none-any.whl", name, ver, files)
    out = tmp / "out"
    env = {**os.environ, "DEVBUNDLE_CACHE": str(cache), "PART_MIB": "1", "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(DEVICE / "make_bundle_v2.sh"), str(out)], env=env, capture_output=True,
                          text=True, timeout=170)
    assert done.returncode == 0, done.stdout + done.stderr
    return cache, out


def test_the_bundle_is_in_pieces_with_their_hashes_and_sizes(bundle):
    _, out = bundle
    cores, fa3s = sorted(out.glob("core.part*")), sorted(out.glob("fa3.part*"))
    assert len(cores) == 2 and len(fa3s) == 2
    assert all(p.stat().st_size <= 1024 * 1024 for p in cores + fa3s)
    listed = {line.split()[1]: line.split()[2] for line in (out / "fa3.sha256").read_text().splitlines()
              if line.startswith("part ")}
    assert listed == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in fa3s}
    so = lzma.decompress(b"".join(p.read_bytes() for p in fa3s))
    assert so == FA3_BYTES
    assert f"so {hashlib.sha256(FA3_BYTES).hexdigest()}" in (out / "fa3.sha256").read_text()
    sizes = (out / "sizes.txt").read_text()
    for p in cores + fa3s:
        assert re.search(rf"^{p.name}\s+{p.stat().st_size}\s", sizes, re.M), p.name


def test_a_core_only_bundle_lists_its_pieces(bundle, tmp_path):
    cache, _ = bundle
    env = {**os.environ, "DEVBUNDLE_CACHE": str(cache), "PART_MIB": "1", "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(DEVICE / "make_bundle_v2.sh"), str(tmp_path), "--no-fa3"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(tmp_path.glob("fa3.*"))
    sizes = (tmp_path / "sizes.txt").read_text()
    assert "core.part01" in sizes and "# dropped members" in sizes and "sgl_kernel/flash_ops.abi3.so" in sizes


def _core_members(out: Path) -> dict:
    joined = b"".join(p.read_bytes() for p in sorted(out.glob("core.part*")))
    import tarfile

    outer = tarfile.open(fileobj=io.BytesIO(joined))
    wheels = tarfile.open(fileobj=io.BytesIO(outer.extractfile("wheels.tar.xz").read()), mode="r:xz")
    return {Path(m.name).name: wheels.extractfile(m).read() for m in wheels.getmembers() if m.isfile()}


def test_slimmed_wheels_hold_and_record_only_what_serving_needs(bundle):
    _, out = bundle
    members = _core_members(out)
    sk = zipfile.ZipFile(io.BytesIO(next(v for k, v in members.items() if k.startswith("sglang_kernel-"))))
    names = set(sk.namelist())
    assert "sgl_kernel/sm90/common_ops.abi3.so" in names
    for dropped in ("sgl_kernel/flash_ops.abi3.so", "sgl_kernel/sm100/common_ops.abi3.so",
                    "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so", "sgl_kernel/flashmla_ops.abi3.so"):
        assert dropped not in names
    record = next(n for n in names if n.endswith("RECORD"))
    recorded = {row[0] for row in csv.reader(io.StringIO(sk.read(record).decode())) if row}
    assert recorded == names
    assert all(i.compress_type == zipfile.ZIP_STORED for i in sk.infolist())
    xg = zipfile.ZipFile(io.BytesIO(next(v for k, v in members.items() if k.startswith("xgrammar-"))))
    assert "xgrammar/libxgrammar_bindings.so" in xg.namelist() and "xgrammar/lib/libxgrammar.a" not in xg.namelist()
    sg = zipfile.ZipFile(io.BytesIO(next(v for k, v in members.items() if k.startswith("sglang-0"))))
    assert "sglang/srt/server/_core.cpython-312-x86_64-linux-gnu.so" not in sg.namelist()
    assert "sglang/srt/speculative/eagle_worker_common.py" in sg.namelist()
    sg_record = next(n for n in sg.namelist() if n.endswith("RECORD"))
    rows = [row for row in csv.reader(io.StringIO(sg.read(sg_record).decode())) if row]
    assert all(len(row) == 3 for row in rows) and {row[0] for row in rows} == set(sg.namelist())


def _checkout(tmp_path: Path, out: Path, parts: list) -> Path:
    co = tmp_path / "checkout"
    (co / ".devbundle-v2").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "pyproject.toml", co / "pyproject.toml")
    for name in parts:
        shutil.copy(out / name, co / ".devbundle-v2" / name)
    return co


def _setup(co: Path, site: Path):
    env = {**os.environ, "DEVBUNDLE_SITE": str(site), "SETUP_V2_IMPORT_CHECK": "0", "PYTHON": sys.executable,
           "BUNDLE": str(site.parent / "bundle-on-the-machine")}
    return subprocess.run(["bash", str(DEVICE / "setup_v2.sh"), str(co / "log.txt")], cwd=co, env=env,
                          capture_output=True, text=True, timeout=170)


def test_setup_installs_core_then_fa3_when_its_last_part_arrives(bundle, tmp_path):
    _, out = bundle
    site = tmp_path / "site"
    core = ["core.sha256", *sorted(p.name for p in out.glob("core.part*"))]
    co = _checkout(tmp_path, out, core + ["fa3.sha256", "fa3.part00"])  # call 1: core, FA3's first part
    first = _setup(co, site)
    assert first.returncode == 0, first.stdout + first.stderr
    assert (site / "sglang" / "__init__.py").exists() and (site / "sgl_kernel" / "sm90" / "common_ops.abi3.so").exists()
    assert "1 of 2 fa3 parts here" in first.stdout
    assert not (site / "sgl_kernel" / "flash_ops.abi3.so").exists()
    entry = next((site / ".devbundle" / "dev").glob("*.dist-info")) / "entry_points.txt"
    assert "sglang_eagle_paged.plugin:register" in entry.read_text()
    env_sh = (site / ".devbundle" / "env.sh").read_text()
    assert f"{site}:{site}/.devbundle/dev:{co}" in env_sh and "HF_HUB_OFFLINE=1" in env_sh
    # An EAGLE server imports deep_gemm while it starts (0.5.17's dsa_backend): a module is there, and
    # SGLang is told not to take it for DeepGEMM.
    assert "SGLANG_ENABLE_JIT_DEEPGEMM=0" in env_sh
    placeholder = subprocess.run([sys.executable, "-c", "import deep_gemm; print(hasattr(deep_gemm, 'fp8_gemm'))"],
                                 env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert placeholder.returncode == 0 and placeholder.stdout.strip() == "False", placeholder.stderr
    # Call 2 brings the rest, in a checkout whose carried .devbundle-v2 holds only that part (a carried
    # folder is replaced by each call): the parts of call 1 are still on the machine.
    shutil.rmtree(co / ".devbundle-v2")
    _checkout(tmp_path, out, ["fa3.part01"])
    second = _setup(co, site)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "core: installed on this machine already" in second.stdout
    assert (site / "sgl_kernel" / "flash_ops.abi3.so").read_bytes() == FA3_BYTES
    third = _setup(co, site)
    assert "fa3: installed on this machine already" in third.stdout


def test_setup_adds_an_extra_wheel_once(bundle, tmp_path):
    _, out = bundle
    site = tmp_path / "site"
    co = _checkout(tmp_path, out, ["core.sha256", *sorted(p.name for p in out.glob("core.part*"))])
    assert _setup(co, site).returncode == 0
    (co / ".devbundle-v2" / "extra").mkdir()
    _wheel(co / ".devbundle-v2" / "extra" / "late_module-1.0-py3-none-any.whl", "late-module", "1.0",
           {"late_module/__init__.py": b"X = 1\n"})
    added = _setup(co, site)
    assert added.returncode == 0 and "extra: installed late_module-1.0-py3-none-any.whl" in added.stdout
    assert (site / "late_module" / "__init__.py").exists()
    assert "extra: installed" not in _setup(co, site).stdout


def test_setup_refuses_a_corrupt_or_incomplete_core(bundle, tmp_path):
    _, out = bundle
    co = _checkout(tmp_path, out, ["core.sha256", "core.part00"])
    missing = _setup(co, tmp_path / "site")
    assert missing.returncode == 1 and "1 of 2 core parts here" in missing.stdout
    shutil.copy(out / "core.part01", co / ".devbundle-v2" / "core.part01")
    with open(co / ".devbundle-v2" / "core.part01", "r+b") as f:
        f.write(b"X")
    bad = _setup(co, tmp_path / "site")
    assert bad.returncode == 1 and "core.part01: sha256 mismatch" in bad.stdout


def test_make_bundle_dry_run_downloads_cp312_wheels_for_every_package():
    env = {**os.environ, "DRY_RUN": "1"}
    done = subprocess.run(["bash", str(DEVICE / "make_bundle_v2.sh"), "/nonexistent/out"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stdout.splitlines() if "pip download" in ln]
    assert len(lines) == len(_packages())
    assert all("--python-version 3.12" in ln and "--no-deps" in ln for ln in lines)
    assert not Path("/nonexistent/out").exists()


# ---------------------------------------------------------------- call_v2.sh argument handling
def _call(tmp_path, *args, **env):
    full = {**os.environ, "OUT": str(tmp_path / "out"), "V2_ROOT": str(tmp_path / "v2"), "DRY_RUN": "1",
            "PYTHON": sys.executable, "PYTHONPATH": str(ROOT), **env}
    (tmp_path / "out").mkdir(exist_ok=True)
    return subprocess.run(["bash", str(DEVICE / "call_v2.sh"), *args], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=60)


@needs_tools
@pytest.mark.parametrize("args,env,message", [
    ((), {}, "usage: call_v2.sh"),
    (("measure-everything",), {}, "usage: call_v2.sh"),
    (("correct",), {"V2_S": "600"}, "V2_S=600: want whole seconds, at most 540"),
    (("ab",), {"V2_S": "5m"}, "V2_S=5m"),
])
def test_call_refuses_bad_arguments_in_one_line(tmp_path, args, env, message):
    done = _call(tmp_path, *args, **env)
    assert done.returncode == 2 and message in done.stderr


@needs_tools
def test_call_correct_arms_the_probe_in_every_server_of_the_set(tmp_path):
    done = _call(tmp_path, "correct")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [ln for ln in done.stdout.splitlines() if ": mode=" in ln]
    assert rows[0].startswith("on_p64: mode=on page=64 backend=fa3") and len(rows) == 10
    assert all(f"probe={tmp_path}/v2/correct/sync/" in ln for ln in rows)
    assert "off_p64_nooverlap: mode=off page=64 backend=fa3 extra=['--disable-overlap-schedule']" in done.stdout


@needs_tools
def test_call_correct_takes_its_parallelism_from_the_environment(tmp_path):
    """V2_PARALLEL=1: one request at a time, so outputs compare bit for bit."""
    one = _call(tmp_path, "correct", V2_ONLY="on_p64,off_p64", V2_PARALLEL="1")
    assert one.returncode == 0, one.stdout + one.stderr
    assert "[v2 sweep] 2 configurations, 16 questions at parallel 1, 160 tokens" in one.stdout
    default = _call(tmp_path, "correct", V2_ONLY="on_p64,off_p64")
    assert "16 questions at parallel 16," in default.stdout, default.stdout
    assert "in flight" not in one.stdout + default.stdout
    wide = _call(tmp_path, "correct", V2_ONLY="on_p64,off_p64", V2_PARALLEL="32")
    assert "[v2 sweep] parallel 32 over 16 conversations: at most 16 requests in flight" in wide.stdout, wide.stdout


@needs_tools
def test_call_picks_configurations_and_pairs_by_name(tmp_path):
    one = _call(tmp_path, "backends", V2_ONLY="triton_on_p16,fi_fake_p64")
    assert one.returncode == 0, one.stderr
    assert [ln.split(":")[0] for ln in one.stdout.splitlines() if ": mode=" in ln] == ["triton_on_p16", "fi_fake_p64"]
    bad = _call(tmp_path, "correct", V2_ONLY="on_p64,on_p256")
    assert bad.returncode != 0 and "not in set 'correct': ['on_p256']" in bad.stdout
    pairs = _call(tmp_path, "ab", AB_PAIRS="on_p128:off_p128")
    assert pairs.returncode == 0 and "[v2 ab] on_p128:off_p128 ->" in pairs.stdout and "on_p1:on_p64" not in pairs.stdout
    wrong = _call(tmp_path, "ab", AB_PAIRS="on_p64-off_p64")
    assert wrong.returncode != 0 and "bad pair 'on_p64-off_p64'" in wrong.stdout


@needs_tools
def test_call_ab_takes_pairs_of_any_set_and_the_workload_from_the_environment(tmp_path):
    done = _call(tmp_path, "ab", AB_PAIRS="on_p64:off_p64,triton_on_p64:triton_off_p64", PARALLEL="64",
                 ALSO_PARALLEL="128", GRAPH_BS="128", AB_TAG="p64")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"[v2 ab] triton_on_p64:triton_off_p64 -> {tmp_path}/v2/ab-p64/triton_on_p64__triton_off_p64" in done.stdout
    # 128 client threads over the default 32 conversations: said before anything is measured
    assert "[v2 ab] parallel 128 over 32 conversations: at most 32 requests in flight" in done.stdout
    # AB_KV=auto (the default): each pair's pool from the larger need at the largest parallelism, both sides alike
    from sglang_eagle_paged.bench import configs
    from sglang_eagle_paged.bench import kv_sizing

    sized = [ln for ln in done.stdout.splitlines() if "--max-total-tokens auto:" in ln]
    assert len(sized) == 2 and all("= parallel 128 x (" in ln and "one token per UTF-8 byte" in ln for ln in sized)
    pool = int(sized[0].split("auto: ")[1].split()[0])
    assert sized[0].endswith("the largest need of on_p64, off_p64") and f"KV pool {pool}," in done.stdout
    prompt = int(sized[0].split("longest prompt ")[1].split()[0])
    assert pool == kv_sizing.pool_tokens([configs.RunConfig("p64", page_size=64)], 128, prompt, 256)
    fixed = _call(tmp_path, "ab", AB_PAIRS="on_p1:on_p64", AB_KV="65536")
    assert "KV pool 65536," in fixed.stdout and "auto:" not in fixed.stdout, fixed.stdout + fixed.stderr
    assert "in flight" not in fixed.stdout  # parallel 16 over 32 conversations
    # a fixed pool: auto would read the chat template's tokenizer, which is on the GPU machine only;
    # no head trained at /w: the package's
    real = _call(tmp_path, "ab", MODEL="smollm2", AB_PAIRS="on_p64:off_p64", SMOLLM2_WORK="/w", AB_KV="131072")
    assert ("(target /w/target, draft sglang_eagle_paged/testbed/smollm2-draft, chat template /w/target, "
            "KV pool 131072,") in real.stdout, real.stdout + real.stderr
    bad = _call(tmp_path, "ab", MODEL="huge")
    assert bad.returncode == 2 and "MODEL=huge: want testbed, large or smollm2" in bad.stderr


@needs_tools
def test_call_ab_seeds_from_the_correct_set_and_from_earlier_ab_calls_on_the_machine(tmp_path):
    assert "Triton caches to seed from 0)" in _call(tmp_path, "ab", AB_PAIRS="on_p1:on_p64", AB_KV="65536").stdout
    for server in ("correct/logs/triton_cache/on_p64", "ab-q64/on_p64__off_p64/logs/triton_cache/pair0_A_on_p64",
                   "ab-q64/on_p64__off_p64/logs/triton_cache/pair0_B_off_p64"):
        (tmp_path / "v2" / server).mkdir(parents=True)
    done = _call(tmp_path, "ab", AB_PAIRS="on_p1:on_p64", AB_KV="65536", AB_TAG="next")
    assert "Triton caches to seed from 3)" in done.stdout, done.stdout + done.stderr


@needs_tools
def test_call_profile_loads_page_1_and_64_at_parallel_64_and_resumes_what_is_profiled(tmp_path, capsys):
    done = _call(tmp_path, "profile")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [ln for ln in done.stdout.splitlines() if ": mode=" in ln]
    assert [ln.split(":")[0] for ln in rows] == ["on_p64", "on_p1"]
    assert all("graph_bs=64 max_running=128 marks=on (to profile)" in ln for ln in rows)
    assert ("[v2 profile] load 512 conversations at parallel 64, max_new 256, ignore_eos=True; "
            "24 steps per profile: nostack, stack") in done.stdout
    assert "[v2 profile] --max-total-tokens auto: " in done.stdout and "= parallel 64 x (" in done.stdout
    # a server with both summaries recorded by an earlier call is not started again
    root = tmp_path / "v2" / "profile"
    (root / "profile.json").write_text(json.dumps({"on_p64": {"summaries": {"nostack": "a", "stack": "b"}},
                                                   "on_p1": {"summaries": {"nostack": "a"}}}))
    more = _call(tmp_path, "profile", V2_ONLY="on_p1,on_p64,off_p64", PROFILE_EOS="1", PROFILE_STEPS="12",
                 GRAPH_BS="128", PARALLEL="32")
    assert more.returncode == 0, more.stdout + more.stderr
    assert "on_p64: mode=on page=64 backend=fa3 graph_bs=128 max_running=128 marks=on (profiled already)" in more.stdout
    assert "on_p1: mode=on page=1 backend=fa3 graph_bs=128 max_running=128 marks=on (to profile)" in more.stdout
    assert "off_p64: mode=off" in more.stdout
    assert "at parallel 32, max_new 256, ignore_eos=False; 12 steps per profile" in more.stdout
    from bench import v2_run

    assert v2_run.main(["profile", "--target", "T", "--draft", "D", "--out", str(tmp_path / "p"), "--dry-run"]) == 0
    assert "marks=off" in capsys.readouterr().out  # the probe only where its folder is given
    bad = _call(tmp_path, "profile", V2_ONLY="on_p1,on_p1024")
    assert bad.returncode != 0 and "not in set 'correct': ['on_p1024']" in bad.stdout
    # a configuration of another set by name: the fused FA3 metadata (fa3meta) against page 1
    fx = _call(tmp_path, "profile", V2_ONLY="on_p64_fx,on_p1")
    assert fx.returncode == 0, fx.stdout + fx.stderr
    assert [ln.split(":")[0] for ln in fx.stdout.splitlines() if ": mode=" in ln] == ["on_p1", "on_p64_fx"]
    from bench import v2_sets

    assert [c.env for c in v2_sets.configs("correct", "on_p64_fx")] == [{"SGLANG_EAGLE_PAGED_FA3_EXPAND": "fused"}]
    # FA3 reading the prefix tail in place (inplace), by name from any set, and as an A/B side
    assert [(c.name, c.page_size, c.env) for c in v2_sets.configs("correct", "on_p64_ip,off_p64")] == [
        ("off_p64", 64, {}), ("on_p64_ip", 64, {"SGLANG_EAGLE_PAGED_FA3_IN_PLACE": "1"})]
    assert [(a.name, b.name) for a, b in v2_sets.pairs("on_p64:on_p64_ip")] == [("on_p64", "on_p64_ip")]


def test_every_server_of_a_v2_run_serves_cuda_graphs_up_to_the_asked_batch():
    from bench import v2_run
    from sglang_eagle_paged.bench import configs

    a = v2_run.parser().parse_args(["ab", "--target", "T", "--draft", "D", "--out", "O", "--cuda-graph-max-bs", "128",
                                    "--load-format", "dummy", "--also-parallel", "128", "--parallel", "64"])
    assert (a.cuda_graph_max_bs, a.load_format, a.also_parallel, a.parallel) == (128, "dummy", "128", 64)
    args = configs.server_args(configs.RunConfig("on_p64", page_size=64, cuda_graph_max_bs=128), "T", "D", 30000, 65536, 0.4)
    flag = configs.graph_flags(1)[0]  # the installed SGLang's name for the decode graphs' largest batch
    assert args[args.index(flag) + 1] == "128"
    default = configs.server_args(configs.RunConfig("on_p64", page_size=64), "T", "D", 30000, 65536, 0.4)
    assert default[default.index(flag) + 1] == "32"


def test_every_configuration_of_the_v2_sets_parses_with_the_installed_sglangs_own_parser():
    """SGLang's own command-line parser takes every server line a device run starts (0.5.23 dropped
    ``--cuda-graph-max-bs`` and ``--disable-piecewise-cuda-graph``: argparse then refused the first as an
    ambiguous prefix and every server of a GPU run died before serving). Runs in each CPU environment:
    0.5.23 here, 0.5.17 in the v517 part."""
    import argparse
    import importlib.metadata

    from bench import v2_sets
    from sglang.srt.server_args import ServerArgs

    from sglang_eagle_paged.bench import configs

    parser = argparse.ArgumentParser(exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    for make in v2_sets.SETS.values():
        for cfg in make():
            args = configs.server_args(cfg, "T", "D", 30000, 65536, 0.4, load_format="dummy")
            parsed = parser.parse_args(args)
            assert parsed.page_size == cfg.page_size, (cfg.name, importlib.metadata.version("sglang"))
    sizes = {flag for flag in ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode") if flag in args}
    assert len(sizes) == 1, args


def test_graph_flags_follow_the_parser_they_are_given():
    from sglang_eagle_paged.bench import configs

    old = frozenset({"--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", "--disable-piecewise-cuda-graph",
                     "--disable-prefill-cuda-graph"})
    new = frozenset({"--cuda-graph-max-bs-decode", "--disable-prefill-cuda-graph"})
    assert configs.graph_flags(64, old) == ["--cuda-graph-max-bs", "64", "--disable-piecewise-cuda-graph"]
    assert configs.graph_flags(64, new) == ["--cuda-graph-max-bs-decode", "64", "--disable-prefill-cuda-graph"]


# ---------------------------------------------------------------- v2_run resume rule, v2_report
def test_a_pair_measured_to_the_end_is_skipped_and_a_cut_short_one_is_not(tmp_path):
    from bench.v2_run import pair_done

    def write(rounds_asked, rounds_done, interrupted=False):
        rec = {"rounds": rounds_asked, "interrupted": interrupted,
               "pairs": {"a:b#0": {"summary": {"16": {"rounds": rounds_done}, "1": {"rounds": rounds_done}}}}}
        (tmp_path / "ab.json").write_text(json.dumps(rec))

    assert not pair_done(tmp_path, 6)  # nothing yet
    write(6, 6)
    assert pair_done(tmp_path, 6)
    assert not pair_done(tmp_path, 8)  # asked for more rounds now
    write(6, 4)
    assert not pair_done(tmp_path, 6)
    write(6, 6, interrupted=True)
    assert not pair_done(tmp_path, 6)


def test_report_compares_outputs_acceptance_and_syncs(tmp_path):
    from bench.v2_report import report

    def rec(mode, page, outputs, acc, compiled):
        return {"config": {"mode": mode, "page_size": page, "backend": "fa3", "extra": []},
                "summary": {"acceptance_length": acc, "output_throughput": 100.0}, "outputs": outputs,
                "tokens": {}, "spec_counts": {k: [40, 10] for k in outputs},
                "triton_compiled_during_run": compiled, "startup_s": 60}
    same = {f"{q}/1": f"answer {q}" for q in range(4)}
    res = {"on_p64": rec("on", 64, same, 4.0, {}),
           "off_p64": rec("off", 64, {**same, "3/1": "answer x"}, 4.0, {"copy_all_layer_kv_cache_tiled": 3}),
           "on_p1": rec("on", 1, same, 4.0, {}),
           "on_p64_ip": rec("on", 64, {**same, "2/1": "answer w"}, 3.9, {}),
           "nospec_p1": rec("nospec", 1, {**same, "0/1": "answer y", "1/1": "answer z"}, 1.0, {})}
    res["on_p64"].update(retractions=3, retracted_reqs=9)  # its pool could not hold the batch
    res["on_p1"].update(retractions=0, retracted_reqs=0)
    (tmp_path / "e2e.json").write_text(json.dumps(res))
    probe = sync_probe.Probe(str(tmp_path / "sync" / "off_p64"))
    try:
        for _ in range(3):
            probe.enter("prepare")
            for _ in range(2):
                warnings.warn(sync_probe.SYNC_MESSAGE)
            probe.exit()
        probe.write()
    finally:
        warnings.showwarning = probe._orig_showwarning
    text = report(tmp_path)
    assert "| on_p64 | off_p64 | 4 | 3 | 1 | 0 | - |" in text
    assert "| on_p64 | on_p1 | 4 | 4 | 0 | 0 | - |" in text
    assert "| on_p64 | nospec_p1 | 4 | 2 | 2 | 0 | - |" in text
    assert "| on_p64_ip | off_p64 | 4 | 2 | 2 | 0 | - |" in text and "| on_p64_ip | on_p64 | 4 | 3 | 1 | 0 | - |" in text
    assert "| off_p64 | prepare | 3 | 6 | 2.0 |" in text
    assert "| off_p64 | off | 64 | fa3 | - | 4.0 | 100.0 | 60 | 3 (copy_all_layer_kv_cache_tiled 3) | - |" in text
    assert "| on_p64 | on | 64 | fa3 | - | 4.0 | 100.0 | 60 | 0 | 3 (9 requests) |" in text
    assert "| on_p1 | on | 1 | fa3 | - | 4.0 | 100.0 | 60 | 0 | 0 |" in text


# ---------------------------------------------------------------- the host-sync probe
@pytest.fixture
def probe(tmp_path):
    modes = []
    p = sync_probe.Probe(str(tmp_path), set_mode=modes.append)
    p.modes = modes
    yield p
    warnings.showwarning = p._orig_showwarning


def _sync():
    warnings.warn(sync_probe.SYNC_MESSAGE, UserWarning)


def test_every_sync_in_a_window_is_counted_per_call_and_line(probe):
    f = probe.wrap("prepare", lambda n: [_sync() for _ in range(n)])
    for n in (2, 2, 0):
        f(n)
    w = probe.counts.as_dict()["windows"]["prepare"]
    assert (w["calls"], w["syncs"], w["per_call"], w["syncs_per_call"]) == (3, 4, {"2": 2, "0": 1}, 1.3333)
    assert list(w["where"]) == [f"test_device_v2_scripts.py:{_sync.__code__.co_firstlineno + 1}"]
    assert probe.modes == ["warn", "default"] * 3


def test_nested_windows_each_count_and_syncs_outside_are_kept_apart(probe):
    inner = probe.wrap("prepare", _sync)
    outer = probe.wrap("draft", lambda: (inner(), _sync()))
    outer()
    _sync()  # the mode is process-wide: another thread's sync is counted apart, never printed
    counts = probe.counts.as_dict()
    assert counts["windows"]["draft"]["syncs"] == 2 and counts["windows"]["prepare"]["syncs"] == 1
    assert counts["outside"] == 1
    assert probe.modes == ["warn", "default"]  # set once, around the outermost window


def test_other_warnings_still_reach_the_log(probe):
    shown = []
    probe._orig_showwarning = lambda *a, **k: shown.append(str(a[0]))
    probe.wrap("draft", lambda: warnings.warn("something else entirely"))()
    assert shown == ["something else entirely"] and probe.counts.windows["draft"]["syncs"] == 0


def _worker_module():
    mod = types.ModuleType("fake_eagle_worker_v2")

    def prepare_for_draft(batch):
        _sync()
        return "fb"

    class EagleDraftWorker:
        def draft(self, batch):
            return mod.prepare_for_draft(batch)  # a module global, as SGLang's draft reads it

    class EAGLEWorkerV2:
        def forward_batch_generation(self, batch):
            return EagleDraftWorker().draft(batch)

    mod.prepare_for_draft, mod.EagleDraftWorker, mod.EAGLEWorkerV2 = prepare_for_draft, EagleDraftWorker, EAGLEWorkerV2
    return mod


class _Batch:
    def __init__(self, extend):
        self.forward_mode = types.SimpleNamespace(is_extend=lambda: extend)


def test_instrument_wraps_the_draft_its_preparation_and_the_step(probe):
    mod = _worker_module()
    done = sync_probe.instrument(mod, probe)
    assert done == ["EagleDraftWorker.draft", "prepare_for_draft", "EAGLEWorkerV2.forward_batch_generation"]
    worker = mod.EAGLEWorkerV2()
    worker.forward_batch_generation(_Batch(extend=False))
    worker.forward_batch_generation(_Batch(extend=True))

    def replacement(batch):  # what a plugin's hook may put in the module after import
        _sync()
        _sync()
        return "fb2"

    mod.prepare_for_draft = replacement
    assert worker.forward_batch_generation(_Batch(extend=False)) == "fb2"
    w = probe.counts.windows
    assert w["step_decode"]["calls"] == 2 and w["step_extend"]["calls"] == 1
    assert w["prepare"]["calls"] == 3 and w["prepare"]["per_call"] == {"1": 2, "2": 1}
    assert w["draft"]["syncs"] == 4


def test_the_probe_wraps_the_module_as_it_is_first_imported(tmp_path, monkeypatch):
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "worker.py").write_text("def prepare_for_draft(b):\n    return b\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    finder = sync_probe._AfterImport("fakepkg.worker", seen.append)
    sys.meta_path.insert(0, finder)
    try:
        import fakepkg.worker as worker
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("fakepkg.worker", None)
        sys.modules.pop("fakepkg", None)
    assert seen == [worker] and worker.prepare_for_draft(3) == 3


@needs_tools
def test_sitecustomize_arms_the_probe_only_when_asked_and_chains_the_next_one(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITECUSTOMIZE'] = 'ran'\n")
    code = ("import os, sys; print(any(type(f).__name__ == '_AfterImport' for f in sys.meta_path), "
            "os.environ.get('OTHER_SITECUSTOMIZE'))")
    base = {**os.environ, "PYTHONPATH": f"{PROBES}:{other}"}
    base.pop(sync_probe.ENV_VAR, None)
    off = subprocess.run([sys.executable, "-c", code], env=base, capture_output=True, text=True, timeout=60)
    on = subprocess.run([sys.executable, "-c", code], env={**base, sync_probe.ENV_VAR: str(tmp_path / "s")},
                        capture_output=True, text=True, timeout=60)
    assert off.stdout.split() == ["False", "ran"], off.stderr
    assert on.stdout.split() == ["True", "ran"], on.stderr


@needs_tools
def test_call_ab_stops_a_pair_once_pooled_with_the_carried_recordings_it_resolves(tmp_path):
    prior = tmp_path / "pooled.json"
    prior.write_text(json.dumps([{"A": "on_p1", "B": "on_p64", "tokens": 256, "parallel": 16, "in_flight": 16,
                                  "rounds": [[0.9, 1.0, 1.1]]}]))
    done = _call(tmp_path, "ab", AB_PAIRS="on_p1:on_p64", AB_KV="65536", AB_UNTIL="3", AB_PRIOR=str(prior))
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("[v2 ab] on_p1:on_p64 stops once its rounds pooled with 3 earlier ones of 1 server pairs at parallel 16 "
            "resolve +-3% (95%, over server pairs)") in done.stdout, done.stdout
    missing = _call(tmp_path, "ab", AB_PAIRS="on_p1:on_p64", AB_KV="65536", AB_UNTIL="3",
                    AB_PRIOR=str(tmp_path / "gone.json"))
    assert missing.returncode != 0 and "gone.json: no such file" in missing.stdout + missing.stderr
    alone = _call(tmp_path, "ab", AB_PAIRS="on_p1:on_p64", AB_KV="65536", AB_PRIOR=str(prior))
    assert alone.returncode != 0 and "--prior pools with earlier recordings only for --until-pct" in alone.stdout


def test_a_pair_that_stopped_resolved_is_skipped_on_resume(tmp_path):
    from bench.v2_run import pair_done

    rec = {"rounds": 400, "pairs": {"a:b#0": {"summary": {"64": {"rounds": 30}}, "resolved": {"64": {"rounds": 60}}}}}
    (tmp_path / "ab.json").write_text(json.dumps(rec))
    assert pair_done(tmp_path, 400)
    (tmp_path / "ab.json").write_text(json.dumps({**rec, "interrupted": True}))
    assert not pair_done(tmp_path, 400)


def test_a_configuration_runs_the_draft_layout_it_names_whatever_the_default(tmp_path, monkeypatch):
    """The dense setting defaults to ``auto``: once a GPU row turns it on, an unnamed configuration would
    switch layout under a benchmark. Each server's environment names the layout its configuration asks."""
    from bench import v2_sets

    from sglang_eagle_paged.bench import configs

    monkeypatch.setenv("SGLANG_EAGLE_PAGED_DENSE_DRAFT", "1")  # the caller's own setting does not leak in
    started = {}

    def launcher(args, *, port, env, log_path, startup_timeout):
        started[log_path] = env
        return None

    for name, want in (("triton_on_p64", "0"), ("off_p64", "0"), ("triton_dense_p64", "1")):
        cfg = v2_sets.configs("correct", name)[0]
        configs.launch(cfg, [], port=30000, log_dir=str(tmp_path), startup_timeout=1, shared_gpu=False,
                       launcher=launcher)
        assert started[f"{tmp_path}/{name}.log"]["SGLANG_EAGLE_PAGED_DENSE_DRAFT"] == want, name
