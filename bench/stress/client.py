"""Greedy generation of many prompts, recorded like :mod:`..e2e` records MT-bench runs, and
a streaming request whose client goes away (SGLang aborts it)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping

from sglang_eagle_paged.bench.mtbench import Client, summarize, token_margins

from .. import parity


def _meta_record(out: dict) -> dict:
    meta = out.get("meta_info", {}) if isinstance(out, dict) else {}
    fr = meta.get("finish_reason")
    rec = {
        "prompt_tokens": meta.get("prompt_tokens"),
        "completion_tokens": meta.get("completion_tokens"),
        "spec_verify_ct": meta.get("spec_verify_ct"),
        "finish_reason": fr.get("type") if isinstance(fr, dict) else fr,
        "output": out.get("text", "") if isinstance(out, dict) else "",
        # prefix tokens the server reused, and (HiCache) how many of them it loaded back from host memory
        "cached_tokens": meta.get("cached_tokens"),
        "cached_host_tokens": (meta.get("cached_tokens_details") or {}).get("host"),
    }
    tokens = token_margins(meta)
    if tokens is not None:
        rec["tokens"] = tokens
    return rec


def run_prompts(base_url: str, prompts: Mapping[str, dict], *, parallel: int = 16, max_new_tokens: int = 256,
                top_logprobs: int = 0, ignore_eos: bool = False, timeout: float = 900.0) -> dict:
    """Greedy generation of every prompt, ``parallel`` in flight; a failed request is an error row."""
    client = Client(base_url, max_new_tokens=max_new_tokens, timeout=timeout, ignore_eos=ignore_eos,
                    top_logprobs=top_logprobs)

    def one(key: str, payload: dict) -> dict:
        t0 = time.perf_counter()
        try:
            rec = _meta_record(client.generate(payload))
        except Exception as exc:
            body = getattr(getattr(exc, "response", None), "text", "") or ""
            rec = {"error": f"{type(exc).__name__}: {exc} {body[:300]}".strip()}
        rec["latency_s"] = time.perf_counter() - t0
        rec["key"] = key
        rec["sent_tokens"] = len(payload.get("input_ids") or [])
        return rec

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        records = list(pool.map(lambda kv: one(*kv), list(prompts.items())))
    wall = time.perf_counter() - t0
    out = {
        "summary": summarize(records, wall),
        "outputs": {r["key"]: r.get("output") for r in records},
        "prompt_tokens": {r["key"]: r.get("prompt_tokens") for r in records},
        "sent_tokens": {r["key"]: r["sent_tokens"] for r in records},
        "finish_reasons": {r["key"]: r.get("finish_reason") for r in records},
        "cached_tokens": {r["key"]: r.get("cached_tokens") for r in records},
        "cached_host_tokens": {r["key"]: r.get("cached_host_tokens") for r in records},
        "errors": [f"{r['key']}: {r['error']}" for r in records if r.get("error")][:10],
        # per request, for paired comparisons (bench.parity), as e2e records MT-bench runs
        "spec_counts": parity.spec_counts((r["key"], r) for r in records),
    }
    if top_logprobs:
        out["tokens"] = {r["key"]: r.get("tokens") for r in records}
    return out


def aborting_stream(base_url: str, payload: dict, *, chunks: int, max_new_tokens: int,
                    timeout: float = 120.0) -> dict:
    """Stream a greedy request and close the connection after ``chunks`` data chunks.

    A session of its own: closing a half-read response drops that connection, which is
    what SGLang sees as a client that went away (its stream ends, the request is aborted).
    """
    import requests

    body = {**payload, "stream": True, "sampling_params": {
        "temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True}}
    got, done, error = 0, False, None
    with requests.Session() as s:
        r = s.post(base_url.rstrip("/") + "/generate", json=body, stream=True, timeout=timeout)
        status = r.status_code
        try:
            if status == 200:
                for line in r.iter_lines():
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done = True
                        break
                    try:
                        msg = json.loads(data)
                    except ValueError:
                        msg = {}
                    if isinstance(msg, dict) and msg.get("error"):
                        error = str(msg["error"])[:300]
                        break
                    got += 1
                    if got >= chunks:
                        break
            else:
                error = r.text[:300]
        finally:
            r.close()
    return {"status": status, "chunks": got, "completed": done, "error": error}
