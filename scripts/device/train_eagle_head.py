#!/usr/bin/env python3
"""Train an EAGLE-1 draft head for a frozen, given target (a Hugging Face Llama folder).

    python3 scripts/device/train_eagle_head.py TARGET_DIR OUT_DIR --minutes 4 --gen-minutes 1.5

Writes OUT_DIR/draft (``LlamaForCausalLMEagle``, one layer, the keys SGLang 0.5.12.post1's
``llama_eagle.py`` loads, bf16, ``tie_word_embeddings: false``, the target's tokenizer) and
OUT_DIR/train_record.json (data, steps, losses, wall times, teacher-forced agreement, chained
acceptance, versions).

Data, all made offline on the machine that runs it (MT-bench is never read: it is kept for
evaluation):
* prompts built from the docstrings of this Python's standard library (explain, summarise,
  rewrite, write code, list, compare), answered by the target itself, greedily, under its
  chat template: the draft learns the target's own outputs, which is what it drafts at serving;
* teacher-forced text: windows of standard-library source and package descriptions
  (``make_testbed.collect_corpus``), a fraction ``--tf-frac`` of the batches.

The head is the testbed's (``make_testbed.build_draft_module``: fc(cat(embed, feature)) -> one
decoder layer without input norm -> no final norm); the target's embedding and lm_head are
shared (SGLang's worker installs the target's into the draft). Loss: smooth-L1 to the target's
next post-norm feature plus soft cross-entropy to the target's next-token distribution. The
features have std about 1.9 with outliers near 50 on SmolLM2, so the learning rate is lower than
the testbed's (peak 8e-4, warm-up, cosine), and gradients are clipped.
"""
import argparse
import ast
import hashlib
import importlib.metadata
import json
import os
import random
import shutil
import sys
import sysconfig
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_testbed as mt  # noqa: E402  (the shared draft module, schedule and chain simulation)

T_START = time.time()
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def log(*a):
    print(f"[{time.time() - T_START:6.1f}s]", *a, flush=True)


# --------------------------------------------------------------------------- prompts
def _first_paragraph(doc: str, limit: int = 600) -> str:
    para = doc.strip().split("\n\n", 1)[0]
    return " ".join(para.split())[:limit]


def stdlib_snippets(max_files: int | None = None) -> list[tuple[str, str, str]]:
    """(module, object, first docstring paragraph) from the top-level standard-library modules."""
    root = sysconfig.get_paths()["stdlib"]
    out = []
    files = sorted(f for f in os.listdir(root) if f.endswith(".py") and not f.startswith("_"))
    for f in files[:max_files]:
        try:
            with open(os.path.join(root, f), encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        mod = f[:-3]
        doc = ast.get_docstring(tree)
        if doc and len(doc) > 40:
            out.append((mod, "", _first_paragraph(doc)))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                d = ast.get_docstring(node)
                if d and len(d) > 40:
                    out.append((mod, node.name, _first_paragraph(d)))
    return out


TEMPLATES_MODULE = [
    "Explain what the Python module `{mod}` is for, with an example of when you would use it.",
    "I am new to Python. What does the standard library module `{mod}` do?",
    "Summarize the following description in two sentences:\n\n{doc}",
    "Write a short blog post introduction about the Python module `{mod}`, based on this: {doc}",
]
TEMPLATES_OBJECT = [
    "What does `{mod}.{obj}` do in Python? Here is its documentation: {doc}",
    "Write a short Python example that uses `{mod}.{obj}`.",
    "Rewrite this documentation in simpler words for a beginner:\n\n{doc}",
    "List three situations in which `{mod}.{obj}` is useful.",
    "Explain the following in your own words, then give a one-line summary:\n\n{doc}",
    "Is `{mod}.{obj}` a good choice for a small script? Answer briefly and explain why.",
    "Turn this description into a numbered list of its main points:\n\n{doc}",
    "Compare `{mod}.{obj}` with doing the same thing by hand. {doc}",
]


def make_prompts(n: int, seed: int, max_files: int | None = None) -> list[str]:
    rng = random.Random(seed)
    snippets = stdlib_snippets(max_files)
    rng.shuffle(snippets)
    prompts, seen = [], set()
    i = 0
    while len(prompts) < n and snippets and i < 20 * n:
        mod, obj, doc = snippets[i % len(snippets)]
        templates = TEMPLATES_OBJECT if obj else TEMPLATES_MODULE
        p = rng.choice(templates).format(mod=mod, obj=obj, doc=doc)
        if p not in seen:
            seen.add(p)
            prompts.append(p)
        i += 1
    return prompts


def _held(key: str, frac: float) -> bool:
    return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) % 10000 < frac * 10000


# ------------------------------------------------------------------------- generation
def chat_ids(tok, prompt: str) -> list[int]:
    ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
    if not isinstance(ids, list):
        ids = ids["input_ids"]
    return list(ids)


def generate_answers(target, tok, prompts, *, max_new, batch, deadline, device, eos_ids, pad_id):
    """The target's greedy answers, in batches sorted by prompt length (left padding), until
    ``deadline``. Returns [{"prompt": ids, "answer": ids (through the first eos)}]."""
    import torch

    encoded = sorted((chat_ids(tok, p) for p in prompts), key=len)
    out = []
    for k in range(0, len(encoded), batch):
        if time.time() > deadline:
            break
        chunk = encoded[k:k + batch]
        width = max(len(c) for c in chunk)
        x = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        m = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, c in enumerate(chunk):
            x[r, width - len(c):] = torch.tensor(c)
            m[r, width - len(c):] = 1
        with torch.no_grad():
            g = target.generate(input_ids=x.to(device), attention_mask=m.to(device), max_new_tokens=max_new,
                                do_sample=False, pad_token_id=pad_id, eos_token_id=eos_ids)
        for r, c in enumerate(chunk):
            ans = []
            for t in g[r, width:].tolist():
                ans.append(t)
                if t in eos_ids:
                    break
            out.append({"prompt": c, "answer": ans})
    return out


# --------------------------------------------------------------------------- batches
def padded(seqs, pad_id):
    import torch

    width = max(len(s) for s in seqs)
    x = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    lens = torch.tensor([len(s) for s in seqs])
    for r, s in enumerate(seqs):
        x[r, :len(s)] = torch.tensor(s)
    return x, lens


def draft_config(target_cfg, inter: int | None, max_pos: int | None):
    import copy

    cfg = copy.deepcopy(target_cfg)
    cfg.architectures = ["LlamaForCausalLMEagle"]
    cfg.num_hidden_layers = 1
    if inter:
        cfg.intermediate_size = inter
    if max_pos:
        cfg.max_position_embeddings = max_pos
    # A tied draft makes SGLang's set_embed_and_head delete embed_tokens.weight and then
    # lm_head.weight of the same module, which raises: the draft is untied, whatever the target is.
    cfg.tie_word_embeddings = False
    if not getattr(cfg, "rope_parameters", None):
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": float(getattr(cfg, "rope_theta", 10000.0))}
    cfg.dtype = "bfloat16"
    return cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", help="Hugging Face Llama folder (config, weights, tokenizer with a chat template)")
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--minutes", type=float, default=4.0, help="training budget")
    ap.add_argument("--gen-minutes", type=float, default=1.5, help="budget for the target's greedy answers")
    ap.add_argument("--num-prompts", type=int, default=4096)
    ap.add_argument("--max-new", type=int, default=320, help="answer tokens per prompt")
    ap.add_argument("--gen-batch", type=int, default=256)
    ap.add_argument("--heldout-frac", type=float, default=0.04)
    ap.add_argument("--tf-frac", type=float, default=0.25, help="fraction of batches of teacher-forced raw text")
    ap.add_argument("--corpus-mb", type=float, default=8.0, help="raw text read for the teacher-forced batches")
    ap.add_argument("--seq", type=int, default=640, help="tokens per training sequence (longer ones are cut)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=8e-4)
    ap.add_argument("--warmup", type=float, default=0.05, help="warm-up fraction of the budget")
    ap.add_argument("--w-reg", type=float, default=1.0)
    ap.add_argument("--w-cls", type=float, default=0.3)
    ap.add_argument("--feat-noise", type=float, default=0.1, help="uniform +- noise on the features fed to the draft")
    ap.add_argument("--draft-inter", type=int, default=None, help="draft MLP width (default: the target's)")
    ap.add_argument("--chain-steps", type=int, default=5)
    ap.add_argument("--eval-seqs", type=int, default=48, help="held-out answers for the chained simulation")
    ap.add_argument("--max-files", type=int, default=None, help="stdlib files read for prompts (smoke tests)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    on_gpu = dev.type == "cuda"
    if on_gpu:
        torch.backends.cuda.matmul.allow_tf32 = True
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=on_gpu)
    walls = {}
    out = os.path.abspath(a.out)
    ddir = os.path.join(out, "draft")
    os.makedirs(ddir, exist_ok=True)

    # ---- frozen target
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(a.target)
    if not getattr(tok, "chat_template", None):
        sys.exit(f"{a.target}: the tokenizer has no chat template")
    tcfg = AutoConfig.from_pretrained(a.target)
    target = LlamaForCausalLM.from_pretrained(a.target, dtype=torch.bfloat16 if on_gpu else torch.float32,
                                              attn_implementation="sdpa").to(dev).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    embed, head = target.model.embed_tokens, target.lm_head
    eos = tcfg.eos_token_id
    eos_ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
    if getattr(tok, "eos_token_id", None) is not None and tok.eos_token_id not in eos_ids:
        eos_ids.append(tok.eos_token_id)
    pad_id = tcfg.pad_token_id if tcfg.pad_token_id is not None else eos_ids[0]
    walls["load_s"] = time.time() - t0
    log(f"target {a.target}: {sum(p.numel() for p in target.parameters()) / 1e6:.1f}M params, "
        f"vocab {tcfg.vocab_size}, eos {eos_ids}")

    # ---- data: prompts from stdlib docstrings, answered greedily by the target
    t0 = time.time()
    prompts = make_prompts(a.num_prompts, a.seed, a.max_files)
    held_prompts = [p for p in prompts if _held(p, a.heldout_frac)]
    train_prompts = [p for p in prompts if not _held(p, a.heldout_frac)]
    if not held_prompts:
        held_prompts, train_prompts = train_prompts[-1:], train_prompts[:-1]
    # held-out first: the evaluation must have its answers even when the budget cuts generation
    ordered = held_prompts[: a.eval_seqs] + train_prompts
    gen_batch = a.gen_batch
    with amp:
        answers = generate_answers(target, tok, ordered, max_new=a.max_new, batch=gen_batch,
                                   deadline=t0 + 60 * a.gen_minutes, device=dev, eos_ids=eos_ids, pad_id=pad_id)
    held_set = {tuple(chat_ids(tok, p)) for p in held_prompts[: a.eval_seqs]}
    held = [r for r in answers if tuple(r["prompt"]) in held_set]
    train = [r for r in answers if tuple(r["prompt"]) not in held_set]
    walls["generate_s"] = time.time() - t0
    ans_lens = [len(r["answer"]) for r in answers]
    n_eos = sum(1 for r in answers if r["answer"] and r["answer"][-1] in eos_ids)
    log(f"generated {len(answers)} answers ({len(train)} train, {len(held)} held-out) of "
        f"{len(ordered)} prompts in {walls['generate_s']:.0f}s; mean {sum(ans_lens) / max(1, len(ans_lens)):.0f} "
        f"tokens, {n_eos} ended with eos")
    if not train:
        sys.exit("no training answers were generated in the budget")
    sample = tok.decode(answers[0]["answer"], skip_special_tokens=False) if answers else ""
    train_seqs = [(r["prompt"] + r["answer"])[: a.seq] for r in train]

    t1 = time.time()
    corpus_docs, _ = mt.collect_corpus(int(a.corpus_mb * 2**20))
    tf_stream = []
    for ids in tok([text for _, _, text in corpus_docs], add_special_tokens=False, verbose=False)["input_ids"]:
        tf_stream.extend(ids)
        tf_stream.extend(eos_ids[:1])
    tf_tok = torch.tensor(tf_stream, dtype=torch.long)
    walls["corpus_s"] = time.time() - t1
    log(f"teacher-forced text: {len(corpus_docs)} docs, {len(tf_stream) / 1e6:.2f}M tokens")

    # ---- draft
    dcfg = draft_config(tcfg, a.draft_inter, None)
    draft = mt.build_draft_module(dcfg).to(dev)
    n_draft = mt.param_count(draft)
    log(f"draft: {n_draft / 1e6:.2f}M params (intermediate {dcfg.intermediate_size})")

    def target_feats(x):
        with torch.no_grad(), amp:
            h = target.model(input_ids=x).last_hidden_state      # post final norm, as SGLang hands it
            logits = head(h)
        return h.float(), logits.float()

    feat_std = None
    rng = random.Random(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    tf_windows = mt.batches(tf_tok, a.batch, min(a.seq, max(8, tf_tok.numel() - 2)), gen, dev) \
        if tf_tok.numel() > a.seq + 2 else None

    def next_batch():
        if tf_windows is not None and rng.random() < a.tf_frac:
            x = next(tf_windows)[:, :-1]
            return x, torch.full((x.shape[0],), x.shape[1], device=dev), "tf"
        seqs = [train_seqs[rng.randrange(len(train_seqs))] for _ in range(a.batch)]
        x, lens = padded(seqs, pad_id)
        return x.to(dev), lens.to(dev), "gen"

    opt = torch.optim.AdamW(draft.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0, fused=on_gpu)
    t0 = time.time()
    budget = 60 * a.minutes
    step, curve, kinds = 0, [], {"tf": 0, "gen": 0}
    draft.train()
    reg = cls = torch.zeros(())
    while (elapsed := time.time() - t0) < budget or step == 0:
        for group in opt.param_groups:
            group["lr"] = mt.lr_at(min(1.0, elapsed / budget), a.lr, warm=a.warmup)
        x, lens, kind = next_batch()
        kinds[kind] += 1
        h, logits = target_feats(x)
        if feat_std is None:
            valid = torch.arange(x.shape[1], device=dev)[None] < lens[:, None]
            feat_std = h[valid].std().item()
            feat_max = h[valid].abs().max().item()
        with torch.no_grad():
            e = embed(x[:, 1:]).float()
        feat = h[:, :-1]
        if a.feat_noise > 0:
            feat = feat + (torch.rand_like(feat) * 2 - 1) * a.feat_noise
        mask = (torch.arange(x.shape[1] - 1, device=dev)[None] + 1 < lens[:, None]).float()
        with amp:
            d = draft(e, feat)
            dlog = head(d)
        d = d.float()
        n = mask.sum().clamp(min=1)
        reg = (F.smooth_l1_loss(d, h[:, 1:], reduction="none").mean(-1) * mask).sum() / n
        tprob = torch.softmax(logits[:, 1:], -1)
        cls = (-(tprob * torch.log_softmax(dlog.float(), -1)).sum(-1) * mask).sum() / n
        loss = a.w_reg * reg + a.w_cls * cls
        mt.optimizer_step(opt, list(draft.parameters()), loss)
        step += 1
        if step % 50 == 0 or step <= 2:
            curve.append((step, round(time.time() - t0, 1), round(reg.item(), 4), round(cls.item(), 4)))
            if step % 250 == 0 or step <= 2:
                log(f"step {step} ({kind}) reg {reg.item():.4f} cls {cls.item():.3f} lr {opt.param_groups[0]['lr']:.2e}")
    if on_gpu:
        torch.cuda.synchronize()
    walls["train_s"] = time.time() - t0
    log(f"trained {step} steps in {walls['train_s']:.0f}s ({kinds['gen']} answer batches, {kinds['tf']} text batches); "
        f"reg {reg.item():.4f} cls {cls.item():.3f}")

    # ---- evaluation on held-out answers
    t0 = time.time()
    draft.eval()
    agree = top4 = count = 0
    chains = []
    with torch.no_grad():
        for r in held:
            seq = (r["prompt"] + r["answer"])[: a.seq]
            if len(seq) < len(r["prompt"]) + 2:
                continue
            x = torch.tensor([seq], device=dev)
            h, logits = target_feats(x)
            with amp:
                dl = head(draft(embed(x[:, 1:]).float(), h[:, :-1])).float()
            p0 = len(r["prompt"]) - 1          # positions predicting answer tokens
            want = logits[:, 1:].argmax(-1)[:, p0:]
            got = dl[:, p0:]
            agree += (got.argmax(-1) == want).sum().item()
            top4 += (got.topk(4, -1).indices == want[..., None]).any(-1).sum().item()
            count += want.numel()
            if len(seq) > len(r["prompt"]) + a.chain_steps + 2:
                chains.append(mt.chain_accept(draft, target_feats, embed, head, x, len(r["prompt"]),
                                              a.chain_steps, dcfg, amp))
    positions = sum(c["positions"] for c in chains)
    mean_acc = sum(c["mean_accepted"] * c["positions"] for c in chains) / positions if positions else None
    walls["eval_s"] = time.time() - t0
    agree_top1 = agree / count if count else None
    agree_top4 = top4 / count if count else None
    log(f"held-out answers ({len(held)}): teacher-forced top1 {agree_top1}, top4 {agree_top4}; "
        f"chained {a.chain_steps}-step mean accepted {mean_acc} (+1 bonus token in SGLang's accept length)")

    # ---- save: the keys SGLang's LlamaForCausalLMEagle loads, bf16, untied config, tokenizer
    t0 = time.time()
    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in draft.state_dict().items()}
    save_file(sd, os.path.join(ddir, "model.safetensors"), metadata={"format": "pt"})
    dcfg.save_pretrained(ddir)
    for f in TOKENIZER_FILES:
        src = os.path.join(a.target, f)
        if os.path.isfile(src):
            shutil.copy(src, ddir)
    walls["save_s"] = time.time() - t0
    walls["total_s"] = time.time() - T_START
    record = {
        "target": os.path.abspath(a.target),
        "settings": {k: v for k, v in vars(a).items() if k not in ("target", "out")},
        "data": {"prompts": len(prompts), "prompts_answered": len(answers), "train_answers": len(train),
                 "heldout_answers": len(held), "answer_tokens_mean": sum(ans_lens) / max(1, len(ans_lens)),
                 "answers_ending_in_eos": n_eos, "train_tokens": sum(len(s) for s in train_seqs),
                 "teacher_forced_docs": len(corpus_docs), "teacher_forced_tokens": len(tf_stream),
                 "prompt_source": "docstrings of the standard library of Python " + sys.version.split()[0],
                 "feature_std": feat_std, "feature_absmax": feat_max},
        "draft": {"params": n_draft, "intermediate_size": dcfg.intermediate_size, "keys": sorted(sd)},
        "training": {"steps": step, "batches": kinds, "final_reg_loss": reg.item(), "final_cls_loss": cls.item(),
                     "loss_curve": curve},
        "eval": {"heldout_answers": len(held), "agreement_top1": agree_top1, "agreement_top4": agree_top4,
                 "chain_steps": a.chain_steps, "chain_mean_accepted": mean_acc, "chain_positions": positions,
                 "chain_step_rates": [c["step_rates"] for c in chains[:8]]},
        "sample_answer": sample[:2000],
        "wall_s": walls,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0],
                     "tokenizers": importlib.metadata.version("tokenizers"),
                     "gpu": torch.cuda.get_device_name(0) if on_gpu else None},
    }
    with open(os.path.join(out, "train_record.json"), "w") as f:
        json.dump(record, f, indent=2)
    shutil.copy(os.path.join(out, "train_record.json"), os.path.join(ddir, "train_record.json"))
    log(f"wall: {json.dumps({k: round(v, 1) for k, v in walls.items()})}")
    log(f"wrote {ddir} and {os.path.join(out, 'train_record.json')}")


if __name__ == "__main__":
    main()
