"""Debug check on a live server: a draft or verify step leaves every prefix's KV byte-identical.

Off unless ``SGLANG_EAGLE_PAGED_CHECK_PREFIX=1`` (:mod:`sglang_eagle_paged.settings`): each checked step reads every prefix KV row of
the batch twice in both pools and syncs once, far more than the step itself at long contexts.

Around ``EAGLEWorker.draft`` and ``.verify``: on entry, each pool's prefix rows
(``req_to_token[req_pool_indices[i], :seq_lens[i]]``, the slot list kept as it was then) are
hashed; on exit, hashed again and compared. A mismatch is logged as an ERROR and counted, never
raised: the check must not take a server down. Idle and empty batches are skipped, and so is a
pool that is not an ``MHATokenToKVPool`` (warned once).

``counters``: ``steps`` checked draft or verify calls, ``requests`` prefixes checked over them,
``violations`` (request, pool, step) triples whose prefix changed. Each process (TP rank) logs
them at INFO every ``LOG_EVERY_STEPS`` steps, and from a draft step at most every ``LOG_EVERY_S``.
"""

import logging
import time
import zlib
from dataclasses import dataclass

import torch

from ...hooks import Hook
from .kv_copy import mha_pool_class

LOG_EVERY_STEPS = 200
LOG_EVERY_S = 30.0
# Bounds the rows gathered at once: 16 requests x 32k tokens of one 8B layer would be 1 GiB.
CHUNK_BYTES = 64 << 20

logger = logging.getLogger("sglang_eagle_paged")

counters = {"steps": 0, "requests": 0, "violations": 0, "skipped": 0, "errors": 0}
_state = {"last_log": float("-inf"), "warned": set(), "weights": {}}


def hooks(draft_step: str, verify_step: str, pools_of) -> list:
    """AROUND hooks for a worker's whole draft and verify steps; ``pools_of(worker)`` gives the
    worker's KV pools by part (each generation's workers hold them differently)."""
    return [Hook(draft_step, _hook("draft", pools_of), "around"), Hook(verify_step, _hook("verify", pools_of), "around")]


def reset() -> None:
    counters.update(dict.fromkeys(counters, 0))
    _state.update(last_log=float("-inf"), warned=set())


# --- fingerprints -----------------------------------------------------------------------------

def _odd_weights(key, n: int, device) -> torch.Tensor:
    # Odd multipliers keep every change visible mod 2**64: a changed byte shifts a word by
    # d * 2**(8k) with 0 < |d| < 256, k < 8, so its product with an odd weight is never 0.
    have = _state["weights"].get((key, str(device)))
    if have is None or len(have) < n:
        gen = torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))
        have = (torch.randint(-(2**63), 2**63 - 1, (max(n, 1024),), generator=gen, dtype=torch.int64) | 1)
        have = have.to(device)
        _state["weights"][(key, str(device))] = have
    return have[:n]


def _words(buf: torch.Tensor) -> torch.Tensor:
    """One row per slot, as int64 words where the row's bytes allow it (else bytes)."""
    rows = buf.view(torch.uint8).reshape(buf.shape[0], -1)
    return rows.view(torch.int64) if rows.shape[1] % 8 == 0 else rows


@dataclass
class _Print:
    slots: torch.Tensor  # int64, per slot of the batch's prefixes (order: request by request)
    layers: torch.Tensor  # int64, per K/V buffer: position-weighted sum over all slots


def fingerprint(pool, slots: torch.Tensor) -> _Print:
    """Per-slot hashes over all K/V buffers, and per-buffer hashes over all slots.

    The per-slot hash finds changed rows (a swap changes both slots); the per-buffer hash is
    weighted by position so that it counts changed layers, swaps included, where a plain sum
    would not see a swap at all.
    """
    bufs = list(pool.k_buffer) + list(pool.v_buffer)
    n, device = len(slots), slots.device
    per_slot = torch.zeros(n, dtype=torch.int64, device=device)
    per_buf = torch.zeros(len(bufs), dtype=torch.int64, device=device)
    position = _odd_weights("position", n, device)
    mix = _odd_weights("buffer", len(bufs), device)
    for i, buf in enumerate(bufs):
        words = _words(buf)
        column = _odd_weights(("column", words.shape[1]), words.shape[1], device)
        step = max(1, CHUNK_BYTES // (8 * words.shape[1]))
        for a in range(0, n, step):
            rows = words[slots[a:a + step]].to(torch.int64)  # a copy (gather), so in place is fine
            h = rows.mul_(column).sum(1)
            per_slot[a:a + step] += h * mix[i]
            per_buf[i] += (h * position[a:a + step]).sum()
    return _Print(per_slot, per_buf)


# --- the hooks --------------------------------------------------------------------------------

@dataclass
class _Entry:
    rows: torch.Tensor  # req_pool_indices on entry
    slots: torch.Tensor
    bounds: torch.Tensor  # cumulative prefix lengths, with a leading 0
    pools: dict  # name -> (pool, _Print)


def _pools(worker, pools_of) -> dict:
    mha = mha_pool_class()
    out = {}
    for name, pool in pools_of(worker).items():
        if any(pool is p for p in out.values()):
            continue  # one pool for both parts (tests): check it once
        if not isinstance(pool, mha):
            if name not in _state["warned"]:
                _state["warned"].add(name)
                logger.warning("[sglang-eagle-paged] prefix check skips the %s pool: %s is not an MHATokenToKVPool",
                               name, type(pool).__name__)
            continue
        out[name] = pool
    return out


def _enter(worker, batch, pools_of):
    mode = getattr(batch, "forward_mode", None)
    if (mode is not None and mode.is_idle()) or batch.req_pool_indices.numel() == 0:
        counters["skipped"] += 1
        return None
    if batch.seq_lens.is_cuda and torch.cuda.is_current_stream_capturing():
        return None
    lens_cpu = getattr(batch, "seq_lens_cpu", None)
    lens_cpu = (lens_cpu if lens_cpu is not None else batch.seq_lens.cpu()).to(torch.int64)
    total = int(lens_cpu.sum())
    pools = _pools(worker, pools_of)
    if total == 0 or not pools:
        counters["skipped"] += 1
        return None
    device = batch.seq_lens.device
    lens = lens_cpu.to(device)
    bounds = torch.cat([torch.zeros(1, dtype=torch.int64), lens_cpu.cumsum(0)]).to(device)
    # Built from lengths known on the host: no sync to learn the slot count.
    position = torch.arange(total, device=device) - torch.repeat_interleave(bounds[:-1], lens, output_size=total)
    rows = batch.req_pool_indices.clone()
    owner = torch.repeat_interleave(rows, lens, output_size=total)
    slots = batch.req_to_token_pool.req_to_token[owner, position].to(torch.int64)
    return _Entry(rows, slots, bounds, {name: (pool, fingerprint(pool, slots)) for name, pool in pools.items()})


def _leave(entry: _Entry, step: str) -> None:
    results = []
    for pool, before in entry.pools.values():
        after = fingerprint(pool, entry.slots)
        changed = torch.cat([torch.zeros(1, dtype=torch.int64, device=entry.slots.device),
                             (after.slots != before.slots).to(torch.int64).cumsum(0)])
        per_request = changed[entry.bounds[1:]] - changed[entry.bounds[:-1]]
        results += [per_request, (after.layers != before.layers).to(torch.int64)]
    results = torch.cat(results).cpu()  # the check's one sync
    bs, n_prefix = len(entry.rows), entry.bounds[1:] - entry.bounds[:-1]
    counters["steps"] += 1
    counters["requests"] += bs
    offset = 0
    for name, (pool, _) in entry.pools.items():
        per_request = results[offset:offset + bs]
        n_layers = len(pool.k_buffer)
        layers = results[offset + bs:offset + bs + 2 * n_layers]
        offset += bs + 2 * n_layers
        bad = per_request.nonzero().flatten().tolist()
        if not bad and not layers.any():
            continue
        counters["violations"] += max(len(bad), 1)
        rows, lens = entry.rows.cpu(), n_prefix.cpu()
        detail = ", ".join(f"row {int(rows[i])}: {int(per_request[i])} of {int(lens[i])} slots" for i in bad[:8])
        changed = layers.nonzero().flatten()
        logger.error(
            "[sglang-eagle-paged] prefix integrity violated: %s pool, %s step, %d of %d requests (%s%s); "
            "%d of %d K/V buffers changed (%s)", name, step, len(bad), bs, detail,
            f", +{len(bad) - 8} more" if len(bad) > 8 else "", int(layers.sum()), len(layers),
            " ".join(f"{'KV'[int(i) // n_layers]}{int(i) % n_layers}" for i in changed[:16]))
    now = time.monotonic()
    if counters["steps"] % LOG_EVERY_STEPS == 0 or (step == "draft" and now - _state["last_log"] >= LOG_EVERY_S):
        _state["last_log"] = now
        logger.info("[sglang-eagle-paged] prefix check: %d steps, %d request-checks, %d violations",
                    counters["steps"], counters["requests"], counters["violations"])


def _guarded(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # a debug aid must never crash a server
        counters["errors"] += 1
        if type(exc) not in _state["warned"]:
            _state["warned"].add(type(exc))
            logger.warning("[sglang-eagle-paged] prefix check failed (step not checked): %r", exc, exc_info=True)
        return None


def _hook(step: str, pools_of):
    def hook(original, worker, batch, *args, **kwargs):
        entry = _guarded(_enter, worker, batch, pools_of)
        result = original(worker, batch, *args, **kwargs)
        if entry is not None:
            _guarded(_leave, entry, step)
        return result

    hook.__name__ = hook.__qualname__ = f"prefix_check_{step}_hook"
    return hook
