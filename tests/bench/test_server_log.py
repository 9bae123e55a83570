"""The path a server ran, read from its own log (issue 61.5): the plugin's start-up lines reach SGLang's
log at --log-level warning too, and a benchmark record names the mode and draft layout from them."""

import importlib.metadata
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest

import sglang_eagle_paged
from sglang_eagle_paged.bench import server_log
from sglang_eagle_paged.bench.ab import record_served
from sglang_eagle_paged.bench.configs import RunConfig

ROOT = Path(__file__).resolve().parents[2]
PKG = Path(sglang_eagle_paged.__file__).resolve().parent

# A server process as SGLang 0.5.23 starts one: plugins first (load_plugins runs the entry point,
# here plugin.register as it calls it), then its own logging set-up (configure_logger, through the
# name the scheduler imports it by, with the scheduler's prefix), then the server's lines.
SERVER = """
import logging, sys
from types import SimpleNamespace
from sglang_eagle_paged import plugin
plugin.register()
from sglang.srt.utils import configure_logger
configure_logger(SimpleNamespace(log_level=sys.argv[1]), prefix=" TP0")
logging.getLogger("sglang.srt.managers.scheduler").info("an INFO line of SGLang's")
logging.getLogger("sglang.srt.managers.scheduler").warning("a WARNING line of SGLang's")
logging.getLogger("sglang_eagle_paged").info("[sglang-eagle-paged] a start-up line after SGLang's set-up")
"""


def _server_log(level: str, **env) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE_PAGED")}
    full.update(PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", **env)
    p = subprocess.run([sys.executable, "-W", "ignore", "-c", SERVER, level], env=full, cwd="/",
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stderr


needs_v2 = pytest.mark.skipif(importlib.metadata.version("sglang") != "0.5.23",
                              reason="SGLang 0.5.23's own logging set-up (the v2 CPU environment)")


@needs_v2
@pytest.mark.parametrize("level", ["info", "warning"])
def test_the_plugins_start_up_lines_reach_sglangs_log_at_info_and_warning(level):
    text = _server_log(level, SGLANG_EAGLE_PAGED="on")
    found = server_log.served(text)
    assert found["plugin"] == "on" and found["layout"] == "per-branch", text[-3000:]
    assert any(line.startswith("[sglang-eagle-paged] active: mode=on, v2 adapter") for line in found["lines"])
    # after SGLang's set-up: in its format (time, process), at either level
    assert "TP0] [sglang-eagle-paged] a start-up line after SGLang's set-up" in text
    # SGLang's own level still holds for SGLang's lines
    assert "a WARNING line of SGLang's" in text
    assert ("an INFO line of SGLang's" in text) == (level == "info")


@needs_v2
def test_at_error_the_plugin_is_as_quiet_as_sglang_once_sglang_set_its_level():
    text = _server_log("error", SGLANG_EAGLE_PAGED="on")
    assert "a start-up line after SGLang's set-up" not in text and "a WARNING line of SGLang's" not in text


def _line(said: str, process: str = "TP0") -> str:
    return f"[2026-12-06 01:02:03 {process}] [sglang-eagle-paged] {said}\n"


ACTIVE = _line("active: mode=on, v2 adapter, draft duplication=x, fa3 metadata=fused, sglang 0.5.23")


@pytest.mark.parametrize("text,plugin,layout", [
    (ACTIVE, "on", "per-branch"),
    (ACTIVE + _line("dense draft layout on (SGLANG_EAGLE_PAGED_DENSE_DRAFT): the draft slots of page 1"), "on", "dense"),
    (ACTIVE + _line("dense draft layout off, SGLang's per-branch layout serves: fa3"), "on", "per-branch"),
    (ACTIVE + _line("dense draft layout on (x)") + _line("dense draft layout handed back after a fault: x"),
     "on", "per-branch"),
    (_line("active: mode=fake, v2 adapter, x"), "fake", "per-branch"),
    (_line("SGLANG_EAGLE_PAGED=off: stock SGLang 0.5.23"), "off", "per-branch"),
    (_line("inactive: SGLang 0.5.99 is newer than 0.5.23 and its draft hook points changed"), "inactive", "per-branch"),
    ("[2026-12-06 01:02:03 TP0] an SGLang line\n", None, None),
])
def test_served_names_the_mode_and_layout_the_server_logged(text, plugin, layout):
    found = server_log.served(text)
    assert (found["plugin"], found["layout"]) == (plugin, layout)


def test_the_lines_are_kept_once_each_without_faults_or_timestamps():
    fault = f"[2026-12-06 01:02:04 TP0] {sglang_eagle_paged.FAULT_MARK}dense switched off: ValueError: x\n"
    found = server_log.served(ACTIVE + _line("active: mode=on, v2 adapter, draft duplication=x, fa3 metadata="
                                             "fused, sglang 0.5.23", process="DP1 TP0") + fault)
    assert found["lines"] == [ACTIVE.split("] ", 1)[1].strip()]
    assert server_log.served(None) == {"plugin": None, "layout": None, "lines": [], "read": "no server log"}


@pytest.mark.parametrize("phrase", ["ACTIVE", "INACTIVE", "OFF", "DENSE_ON", "DENSE_OFF", "DENSE_HANDED_BACK"])
def test_every_phrase_served_reads_is_one_the_plugin_logs(phrase):
    """served() reads the plugin's own wording: a reworded start-up line must fail here, not leave every
    record saying per-branch."""
    said = getattr(server_log, phrase)
    sources = [p.read_text() for p in PKG.rglob("*.py") if "bench" not in p.relative_to(PKG).parts]
    assert any(said in text for text in sources), said


def _servers(tmp_path, logs: dict) -> dict:
    out = {}
    for side, text in logs.items():
        (tmp_path / f"{side}.log").write_text(text)
        out[side] = SimpleNamespace(log_file=str(tmp_path / f"{side}.log"))
    return out


def test_an_ab_pair_records_what_each_server_ran_and_names_a_layout_it_did_not_ask_for(tmp_path):
    dense = {"SGLANG_EAGLE_PAGED_DENSE_DRAFT": "1"}
    pair = {"A": asdict(RunConfig("on_p64", page_size=64)), "B": asdict(RunConfig("dense_p64", page_size=64, env=dense))}
    servers = _servers(tmp_path, {"A": ACTIVE, "B": ACTIVE + _line("dense draft layout off, SGLang's per-branch "
                                                                    "layout serves: fa3")})
    record_served(pair, servers, lambda update: update())
    assert pair["served"]["A"]["layout"] == "per-branch" and pair["served"]["B"]["plugin"] == "on"
    assert pair["served_not_asked"] == {"B": "asked dense, served per-branch"}

    pair = {"A": asdict(RunConfig("off_p64", mode="off", page_size=64)),
            "B": asdict(RunConfig("dense_p64", page_size=64, env=dense))}
    servers = _servers(tmp_path, {"A": _line("SGLANG_EAGLE_PAGED=off: stock SGLang 0.5.23"),
                                  "B": ACTIVE + _line("dense draft layout on (x)")})
    record_served(pair, servers, lambda update: update())
    assert pair["served"]["A"]["plugin"] == "off" and pair["served"]["B"]["layout"] == "dense"
    assert "served_not_asked" not in pair


def test_ab_md_names_the_path_each_server_ran(tmp_path):
    from sglang_eagle_paged.bench.ab import markdown

    dense = {"SGLANG_EAGLE_PAGED_DENSE_DRAFT": "1"}
    pair = {"A": asdict(RunConfig("on_p64", page_size=64)), "B": asdict(RunConfig("dense_p64", page_size=64, env=dense)),
            "passes": []}
    record_served(pair, _servers(tmp_path, {"A": ACTIVE, "B": ACTIVE}), lambda update: update())
    results = {"rounds": 1, "parallel": 16, "num_questions": 4, "parallel1_questions": 0, "max_new_tokens": 8,
               "settle_passes": 0, "pairs": {"on_p64:dense_p64#0": pair}}
    text = markdown(results)
    assert ("Path served, from each server's log (mode, draft layout): on_p64:dense_p64 A plugin on, per-branch, "
            "B plugin on, per-branch (B: asked dense, served per-branch: not the layout asked).") in text
