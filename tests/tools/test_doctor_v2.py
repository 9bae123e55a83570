"""On SGLang 0.5.23 (the v2 CPU environment): ``doctor`` reports v2 active with its hooks and a passing
self-test, the demo drives SGLang's own prepare_for_draft with our duplication hooked in, start-up
warns where it should, and the README's launch command is one this SGLang accepts."""

import argparse
import importlib.metadata
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

if importlib.metadata.version("sglang") != "0.5.23":
    pytest.skip("needs SGLang 0.5.23 (scripts/setup_cpu.sh builds it)", allow_module_level=True)

CLI = Path(sys.executable).parent / "sglang-eagle-paged"
ROOT = Path(__file__).resolve().parents[2]


def _run(*args, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE_PAGED")}
    full.update(TRITON_INTERPRET="1", **env)
    return subprocess.run([str(CLI), *args], env=full, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_doctor_reports_v2_active_and_its_self_test_passes():
    p = _run("doctor")
    out = p.stdout
    assert p.returncode == 0, out + p.stderr[-3000:]
    assert "SGLang 0.5.23: v2 worker, through the plugin entry point" in out
    assert any(line.startswith("[ok  ] hook") and "eagle_worker_common.duplicate_prefix_tail_to_draft_branches" in line
               for line in out.splitlines()), out
    # per backend class of this release, the decision a server's hook makes (the same function, run here)
    import pkgutil

    from sglang_eagle_paged.adapters.v2 import backends

    for path, (name, _reads, _why) in backends.READERS.items():
        cls = pkgutil.resolve_name(path)
        copy, reason, _in_place = backends.copy_needed(cls.__new__(cls))
        line = next(x for x in out.splitlines() if f"copy ({name})" in x)
        assert line.endswith(reason) and ("one launch" in line if copy else "skipped: " in line), line
    assert "skipped" in out and "one launch" in out
    assert "[ok  ] kernel self-test" in out and "the v2 duplication against SGLang's" in out
    assert "all checks passed" in out



def test_doctor_says_whether_fa3_reads_in_place():
    off = _run("doctor", "--no-self-test").stdout
    assert "fa3 in place" in off and "SGLANG_EAGLE_PAGED_FA3_IN_PLACE unset: fa3 copies the prefix tail" in off
    on = _run("doctor", "--no-self-test", SGLANG_EAGLE_PAGED_FA3_IN_PLACE="1").stdout
    assert "on (SGLANG_EAGLE_PAGED_FA3_IN_PLACE): fa3's draft reads the prefix tail where it lies" in on  # 0.5.23: proven


def test_doctor_says_whether_the_dense_draft_layout_is_asked_and_installs_its_hooks():
    off = _run("doctor", "--no-self-test").stdout
    assert "off (SGLANG_EAGLE_PAGED_DENSE_DRAFT unset or auto: " in off and "proven on no release yet" in off
    on = _run("doctor", "--no-self-test", SGLANG_EAGLE_PAGED_DENSE_DRAFT="1").stdout
    assert "asked (SGLANG_EAGLE_PAGED_DENSE_DRAFT): page 1's draft slots" in on  # 0.5.23: proven
    hooked = [line for line in on.splitlines()
              if line.startswith("[ok  ] hook") or ("hook (optional)" in line and line.endswith("applied"))]
    for target in ("get_alloc_len_per_decode", "eagle_worker_common.prepare_for_draft",
                   "triton_backend.generate_draft_decode_kv_indices",
                   "flashinfer_backend.generate_draft_decode_kv_indices"):
        assert any(target in line for line in hooked), on


def test_each_hook_line_says_which_hook_it_is():
    """Two AFTER hooks sit on each draft worker's ``init_attention_backend`` (the draft plan and warm-up,
    and fa3's metadata kernels compiled ahead): doctor's line for each says which it is (issue 64)."""
    from sglang_eagle_paged import settings
    from sglang_eagle_paged.adapters import v2
    from sglang_eagle_paged.tools.doctor import _what

    for env in ({}, {settings.FA3_IN_PLACE: "1", settings.DENSE_DRAFT: "1"}):
        lines = [f"{h.target} ({_what(h)})" for h in v2.hooks(settings.parse(env), "0.5.23")]
        assert len(lines) == len(set(lines)), sorted(x for x in lines if lines.count(x) > 1)
    out = _run("doctor", "--no-self-test").stdout
    applied = [line for line in out.splitlines() if "init_attention_backend" in line]
    assert len(applied) >= 2 and len(applied) == len(set(applied)), applied


def test_doctor_says_which_fa3_metadata_builders_serve():
    unset = _run("doctor", "--no-self-test").stdout  # 0.5.23: proven, so the default serves
    assert "fused (SGLANG_EAGLE_PAGED_FA3_EXPAND unset: the default): the draft round's FA3 metadata" in unset
    off = _run("doctor", "--no-self-test", SGLANG_EAGLE_PAGED_FA3_EXPAND="off").stdout
    assert "SGLang's builders (SGLANG_EAGLE_PAGED_FA3_EXPAND=off)" in off
    fused = _run("doctor", "--no-self-test", SGLANG_EAGLE_PAGED_FA3_EXPAND="fused").stdout
    assert "fused (SGLANG_EAGLE_PAGED_FA3_EXPAND=fused): the draft round's FA3 metadata in one launch" in fused
    # the hooks doctor installed, as a server would: both builders' targets
    assert any(line.startswith("[ok  ] hook") and "init_forward_metadata_out_graph" in line
               for line in fused.splitlines()), fused
    from sglang_eagle_paged import settings
    from sglang_eagle_paged.tools.doctor_v2 import fa3_metadata_line as _fa3_metadata_line

    line = _fa3_metadata_line(settings.parse({settings.FA3_EXPAND: "fused"}), "0.5.15.post1")
    assert line.startswith("expand (SGLANG_EAGLE_PAGED_FA3_EXPAND=fused): the expand builder replaced; ") \
        and "0.5.15.post1" in line and "bounds the draft page table" in line
    # unset on a release the proof does not cover: SGLang's builders, and the one line says why
    line = _fa3_metadata_line(settings.parse({}), "0.5.13.post1")
    assert line.startswith("SGLang's builders: the fused FA3 draft metadata (the v2 default) does nothing on "
                           "SGLang 0.5.13.post1") and "bounds the draft page table" in line

def test_doctor_explicit_on_where_unsupported_is_one_clear_failure():
    p = _run("doctor", "--no-self-test", SGLANG_EAGLE_PAGED="bogus")
    assert p.returncode != 0 and "SGLANG_EAGLE_PAGED='bogus' is not one of: on, off, fake" in p.stdout
    assert p.stdout.strip().splitlines()[-1] == "doctor: problems found (see FAIL lines)"  # always the summary


def test_demo_on_v2():
    p = _run("demo")
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "SGLang's v2 prepare_for_draft" in p.stdout
    assert "draft slots as expected (branch 2 starts at slot 27), every branch reads the prefix: True" in p.stdout
    assert "OK: every branch reads the prefix's KV; index-only (fake) does not." in p.stdout
    # what the user needs, nothing of SGLang's: no stop of its batch building, no import warnings
    assert "AttributeError" not in p.stdout + p.stderr and "Only CUDA" not in p.stderr


def test_demo_at_page_one_has_nothing_to_copy_and_says_ok():
    p = _run("demo", "--page-size", "1", "--batch-size", "2")
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "OK: every branch reads the prefix's KV (this batch has nothing to copy, so fake is right too)." in p.stdout


def test_fake_and_v1_only_settings_warn_at_start_up():
    code = ("import logging; logging.basicConfig(format='%(levelname)s %(message)s')\n"
            "from sglang_eagle_paged import plugin; plugin.register(); print(plugin.active_mode())")
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE_PAGED")}
    full.update(TRITON_INTERPRET="1", SGLANG_EAGLE_PAGED="fake", SGLANG_EAGLE_PAGED_CHECK_PREFIX="1")
    p = subprocess.run([sys.executable, "-c", code], env=full, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stdout.split() == ["fake"], p.stderr[-3000:]
    lines = p.stderr.splitlines()
    assert "WARNING [sglang-eagle-paged] SGLANG_EAGLE_PAGED=fake: draft branches read KV that was never copied, " \
           "so drafts are wrong by design (acceptance drops); for A/B benchmarks only, never for serving" in lines
    assert ("WARNING [sglang-eagle-paged] SGLANG_EAGLE_PAGED_CHECK_PREFIX: no effect on SGLang 0.5.23 "
            "(v2 adapter; v1 releases only)") in lines


def test_doctor_flags_fake_and_a_setting_that_does_nothing():
    p = _run("doctor", "--no-self-test", SGLANG_EAGLE_PAGED="fake", SGLANG_EAGLE_PAGED_ALLOW_TRITON="1")
    assert "[WARN] mode                   SGLANG_EAGLE_PAGED=fake: draft branches read KV that was never copied" in p.stdout
    assert "[WARN] settings               SGLANG_EAGLE_PAGED_ALLOW_TRITON: no effect on this SGLang" in p.stdout
    # the report is doctor's own: its progress on stderr, none of SGLang's import warnings
    assert "doctor: importing SGLang" in p.stderr and "Only CUDA" not in p.stderr
    assert "Cannot detect CUDA architecture" not in p.stderr



def test_doctor_names_an_sglang_import_failure_once():
    """An SGLang module that cannot import (as when a dependency of SGLang's is missing): doctor
    names that import error, once, not a hook point that "has no attribute"."""
    code = ("import sys; sys.modules['sglang.srt.layers.logprob_processor'] = None  # an import that fails\n"
            "from sglang_eagle_paged.tools.cli import main; sys.exit(main(['doctor', '--no-self-test']))")
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE_PAGED")}
    full.update(TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, "-c", code], env=full, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr[-3000:]
    both = p.stdout + p.stderr
    assert "has no attribute" not in both
    named = [line for line in both.splitlines() if "logprob_processor" in line]
    assert len(named) == 1 and named[0].startswith("[FAIL]") and "importing it fails" in named[0], named
    assert both.count("logprob_processor") == 1
    assert p.stdout.strip().splitlines()[-1] == "doctor: problems found (see FAIL lines)"

# --- the README's launch command: its entry point and every flag in 0.5.23's own server arguments

def _launch_command() -> str:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    (command,) = [b for b in blocks if "--speculative-algorithm" in b]
    return command.replace("\\\n", " ")


def test_the_readme_launches_with_sglang_serve_and_flags_sglang_knows():
    command = _launch_command()
    assert command.split()[:2] == ["sglang", "serve"]
    entry = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="console_scripts")}
    assert entry.get("sglang") == "sglang.cli.main:main"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sglang.srt.server_args import ServerArgs
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    known = {option for action in parser._actions for option in action.option_strings}
    flags = [word for word in command.split() if word.startswith("--")]
    assert len(flags) >= 8 and not [f for f in flags if f not in known], [f for f in flags if f not in known]
