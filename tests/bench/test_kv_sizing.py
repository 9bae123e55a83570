"""The KV pool that holds a batch (bench/kv_sizing.py): its reserve is SGLang's own, computed by the
installed SGLang's ``get_alloc_reserve_per_decode`` from the server arguments a launch would publish."""

import json
from pathlib import Path

import pytest

from bench import e2e
from sglang_eagle_paged.bench import configs as bench_configs, kv_sizing

TEMPLATED_TOKENIZER = Path(bench_configs.__file__).resolve().parents[1] / "testbed" / "target"


def _sglang_reserve(page, topk, steps, draft_tokens, algorithm="EAGLE"):
    sizing = pytest.importorskip("sglang.srt.mem_cache.allocation_sizing")
    from sglang.srt.runtime_context import create_context, use_context
    from sglang.srt.server_args import ServerArgs

    spec = dict(speculative_algorithm=algorithm, speculative_eagle_topk=topk, speculative_num_steps=steps,
                speculative_num_draft_tokens=draft_tokens, speculative_draft_model_path="dummy") if algorithm else {}
    args = ServerArgs(model_path="dummy", device="cpu", page_size=page, **spec)
    # what ServerArgs resolved is what a server would run: the test compares at those values
    assert (args.page_size, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (
        (page, topk, draft_tokens) if algorithm else (page, None, None))
    with use_context(create_context(args, role="test")):
        return sizing.get_alloc_reserve_per_decode()


@pytest.mark.parametrize("steps", [3, 5])
@pytest.mark.parametrize("topk,draft_tokens", [(1, None), (4, 16), (8, 64)])
@pytest.mark.parametrize("page", [1, 16, 64, 128])
def test_the_reserve_is_sglangs_own(page, topk, draft_tokens, steps):
    draft_tokens = draft_tokens or steps + 1  # topk 1: a chain, one token per step and the root
    cfg = bench_configs.RunConfig("x", page_size=page, topk=topk, steps=steps, num_draft_tokens=draft_tokens)
    assert kv_sizing.reserve_per_decode(cfg) == _sglang_reserve(page, topk, steps, draft_tokens)


def test_the_reserve_without_speculation_is_sglangs_own():
    assert kv_sizing.reserve_per_decode(bench_configs.RunConfig("x", algorithm=None, page_size=64)) == _sglang_reserve(
        64, None, None, None, algorithm=None)


def test_the_pool_holds_the_largest_need_of_a_pair_in_whole_pages():
    p1, p64, p128 = (bench_configs.RunConfig(f"on_p{p}", page_size=p) for p in (1, 64, 128))
    # SGLang's reserve at topk 8, 5 steps, 64 draft tokens (the H200 runs' retractions)
    assert [kv_sizing.reserve_per_decode(c) for c in (p1, p64, p128)] == [128, 2048, 4096]
    # page 64: 300 + 256 + 2048 = 2604 slots, 41 pages = 2624 per request
    assert kv_sizing.slots_per_request(p64, 300, 256) == 2624
    assert kv_sizing.pool_tokens([p1, p64], 64, 300, 256) == 64 * 2624
    both = kv_sizing.pool_tokens([p64, p128], 3, 300, 256)
    assert both % 128 == 0 and both >= 3 * kv_sizing.slots_per_request(p128, 300, 256)
    assert kv_sizing.pool_tokens([p1, p64], 64, 300, 256) > 131072  # the pool that retracted 285 times


def test_the_longest_prompt_counts_every_turn_and_earlier_answer():
    qs = [{"turns": ["a" * 30, "b" * 10]}, {"turns": ["é" * 20]}]
    n, how = kv_sizing.longest_prompt(qs, max_new=100)
    plain = len("User: " + "a" * 30 + "\nAssistant: \nUser: " + "b" * 10 + "\nAssistant:")
    assert n == plain + kv_sizing.SPECIAL_TOKENS + 100 + kv_sizing.ANSWER_SLACK and "UTF-8 byte" in how
    assert kv_sizing.longest_prompt(qs[1:], max_new=100)[0] == len("User: \nAssistant:") + 40 + kv_sizing.SPECIAL_TOKENS


def test_the_longest_prompt_with_a_chat_template_counts_its_tokens():
    from sglang_eagle_paged.bench.mtbench import PromptBuilder

    qs = [{"turns": ["What is a page table?", "And a radix tree?"]}]
    n, how = kv_sizing.longest_prompt(qs, max_new=64, tokenizer=str(TEMPLATED_TOKENIZER))
    ids = PromptBuilder(str(TEMPLATED_TOKENIZER)).payload(
        [{"role": "user", "content": qs[0]["turns"][0]}, {"role": "assistant", "content": ""},
         {"role": "user", "content": qs[0]["turns"][1]}])["input_ids"]
    assert n == len(ids) + kv_sizing.SPECIAL_TOKENS + 64 + kv_sizing.ANSWER_SLACK and "chat template" in how
    # the template's tokens are fewer than the plain text's bytes: the bound without it is the larger
    assert n < kv_sizing.longest_prompt(qs, max_new=64)[0]


# The releases that do not import beside 0.5.23 (the GPU machine's 0.5.17 among them), read from their
# published wheels (scripts/fetch_sglang_wheels.sh): the reserve's formula is the one 0.5.23 runs above.
WHEELS = Path(__file__).resolve().parents[2] / ".sglang-wheels"
SIZING_HOME = {"0.5.13.post1": "mem_cache/common.py", "0.5.15.post1": "mem_cache/common.py",
               "0.5.17": "mem_cache/allocation_sizing.py", "0.5.23": "mem_cache/allocation_sizing.py"}


def _formula(version):
    import ast

    path = WHEELS / version / "sglang" / "srt" / SIZING_HOME[version]
    if not path.is_file():
        pytest.skip(f"{path} missing: run scripts/fetch_sglang_wheels.sh")
    funcs = {n.name: n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
    alloc, reserve = funcs["get_alloc_len_per_decode"], funcs["get_alloc_reserve_per_decode"]
    pages = [ast.unparse(s.value) for s in ast.walk(alloc)
             if isinstance(s, ast.Assign) and getattr(s.targets[0], "id", "") == "num_new_pages_per_topk"]
    returns = [ast.unparse(s.value) for s in ast.walk(alloc) if isinstance(s, ast.Return)]
    doubled = [ast.unparse(s.value).split("(")[0] for s in ast.walk(reserve) if isinstance(s, ast.Return)]
    return pages, [r for r in returns if "spec_topk" in r or r == "1"], doubled


@pytest.mark.parametrize("version", ["0.5.13.post1", "0.5.15.post1", "0.5.17"])
def test_every_v2_release_reserves_by_the_formula_0_5_23_runs(version):
    assert _formula(version) == _formula("0.5.23")
    assert _formula(version)[0] == ["(page_size - 1 + spec_steps + page_size - 1) // page_size"]


@pytest.mark.parametrize("page", [16, 64, 128])
def test_the_dense_reserve_is_sglangs_own_at_page_1(page):
    """The dense draft layout puts the draft slots where page 1 does, so its reserve is SGLang's own
    page-1 reserve at every page size (``kv-size``'s dense columns)."""
    from sglang_eagle_paged.kv_reserve import reserve_per_decode

    assert reserve_per_decode(page, 8, 5, 64, dense=True) == _sglang_reserve(1, 8, 5, 64) == 128
