"""Seeded random traffic of every request kind, each outcome classified as expected or not."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from sglang_eagle_paged.bench.mtbench import Client
from .client import _meta_record, aborting_stream
from .prompts import TokenSource


SOAK_KINDS = ("full", "one", "page", "abort", "empty_ids", "empty_text")


@dataclass
class SoakConfig:
    duration_s: float = 150.0
    max_requests: int | None = None      # a bound on top of the duration (CPU tests use it)
    seed: int = 0
    workers: int = 12
    page_size: int = 128
    mean_gap_s: float = 0.3              # per worker: exponential gaps, i.e. random arrivals
    max_prompt: int = 2000
    max_new: int = 300
    abort_max_new: int = 2000            # long enough that a missed abort keeps the server busy
    abort_chunks: tuple = (1, 6)
    max_pages: int = 8
    weights: dict = field(default_factory=lambda: {
        "full": 5, "one": 2, "page": 3, "abort": 3, "empty_ids": 1, "empty_text": 1})


def _soak_request(base_url: str, client: Client, source: TokenSource, cfg: SoakConfig, kind: str,
                  rng: random.Random) -> tuple[str | None, dict]:
    """One request of ``kind``; returns (why it is unexpected or None, details)."""
    import requests

    if kind == "abort":
        ids = source.window(rng.randint(len(source.prefix) + 1, cfg.max_prompt), rng)
        res = aborting_stream(base_url, {"input_ids": ids}, chunks=rng.randint(*cfg.abort_chunks),
                              max_new_tokens=cfg.abort_max_new)
        if res["status"] != 200 or res["error"]:
            return f"abort: status {res['status']} error {res['error']}", res
        return None, res
    if kind in ("empty_ids", "empty_text"):
        body = {"input_ids": []} if kind == "empty_ids" else {"text": ""}
        body["sampling_params"] = {"temperature": 0.0, "max_new_tokens": 8}
        try:
            r = requests.post(base_url.rstrip("/") + "/generate", json=body, timeout=120)
        except Exception as exc:
            return f"{kind}: {type(exc).__name__}: {exc}"[:300], {}
        ok = 400 <= r.status_code < 500 if kind == "empty_ids" else (r.status_code == 200 or 400 <= r.status_code < 500)
        info = {"status": r.status_code, "body": r.text[:200]}
        return (None if ok else f"{kind}: status {r.status_code} {r.text[:200]}"), info
    if kind == "page":
        n = cfg.page_size * rng.randint(1, cfg.max_pages)
    elif kind == "one":
        n = rng.randint(len(source.prefix) + 1, cfg.max_prompt)
    else:
        n = rng.randint(len(source.prefix) + 1, cfg.max_prompt)
    ids = source.window(n, rng)
    client.max_new_tokens = 1 if kind == "one" else rng.randint(1, cfg.max_new)
    try:
        rec = _meta_record(client.generate({"input_ids": ids}))
    except Exception as exc:
        body = getattr(getattr(exc, "response", None), "text", "") or ""
        return f"{kind}: {type(exc).__name__}: {exc} {body[:200]}"[:300], {}
    if rec["prompt_tokens"] is not None and rec["prompt_tokens"] != n:
        return f"{kind}: sent {n} tokens, server counted {rec['prompt_tokens']}", rec
    if kind == "one" and rec["completion_tokens"] != 1:
        return f"one: max_new_tokens 1 gave {rec['completion_tokens']} tokens", rec
    return None, {"prompt_tokens": n, "completion_tokens": rec["completion_tokens"]}


def soak(base_url: str, source: TokenSource, cfg: SoakConfig) -> dict:
    """Seeded random traffic from ``cfg.workers`` threads for ``cfg.duration_s``.

    Each worker draws its own sequence of request kinds from ``Random(seed, worker)``;
    which request runs alongside which depends on timing, the sequences do not.
    """
    kinds = [k for k in SOAK_KINDS if cfg.weights.get(k)]
    weights = [cfg.weights[k] for k in kinds]
    deadline = time.monotonic() + cfg.duration_s
    lock = threading.Lock()
    counts = {k: 0 for k in kinds}
    statuses: dict[str, dict] = {k: {} for k in ("empty_ids", "empty_text")}
    abort_chunks: list[int] = []
    unexpected: list[str] = []
    issued = [0]

    def take() -> bool:
        with lock:
            if cfg.max_requests is not None and issued[0] >= cfg.max_requests:
                return False
            issued[0] += 1
            return True

    def worker(w: int):
        rng = random.Random(f"{cfg.seed}/{w}")
        client = Client(base_url, max_new_tokens=cfg.max_new, timeout=600)
        while time.monotonic() < deadline and take():
            time.sleep(rng.expovariate(1.0 / cfg.mean_gap_s) if cfg.mean_gap_s > 0 else 0)
            kind = rng.choices(kinds, weights)[0]
            try:
                why, info = _soak_request(base_url, client, source, cfg, kind, rng)
            except Exception as exc:  # a bug of the driver is an unexpected outcome too
                why, info = f"{kind}: driver {type(exc).__name__}: {exc}"[:300], {}
            with lock:
                counts[kind] += 1
                if kind in statuses and "status" in info:
                    key = str(info["status"])
                    statuses[kind][key] = statuses[kind].get(key, 0) + 1
                if kind == "abort" and "chunks" in info:
                    abort_chunks.append(info["chunks"])
                if why:
                    unexpected.append(why)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, cfg.workers)) as pool:
        list(pool.map(worker, range(max(1, cfg.workers))))
    return {
        "config": asdict(cfg),
        "wall_s": round(time.perf_counter() - t0, 1),
        "requests": sum(counts.values()),
        "counts": counts,
        "empty_statuses": statuses,
        "aborts_cut_short": sum(1 for c in abort_chunks if c > 0),
        "unexpected_count": len(unexpected),
        "unexpected": unexpected[:20],
    }
