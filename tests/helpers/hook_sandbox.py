"""Hooks installed through SGLang's HookRegistry within one test, and undone after it."""

import sys
from collections import defaultdict
from contextlib import contextmanager


def _current(owner, attr):
    return owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)


@contextmanager
def hook_sandbox(monkeypatch, targets: dict):
    """An isolated registry, with ``targets`` (``{name: (owner, attribute)}``) pinned to their values
    now. Yields ``(originals, read)``: ``read()`` gives their values after ``apply_hooks``. On exit,
    every module global that ``apply_hooks`` rebound to a wrapper is put back."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    monkeypatch.setattr(HookRegistry, "_hooks", defaultdict(list))
    monkeypatch.setattr(HookRegistry, "_patched", set())
    originals = {k: _current(owner, attr) for k, (owner, attr) in targets.items()}
    for k, (owner, attr) in targets.items():
        monkeypatch.setattr(owner, attr, originals[k])
    patched = {}

    def read():
        patched.update({k: _current(owner, attr) for k, (owner, attr) in targets.items()})
        return dict(patched)

    try:
        yield originals, read
    finally:
        for mod in list(sys.modules.values()):
            for k, v in list(getattr(mod, "__dict__", {}).items()):
                for key, w in patched.items():
                    if v is w and w is not originals[key]:
                        setattr(mod, k, originals[key])
