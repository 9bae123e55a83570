"""SGLang's functions as written, under torch.compile's and hook wrappers."""


def undecorated(fn, name: str, filename: str = "flashattention_backend.py"):
    """The function ``name`` defined in ``filename``, found by following ``fn``'s
    ``_torchdynamo_orig_callable`` / ``__wrapped__`` chain; LookupError if it is not there."""
    seen, todo = set(), [fn]
    while todo:
        f = todo.pop(0)
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        code = getattr(f, "__code__", None)
        if code is not None and code.co_filename.endswith(filename) and code.co_name == name:
            return f
        todo += [getattr(f, "_torchdynamo_orig_callable", None), getattr(f, "__wrapped__", None)]
    raise LookupError(f"{name} (from {filename}) under {fn!r}")
