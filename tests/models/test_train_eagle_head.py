"""CPU smoke run of scripts/device/train_eagle_head.py: the whole data and training path on a
tiny frozen target (random weights, tied embeddings like SmolLM2, the testbed's tokenizer and
chat template), and the draft folder checked the way SGLang 0.5.12.post1 loads it."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "device" / "train_eagle_head.py"
TESTBED_TARGET = ROOT / "sglang_eagle_paged" / "testbed" / "target"

# What SGLang 0.5.12.post1's LlamaForCausalLMEagle (sglang/srt/models/llama_eagle.py) loads for a
# one-layer draft: load_weights drops names containing "lm_head" and prefixes the rest with
# "model."; model.fc is Linear(2H, H) with bias; layer 0 has no input_layernorm; there is no
# final norm; embed_tokens and lm_head come from the target (set_embed_and_head).
EAGLE_DRAFT_KEYS = sorted([
    "fc.weight", "fc.bias",
    "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight",
    "layers.0.post_attention_layernorm.weight",
    "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight",
])


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    if not (TESTBED_TARGET / "tokenizer.json").is_file():
        pytest.skip("the embedded testbed tokenizer is missing")
    torch.manual_seed(0)
    tok_cfg = json.loads((TESTBED_TARGET / "config.json").read_text())
    cfg = LlamaConfig(vocab_size=tok_cfg["vocab_size"], hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=512,
                      rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, tie_word_embeddings=True,
                      bos_token_id=tok_cfg["bos_token_id"], eos_token_id=tok_cfg["eos_token_id"],
                      pad_token_id=tok_cfg["pad_token_id"], architectures=["LlamaForCausalLM"])
    out = tmp_path_factory.mktemp("tiny_target")
    LlamaForCausalLM(cfg).save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(TESTBED_TARGET / f, out)
    return out


@pytest.fixture(scope="module")
def trained(tiny_target, tmp_path_factory):
    out = tmp_path_factory.mktemp("head")
    r = subprocess.run(
        [sys.executable, str(SCRIPT), str(tiny_target), str(out), "--device", "cpu", "--minutes", "0.08",
         "--gen-minutes", "0.5", "--num-prompts", "12", "--max-new", "12", "--gen-batch", "6", "--seq", "64",
         "--batch", "4", "--corpus-mb", "0.05", "--eval-seqs", "3", "--heldout-frac", "0.2", "--max-files", "12",
         "--chain-steps", "3"],
        capture_output=True, text=True, timeout=170, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                                          "HOME": str(out)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out, r.stdout


def test_draft_folder_loads_like_sglang(trained, tiny_target):
    import torch
    from safetensors import safe_open

    out, _ = trained
    ddir = out / "draft"
    dcfg = json.loads((ddir / "config.json").read_text())
    tcfg = json.loads((tiny_target / "config.json").read_text())
    assert dcfg["architectures"] == ["LlamaForCausalLMEagle"]
    assert dcfg["num_hidden_layers"] == 1
    assert dcfg["tie_word_embeddings"] is False and tcfg["tie_word_embeddings"] is True
    for k in ("hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim",
              "max_position_embeddings"):
        assert dcfg[k] == tcfg[k], k
    assert dcfg["rope_parameters"]["rope_theta"] == tcfg["rope_parameters"]["rope_theta"]
    assert dcfg["intermediate_size"] == tcfg["intermediate_size"]
    H, hd = dcfg["hidden_size"], dcfg["head_dim"]
    want = {"fc.weight": (H, 2 * H), "fc.bias": (H,),
            "layers.0.self_attn.q_proj.weight": (dcfg["num_attention_heads"] * hd, H),
            "layers.0.self_attn.k_proj.weight": (dcfg["num_key_value_heads"] * hd, H),
            "layers.0.self_attn.v_proj.weight": (dcfg["num_key_value_heads"] * hd, H),
            "layers.0.self_attn.o_proj.weight": (H, dcfg["num_attention_heads"] * hd),
            "layers.0.post_attention_layernorm.weight": (H,),
            "layers.0.mlp.gate_proj.weight": (dcfg["intermediate_size"], H),
            "layers.0.mlp.up_proj.weight": (dcfg["intermediate_size"], H),
            "layers.0.mlp.down_proj.weight": (H, dcfg["intermediate_size"])}
    assert sorted(want) == EAGLE_DRAFT_KEYS
    with safe_open(str(ddir / "model.safetensors"), "pt") as f:
        assert sorted(f.keys()) == EAGLE_DRAFT_KEYS
        for k, shape in want.items():
            t = f.get_tensor(k)
            assert tuple(t.shape) == shape and t.dtype == torch.bfloat16, k
            assert torch.isfinite(t.float()).all(), k
    for f in ("tokenizer.json", "tokenizer_config.json"):
        assert (ddir / f).is_file(), f


def test_record_says_what_was_trained(trained):
    out, stdout = trained
    rec = json.loads((out / "train_record.json").read_text())
    d, t, e = rec["data"], rec["training"], rec["eval"]
    assert d["prompts_answered"] >= 3 and d["train_answers"] >= 1 and d["heldout_answers"] >= 1
    assert d["train_tokens"] > 0 and d["teacher_forced_tokens"] > 0
    assert t["steps"] >= 1 and sum(t["batches"].values()) == t["steps"]
    assert all(v == v for v in (t["final_reg_loss"], t["final_cls_loss"]))   # not NaN
    assert 0.0 <= e["agreement_top1"] <= e["agreement_top4"] <= 1.0
    assert set(rec["wall_s"]) >= {"generate_s", "train_s", "eval_s", "total_s"}
    assert (out / "draft" / "train_record.json").is_file()
    assert "trained" in stdout


def test_prompts_come_from_stdlib_not_mtbench():
    sys.path.insert(0, str(SCRIPT.parent))
    import train_eagle_head as teh

    prompts = teh.make_prompts(40, seed=1, max_files=30)
    assert len(prompts) == 40 and len(set(prompts)) == 40
    assert all("`" in p or "\n\n" in p for p in prompts)   # each names a module or quotes a docstring
    assert teh.make_prompts(40, seed=1, max_files=30) == prompts   # reproducible
