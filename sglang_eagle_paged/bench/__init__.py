"""The benchmark a user runs against their own server (every command: ``docs/benchmark.md``).

- ``mtbench``: question loader, HTTP client, single runs and sweeps (``sglang-eagle-paged bench``)
- ``server``: start/stop ``sglang.launch_server`` as a subprocess; ``server_log``: what its log says
  over the counted passes (retractions, the plugin's fault lines)
- ``configs``: the configurations a benchmark serves and how each is launched; ``kv_sizing``: the
  KV pool in which a batch runs without retractions; ``triton_cache``: compiles during a pass
- ``ab`` and ``ab_pool``: paired A/B throughput, and pooling its recordings over server pairs
- ``stats``: the statistics every reported figure comes from (intervals, heterogeneity, equivalence)
- ``report``: Markdown tables and plots from result rows
- ``default_run``: ``sglang-eagle-paged serve-default`` on the embedded model pair

The project's own GPU investigations (profilers, samplers, sweeps, soak and stress drivers,
micro-benchmarks) live outside the package, in ``bench/`` at the top of the checkout.
"""
