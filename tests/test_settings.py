"""Every environment variable through one parser, with one rule for booleans."""

import pytest

from sglang_eagle_paged import settings
from sglang_eagle_paged.settings import FA3Expand, Mode, SettingsError, parse


def test_defaults():
    s = parse({})
    assert (s.mode, s.mode_explicit, s.allow_triton, s.check_prefix) == (Mode.ON, False, False, False)
    assert (s.fa3_expand, s.verify_free, s.direct_launch) == (None, True, True)


def test_fa3_expand_defaults_to_fused_on_v1_and_off_on_v2_unless_set():
    s = parse({})
    assert (s.fa3_expand_for("v1"), s.fa3_expand_for("v2"), s.fa3_expand_explicit) == (
        FA3Expand.FUSED, FA3Expand.FUSED, False)
    for raw, want in (("fused", FA3Expand.FUSED), ("expand", FA3Expand.EXPAND), ("off", FA3Expand.OFF)):
        s = parse({settings.FA3_EXPAND: raw})
        assert s.fa3_expand_for("v1") is want and s.fa3_expand_for("v2") is want and s.fa3_expand_explicit


@pytest.mark.parametrize("raw,want", [("on", Mode.ON), (" OFF ", Mode.OFF), ("Fake", Mode.FAKE), ("", Mode.ON)])
def test_mode(raw, want):
    s = parse({settings.MODE: raw})
    assert s.mode is want and s.mode_explicit is bool(raw.strip())


@pytest.mark.parametrize("name", [settings.ALLOW_TRITON, settings.CHECK_PREFIX, settings.VERIFY_FREE,
                                  settings.DIRECT_LAUNCH, settings.FA3_IN_PLACE])
@pytest.mark.parametrize("raw,want", [("1", True), ("on", True), ("TRUE", True), ("yes", True),
                                      ("0", False), ("off", False), ("False", False), ("no", False)])
def test_every_boolean_takes_the_same_words(name, raw, want):
    field = {settings.ALLOW_TRITON: "allow_triton", settings.CHECK_PREFIX: "check_prefix",
             settings.VERIFY_FREE: "verify_free", settings.DIRECT_LAUNCH: "direct_launch",
             settings.FA3_IN_PLACE: "fa3_in_place"}[name]
    assert getattr(parse({name: raw}), field) is want


@pytest.mark.parametrize("name", [settings.MODE, settings.ALLOW_TRITON, settings.CHECK_PREFIX, settings.FA3_EXPAND,
                                  settings.VERIFY_FREE, settings.DIRECT_LAUNCH, settings.FA3_IN_PLACE])
def test_an_unknown_value_is_one_line_naming_the_variable_and_its_values(name):
    with pytest.raises(SettingsError) as exc:
        parse({name: "maybe"})
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"{name}='maybe' is not one of: ")


@pytest.mark.parametrize("raw,want", [("fused", FA3Expand.FUSED), ("expand", FA3Expand.EXPAND), ("1", FA3Expand.EXPAND),
                                      ("on", FA3Expand.EXPAND), ("0", FA3Expand.OFF), ("off", FA3Expand.OFF)])
def test_fa3_expand_keeps_its_older_spellings(raw, want):
    s = parse({settings.FA3_EXPAND: raw})
    assert s.fa3_expand is want and s.fa3_expand_explicit


def test_an_unknown_fa3_expand_lists_each_spelling_once():
    with pytest.raises(SettingsError) as exc:
        parse({settings.FA3_EXPAND: "maybe"})
    allowed = str(exc.value).split("is not one of: ")[1].split(", ")
    assert len(allowed) == len(set(allowed)) and {"fused", "expand", "off", "0", "1"} <= set(allowed)


def test_settings_the_v2_adapter_never_reads_are_named():
    env = {settings.CHECK_PREFIX: "1", settings.ALLOW_TRITON: "1", settings.MODE: "on", settings.FA3_EXPAND: "fused"}
    assert settings.unused_by("v2", env) == [settings.ALLOW_TRITON, settings.CHECK_PREFIX]  # v2 reads FA3_EXPAND
    assert settings.unused_by("v1", env) == [] and settings.unused_by(None, env) == []
    assert settings.unused_by("v2", {settings.CHECK_PREFIX: " "}) == []


def test_fa3_in_place_is_off_by_default():  # until the GPU has proven it (issue 38)
    assert parse({}).fa3_in_place is False


def test_serving_parses_once_per_process(monkeypatch):
    # conftest makes settings.current re-parse for tests; undo that to see the cached one
    monkeypatch.undo()
    cached = settings.current
    assert hasattr(cached, "cache_clear")
    monkeypatch.setenv(settings.MODE, "fake")
    cached.cache_clear()
    assert cached().mode is Mode.FAKE
    monkeypatch.setenv(settings.MODE, "off")
    assert cached().mode is Mode.FAKE  # not re-read every draft round
    cached.cache_clear()
    assert cached().mode is Mode.OFF
    cached.cache_clear()


def test_no_other_module_reads_the_plugins_variables():
    """Each variable is parsed in exactly one place: this module. (A benchmark may still *set*
    them for the servers it starts.)"""
    import pathlib
    import re

    import sglang_eagle_paged

    root = pathlib.Path(sglang_eagle_paged.__file__).parent
    read = re.compile(r"(os\.environ\.get|os\.getenv)\(\s*([A-Za-z_\"'.]+)")
    offenders = []
    for path in root.rglob("*.py"):
        if path.name == "settings.py":
            continue
        for line in path.read_text().splitlines():
            for m in read.finditer(line):
                arg = m.group(2).strip("\"'")
                if arg in settings.ENV_VARS or arg in ("ENV_VAR", "ALLOW_TRITON_ENV"):
                    offenders.append(f"{path.relative_to(root)}: {line.strip()}")
    assert not offenders, offenders


@pytest.mark.parametrize("raw,want", [("", None), ("auto", None), (" AUTO ", None), ("1", True), ("on", True),
                                      ("0", False), ("no", False)])
def test_dense_draft_takes_auto_by_default_besides_the_booleans(raw, want):
    assert parse({settings.DENSE_DRAFT: raw}).dense_draft is want


def test_a_bad_dense_draft_value_names_auto_too():
    with pytest.raises(SettingsError) as err:
        parse({settings.DENSE_DRAFT: "maybe"})
    assert str(err.value).startswith(f"{settings.DENSE_DRAFT}='maybe' is not one of: auto (the default), 1/")


def test_auto_is_off_while_the_gpu_proof_row_is_empty(caplog):
    """SGLANG_EAGLE_PAGED_DENSE_DRAFT=auto follows releases.PROVEN's "dense_draft_auto" row, per backend and
    release; the row is empty until the GPU suite proves the layout, so auto installs nothing and says
    why in one line."""
    import logging

    from sglang_eagle_paged import releases

    assert releases.PROVEN["dense_draft_auto"].releases == () and releases.proven_backends("dense_draft_auto",
                                                                                           "0.5.23") == ()
    try:
        from sglang_eagle_paged.adapters.v2 import hook_table
    except ImportError as exc:  # the v2 adapter's modules need torch
        pytest.skip(f"needs the v2 adapter importable ({exc})")
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        assert hook_table.dense_draft_layout(None, "0.5.23") is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "dense draft layout off" in lines[0] and "proven on no release yet" in lines[0]
