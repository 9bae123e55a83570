"""The configurations a benchmark serves and how a server of one is launched.

A :class:`RunConfig` names one server (mode, page size, tree shape, backend); the sets (the testbed
pair's ``core``, ``extended``, ``controls``; ``large`` for any model) are what ``bench.ab`` and the
lab's sweep (``bench/e2e.py`` at the top of the checkout) pick pairs and grids from.
"""

import functools
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..settings import DENSE_DRAFT
from . import triton_cache
from .server import ServerProcess, eagle_server_args, mode_env

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
    cuda_graph_max_bs: int = 32      # the largest batch a CUDA graph serves: at least the parallelism measured
    # SGLang caps running requests for speculative decoding (0.5.17: 48) unless told: at least the parallelism
    max_running_requests: int | None = None
    draft: str = "draft"             # "draft" (EAGLE head) or "target" (self-draft)
    extra: list = field(default_factory=list)
    env: dict = field(default_factory=dict)  # extra server environment, e.g. an A/B switch


# A/B switch of the FA3 tree-draft metadata (adapters/common/fa3_metadata.py; the fused replay is the
# default): SGLang's own builders.
FA3_SGLANG = {"SGLANG_EAGLE_PAGED_FA3_EXPAND": "0"}
# A/B switch of the paged verify's free (adapters/v1/verify.py; the page list is the default): SGLang's slot
# list, its sort and its second sync.
SLOT_LIST_FREE = {"SGLANG_EAGLE_PAGED_VERIFY_FREE": "0"}


def testbed_sets(backend: str = "fa3") -> dict:
    """Configurations of the GPU suite on the trained testbed pair, by set name."""
    b = backend
    core = [
        RunConfig("nospec_p1", algorithm=None, page_size=1, backend=b),
        RunConfig("on_p1", page_size=1, backend=b),
        RunConfig("on_p64", page_size=64, backend=b),
        RunConfig("fake_p64", mode="fake", page_size=64, backend=b),
        RunConfig("off_p64", mode="off", page_size=64, backend=b),
    ]
    k4 = dict(topk=4, num_draft_tokens=16)
    k1 = dict(topk=1, num_draft_tokens=6)
    oracle = dict(algorithm="STANDALONE", draft="target", topk=4, steps=3, num_draft_tokens=16)
    fi = dict(backend="flashinfer")
    tr = dict(backend="triton")
    extended = [  # most telling first: a cut-short run keeps these
        RunConfig("on_p64_fa3sg", page_size=64, backend=b, env=FA3_SGLANG),
        RunConfig("on_p64_slotfree", page_size=64, backend=b, env=SLOT_LIST_FREE),
        RunConfig("on_p128", page_size=128, backend=b),
        RunConfig("on_p16", page_size=16, backend=b),
        RunConfig("oracle_on_p1", page_size=1, backend=b, **oracle),
        RunConfig("oracle_on_p64", page_size=64, backend=b, **oracle),
        RunConfig("oracle_fake_p64", mode="fake", page_size=64, backend=b, **oracle),
        RunConfig("on_p64_nograph", page_size=64, backend=b, cuda_graph=False),
        RunConfig("fake_p128", mode="fake", page_size=128, backend=b),
        RunConfig("off_p128", mode="off", page_size=128, backend=b),
        RunConfig("on_p1_k4", page_size=1, backend=b, **k4),
        RunConfig("on_p64_k4", page_size=64, backend=b, **k4),
        RunConfig("fake_p64_k4", mode="fake", page_size=64, backend=b, **k4),
        RunConfig("off_p64_k4", mode="off", page_size=64, backend=b, **k4),
        RunConfig("on_p128_fa3sg", page_size=128, backend=b, env=FA3_SGLANG),
        RunConfig("on_p16_k4", page_size=16, backend=b, **k4),
        RunConfig("on_p1_k1", page_size=1, backend=b, **k1),
        RunConfig("on_p16_k1", page_size=16, backend=b, **k1),
        RunConfig("on_p64_k1", page_size=64, backend=b, **k1),
        RunConfig("fake_p16", mode="fake", page_size=16, backend=b),
        RunConfig("off_p16", mode="off", page_size=16, backend=b),
        # the other backends of the matrix (triton: opt-in, SGLang refuses it at topk > 1, page > 1)
        RunConfig("triton_on_p1", page_size=1, **tr),
        RunConfig("triton_on_p16", page_size=16, **tr),
        RunConfig("triton_on_p64", page_size=64, **tr),
        RunConfig("triton_on_p64_k4", page_size=64, **tr, **k4),
        RunConfig("triton_on_p64_k1", page_size=64, **tr, **k1),
        RunConfig("fi_on_p1", page_size=1, **fi),
        RunConfig("fi_on_p16", page_size=16, **fi),
        RunConfig("fi_on_p64", page_size=64, **fi),
        RunConfig("fi_fake_p64", mode="fake", page_size=64, **fi),
        RunConfig("fi_on_p64_k4", page_size=64, **fi, **k4),
        RunConfig("fi_on_p64_k1", page_size=64, **fi, **k1),
        # the rest of the greedy-equality matrix (page 1/16/64 x topk 1/4/8 x three backends)
        *(RunConfig(f"{name}_on_p{page}_k{k}", page_size=page, **be, **(k4 if k == 4 else k1))
          for name, be in (("triton", tr), ("fi", fi)) for page in (1, 16) for k in (4, 1)),
    ]
    # Controls for the page-N/page-1 A/B (bench.ab), each pair a question about the measurement or the
    # baseline rather than about the plugin: on_p1:on_p1_r2 is one configuration against itself (the
    # A/B's own bias and noise); nospec_p1:nospec_p64 is SGLang without speculation (its own paging
    # cost on this host-bound model); on_p1_k1:on_p64_k1 is SGLang's chain EAGLE, which at topk 1
    # duplicates nothing (its paged speculative path without ours).
    controls = [
        RunConfig("on_p1", page_size=1, backend=b),
        RunConfig("on_p1_r2", page_size=1, backend=b),
        RunConfig("on_p64", page_size=64, backend=b),
        RunConfig("nospec_p1", algorithm=None, page_size=1, backend=b),
        RunConfig("nospec_p64", algorithm=None, page_size=64, backend=b),
        RunConfig("on_p1_k1", page_size=1, backend=b, **k1),
        RunConfig("on_p64_k1", page_size=64, backend=b, **k1),
    ]
    return {"core": core, "extended": core + extended, "controls": controls}


def large_set(backend: str = "fa3") -> list:
    """Cost per step at a realistic size (dummy weights: acceptance is not meaningful).

    Ordered so that a cut-short run still has the comparisons that matter: page 1, ours
    and SGLang's built-in at page 64, ours with SGLang's FA3 metadata builders.
    """
    return [
        RunConfig("on_p1", page_size=1, backend=backend),
        RunConfig("on_p64", page_size=64, backend=backend),
        RunConfig("off_p64", mode="off", page_size=64, backend=backend),
        RunConfig("on_p64_fa3sg", page_size=64, backend=backend, env=FA3_SGLANG),
        RunConfig("on_p128_fa3sg", page_size=128, backend=backend, env=FA3_SGLANG),
        RunConfig("off_p128", mode="off", page_size=128, backend=backend),
        RunConfig("on_p128", page_size=128, backend=backend),
        # The headline pair once more, each on the other GPU (dealt by load): their spread is the noise.
        RunConfig("on_p1_r2", page_size=1, backend=backend),
        RunConfig("on_p64_r2", page_size=64, backend=backend),
    ]


# The benchmark servers log at WARNING so that SGLang's per-batch INFO lines cost nothing measured;
# INFO (this variable) is for a call that wants the plugin's start-up line (mode, warm-up per part).
LOG_LEVEL_ENV = "SGLANG_EAGLE_PAGED_BENCH_LOG_LEVEL"


@functools.lru_cache(maxsize=1)
def _sglang_options() -> frozenset:
    """The option strings the installed SGLang's own server parser accepts."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return frozenset(parser._option_string_actions)


def graph_flags(max_bs: int, options=None) -> list:
    """The decode CUDA graphs' largest batch and prefill graphs off, in the installed SGLang's words:
    up to 0.5.17 ``--cuda-graph-max-bs`` and ``--disable-piecewise-cuda-graph`` (kept there so runs
    stay comparable with earlier ones); 0.5.23 has only the per-phase ``--cuda-graph-max-bs-decode``
    and ``--disable-prefill-cuda-graph`` (argparse then takes the old name as an ambiguous prefix)."""
    options = _sglang_options() if options is None else options
    size = "--cuda-graph-max-bs" if "--cuda-graph-max-bs" in options else "--cuda-graph-max-bs-decode"
    prefill = ("--disable-piecewise-cuda-graph" if "--disable-piecewise-cuda-graph" in options
               else "--disable-prefill-cuda-graph")
    return [size, str(max_bs), prefill]


def server_args(cfg: RunConfig, target: str, draft: str, port: int, max_total_tokens: int,
                mem_fraction: float, load_format: str | None = None) -> list:
    # Piecewise CUDA graphs (prefill only) are off: their warm-up hit an illegal memory
    # access on the testbed model whose rope cache was shorter than the 8192-token warm-up
    # (measured 2026-11-30; the testbed now has 16384 positions, not re-verified yet).
    common = ["--grammar-backend", "none", "--sampling-backend", "pytorch",
              "--log-level", os.environ.get(LOG_LEVEL_ENV, "warning"),
              *graph_flags(cfg.cuda_graph_max_bs),
              # SGLang picks a free port for torch.distributed at start-up; with dozens of servers
              # starting together two picked the same one (run 3: EADDRINUSE). Ours, by server.
              "--nccl-port", str(port + 20000)]
    if not cfg.cuda_graph:
        common.append("--disable-cuda-graph")
    if cfg.max_running_requests:
        common += ["--max-running-requests", str(cfg.max_running_requests)]
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


def _warmup_questions(questions: list[dict], n: int) -> list[dict]:
    # Other prompts than the measured ones (a prefix changes every prompt), so the
    # measured pass is a second, different workload: what it compiles was not warmed.
    picked = questions[-n:] if n else []
    return [{**q, "question_id": f"w{q['question_id']}", "turns": [f"Briefly: {t}" for t in q["turns"]]}
            for q in picked]


def warmup_mixes(warmup_questions: list[dict], parallel: int) -> list[tuple[list[dict], int]]:
    """Batch mixes that compile, before the measurement, what SGLang compiles per batch size.

    SGLang's own page-1 and topk-1 draft kernel takes ``next_power_of_2(batch size)`` as a
    constexpr. Runs 3 and 4 warmed up with fewer conversations than ``parallel``, so the largest
    bucket compiled during the measured pass (2-3 variants at ~175 ms each, up to a tenth of a
    testbed page-1 run). The first mix therefore fills every slot (the questions repeated as
    needed) and drains through the smaller buckets; the second, at 3, covers 1-3 again.
    """
    if not warmup_questions:
        return []
    full = [warmup_questions[i % len(warmup_questions)] for i in range(max(parallel, len(warmup_questions)))]
    return [(full, parallel), (warmup_questions[: max(1, len(warmup_questions) // 4)], 3)]


def launch(cfg: RunConfig, args: list, *, port: int, log_dir: str, startup_timeout: float, shared_gpu: bool,
           launcher: Callable | None = None, triton_seeds: Sequence[str] = ()):
    """The (not yet started) server of ``cfg`` with ``args``, its record, and its Triton cache dir
    (seeded from ``triton_seeds``, Triton cache dirs of earlier servers: :mod:`.triton_cache`)."""
    if shared_gpu:
        # Idle servers wait on their sockets instead of spinning a core each while
        # another server on the same machine is being measured.
        args = args + ["--sleep-on-idle"]
    # A fresh Triton cache per server, so compiled variants can be counted.
    cache_dir = Path(log_dir) / "triton_cache" / cfg.name
    seeded = triton_cache.seed(cache_dir, triton_seeds) if triton_seeds else 0
    env = mode_env(cfg.mode)
    # A configuration runs the draft layout it names: SGLang's per-branch one unless its env asks for the
    # dense one, whatever the setting's default (``auto``) would choose on this machine.
    env[DENSE_DRAFT] = "0"
    env.update(cfg.env)
    env["TRITON_CACHE_DIR"] = str(cache_dir)
    if cfg.backend == "triton":
        # SGLang refuses triton for topk > 1 with page > 1; the plugin allows it on request.
        env["SGLANG_EAGLE_PAGED_ALLOW_TRITON"] = "1"
    log_path = f"{log_dir}/{cfg.name}.log"
    server = (launcher or ServerProcess)(args, port=port, env=env, log_path=log_path, startup_timeout=startup_timeout)
    record = {"config": asdict(cfg), "server_args": args, "log": log_path}
    if triton_seeds:
        record["triton_variants_seeded"] = seeded
    return server, record, cache_dir



def add_set_and_model_args(p, default_set: str) -> None:
    """The command-line arguments that choose a configuration set and the models it serves."""
    p.add_argument("--set", choices=["core", "extended", "controls", "large"], default=default_set)
    p.add_argument("--backend", default="fa3")
    p.add_argument("--target", required=True)
    p.add_argument("--draft", required=True)
    p.add_argument("--load-format", help="e.g. dummy (random weights)")


def add_workload_args(p, parallel1_help: str) -> None:
    """The command-line arguments of the MT-bench workload each server is measured with."""
    p.add_argument("--questions", type=int, default=80)
    p.add_argument("--max-new", type=int, default=256)
    p.add_argument("--parallel", type=int, default=16)
    p.add_argument("--parallel1-questions", type=int, default=0, help=parallel1_help)
    p.add_argument("--warmup", type=int, default=16)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--question-file")
    p.add_argument("--tokenizer", help="tokenizer folder (e.g. the target's): apply its chat template to every "
                                       "prompt, client-side; default: plain 'User:/Assistant:' text")


def configs_of(args) -> list:
    """The configurations of ``args.set`` (parsed with :func:`add_set_and_model_args`)."""
    return large_set(args.backend) if args.set == "large" else testbed_sets(args.backend)[args.set]
