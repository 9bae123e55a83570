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
  result to JSON as it comes (a re-run resumes); a tensor-parallel server (:func:`tp_size`
  > 1) runs alone before the others, once :func:`wait_gpus_free` says the GPUs are empty.
"""

from sglang_eagle_paged.bench.server import ServerStartError
from .client import aborting_stream, run_prompts
from .logs import scan_log, scan_log_file
from .prompts import ServerTokenizer, TokenSource, corpus_text, long_context_copy, seeded_lengths
from .runner import ServerSpec, gpu_memory_used_mib, run_group, tp_size, wait_gpus_free
from .server_state import LoadPoller, idle_check, loads, wait_idle
from .soak_driver import SOAK_KINDS, SoakConfig, soak

__all__ = [
    "SOAK_KINDS", "LoadPoller", "ServerSpec", "ServerStartError", "ServerTokenizer", "SoakConfig", "TokenSource",
    "aborting_stream", "corpus_text", "gpu_memory_used_mib", "idle_check", "loads", "long_context_copy",
    "run_group", "run_prompts", "scan_log", "scan_log_file", "seeded_lengths", "soak", "tp_size",
    "wait_gpus_free", "wait_idle",
]
