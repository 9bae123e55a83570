"""Count what a call dispatches on the host: torch ops outside Triton launches, and the launches
(Triton under its interpreter, whose own tensor traffic inside a launch is not host dispatch)."""

import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode

class _Counter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()
        self.launches = collections.Counter()
        self.in_launch = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.in_launch:  # the interpreter's own copies inside a launch are not host dispatch
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def count(fn):
    from triton.runtime.interpreter import InterpretedFunction

    counter = _Counter()
    real_run = InterpretedFunction.run

    def run(self, *a, **k):
        counter.launches[self.fn.__name__] += 1
        counter.in_launch += 1
        try:
            return real_run(self, *a, **k)
        finally:
            counter.in_launch -= 1

    InterpretedFunction.run = run
    try:
        with counter:
            fn()
    finally:
        InterpretedFunction.run = real_run
    return counter
