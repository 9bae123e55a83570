#!/usr/bin/env python3
"""Write a Llama-3-8B-shaped target folder and a one-layer EAGLE (v1) draft folder for
`sglang.launch_server --load-format dummy` (random weights: SGLang's dummy loader
reads only config.json, so no *.safetensors are written).

    python3 scripts/device/make_dummy_large.py OUT_DIR [--corpus-mb 2]

* OUT_DIR/target/config.json: LlamaForCausalLM, hidden 4096, 32 layers, 32 heads /
  8 kv heads (head_dim 128), intermediate 14336, vocab 128256, rope theta 500000,
  max_position 8192, untied embeddings, bf16.
* OUT_DIR/draft/config.json: LlamaForCausalLMEagle with the same shape but 1 layer
  (the EAGLE v1 draft takes embed_tokens/lm_head from the target at run time).
* tokenizer files in both: the offline byte-level BPE of make_testbed.py, trained on
  a couple of MB of this Python's stdlib and padded with synthetic merges so that
  the tokenizer has exactly vocab_size ids (every id a dummy model samples decodes);
  Llama-3 style special tokens at the top ids and a chat template.

Adapted from this workplace's shared/device/make_dummy_models.py (the probe's
script); the tokenizer code is shared with make_testbed.py in this folder.
"""
import argparse
import importlib.util
import json
import os
import time

LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                 vocab_size=128256, max_position_embeddings=8192)
ROPE_THETA = 500000.0


def _testbed_module():
    p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_testbed.py")
    spec = importlib.util.spec_from_file_location("make_testbed", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def llama_config(arch, tok, mt, layers):
    s = dict(LLAMA3_8B)
    s["num_hidden_layers"] = layers
    return {
        "architectures": [arch],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": tok.token_to_id(mt.BOS),
        "eos_token_id": [tok.token_to_id(mt.EOS), tok.token_to_id(mt.EOT)],
        "pad_token_id": tok.token_to_id("<|pad_id|>"),
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_theta": ROPE_THETA,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA},
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        "transformers_version": "5.6.0",
        "use_cache": True,
        **s,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--corpus-mb", type=float, default=2.0, help="MB of stdlib text for the BPE")
    a = ap.parse_args()
    t0 = time.time()
    mt = _testbed_module()
    docs, _ = mt.collect_corpus(int(a.corpus_mb * 2**20), heldout_frac=0.0)
    tok = mt.build_tokenizer(docs, LLAMA3_8B["vocab_size"], int(a.corpus_mb * 2**20))
    gen = None
    for sub, arch, layers in (("target", "LlamaForCausalLM", LLAMA3_8B["num_hidden_layers"]),
                              ("draft", "LlamaForCausalLMEagle", 1)):
        folder = os.path.join(a.out, sub)
        os.makedirs(folder, exist_ok=True)
        cfg = llama_config(arch, tok, mt, layers)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        gen = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
               "pad_token_id": cfg["pad_token_id"]}
        with open(os.path.join(folder, "generation_config.json"), "w") as f:
            json.dump(gen, f, indent=2)
        mt.write_tokenizer(folder, tok)
    ids = tok.encode("def hello(): return 'world'").ids
    print(f"wrote {a.out}/target and {a.out}/draft (vocab {tok.get_vocab_size()}) "
          f"in {time.time() - t0:.1f}s; sample ids {ids}")


if __name__ == "__main__":
    main()
