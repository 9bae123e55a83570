#!/usr/bin/env python3
"""Make the end-to-end testbed models: a small trained Llama target and a trained
EAGLE (v1) draft head for it, both loadable by SGLang 0.5.12.post1.

    python3 scripts/device/make_testbed.py OUT_DIR                    # GPU, ~5 min
    python3 scripts/device/make_testbed.py OUT_DIR --device cpu --tiny  # smoke run

Writes OUT_DIR/target (LlamaForCausalLM), OUT_DIR/draft (LlamaForCausalLMEagle),
OUT_DIR/testbed.json (settings, losses, agreement, sizes, wall times, versions).
Needs torch, transformers, tokenizers, safetensors; no network.

Facts about SGLang 0.5.12.post1 this script is built on (read from
sglang/srt/models/llama_eagle.py, models/llama.py, layers/logits_processor.py and
speculative/eagle_worker.py):

* Draft architecture (LlamaForCausalLMEagle): x = fc(cat(embed(tok), hidden)) with
  fc = nn.Linear(2H, H, bias=True), the EMBEDDING FIRST; then ONE LlamaDecoderLayer
  whose input_layernorm is removed for layer 0 (identity); NO final norm: the output
  is mlp_out + residual, i.e. r = x + attn(x); out = r + mlp(post_attention_norm(r)).
  Logits = lm_head(out) with no norm in between.  `out` is also the hidden state the
  next draft step consumes.
* Embedding and lm_head: for plain EAGLE the worker always calls
  draft.set_embed_and_head(target embed, target lm_head) after loading, so the
  draft's own copies are overwritten.  load_weights drops every name containing
  "lm_head" and prefixes the rest with "model." before LlamaForCausalLM.load_weights
  (which stacks q/k/v -> qkv_proj and gate/up -> gate_up_proj and only warns on
  unknown names; missing names are not checked).  So the draft checkpoint here
  stores only: fc.weight, fc.bias, layers.0.self_attn.{q,k,v,o}_proj.weight,
  layers.0.post_attention_layernorm.weight, layers.0.mlp.{gate,up,down}_proj.weight
  (no embed_tokens, no lm_head, no layers.0.input_layernorm, no norm: those would be
  unused or "Parameter ... not found" warnings).
* Hidden state given to the draft: the target's LlamaForCausalLM.forward hands the
  output of model.norm (final RMSNorm applied, i.e. the same tensor lm_head sees) to
  the LogitsProcessor with no hidden_states_before_norm, so spec_info.hidden_states
  is the POST-final-norm last-layer state.  Training below uses exactly that
  (HF LlamaModel's last_hidden_state is also post-norm).
* Alignment: draft position t gets (embed(x[t+1]), h_target[t]) at rope position t,
  and should output ~h_target[t+1] whose lm_head argmax is the target's token t+2.
* rope: SGLang reads config.rope_parameters["rope_theta"] (transformers 5 style),
  neox-style rotation, the same as HF Llama.
"""
import argparse
import hashlib
import importlib.metadata
import json
import math
import os
import sys
import sysconfig
import time

T_START = time.time()

# Special tokens (Llama-3 style names) placed at the top ids of the vocabulary.
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>", "<|pad_id|>", "<|python_tag|>"]
SPECIALS += [f"<|reserved_special_token_{i}|>" for i in range(16 - len(SPECIALS))]
BOS, EOS, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"
CHAT_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

# Default (GPU) and tiny (CPU smoke) shapes.  Sizes (bf16, vocab 8192, H 512):
# target embed+lm_head 8.39M + 4 layers x 1.97M = 16.25M params (32.5 MB);
# draft fc 0.52M + 1 layer (inter 1024) 2.36M = 2.88M params (5.8 MB). Total 38.3 MB.
FULL = dict(vocab=8192, hidden=512, layers=4, heads=8, kv_heads=4, inter=768,
            # max_pos 16384: SGLang's piecewise CUDA graph warm-up runs 8192-token
            # prefills, past a 4096-entry rope cache (illegal memory access seen on the H200)
            draft_inter=1024, max_pos=16384, seq=512, batch=128, corpus_mb=0,
            bpe_mb=24, target_seconds=150.0, draft_seconds=90.0, lr=3e-3, draft_lr=2e-3)
TINY = dict(vocab=1024, hidden=64, layers=2, heads=4, kv_heads=2, inter=128,
            draft_inter=128, max_pos=512, seq=64, batch=8, corpus_mb=1.5,
            bpe_mb=1.0, target_seconds=15.0, draft_seconds=10.0, lr=3e-3, draft_lr=3e-3)
MAX_TOTAL_BYTES = 40_000_000


def log(*a):
    print(f"[{time.time() - T_START:6.1f}s]", *a, flush=True)


# --------------------------------------------------------------------------- corpus
def _held_out(key, frac):
    h = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16)
    return (h % 10000) < frac * 10000


def collect_corpus(max_bytes, heldout_frac=0.02):
    """Returns (docs_train, docs_heldout): lists of (kind, title, text)."""
    docs = []
    stdlib = sysconfig.get_paths()["stdlib"]
    skip_dirs = {"site-packages", "dist-packages", "__pycache__"}
    for d, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(x for x in dirs if x not in skip_dirs)
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            p = os.path.join(d, f)
            try:
                if os.path.getsize(p) > 600_000:   # generated tables, not code
                    continue
                with open(p, encoding="utf-8") as fh:
                    text = fh.read()
            except (UnicodeDecodeError, OSError):
                continue
            rel = os.path.relpath(p, stdlib)
            docs.append(("code", rel, text))
    seen = set()
    prose = []
    for dist in importlib.metadata.distributions():
        try:
            name = dist.metadata["Name"] or ""
            raw = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
        except Exception:
            continue
        key = name.lower()
        if not name or key in seen:
            continue
        seen.add(key)
        body = raw.split("\n\n", 1)[1] if "\n\n" in raw else ""
        if not body.strip():
            body = dist.metadata.get("Description") or ""
        body = body.strip()
        if len(body) > 200:
            summary = dist.metadata.get("Summary") or ""
            prose.append(("prose", name, (f"# {name}\n\n{summary}\n\n" if summary else "") + body))
    prose.sort(key=lambda t: t[1].lower())
    # Interleave so that a byte cap keeps both kinds.
    all_docs, i, j = [], 0, 0
    while i < len(docs) or j < len(prose):
        for _ in range(8):
            if i < len(docs):
                all_docs.append(docs[i]); i += 1
        if j < len(prose):
            all_docs.append(prose[j]); j += 1
    if max_bytes:
        out, n = [], 0
        for doc in all_docs:
            if n >= max_bytes:
                break
            out.append(doc); n += len(doc[2])
        all_docs = out
    train = [d for d in all_docs if not _held_out(d[0] + d[1], heldout_frac)]
    held = [d for d in all_docs if _held_out(d[0] + d[1], heldout_frac)]
    if not held:
        held = train[-2:]; train = train[:-2]
    return train, held


def chat_wrap(kind, title, text):
    if kind == "code":
        q = f"Show me the Python source of `{title}`."
    else:
        q = f"Tell me about the Python package {title}."
    return (f"<|start_header_id|>user<|end_header_id|>\n\n{q}{EOT}"
            f"<|start_header_id|>assistant<|end_header_id|>\n\n{text.strip()}")


# ------------------------------------------------------------------------ tokenizer
def build_tokenizer(docs, vocab_size, bpe_bytes):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    n_base = vocab_size - len(SPECIALS)

    def sample():
        n = 0
        for _, _, text in docs:
            for k in range(0, len(text), 8192):
                yield text[k:k + 8192]
                n += min(8192, len(text) - k)
                if n >= bpe_bytes:
                    return

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=n_base, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sample(), trainer=trainer)
    # If the sample was too small to reach n_base merges, pad with synthetic merges
    # (concatenations of existing tokens) so every id below n_base decodes.
    # (Padding idea adapted from this workplace's shared/device/make_dummy_models.py.)
    data = json.loads(tok.to_str())
    vocab, merges = data["model"]["vocab"], data["model"]["merges"]
    as_list = bool(merges) and isinstance(merges[0], list)
    by_id = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    a_i = 0
    while len(vocab) < n_base:
        a = by_id[a_i % len(by_id)]
        for b in by_id[:512]:
            if len(vocab) >= n_base:
                break
            if a + b not in vocab:
                vocab[a + b] = len(vocab)
                merges.append([a, b] if as_list else f"{a} {b}")
        a_i += 1
    tok = Tokenizer.from_str(json.dumps(data))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    assert tok.get_vocab_size() == vocab_size, (tok.get_vocab_size(), vocab_size)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS}:0 $A:0", pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
        special_tokens=[(BOS, bos_id)])
    return tok


def write_tokenizer(folder, tok):
    tok.save(os.path.join(folder, "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS, "eos_token": EOT, "pad_token": "<|pad_id|>",
        "add_bos_token": True, "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
        "model_input_names": ["input_ids", "attention_mask"],
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(folder, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": BOS, "eos_token": EOT, "pad_token": "<|pad_id|>"}, f, indent=2)


def encode_docs(tok, docs, chat_frac=0.2):
    """One token stream: [bos] doc [eos] per doc; ~chat_frac docs in chat format
    (ending in <|eot_id|>) so the chat template's tokens are seen in training."""
    import numpy as np
    texts, ends = [], []
    for kind, title, text in docs:
        if _held_out("chat" + title, chat_frac):
            texts.append(chat_wrap(kind, title, text)); ends.append(EOT)
        else:
            texts.append(text); ends.append(EOS)
    encs = tok.encode_batch(texts, add_special_tokens=True)   # adds bos
    eos_id, eot_id = tok.token_to_id(EOS), tok.token_to_id(EOT)
    parts = []
    for e, end in zip(encs, ends):
        parts.append(np.asarray(e.ids, dtype=np.int32))
        parts.append(np.asarray([eot_id if end == EOT else eos_id], dtype=np.int32))
    return np.concatenate(parts)


# --------------------------------------------------------------------------- models
def make_llama_config(a, tok, layers, inter, arch):
    from transformers import LlamaConfig
    cfg = LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=inter,
        num_hidden_layers=layers, num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads, head_dim=a.hidden // a.heads,
        max_position_embeddings=a.max_pos, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        bos_token_id=tok.token_to_id(BOS),
        eos_token_id=[tok.token_to_id(EOS), tok.token_to_id(EOT)],
        pad_token_id=tok.token_to_id("<|pad_id|>"),
        architectures=[arch],
    )
    cfg.dtype = "bfloat16"
    return cfg


def build_draft_module(cfg):
    """EAGLE-1 draft exactly as SGLang's LlamaForCausalLMEagle computes it (see the
    module docstring); parameter names are the checkpoint names SGLang loads."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    H, nh, nkv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    hd = cfg.head_dim
    theta = cfg.rope_parameters["rope_theta"]

    class RMSNorm(nn.Module):
        def __init__(self, n, eps):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))
            self.eps = eps

        def forward(self, x):
            dt = x.dtype
            x = x.float()
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * x.to(dt)

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(H, nh * hd, bias=False)
            self.k_proj = nn.Linear(H, nkv * hd, bias=False)
            self.v_proj = nn.Linear(H, nkv * hd, bias=False)
            self.o_proj = nn.Linear(nh * hd, H, bias=False)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(H, cfg.intermediate_size, bias=False)
            self.up_proj = nn.Linear(H, cfg.intermediate_size, bias=False)
            self.down_proj = nn.Linear(cfg.intermediate_size, H, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = Attn()
            self.post_attention_layernorm = RMSNorm(H, cfg.rms_norm_eps)
            self.mlp = MLP()

    def rope(x, pos):
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd))
        fr = pos.float()[..., None] * inv                     # (..., S, hd/2)
        emb = torch.cat((fr, fr), -1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat((-x2, x1), -1) * sin

    class Draft(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2 * H, H, bias=True)
            self.layers = nn.ModuleList([Layer()])

        def inp(self, emb, feat):
            return self.fc(torch.cat((emb, feat), -1))

        def qkv(self, x, pos):
            """x (B,S,H), pos (S,) or (B,S) -> q (B,nh,S,hd), k,v (B,nkv,S,hd)."""
            a = self.layers[0].self_attn
            B, S, _ = x.shape
            q = a.q_proj(x).view(B, S, nh, hd).transpose(1, 2)
            k = a.k_proj(x).view(B, S, nkv, hd).transpose(1, 2)
            v = a.v_proj(x).view(B, S, nkv, hd).transpose(1, 2)
            p = pos if pos.dim() == 1 else pos[:, None, :]
            return rope(q, p), rope(k, p), v

        def finish(self, x, o):
            """x: layer input (B,S,H); o: attention output (B,nh,S,hd)."""
            L = self.layers[0]
            B, S, _ = x.shape
            r = x + L.self_attn.o_proj(o.transpose(1, 2).reshape(B, S, nh * hd))
            return r + L.mlp(L.post_attention_layernorm(r))

        def forward(self, emb, feat):
            x = self.inp(emb, feat)
            pos = torch.arange(x.shape[1], device=x.device)
            q, k, v = self.qkv(x, pos)
            rep = nh // nkv
            o = F.scaled_dot_product_attention(
                q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True)
            return self.finish(x, o)

    return Draft()


# ------------------------------------------------------------------------ training
def lr_at(frac, peak, warm=0.03, floor=0.1):
    if frac < warm:
        return peak * max(frac / warm, 0.02)
    f = min(1.0, (frac - warm) / (1 - warm))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * f)))


def timed_schedule(seconds, opt, peak_lr, t0):
    """Yield until the time budget is spent, setting the cosine learning rate each step."""
    while (elapsed := time.time() - t0) < seconds:
        for group in opt.param_groups:
            group["lr"] = lr_at(elapsed / seconds, peak_lr)
        yield


def optimizer_step(opt, params, loss):
    import torch  # imported lazily, as everywhere in this script

    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


def batches(stream, batch, seq, gen, device):
    import torch
    n = stream.numel() - seq - 1
    while True:
        idx = torch.randint(0, n, (batch,), generator=gen, device=stream.device)
        off = idx[:, None] + torch.arange(seq + 1, device=stream.device)[None, :]
        yield stream[off].to(device, non_blocking=True).long()


def param_count(m):
    return sum(p.numel() for p in m.parameters())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny dims, short run (CPU smoke test)")
    ap.add_argument("--seed", type=int, default=0)
    for k, v in FULL.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=None,
                        help=f"default {v} (tiny: {TINY[k]})")
    ap.add_argument("--w-reg", type=float, default=1.0, help="draft smooth-L1 weight")
    ap.add_argument("--w-cls", type=float, default=0.5, help="draft soft-CE weight")
    ap.add_argument("--feat-noise", type=float, default=0.05,
                    help="uniform noise (+-) added to the target features fed to the draft")
    a = ap.parse_args()
    base = TINY if a.tiny else FULL
    for k, v in base.items():
        if getattr(a, k) is None:
            setattr(a, k, v)

    import torch
    import torch.nn.functional as F
    import transformers
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM

    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    on_gpu = dev.type == "cuda"
    if on_gpu:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16)
    walls = {}
    out = os.path.abspath(a.out)
    tdir, ddir = os.path.join(out, "target"), os.path.join(out, "draft")
    os.makedirs(tdir, exist_ok=True)
    os.makedirs(ddir, exist_ok=True)

    # ---- data
    t0 = time.time()
    train_docs, held_docs = collect_corpus(int(a.corpus_mb * 2**20))
    n_code = sum(1 for d in train_docs + held_docs if d[0] == "code")
    n_bytes = sum(len(d[2]) for d in train_docs + held_docs)
    log(f"corpus: {len(train_docs)} train / {len(held_docs)} held-out docs, "
        f"{n_code} stdlib files + {len(train_docs) + len(held_docs) - n_code} package "
        f"descriptions, {n_bytes / 1e6:.1f} MB")
    tok = build_tokenizer(train_docs, a.vocab, int(a.bpe_mb * 2**20))
    log(f"tokenizer: vocab {tok.get_vocab_size()}")
    train_np = encode_docs(tok, train_docs)
    held_np = encode_docs(tok, held_docs)
    log(f"tokens: train {len(train_np) / 1e6:.2f}M, held-out {len(held_np) / 1e6:.3f}M "
        f"({n_bytes / max(1, len(train_np) + len(held_np)):.2f} bytes/token)")
    train_tok = torch.from_numpy(train_np)
    held_tok = torch.from_numpy(held_np)
    if on_gpu:
        train_tok, held_tok = train_tok.to(dev), held_tok.to(dev)
    seq = a.seq
    if held_tok.numel() < 4 * (seq + 1):   # tiny corpora: borrow the tail of train
        held_tok = train_tok[-8 * (seq + 1):]
    walls["data_s"] = time.time() - t0

    # ---- target
    tcfg = make_llama_config(a, tok, a.layers, a.inter, "LlamaForCausalLM")
    dcfg = make_llama_config(a, tok, 1, a.draft_inter, "LlamaForCausalLMEagle")
    dcfg.max_position_embeddings = a.max_pos
    target = LlamaForCausalLM._from_config(tcfg, attn_implementation="sdpa").to(dev)
    draft = build_draft_module(dcfg).to(dev)
    n_target, n_draft = param_count(target), param_count(draft)
    est_bytes = 2 * (n_target + n_draft)
    log(f"params: target {n_target / 1e6:.2f}M, draft {n_draft / 1e6:.2f}M "
        f"(saved bf16 ~{est_bytes / 1e6:.1f} MB)")
    if est_bytes > MAX_TOTAL_BYTES and not a.tiny:
        sys.exit(f"models would take {est_bytes / 1e6:.1f} MB > {MAX_TOTAL_BYTES / 1e6:.0f} MB")

    gen = torch.Generator(device=train_tok.device).manual_seed(a.seed)
    it = batches(train_tok, a.batch, seq, gen, dev)

    def eval_target(n_batches=8):
        target.eval()
        g = torch.Generator(device=held_tok.device).manual_seed(123)
        hit = batches(held_tok, min(a.batch, 32), seq, g, dev)
        tot = 0.0
        with torch.no_grad(), amp:
            for _ in range(n_batches):
                x = next(hit)
                logits = target(input_ids=x[:, :-1]).logits
                tot += F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                       x[:, 1:].reshape(-1)).item()
        target.train()
        return tot / n_batches

    opt = torch.optim.AdamW(target.parameters(), lr=a.lr, betas=(0.9, 0.95),
                            weight_decay=0.1, fused=on_gpu)
    t0 = time.time()
    step, losses = 0, []
    target.train()
    for _ in timed_schedule(a.target_seconds, opt, a.lr, t0):
        x = next(it)
        with amp:
            logits = target(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        optimizer_step(opt, target.parameters(), loss)
        step += 1
        if step % 50 == 0 or step <= 2:
            losses.append((step, round(time.time() - t0, 1), loss.item()))
            if step % 200 == 0 or step <= 2:
                log(f"target step {step} loss {loss.item():.3f}")
    if on_gpu:
        torch.cuda.synchronize()
    walls["target_train_s"] = time.time() - t0
    target_train_loss = loss.item()
    target_steps = step
    del opt
    target_held_loss = eval_target()
    log(f"target: {step} steps ({step * a.batch * seq / 1e6:.0f}M tokens) in "
        f"{walls['target_train_s']:.0f}s; train loss {target_train_loss:.3f}, "
        f"held-out loss {target_held_loss:.3f}")

    # ---- draft
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    embed = target.model.embed_tokens
    head = target.lm_head

    def target_feats(x):
        with torch.no_grad(), amp:
            h = target.model(input_ids=x).last_hidden_state      # post final norm
            logits = head(h)
        return h.float(), logits.float()

    dopt = torch.optim.AdamW(draft.parameters(), lr=a.draft_lr, betas=(0.9, 0.95),
                             weight_decay=0.0, fused=on_gpu)
    t0 = time.time()
    dstep, dlosses = 0, []
    draft.train()
    for _ in timed_schedule(a.draft_seconds, dopt, a.draft_lr, t0):
        x = next(it)[:, :-1]
        h, logits = target_feats(x)
        with torch.no_grad():
            e = embed(x[:, 1:]).float()
        feat = h[:, :-1]
        if a.feat_noise > 0:
            feat = feat + (torch.rand_like(feat) * 2 - 1) * a.feat_noise
        with amp:
            d = draft(e, feat)
            dlog = head(d)
        d = d.float()
        reg = F.smooth_l1_loss(d, h[:, 1:])
        tprob = torch.softmax(logits[:, 1:], -1)
        cls = -(tprob * torch.log_softmax(dlog.float(), -1)).sum(-1).mean()
        loss = a.w_reg * reg + a.w_cls * cls
        optimizer_step(dopt, draft.parameters(), loss)
        dstep += 1
        if dstep % 50 == 0 or dstep <= 2:
            dlosses.append((dstep, round(time.time() - t0, 1), reg.item(), cls.item()))
            if dstep % 200 == 0 or dstep <= 2:
                log(f"draft step {dstep} reg {reg.item():.4f} cls {cls.item():.3f}")
    if on_gpu:
        torch.cuda.synchronize()
    walls["draft_train_s"] = time.time() - t0
    draft_reg, draft_cls = reg.item(), cls.item()
    log(f"draft: {dstep} steps in {walls['draft_train_s']:.0f}s; reg {draft_reg:.4f} cls {draft_cls:.3f}")

    # ---- evaluation
    t0 = time.time()
    draft.eval()
    g = torch.Generator(device=held_tok.device).manual_seed(321)
    hit = batches(held_tok, min(a.batch, 32), seq, g, dev)
    agree = top4 = count = 0
    with torch.no_grad():
        for _ in range(8):
            x = next(hit)[:, :-1]
            h, logits = target_feats(x)
            with amp:
                d = draft(embed(x[:, 1:]), h[:, :-1])
                dl = head(d).float()
            want = logits[:, 1:].argmax(-1)
            agree += (dl.argmax(-1) == want).sum().item()
            top4 += (dl.topk(4, -1).indices == want[..., None]).any(-1).sum().item()
            count += want.numel()
    agree_top1, agree_top4 = agree / count, top4 / count

    # Chained (multi-step, top-1) acceptance on the target's own greedy output: the
    # draft runs K steps from every position, feeding its own hidden state and token
    # back as SGLang does; accepted = leading steps whose token equals the target's.
    K = 4
    n_prompt, n_gen = (64, 192) if not a.tiny else (16, 32)
    xs = next(hit)[: min(8, a.batch), :n_prompt]
    with torch.no_grad(), amp:
        gen_ids = target.generate(input_ids=xs, attention_mask=torch.ones_like(xs),
                                  max_new_tokens=n_gen, min_new_tokens=n_gen, do_sample=False,
                                  pad_token_id=tcfg.pad_token_id)
    accept = chain_accept(draft, target_feats, embed, head, gen_ids, n_prompt, K, dcfg, amp)
    walls["eval_s"] = time.time() - t0
    log(f"draft agreement with target next token (held-out, teacher-forced): "
        f"top1 {agree_top1:.3f}, top4 {agree_top4:.3f}")
    log(f"chained greedy drafting on target output, {K} steps: mean accepted "
        f"{accept['mean_accepted']:.2f}/{K}, per-step rate {accept['step_rates']}")

    prompt = "def fibonacci(n):\n"
    ids = torch.tensor([tok.encode(prompt).ids], device=dev)
    with torch.no_grad(), amp:
        s = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                            max_new_tokens=64 if not a.tiny else 16, do_sample=False,
                            pad_token_id=tcfg.pad_token_id)
    sample = tok.decode(s[0].tolist(), skip_special_tokens=False)
    log("greedy sample:\n" + sample)

    # ---- save
    t0 = time.time()
    target = target.to(torch.bfloat16)
    target.config.dtype = "bfloat16"
    target.save_pretrained(tdir, safe_serialization=True)
    gen_cfg = {"bos_token_id": tcfg.bos_token_id, "eos_token_id": tcfg.eos_token_id,
               "pad_token_id": tcfg.pad_token_id, "do_sample": False}
    with open(os.path.join(tdir, "generation_config.json"), "w") as f:
        json.dump(gen_cfg, f, indent=2)
    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in draft.state_dict().items()}
    save_file(sd, os.path.join(ddir, "model.safetensors"), metadata={"format": "pt"})
    dcfg.save_pretrained(ddir)
    with open(os.path.join(ddir, "generation_config.json"), "w") as f:
        json.dump(gen_cfg, f, indent=2)
    for folder in (tdir, ddir):
        write_tokenizer(folder, tok)
    walls["save_s"] = time.time() - t0

    def dir_bytes(p, ext=".safetensors"):
        return sum(os.path.getsize(os.path.join(p, f)) for f in os.listdir(p) if f.endswith(ext))

    sizes = {"target_weights_bytes": dir_bytes(tdir), "draft_weights_bytes": dir_bytes(ddir),
             "target_dir_bytes": dir_bytes(tdir, ""), "draft_dir_bytes": dir_bytes(ddir, "")}
    walls["total_s"] = time.time() - T_START
    report = {
        "settings": {k: getattr(a, k) for k in list(FULL) + ["tiny", "device", "seed", "w_reg",
                                                             "w_cls", "feat_noise"]},
        "target": {"params": n_target, "steps": target_steps,
                   "train_tokens": target_steps * a.batch * seq,
                   "final_train_loss": target_train_loss, "heldout_loss": target_held_loss,
                   "loss_curve": losses},
        "draft": {"params": n_draft, "steps": dstep, "final_reg_loss": draft_reg,
                  "final_cls_loss": draft_cls, "loss_curve": dlosses,
                  "agreement_top1": agree_top1, "agreement_top4": agree_top4,
                  "chain": accept, "keys": sorted(sd)},
        "corpus": {"train_docs": len(train_docs), "heldout_docs": len(held_docs),
                   "bytes": n_bytes, "train_tokens": int(len(train_np)),
                   "heldout_tokens": int(len(held_np))},
        "sample": sample, "sizes": sizes, "wall_s": walls,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0],
                     "tokenizers": importlib.metadata.version("tokenizers"),
                     "gpu": torch.cuda.get_device_name(0) if on_gpu else None},
    }
    with open(os.path.join(out, "testbed.json"), "w") as f:
        json.dump(report, f, indent=2)
    log(f"sizes: {json.dumps(sizes)}")
    log(f"wall: {json.dumps({k: round(v, 1) for k, v in walls.items()})}")
    log(f"wrote {tdir}, {ddir}, {os.path.join(out, 'testbed.json')}")
    total = sizes["target_weights_bytes"] + sizes["draft_weights_bytes"]
    if total > MAX_TOTAL_BYTES and not a.tiny:
        sys.exit(f"weights take {total / 1e6:.1f} MB > {MAX_TOTAL_BYTES / 1e6:.0f} MB")


def chain_accept(draft, target_feats, embed, head, x, n_prompt, K, cfg, amp):
    """Greedy chain drafting of K steps from every position of x (B,T) (which is the
    target's own greedy continuation after n_prompt tokens), mirroring SGLang: draft
    position t is fed (embed(x[t+1]), h_target[t]); step k>1 is fed (embed(own
    token), own previous hidden) at position t+k-1 and attends to the teacher-forced
    draft KV of positions <= t plus its own chain."""
    import torch
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    rep = nh // nkv
    with torch.no_grad(), amp:
        h, _ = target_feats(x)
        B, T = x.shape
        S = T - 1
        xin = draft.inp(embed(x[:, 1:]), h[:, :-1])
        pos = torch.arange(S, device=x.device)
        q, k, v = draft.qkv(xin, pos)
        kr, vr = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        o = torch.nn.functional.scaled_dot_product_attention(q, kr, vr, is_causal=True)
        d = draft.finish(xin, o)                      # (B,S,H): step-1 hidden per start t
        tokens = [head(d).argmax(-1)]                 # guess for x[t+2]
        mask = pos[None, :] <= pos[:, None]           # (start t, key j): j <= t
        ck, cv = [], []
        scale = q.shape[-1] ** -0.5
        for step in range(2, K + 1):
            xi = draft.inp(embed(tokens[-1]), d)
            q2, k2, v2 = draft.qkv(xi, pos + step - 1)
            ck.append(k2.repeat_interleave(rep, 1)); cv.append(v2.repeat_interleave(rep, 1))
            sp = (q2 @ kr.transpose(-1, -2)) * scale                     # (B,nh,S,S)
            sp = sp.masked_fill(~mask, float("-inf"))
            sc = torch.stack([(q2 * kk).sum(-1) for kk in ck], -1) * scale  # (B,nh,S,c)
            w = torch.softmax(torch.cat([sp.float(), sc.float()], -1), -1).to(q2.dtype)
            o2 = w[..., :S] @ vr + (w[..., S:, None] * torch.stack(cv, -2)).sum(-2)
            d = draft.finish(xi, o2)
            tokens.append(head(d).argmax(-1))
    # start t is valid if x[t+2 .. t+K+1] exist and are target-generated
    t_idx = torch.arange(S, device=x.device)
    valid = (t_idx + 2 >= n_prompt) & (t_idx + K + 1 < T)
    ok_prev = torch.ones(B, S, dtype=torch.bool, device=x.device)
    accepted = torch.zeros(B, S, device=x.device)
    rates = []
    for kk, tk in enumerate(tokens, start=1):
        tgt = torch.full((B, S), -1, device=x.device, dtype=torch.long)
        n = S - kk
        tgt[:, :n] = x[:, kk + 1: kk + 1 + n]
        ok_prev = ok_prev & (tk == tgt)
        accepted += ok_prev.float()
        rates.append(round(ok_prev[:, valid].float().mean().item(), 3))
    return {"steps": K, "mean_accepted": accepted[:, valid].mean().item(), "step_rates": rates,
            "positions": int(valid.sum().item()) * B}


if __name__ == "__main__":
    main()
