"""The README's launch command is one the installed SGLang accepts: its entry point, and every flag
in SGLang 0.5.23's own server arguments (read from SGLang, not listed here)."""

import argparse
import importlib.metadata
import re
import warnings
from pathlib import Path

import pytest

if importlib.metadata.version("sglang") != "0.5.23":
    pytest.skip("needs SGLang 0.5.23 (scripts/setup_cpu.sh builds it)", allow_module_level=True)

README = Path(__file__).resolve().parents[1] / "README.md"


def _launch_command() -> str:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
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
