#!/usr/bin/env python3
"""Train an EAGLE-1 draft head for a frozen, given target (a Hugging Face Llama folder).

    python3 scripts/device/train_eagle_head.py TARGET_DIR OUT_DIR --minutes 4 --gen-minutes 1.5
    python3 scripts/device/train_eagle_head.py TARGET_DIR OUT_DIR --resume --minutes 6 --gen-minutes 0

Writes OUT_DIR/draft (``LlamaForCausalLMEagle``, one layer, the keys SGLang 0.5.12.post1's
``llama_eagle.py`` loads, bf16, ``tie_word_embeddings: false``, the target's tokenizer),
OUT_DIR/train_record.json (data by kind, steps, losses, wall times, teacher-forced agreement per
kind, chained acceptance, versions), and what a later call continues from (``head_checkpoint``):
the answers (OUT_DIR/answers.jsonl) and the draft, optimizer, step and schedule position
(OUT_DIR/checkpoint). ``--resume`` continues training where the last call stopped; the lr schedule
spans ``--total-minutes`` of training over all calls.

Data, all made offline on the machine that runs it (MT-bench is never read: it is kept for
evaluation):
* prompts of nine kinds (``head_prompts``: writing, roleplay, reasoning, math, coding, extraction,
  STEM, humanities, and questions on standard-library docstrings), mixed by ``--prompt-mix``,
  answered by the target itself, greedily, under its chat template: the draft learns the target's
  own outputs, which is what it drafts at serving. A share of each kind is held out;
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
import importlib.metadata
import json
import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import head_checkpoint as hc  # noqa: E402  (the answers and state kept between calls)
import head_prompts as hp  # noqa: E402  (the prompts, by kind)
import make_testbed as mt  # noqa: E402  (the shared draft module, schedule and chain simulation)

T_START = time.time()
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def log(*a):
    print(f"[{time.time() - T_START:6.1f}s]", *a, flush=True)


# ------------------------------------------------------------------------- generation
def chat_ids(tok, prompt: str) -> list[int]:
    ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
    if not isinstance(ids, list):
        ids = ids["input_ids"]
    return list(ids)


def generate_answers(target, encoded, *, max_new, batch, deadline, device, eos_ids, pad_id, window=4):
    """The target's greedy answers to ``encoded`` (prompt ids) until ``deadline``, in the given
    order: sorted by length (left padding) only within windows of ``window`` batches, so that a
    cut keeps the order's front (held-out first, then the kinds as mixed). Returns
    [(index into encoded, answer ids through the first eos)]."""
    import torch

    out = []
    for w in range(0, len(encoded), window * batch):
        order = sorted(range(w, min(w + window * batch, len(encoded))), key=lambda i: len(encoded[i]))
        for k in range(0, len(order), batch):
            if time.time() > deadline:
                return out
            chunk = order[k:k + batch]
            width = max(len(encoded[i]) for i in chunk)
            x = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            m = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, i in enumerate(chunk):
                x[r, width - len(encoded[i]):] = torch.tensor(encoded[i])
                m[r, width - len(encoded[i]):] = 1
            with torch.no_grad():
                g = target.generate(input_ids=x.to(device), attention_mask=m.to(device), max_new_tokens=max_new,
                                    do_sample=False, pad_token_id=pad_id, eos_token_id=eos_ids)
            for r, i in enumerate(chunk):
                ans = []
                for t in g[r, width:].tolist():
                    ans.append(t)
                    if t in eos_ids:
                        break
                out.append((i, ans))
    return out


def held_prompts(prompts, frac):
    """Held-out flags, by hash of the text, with at least one per kind that has three prompts or more."""
    held = [mt._held_out(text, frac) for _, text in prompts]
    for kind in {k for k, _ in prompts}:
        idx = [i for i, (k, _) in enumerate(prompts) if k == kind]
        if len(idx) >= 3 and not any(held[i] for i in idx):
            held[idx[-1]] = True
    return held


def round_robin(rows, n):
    """Up to n rows, taking the kinds in turn (each kind's rows in their order)."""
    by_kind = {}
    for r in rows:
        by_kind.setdefault(r["kind"], []).append(r)
    out, queues = [], [by_kind[k] for k in hp.KINDS if k in by_kind]
    while len(out) < n and any(queues):
        for q in queues:
            if q and len(out) < n:
                out.append(q.pop(0))
    return out


def by_kind(rows):
    return {k: c for k in hp.KINDS if (c := sum(1 for r in rows if r["kind"] == k))}


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
    ap.add_argument("--minutes", type=float, default=4.0, help="training budget of this call")
    ap.add_argument("--total-minutes", type=float, default=None,
                    help="training budget over all calls, which the lr schedule spans (default: --minutes on a "
                         "fresh start, the checkpoint's on --resume)")
    ap.add_argument("--resume", action="store_true",
                    help="continue from OUT's checkpoint and cached answers (weights, optimizer, step, schedule)")
    ap.add_argument("--prompt-mix", default=hp.DEFAULT_MIX,
                    help=f"kind=weight,... over {', '.join(hp.KINDS)} (default: even)")
    ap.add_argument("--gen-minutes", type=float, default=1.5,
                    help="budget for the target's greedy answers (on --resume: to answer prompts not yet answered)")
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
    ap.add_argument("--eval-seqs", type=int, default=72, help="held-out answers evaluated, the kinds in turn")
    ap.add_argument("--max-files", type=int, default=None, help="stdlib files read for prompts (smoke tests)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    out = os.path.abspath(a.out)
    state = None
    if a.resume:
        state = hc.load_state(out)
        if state is None:
            ap.error(f"--resume: no checkpoint in {out} ({hc.STATE})")
        clash = hc.merge_settings(a, ap, state["settings"])
        if clash:
            ap.error("--resume keeps the checkpoint's data and training settings: " + "; ".join(clash))
    try:
        mix = hp.parse_mix(a.prompt_mix)
    except ValueError as exc:
        ap.error(f"--prompt-mix: {exc}")
    total_minutes = a.total_minutes or (state["total_minutes"] if state else a.minutes)

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

    # ---- data: prompts of every kind, answered greedily by the target; cached in OUT for later calls
    t0 = time.time()
    if not a.resume and os.path.exists(os.path.join(out, hc.ANSWERS)):
        os.remove(os.path.join(out, hc.ANSWERS))        # a fresh start does not train on an older run's answers
    cached = hc.load_answers(out)
    prompts_by_kind = state["data"]["prompts_by_kind"] if state else {}
    new_rows = []
    if a.gen_minutes > 0:
        prompts = hp.make_prompts(a.num_prompts, a.seed, mix, a.max_files)
        prompts_by_kind = by_kind([{"kind": k} for k, _ in prompts])
        done = {r["text"] for r in cached}
        rows = [{"kind": k, "text": t, "held": h} for (k, t), h in zip(prompts, held_prompts(prompts, a.heldout_frac))
                if t not in done]
        # the held-out answers the evaluation takes come first: it has them even when the budget cuts
        want_held = max(0, a.eval_seqs - sum(r["held"] for r in cached))
        ordered = round_robin([r for r in rows if r["held"]], want_held) + [r for r in rows if not r["held"]]
        encoded = [chat_ids(tok, r["text"]) for r in ordered]
        with amp:
            got = generate_answers(target, encoded, max_new=a.max_new, batch=a.gen_batch,
                                   deadline=t0 + 60 * a.gen_minutes, device=dev, eos_ids=eos_ids, pad_id=pad_id)
        new_rows = [{**ordered[i], "prompt": encoded[i], "answer": ans} for i, ans in got]
        hc.append_answers(out, new_rows)
    answers = cached + new_rows
    held = round_robin([r for r in answers if r["held"]], a.eval_seqs)
    train = [r for r in answers if not r["held"]]
    walls["generate_s"] = time.time() - t0
    ans_lens = [len(r["answer"]) for r in answers]
    n_eos = sum(1 for r in answers if r["answer"] and r["answer"][-1] in eos_ids)
    log(f"{len(new_rows)} answers generated in {walls['generate_s']:.0f}s, {len(cached)} cached; {len(train)} train, "
        f"{len(held)} held-out; by kind {by_kind(answers)}; mean {sum(ans_lens) / max(1, len(ans_lens)):.0f} "
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

    feat_std = feat_max = None
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
    step, trained_before, curve, kinds, calls = 0, 0.0, [], {"tf": 0, "gen": 0}, []
    if state:
        draft.load_state_dict(state["draft"])
        opt.load_state_dict(state["opt"])
        rng.setstate(state["rng"])
        gen.set_state(state["gen"])
        step, trained_before, curve, kinds, calls = (state[k] for k in ("step", "trained_s", "curve", "kinds", "calls"))
        feat_std, feat_max = state["feature_std"], state["feature_absmax"]
    opt_step_at_start = max((int(s["step"]) for s in opt.state.values()), default=0)
    steps_before = step
    budget, total = 60 * a.minutes, 60 * total_minutes
    schedule_start = min(1.0, trained_before / total)
    log(f"training from step {step}, schedule at {schedule_start:.3f} of {total_minutes} min, this call {a.minutes} min")
    t0 = time.time()
    draft.train()
    reg = cls = torch.zeros(())
    while True:
        elapsed = time.time() - t0
        if (elapsed >= budget or trained_before + elapsed >= total) and step > 0:
            break
        for group in opt.param_groups:
            group["lr"] = mt.lr_at(min(1.0, (trained_before + elapsed) / total), a.lr, warm=a.warmup)
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
        if step % 50 == 0 or step <= 2 or step == steps_before + 1:
            curve.append((step, round(trained_before + time.time() - t0, 1), round(reg.item(), 4), round(cls.item(), 4)))
            if step % 250 == 0 or step <= 2:
                log(f"step {step} ({kind}) reg {reg.item():.4f} cls {cls.item():.3f} lr {opt.param_groups[0]['lr']:.2e}")
    if on_gpu:
        torch.cuda.synchronize()
    walls["train_s"] = time.time() - t0
    trained_s = trained_before + walls["train_s"]
    calls = calls + [{"steps": step - steps_before, "train_s": round(walls["train_s"], 1),
                      "answers_generated": len(new_rows)}]
    log(f"trained {step - steps_before} steps in {walls['train_s']:.0f}s ({step} in all: {kinds['gen']} answer batches, "
        f"{kinds['tf']} text batches); reg {reg.item():.4f} cls {cls.item():.3f}")
    ckpt = hc.save_state(out, {
        "draft": {k: v.detach().cpu() for k, v in draft.state_dict().items()}, "opt": opt.state_dict(),
        "rng": rng.getstate(), "gen": gen.get_state(), "step": step, "trained_s": trained_s,
        "total_minutes": total_minutes, "curve": curve, "kinds": kinds, "calls": calls,
        "feature_std": feat_std, "feature_absmax": feat_max, "data": {"prompts_by_kind": prompts_by_kind},
        "settings": {k: getattr(a, k) for k in hc.RESUMED_SETTINGS}})
    log(f"checkpoint {ckpt}")

    # ---- evaluation on held-out answers
    t0 = time.time()
    draft.eval()
    agree = top4 = count = 0
    per_kind = {}
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
            hits = (got.argmax(-1) == want).sum().item()
            agree += hits
            k = per_kind.setdefault(r["kind"], [0, 0])
            k[0] += hits
            k[1] += want.numel()
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
    top1_by_kind = {k: round(h / c, 4) for k, (h, c) in per_kind.items() if c}
    log(f"held-out answers ({len(held)}): teacher-forced top1 {agree_top1}, top4 {agree_top4}; "
        f"chained {a.chain_steps}-step mean accepted {mean_acc} (+1 bonus token in SGLang's accept length); "
        f"top1 by kind {top1_by_kind}")

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
        "data": {"prompt_mix": mix, "prompts": sum(prompts_by_kind.values()), "prompts_by_kind": prompts_by_kind,
                 "prompts_answered": len(answers), "answered_by_kind": by_kind(answers),
                 "train_by_kind": by_kind(train), "heldout_by_kind": by_kind(held),
                 "answers_generated_this_call": len(new_rows), "answers_cached": len(cached),
                 "train_answers": len(train),
                 "heldout_answers": len(held), "answer_tokens_mean": sum(ans_lens) / max(1, len(ans_lens)),
                 "answers_ending_in_eos": n_eos, "train_tokens": sum(len(s) for s in train_seqs),
                 "teacher_forced_docs": len(corpus_docs), "teacher_forced_tokens": len(tf_stream),
                 "prompt_source": "templates per kind filled from seeded numbers, slot lists and the standard "
                                  "library of Python " + sys.version.split()[0] + " (head_prompts.py)",
                 "feature_std": feat_std, "feature_absmax": feat_max},
        "draft": {"params": n_draft, "intermediate_size": dcfg.intermediate_size, "keys": sorted(sd)},
        "training": {"steps": step, "steps_this_call": step - steps_before, "steps_before": steps_before,
                     "optimizer_step_at_start": opt_step_at_start, "total_minutes": total_minutes,
                     "trained_s": trained_s, "schedule_start": schedule_start,
                     "schedule_end": min(1.0, trained_s / total), "calls": calls, "batches": kinds, "final_reg_loss": reg.item(), "final_cls_loss": cls.item(),
                     "loss_curve": curve},
        "eval": {"heldout_answers": len(held), "agreement_top1": agree_top1, "agreement_top4": agree_top4,
                 "agreement_top1_by_kind": top1_by_kind, "chain_steps": a.chain_steps, "chain_mean_accepted": mean_acc, "chain_positions": positions,
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
