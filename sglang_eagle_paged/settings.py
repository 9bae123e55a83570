"""Every environment variable the plugin reads, parsed once, with one rule.

User settings:

- ``SGLANG_EAGLE_PAGED`` = ``on`` (default) | ``off`` (SGLang untouched) | ``fake``.
- ``SGLANG_EAGLE_PAGED_ALLOW_TRITON`` (v1 releases): let the triton backend draft a paged tree.
- ``SGLANG_EAGLE_PAGED_CHECK_PREFIX``: the debug check that a step leaves every prefix's KV as it was.

Benchmark and diagnostic switches (``docs/configuration.md``): ``fake`` above,
``SGLANG_EAGLE_PAGED_FA3_EXPAND`` (default ``fused`` on both generations, on v2 where
``releases.PROVEN`` says it is proven: :func:`Settings.fa3_expand_for`),
``SGLANG_EAGLE_PAGED_FA3_IN_PLACE`` (off by default: measured slower than the fused copy, docs/configuration.md),
``SGLANG_EAGLE_PAGED_DENSE_DRAFT`` (v2: page 1's draft layout and reserve at page > 1, flashinfer,
triton and fa3; ``auto`` by default: on where the GPU suite proved it, per backend and release, which is
nowhere yet; ``1`` asks for it where it is CPU-proven), ``SGLANG_EAGLE_PAGED_VERIFY_FREE``,
``SGLANG_EAGLE_PAGED_DIRECT_LAUNCH``. Tools:
``SGLANG_EAGLE_PAGED_SMOLLM2_DIR`` (the converted real model's cache).

Booleans take ``1/on/true/yes`` and ``0/off/false/no`` (any case); unset or empty is the
default. Any other value raises :class:`SettingsError`, whose one line names the variable
and its allowed values: the plugin stops start-up with it rather than guess.
"""

import functools
import os
from dataclasses import dataclass
from enum import Enum

MODE = "SGLANG_EAGLE_PAGED"
ALLOW_TRITON = "SGLANG_EAGLE_PAGED_ALLOW_TRITON"
CHECK_PREFIX = "SGLANG_EAGLE_PAGED_CHECK_PREFIX"
FA3_EXPAND = "SGLANG_EAGLE_PAGED_FA3_EXPAND"
FA3_IN_PLACE = "SGLANG_EAGLE_PAGED_FA3_IN_PLACE"
DENSE_DRAFT = "SGLANG_EAGLE_PAGED_DENSE_DRAFT"
VERIFY_FREE = "SGLANG_EAGLE_PAGED_VERIFY_FREE"
DIRECT_LAUNCH = "SGLANG_EAGLE_PAGED_DIRECT_LAUNCH"
SMOLLM2_DIR = "SGLANG_EAGLE_PAGED_SMOLLM2_DIR"  # tools: where the converted real model is cached

ENV_VARS = (MODE, ALLOW_TRITON, CHECK_PREFIX, FA3_EXPAND, FA3_IN_PLACE, DENSE_DRAFT, VERIFY_FREE, DIRECT_LAUNCH, SMOLLM2_DIR)
# Read by the v1 adapter only (SGLang 0.5.8 .. 0.5.12.post1): elsewhere setting one changes nothing,
# which start-up says in one line (unused_by).
V1_ONLY = (ALLOW_TRITON, CHECK_PREFIX, VERIFY_FREE)

_TRUE = ("1", "on", "true", "yes")
_FALSE = ("0", "off", "false", "no")


class SettingsError(ValueError):
    """A variable holds a value the plugin does not know."""


class Mode(str, Enum):
    # Real KV duplication (the default).
    ON = "on"
    # Stock SGLang, untouched: also the A/B baseline "SGLang's own".
    OFF = "off"
    # No draft-KV copy: reproduces the index-only bug so benchmarks can show what
    # duplication buys. Never for serving.
    FAKE = "fake"


class FA3Expand(str, Enum):
    FUSED = "fused"    # the whole round's replay metadata in one launch
    EXPAND = "expand"  # only the expand builder replaced
    OFF = "off"        # SGLang's own builders


# SGLANG_EAGLE_PAGED_FA3_EXPAND unset: the fused replay metadata on both generations, each measured on
# a GPU against SGLang's own builders (docs/performance.md). On v2 releases outside
# releases.PROVEN the unset default keeps SGLang's builders (adapters/v2/fa3_replay.chosen).
FA3_EXPAND_DEFAULT = {"v1": FA3Expand.FUSED, "v2": FA3Expand.FUSED}


@dataclass(frozen=True)
class Settings:
    mode: Mode = Mode.ON
    mode_explicit: bool = False  # SGLANG_EAGLE_PAGED was set: failing to serve is then an error
    allow_triton: bool = False
    check_prefix: bool = False
    fa3_expand: FA3Expand | None = None  # None: unset, the generation's default (fa3_expand_for)
    fa3_in_place: bool = False  # v2, fa3: read the prefix tail in place, no copy (opt-in: docs/configuration.md)
    # v2: the draft slots and reserve of page 1 at page > 1. None: auto (unset or ``auto``, the default):
    # on where releases.PROVEN's "dense_draft_auto" row says the GPU suite proved it, per backend
    dense_draft: bool | None = None
    verify_free: bool = True
    direct_launch: bool = True
    smollm2_dir: str | None = None

    @property
    def fa3_expand_explicit(self) -> bool:
        """SGLANG_EAGLE_PAGED_FA3_EXPAND was set: a replacement that cannot be installed is then an error."""
        return self.fa3_expand is not None

    def fa3_expand_for(self, generation: str) -> FA3Expand:
        """The FA3 draft-metadata replacement the adapter of ``generation`` ("v1", "v2") installs."""
        return self.fa3_expand if self.fa3_expand is not None else FA3_EXPAND_DEFAULT[generation]


def _raw(env, name: str) -> str:
    return (env.get(name) or "").strip().lower()


def _bool(env, name: str, default: bool) -> bool:
    raw = _raw(env, name)
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise SettingsError(f"{name}={raw!r} is not one of: {'/'.join(_TRUE)} (true), {'/'.join(_FALSE)} (false)")


def _auto_bool(env, name: str) -> bool | None:
    """A boolean that also takes ``auto`` (the default, None)."""
    if _raw(env, name) == "auto":
        return None
    try:
        return _bool(env, name, None)
    except SettingsError:
        raise SettingsError(f"{name}={_raw(env, name)!r} is not one of: auto (the default), "
                            f"{'/'.join(_TRUE)} (true), {'/'.join(_FALSE)} (false)") from None


def _choice(env, name: str, enum, default, aliases=None):
    raw = _raw(env, name)
    if not raw:
        return default
    raw = (aliases or {}).get(raw, raw)
    try:
        return enum(raw)
    except ValueError:
        allowed = list(dict.fromkeys([m.value for m in enum] + sorted(aliases or {})))  # each spelling once
        raise SettingsError(f"{name}={raw!r} is not one of: {', '.join(allowed)}") from None


def parse(env=None) -> Settings:
    """The settings of ``env`` (default: ``os.environ``); raises :class:`SettingsError`."""
    env = os.environ if env is None else env
    # 1/on/0/off: the spellings FA3_EXPAND took before it had a fused mode
    fa3_aliases = {**dict.fromkeys(_TRUE, "expand"), **dict.fromkeys(_FALSE, "off")}
    return Settings(
        mode=_choice(env, MODE, Mode, Mode.ON),
        mode_explicit=bool(_raw(env, MODE)),
        allow_triton=_bool(env, ALLOW_TRITON, False),
        check_prefix=_bool(env, CHECK_PREFIX, False),
        fa3_expand=_choice(env, FA3_EXPAND, FA3Expand, None, fa3_aliases),
        fa3_in_place=_bool(env, FA3_IN_PLACE, False),
        dense_draft=_auto_bool(env, DENSE_DRAFT),
        verify_free=_bool(env, VERIFY_FREE, True),
        direct_launch=_bool(env, DIRECT_LAUNCH, True),
        smollm2_dir=(env.get(SMOLLM2_DIR) or "").strip() or None,
    )


def unused_by(generation: str | None, env=None) -> list:
    """The variables set in ``env`` that the adapter of ``generation`` never reads."""
    env = os.environ if env is None else env
    if generation in (None, "v1"):  # None: no adapter at all, which start-up says already
        return []
    return [name for name in V1_ONLY if _raw(env, name)]


@functools.lru_cache(maxsize=1)
def current() -> Settings:
    """This process's settings, parsed on first use (SGLang's processes inherit one environment)."""
    return parse()


def reload() -> Settings:
    """Parse the environment again: for tests and tools that change it within one process."""
    current.cache_clear()
    return current()
