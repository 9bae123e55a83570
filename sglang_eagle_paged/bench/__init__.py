"""MT-bench acceptance/throughput benchmark, server launcher and sweep.

- ``mtbench``: question loader, HTTP client, single runs and sweeps (``sglang-eagle-paged bench``)
- ``server``: start/stop ``sglang.launch_server`` as a subprocess
- ``report``: Markdown tables and plots from result rows
- ``default_run``: ``sglang-eagle-paged serve-default`` on the embedded model pair
"""
