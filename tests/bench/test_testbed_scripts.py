"""CPU tests for scripts/device/make_testbed.py and scripts/device/make_dummy_large.py."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "device"

# Checkpoint names SGLang 0.5.12.post1's LlamaForCausalLMEagle consumes for a
# one-layer draft (sglang/srt/models/llama_eagle.py): load_weights drops names
# containing "lm_head", prefixes the rest with "model."; the model has model.fc
# (Linear 2H->H with bias), model.layers.0 without input_layernorm (replaced by an
# identity for layer 0), no final model.norm; model.embed_tokens and lm_head are
# replaced by the target's via set_embed_and_head (speculative/eagle_worker.py), so
# the testbed draft does not store them.  q/k/v and gate/up are stacked by
# LlamaForCausalLM.load_weights (sglang/srt/models/llama.py).
EAGLE_DRAFT_KEYS = sorted([
    "fc.weight", "fc.bias",
    "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight",
    "layers.0.post_attention_layernorm.weight",
    "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight",
])


def _load_script(name):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tiny_testbed(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    out = tmp_path_factory.mktemp("testbed")
    r = subprocess.run(
        [sys.executable, str(SCRIPTS / "make_testbed.py"), str(out), "--device", "cpu", "--tiny",
         "--target-seconds", "6", "--draft-seconds", "4"],
        capture_output=True, text=True, timeout=170)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def test_testbed_outputs(tiny_testbed):
    import torch
    from safetensors import safe_open
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    out = tiny_testbed
    for d in ("target", "draft"):
        for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"):
            assert (out / d / f).is_file(), (d, f)
    rep = json.loads((out / "testbed.json").read_text())
    for k in ("settings", "target", "draft", "sizes", "wall_s", "versions"):
        assert k in rep
    assert 0.0 <= rep["draft"]["agreement_top1"] <= 1.0

    tcfg = AutoConfig.from_pretrained(out / "target")
    assert tcfg.architectures == ["LlamaForCausalLM"] and not tcfg.tie_word_embeddings
    model = LlamaForCausalLM.from_pretrained(out / "target", dtype=torch.bfloat16)
    assert model.lm_head.weight.dtype == torch.bfloat16
    tok = AutoTokenizer.from_pretrained(out / "target")
    assert len(tok) == tcfg.vocab_size
    ids = tok("def f(x):\n    return x")["input_ids"]
    assert ids[0] == tcfg.bos_token_id and max(ids) < tcfg.vocab_size
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True)
    assert chat.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), tcfg.vocab_size)

    dcfg = AutoConfig.from_pretrained(out / "draft")
    assert dcfg.architectures == ["LlamaForCausalLMEagle"]
    assert dcfg.num_hidden_layers == 1
    for k in ("hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim"):
        assert getattr(dcfg, k) == getattr(tcfg, k), k
    assert dcfg.rope_parameters["rope_theta"] == tcfg.rope_parameters["rope_theta"]
    with safe_open(str(out / "draft" / "model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
        assert keys == EAGLE_DRAFT_KEYS
        H = dcfg.hidden_size
        assert tuple(f.get_tensor("fc.weight").shape) == (H, 2 * H)
        assert tuple(f.get_tensor("layers.0.self_attn.k_proj.weight").shape) == (
            dcfg.num_key_value_heads * dcfg.head_dim, H)
        assert tuple(f.get_tensor("layers.0.mlp.gate_proj.weight").shape) == (
            dcfg.intermediate_size, H)
        assert all(f.get_tensor(k).dtype == torch.bfloat16 for k in keys)


def _tiny_llama(config_cls, **kw):
    # one small layer: both draft tests need the same shape, only the vocab differs
    return config_cls(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **kw)


def test_draft_module_matches_hf_llama_layer():
    """The draft computes fc(cat(emb, h)) -> Llama decoder layer with an identity
    input_layernorm -> no final norm, like sglang's LlamaForCausalLMEagle."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    mt = _load_script("make_testbed")
    torch.manual_seed(0)
    cfg = _tiny_llama(LlamaConfig, vocab_size=64, max_position_embeddings=64)
    cfg._attn_implementation = "eager"
    draft = mt.build_draft_module(cfg).eval()
    for p in draft.parameters():
        torch.nn.init.normal_(p, std=0.3)
    ref = LlamaDecoderLayer(cfg, 0).eval()
    missing = ref.load_state_dict({k[len("layers.0."):]: v for k, v in draft.state_dict().items()
                                   if k.startswith("layers.0.")}, strict=False)
    assert set(missing.missing_keys) == {"input_layernorm.weight"}
    ref.input_layernorm = torch.nn.Identity()
    rot = LlamaRotaryEmbedding(cfg)
    B, S, H = 2, 10, 32
    emb, feat = torch.randn(B, S, H), torch.randn(B, S, H)
    with torch.no_grad():
        got = draft(emb, feat)
        x = draft.fc(torch.cat((emb, feat), -1))
        pos = torch.arange(S)[None].expand(B, S)
        mask = torch.full((S, S), float("-inf")).triu(1)[None, None]
        out = ref(x, attention_mask=mask, position_ids=pos, position_embeddings=rot(x, pos))
        out = out[0] if isinstance(out, tuple) else out
    torch.testing.assert_close(got, out, atol=1e-4, rtol=1e-4)


def test_chain_accept_matches_recompute():
    """chain_accept's step-2 hidden equals a full recompute over the extended input."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from contextlib import nullcontext
    from transformers import LlamaConfig

    mt = _load_script("make_testbed")
    torch.manual_seed(1)
    cfg = _tiny_llama(LlamaConfig, vocab_size=16)
    draft = mt.build_draft_module(cfg).eval()
    for p in draft.parameters():
        torch.nn.init.normal_(p, std=0.3)
    embed = torch.nn.Embedding(16, 32)
    head = torch.nn.Linear(32, 16, bias=False)
    feats = torch.randn(1, 12, 32)

    def target_feats(x):
        return feats[:, : x.shape[1]], None

    x = torch.randint(0, 16, (1, 12))
    captured = {}
    orig_finish = draft.finish

    def spy(xi, o):
        r = orig_finish(xi, o)
        captured.setdefault("calls", []).append(r)
        return r

    draft.finish = spy
    res = mt.chain_accept(draft, target_feats, embed, head, x, 2, 3, cfg, nullcontext())
    assert 0.0 <= res["mean_accepted"] <= 3.0
    d1, d2 = captured["calls"][0], captured["calls"][1]
    draft.finish = orig_finish
    t = 5   # start position: teacher-forced draft inputs 0..t, then one chain step
    with torch.no_grad():
        y1 = head(d1[:, t]).argmax(-1)
        emb_seq = torch.cat((embed(x[:, 1: t + 2]), embed(y1)[:, None]), 1)
        feat_seq = torch.cat((feats[:, : t + 1], d1[:, t][:, None]), 1)
        full = draft(emb_seq, feat_seq)
    torch.testing.assert_close(full[:, -1], d2[:, t], atol=1e-4, rtol=1e-4)


def test_make_dummy_large(tmp_path):
    pytest.importorskip("tokenizers")
    r = subprocess.run([sys.executable, str(SCRIPTS / "make_dummy_large.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    t = json.loads((tmp_path / "target" / "config.json").read_text())
    d = json.loads((tmp_path / "draft" / "config.json").read_text())
    assert t["architectures"] == ["LlamaForCausalLM"]
    assert (t["hidden_size"], t["num_hidden_layers"], t["num_attention_heads"],
            t["num_key_value_heads"], t["intermediate_size"], t["vocab_size"],
            t["max_position_embeddings"]) == (4096, 32, 32, 8, 14336, 128256, 8192)
    assert t["rope_parameters"]["rope_theta"] == 500000.0
    assert d["architectures"] == ["LlamaForCausalLMEagle"] and d["num_hidden_layers"] == 1
    for k in ("hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads",
              "head_dim", "intermediate_size"):
        assert d[k] == t[k], k
    assert not list(tmp_path.glob("*/*.safetensors"))
    from tokenizers import Tokenizer
    for sub in ("target", "draft"):
        tok = Tokenizer.from_file(str(tmp_path / sub / "tokenizer.json"))
        assert tok.get_vocab_size() <= t["vocab_size"]
        assert (tmp_path / sub / "tokenizer_config.json").is_file()
        ids = tok.encode("def f(x): return x").ids
        assert max(ids) < t["vocab_size"]
