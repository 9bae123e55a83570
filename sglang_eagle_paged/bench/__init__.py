"""Benchmarks, their servers and their reports (every command: ``docs/benchmark.md``).

- ``mtbench``: question loader, HTTP client, single runs and sweeps (``sglang-eagle-paged bench``)
- ``server``: start/stop ``sglang.launch_server`` as a subprocess
- ``report``: Markdown tables and plots from result rows
- ``default_run``: ``sglang-eagle-paged serve-default`` on the embedded model pair
- ``ab`` and ``ab_pool``: paired A/B throughput, and pooling its recordings across calls
- ``e2e``, ``e2e_report``, ``reproducibility``: the end-to-end measurement and its reports
- ``kernels``: kernel and preprocess micro-benchmarks, ours against SGLang's
- ``v2_run``, ``v2_report``: the v2 worker's GPU sweep and A/B pairs
- ``soak_cpu``: the CPU soak of the draft step; ``stress``: the GPU reliability drivers
"""
