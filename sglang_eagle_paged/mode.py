"""The one switch users have: ``SGLANG_EAGLE_PAGED`` = on | off | fake."""

import os
from enum import Enum

ENV_VAR = "SGLANG_EAGLE_PAGED"


class Mode(str, Enum):
    # Our assignment kernel and real KV duplication (the default).
    ON = "on"
    # Stock SGLang, untouched: also the A/B baseline "upstream built-in".
    OFF = "off"
    # Our assignment kernel but no draft-KV copy: reproduces the old index-only
    # bug so benchmarks can show what duplication buys. Never for serving.
    FAKE = "fake"


def current_mode() -> Mode:
    raw = os.environ.get(ENV_VAR, Mode.ON.value).strip().lower() or Mode.ON.value
    try:
        return Mode(raw)
    except ValueError:
        valid = ", ".join(m.value for m in Mode)
        raise ValueError(f"{ENV_VAR}={raw!r} is not one of: {valid}") from None
