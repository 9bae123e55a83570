"""Every line the plugin logs at ERROR or above carries sglang_eagle_paged.FAULT_MARK, put there by the
plugin's logger itself: the one thing a benchmark looks for to refuse a figure measured over SGLang's
fallback (bench/server_log.py), however a new switch-off line is worded."""

import ast
import logging
from pathlib import Path

import sglang_eagle_paged
from sglang_eagle_paged import FAULT_MARK
from sglang_eagle_paged.adapters.common.fault_switch import FaultSwitch
from sglang_eagle_paged.bench import server_log

PKG = Path(sglang_eagle_paged.__file__).resolve().parent


def _lines(emit) -> list:
    got = []

    class Keep(logging.Handler):
        def emit(self, record):
            got.append((record.levelno, record.getMessage()))

    logger = logging.getLogger("sglang_eagle_paged")
    keep, level = Keep(), logger.level
    logger.addHandler(keep)
    logger.setLevel(logging.DEBUG)
    try:
        emit(logger)
    finally:
        logger.removeHandler(keep)
        logger.setLevel(level)
    return got


def test_errors_carry_the_mark_and_nothing_else_does():
    got = _lines(lambda log: (
        FaultSwitch("[sglang-eagle-paged] something switched off for this process: %s").trip(ValueError("x")),
        log.error("[sglang-eagle-paged] v2 warm-up failed: %s", "why"),
        log.critical("unprefixed and critical"),
        log.warning("[sglang-eagle-paged] a warning"),
        log.info("[sglang-eagle-paged] active: mode=on")))
    assert got == [(logging.ERROR, f"{FAULT_MARK}something switched off for this process: ValueError: x"),
                   (logging.ERROR, f"{FAULT_MARK}v2 warm-up failed: why"),
                   (logging.CRITICAL, f"{FAULT_MARK}unprefixed and critical"),
                   (logging.WARNING, "[sglang-eagle-paged] a warning"),
                   (logging.INFO, "[sglang-eagle-paged] active: mode=on")]
    text = "".join(f"[2026-12-04 01:02:03 TP0] {m}\n" for _, m in got)
    assert server_log.faults(text) == [f"[2026-12-04 01:02:03 TP0] {m}" for lv, m in got if lv >= logging.ERROR]


def test_every_switch_and_error_of_the_serving_code_logs_through_the_marked_logger():
    """A FaultSwitch and every logger.error of the package go through ``sglang_eagle_paged``'s logger
    (the one the mark is installed on): a module with a logger of another name would escape it."""
    names = set()
    switches = 0
    for path in PKG.rglob("*.py"):
        if "bench" in path.relative_to(PKG).parts:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "getLogger" and node.args:
                names.add(ast.literal_eval(node.args[0]) if isinstance(node.args[0], ast.Constant) else "?")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "FaultSwitch":
                switches += 1
    assert switches >= 5
    assert names <= {"sglang_eagle_paged", "sglang"}, names  # "sglang": tools/quiet.py lowers SGLang's level
