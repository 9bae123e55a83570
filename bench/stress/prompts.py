"""Prompts of an exact token length, cut from MT-bench text and tokenized by the server itself;
and a model copy whose config allows longer contexts."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Callable, Sequence


class ServerTokenizer:
    """The server's own tokenizer through SGLang's ``/tokenize`` endpoint."""

    def __init__(self, base_url: str, timeout: float = 60.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def __call__(self, text: str, add_special_tokens: bool = False) -> list[int]:
        import requests

        r = requests.post(self.base_url + "/tokenize", timeout=self.timeout,
                          json={"prompt": text, "add_special_tokens": add_special_tokens})
        r.raise_for_status()
        return list(r.json()["tokens"])

    def special_prefix(self) -> list[int]:
        """Tokens the tokenizer puts in front of a text (BOS), found by difference."""
        with_special, plain = self(" x", True), self(" x", False)
        if plain and with_special[-len(plain):] == plain:
            return with_special[: len(with_special) - len(plain)]
        return []


def corpus_text(questions: Sequence[dict], rng: random.Random) -> str:
    """Every MT-bench turn once, in a shuffled order: readable text, not noise."""
    turns = [(q["question_id"], q.get("category", ""), t) for q in questions for t in q["turns"]]
    rng.shuffle(turns)
    return "".join(f"Question {qid} ({cat}): {t}\n\n" for qid, cat, t in turns)


class TokenSource:
    """Prompts of exactly ``n`` tokens: BOS then a window of a long MT-bench token stream.

    Windows start at seeded offsets, so prompts share no long prefix and the radix
    cache does not relieve the KV pool under test.
    """

    def __init__(self, tokenize: Callable[..., list[int]], questions: Sequence[dict], *,
                 min_tokens: int, seed: int = 0, prefix: list[int] | None = None):
        if not questions:
            raise ValueError("no questions to build prompts from")
        rng = random.Random(seed)
        self.prefix = list(prefix) if prefix is not None else []
        self.stream: list[int] = []
        while len(self.stream) < min_tokens:
            ids = tokenize(corpus_text(questions, rng), False)
            if not ids:
                raise ValueError("the tokenizer returned no tokens for the corpus")
            self.stream += ids

    @classmethod
    def from_server(cls, base_url: str, questions: Sequence[dict], *, min_tokens: int, seed: int = 0):
        tok = ServerTokenizer(base_url)
        return cls(tok, questions, min_tokens=min_tokens, seed=seed, prefix=tok.special_prefix())

    def window(self, length: int, rng: random.Random) -> list[int]:
        if length <= len(self.prefix):
            raise ValueError(f"prompt length {length} leaves no room after the prefix {self.prefix}")
        body = length - len(self.prefix)
        if body > len(self.stream):
            raise ValueError(f"prompt length {length} exceeds the token stream ({len(self.stream)})")
        start = rng.randrange(len(self.stream))
        doubled = self.stream + self.stream
        return self.prefix + doubled[start:start + body]

    def prompts(self, lengths: Sequence[int], seed: int = 0, tag: str = "p") -> dict[str, dict]:
        """``{"<tag><i>/1": {"input_ids": [...]}}``: keys :func:`.e2e.agreement` understands."""
        rng = random.Random(seed)
        return {f"{tag}{i}/1": {"input_ids": self.window(n, rng)} for i, n in enumerate(lengths)}


def seeded_lengths(n: int, low: int, high: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(n)]


def long_context_copy(src: str | Path, dst: str | Path, max_position_embeddings: int) -> Path:
    """A model folder like ``src`` whose config allows ``max_position_embeddings`` positions.

    For ``--load-format dummy`` (only config.json and the tokenizer are read). SGLang
    accepts ``--context-length`` beyond the config only with
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, and even then it leaves the target's
    ``max_position_embeddings`` (and so the rope cos/sin cache) at the config's length:
    positions past it would read past that cache. A config that says the longer length
    is the clean way. Other files are symlinked.
    """
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        target = dst / f.name
        if f.name == "config.json" or target.exists() or target.is_symlink():
            continue
        target.symlink_to(f.resolve())
    cfg = json.loads((src / "config.json").read_text())
    cfg["max_position_embeddings"] = max_position_embeddings
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst
