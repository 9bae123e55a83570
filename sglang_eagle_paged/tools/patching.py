"""``sglang-eagle-paged patch``: make an SGLang release without ``sglang.srt.plugins`` load us.

SGLang 0.5.11 and later discover this package through the ``sglang.srt.plugins``
entry-point group and need nothing here. 0.5.8 .. 0.5.10.post1 have the v1
``EAGLEWorker`` but no plugin loader, so a tiny patch appends a guarded block to
``sglang/srt/speculative/eagle_worker.py`` that calls
``sglang_eagle_paged.adapters.v1.legacy.install_legacy()``. The fix itself stays in
this package; the patch only makes SGLang call it. (Which releases are which:
:mod:`sglang_eagle_paged.releases`.) Older releases differ in the draft preprocess
and get no patch.

The unified-diff applier below is pure Python (no ``patch`` binary needed):
hunks must match exactly (no fuzz), a hunk may sit at a different line than its
header says (an offset, like GNU patch), and every file of a patch is checked
before any file is written, so a patch is applied either entirely or not at all.

Exit codes of ``run``: 0 done, nothing to do, or (``--check``) applied or applies
cleanly; 1 the patch does not match the installed files; 2 no SGLang found or a
release this module does not know.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import importlib.resources
import importlib.util
import os
import re
import sys
import tempfile
from pathlib import Path

# --------------------------------------------------------------------------
# What we patch, and for which releases.
# --------------------------------------------------------------------------

#: The one file the patches touch, relative to site-packages. The scheduler
#: subprocess imports it (lazily, when it builds the EAGLE draft worker) before
#: any EAGLEWorker exists, and only when EAGLE is in use; by the time the
#: appended block runs, every class and helper of the module is defined.
HOOK_FILE = "sglang/srt/speculative/eagle_worker.py"

#: Appended verbatim to HOOK_FILE. Only a missing ``sglang_eagle_paged`` (e.g.
#: uninstalled without ``--revert``) is ignored; any other error surfaces.
HOOK_BLOCK = '''

# >>> sglang-eagle-paged >>>
# Added by `sglang-eagle-paged patch --apply` (undo: `--revert`). This SGLang
# release has no sglang.srt.plugins, so the EAGLE paged-KV fix is installed
# here, in the scheduler process, before the draft worker is built.
try:
    from sglang_eagle_paged.adapters.v1.legacy import install_legacy as _eagle_paged_install
except ModuleNotFoundError as _exc:
    if _exc.name not in ("sglang_eagle_paged", "sglang_eagle_paged.adapters", "sglang_eagle_paged.adapters.v1", "sglang_eagle_paged.adapters.v1.legacy"):
        raise
else:
    _eagle_paged_install()
# <<< sglang-eagle-paged <<<
'''

#: Exact release -> diff file in ``sglang_eagle_paged/tools/patches/``: the releases
#: ``releases.V1_PATCHED`` spans. Releases whose diffs are byte-identical share one file
#: (named after the first). The diffs differ only in their context lines (the end of
#: ``eagle_worker.py``), which is what makes ``--check`` tell a foreign file apart.
#: Regenerate with ``python scripts/survey_sglang_releases.py --write-patches``.
PATCHES = {
    "0.5.8": "sglang-0.5.8.diff",
    "0.5.8.post1": "sglang-0.5.8.diff",
    "0.5.9": "sglang-0.5.9.diff",
    "0.5.10": "sglang-0.5.10.diff",
    "0.5.10.post1": "sglang-0.5.10.diff",
}


class PatchError(Exception):
    """A patch cannot be parsed, or does not match the files it targets."""


# --------------------------------------------------------------------------
# Unified diff parsing.
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    # (tag, line) with tag in " -+"; line keeps its "\n" unless the diff said
    # "\ No newline at end of file".
    lines: list[tuple[str, str]]

    def side(self, new: bool) -> list[str]:
        keep = " +" if new else " -"
        return [text for tag, text in self.lines if tag in keep]


@dataclasses.dataclass
class FilePatch:
    old_path: str | None  # None for /dev/null (file created)
    new_path: str | None  # None for /dev/null (file deleted)
    hunks: list[Hunk]

    @property
    def path(self) -> str:
        return self.new_path or self.old_path  # type: ignore[return-value]


_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip_path(raw: str, strip: int) -> str | None:
    path = raw.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    parts = path.split("/")
    if len(parts) <= strip:
        raise PatchError(f"cannot strip {strip} component(s) from {path!r}")
    return "/".join(parts[strip:])


def _lines(text: str) -> list[str]:
    """Split after each "\\n" only (str.splitlines also splits on \\f, \\x1c, ...)."""
    parts = text.split("\n")
    out = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def parse_unified_diff(text: str, strip: int = 1) -> list[FilePatch]:
    """Parse a unified diff into file patches (``strip`` like ``patch -p``)."""
    lines = _lines(text)
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not (line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1  # "diff --git", "index", prose: ignored
            continue
        fp = FilePatch(_strip_path(line[4:], strip), _strip_path(lines[i + 1][4:], strip), [])
        if fp.old_path is None and fp.new_path is None:
            raise PatchError("both sides of a file patch are /dev/null")
        i += 2
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK_RE.match(lines[i])
            if not m:
                raise PatchError(f"bad hunk header: {lines[i].rstrip()!r}")
            old_len = 1 if m.group(2) is None else int(m.group(2))
            new_len = 1 if m.group(4) is None else int(m.group(4))
            hunk = Hunk(int(m.group(1)), old_len, int(m.group(3)), new_len, [])
            i += 1
            n_old = n_new = 0
            while n_old < old_len or n_new < new_len:
                if i >= len(lines):
                    raise PatchError(f"{fp.path}: hunk truncated")
                body = lines[i]
                if body.startswith("\\"):  # "\ No newline at end of file"
                    if not hunk.lines:
                        raise PatchError(f"{fp.path}: stray {body.rstrip()!r}")
                    tag, prev = hunk.lines[-1]
                    hunk.lines[-1] = (tag, prev.rstrip("\n"))
                    i += 1
                    continue
                tag = body[:1] if body not in ("\n", "\r\n") else " "  # blank context, stripped by some tools
                rest = body[1:] if body not in ("\n", "\r\n") else body
                if tag not in " -+":
                    raise PatchError(f"{fp.path}: bad hunk line {body.rstrip()!r}")
                if not rest.endswith("\n"):
                    rest += "\n"  # last line of the diff text lacked its newline
                hunk.lines.append((tag, rest))
                n_old += tag in " -"
                n_new += tag in " +"
                i += 1
            if n_old != old_len or n_new != new_len:
                raise PatchError(f"{fp.path}: hunk line counts do not match its header")
            if i < len(lines) and lines[i].startswith("\\"):
                tag, prev = hunk.lines[-1]
                hunk.lines[-1] = (tag, prev.rstrip("\n"))
                i += 1
            fp.hunks.append(hunk)
        if not fp.hunks:
            raise PatchError(f"{fp.path}: file patch without hunks")
        files.append(fp)
    if not files:
        raise PatchError("no file patches found")
    return files


# --------------------------------------------------------------------------
# Applying.
# --------------------------------------------------------------------------


def _find(lines: list[str], block: list[str], expected: int, lo: int) -> int | None:
    """Index >= lo where ``block`` occurs in ``lines``, nearest to ``expected``."""
    last = len(lines) - len(block)
    if last < lo:
        return None
    if not block:
        return min(max(expected, lo), len(lines))
    expected = min(max(expected, lo), last)
    for dist in range(0, max(expected - lo, last - expected) + 1):
        for pos in (expected - dist, expected + dist):
            if lo <= pos <= last and lines[pos : pos + len(block)] == block:
                return pos
    return None


def apply_file_patch(text: str | None, fp: FilePatch, reverse: bool = False) -> str | None:
    """Return ``text`` with ``fp`` applied (or reverted). ``None`` means "no file"."""
    creates = fp.old_path is None if not reverse else fp.new_path is None
    deletes = fp.new_path is None if not reverse else fp.old_path is None
    if creates and text is not None:
        raise PatchError(f"{fp.path}: would create a file that already exists")
    if not creates and text is None:
        raise PatchError(f"{fp.path}: file not found")
    lines = [] if text is None else _lines(text)
    out: list[str] = []
    cursor = 0  # lines[:cursor] already consumed
    delta = 0  # how far the original positions have moved so far (offsets)
    for n, hunk in enumerate(fp.hunks, 1):
        old = hunk.side(new=reverse)
        new = hunk.side(new=not reverse)
        start = hunk.new_start if reverse else hunk.old_start
        length = hunk.new_len if reverse else hunk.old_len
        expected = (start if length == 0 else start - 1) + delta
        pos = _find(lines, old, expected, cursor)
        if pos is None:
            raise PatchError(
                f"{fp.path}: hunk #{n} (@@ -{hunk.old_start},{hunk.old_len} "
                f"+{hunk.new_start},{hunk.new_len} @@) does not match"
            )
        delta = pos - (start if length == 0 else start - 1)
        out.extend(lines[cursor:pos])
        out.extend(new)
        cursor = pos + len(old)
    out.extend(lines[cursor:])
    result = "".join(out)
    if deletes:
        if result:
            raise PatchError(f"{fp.path}: file to delete still has content after the patch")
        return None
    return result


def _read(path: Path) -> str | None:
    if not path.exists():
        return None
    # newline="" keeps "\r\n" as is: the match is byte-exact.
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def _write(path: Path, text: str | None) -> None:
    if text is None:
        path.unlink()
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    # A stale bytecode file could outlive the edit (hash-based, unchecked pycs).
    cache = path.parent / "__pycache__"
    if path.suffix == ".py" and cache.is_dir():
        for pyc in cache.glob(f"{path.stem}.*.pyc"):
            try:
                pyc.unlink()
            except OSError:
                pass


def _transform(root: Path, files: list[FilePatch], reverse: bool) -> dict[Path, str | None]:
    """New content of every file, computed before anything is written."""
    return {root / fp.path: apply_file_patch(_read(root / fp.path), fp, reverse) for fp in files}


APPLIED, UNAPPLIED = "applied", "not applied"


def patch_state(root: Path, diff_text: str) -> tuple[str, str]:
    """(state, detail): state is APPLIED, UNAPPLIED (applies cleanly) or "conflict".

    Reverse application is tried first: a patch that only appends lines would
    also apply forwards a second time, since its context is still there.
    """
    files = parse_unified_diff(diff_text)
    try:
        _transform(root, files, reverse=True)
        return APPLIED, "the patch is applied"
    except PatchError:
        pass
    try:
        _transform(root, files, reverse=False)
        return UNAPPLIED, "the patch is not applied and applies cleanly"
    except PatchError as exc:
        return "conflict", f"the patch neither applies nor reverts: {exc}"


def apply_patch(root: Path, diff_text: str, reverse: bool = False) -> bool:
    """Apply (or revert) idempotently. Returns False if there was nothing to do."""
    state, detail = patch_state(root, diff_text)
    if state == (UNAPPLIED if reverse else APPLIED):
        return False
    if state == "conflict":
        raise PatchError(detail)
    for path, text in _transform(root, parse_unified_diff(diff_text), reverse).items():
        _write(path, text)
    return True


# --------------------------------------------------------------------------
# Finding SGLang and the patch for it.
# --------------------------------------------------------------------------

_VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)


def find_sglang_root() -> Path | None:
    """The directory holding the ``sglang`` package, found without importing it."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).parent


def sglang_version(root: Path | None = None) -> str | None:
    """Version of the sglang tree under ``root``: its version files, else metadata."""
    if root is not None:
        for name in ("version.py", "_version.py"):
            text = _read(root / "sglang" / name)
            m = _VERSION_RE.search(text or "")
            if m:
                return m.group(1)
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def patch_dir() -> Path:
    """``sglang_eagle_paged/tools/patches``: works from a checkout and from a wheel."""
    return Path(str(importlib.resources.files("sglang_eagle_paged.tools").joinpath("patches")))


def patch_for(version: str) -> Path | None:
    name = PATCHES.get(version.split("+", 1)[0])
    return None if name is None else patch_dir() / name


def _plugin_release(version: str) -> bool:
    from ..releases import support

    return support(version, check_hook_points=lambda _v: None).route in ("plugin", "untested")


# --------------------------------------------------------------------------
# CLI.
# --------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", dest="action", action="store_const", const="check",
                        help="report whether the patch is applied or applies cleanly (default)")
    action.add_argument("--apply", dest="action", action="store_const", const="apply",
                        help="apply the patch (nothing to do if already applied)")
    action.add_argument("--revert", dest="action", action="store_const", const="revert",
                        help="revert the patch (nothing to do if not applied)")
    action.add_argument("--list", dest="action", action="store_const", const="list",
                        help="list the releases this command knows")
    parser.set_defaults(action="check")
    parser.add_argument("--root", type=Path, default=None,
                        help="directory holding the sglang package (default: the installed one, "
                             "found without importing it)")
    parser.add_argument("--sglang-version", default=None,
                        help="override the detected SGLang version")


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    if args.action == "list":
        for version, name in PATCHES.items():
            print(f"{version:14s} {name}", file=out)
        print("0.5.11 and later (no patch: sglang.srt.plugins loads the entry point)", file=out)
        return 0

    root = args.root if args.root is not None else find_sglang_root()
    if root is None or not (root / "sglang").is_dir():
        print("sglang-eagle-paged patch: no SGLang installation found"
              + (f" under {root}" if root is not None else ""), file=sys.stderr)
        return 2
    version = args.sglang_version or sglang_version(root)
    if version is None:
        print(f"sglang-eagle-paged patch: cannot tell the SGLang version under {root}", file=sys.stderr)
        return 2
    print(f"SGLang {version} at {root / 'sglang'}", file=out)

    base = version.split("+", 1)[0]
    if _plugin_release(base):
        print(f"No patch needed: SGLang {base} has sglang.srt.plugins and loads "
              "sglang-eagle-paged through its entry point.", file=out)
        return 0
    patch = patch_for(version)
    if patch is None:
        print(
            f"sglang-eagle-paged patch: no patch for SGLang {version}. Supported: "
            f"0.5.11 and later (plugin framework, no patch needed) and, through a patch, "
            f"{', '.join(PATCHES)}.", file=sys.stderr)
        return 2
    if not patch.is_file():
        print(f"sglang-eagle-paged patch: {patch} is missing from this installation", file=sys.stderr)
        return 2
    diff_text = patch.read_text(encoding="utf-8")
    print(f"Patch: {patch.name}", file=out)
    try:
        if args.action == "check":
            state, detail = patch_state(root, diff_text)
            print(f"State: {detail}", file=out)
            return 1 if state == "conflict" else 0
        changed = apply_patch(root, diff_text, reverse=args.action == "revert")
    except PatchError as exc:
        print(f"sglang-eagle-paged patch: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"sglang-eagle-paged patch: cannot write: {exc}", file=sys.stderr)
        return 1
    if args.action == "apply":
        print("Applied." if changed else "Already applied: nothing to do.", file=out)
    else:
        print("Reverted." if changed else "Not applied: nothing to revert.", file=out)
    return 0
