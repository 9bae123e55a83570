"""The console script as a new user meets it: a description, --version, help for every option
with its default, arguments checked with one line, and one line (no traceback) where torch or a
server is missing. Nothing here imports SGLang."""

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle_paged import __version__
from sglang_eagle_paged.tools import cli

ROOT = Path(__file__).resolve().parents[2]


def _subparsers(parser):
    (group,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return group.choices


def test_help_describes_the_package_and_version_prints_it(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    assert "EAGLE tree speculative decoding on a paged KV cache" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"sglang-eagle-paged {__version__}"


@pytest.mark.parametrize("command", list(cli.SUBCOMMANDS))
def test_every_option_has_help_and_shows_its_default(command):
    sub = _subparsers(cli.build_parser())[command]
    text = " ".join(sub.format_help().split())
    for action in sub._actions:
        if not action.option_strings or action.dest == "help":
            continue
        assert action.help, f"{command} {action.option_strings[0]} has no help text"
        if action.default not in (None, argparse.SUPPRESS) and action.nargs != 0:
            shown = action.default if isinstance(action.default, str) else repr(action.default)
            assert f"default: {action.default}" in text or f"default: {shown}" in text, \
                f"{command} {action.option_strings[0]}: default {action.default!r} not in its help"


@pytest.mark.parametrize("option", ["--page-size", "--batch-size", "--topk", "--steps"])
def test_demo_refuses_a_size_below_one_in_one_line(option, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["demo", option, "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: 0 is too small: it must be at least 1" in err and "Traceback" not in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bench_without_a_server_fails_early_in_one_line(capsys):
    port = _free_port()
    assert cli.main(["bench", "--port", str(port), "--num-questions", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and f"no server answers at http://127.0.0.1:{port}" in captured.err


@pytest.mark.parametrize("command", ["doctor", "demo"])
def test_without_torch_one_line_not_a_traceback(command):
    # torch made unimportable in this process only (as where SGLang is not installed)
    code = ("import sys; sys.modules['torch'] = None\n"
            "from sglang_eagle_paged.tools.cli import main\n"
            f"sys.exit(main([{command!r}]))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    out = p.stdout + p.stderr
    assert "torch cannot be imported" in out and "install SGLang first" in out
    if command == "doctor":  # its report always ends with the summary
        assert p.stdout.strip().splitlines()[-1] == "doctor: problems found (see FAIL lines)"
