"""CPU smoke run of scripts/device/train_eagle_head.py: the whole data and training path on a
tiny frozen target (random weights, tied embeddings like SmolLM2, the testbed's tokenizer and
chat template), and the draft folder checked the way SGLang 0.5.12.post1 loads it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "device" / "train_eagle_head.py"
TESTBED_TARGET = ROOT / "sglang_eagle_paged" / "testbed" / "target"
sys.path.insert(0, str(SCRIPT.parent))

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


def _train(target, out, *extra, timeout=170):
    r = subprocess.run(
        [sys.executable, str(SCRIPT), str(target), str(out), "--device", "cpu", "--max-new", "12", "--gen-batch", "6",
         "--corpus-mb", "0.05", "--eval-seqs", "30", "--chain-steps", "3", *extra],
        capture_output=True, text=True, timeout=timeout, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                                              "HOME": str(out)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


# the settings a resumed call must take from the checkpoint (none given again)
FIRST = ("--minutes", "0.08", "--total-minutes", "0.2", "--gen-minutes", "0.5", "--num-prompts", "27",
         "--seq", "64", "--batch", "4", "--heldout-frac", "0.2", "--max-files", "12")


@pytest.fixture(scope="module")
def trained(tiny_target, tmp_path_factory):
    out = tmp_path_factory.mktemp("head")
    stdout = _train(tiny_target, out, *FIRST)
    return out, stdout


@pytest.fixture(scope="module")
def resumed(trained, tiny_target, tmp_path_factory):
    """A second call on a copy of the first's OUT: no generation, training continued."""
    first, _ = trained
    out = tmp_path_factory.mktemp("resumed") / "head"
    shutil.copytree(first, out)
    stdout = _train(tiny_target, out, "--resume", "--minutes", "0.05", "--gen-minutes", "0")
    return out, stdout


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


def test_record_counts_the_prompt_kinds_and_evaluates_each(trained):
    import head_prompts as hp

    out, _ = trained
    rec = json.loads((out / "train_record.json").read_text())
    d, e = rec["data"], rec["eval"]
    assert d["prompt_mix"] == {k: 1.0 for k in hp.KINDS}
    assert d["prompts_by_kind"] == {k: 3 for k in hp.KINDS}           # 27 prompts, even over the nine kinds
    assert sum(d["answered_by_kind"].values()) == d["prompts_answered"] == d["answers_generated_this_call"]
    assert set(d["answered_by_kind"]) == set(hp.KINDS)                # 0.5 min answers them all on the CPU
    for k in hp.KINDS:
        assert d["train_by_kind"].get(k, 0) + d["heldout_by_kind"].get(k, 0) == d["answered_by_kind"][k], k
    # at least one held out per kind (three prompts each), evaluated kind by kind
    assert set(d["heldout_by_kind"]) == set(hp.KINDS) and sum(d["heldout_by_kind"].values()) == d["heldout_answers"]
    cached = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert len(cached) == d["prompts_answered"] and all(r["answer"] and r["prompt"] for r in cached)
    # every held-out answer is evaluated (--eval-seqs is above their number) where --seq 64 leaves
    # two answer tokens after its prompt
    scored = {r["kind"] for r in cached if r["held"] and min(64, len(r["prompt"]) + len(r["answer"])) >= len(
        r["prompt"]) + 2}
    assert len(scored) >= 5 and set(e["agreement_top1_by_kind"]) == scored, (scored, e["agreement_top1_by_kind"])
    assert all(0.0 <= v <= 1.0 for v in e["agreement_top1_by_kind"].values())


def test_resume_continues_steps_optimizer_and_schedule(trained, resumed):
    import torch

    first = json.loads((trained[0] / "train_record.json").read_text())
    out, stdout = resumed
    rec = json.loads((out / "train_record.json").read_text())
    t0, t1 = first["training"], rec["training"]
    assert t1["steps_before"] == t0["steps"] and t1["steps_this_call"] >= 1
    assert t1["steps"] == t0["steps"] + t1["steps_this_call"]
    assert t1["optimizer_step_at_start"] == t0["steps"]               # AdamW's own counter came back
    assert t1["total_minutes"] == 0.2                                 # the checkpoint's, not --minutes
    assert t1["schedule_start"] == pytest.approx(t0["schedule_end"]) and t0["schedule_end"] < 1.0
    assert t1["schedule_end"] > t1["schedule_start"]
    assert sum(t1["batches"].values()) == t1["steps"]
    assert [c["steps"] for c in t1["calls"]] == [t0["steps"], t1["steps_this_call"]]
    assert t1["loss_curve"][: len(t0["loss_curve"])] == [list(p) for p in t0["loss_curve"]]
    # the answers came from the cache; the data settings from the checkpoint
    assert rec["data"]["answers_generated_this_call"] == 0
    assert rec["data"]["answered_by_kind"] == first["data"]["answered_by_kind"]
    assert rec["settings"]["num_prompts"] == 27 and rec["settings"]["seq"] == 64
    state = torch.load(out / "checkpoint" / "state.pt", weights_only=False)
    assert state["step"] == t1["steps"]
    assert {int(s["step"]) for s in state["opt"]["state"].values()} == {t1["steps"]}
    before = torch.load(trained[0] / "checkpoint" / "state.pt", weights_only=False)
    assert any(not torch.equal(before["draft"][k], state["draft"][k]) for k in state["draft"])


def test_resume_refuses_other_data_settings_and_a_missing_checkpoint(trained, tiny_target, tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), str(tiny_target), str(trained[0]), "--resume", "--seq", "128"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--seq 128 (the checkpoint's: 64)" in r.stderr, r.stderr[-2000:]
    r = subprocess.run([sys.executable, str(SCRIPT), str(tiny_target), str(tmp_path), "--resume"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no checkpoint" in r.stderr, r.stderr[-2000:]


# Run in a child process: SGLang's distributed state is process-wide. SGLang 0.5.23's own classes build
# the target and the head on the CPU and load the files the trainer wrote; the forward is not run. The
# one flag set by hand, the rotary embedding module's ``_is_cpu``, only picks which kernel module the
# constructor imports off CUDA (SGLang's CPU engine, which sets it, needs a CPU build of sgl_kernel).
SGLANG_LOAD = r"""
import json, os, sys
import torch
from safetensors.torch import load_file
from transformers import AutoConfig
from sglang.srt.server_args import ServerArgs
from sglang.srt.runtime_context import SpawnRanks, publish

draft_dir, target_dir, port = sys.argv[1:4]
publish(ServerArgs(model_path=target_dir, speculative_algorithm="EAGLE", speculative_draft_model_path=draft_dir,
                   device="cpu", attention_backend="triton"), role="scheduler", ranks=SpawnRanks(world_rank=0))
from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                             distributed_init_method=f"tcp://127.0.0.1:{port}")
initialize_model_parallel()
import sglang.srt.layers.rotary_embedding.base as rotary_base
rotary_base._is_cpu = True
from sglang.srt.models.llama import LlamaForCausalLM
from sglang.srt.models.llama_eagle import LlamaForCausalLMEagle

def build(cls, folder):
    model = cls(AutoConfig.from_pretrained(folder))
    weights = load_file(os.path.join(folder, "model.safetensors"))
    model.load_weights(iter(weights.items()))
    return model, weights

target, _ = build(LlamaForCausalLM, target_dir)
draft, weights = build(LlamaForCausalLMEagle, draft_dir)
params = dict(draft.named_parameters())
stacked = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
           "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}
landed, offsets = {}, {}
for name in sorted(weights, key=lambda n: [stacked.get(p, (p, 0))[1] for p in n.split(".")]):
    w = weights[name].to(torch.float32)
    parts = name.split(".")
    at = next((i for i, p in enumerate(parts) if p in stacked), None)
    if at is None:
        key = "model." + name
        landed[name] = key in params and torch.equal(params[key].float(), w)
        continue
    parts[at] = stacked[parts[at]][0]
    key = "model." + ".".join(parts)
    start = offsets.get(key, 0)
    offsets[key] = start + w.shape[0]
    landed[name] = key in params and torch.equal(params[key][start:start + w.shape[0]].float(), w)
filled = {k: offsets[k] == params[k].shape[0] for k in offsets}
embed, head = target.get_embed_and_head()
draft.set_embed_and_head(embed, head)
print(json.dumps({"landed": landed, "stacked_filled": filled, "params": sorted(params),
                  "shares_target": draft.model.embed_tokens.weight is embed and draft.lm_head.weight is head}))
"""


def test_sglangs_own_eagle_class_loads_every_tensor_of_the_head(trained, tiny_target):
    """SGLang 0.5.23's LlamaForCausalLMEagle takes every tensor of the written head into its own
    parameters unchanged (q/k/v and gate/up into its stacked ones, each slice full), and takes the
    target's embedding and LM head (the head ships neither)."""
    import socket

    pytest.importorskip("sglang.srt.models.llama_eagle")
    out, _ = trained
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([sys.executable, "-c", SGLANG_LOAD, str(out / "draft"), str(tiny_target), str(port)],
                       capture_output=True, text=True, timeout=240,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(res["landed"]) == EAGLE_DRAFT_KEYS and all(res["landed"].values()), res["landed"]
    assert res["stacked_filled"] and all(res["stacked_filled"].values()), res["stacked_filled"]
    # nothing else to load: the rest of SGLang's parameters are the target's embedding and head
    assert set(res["params"]) - {"model." + k for k in ("fc.weight", "fc.bias", "layers.0.self_attn.o_proj.weight",
                                                        "layers.0.post_attention_layernorm.weight",
                                                        "layers.0.mlp.down_proj.weight")} == {
        "model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight",
        "model.embed_tokens.weight", "lm_head.weight"}
    assert res["shares_target"]
