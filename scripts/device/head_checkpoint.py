"""What train_eagle_head.py keeps in OUT_DIR between device calls, so that a later call continues:

* ``answers.jsonl``: the target's answers, one a line ({kind, held, text, prompt, answer}), appended
  as they are generated: a resumed call trains on them without generating them again;
* ``checkpoint/state.pt``: draft weights (fp32), optimizer state, step, seconds trained, the
  schedule's total, the batch samplers' random states, the counters and the settings the data
  depends on. Written whole to a temporary file and renamed, so a call cut short leaves the last
  complete one.
"""
import json
import os

ANSWERS = "answers.jsonl"
STATE = os.path.join("checkpoint", "state.pt")
# the settings the cached answers, the draft's shape and the batches depend on: a resumed call
# takes them from the checkpoint and refuses a different explicit value
RESUMED_SETTINGS = ("prompt_mix", "num_prompts", "max_new", "heldout_frac", "seed", "max_files", "seq", "batch",
                    "lr", "warmup", "tf_frac", "corpus_mb", "draft_inter", "w_reg", "w_cls", "feat_noise")


def load_answers(out_dir: str) -> list[dict]:
    path = os.path.join(out_dir, ANSWERS)
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def append_answers(out_dir: str, rows: list[dict]) -> None:
    with open(os.path.join(out_dir, ANSWERS), "a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def save_state(out_dir: str, state: dict) -> str:
    import torch

    path = os.path.join(out_dir, STATE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def load_state(out_dir: str) -> dict | None:
    import torch

    path = os.path.join(out_dir, STATE)
    if not os.path.isfile(path):
        return None
    return torch.load(path, map_location="cpu", weights_only=False)


def merge_settings(args, parser, saved: dict) -> list[str]:
    """Sets ``args``' data-defining settings to the checkpoint's; returns the names given on the
    command line with another value (the caller refuses them)."""
    clash = []
    for k in RESUMED_SETTINGS:
        if k not in saved:
            continue
        mine = getattr(args, k)
        if mine != saved[k] and mine != parser.get_default(k):
            clash.append(f"--{k.replace('_', '-')} {mine} (the checkpoint's: {saved[k]})")
        setattr(args, k, saved[k])
    return clash
