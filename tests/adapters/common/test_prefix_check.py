"""The debug prefix check (``SGLANG_EAGLE_PAGED_CHECK_PREFIX=1``) on SGLang's real pools.

Its hooks are called here as SGLang's HookRegistry calls an AROUND hook, around stand-ins
for ``EAGLEWorker.draft`` / ``.verify``: our real draft preprocess (which duplicates pages),
writes to draft slots, a verify-like extension, and deliberate corruptions of the prefix.
Registration itself (only with the variable set) is tested in tests/adapters/v1/test_plugin_hooks.py.
"""

import logging
import os
import time
from types import SimpleNamespace

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from sglang_eagle_paged.adapters.common import prefix_check as pc  # noqa: E402
from sglang_eagle_paged.adapters.v1 import sglang_api as compat  # noqa: E402
from bench.stress import scan_log  # noqa: E402
from sglang_eagle_paged.tools.harness import PagedTreeHarness  # noqa: E402
from sglang_eagle_paged.settings import Mode  # noqa: E402
from sglang_eagle_paged.adapters.v1.draft_preprocess import draft_preprocess_decode  # noqa: E402

LENS = (5, 8, 13, 1)  # partial last pages, an exact page multiple, a 1-token prompt (page 4)
LAYERS = 2


def byte_rows(buf):
    return buf.view(torch.uint8).view(buf.shape[0], -1)


def all_bytes(pool):
    return [byte_rows(b) for b in pool.k_buffer + pool.v_buffer]


@pytest.fixture
def h():
    """Harness with its own target pool (the harness shares one), every byte of it random."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    pc.reset()
    h = PagedTreeHarness(4, 3, 2, layer_num=LAYERS, num_tokens=2048, max_context_len=256)
    h.target = MHATokenToKVPool(2048, 4, torch.bfloat16, 2, 8, LAYERS, "cpu", False)
    gen = torch.Generator().manual_seed(1)
    for b in all_bytes(h.target):
        b.copy_(torch.randint(0, 256, b.shape, generator=gen, dtype=torch.uint8))
    h.worker.target_worker = SimpleNamespace(model_runner=SimpleNamespace(token_to_kv_pool=h.target))
    h.rows = [h.add_request(n) for n in LENS]
    h.pools = {"draft": h.kv_pool, "target": h.target}
    yield h
    pc.reset()


def errors(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]


def run(h, fn, step="draft", batch=None):
    calls = []

    def original(worker, batch):
        calls.append(1)
        fn(worker, batch)
        return "result"

    out = pc._hook(step, compat.worker_kv_pools)(original, h.worker, batch if batch is not None else h.batch(h.rows))
    assert out == "result" and calls == [1]


# --- what a correct step may do -----------------------------------------------------------------

def test_draft_step_writing_only_draft_slots_passes(h, caplog):
    """Our real draft preprocess (page duplication) then draft KV written to every draft slot of
    both pools: no violation, though the step changed KV bytes."""
    before = [b.clone() for b in all_bytes(h.kv_pool)]

    def draft(worker, batch):
        draft_preprocess_decode(worker, batch, Mode.ON)
        for pool in h.pools.values():
            for b in all_bytes(pool):
                slots = batch.out_cache_loc
                b[slots] = torch.randint(0, 256, (len(slots), b.shape[1]), dtype=torch.uint8)

    run(h, draft)
    assert not h.mismatched_branches(h.rows)  # the duplication happened
    assert any(not torch.equal(a, b) for a, b in zip(before, all_bytes(h.kv_pool)))
    assert pc.counters == {"steps": 1, "requests": len(LENS), "violations": 0, "skipped": 0, "errors": 0}
    assert not errors(caplog)


def test_verify_step_checks_the_prefix_it_started_with(h):
    """A verify extends req_to_token and seq_lens in place: only the old prefix is checked."""
    def verify(worker, batch):
        for i, row in enumerate(batch.req_pool_indices.tolist()):
            n = int(batch.seq_lens_cpu[i])
            slots = h.allocator.alloc(4)
            h.req_to_token_pool.req_to_token[row, n:n + 4] = slots.to(torch.int32)
            for b in all_bytes(h.target):
                b[slots] = 0xAB
        batch.seq_lens.add_(4)
        batch.seq_lens_cpu.add_(4)

    run(h, verify, step="verify")
    assert pc.counters["violations"] == 0 and pc.counters["requests"] == len(LENS)


# --- what it must catch -------------------------------------------------------------------------

@pytest.mark.parametrize("pool", ["draft", "target"])
@pytest.mark.parametrize("kv", ["k_buffer", "v_buffer"])
def test_one_flipped_prefix_byte_is_one_violation(h, caplog, pool, kv):
    req, pos, layer, byte = 2, 6, 1, 17  # request 2 (13 tokens): a slot inside a full page
    slot = int(h.requests[h.rows[req]][pos])

    def flip(worker, batch):
        byte_rows(getattr(h.pools[pool], kv)[layer])[slot, byte] ^= 0x10

    run(h, flip)
    assert pc.counters["violations"] == 1 and pc.counters["steps"] == 1
    [msg] = errors(caplog)
    assert msg.startswith("[sglang-eagle-paged] [fault] prefix integrity violated: ")
    assert f"{pool} pool, draft step, 1 of {len(LENS)} requests (row {h.rows[req]}: 1 of 13 slots)" in msg
    assert f"1 of {2 * LAYERS} K/V buffers changed ({kv[0].upper()}{layer})" in msg


def test_every_single_byte_change_is_seen(h):
    """Exact, not probable: each byte of a row, each bit, and random values; and rows whose
    length is no multiple of 8 bytes (hashed byte by byte)."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    odd = MHATokenToKVPool(64, 4, torch.bfloat16, 1, 3, 1, "cpu", False)  # 6-byte rows
    byte_rows(odd.k_buffer[0]).copy_(torch.randint(0, 256, byte_rows(odd.k_buffer[0]).shape, dtype=torch.uint8))
    gen = torch.Generator().manual_seed(0)
    for pool, slots in ((h.target, h.requests[h.rows[2]]), (odd, torch.arange(4, 20))):
        slots = slots.to(torch.int64)
        rows = byte_rows(pool.k_buffer[0])
        base = pc.fingerprint(pool, slots)
        slot = int(slots[3])
        for j in range(rows.shape[1]):
            for x in [1 << bit for bit in range(8)] + torch.randint(1, 256, (4,), generator=gen).tolist():
                rows[slot, j] ^= x
                now = pc.fingerprint(pool, slots)
                rows[slot, j] ^= x
                changed = (now.slots != base.slots).nonzero().flatten().tolist()
                assert changed == [3] and int((now.layers != base.layers).sum()) == 1, (j, x)
        assert torch.equal(pc.fingerprint(pool, slots).slots, base.slots)


def test_swapped_rows_are_seen(h, caplog):
    """Swaps keep every byte sum: within a request, across requests, and across layers."""
    a, b = h.requests[h.rows[2]][[1, 9]].tolist()
    c = int(h.requests[h.rows[1]][0])
    v0 = byte_rows(h.target.v_buffer[0])
    sums = v0.sum(dtype=torch.int64)

    def swap(x, y, rows_x=v0, rows_y=v0):
        def fn(worker, batch):
            tmp = rows_x[x].clone()
            rows_x[x] = rows_y[y]
            rows_y[y] = tmp
        return fn

    run(h, swap(a, b))
    assert v0.sum(dtype=torch.int64) == sums and pc.counters["violations"] == 1
    assert f"(row {h.rows[2]}: 2 of 13 slots); 1 of 4 K/V buffers changed (V0)" in errors(caplog)[-1]
    run(h, swap(a, c))
    assert pc.counters["violations"] == 3  # one per request
    run(h, swap(a, a, byte_rows(h.target.k_buffer[0]), byte_rows(h.target.k_buffer[1])))
    assert pc.counters["violations"] == 4 and "2 of 4 K/V buffers changed (K0 K1)" in errors(caplog)[-1]


# --- what it skips, and never doing harm ------------------------------------------------------------

def test_idle_and_empty_batches_are_skipped(h, caplog):
    slot = int(h.requests[h.rows[0]][0])

    def flip(worker, batch):
        byte_rows(h.kv_pool.k_buffer[0])[slot, 0] ^= 1

    idle = h.batch(h.rows)
    idle.forward_mode = SimpleNamespace(is_idle=lambda: True)
    run(h, flip, batch=idle)
    run(h, flip, batch=h.batch([]))
    decode = h.batch(h.rows)
    decode.forward_mode = SimpleNamespace(is_idle=lambda: False)
    run(h, lambda w, b: None, batch=decode)
    assert pc.counters == {"steps": 1, "requests": len(LENS), "violations": 0, "skipped": 2, "errors": 0}
    assert not errors(caplog)


def test_a_failing_check_never_raises(h, caplog):
    h.worker.target_worker = None  # the pools cannot be found: the step runs unchecked
    run(h, lambda w, b: None)
    run(h, lambda w, b: None)
    assert pc.counters["errors"] == 2 and pc.counters["steps"] == 0
    assert sum("prefix check failed" in r.getMessage() for r in caplog.records) == 1  # warned once


def test_other_pool_types_are_skipped_with_one_warning(h, caplog):
    h.worker.target_worker = SimpleNamespace(model_runner=SimpleNamespace(token_to_kv_pool=SimpleNamespace()))
    slot = int(h.requests[h.rows[0]][0])

    def flip(worker, batch):
        byte_rows(h.kv_pool.k_buffer[0])[slot, 0] ^= 1

    run(h, flip)
    run(h, lambda w, b: None)
    warned = [r.getMessage() for r in caplog.records if "skips the target pool" in r.getMessage()]
    assert len(warned) == 1 and "SimpleNamespace" in warned[0]
    assert pc.counters["violations"] == 1 and pc.counters["steps"] == 2  # the draft pool still checked


# --- the log lines, as the GPU suite reads them -----------------------------------------------------

def server_log(caplog, prefix):
    return "".join(f"[2026-12-01 10:00:00{prefix}] {r.getMessage()}\n" for r in caplog.records)


def test_log_lines_and_scan_log(h, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="sglang_eagle_paged")
    run(h, lambda w, b: None)  # the first draft check reports at once
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == [f"[sglang-eagle-paged] prefix check: 1 steps, {len(LENS)} request-checks, 0 violations"]

    # then every LOG_EVERY_STEPS steps (draft or verify), or from a draft step 30 s after the last line
    monkeypatch.setattr(pc, "LOG_EVERY_STEPS", 4)
    run(h, lambda w, b: None, step="verify")
    run(h, lambda w, b: None)
    assert len(caplog.records) == 1
    slot = int(h.requests[h.rows[3]][0])

    def flip(worker, batch):
        byte_rows(h.target.v_buffer[1])[slot, 0] ^= 1

    run(h, flip, step="verify")
    assert caplog.records[-1].getMessage() == (
        f"[sglang-eagle-paged] prefix check: 4 steps, {4 * len(LENS)} request-checks, 1 violations")
    pc._state["last_log"] = time.monotonic() - pc.LOG_EVERY_S
    run(h, lambda w, b: None, step="verify")
    assert caplog.records[-1].levelno == logging.INFO and "4 steps" in caplog.records[-1].getMessage()
    run(h, lambda w, b: None)
    assert "6 steps" in caplog.records[-1].getMessage()

    scan = scan_log(server_log(caplog, " TP1") + server_log(caplog, ""))
    last = {"steps": 6, "requests": 6 * len(LENS), "violations": 1}
    assert scan["prefix_checks"] == {"TP1": last, "main": last}
    assert scan["prefix_violations"] == 2 and "target pool, verify step" in scan["examples"]["prefix_violation"][0]
    assert scan["traceback"] == 0 and scan["plugin_active"] == {}


def test_scan_log_without_prefix_check_lines():
    scan = scan_log("[2026-12-01 10:00:00 TP0] [sglang-eagle-paged] active: mode=on, tree drafting=ours\n")
    assert scan["prefix_checks"] == {} and scan["prefix_violations"] == 0
    assert scan["plugin_active"] == {"TP0": "on"}
