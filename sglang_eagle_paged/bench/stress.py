"""Reliability workloads against a real SGLang server: KV pressure, soak, long contexts, TP.

The client half of ``tests/gpu/test_reliability_gpu.py``; everything here runs on the CPU
against a fake server too (``tests/test_stress_client.py``).

- :class:`TokenSource`: prompts of an exact token length (page multiples, ~8k, 32k) cut
  from MT-bench text, tokenized by the server itself (``/tokenize``) and sent as
  ``input_ids``, so the length the scheduler sees is the length asked for;
- :func:`run_prompts`: greedy generation of many such prompts in parallel, recorded the
  way :mod:`.e2e` records MT-bench runs (``outputs``, ``tokens`` with top-2 margins), so
  :func:`.e2e.agreement` compares them;
- :func:`aborting_stream`: a streaming ``/generate`` whose connection the client closes
  after a few chunks (SGLang aborts a request whose client went away);
- :func:`soak`: seeded random arrivals of normal, 1-token, page-multiple, aborted and
  empty requests, each outcome classified as expected or not;
- :func:`loads`, :func:`wait_idle`, :func:`idle_check`: SGLang's ``/v1/loads`` (tokens
  held, running and waiting requests), ``/flush_cache``, ``/health_generate``;
- :func:`scan_log`: what the server log says about retraction, leaks, crashes and the
  plugin's activation per TP rank;
- :func:`run_group`: start servers together, run one workload on each, record every
  result to JSON as it comes (a re-run resumes).
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .e2e import RunConfig, serve_group, server_args
from .mtbench import Client, summarize, token_margins
from .server import ServerProcess, ServerStartError, mode_env  # noqa: F401  (ServerStartError: re-exported)

# --------------------------------------------------------------------------- tokens and prompts


class ServerTokenizer:
    """The server's own tokenizer through SGLang's ``/tokenize`` endpoint."""

    def __init__(self, base_url: str, timeout: float = 60.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def __call__(self, text: str, add_special_tokens: bool = False) -> list[int]:
        import requests

        r = requests.post(self.base_url + "/tokenize", timeout=self.timeout,
                          json={"prompt": text, "add_special_tokens": add_special_tokens})
        r.raise_for_status()
        return list(r.json()["tokens"])

    def special_prefix(self) -> list[int]:
        """Tokens the tokenizer puts in front of a text (BOS), found by difference."""
        with_special, plain = self(" x", True), self(" x", False)
        if plain and with_special[-len(plain):] == plain:
            return with_special[: len(with_special) - len(plain)]
        return []


def corpus_text(questions: Sequence[dict], rng: random.Random) -> str:
    """Every MT-bench turn once, in a shuffled order: readable text, not noise."""
    turns = [(q["question_id"], q.get("category", ""), t) for q in questions for t in q["turns"]]
    rng.shuffle(turns)
    return "".join(f"Question {qid} ({cat}): {t}\n\n" for qid, cat, t in turns)


class TokenSource:
    """Prompts of exactly ``n`` tokens: BOS then a window of a long MT-bench token stream.

    Windows start at seeded offsets, so prompts share no long prefix and the radix
    cache does not relieve the KV pool under test.
    """

    def __init__(self, tokenize: Callable[..., list[int]], questions: Sequence[dict], *,
                 min_tokens: int, seed: int = 0, prefix: list[int] | None = None):
        if not questions:
            raise ValueError("no questions to build prompts from")
        rng = random.Random(seed)
        self.prefix = list(prefix) if prefix is not None else []
        self.stream: list[int] = []
        while len(self.stream) < min_tokens:
            ids = tokenize(corpus_text(questions, rng), False)
            if not ids:
                raise ValueError("the tokenizer returned no tokens for the corpus")
            self.stream += ids

    @classmethod
    def from_server(cls, base_url: str, questions: Sequence[dict], *, min_tokens: int, seed: int = 0):
        tok = ServerTokenizer(base_url)
        return cls(tok, questions, min_tokens=min_tokens, seed=seed, prefix=tok.special_prefix())

    def window(self, length: int, rng: random.Random) -> list[int]:
        if length <= len(self.prefix):
            raise ValueError(f"prompt length {length} leaves no room after the prefix {self.prefix}")
        body = length - len(self.prefix)
        if body > len(self.stream):
            raise ValueError(f"prompt length {length} exceeds the token stream ({len(self.stream)})")
        start = rng.randrange(len(self.stream))
        doubled = self.stream + self.stream
        return self.prefix + doubled[start:start + body]

    def prompts(self, lengths: Sequence[int], seed: int = 0, tag: str = "p") -> dict[str, dict]:
        """``{"<tag><i>/1": {"input_ids": [...]}}``: keys :func:`.e2e.agreement` understands."""
        rng = random.Random(seed)
        return {f"{tag}{i}/1": {"input_ids": self.window(n, rng)} for i, n in enumerate(lengths)}


def seeded_lengths(n: int, low: int, high: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(n)]


# --------------------------------------------------------------------------- generation


def _meta_record(out: dict) -> dict:
    meta = out.get("meta_info", {}) if isinstance(out, dict) else {}
    fr = meta.get("finish_reason")
    rec = {
        "prompt_tokens": meta.get("prompt_tokens"),
        "completion_tokens": meta.get("completion_tokens"),
        "spec_verify_ct": meta.get("spec_verify_ct"),
        "finish_reason": fr.get("type") if isinstance(fr, dict) else fr,
        "output": out.get("text", "") if isinstance(out, dict) else "",
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
        "errors": [f"{r['key']}: {r['error']}" for r in records if r.get("error")][:10],
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


# --------------------------------------------------------------------------- server state


def loads(base_url: str, timeout: float = 10.0) -> dict:
    """Running/waiting requests and KV tokens held (``/v1/loads``), summed over DP ranks.

    SGLang's ``num_used_tokens`` is the pool minus free minus evictable (radix-cached,
    unreferenced) tokens: at idle, with nothing leaked, it is 0.
    """
    import requests

    r = requests.get(base_url.rstrip("/") + "/v1/loads", params={"include": "core"}, timeout=timeout)
    r.raise_for_status()
    per_rank = r.json().get("loads") or []
    total = lambda k: sum(int(d.get(k) or 0) for d in per_rank)  # noqa: E731
    return {
        "num_running_reqs": total("num_running_reqs"),
        "num_waiting_reqs": total("num_waiting_reqs"),
        "num_used_tokens": total("num_used_tokens"),
        "max_total_num_tokens": total("max_total_num_tokens"),
        "token_usage": max((float(d.get("token_usage") or 0) for d in per_rank), default=0.0),
    }


class LoadPoller:
    """Samples :func:`loads` in the background: the peaks show whether the pool was under pressure."""

    def __init__(self, base_url: str, interval: float = 0.5):
        self.base_url, self.interval = base_url, interval
        self.peak = {"num_running_reqs": 0, "num_waiting_reqs": 0, "num_used_tokens": 0, "token_usage": 0.0}
        self.samples = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                cur = loads(self.base_url)
                for k in self.peak:
                    self.peak[k] = max(self.peak[k], cur[k])
                self.samples += 1
            except Exception:
                self.failures += 1
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)

    def result(self) -> dict:
        return {"peak": dict(self.peak), "samples": self.samples, "failures": self.failures}


def wait_idle(base_url: str, timeout: float = 120.0, interval: float = 0.5) -> float | None:
    """Seconds until no request runs or waits; None if that never happened within ``timeout``."""
    t0 = time.monotonic()
    while True:
        try:
            cur = loads(base_url)
            if cur["num_running_reqs"] == 0 and cur["num_waiting_reqs"] == 0:
                return round(time.monotonic() - t0, 2)
        except Exception:
            pass
        if time.monotonic() - t0 > timeout:
            return None
        time.sleep(interval)


def _status(method: str, url: str, timeout: float = 60.0) -> int | str:
    import requests

    try:
        return requests.request(method, url, timeout=timeout).status_code
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:200]


def idle_check(base_url: str, *, idle_s: float = 10.0, drain_timeout: float = 120.0) -> dict:
    """After a workload: drain, stay idle (SGLang checks its pools on every idle pass), then look.

    Returns the drain time, ``/v1/loads`` after the idle period, ``/flush_cache``'s status
    and the loads after it, and ``/health_generate`` (a real one-token generation).
    """
    base = base_url.rstrip("/")
    out: dict = {"drain_s": wait_idle(base, drain_timeout)}
    time.sleep(idle_s)
    for key, fn in (("loads_idle", lambda: loads(base)),):
        try:
            out[key] = fn()
        except Exception as exc:
            out[key] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    out["flush_cache_status"] = _status("POST", base + "/flush_cache")
    time.sleep(1.0)
    try:
        out["loads_after_flush"] = loads(base)
    except Exception as exc:
        out["loads_after_flush"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    out["health_generate_status"] = _status("GET", base + "/health_generate", timeout=60)
    out["health_status"] = _status("GET", base + "/health")
    return out


# --------------------------------------------------------------------------- soak

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


# --------------------------------------------------------------------------- logs

_RE = {
    "retract": re.compile(r"KV cache pool is full\. Retract requests\."),
    "retracted_reqs": re.compile(r"#retracted_reqs: (\d+)"),
    "leak": re.compile(r"memory leak detected|Mem Leak Detected", re.I),
    "traceback": re.compile(r"Traceback \(most recent call last\)"),
    "cuda_error": re.compile(r"CUDA error|illegal memory access|device-side assert|CUBLAS_STATUS|out of memory", re.I),
    "http_error": re.compile(r"\[http_server\] Error"),
    "plugin_active": re.compile(r"^\[([^\]]*)\] \[sglang-eagle-paged\] active: mode=(\w+)"),
    "plugin_other": re.compile(r"\[sglang-eagle-paged\] (inactive|.*=off: stock)"),
    "tp_rank": re.compile(r"\b(TP\d+)\b"),
}


def scan_log(text: str, examples: int = 3) -> dict:
    """Counts (and first lines) of what matters in a server log."""
    out: dict = {k: 0 for k in ("retract", "leak", "traceback", "cuda_error", "http_error")}
    lines: dict[str, list] = {k: [] for k in out}
    retracted = 0
    active: dict[str, str] = {}
    other_plugin = []
    for line in text.splitlines():
        for k in lines:
            if _RE[k].search(line):
                out[k] += 1
                if len(lines[k]) < examples:
                    lines[k].append(line.strip()[:300])
        m = _RE["retracted_reqs"].search(line)
        if m and _RE["retract"].search(line):
            retracted += int(m.group(1))
        m = _RE["plugin_active"].search(line)
        if m:
            rank = _RE["tp_rank"].search(m.group(1))
            # The launcher process loads plugins too: its line has no rank.
            active[rank.group(1) if rank else "main"] = m.group(2)
        elif _RE["plugin_other"].search(line) and len(other_plugin) < examples:
            other_plugin.append(line.strip()[:300])
    out.update(retracted_reqs=retracted, plugin_active=active, plugin_other=other_plugin, examples=lines)
    return out


def scan_log_file(path) -> dict:
    try:
        return scan_log(Path(path).read_text(errors="replace"))
    except OSError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


# --------------------------------------------------------------------------- models


def long_context_copy(src: str | Path, dst: str | Path, max_position_embeddings: int) -> Path:
    """A model folder like ``src`` whose config allows ``max_position_embeddings`` positions.

    For ``--load-format dummy`` (only config.json and the tokenizer are read). SGLang
    accepts ``--context-length`` beyond the config only with
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, and even then it leaves the target's
    ``max_position_embeddings`` (and so the rope cos/sin cache) at the config's length:
    positions past it would read past that cache. A config that says the longer length
    is the clean way. Other files are symlinked.
    """
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        target = dst / f.name
        if f.name == "config.json" or target.exists() or target.is_symlink():
            continue
        target.symlink_to(f.resolve())
    cfg = json.loads((src / "config.json").read_text())
    cfg["max_position_embeddings"] = max_position_embeddings
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst


# --------------------------------------------------------------------------- servers


@dataclass
class ServerSpec:
    """One server of a reliability run; every launch argument is explicit here or in ``cfg``."""

    cfg: RunConfig
    target: str
    draft: str
    port: int
    max_total_tokens: int
    mem_fraction: float = 0.5
    load_format: str | None = None
    env: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.cfg.name

    def args(self) -> list:
        return server_args(self.cfg, self.target, self.draft, self.port, self.max_total_tokens,
                           self.mem_fraction, self.load_format)


def _write(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(path)


def run_group(specs: Sequence[ServerSpec], workloads: Mapping[str, Callable[[str], dict]], *, out_json: str,
              log_dir: str, startup_timeout: float = 600.0, launcher: Callable[..., ServerProcess] = None) -> dict:
    """Start ``specs`` together, then run each one's workload alone on the GPU.

    ``workloads[name](base_url)`` returns what to record. Every record gets the server
    arguments, the start-up time and :func:`scan_log` of the server's log; results are
    merged into ``out_json`` as they come, and names recorded without error are skipped.
    """
    launcher = launcher or ServerProcess
    out_path = Path(out_json)
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    todo = [s for s in specs if not (s.name in results and not results[s.name].get("error"))]
    launched = []
    for spec in todo:
        args = spec.args()
        if len(todo) > 1:
            args.append("--sleep-on-idle")  # idle servers must not spin while another is measured
        env = mode_env(spec.cfg.mode)
        env["TRITON_CACHE_DIR"] = str(Path(log_dir) / "triton_cache" / spec.name)
        env.update(spec.env)
        log_path = Path(log_dir) / f"{spec.name}.log"
        server = launcher(args, port=spec.port, env=env, log_path=str(log_path), startup_timeout=startup_timeout)
        launched.append((spec.name, server, {"config": asdict(spec.cfg), "server_args": args,
                                             "env": dict(spec.env), "log": str(log_path)}))

    def measure(name, server, record):
        record.update(workloads[name](server.base_url))

    def done(name, record):
        record["log_scan"] = scan_log_file(record["log"])
        results[name] = record
        _write(out_path, results)
        s = record.get("summary") or {}
        print(f"[reliability] {name}: acc={s.get('acceptance_length')} tok/s={s.get('output_throughput')} "
              f"err={str(record.get('error', ''))[:200]}", flush=True)

    try:
        serve_group(launched, measure, done)
    finally:
        for name, _, record in launched:
            if name not in results:
                record.setdefault("error", "interrupted before its workload ran")
                record["log_scan"] = scan_log_file(record["log"])
                results[name] = record
        _write(out_path, results)
    return results
