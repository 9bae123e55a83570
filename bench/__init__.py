"""The lab: what the project's own GPU investigations run, outside the wheel (the benchmark a user
runs against their own server is ``sglang_eagle_paged.bench``). Run from the checkout's root,
``python -m bench.NAME`` (``scripts/device/*.sh`` do) or ``python -m bench NAME`` (lists them
without a name); ``results/`` holds every committed run.

- ``e2e``, ``e2e_report``, ``reproducibility``, ``parity``, ``accept_compare``: the end-to-end suite
  (one server per configuration, the same workload each) and its reports
- ``v2_run``, ``v2_sets``, ``v2_report``, ``v2_profile``, ``smoke``: the v2 worker's GPU calls
- ``profile``, ``round_profile``, ``pyspy``, ``gpu_sampler``, ``proc_cpu``, ``ab_probes``:
  profilers and samplers of an investigation; ``ab_fits``: the v1 A/B's parallel-1 latency fits
- ``kernels``, ``prepare_v2``: kernel and preparation micro-benchmarks, ours against SGLang's
- ``soak_cpu``: the CPU soak of the draft step; ``stress``: the GPU reliability drivers
- ``figures``: every published figure from ``results/`` (``docs/performance.md``, its plot, the README)
"""
