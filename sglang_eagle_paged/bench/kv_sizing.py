"""KV slots a server needs to serve ``parallel`` requests at once without retracting any.

SGLang reserves for every running request, at every decode step, ``get_alloc_reserve_per_decode()``
slots beyond what the request has committed (:mod:`sglang_eagle_paged.kv_reserve`), rounded up to whole
pages (``page_aligned_decode_alloc_lens``). When the pool cannot hold that for the whole batch, its
scheduler retracts requests ("KV cache pool is full. Retract requests.") and serves them again later:
the throughput then measures the pool, not the path. A pool that holds page 1's batch can retract at
page 64 (topk 8: 2,048 slots reserved per request against 128).
"""

from __future__ import annotations

import math

from .. import kv_reserve
from .configs import _warmup_questions
from .mtbench import PromptBuilder, load_questions, sized

# Tokens a chat template or the server may add around a prompt (BOS, role markers of the last
# message): the plain-text bound below counts the message text itself.
SPECIAL_TOKENS = 8
# An earlier answer comes back as text inside the next turn's prompt; re-encoded, its tokens may split
# a little differently from the ``max_new`` the server generated.
ANSWER_SLACK = 16


def reserve_per_decode(cfg) -> int:
    """SGLang's ``get_alloc_reserve_per_decode()`` for a :class:`.e2e.RunConfig`
    (:mod:`sglang_eagle_paged.kv_reserve`)."""
    return kv_reserve.reserve_per_decode(cfg.page_size, cfg.topk, cfg.steps, cfg.num_draft_tokens,
                                         speculative=cfg.algorithm is not None)


def slots_per_request(cfg, prompt_tokens: int, max_new: int) -> int:
    """Whole pages that hold a request's longest context and its last decode step's reserve."""
    return kv_reserve.slots_per_request(cfg.page_size, prompt_tokens + max_new, reserve_per_decode(cfg))


def pool_tokens(cfgs, parallel: int, prompt_tokens: int, max_new: int) -> int:
    """``--max-total-tokens`` that lets every configuration of ``cfgs`` run ``parallel`` requests without
    retraction: the largest need, in whole pages of every configuration's page size."""
    need = max(parallel * slots_per_request(c, prompt_tokens, max_new) for c in cfgs)
    pages = math.lcm(*(c.page_size for c in cfgs))
    return -(-need // pages) * pages


def longest_prompt(questions, max_new: int, tokenizer: str | None = None) -> tuple[int, str]:
    """A bound on the tokens of the longest prompt a conversation of ``questions`` sends (its last turn:
    every turn and every earlier answer, ``max_new`` tokens each), and how it was bounded. With
    ``tokenizer`` (a folder with a chat template) the template is applied as the client applies it;
    without, the plain "User:/Assistant:" text counts one token per UTF-8 byte (a token of a
    byte-level or byte-fallback tokenizer holds at least one byte)."""

    builder = PromptBuilder(tokenizer) if tokenizer else PromptBuilder(None)
    longest = 0
    for q in questions:
        messages = []
        for turn in q["turns"]:
            messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": ""}]
        payload = builder.payload(messages[:-1])
        own = len(payload["input_ids"]) if "input_ids" in payload else len(payload["text"].encode())
        longest = max(longest, own + SPECIAL_TOKENS + (len(q["turns"]) - 1) * (max_new + ANSWER_SLACK))
    how = (f"{tokenizer}'s chat template" if builder.tokenizer is not None
           else "plain prompt, one token per UTF-8 byte")
    return longest, how


def pool_arg(value: str):
    """``--max-total-tokens``: KV slots per server, or ``auto`` (:func:`pool_for`)."""
    return value if value == "auto" else int(value)


def pool_for(a, cfgs, conversations: int, parallel: int, tag: str, tokenizer: str | None) -> int:
    """The command line's ``--max-total-tokens``; with ``auto``, the pool in which every configuration
    of ``cfgs`` runs ``parallel`` requests of this workload without retraction, bounded over the ``conversations`` measured and the warm-up's as the client sends them (with
    ``tokenizer``'s chat template, or plain text), and printed."""
    if a.max_total_tokens != "auto":
        return a.max_total_tokens

    every = load_questions(a.question_file, None)
    sent = sized(every, conversations) + _warmup_questions(every, a.warmup)
    prompt, how = longest_prompt(sent, a.max_new, tokenizer)
    tokens = pool_tokens(cfgs, parallel, prompt, a.max_new)
    print(f"[{tag}] --max-total-tokens auto: {tokens} = parallel {parallel} x (reserve + longest prompt {prompt} "
          f"tokens ({how}) + max_new {a.max_new}), in whole pages, the largest need of "
          f"{', '.join(c.name for c in cfgs)}", flush=True)
    return tokens
