"""The fault rule's switch says one ERROR line per process: the first fault's, never one per later
fault (a server that faults every round must not flood its log)."""

import logging

from sglang_eagle_paged.adapters.common.fault_switch import FaultSwitch

LOGGER = "sglang_eagle_paged"


def _errors(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_later_faults_add_no_line_and_keep_the_first_reason(caplog):
    switch = FaultSwitch("ours off: %s")
    assert not switch
    with caplog.at_level(logging.INFO, logger=LOGGER):
        switch.trip(ValueError("first"))
        for i in range(5):
            switch.trip(RuntimeError(f"later {i}"))
            switch.trip(f"text {i}")
    assert switch and switch.reason == "ValueError: first"
    errors = _errors(caplog)
    assert len(errors) == 1 and errors[0].endswith("ours off: ValueError: first")


def test_a_silent_trip_stays_silent_when_faults_follow(caplog):
    # one fault tripping several switches is said once, by the caller (say=False for the others)
    switch = FaultSwitch("ours off: %s")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        switch.trip("warm-up failed", say=False)
        switch.trip(KeyError("later"))
    assert switch.reason == "warm-up failed" and _errors(caplog) == []
