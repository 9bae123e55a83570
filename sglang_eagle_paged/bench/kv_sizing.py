"""KV slots a server needs to serve ``parallel`` requests at once without retracting any.

SGLang (0.5.17 and 0.5.23, ``sglang/srt/mem_cache/allocation_sizing.py``) reserves for every running
request, at every decode step, ``get_alloc_reserve_per_decode()`` slots beyond what the request has
committed, rounded up to whole pages (``page_aligned_decode_alloc_lens``). When the pool cannot hold
that for the whole batch, its scheduler retracts requests ("KV cache pool is full. Retract requests.")
and serves them again later: the throughput then measures the pool, not the path. At page > 1 and
topk > 1 the reserve is whole pages per draft branch (topk 8, 5 steps, 64 draft tokens: 128 slots at
page 1, 2,048 at page 64, 4,096 at page 128), so a pool that holds page 1's batch can retract at page 64.

The reserve's formula is SGLang's, written out because the harness sizes the pool before any server
runs and beside a 0.5.17 whose function reads a running server's arguments;
``tests/bench/test_kv_sizing.py`` pins it to the installed SGLang's own function.
"""

from __future__ import annotations

import math

# Tokens a chat template or the server may add around a prompt (BOS, role markers of the last
# message): the plain-text bound below counts the message text itself.
SPECIAL_TOKENS = 8
# An earlier answer comes back as text inside the next turn's prompt; re-encoded, its tokens may split
# a little differently from the ``max_new`` the server generated.
ANSWER_SLACK = 16


def reserve_per_decode(cfg) -> int:
    """SGLang's ``get_alloc_reserve_per_decode()`` for a :class:`.e2e.RunConfig` (speculative algorithms
    with a draft KV cache: EAGLE, EAGLE3, STANDALONE; none: one slot, doubled)."""
    if cfg.algorithm is None:
        return 2
    steps, topk, page = cfg.steps or 1, cfg.topk or 1, cfg.page_size
    if page == 1 or topk == 1:
        per_step = max(steps * topk, cfg.num_draft_tokens)
    else:  # every branch's draft tokens in pages of their own, from a partly filled last page
        per_step = max(((page - 1) + steps + page - 1) // page * page * topk, cfg.num_draft_tokens)
    return 2 * per_step


def slots_per_request(cfg, prompt_tokens: int, max_new: int) -> int:
    """Whole pages that hold a request's longest context and its last decode step's reserve."""
    need = prompt_tokens + max_new + reserve_per_decode(cfg)
    return -(-need // cfg.page_size) * cfg.page_size


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
    from .mtbench import PromptBuilder

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
