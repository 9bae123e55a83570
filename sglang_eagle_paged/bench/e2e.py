"""End-to-end runs on real servers: one server per configuration, the same workload each.

Each run records acceptance, throughput and every greedy output, so that the GPU
suite can compare configurations (speculative vs not, page N vs page 1, on vs
fake vs SGLang's built-in) on identical prompts. Results are appended to a JSON
file as they come, so a later failure loses nothing already measured.
"""

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .mtbench import load_questions, run_benchmark
from .server import ServerProcess, ServerStartError, eagle_server_args, mode_env


@dataclass
class RunConfig:
    name: str
    mode: str = "on"                 # on | off | fake (SGLANG_EAGLE_PAGED)
    page_size: int = 1
    topk: int = 8
    steps: int = 5
    num_draft_tokens: int = 64
    backend: str = "fa3"
    algorithm: str | None = "EAGLE"  # None: no speculation
    cuda_graph: bool = True
    draft: str = "draft"             # "draft" (EAGLE head) or "target" (self-draft)
    extra: list = field(default_factory=list)


def server_args(cfg: RunConfig, target: str, draft: str, port: int, max_total_tokens: int,
                mem_fraction: float, load_format: str | None = None) -> list:
    # Piecewise CUDA graphs (prefill only) are off: their warm-up hit an illegal memory
    # access on the testbed model whose rope cache was shorter than the 8192-token warm-up
    # (measured 2026-11-30; the testbed now has 16384 positions, not re-verified yet).
    common = ["--grammar-backend", "none", "--sampling-backend", "pytorch", "--log-level", "warning",
              "--cuda-graph-max-bs", "32", "--disable-piecewise-cuda-graph"]
    if not cfg.cuda_graph:
        common.append("--disable-cuda-graph")
    if cfg.algorithm is None:
        args = ["--model-path", target, "--page-size", str(cfg.page_size), "--attention-backend", cfg.backend,
                "--host", "127.0.0.1", "--port", str(port), "--max-total-tokens", str(max_total_tokens),
                "--mem-fraction-static", str(mem_fraction)]
        if load_format:
            args += ["--load-format", load_format]
        return args + common + cfg.extra
    return eagle_server_args(
        model_path=target, draft_model_path=target if cfg.draft == "target" else draft,
        host="127.0.0.1", port=port, page_size=cfg.page_size, topk=cfg.topk, steps=cfg.steps,
        num_draft_tokens=cfg.num_draft_tokens, attention_backend=cfg.backend, algorithm=cfg.algorithm,
        load_format=load_format, max_total_tokens=max_total_tokens, mem_fraction_static=mem_fraction,
        extra=common + cfg.extra,
    )


# Kernels whose compiled variants the suite counts: ours, and SGLang's built-in ones
# that take the copy length or batch size as a constexpr.
COUNTED_KERNELS = ("_assign_tree_draft_slots_kernel", "_duplicate_kv_kernel",
                   "assign_draft_cache_locs", "copy_all_layer_kv_cache_tiled")


def triton_variants(cache_dir) -> dict:
    """Compiled variants per kernel in a Triton cache dir (one ``<name>.json`` per variant)."""
    counts = {name: 0 for name in COUNTED_KERNELS}
    for meta in Path(cache_dir).glob("*/*.json"):
        if meta.stem in counts:
            counts[meta.stem] += 1
    return counts


def run_configs(configs, *, target: str, draft: str, out_json: str, log_dir: str, num_questions: int = 80,
                parallel: int = 16, max_new_tokens: int = 256, max_total_tokens: int = 131072,
                mem_fraction: float = 0.5, load_format: str | None = None, startup_timeout: float = 600,
                question_file: str | None = None, warmup: int = 16) -> dict:
    all_questions = load_questions(question_file, None)
    questions = all_questions[:num_questions]
    warmup_questions = all_questions[-warmup:] if warmup else []
    out_path = Path(out_json)
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    for i, cfg in enumerate(configs):
        if cfg.name in results and not results[cfg.name].get("error"):
            continue  # measured already (a resumed suite)
        # SGLang derives further ports from this one (gRPC adds 10000): stay low.
        port = 30000 + 20 * i
        args = server_args(cfg, target, draft, port, max_total_tokens, mem_fraction, load_format)
        record = {"config": asdict(cfg), "server_args": args}
        t0 = time.time()
        # A fresh Triton cache per server, so compiled variants can be counted.
        cache_dir = Path(log_dir) / "triton_cache" / cfg.name
        env = mode_env(cfg.mode)
        env["TRITON_CACHE_DIR"] = str(cache_dir)
        try:
            with ServerProcess(args, port=port, env=env, log_path=f"{log_dir}/{cfg.name}.log",
                               startup_timeout=startup_timeout) as server:
                record["startup_s"] = round(time.time() - t0, 1)
                # A first pass over other prompts: JIT compiles of SGLang's per-batch-size
                # kernels (and any of ours) belong to warm-up, not to the measurement.
                if warmup_questions:
                    run_benchmark(server.base_url, warmup_questions, parallel=parallel,
                                  max_new_tokens=max_new_tokens, progress=False)
                record["triton_variants_after_warmup"] = triton_variants(cache_dir)
                bench = run_benchmark(server.base_url, questions, parallel=parallel,
                                      max_new_tokens=max_new_tokens, progress=False)
                record["summary"] = bench["summary"]
                record["server"] = bench["server"]
                record["outputs"] = {f"{r['question_id']}/{r['turn']}": r.get("output") for r in bench["requests"]}
                record["errors"] = [r["error"] for r in bench["requests"] if r.get("error")][:5]
                record["triton_variants_after_run"] = triton_variants(cache_dir)
        except ServerStartError as exc:
            record["error"] = str(exc)
            record["log_tail"] = exc.log_tail
        except Exception as exc:  # keep the suite going; the test on this config fails
            record["error"] = f"{type(exc).__name__}: {exc}"
        record["wall_s"] = round(time.time() - t0, 1)
        results[cfg.name] = record
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(results, indent=1))
        s = record.get("summary") or {}
        print(f"[e2e] {cfg.name}: acc={s.get('acceptance_length')} tok/s={s.get('output_throughput')} "
              f"startup={record.get('startup_s')}s err={record.get('error', '')[:200]}", flush=True)
    return results


def agreement(reference: dict, other: dict) -> dict:
    """Exact-match rate of greedy outputs on shared prompts, and the first divergence."""
    keys = sorted(k for k in reference if k in other and reference[k] is not None and other[k] is not None)
    same = [k for k in keys if reference[k] == other[k]]
    first = None
    for k in keys:
        a, b = reference[k], other[k]
        if a != b:
            i = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
            first = {"prompt": k, "char": i, "reference": a[max(0, i - 20):i + 40], "other": b[max(0, i - 20):i + 40]}
            break
    return {"compared": len(keys), "exact": len(same), "rate": len(same) / len(keys) if keys else None,
            "first_divergence": first}
