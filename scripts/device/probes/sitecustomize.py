"""Device probes, armed by environment variables only (scripts/device/call_v2.sh puts this folder
first on a measured server's PYTHONPATH). Without them this file does nothing.

SGLANG_EAGLE_PAGED_SYNC_PROBE=<dir>: host syncs per draft step (sync_probe.py).
SGLANG_EAGLE_PAGED_ROUND_MARKS=1: profiler ranges around each round and its verify (round_marks.py).
SGLANG_EAGLE_PAGED_GC_STATS=<dir>: each process's garbage collections into <dir> (gc_stats.py).
Another sitecustomize later on the path (the machine's) still runs, after this one.
"""
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("SGLANG_EAGLE_PAGED_SYNC_PROBE") or os.environ.get("SGLANG_EAGLE_PAGED_ROUND_MARKS"):
    sys.path.insert(0, _here)
    try:
        import round_marks
        import sync_probe

        sync_probe.install()
        round_marks.install()
    finally:
        sys.path.remove(_here)
if os.environ.get("SGLANG_EAGLE_PAGED_GC_STATS"):
    sys.path.insert(0, _here)
    try:
        import gc_stats

        gc_stats.install(os.environ["SGLANG_EAGLE_PAGED_GC_STATS"])
    finally:
        sys.path.remove(_here)


def _chain():
    # Python imports only the first sitecustomize on sys.path: run the next one too.
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.origin and os.path.dirname(os.path.abspath(spec.origin)) != _here:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
