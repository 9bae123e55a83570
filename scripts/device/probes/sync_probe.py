"""Host syncs per draft step in an SGLang v2 server, counted on the GPU (device probe only).

Loaded by this folder's ``sitecustomize.py`` in every Python process of a server whose
environment has ``SGLANG_EAGLE_PAGED_SYNC_PROBE=<dir>``. When SGLang's v2 worker module is
imported it wraps, without changing what they do:

  step     ``EAGLEWorkerV2.forward_batch_generation`` (one scheduler step; decode and extend apart)
  draft    ``EagleDraftWorker.draft`` (the draft step: preparation, then the draft graph replay)
  prepare  ``prepare_for_draft`` as ``eagle_worker_v2`` calls it (the module global its draft reads;
           SGLang's duplication runs inside it, or the plugin's replacement of it)

Inside a window torch's sync debug mode is "warn", so every synchronizing CUDA call torch knows
(``.item()``, ``nonzero``, boolean-mask indexing, blocking device-to-host copies, synchronize)
warns once; the warnings are counted per window and per source line, never printed. Counts go to
``<dir>/sync-<pid>.json``, rewritten at most once a second while the process serves.

What this cannot see: a wait on a CUDA event, or a sync in a library that bypasses torch. It
counts what SGLang's own v2 preparation does (its two boolean-mask gathers), which is the
comparison issue 30 asks for.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
import warnings

ENV_VAR = "SGLANG_EAGLE_PAGED_SYNC_PROBE"
SYNC_MESSAGE = "called a synchronizing CUDA operation"
# warnings filters match from the message's start; torch may put text before it
FILTER_RE = ".*" + SYNC_MESSAGE
WORKER_MODULE = "sglang.srt.speculative.eagle_worker_v2"
WRITE_INTERVAL_S = 1.0


class Counts:
    """Per window name: calls, syncs, a histogram of syncs per call and the syncing lines."""

    def __init__(self):
        self.windows: dict = {}
        self.outside = 0  # sync warnings while the mode was on but in another thread
        self.instrumented: list = []  # what instrument() wrapped in this process

    def window(self, name: str) -> dict:
        return self.windows.setdefault(name, {"calls": 0, "syncs": 0, "per_call": {}, "where": {}})

    def close(self, name: str, syncs: int, where: dict) -> None:
        w = self.window(name)
        w["calls"] += 1
        w["syncs"] += syncs
        w["per_call"][str(syncs)] = w["per_call"].get(str(syncs), 0) + 1
        for loc, n in where.items():
            w["where"][loc] = w["where"].get(loc, 0) + n

    def as_dict(self) -> dict:
        out = {"pid": os.getpid(), "argv": sys.argv[:3], "outside": self.outside,
               "instrumented": list(self.instrumented), "windows": {}}
        for name, w in self.windows.items():
            out["windows"][name] = {**w, "syncs_per_call": round(w["syncs"] / w["calls"], 4) if w["calls"] else None}
        return out


class Probe:
    """The windows of one process. ``set_mode`` is ``torch.cuda.set_sync_debug_mode`` (a
    parameter so the CPU test can drive it without CUDA)."""

    def __init__(self, out_dir: str, set_mode=None):
        self.out_dir = out_dir
        self.counts = Counts()
        self._local = threading.local()
        self._depth = 0  # windows open in any thread: the mode is process-wide
        self._lock = threading.Lock()
        self._set_mode = set_mode
        self._last_write = 0.0
        self._orig_showwarning = warnings.showwarning
        warnings.showwarning = self._showwarning

    # -- warnings --------------------------------------------------------------------------
    def _stack(self) -> list:
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack

    def _showwarning(self, message, category, filename, lineno, file=None, line=None):
        if SYNC_MESSAGE not in str(message):
            return self._orig_showwarning(message, category, filename, lineno, file, line)
        stack = self._stack()
        if not stack:
            with self._lock:
                self.counts.outside += 1
            return None
        loc = f"{os.path.basename(str(filename))}:{lineno}"
        for frame in stack:  # nested windows each count the sync
            frame[1] += 1
            frame[2][loc] = frame[2].get(loc, 0) + 1
        return None

    def _always(self) -> None:
        # Python shows a warning once per source line by default; every sync must reach
        # _showwarning. Re-asserted at each window: SGLang adds filters of its own at start-up.
        first = warnings.filters[0] if warnings.filters else None
        if not (first and first[0] == "always" and first[1] is not None and first[1].pattern == FILTER_RE):
            warnings.filterwarnings("always", message=FILTER_RE)

    # -- windows ---------------------------------------------------------------------------
    def enter(self, name: str) -> None:
        self._always()
        self._stack().append([name, 0, {}])
        with self._lock:
            self._depth += 1
            if self._depth == 1 and self._set_mode is not None:
                self._set_mode("warn")

    def exit(self) -> None:
        name, syncs, where = self._stack().pop()
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._set_mode is not None:
                self._set_mode("default")
            self.counts.close(name, syncs, where)
        now = time.monotonic()
        if now - self._last_write >= WRITE_INTERVAL_S:
            self._last_write = now
            self.write()

    def wrap(self, name, fn, name_of=None):
        """``fn`` inside a window; ``name_of(args)`` may refine the window's name per call."""
        if getattr(fn, "_sync_probe", False):
            return fn
        probe = self

        def wrapped(*args, **kwargs):
            probe.enter(name_of(args) if name_of else name)
            try:
                return fn(*args, **kwargs)
            finally:
                probe.exit()

        wrapped._sync_probe = True
        wrapped.__wrapped__ = fn
        wrapped.__name__ = getattr(fn, "__name__", name)
        wrapped.__qualname__ = getattr(fn, "__qualname__", name)
        return wrapped

    def write(self) -> None:
        if not self.counts.windows:  # a process that never drafted (launcher, tokenizer, detokenizer)
            return
        try:
            os.makedirs(self.out_dir, exist_ok=True)
            path = os.path.join(self.out_dir, f"sync-{os.getpid()}.json")
            with self._lock:
                text = json.dumps(self.counts.as_dict(), indent=1)
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)
        except OSError:
            pass  # a probe never breaks the server it watches


def _step_name(args) -> str:
    batch = args[1] if len(args) > 1 else None
    mode = getattr(batch, "forward_mode", None)
    try:
        extend = bool(mode.is_extend()) or bool(getattr(batch, "is_extend_in_batch", False))
    except Exception:
        return "step"
    return "step_extend" if extend else "step_decode"


def instrument(module, probe: Probe) -> list:
    """Wrap the v2 worker module's draft step, its preparation and its scheduler step; returns
    what was wrapped (a release without one of them leaves it out, and says so in the record)."""
    done = []
    draft_cls = getattr(module, "EagleDraftWorker", None)
    if draft_cls is not None and hasattr(draft_cls, "draft"):
        inner = draft_cls.draft

        def draft(self, *args, **kwargs):
            # The plugin may replace the module's prepare_for_draft after import: wrap what is
            # there now, so the prepare window measures whatever the draft really calls.
            current = getattr(module, "prepare_for_draft", None)
            if current is not None and not getattr(current, "_sync_probe", False):
                module.prepare_for_draft = probe.wrap("prepare", current)
            return inner(self, *args, **kwargs)

        draft_cls.draft = probe.wrap("draft", draft)
        done.append("EagleDraftWorker.draft")
    if hasattr(module, "prepare_for_draft"):
        module.prepare_for_draft = probe.wrap("prepare", module.prepare_for_draft)
        done.append("prepare_for_draft")
    worker_cls = getattr(module, "EAGLEWorkerV2", None)
    if worker_cls is not None and hasattr(worker_cls, "forward_batch_generation"):
        worker_cls.forward_batch_generation = probe.wrap("step", worker_cls.forward_batch_generation, _step_name)
        done.append("EAGLEWorkerV2.forward_batch_generation")
    probe.counts.instrumented = done
    return done


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``callback(module)`` right after ``name`` is first imported, before anyone else sees
    it (``from ... import prepare_for_draft`` elsewhere then binds the wrapped function)."""

    def __init__(self, name: str, callback):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader, callback = spec.loader, self.callback

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                callback(module)

        spec.loader = Loader()
        return spec


def install(out_dir: str | None = None):
    """Arm the probe in this process if ``SGLANG_EAGLE_PAGED_SYNC_PROBE`` names a directory."""
    out_dir = out_dir or os.environ.get(ENV_VAR)
    if not out_dir:
        return None

    def set_mode(mode):
        import torch

        torch.cuda.set_sync_debug_mode(mode)

    probe = Probe(out_dir, set_mode=set_mode)
    sys.meta_path.insert(0, _AfterImport(WORKER_MODULE, lambda module: instrument(module, probe)))
    import atexit

    atexit.register(probe.write)
    return probe
