"""A tree draft on SGLang's own paged layout, for the tests of who reads the prefix-tail copy.

Everything here is SGLang's own code or its formulas, run on CPU, on any release with the
module-level ``prepare_for_draft`` (0.5.16+; the tests skip elsewhere):

- :func:`make_case`: the tree's rows at SGLang's whole-page allocation length per request (its
  ``get_alloc_len_per_decode`` formula, doubled as ``get_alloc_reserve_per_decode`` does), pages
  from a shuffled free list, full prefix pages shared between requests as the radix cache shares
  them, on a real ``MHATokenToKVPool``;
- :func:`prepare_for_draft`: SGLang's ``prepare_for_draft`` (paged branch), its copy recorded;
- :func:`plain_translator`: SGLang's ``KVIndexTranslator`` (0.5.19+) built by its own ``__init__``
  for the case's plain pool; None on a release without one (0.5.17, 0.5.18), where the backends
  read ``req_to_token`` ids directly.

No module here exists only on one release: a test that needs one imports it itself.
"""

import random
from types import SimpleNamespace

import torch
from sglang.srt.layers.attention import flashattention_backend as fa3b
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.speculative import eagle_worker_common as ewc

from helpers.sglang_source import undecorated
from sglang_eagle_paged.tools.harness import plain_kv_index_translator

# The function as written, not its torch.compile wrapper (which recompiles per shape on CPU).
draft_decode_set_expand_metadata = undecorated(
    fa3b.draft_decode_set_expand_metadata, "draft_decode_set_expand_metadata")

HEADS, HEAD_DIM = 1, 8  # the interpreter runs one program per (branch, head, split)
UNALLOCATED = -1  # req_to_token beyond a request's allocation: a read of it is a layout bug


def alloc_len_per_decode(page, topk, steps, draft_tokens):
    # sglang/srt/mem_cache/allocation_sizing.py:get_alloc_len_per_decode, page > 1 and topk > 1
    per_branch_pages = ((page - 1) + steps + page - 1) // page
    return max(per_branch_pages * page * topk, draft_tokens)


def make_case(seed, bs, topk, page, steps, prefix_kind):
    rng = random.Random(seed)
    draft_tokens = rng.randint(2, topk * steps + 1)
    if prefix_kind == "aligned":
        lens = [page * rng.randint(1, 4) for _ in range(bs)]
    elif prefix_kind == "one":
        lens = [1] * bs
    elif prefix_kind == "tail":  # page - 1 prefix-tail slots: the most copied
        lens = [page * rng.randint(0, 3) + page - 1 for _ in range(bs)]
    elif prefix_kind == "long":  # more than one 512-token block for flashinfer's tiled launch
        lens = [rng.randint(1030, 1300) for _ in range(bs)]
    else:
        lens = [rng.randint(1, 5 * page) for _ in range(bs)]
    reserve = 2 * alloc_len_per_decode(page, topk, steps, draft_tokens)  # get_alloc_reserve_per_decode
    # page_aligned_decode_alloc_lens: whole pages covering committed + reserve
    alloc = [-(-(n + reserve) // page) * page for n in lens]
    row_width = max(alloc) + page
    max_reqs = bs + 3
    num_pages = sum(a // page for a in alloc) + 8
    free = list(range(1, num_pages + 1))  # page 0: SGLang's padding page
    rng.shuffle(free)
    req_pool_indices = rng.sample(range(max_reqs), bs)
    r2t = torch.full((max_reqs, row_width), UNALLOCATED, dtype=torch.int32)
    prev_pages = None
    for b, (n, a) in enumerate(zip(lens, alloc)):
        pages = [free.pop() for _ in range(a // page)]
        if prev_pages is not None and rng.random() < 0.5:
            shared = min(n // page, prev_full)  # the radix cache shares full prefix pages only
            pages[:shared] = prev_pages[:shared]
        prev_pages, prev_full = pages, n // page
        pos = torch.arange(a)
        r2t[req_pool_indices[b], :a] = (torch.tensor(pages)[pos // page] * page + pos % page).int()
    pool = MHATokenToKVPool(
        (num_pages + 1) * page, page, torch.float32, HEADS, HEAD_DIM, 1, "cpu",
        enable_memory_saver=False, enable_alt_stream=False, enable_kv_cache_copy=True,
    )
    g = torch.Generator().manual_seed(seed)
    for buf in pool.k_buffer + pool.v_buffer:
        buf.copy_(torch.randn(buf.shape, generator=g))
    return SimpleNamespace(
        bs=bs, topk=topk, page=page, steps=steps, lens=lens, r2t=r2t, pool=pool,
        req_pool_indices=torch.tensor(req_pool_indices, dtype=torch.int64),
        seq_lens=torch.tensor(lens, dtype=torch.int64), rng=rng,
    )


def prepare_for_draft(case, monkeypatch):
    """SGLang's own draft preparation (paged branch): out_cache_loc, positions and the
    pairs its duplication hands to the pool's ``move_kv_cache``."""
    moves = []
    original = case.pool.move_kv_cache

    def recording_move(tgt, src):
        moves.append((tgt.clone(), src.clone()))
        return original(tgt, src)

    monkeypatch.setattr(case.pool, "move_kv_cache", recording_move)
    # ForwardBatch.init_new needs a whole model runner; the paged branch runs before it. That it borrows
    # out_cache_loc (so a rewrite in place reaches the draft forward) is read from the installed source:
    # test_dense_hooks.py::test_the_forward_batch_borrows_out_cache_loc_so_the_dense_rewrite_reaches_it.
    monkeypatch.setattr(ewc, "ForwardBatch", SimpleNamespace(init_new=lambda batch, runner, **kw: batch))
    batch = SimpleNamespace(
        forward_mode=SimpleNamespace(is_idle=lambda: False),
        seq_lens=case.seq_lens.clone(), seq_lens_cpu=case.seq_lens.clone(),
        req_pool_indices=case.req_pool_indices.clone(), device="cpu",
        token_to_kv_pool_allocator=SimpleNamespace(page_size=case.page),
        out_cache_loc=None,
    )
    draft_input = SimpleNamespace()
    runner = SimpleNamespace(
        token_to_kv_pool=case.pool,
        spec_algorithm=SimpleNamespace(is_standalone=lambda: False),
        model_config=SimpleNamespace(model_is_mrope=False),
    )
    ewc.prepare_for_draft(
        draft_input, SimpleNamespace(req_to_token=case.r2t), batch, None, runner,
        case.topk, case.steps,
    )
    tgt = torch.cat([t for t, _ in moves]) if moves else torch.empty(0, dtype=torch.int64)
    src = torch.cat([s for _, s in moves]) if moves else torch.empty(0, dtype=torch.int64)
    return SimpleNamespace(out_cache_loc=batch.out_cache_loc, positions=draft_input.positions,
                           tgt=tgt, src=src)


def draft_forward_batch(case, prep):
    """The draft decode's forward batch as the multi-step draft backends' ``common_template`` reads it."""
    return SimpleNamespace(
        batch_size=case.bs, seq_lens=case.seq_lens.clone(), seq_lens_cpu=case.seq_lens.clone(),
        seq_lens_sum=int(case.seq_lens.sum()), req_pool_indices=case.req_pool_indices.clone(),
        positions=prep.positions, kv_loc_plan=None, out_cache_loc=prep.out_cache_loc,
        spec_info=SimpleNamespace(kv_indptr=None, kv_indices=None, window_kv_indptr=None,
                                  window_kv_indices=None, is_draft_input=lambda: True),
    )


def expected_reads(case, prep, step):
    """What a branch should read at draft step ``step``: its prefix, then its own draft slots."""
    loc = prep.out_cache_loc.view(case.bs, case.topk, case.steps)
    out = []
    for b in range(case.bs):
        row = case.r2t[int(case.req_pool_indices[b])]
        for t in range(case.topk):
            out.append(torch.cat([row[: case.lens[b]].long(), loc[b, t, : step + 1].long()]))
    return out


def plain_translator(case):
    """SGLang's KVIndexTranslator as a draft runner builds it for the case's plain pool (a paged
    allocator over it): no id space translates reads. None on a release without the translator."""
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator

    allocator = PagedTokenToKVPoolAllocator(case.pool.size, case.page, torch.float32, "cpu", case.pool,
                                            need_sort=False)
    return plain_kv_index_translator(case.r2t, case.page, "cpu", allocator=allocator, pool=case.pool)
