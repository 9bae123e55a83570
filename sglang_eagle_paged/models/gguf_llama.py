"""Read a llama-architecture GGUF file as Hugging Face ``LlamaForCausalLM`` parts.

Three things differ between the two formats and are undone here:

* tensor names (``blk.N.attn_q.weight`` -> ``model.layers.N.self_attn.q_proj.weight``);
* quantization: every tensor is dequantized to float32 with the ``gguf`` package;
* the Q and K projections: llama.cpp's converter reorders their rows from the
  half-split rope layout of Hugging Face Llama into the interleaved one llama.cpp
  applies. Served without the inverse reordering, the model still runs, but its
  attention sees rotated positions in the wrong pairs (perplexity 105 against 8.8 on
  SmolLM2, see docs/testbed.md).

The tokenizer is rebuilt from the GGUF vocabulary and merges (byte-level BPE). Its
pre-tokenizer is not stored in the GGUF, only named (``tokenizer.ggml.pre``); the
caller says which one the model was trained with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

# GGUF block tensor suffix -> Hugging Face name inside model.layers.N
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# llama.cpp token types (gguf.TokenType): 3 = CONTROL, 4 = USER_DEFINED
_SPECIAL_TYPES = (3, 4)


class GGUFFormatError(ValueError):
    """The file is not the llama GGUF this reader expects."""


def hf_name(gguf_name: str) -> str:
    if gguf_name in _TOP_NAMES:
        return _TOP_NAMES[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}"
    raise GGUFFormatError(f"unknown GGUF tensor name {gguf_name!r}")


def unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's Q/K row permutation for ``n_heads`` heads.

    llama.cpp views each head's rows as (2, head_dim/2) and swaps the axes, putting the two
    halves' rows side by side; viewing them as (head_dim/2, 2) and swapping back restores them.
    """
    rows = w.shape[0]
    if rows % (2 * n_heads):
        raise GGUFFormatError(f"{rows} rows do not split into {n_heads} heads of even size")
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


@dataclass
class LlamaGGUF:
    """Metadata of one llama GGUF file and a way to read its tensors."""

    path: str
    reader: object

    @classmethod
    def open(cls, path: str) -> "LlamaGGUF":
        from gguf import GGUFReader

        reader = GGUFReader(path)
        arch = _field(reader, "general.architecture")
        if arch != "llama":
            raise GGUFFormatError(f"{path}: architecture {arch!r}, expected 'llama'")
        return cls(path=path, reader=reader)

    def meta(self, key: str, default=None):
        return _field(self.reader, key, default)

    @property
    def n_heads(self) -> int:
        return int(self.meta("llama.attention.head_count"))

    @property
    def n_kv_heads(self) -> int:
        return int(self.meta("llama.attention.head_count_kv", self.n_heads))

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Hugging Face name -> shape (row-major, as torch stores it), without reading the data."""
        return {hf_name(t.name): tuple(int(x) for x in reversed(t.shape)) for t in self.reader.tensors}

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        """(Hugging Face name, float32 array) per tensor, Q and K un-permuted, in file order."""
        from gguf.quants import dequantize

        for t in self.reader.tensors:
            name = hf_name(t.name)
            shape = tuple(int(x) for x in reversed(t.shape))
            w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
            if name.endswith("self_attn.q_proj.weight"):
                w = unpermute_rope_rows(w, self.n_heads)
            elif name.endswith("self_attn.k_proj.weight"):
                w = unpermute_rope_rows(w, self.n_kv_heads)
            yield name, w

    def llama_config(self, **overrides) -> dict:
        """config.json of the matching ``LlamaForCausalLM`` (transformers 4 and 5 field names)."""
        hidden = int(self.meta("llama.embedding_length"))
        heads = self.n_heads
        tokens = self.meta("tokenizer.ggml.tokens") or []
        vocab = int(self.meta("llama.vocab_size", len(tokens)))
        theta = float(self.meta("llama.rope.freq_base", 10000.0))
        names = {t.name for t in self.reader.tensors}
        cfg = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": hidden,
            "intermediate_size": int(self.meta("llama.feed_forward_length")),
            "num_hidden_layers": int(self.meta("llama.block_count")),
            "num_attention_heads": heads,
            "num_key_value_heads": self.n_kv_heads,
            "head_dim": int(self.meta("llama.rope.dimension_count", hidden // heads)),
            "vocab_size": vocab,
            "max_position_embeddings": int(self.meta("llama.context_length")),
            # float32 in the file (9.9999997e-06): the value it stands for
            "rms_norm_eps": round(float(self.meta("llama.attention.layer_norm_rms_epsilon", 1e-5)), 10),
            "rope_theta": theta,
            "rope_parameters": {"rope_type": "default", "rope_theta": theta},
            "hidden_act": "silu",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "mlp_bias": False,
            "initializer_range": 0.02,
            "pretraining_tp": 1,
            "use_cache": True,
            "tie_word_embeddings": "output.weight" not in names,
            "bos_token_id": self.meta("tokenizer.ggml.bos_token_id"),
            "eos_token_id": self.meta("tokenizer.ggml.eos_token_id"),
            "pad_token_id": self.meta("tokenizer.ggml.padding_token_id"),
            "dtype": "bfloat16",
            "torch_dtype": "bfloat16",
        }
        cfg.update(overrides)
        return cfg

    def vocab_and_merges(self) -> tuple[list[str], list[str], list[int]]:
        model = self.meta("tokenizer.ggml.model")
        if model != "gpt2":
            raise GGUFFormatError(f"tokenizer model {model!r}: only byte-level BPE ('gpt2') is supported")
        tokens = list(self.meta("tokenizer.ggml.tokens"))
        merges = list(self.meta("tokenizer.ggml.merges"))
        types = [int(x) for x in self.meta("tokenizer.ggml.token_type")]
        return tokens, merges, types


def byte_level_bpe(tokens: list[str], merges: list[str], types: list[int], *, split_digits: bool):
    """A ``tokenizers.Tokenizer``: byte-level BPE over ``tokens``/``merges``, control tokens special.

    ``split_digits`` puts each digit in a piece of its own before the byte-level split, as
    the GPT-2-style regex alone does not (it groups runs of digits).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise GGUFFormatError("the GGUF vocabulary has duplicate tokens")
    pairs = []
    for m in merges:
        a, sep, b = m.partition(" ")
        if not sep or not a or not b:
            raise GGUFFormatError(f"malformed merge {m!r}")
        pairs.append((a, b))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, dropout=None, unk_token=None, fuse_unk=False,
                               byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if split_digits else byte_level)
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty in _SPECIAL_TYPES])
    return tok
