"""The legacy-release patches and the pure-Python unified-diff applier.

Real wheels: for every release in ``patching.PATCHES`` the published wheel is
downloaded once (``pip download --no-deps``) into
``~/.cache/sglang-eagle-paged/wheels`` (or ``$SGLANG_EAGLE_PAGED_WHEEL_CACHE``),
unpacked into a temporary directory, patched, byte-compiled, reverted and
compared byte for byte with the original tree. Importing the patched SGLang is
not attempted: old releases cannot be imported on a CPU machine without their
GPU dependencies, so ``py_compile`` (syntax and compile-time errors) is the
check. Without network access the wheel tests are skipped with the reason.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import io
import os
import py_compile
import subprocess
import sys
import types
import zipfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from sglang_eagle_paged import releases
from sglang_eagle_paged.adapters.v1 import sglang_api as compat
from sglang_eagle_paged.tools import patching
from sglang_eagle_paged.tools.patching import (
    APPLIED,
    UNAPPLIED,
    PatchError,
    apply_file_patch,
    apply_patch,
    parse_unified_diff,
    patch_state,
)

WHEEL_CACHE = Path(
    os.environ.get("SGLANG_EAGLE_PAGED_WHEEL_CACHE", Path.home() / ".cache" / "sglang-eagle-paged" / "wheels")
)


# --------------------------------------------------------------------------
# Helpers.
# --------------------------------------------------------------------------


def _split(text: str) -> list[str]:
    """Lines broken after "\\n" only (str.splitlines would also break at "\\f")."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def udiff(old: str, new: str, path: str = "pkg/mod.py", n: int = 3) -> str:
    """A unified diff as GNU diff writes it (difflib omits the no-newline markers)."""
    out = []
    for line in difflib.unified_diff(_split(old), _split(new), f"a/{path}", f"b/{path}", n=n):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def run_cli(*argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    patching.add_arguments(parser)
    args = parser.parse_args(list(argv))
    buf = io.StringIO()
    with redirect_stdout(buf), redirect_stderr(buf):
        rc = patching.run(args)
    return rc, buf.getvalue()


ORIGINAL = "".join(f"line {i}\n" for i in range(1, 41))


def _edited(text: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[4] = "line 5 changed\n"
    lines.insert(20, "inserted\n")
    del lines[35]
    return "".join(lines) + "appended\n"


# --------------------------------------------------------------------------
# The applier on synthetic files.
# --------------------------------------------------------------------------


def test_apply_revert_roundtrip_and_idempotence(tmp_path):
    target = tmp_path / "pkg" / "mod.py"
    target.parent.mkdir()
    target.write_text(ORIGINAL)
    diff = udiff(ORIGINAL, _edited(ORIGINAL))
    assert len(parse_unified_diff(diff)[0].hunks) == 3

    assert patch_state(tmp_path, diff)[0] == UNAPPLIED
    assert apply_patch(tmp_path, diff) is True
    assert target.read_text() == _edited(ORIGINAL)
    assert patch_state(tmp_path, diff)[0] == APPLIED
    assert apply_patch(tmp_path, diff) is False  # already applied: no-op
    assert target.read_text() == _edited(ORIGINAL)

    assert apply_patch(tmp_path, diff, reverse=True) is True
    assert target.read_text() == ORIGINAL
    assert apply_patch(tmp_path, diff, reverse=True) is False  # not applied: no-op
    assert target.read_text() == ORIGINAL


def test_append_only_patch_is_not_applied_twice(tmp_path):
    # Its context survives the first application; the state check must still say "applied".
    (tmp_path / "pkg").mkdir()
    target = tmp_path / "pkg" / "mod.py"
    target.write_text(ORIGINAL)
    diff = udiff(ORIGINAL, ORIGINAL + patching.HOOK_BLOCK)
    apply_patch(tmp_path, diff)
    apply_patch(tmp_path, diff)
    assert target.read_text().count("sglang-eagle-paged >>>") == 1


def test_refuses_on_mismatch_and_writes_nothing(tmp_path):
    (tmp_path / "pkg").mkdir()
    first, second = tmp_path / "pkg" / "mod.py", tmp_path / "pkg" / "other.py"
    first.write_text(ORIGINAL)
    second.write_text(ORIGINAL)
    diff = udiff(ORIGINAL, _edited(ORIGINAL)) + udiff(ORIGINAL, _edited(ORIGINAL), "pkg/other.py")
    second.write_text(ORIGINAL.replace("line 6\n", "line six\n"))  # a context line of hunk 1
    state, detail = patch_state(tmp_path, diff)
    assert state == "conflict" and "other.py" in detail and "hunk #1" in detail
    with pytest.raises(PatchError):
        apply_patch(tmp_path, diff)
    assert first.read_text() == ORIGINAL  # all or nothing
    with pytest.raises(PatchError):
        apply_patch(tmp_path, diff, reverse=True)


def test_missing_file_is_a_conflict(tmp_path):
    state, detail = patch_state(tmp_path, udiff(ORIGINAL, _edited(ORIGINAL)))
    assert state == "conflict" and "not found" in detail


def test_offset_hunks_apply(tmp_path):
    diff = udiff(ORIGINAL, _edited(ORIGINAL))
    shifted = "".join(f"header {i}\n" for i in range(7)) + ORIGINAL
    fp, = parse_unified_diff(diff)
    patched = apply_file_patch(shifted, fp)
    assert patched == "".join(f"header {i}\n" for i in range(7)) + _edited(ORIGINAL)
    assert apply_file_patch(patched, fp, reverse=True) == shifted


def test_no_newline_at_end_of_file():
    old, new = "a\nb\nc", "a\nB\nc"
    diff = udiff(old, new)
    assert "\\ No newline at end of file" in diff
    fp, = parse_unified_diff(diff)
    assert apply_file_patch(old, fp) == new
    assert apply_file_patch(new, fp, reverse=True) == old
    grow = udiff(old, old + "\nd\n")
    fp, = parse_unified_diff(grow)
    assert apply_file_patch(old, fp) == old + "\nd\n"
    assert apply_file_patch(old + "\nd\n", fp, reverse=True) == old


def test_exact_match_only():
    fp, = parse_unified_diff(udiff(ORIGINAL, _edited(ORIGINAL)))
    with pytest.raises(PatchError):
        apply_file_patch(ORIGINAL.replace("line 5\n", "line 5 \n"), fp)  # trailing blank
    with pytest.raises(PatchError):
        apply_file_patch(ORIGINAL.replace("\n", "\r\n"), fp)  # line endings are part of the match


def test_form_feed_is_not_a_line_break():
    old = "a\n\x0c\nb\nc\n"
    fp, = parse_unified_diff(udiff(old, old.replace("b", "B")))
    assert apply_file_patch(old, fp) == old.replace("b", "B")


def test_create_and_delete_files(tmp_path):
    diff = (
        "--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n"
    )
    assert apply_patch(tmp_path, diff) is True
    assert (tmp_path / "pkg" / "new.py").read_text() == "x = 1\ny = 2\n"
    assert patch_state(tmp_path, diff)[0] == APPLIED
    assert apply_patch(tmp_path, diff, reverse=True) is True
    assert not (tmp_path / "pkg" / "new.py").exists()


@pytest.mark.parametrize("bad", [
    "",
    "just prose\n",
    "--- a/x\n+++ b/x\n",  # no hunks
    "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n",  # truncated
    "--- a/x\n+++ b/x\n@@ -1 +1 @@\n?a\n",  # bad tag
    "--- a/x\n+++ b/x\n@@ bogus @@\n",
])
def test_parse_errors(bad):
    with pytest.raises(PatchError):
        parse_unified_diff(bad)


def test_stale_bytecode_is_dropped(tmp_path):
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    target = tmp_path / "pkg" / "mod.py"
    target.write_text(ORIGINAL)
    pyc = tmp_path / "pkg" / "__pycache__" / "mod.cpython-311.pyc"
    pyc.write_bytes(b"stale")
    keep = tmp_path / "pkg" / "__pycache__" / "module.cpython-311.pyc"
    keep.write_bytes(b"other module")
    apply_patch(tmp_path, udiff(ORIGINAL, _edited(ORIGINAL)))
    assert not pyc.exists() and keep.exists()


# --------------------------------------------------------------------------
# The hook block and the shipped patches.
# --------------------------------------------------------------------------


def _exec_hook(monkeypatch, legacy):
    monkeypatch.setitem(sys.modules, "sglang_eagle_paged.adapters.v1.legacy", legacy)
    exec(compile(patching.HOOK_BLOCK, "eagle_worker.py", "exec"), {"__name__": "eagle_worker_under_test"})


def test_hook_calls_install_legacy(monkeypatch):
    calls = []
    legacy = types.ModuleType("sglang_eagle_paged.adapters.v1.legacy")
    legacy.install_legacy = lambda: calls.append(1)
    _exec_hook(monkeypatch, legacy)
    assert calls == [1]


def test_hook_is_silent_without_the_package(monkeypatch):
    _exec_hook(monkeypatch, None)  # None in sys.modules: ModuleNotFoundError for that name


def test_hook_does_not_hide_other_import_errors(monkeypatch):
    legacy = types.ModuleType("sglang_eagle_paged.adapters.v1.legacy")

    def __getattr__(name):
        raise ModuleNotFoundError("No module named 'triton'", name="triton")

    legacy.__getattr__ = __getattr__
    with pytest.raises(ModuleNotFoundError, match="triton"):
        _exec_hook(monkeypatch, legacy)


def test_mapping_and_shipped_files_agree():
    shipped = {p.name for p in patching.patch_dir().glob("*.diff")}
    assert shipped == set(patching.PATCHES.values())
    from sglang_eagle_paged import releases

    assert {releases.support(v).route for v in patching.PATCHES} == {"patch"}


@pytest.mark.parametrize("name", sorted(set(patching.PATCHES.values())))
def test_patches_are_minimal(name):
    text = (patching.patch_dir() / name).read_text()
    fp, = parse_unified_diff(text)
    assert fp.old_path == fp.new_path == patching.HOOK_FILE
    hunk, = fp.hunks
    assert not [line for tag, line in hunk.lines if tag == "-"]
    assert "".join(line for tag, line in hunk.lines if tag == "+") == patching.HOOK_BLOCK


# --------------------------------------------------------------------------
# CLI on synthetic trees.
# --------------------------------------------------------------------------


def _fake_sglang(root: Path, version: str) -> Path:
    (root / "sglang").mkdir(parents=True)
    (root / "sglang" / "version.py").write_text(f'__version__ = "{version}"\n')
    return root


def test_cli_plugin_framework_release_needs_no_patch(tmp_path):
    rc, out = run_cli("--apply", "--root", str(_fake_sglang(tmp_path, "0.5.12.post1")))
    assert rc == 0 and "No patch needed" in out and "SGLang 0.5.12.post1 has sglang.srt.plugins" in out
    rc, out = run_cli("--apply", "--root", str(_fake_sglang(tmp_path / "v2", "0.5.23")))
    assert rc == 0 and "No patch needed" in out


def test_cli_refuses_unknown_release(tmp_path):
    rc, out = run_cli("--check", "--root", str(_fake_sglang(tmp_path, "0.4.10")))
    assert rc == 2 and "no patch for SGLang 0.4.10" in out and "no patch needed" in out


def test_cli_reports_conflict(tmp_path):
    root = _fake_sglang(tmp_path, "0.5.9")
    (root / "sglang/srt/speculative").mkdir(parents=True)
    (root / patching.HOOK_FILE).write_text("unrelated\n")
    rc, out = run_cli("--check", "--root", str(root))
    assert rc == 1 and "neither applies nor reverts" in out
    rc, out = run_cli("--apply", "--root", str(root))
    assert rc == 1 and (root / patching.HOOK_FILE).read_text() == "unrelated\n"


def test_cli_list():
    rc, out = run_cli("--list")
    assert rc == 0 and "0.5.8 " in out and "0.5.10.post1" in out and "0.5.11 and later" in out and "0.5.7" not in out


# --------------------------------------------------------------------------
# Real wheels.
# --------------------------------------------------------------------------


_download_failure: list[str] = []  # first failure: skip the other downloads at once


def _wheel(version: str) -> Path:
    hits = sorted(WHEEL_CACHE.glob(f"sglang-{version}-*.whl"))
    if hits:
        return hits[0]
    if _download_failure:
        pytest.skip(f"sglang=={version} not cached and an earlier download failed: {_download_failure[0]}")
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--retries", "1", "--timeout", "20", "-d", str(WHEEL_CACHE), f"sglang=={version}"],
            capture_output=True, text=True, timeout=240,
        )
        reason = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    except subprocess.TimeoutExpired:
        reason = ["pip download timed out"]
    hits = sorted(WHEEL_CACHE.glob(f"sglang-{version}-*.whl"))
    if not hits:
        _download_failure.append(reason[0])
        pytest.skip(f"cannot download the sglang=={version} wheel (no network?): {reason[0]}")
    return hits[0]


@pytest.mark.parametrize("version", list(patching.PATCHES))
def test_patch_on_real_wheel(version, tmp_path):
    with zipfile.ZipFile(_wheel(version)) as zf:
        zf.extractall(tmp_path, [n for n in zf.namelist() if n.startswith("sglang/")])
    before = tree_hashes(tmp_path)

    rc, out = run_cli("--check", "--root", str(tmp_path))
    assert rc == 0 and f"SGLang {version}" in out and "applies cleanly" in out, out
    hooked = tmp_path / patching.HOOK_FILE
    if releases.patched_release(version):
        # Our worker would decline on this release, so the command refuses to patch it;
        # the diff itself is still checked against the real wheel, through the library.
        rc, out = run_cli("--apply", "--root", str(tmp_path))
        assert rc == 2 and "not applied" in out and tree_hashes(tmp_path) == before, out
        assert patching.apply_patch(tmp_path, patching.patch_for(version).read_text())
    else:
        rc, out = run_cli("--apply", "--root", str(tmp_path))
        assert rc == 0 and "Applied." in out, out
        rc, out = run_cli("--apply", "--root", str(tmp_path))
        assert rc == 0 and "Already applied" in out, out
        rc, out = run_cli("--check", "--root", str(tmp_path))
        assert rc == 0 and "is applied" in out, out
    assert hooked.read_text().endswith(patching.HOOK_BLOCK)
    # Byte-compile only: importing an old SGLang needs its GPU dependencies.
    py_compile.compile(str(hooked), cfile=str(tmp_path / "check.pyc"), doraise=True)
    (tmp_path / "check.pyc").unlink()

    rc, out = run_cli("--revert", "--root", str(tmp_path))
    assert rc == 0 and "Reverted." in out, out
    rc, out = run_cli("--revert", "--root", str(tmp_path))
    assert rc == 0 and "nothing to revert" in out, out
    assert tree_hashes(tmp_path) == before
