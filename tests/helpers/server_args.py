"""SGLang's global server args for a call, set through SGLang's own setter (as a launch does), the
previous value put back afterwards: SGLang's accessor runs as it is, reading a namespace that holds
only the fields the code under test reads."""

from contextlib import contextmanager
from types import SimpleNamespace


@contextmanager
def global_server_args(**fields):
    from sglang.srt import server_args as sa

    before = getattr(sa, "_global_server_args", None)
    sa.set_global_server_args_for_scheduler(SimpleNamespace(**fields))
    try:
        yield
    finally:
        sa.set_global_server_args_for_scheduler(before)
