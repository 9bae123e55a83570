"""SGLang's real pools and allocator on any device, driving the draft-preprocess step.

Used by the CPU demo, ``doctor``'s self-test and the tests. The batch and worker
are plain namespaces holding exactly the attributes ``_draft_preprocess_decode``
reads, so both SGLang's method and ours can run on them unchanged.
"""

from types import SimpleNamespace

import torch


def _ensure_global_server_args():
    # get_last_loc() reads the attention backend from SGLang's global server args,
    # which only a real launch sets; any page-table backend name routes the same way.
    from sglang.srt import server_args as sa

    if getattr(sa, "_global_server_args", None) is None:
        sa.set_global_server_args_for_scheduler(SimpleNamespace(attention_backend="fa3"))


class PagedTreeHarness:
    def __init__(self, page_size: int, topk: int, steps: int, *, num_tokens: int = 8192,
                 head_num: int = 2, head_dim: int = 8, layer_num: int = 1,
                 dtype=torch.bfloat16, max_reqs: int = 64, max_context_len: int = 4096,
                 device: str = "cpu", seed: int = 0, kv_copy: bool = False, need_sort: bool = False):
        from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

        _ensure_global_server_args()
        self.page_size, self.topk, self.steps, self.device = page_size, topk, steps, device
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.req_to_token_pool = ReqToTokenPool(max_reqs, max_context_len, device, False)
        self.kv_pool = MHATokenToKVPool(
            num_tokens, page_size, dtype, head_num, head_dim, layer_num, device, False,
            enable_kv_cache_copy=kv_copy,  # SGLang's own move_kv_cache needs it
        )
        self.allocator = PagedTokenToKVPoolAllocator(
            num_tokens, page_size, dtype, device, self.kv_pool, need_sort=need_sort  # True: as under PD disaggregation
        )
        # what SGLang's allocation helpers read from a tree cache, including on failure
        self.tree_cache = SimpleNamespace(
            token_to_kv_pool_allocator=self.allocator, is_chunk_cache=lambda: True,
            pretty_print=lambda: None,
            available_and_evictable_str=lambda: f"available={self.allocator.available_size()}, evictable=0",
        )
        self.worker = SimpleNamespace(
            page_size=page_size, topk=topk, speculative_num_steps=steps, device=device,
            draft_model_runner=SimpleNamespace(token_to_kv_pool=self.kv_pool),
            # one pool plays both parts here (SGLang gives the target its own)
            target_worker=SimpleNamespace(model_runner=SimpleNamespace(token_to_kv_pool=self.kv_pool)),
            token_to_kv_pool_allocator=self.allocator,
            # SGLang's own method stores these on the worker
            extend_lens=None, num_new_pages_per_topk=None,
        )
        self.requests = {}  # req_pool_idx -> prefix slots (CPU tensor)

    # --- requests ---------------------------------------------------------------
    def add_request(self, seq_len: int) -> int:
        """Allocate a prefix the way prefill does and fill its KV with random bytes."""
        if self.allocator.available_size() < -(-seq_len // self.page_size) * self.page_size:
            # as the scheduler does before a prefill: SGLang's alloc_extend kernel itself reads the
            # free list past its end when it is short (garbage on a GPU, a crash in the interpreter)
            raise MemoryError(f"KV pool full: cannot hold a prefix of {seq_len}")
        row = self.req_to_token_pool.free_slots.pop(0)
        zeros = torch.zeros(1, dtype=torch.int64, device=self.device)
        lens = torch.tensor([seq_len], dtype=torch.int64)
        last_loc = torch.full((1,), -1, dtype=torch.int64, device=self.device)
        slots = self.allocator.alloc_extend(zeros, zeros.cpu(), lens.to(self.device), lens, last_loc, seq_len)
        if slots is None:
            self.req_to_token_pool.free_slots.insert(0, row)  # the request never came: its row is free again
            raise MemoryError(f"KV pool full: cannot hold a prefix of {seq_len}")
        self.req_to_token_pool.req_to_token[row, :seq_len] = slots.to(torch.int32)
        for buf in self.kv_pool.k_buffer + self.kv_pool.v_buffer:
            noise = torch.randint(0, 256, (seq_len, buf[0].numel() * buf.element_size()),
                                  generator=self.gen, dtype=torch.uint8, device=self.device)
            buf.view(torch.uint8).view(buf.shape[0], -1)[slots] = noise
        self.requests[row] = slots.cpu()
        return row

    def extend_batches(self, batch_sizes, *, rounds: int = 2, seed: int = 0, free: bool = False) -> int:
        """SGLang's ``alloc_extend`` on batches of these sizes, as prefill and the paged verify call
        it: random prefixes (partial last pages included) grown by 1 to 2 pages' worth of tokens,
        ``rounds`` batches per size, so the free list's start moves by odd and even page counts.
        ``free`` gives each batch's slots back at once. Returns the slots handed out."""
        page = self.page_size
        gen = torch.Generator().manual_seed(seed)
        total = 0
        for bs in batch_sizes:
            for _ in range(rounds):
                prefix = torch.randint(0, 3 * page, (bs,), generator=gen)
                extend = torch.randint(1, 2 * page, (bs,), generator=gen)
                partial = prefix % page != 0
                # a partial prefix page ends one slot before where the kernel continues it
                last_loc = torch.full((bs,), -1, dtype=torch.int64)
                last_loc[partial] = page * 10 + prefix[partial] % page - 1
                seq, n = prefix + extend, int(extend.sum())
                out = self.allocator.alloc_extend(prefix.to(self.device), prefix, seq.to(self.device), seq,
                                                  last_loc.to(self.device), n)
                if out is None or len(out) != n:
                    raise MemoryError(f"KV pool cannot extend a batch of {bs} by {n} tokens")
                if free:
                    self.allocator.free(out)
                total += n
        return total

    def finish_request(self, row: int) -> None:
        self.allocator.free(self.requests.pop(row).to(self.device))
        self.req_to_token_pool.free_slots.append(row)

    def batch(self, rows) -> SimpleNamespace:
        seq_lens_cpu = torch.tensor([len(self.requests[r]) for r in rows], dtype=torch.int64)
        return SimpleNamespace(
            reqs=[SimpleNamespace(decode_batch_idx=0) for _ in rows],
            maybe_evict_swa=lambda: None,
            batch_size=lambda: len(rows),
            spec_info=SimpleNamespace(bonus_tokens=torch.zeros(len(rows), dtype=torch.int64), positions=None),
            sampling_info=SimpleNamespace(penalizer_orchestrator=SimpleNamespace(is_required=False)),
            req_to_token_pool=self.req_to_token_pool,
            req_pool_indices=torch.tensor(rows, dtype=torch.int64, device=self.device),
            seq_lens=seq_lens_cpu.to(self.device),
            seq_lens_cpu=seq_lens_cpu,
            tree_cache=self.tree_cache,
            out_cache_loc=None,
            seq_lens_sum=None,
            return_hidden_states=True,
        )

    # --- checks -----------------------------------------------------------------
    def branch_pages(self, row: int, seq_len: int):
        """For each branch, the slots a page-table backend reads for its partial page."""
        page, last = self.page_size, seq_len % self.page_size
        span = ((last + self.steps + page - 1) // page) * page
        r2t = self.req_to_token_pool.req_to_token[row].cpu().long()
        head = seq_len - last
        out = []
        for b in range(self.topk):
            first = int(r2t[head + b * span])
            page_id = first // page
            # a page-table backend addresses page_id * page + offset, not req_to_token
            out.append((page_id, torch.arange(last) + page_id * page))
        return out

    def mismatched_branches(self, rows) -> list:
        """(row, branch, layer) triples whose partial page differs from the prefix's."""
        bad = []
        buffers = self.kv_pool.k_buffer + self.kv_pool.v_buffer
        for row in rows:
            prefix = self.requests[row]
            seq_len, last = len(prefix), len(prefix) % self.page_size
            want = prefix[seq_len - last:]
            for b, (_, slots) in enumerate(self.branch_pages(row, seq_len)):
                for layer, buf in enumerate(buffers):
                    a = buf.view(torch.uint8).view(buf.shape[0], -1)
                    if not torch.equal(a[slots.to(self.device)].cpu(), a[want.to(self.device)].cpu()):
                        bad.append((row, b, layer))
        return bad


# --- FA3's tree-draft replay metadata, without a model ------------------------------------

class DraftInputStub:
    """What FA3's replay asks of ``spec_info``: that it is a draft input."""

    def is_draft_input(self):
        return True


def plain_kv_index_translator(req_to_token, page_size: int, device: str = "cpu", *, allocator=None,
                              pool=None, is_draft_worker: bool = True):
    """SGLang's own ``KVIndexTranslator``, built by its ``__init__`` as a model runner builds it, for a
    plain KV pool (``allocator`` and ``pool``: a paged allocator and an MHA pool, or None for a runner
    with neither a unified allocator nor a sliding-window pool): SGLang's code decides that reads are
    not translated. None on a release without the translator (0.5.17, 0.5.18), whose backends read
    ``req_to_token`` ids themselves. 0.5.19's ``init_cuda_graph_state`` asks it first thing."""
    import inspect

    try:
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
    except ImportError:
        return None
    kwargs = dict(req_to_token=req_to_token, token_to_kv_pool_allocator=allocator, token_to_kv_pool=pool,
                  page_size=page_size, device=device)
    if "is_draft_worker" in inspect.signature(KVIndexTranslator.__init__).parameters:  # 0.5.22+
        kwargs["is_draft_worker"] = is_draft_worker
    translator = KVIndexTranslator(**kwargs)
    if translator.is_translating:
        raise ValueError("not a plain pool: SGLang's translator translates its reads")
    return translator


def fa3_multi_step_backend(topk, steps, page_size, capture_bs, max_ctx=512, pool=12, seed=0, device="cpu",
                           **overrides):
    """SGLang's ``FlashAttentionMultiStepBackend`` with per-step backends built without a model
    runner: their CUDA-graph buffers allocated and captured by SGLang's own methods (v1's
    ``init_forward_metadata_capture_cuda_graph``, v2's ``init_forward_metadata_out_graph`` in
    capture), then filled with noise (so any stray write shows). For comparing replay-metadata
    builders."""
    import importlib
    import types

    from ..adapters.common.fa3_metadata import FA3_MODULE

    fa3 = importlib.import_module(FA3_MODULE)
    multi = object.__new__(fa3.FlashAttentionMultiStepBackend)
    multi.model_runner, multi.topk, multi.speculative_num_steps = None, topk, steps
    gen = torch.Generator().manual_seed(seed)
    req_to_token = torch.randint(0, 100_000, (pool, max_ctx), dtype=torch.int32, generator=gen).to(device)
    multi.attn_backends = []
    for i in range(steps - 1):
        b = object.__new__(fa3.FlashAttentionBackend)
        # what __init__ would set from the model runner, for a plain decoder on one GPU
        b.__dict__.update(
            forward_metadata=None, forward_metadata_spec_decode_expand=None, max_context_len=max_ctx,
            device=device, req_to_token=req_to_token, page_size=page_size, use_mla=False, topk=topk,
            speculative_num_steps=steps, speculative_num_draft_tokens=topk * steps, speculative_step_id=i,
            has_local_attention=False, use_sliding_window_kv_pool=False, sliding_window_size=None,
            has_swa=False, is_encoder_decoder=False, _get_scheduler_metadata=None, attn_cp_size=1,
            # read by v2 releases (0.5.17 .. 0.5.23): no CPU lengths wanted, a draft runner's backend
            needs_cpu_seq_lens=False, local_attn_builder=None, _sched_meta_buf=None, is_prefill_aware_swa=False,
            is_draft_runner=True, skip_prefill=False, _verify_mask=None, fa_impl_ver=3,
        )
        translator = plain_kv_index_translator(req_to_token, page_size, device)
        if translator is not None:  # 0.5.19+: __init__ takes the model runner's
            b.kv_index_translator = translator
        b.__dict__.update(overrides)
        b.init_cuda_graph_state(max(capture_bs), max(capture_bs) * topk)
        multi.attn_backends.append(b)
    v1 = hasattr(multi, "init_forward_metadata_capture_cuda_graph")
    for bs in capture_bs:
        batch = types.SimpleNamespace(
            batch_size=bs, req_pool_indices=torch.zeros(bs, dtype=torch.int64, device=device),
            seq_lens=torch.ones(bs, dtype=torch.int64, device=device), encoder_lens=None,
            spec_info=DraftInputStub())
        if v1:
            multi.init_forward_metadata_capture_cuda_graph(batch)
        else:
            from sglang.srt.model_executor.forward_batch_info import ForwardMode

            batch.__dict__.update(forward_mode=ForwardMode.DECODE, seq_lens_sum=bs, seq_lens_cpu=None,
                                  positions=torch.zeros(bs * topk, dtype=torch.int64, device=device))
            multi.init_forward_metadata_out_graph(batch, in_capture=True)
    for b in multi.attn_backends:
        for d in (b.draft_decode_metadata_topk_normal, b.draft_decode_metadata_topk_expand):
            for k, t in d.items():
                if isinstance(k, str):
                    t.copy_(torch.randint(-50, 100_000, t.shape, generator=gen))
    return multi


def verify_harness(page_size: int, draft_tokens: int, lens, device: str = "cpu", seed: int = 0):
    """``(harness, batch)``: real prefixes of ``lens`` on a pool just large enough for a verify of
    ``draft_tokens`` per request (and as much again), for the verify's allocation."""
    bs = len(lens)
    h = PagedTreeHarness(page_size, 2, 1, num_tokens=(sum(lens) + bs * (draft_tokens + 2 * page_size)) * 2,
                         head_num=1, head_dim=8, max_reqs=bs + 1,
                         max_context_len=max(lens) + draft_tokens + page_size, device=device, seed=seed)
    return h, h.batch([h.add_request(n) for n in lens])


def branch_slots(rng, seq_lens, topk, page_size, steps, first_free_page=1):
    """``out_cache_loc`` as SGLang's paged tree drafting lays it out ([bs, topk, steps],
    flattened): each branch owns fresh pages; its drafts start at the prefix's
    last-page length into the first one."""
    bs = len(seq_lens)
    per_branch = (page_size - 1 + steps + page_size - 1) // page_size
    pages = rng.sample(range(first_free_page, first_free_page + 3 * bs * topk * per_branch + 4), bs * topk)
    rows = []
    for i, n in enumerate(seq_lens):
        for b in range(topk):
            start = pages[i * topk + b] * page_size + n % page_size
            rows.append([start + s for s in range(steps)])
    return torch.tensor(rows, dtype=torch.int64).view(-1)


def verify_compaction_pairs(accepted, draft_tokens: int, num_slots: int, gen, first_slot: int = 1):
    """(tgt, src) of the post-verify KV move of a paged tree, as ``eagle_info`` builds them: each
    request's accepted tree positions (0 < a_1 < a_2 ...) in its own row of ``draft_tokens``
    fresh slots, moved onto the row's first positions (so targets can be other pairs' sources)."""
    accepted = [int(n) for n in accepted]
    rows = (torch.randperm(num_slots - first_slot, generator=gen)[: len(accepted) * draft_tokens]
            .view(len(accepted), draft_tokens) + first_slot)
    tgt, src = [], []
    for row, n in zip(rows, accepted):
        picks = torch.cat([torch.zeros(1, dtype=torch.int64),
                           torch.randperm(draft_tokens - 1, generator=gen)[: n - 1].sort().values + 1])
        src.append(row[picks])
        tgt.append(row[:n])
    return torch.cat(tgt), torch.cat(src)


# The synthetic verifies the serving code checks its kernels on at start-up live beside it.
from ..adapters.v1.verify import accepted_rows, paged_verify_inputs, verify_bookkeeping_inputs  # noqa: E402,F401
