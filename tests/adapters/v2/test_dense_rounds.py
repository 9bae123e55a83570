"""Rounds of tree drafting in the dense draft layout at page ``P > 1`` against page 1 (issue 54,
docs/design.md "Page > 1 in page 1's memory"), on SGLang's own allocation, verify window,
post-verify move and allocator, 0.5.23's (``.venv``) and 0.5.17's (``.venv-517``, scripts/test.sh's
v517 part):

- each round allocates as ``eagle_prepare_for_decode`` does with the dense reserve, page 1's: on
  0.5.23 through ``page_aligned_decode_alloc_lens`` then ``alloc_for_spec_decode``; 0.5.17 has the
  rule inline, so its own ``eagle_prepare_for_decode`` runs, its reserve from the server arguments
  through this project's sizing hook (installed with SGLang's HookRegistry); drafts into
  :func:`dense_out_cache_loc`'s slots (random KV: scratch), writes the verify's KV into SGLang's
  verify window (``assign_extend_cache_locs``, launched as
  ``assign_extend_cache_locs_func`` launches it on a GPU: this CPU is neither SGLang's CPU nor its GPU platform) and moves a random accepted path with
  ``move_accept_tokens_to_target_kvcache``; random requests finish and free their rows as
  ``_serve`` in ``test_alloc_warm_up`` does;
- the same rounds run at page 1 (SGLang's own layout there) with the same lengths, paths and KV
  values (a function of request, position and tree node, never of a slot).

Then every draft slot lies inside its request's allocation, each request's committed KV at page
``P`` equals page 1's token for token, and after everything finishes the allocator holds every
slot it started with. SGLang's functions run as they are (Triton kernels in the interpreter).
"""

import logging
import random
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
sizing = pytest.importorskip("sglang.srt.mem_cache.allocation_sizing")

from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs  # noqa: E402
from sglang.srt.utils import next_power_of_2  # noqa: E402
from sglang.srt.mem_cache import allocation  # noqa: E402
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixCache  # noqa: E402
from sglang.srt import runtime_context  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative.spec_utils import move_accept_tokens_to_target_kvcache  # noqa: E402

from sglang.srt.speculative import eagle_worker_common as ewc  # noqa: E402
from sglang.srt.layers.attention import triton_backend as trb  # noqa: E402

from sglang_eagle_paged.adapters.v2 import dense_draft, fault, hook_points  # noqa: E402
from sglang_eagle_paged.adapters.v2.dense_draft import dense_out_cache_loc  # noqa: E402
from sglang_eagle_paged.tree_layout import dense_positions  # noqa: E402
from sglang_eagle_paged.kv_reserve import reserve_per_decode  # noqa: E402

torch.set_num_threads(1)
DIM = 2
# 0.5.23 sizes a decode round with page_aligned_decode_alloc_lens; 0.5.17 has the same rule inline in
# eagle_prepare_for_decode, which allocates the round itself, its reserve from the server arguments
# through get_alloc_len_per_decode: there, this project's sizing hook gives it the dense reserve.
PAGE_ALIGNED = getattr(sizing, "page_aligned_decode_alloc_lens", None)


class _Req(SimpleNamespace):
    """What SGLang's row pool and round allocation read of a request."""

    @property
    def kv_committed_len(self):  # 0.5.17's eagle_prepare_for_decode reads the request's own
        return self.kv.kv_committed_len


# The hooks of SGLANG_EAGLE_PAGED_DENSE_DRAFT this file runs SGLang's rounds through: the reserve, the
# draft preparation, the duplication its paged branch calls and triton's draft index kernel.
HOOKED = {"sizing": (sizing, "get_alloc_len_per_decode"), "prepare": (ewc, "prepare_for_draft"),
          "duplicate": (ewc, hook_points.FUNCTION), "index": (trb, "generate_draft_decode_kv_indices")}


@pytest.fixture
def dense_hooks(monkeypatch):
    """This project's dense-draft hooks installed with SGLang's HookRegistry as a server installs them
    (undone after the test), the plan on as ``dense_draft.decide`` turns it on (the test sets its
    ``len_per_decode`` for its tree), the fault switch as at start-up."""
    from helpers.hook_sandbox import hook_sandbox
    from sglang_eagle_paged import hooks
    from sglang_eagle_paged.adapters import v2
    from sglang_eagle_paged.settings import Settings

    from sglang_eagle_paged.adapters.v2 import hook_table

    monkeypatch.setattr(fault.SWITCH, "reason", None)
    monkeypatch.setattr(fault, "_CONSEQUENCES", [])
    with hook_sandbox(monkeypatch, HOOKED) as (_originals, read):
        wanted = {f"{m.__name__}.{a}" for m, a in HOOKED.values()}
        listed = v2.hooks(Settings(dense_draft=True), "0.5.23")
        hooks.install([h for h in listed if h.target in wanted], "test")
        read()  # what the sandbox puts back wherever the registry rebound it
        dense = hook_table.dense_layout_of(listed)
        dense.active = True  # as dense_draft.decide turns it on (the test sets len_per_decode for its tree)
        yield dense


@pytest.fixture(scope="module")
def fa3_context():
    if hasattr(runtime_context, "create_context"):  # 0.5.23
        args = ServerArgs(model_path="dummy", attention_backend="fa3", device="cpu")
        with runtime_context.use_context(runtime_context.create_context(args, role="test")):
            yield
    else:  # 0.5.17: one process-wide context, overridden for the test
        with runtime_context.get_context().override_server_args(attention_backend="fa3", device="cpu"):
            yield


def _value(req, pos, node):
    """The KV a token holds: its request, position and tree node (0 for the prompt), never its slot."""
    return torch.tensor([req * 1000.0 + pos, float(node)])


class Server:
    def __init__(self, page, size, max_reqs, width):
        self.page = page
        self.kv = MHATokenToKVPool(size, page, torch.float32, 1, DIM, 1, "cpu", enable_memory_saver=False,
                                   enable_alt_stream=False, enable_kv_cache_copy=True)
        self.rows = ReqToTokenPool(max_reqs, width, "cpu", enable_memory_saver=False)
        if page == 1:
            self.allocator = TokenToKVPoolAllocator(size, torch.float32, "cpu", self.kv, need_sort=False)
        else:
            self.allocator = PagedTokenToKVPoolAllocator(size, page, torch.float32, "cpu", self.kv, need_sort=False)
            self.allocator.use_triton_kernels = True
        self.allocator.debug_mode = True  # SGLang's own checks of every allocation and free
        self.cache = RadixCache(CacheInitParams(disable=True, req_to_token_pool=self.rows,
                                                token_to_kv_pool_allocator=self.allocator, page_size=page,
                                                is_eagle=True))
        self.start = self.allocator.available_size()
        self.live = {}  # request id -> (row, kv state)

    def k(self):
        return self.kv.k_buffer[0][:, 0, :]

    def prefill(self, req, n):
        state = _Req(kv=SimpleNamespace(kv_allocated_len=n, kv_committed_len=n), req_pool_idx=None, decode_batch_idx=0)
        if hasattr(self.rows, "alloc_rows"):  # 0.5.23: rows by count
            (row,) = self.rows.alloc_rows(1)
        else:  # 0.5.17: rows by request
            (row,) = self.rows.alloc([state])
        if self.page == 1:
            out = allocation.alloc_token_slots(self.cache, n)
        else:
            zero = torch.zeros(1, dtype=torch.int64)
            out = allocation.alloc_paged_token_slots_extend(self.cache, zero.clone(), zero, torch.tensor([n]),
                                                            torch.tensor([n]), torch.full((1,), -1), n)
        self.rows.req_to_token[row, :n] = out.to(torch.int32)
        for pos in range(n):
            self.k()[int(out[pos])] = _value(req, pos, 0)
        self.live[req] = (row, state)

    def context(self, topk, steps, tokens):
        """The server arguments of this page size and tree, published as each release reads them."""
        fields = dict(page_size=self.page, speculative_algorithm="EAGLE", speculative_eagle_topk=topk,
                      speculative_num_steps=steps, speculative_num_draft_tokens=tokens, attention_backend="fa3",
                      device="cpu")
        if hasattr(runtime_context, "create_context"):  # 0.5.23
            args = ServerArgs(model_path="dummy", speculative_draft_model_path="dummy", **fields)
            return runtime_context.use_context(runtime_context.create_context(args, role="test"))
        return runtime_context.get_context().override_server_args(**fields)  # 0.5.17

    def allocate(self, reqs, topk, steps, tokens):
        """SGLang's allocation of a decode round for ``reqs`` (ids), its reserve through the installed
        sizing hook; returns that reserve."""
        rows = torch.tensor([self.live[r][0] for r in reqs], dtype=torch.int64)
        states = [self.live[r][1] for r in reqs]
        with self.context(topk, steps, tokens):
            reserve = sizing.get_alloc_reserve_per_decode()
            if PAGE_ALIGNED is not None:
                cur, nxt, needed = PAGE_ALIGNED(states, reserve=reserve, page_size=self.page)
                cur_cpu, nxt_cpu = torch.tensor(cur, dtype=torch.int32), torch.tensor(nxt, dtype=torch.int32)
                allocation.alloc_for_spec_decode(self.cache, self.rows, reqs=states, req_pool_indices=rows,
                                                 cur_kv_lens=cur_cpu.clone(), cur_kv_lens_cpu=cur_cpu,
                                                 nxt_kv_lens=nxt_cpu.clone(), nxt_kv_lens_cpu=nxt_cpu,
                                                 num_needed_tokens=needed,
                                                 batch=SimpleNamespace(device="cpu", hisparse_coordinator=None))
            else:
                self.prepare_for_decode_517(states, rows)
        return reserve

    def decode(self, reqs, topk, steps, tokens, paths, g, draft=None):
        """The rest of the round :meth:`allocate` allocated: the draft slots (``draft(server, rows,
        seq_lens)``; by default our dense gather), SGLang's verify window and move. ``paths[req]``: the
        accepted tree nodes (0 first)."""
        rows = torch.tensor([self.live[r][0] for r in reqs], dtype=torch.int64)
        states = [self.live[r][1] for r in reqs]
        seq_lens = torch.tensor([s.kv.kv_committed_len for s in states], dtype=torch.int64)
        # the draft: its slots inside each request's allocation, past its committed KV; its KV is scratch
        if draft is None:
            positions = dense_positions(seq_lens, topk, steps)
            assert (positions < torch.tensor([s.kv.kv_allocated_len for s in states]).view(-1, 1)).all()
            slots = dense_out_cache_loc(self.rows.req_to_token, rows, seq_lens, topk, steps)
        else:
            slots = draft(self, rows, seq_lens)
        for b, s in enumerate(states):
            owned = self.rows.req_to_token[int(rows[b]), s.kv.kv_committed_len:s.kv.kv_allocated_len].long()
            mine = slots.view(len(reqs), -1)[b]
            assert torch.isin(mine, owned).all(), f"request {reqs[b]}: a draft slot it does not own"
        self.k()[slots] = torch.randn((slots.numel(), DIM), generator=g)
        # the verify: SGLang's window, the tree's KV written into it
        window = torch.empty(len(reqs) * tokens, dtype=torch.int64)
        assign_extend_cache_locs[(len(reqs),)](  # as assign_extend_cache_locs_func launches it on a GPU
            rows, self.rows.req_to_token, seq_lens, seq_lens + tokens, window, self.rows.req_to_token.shape[1],
            next_power_of_2(len(reqs)))
        for b, r in enumerate(reqs):
            for node in range(tokens):
                self.k()[int(window[b * tokens + node])] = _value(r, int(seq_lens[b]), node + 1)
        accept_index = torch.full((len(reqs), steps + 1), -1, dtype=torch.int32)
        for b, r in enumerate(reqs):
            accept_index[b, :len(paths[r])] = torch.tensor([b * tokens + n for n in paths[r]], dtype=torch.int32)
        correct = torch.tensor([len(paths[r]) - 1 for r in reqs], dtype=torch.int32)
        # 0.5.17's move reads the front slots through the rows, 0.5.23's from the verify window
        batch = SimpleNamespace(seq_lens=seq_lens.clone(), out_cache_loc=window, req_pool_indices=rows,
                                req_to_token_pool=self.rows)
        move_accept_tokens_to_target_kvcache(batch, accept_index, correct, self.allocator)
        for s, r in zip(states, reqs):
            s.kv.kv_committed_len += len(paths[r])

    def prepare_for_decode_517(self, states, rows):
        """0.5.17's own ``eagle_prepare_for_decode`` on the round's requests, under the published server
        arguments; its reserve is SGLang's sizing, through the installed hook."""
        from sglang.srt.speculative.eagle_utils import eagle_prepare_for_decode

        eagle_prepare_for_decode(SimpleNamespace(
            maybe_evict_swa=lambda: None, batch_size=lambda: len(states), reqs=states,
            sampling_info=SimpleNamespace(penalizer_orchestrator=SimpleNamespace(is_required=False)),
            token_to_kv_pool_allocator=self.allocator, req_to_token_pool=self.rows, req_pool_indices=rows,
            tree_cache=self.cache, device="cpu"))

    def committed(self, req):
        row, state = self.live[req]
        slots = self.rows.req_to_token[row, :state.kv.kv_committed_len].long()
        return self.k()[slots].clone()

    def finish(self, req):
        row, state = self.live.pop(req)
        self.allocator.free(self.rows.req_to_token[row, :state.kv.kv_allocated_len].long())
        if hasattr(self.rows, "free_rows"):
            self.rows.free_rows([row])
        else:
            self.rows.free(state)


def _serve(dense, page, topk, steps, seed, draft=None, before_round=None, rounds=6):
    """Rounds at page 1 and at ``page`` with the same requests, lengths, accepted paths and KV values:
    new requests, a decode round for all (``draft`` as :meth:`Server.decode` takes it; ``before_round(i)``
    first), some finish; every request's committed KV compared after each round, every slot returned at
    the end. Returns the reserve SGLang allocated each round with at ``page``."""
    rng = random.Random(seed)
    tokens = rng.randint(steps + 1, topk * steps)
    dense.len_per_decode = max(steps * topk, tokens)  # what dense_draft.decide sets for this tree
    width = 64 * page + 2 * reserve_per_decode(page, topk, steps, tokens)
    size = 40 * width
    servers = [Server(1, size, 12, width), Server(page, size, 12, width)]
    g = torch.Generator().manual_seed(seed)
    next_id, live, reserves = 0, [], []
    for i in range(rounds):
        for _ in range(rng.randint(0 if live else 1, 2)):
            n = rng.choice([page, rng.randint(1, 3 * page), page - 1 or 1])  # on and off page boundaries
            for s in servers:
                s.prefill(next_id, n)
            live.append(next_id)
            next_id += 1
        paths = {}
        for r in live:
            depth = rng.randint(0, steps)
            nodes = sorted(rng.sample(range(1, tokens), min(depth, tokens - 1)))
            paths[r] = [0] + nodes
        if before_round is not None:
            before_round(i)
        # both rounds allocated before either drafts, as one scheduler allocates a round before its forward
        reserves.append([s.allocate(live, topk, steps, tokens) for s in servers][-1])
        for s in servers:
            s.decode(live, topk, steps, tokens, paths, g, draft)
        for r in live:
            ref, got = servers[0].committed(r), servers[1].committed(r)
            assert torch.equal(got, ref), f"request {r}"
        for r in [r for r in live if rng.random() < 0.3]:
            for s in servers:
                s.finish(r)
            live.remove(r)
    for r in live:
        for s in servers:
            s.finish(r)
    for s in servers:
        assert s.allocator.available_size() == s.start, f"page {s.page}: slots leaked"
    return reserves, tokens


@pytest.mark.parametrize("page,topk,steps,seed", [(16, 4, 3, 1), (64, 8, 5, 2), (4, 10, 2, 3), (128, 2, 8, 4)])
def test_rounds_commit_page_1s_kv_and_return_every_slot(page, topk, steps, seed, fa3_context, dense_hooks):
    reserves, tokens = _serve(dense_hooks, page, topk, steps, seed)
    assert set(reserves) == {reserve_per_decode(page, topk, steps, tokens, dense=True)}  # page 1's, through the hook


FAULT = 2  # the round whose body of ours faults


def _index_lists(server, rows, seq_lens, prep, topk, steps):
    """Every draft step's index lists as SGLang's triton draft backend builds them (its
    ``common_template``) over the server's rows, through the installed index-kernel hook."""
    from helpers.draft_tree import plain_translator
    from sglang.srt.speculative.spec_utils import draft_kv_indices_buffer_width
    from test_dense_draft import _forward_batch, _multi_step_backend

    case = SimpleNamespace(bs=len(rows), topk=topk, steps=steps, page=server.page, r2t=server.rows.req_to_token,
                           pool=server.kv, req_pool_indices=rows, seq_lens=seq_lens)
    be = _multi_step_backend(trb.TritonMultiStepDraftBackend, case, server.page)
    if hasattr(be, "kv_index_translator"):
        be.kv_index_translator = plain_translator(case)
    buf = torch.full((steps, draft_kv_indices_buffer_width(case.bs, topk, be.max_context_len)), -7, dtype=torch.int64)
    be.cuda_graph_kv_indices = buf
    seen = []
    be.common_template(_forward_batch(case, prep), buf, lambda i, fb: seen.append(
        [fb.spec_info.kv_indices[int(fb.spec_info.kv_indptr[z]):int(fb.spec_info.kv_indptr[z + 1])].long().clone()
         for z in range(case.bs * topk)]))
    return case, seen


@pytest.mark.parametrize("origin", ["slot gather", "index kernel"])
@pytest.mark.parametrize("page,topk,steps,seed", [(16, 4, 3, 7), (64, 8, 5, 8), (4, 3, 2, 9)])
def test_a_fault_hands_the_layout_back_to_sglangs_from_the_next_round(page, topk, steps, seed, origin, fa3_context,
                                                                      dense_hooks, monkeypatch, caplog):
    """Rounds drafted through SGLang's own ``prepare_for_draft`` and its triton draft backend's index
    lists with the hooks installed, a body of ours faulting in round ``FAULT`` (the slot gather, or the
    index kernel's page-1 launch): that round keeps the dense slots (SGLang's page-1 slot kernel where
    the gather faulted) and SGLang's own launch builds its lists where ours faulted, the next
    allocation takes SGLang's reserve, and from that round on SGLang's per-branch layout serves (its
    slots, its prefix-tail copy, its lists); every draft slot and copy target lies in its request's own
    allocation, each round not faulted reads exactly each branch's prefix and own draft slots, the
    committed KV equals page 1's round after round, and every slot comes back."""
    from helpers.draft_tree import expected_reads, prepare_for_draft

    drafted = []  # at ``page``: (dense layout on, slots the duplication copied)

    def draft(server, rows, seq_lens):
        states = {row: state for row, state in server.live.values()}
        prep = prepare_for_draft(SimpleNamespace(
            pool=server.kv, seq_lens=seq_lens, req_pool_indices=rows, page=server.page,
            r2t=server.rows.req_to_token, topk=topk, steps=steps), monkeypatch)
        owned = torch.cat([server.rows.req_to_token[int(r), states[int(r)].kv.kv_committed_len:
                                                     states[int(r)].kv.kv_allocated_len].long() for r in rows])
        assert torch.isin(prep.tgt, owned).all(), "a prefix-tail copy outside the requests' allocations"
        if server.page > 1:
            faulted = bool(fault.SWITCH)
            drafted.append((dense_hooks.active, prep.tgt.numel()))
            case, lists = _index_lists(server, rows, seq_lens, prep, topk, steps)
            case.lens = [int(n) for n in seq_lens]
            if not (origin == "index kernel" and len(drafted) == FAULT + 1) and not (faulted and drafted[-1][0]):
                for step, got in enumerate(lists):
                    for z, want in enumerate(expected_reads(case, prep, step)):
                        assert torch.equal(got[z], want), f"round {len(drafted)} step {step} branch {z}"
        return prep.out_cache_loc

    def broken(*_a, **_k):
        raise KeyError("broken on purpose")

    def before_round(i):
        if i == FAULT:
            name = "dense_out_cache_loc" if origin == "slot gather" else "page_1_arguments"
            monkeypatch.setattr(dense_draft, name, broken)

    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        reserves, tokens = _serve(dense_hooks, page, topk, steps, seed, draft, before_round)
    dense = reserve_per_decode(page, topk, steps, tokens, dense=True)
    assert reserves == [dense] * (FAULT + 1) + [reserve_per_decode(page, topk, steps, tokens)] * (5 - FAULT)
    assert [on for on, _ in drafted] == [True] * (FAULT + 1) + [False] * (5 - FAULT)
    assert all(n == 0 for _, n in drafted[:FAULT + 1]) and any(n for _, n in drafted[FAULT + 1:])
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    handed = [r.getMessage() for r in caplog.records if "handed back" in r.getMessage()]
    assert len(errors) == 1 and "KeyError" in errors[0] and origin in errors[0] and len(handed) == 1, (errors, handed)
