#!/usr/bin/env python
"""CPU soak of the paged tree-draft step: no leaked slots, no touched prefix.

Drives ``sglang_eagle_paged.adapters.v1.draft_preprocess.draft_preprocess_decode`` (mode ON, the Triton
kernels under ``TRITON_INTERPRET=1``) on SGLang's real ``ReqToTokenPool``,
``MHATokenToKVPool`` and ``PagedTokenToKVPoolAllocator`` through
:class:`sglang_eagle_paged.tools.harness.PagedTreeHarness`, with a small scheduler
around it:

- arrivals with random prompt lengths, a share of them 1-token prompts and exact
  page multiples (last page empty: nothing to duplicate);
- a decode loop: every step drafts for a random batch of the live requests with a
  random ``topk`` (2..8) and ``steps`` (1..5), then "verifies" 1..steps+1 tokens
  per request by extending its prefix with the allocator (as the verify step
  does), so prefixes cross page boundaries all the time;
- finishes (a request reaches its target length), aborts (a request is freed
  mid-way), retractions (a random subset is freed and re-added with the same
  length, and SGLang's own rule: when the pool cannot cover
  ``new_tokens_required_next_decode`` the newest requests are retracted first).

Checked after every step (an AssertionError names the step and what differed):

- the allocator's free pages (``free_pages`` and ``release_pages``) are exactly
  what they were before the draft step (``restore_state`` put everything back);
- every KV byte that changed during the draft step (all layers, K and V) is in a
  slot the draft step was handed by the allocator: never slot 0 (SGLang's padding
  slot), never a prefix slot of a live request; the prefix part of every live
  request's ``req_to_token`` row is unchanged;
- every branch's partial page holds the prefix's last-page KV (the point of the
  package), via ``PagedTreeHarness.mismatched_branches``.

At the end every request is finished and the free pages must equal the initial
baseline as a set. Prints one line of JSON.

``--debug-pool`` sets ``SGLANG_DEBUG_MEMORY_POOL=1`` before SGLang is imported:
the allocator then asserts that each allocation is unique and that ``last_loc``
agrees with the prefix length.
"""

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the source checkout, whose scripts/ has the CPU stand-ins


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1000, help="decode steps (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--page-sizes", default="4,16", help="comma list; one pool per page size")
    p.add_argument("--topk", default="2,8", help="min,max topk per step")
    p.add_argument("--num-steps", default="1,5", help="min,max speculative_num_steps per step")
    p.add_argument("--max-live", type=int, default=8, help="live requests per pool, at most")
    p.add_argument("--max-prompt", type=int, default=96)
    p.add_argument("--max-new", type=int, default=48, help="decode tokens per request, at most")
    p.add_argument("--num-tokens", type=int, default=2048,
                   help="KV slots per pool (small enough that SGLang's reservation retracts at times)")
    p.add_argument("--time-limit", type=float, default=None,
                   help="stop after this many seconds (the summary reports the steps done)")
    p.add_argument("--debug-pool", action="store_true", help="SGLANG_DEBUG_MEMORY_POOL=1")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--check-every", type=int, default=1,
                   help="run the KV / branch checks every N steps (free-page checks run every step)")
    return p.parse_args(argv)


def _setup(args):
    if args.debug_pool:
        os.environ["SGLANG_DEBUG_MEMORY_POOL"] = "1"
    import torch

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the first Triton import
    standins = ROOT / "scripts" / "cpu_standins"
    if standins.is_dir() and str(standins) not in sys.path:
        sys.path.append(str(standins))  # after site-packages: real packages win
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def ceil_align(x, y):
    return -(-x // y) * y


def reserved_next_decode(page, topk, steps, num_draft_tokens, bs):
    """SGLang 0.5.12's ``ScheduleBatch.new_tokens_required_next_decode`` (v1 EAGLE, page>1, topk>1)."""
    return max(ceil_align(steps + page, page) * topk, ceil_align(num_draft_tokens, page)) * bs


class Pool:
    """One harness (one page size) plus the bookkeeping of its live requests."""

    def __init__(self, page, args, seed):
        import torch
        from sglang_eagle_paged.tools.harness import PagedTreeHarness

        self.torch = torch
        self.page = page
        # rows wide enough for the longest request plus the widest tree extension
        width = args.max_prompt + args.max_new + 2 * page * 8 + 4 * page
        self.h = PagedTreeHarness(page, 2, 1, num_tokens=args.num_tokens, head_num=1, head_dim=8,
                                  layer_num=1, max_reqs=args.max_live + 2, max_context_len=width,
                                  device=args.device, seed=seed)
        self.target = {}  # row -> final length
        self.baseline = self.free_set()
        self.num_pages = self.h.allocator.size // page

    def free_set(self):
        a = self.h.allocator
        return sorted(a.free_pages.tolist() + a.release_pages.tolist())

    def live(self):
        return list(self.h.requests)

    def add(self, seq_len, target):
        row = self.h.add_request(seq_len)
        self.target[row] = target
        return row

    def finish(self, row):
        self.target.pop(row)
        self.h.finish_request(row)

    def grow(self, rows, accepted):
        """Append ``accepted[i]`` tokens to request ``rows[i]``, as the verify step does."""
        torch, h = self.torch, self.h
        a = h.allocator
        r2t = h.req_to_token_pool.req_to_token
        dev = h.device
        prefix = torch.tensor([len(h.requests[r]) for r in rows], dtype=torch.int64)
        new = prefix + torch.tensor(accepted, dtype=torch.int64)
        last_loc = torch.tensor([int(h.requests[r][-1]) for r in rows], dtype=torch.int64)
        out = a.alloc_extend(prefix.to(dev), prefix, new.to(dev), new, last_loc.to(dev), int((new - prefix).sum()))
        if out is None:
            return False
        start = 0
        for r, p, n in zip(rows, prefix.tolist(), new.tolist()):
            slots = out[start:start + n - p]
            start += n - p
            r2t[r, p:n] = slots.to(torch.int32)
            for buf in h.kv_pool.k_buffer + h.kv_pool.v_buffer:
                noise = torch.randint(0, 256, (n - p, buf[0].numel() * buf.element_size()),
                                      generator=h.gen, dtype=torch.uint8, device=dev)
                buf.view(torch.uint8).view(buf.shape[0], -1)[slots] = noise
            h.requests[r] = torch.cat([h.requests[r], slots.cpu()])
        return True


def prompt_len(rng, page, max_prompt):
    kind = rng.random()
    if kind < 0.15:
        return 1
    if kind < 0.35:
        return page * rng.randint(1, max(1, max_prompt // page))  # last page empty
    if kind < 0.45:
        return page * rng.randint(0, max(0, max_prompt // page - 1)) + page - 1  # last page full-1
    return rng.randint(1, max_prompt)


def run(args):
    _setup(args)
    import torch

    from sglang_eagle_paged.tree_layout import extend_lens
    from sglang_eagle_paged.settings import Mode
    from sglang_eagle_paged.adapters.v1.draft_preprocess import draft_preprocess_decode

    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    pages = [int(x) for x in args.page_sizes.split(",")]
    tk_lo, tk_hi = (int(x) for x in args.topk.split(","))
    st_lo, st_hi = (int(x) for x in args.num_steps.split(","))
    pools = [Pool(p, args, args.seed * 1000 + i) for i, p in enumerate(pages)]
    stats = dict(draft_steps=0, drafted_requests=0, arrivals=0, finishes=0, aborts=0,
                 retractions=0, reservation_retractions=0, one_token_prompts=0,
                 page_multiple_batches=0, page_multiple_prefixes=0, dup_pairs=0,
                 checked_steps=0, max_batch=0)
    t0 = time.perf_counter()

    steps_done = 0
    for step in range(args.steps):
        if args.time_limit is not None and time.perf_counter() - t0 > args.time_limit:
            break
        steps_done = step + 1
        pool = pools[step % len(pools)] if rng.random() < 0.5 else rng.choice(pools)
        h, page = pool.h, pool.page
        topk, steps = rng.randint(tk_lo, tk_hi), rng.randint(st_lo, st_hi)
        num_draft_tokens = rng.randint(2, topk * steps + 1)

        # --- scheduler events -------------------------------------------------------
        for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
            if len(pool.live()) >= args.max_live:
                break
            n = prompt_len(rng, page, args.max_prompt)
            try:
                pool.add(n, n + rng.randint(0, args.max_new))
            except MemoryError:
                break
            stats["arrivals"] += 1
            stats["one_token_prompts"] += n == 1
        if pool.live() and rng.random() < 0.05:  # abort mid-way
            pool.finish(rng.choice(pool.live()))
            stats["aborts"] += 1
        if pool.live() and rng.random() < 0.03:  # retract a random subset, re-add same length
            victims = rng.sample(pool.live(), rng.randint(1, len(pool.live())))
            back = [(len(h.requests[r]), pool.target[r]) for r in victims]
            for r in victims:
                pool.finish(r)
            for n, tgt in back:
                pool.add(n, tgt)
            stats["retractions"] += len(victims)
        live = pool.live()
        if not live:
            continue
        bs = rng.randint(1, len(live))
        rows = rng.sample(live, bs)
        # SGLang's check_decode_mem: retract (newest first) until the reservation fits
        while rows and h.allocator.available_size() < reserved_next_decode(page, topk, steps,
                                                                           num_draft_tokens, len(rows)):
            r = rows.pop()
            n, tgt = len(h.requests[r]), pool.target[r]
            pool.finish(r)
            stats["reservation_retractions"] += 1
            try:
                pool.add(n, tgt)  # back in the waiting queue; re-prefilled if it fits
            except MemoryError:
                pass
        if not rows:
            continue

        # --- one draft step -----------------------------------------------------------
        h.topk = h.worker.topk = topk
        h.steps = h.worker.speculative_num_steps = steps
        check = step % args.check_every == 0
        a = h.allocator
        free_before, release_before = a.free_pages.clone(), a.release_pages.clone()
        avail_before = a.available_size()
        r2t = h.req_to_token_pool.req_to_token
        if check:
            r2t_before = r2t.clone()
            kv_before = [b.view(torch.uint8).view(b.shape[0], -1).clone()
                         for b in h.kv_pool.k_buffer + h.kv_pool.v_buffer]
        batch = h.batch(rows)
        draft_preprocess_decode(h.worker, batch, Mode.ON)
        stats["draft_steps"] += 1
        stats["drafted_requests"] += len(rows)
        stats["max_batch"] = max(stats["max_batch"], len(rows))
        lens = [len(h.requests[r]) for r in rows]
        stats["page_multiple_prefixes"] += sum(n % page == 0 for n in lens)
        stats["page_multiple_batches"] += all(n % page == 0 for n in lens)
        stats["dup_pairs"] += sum(n % page for n in lens) * (topk - 1)

        where = f"step {step} (page {page}, topk {topk}, steps {steps}, prefix lens {lens})"
        assert a.available_size() == avail_before, f"{where}: available_size changed"
        assert torch.equal(a.free_pages, free_before), f"{where}: free_pages not restored"
        assert torch.equal(a.release_pages, release_before), f"{where}: release_pages not restored"
        if check:
            stats["checked_steps"] += 1
            prefix_slots = torch.cat([h.requests[r] for r in pool.live()])
            draft_slots = batch.out_cache_loc.cpu()
            assert draft_slots.numel() == len(rows) * topk * steps, where
            assert not bool(torch.isin(draft_slots, prefix_slots).any()), f"{where}: draft slot on a prefix"
            assert not bool((draft_slots == 0).any()), f"{where}: draft slot 0"
            ext = extend_lens(torch.tensor(lens), page, topk, steps).tolist()
            ext_slots = torch.cat([r2t[r, n:n + e].long() for r, n, e in zip(rows, lens, ext)]).cpu()
            for i, b in enumerate(h.kv_pool.k_buffer + h.kv_pool.v_buffer):
                now = b.view(torch.uint8).view(b.shape[0], -1)
                changed = (now != kv_before[i]).any(dim=1).nonzero().flatten().cpu()
                assert not bool((changed == 0).any()), f"{where}: KV slot 0 written (buffer {i})"
                bad = changed[torch.isin(changed, prefix_slots)]
                assert bad.numel() == 0, f"{where}: prefix KV slots {bad.tolist()[:8]} changed (buffer {i})"
                stray = changed[~torch.isin(changed, ext_slots)]
                assert stray.numel() == 0, f"{where}: KV slots {stray.tolist()[:8]} outside the extension changed"
            for r in pool.live():
                n = len(h.requests[r])
                assert torch.equal(r2t[r, :n], r2t_before[r, :n]), f"{where}: prefix of row {r} changed"
            others = [r for r in range(r2t.shape[0]) if r not in rows]
            assert torch.equal(r2t[others], r2t_before[others]), f"{where}: a row outside the batch changed"
            mism = h.mismatched_branches(rows)
            assert not mism, f"{where}: branches without the prefix's last page: {mism[:8]}"

        # --- verify: accept 1..steps+1 tokens, finish the ones that reached their target --
        grow_rows, accepted = [], []
        for r in rows:
            n, tgt = len(h.requests[r]), pool.target[r]
            k = min(rng.randint(1, steps + 1), tgt - n)
            if k > 0:
                grow_rows.append(r)
                accepted.append(k)
        if grow_rows and not pool.grow(grow_rows, accepted):
            for r in grow_rows:  # out of memory for the verify step: retract them
                pool.finish(r)
                stats["reservation_retractions"] += 1
        for r in list(rows):
            if r in pool.target and len(h.requests[r]) >= pool.target[r]:
                pool.finish(r)
                stats["finishes"] += 1

    for pool in pools:
        for r in pool.live():
            pool.finish(r)
        end = pool.free_set()
        assert end == pool.baseline, (
            f"page {pool.page}: {len(pool.baseline) - len(end)} pages leaked "
            f"(free {len(end)} of {len(pool.baseline)} at start)")
        assert pool.h.allocator.available_size() == len(pool.baseline) * pool.page

    summary = dict(ok=True, steps=steps_done, steps_requested=args.steps, seed=args.seed, seconds=round(time.perf_counter() - t0, 1),
                   page_sizes=pages, topk=[tk_lo, tk_hi], num_steps=[st_lo, st_hi],
                   debug_pool=bool(args.debug_pool), device=args.device,
                   debug_mode_active=all(bool(p.h.allocator.debug_mode) for p in pools),
                   free_pages_baseline=[len(p.baseline) for p in pools],
                   free_pages_end=[len(p.free_set()) for p in pools], **stats)
    print(json.dumps(summary))
    return summary


def main(argv=None):
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
