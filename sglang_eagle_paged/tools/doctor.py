"""``sglang-eagle-paged doctor``: what is installed, what is hooked, and a kernel self-test."""

import importlib.metadata
import logging
import os
import sys


def add_arguments(parser):
    parser.add_argument("--no-self-test", action="store_true", help="skip the kernel self-test")


def _line(ok, label, detail):
    """One report line; ``ok``: True, False (a problem), None (information) or "warn" (works, but
    not as a user serving would want)."""
    mark = {True: "ok  ", False: "FAIL", None: "info", "warn": "WARN"}[ok]
    print(f"[{mark}] {label:22s} {detail}")
    return ok is not False


def plugin_fake_warning() -> str:
    """The plugin's start-up warning for fake, less the variable it names."""
    from ..plugin import FAKE_WARNING

    return FAKE_WARNING.split(": ", 1)[1]


def _entry_point():
    for ep in importlib.metadata.entry_points(group="sglang.srt.plugins"):
        if ep.value.startswith("sglang_eagle_paged."):
            return ep
    return None


def _self_test(device: str, generation: str | None = None) -> str:
    """Every kernel on a small case against its torch reference ("" when all match), twice: the
    first pass resolves each compiled variant through Triton, the second launches the same
    variants through their launchers alone (``kernels/launch.py``), as serving does after its
    first rounds."""
    problem = _self_test_once(device, generation)
    if problem:
        return problem
    problem = _self_test_once(device, generation)
    return f"{problem} (second pass, variants launched directly)" if problem else ""


def _self_test_once(device: str, generation: str | None) -> str:
    import torch

    from ..kernels import KVBufferTable, assign_tree_draft_slots, duplicate_kv_pairs
    from ..tree_layout import extend_lens
    from ..kernels.reference import assign_tree_draft_slots_ref, duplicate_kv_pairs_ref

    page, topk, steps = 16, 4, 3
    seq_lens = torch.tensor([5, 16, 37, 1])
    rows = torch.tensor([1, 2, 3, 4])
    r2t = torch.zeros(8, 512, dtype=torch.int32)
    next_page = 1
    for row, n in zip(rows.tolist(), seq_lens.tolist()):
        npages = -(-n // page)
        r2t[row, :n] = (torch.arange(npages * page) + next_page * page)[:n].int()
        next_page += npages
    alloc = []
    for n, ext in zip(seq_lens.tolist(), extend_lens(seq_lens, page, topk, steps).tolist()):
        last_slot = int(r2t[rows[len(alloc)], n - 1])
        fill = [] if n % page == 0 else list(range(last_slot + 1, (last_slot // page + 1) * page))
        fresh = list(range(next_page * page, next_page * page + ext - len(fill)))
        next_page += -(-len(fresh) // page)
        alloc.append(torch.tensor(fill + fresh))
    alloc = torch.cat(alloc)
    ref_r2t = r2t.clone()
    want = assign_tree_draft_slots_ref(rows, ref_r2t, seq_lens, alloc, page, topk, steps)
    got_r2t = r2t.to(device)
    got = assign_tree_draft_slots(rows.to(device), got_r2t, seq_lens.to(device), alloc.to(device), page, topk, steps)
    for name in ("out_cache_loc", "src_loc", "tgt_loc"):
        if not torch.equal(getattr(got, name).cpu(), getattr(want, name)):
            return f"assignment kernel differs from the reference in {name}"
    if not torch.equal(got_r2t.cpu(), ref_r2t):
        return "assignment kernel differs from the reference in req_to_token"
    bufs = [torch.randn(next_page * page, 2, 8).to(torch.bfloat16) for _ in range(2)]
    ref = [b.clone() for b in bufs]
    duplicate_kv_pairs_ref(ref, want.tgt_loc, want.src_loc)
    dev_bufs = [b.to(device) for b in bufs]
    duplicate_kv_pairs(KVBufferTable.from_buffers(dev_bufs), got.tgt_loc, got.src_loc)
    if not all(torch.equal(a.cpu(), b) for a, b in zip(dev_bufs, ref)):
        return "duplication kernel differs from the reference"
    return (_self_test_tree_extension(device) or _self_test_move(device) or _self_test_fa3_metadata(device)
            or _self_test_verify_bookkeeping(device, generation) or _self_test_adapter(device, generation))


def _self_test_adapter(device: str, generation: str | None) -> str:
    """v2: our duplication against SGLang's own function, byte for byte, on SGLang's real pool."""
    if generation != "v2":
        return ""
    from ..adapters.v2 import duplicate, hook_points
    from ..hooks import resolve
    from . import v2_harness as vh

    hooked = resolve(hook_points.home_for(hook_points.installed_version()).target)
    original = getattr(hooked, "__wrapped__", hooked)  # SGLang's, under the registry's wrapper
    page, topk, steps, seq = 8, 4, 3, [5, 8, 13, 1]
    pool, rows = vh.layout_rows(seq, page, topk, steps, seed=0, device=device)
    vh.fill_random(pool, 0)
    start, args = vh.snapshot(pool), vh.draft_args(seq, page, steps, device)
    original(pool, rows, *args, topk, page)
    theirs = vh.snapshot(pool)
    vh.restore(pool, start)
    if not duplicate.duplicate_in_pool(pool, rows, *args, topk, page):
        return "v2 duplication: SGLang's plain MHA pool is not one our kernel copies here"
    if not all(vh.torch_equal(a, b) for a, b in zip(theirs, vh.snapshot(pool))):
        return "v2 duplication differs from SGLang's own"
    return ""


def _tree_inputs():
    """Four requests with empty, partial and full last pages; page 16, topk 4, steps 5."""
    import torch

    r2t = (torch.arange(4 * 96, dtype=torch.int32).view(4, 96) * 5 + 3) % 4096
    return r2t, torch.tensor([3, 0, 2, 1]), torch.tensor([0, 1, 31, 64]), (16, 4, 5)


def _self_test_tree_extension(device: str) -> str:
    """The allocator inputs of a tree extension (SGLang's allocation path)."""
    import torch

    from ..kernels.reference import tree_extension_ref
    from ..kernels.tree_extension import tree_extension

    r2t, rows, seq_lens, cfg = _tree_inputs()
    want = tree_extension_ref(r2t, rows, seq_lens, *cfg)
    got = tree_extension(r2t.to(device), rows.to(device), seq_lens.to(device), *cfg)
    for name in ("seq_lens", "last_loc"):
        if not torch.equal(getattr(got, name).cpu(), getattr(want, name)):
            return f"tree-extension kernel differs from the reference in {name}"
    return _self_test_tree_alloc(device)


def _self_test_tree_alloc(device: str) -> str:
    """The draft's slots read from a free list (the allocator's fast path), inside the assignment's
    free-page variant: the one launch the draft step makes on that path."""
    import torch

    from ..kernels.assign import assign_tree_draft_slots_from_free_pages
    from ..tree_layout import extend_lens
    from ..kernels.reference import assign_tree_draft_slots_ref, tree_slots_from_free_pages_ref

    r2t, rows, seq_lens, cfg = _tree_inputs()
    free = torch.randperm(200, generator=torch.Generator().manual_seed(0)) + 300
    slots = tree_slots_from_free_pages_ref(r2t, rows, seq_lens, free, *cfg)
    want_r2t = r2t.clone()
    want = assign_tree_draft_slots_ref(rows, want_r2t, seq_lens, slots, *cfg)
    got_r2t = r2t.to(device)
    # The allocator's free list is a slice at any offset: an unaligned one here.
    free_dev = torch.cat([free[:1], free]).to(device)[1:]
    got = assign_tree_draft_slots_from_free_pages(rows.to(device), got_r2t, seq_lens.to(device), free_dev, *cfg)
    for name in ("out_cache_loc", "src_loc", "tgt_loc"):
        if not torch.equal(getattr(got, name).cpu(), getattr(want, name)):
            return f"free-page assignment kernel differs from the reference in {name}"
    if not torch.equal(got_r2t.cpu(), want_r2t):
        return "free-page assignment kernel differs from the reference in req_to_token"
    return ""


def _self_test_move(device: str) -> str:
    """The post-verify move at the pools' chunk of 256, on pairs that only come out right if
    every read of a chunk precedes its writes and chunks run in order."""
    import random

    import torch

    from ..kernels import KVBufferTable
    from ..kernels.move_rows import CHUNK, move_kv_rows
    from ..kernels.reference import move_kv_rows_ref

    # chunk 0, pairs 0-249: one random cycle through 250 rows (Sattolo), so each pair's source
    # is a target of a pair that another warp of a program holds: a missing barrier shows on a GPU
    rng = random.Random(0)
    perm = list(range(250))
    for i in range(249, 0, -1):
        j = rng.randrange(i)
        perm[i], perm[j] = perm[j], perm[i]
    cycle = torch.arange(64, 314)
    tgt = [cycle, torch.tensor([31, 32, 33, 34]),  # pairs 250-253: a shift (30->31->...->34)
           torch.tensor([11, 12]),                 # pairs 254-255: 10->11, 11->12 ...
           torch.tensor([10]),                     # pair 256, next chunk: ... 12->10 across the boundary
           torch.tensor([21, 22, 20]),             # a cycle inside the second chunk
           torch.arange(400, 420)]                 # reads rows the first chunk wrote
    src = [cycle[perm], torch.tensor([30, 31, 32, 33]), torch.tensor([10, 11]), torch.tensor([12]),
           torch.tensor([20, 21, 22]), cycle[:20]]
    tgt, src = torch.cat(tgt), torch.cat(src)
    gen = torch.Generator().manual_seed(0)
    # 128-byte rows (several programs per buffer); random bits compare exactly, NaN or not
    bufs = [torch.randint(-2**15, 2**15, (512, 4, 16), generator=gen, dtype=torch.int16) for _ in range(8)]
    ref = [b.clone() for b in bufs]
    move_kv_rows_ref(ref, tgt, src, chunk=CHUNK)
    dev_bufs = [b.to(device) for b in bufs]
    table = KVBufferTable.from_buffers(dev_bufs)
    move_kv_rows(table, tgt.to(device), src.to(device), chunk=CHUNK)
    # then a move of a few pairs, as one request's verify makes: the small tile (a cycle and a shift)
    tgt, src = torch.tensor([401, 402, 400, 450, 451]), torch.tensor([400, 401, 402, 449, 450])
    move_kv_rows_ref(ref, tgt, src, chunk=CHUNK)
    move_kv_rows(table, tgt.to(device), src.to(device), chunk=CHUNK)
    if not all(torch.equal(a.cpu(), b) for a, b in zip(dev_bufs, ref)):
        return "post-verify move kernel differs from the reference"
    return ""


def _self_test_fa3_metadata(device: str) -> str:
    """FA3's fused draft metadata on a small batch (partial and full last pages)."""
    import torch

    from ..kernels.draft_decode_metadata import draft_decode_metadata, draft_decode_metadata_reference

    page, topk, steps, bs = 16, 4, 3, 3
    seq_lens = torch.tensor([5, 32, 37])
    rows = torch.tensor([2, 0, 1])
    r2t = (torch.arange(3 * 64, dtype=torch.int32).view(3, 64) * 7 + 16) % 4096
    strided = torch.arange(0, 64, page)
    first_page = torch.arange(bs * topk).view(bs, topk) * 2 + 100
    loc = (first_page[:, :, None] * page + (seq_lens % page)[:, None, None] + torch.arange(steps)).view(-1, steps)
    max_pages = -(-int(seq_lens.max()) // page)

    def tables():
        return (torch.full((bs,), -1, dtype=torch.int32), torch.full((bs, 4), -1, dtype=torch.int32),
                torch.full((bs * topk,), -1, dtype=torch.int32), torch.full((bs * topk, steps), -1, dtype=torch.int32))

    want = tables()
    draft_decode_metadata_reference(*want, seq_lens, rows, r2t, strided, max_pages, loc, 2, topk, page)
    got = [t.to(device) for t in tables()]
    draft_decode_metadata(*got, seq_lens.to(device), rows.to(device), r2t.to(device), strided.to(device), max_pages,
                          loc.to(device), 2, topk, page)
    if not all(torch.equal(a.cpu(), b) for a, b in zip(got, want)):
        return "FA3 draft metadata kernel differs from the reference"

    # every step in one launch (the default replay path), steps 1 and 2 as SGLang's backends hold them
    from ..kernels.draft_decode_metadata import DraftStep, DraftStepTable, draft_decode_metadata_all_steps

    wants, gots = [], []
    for decode_length in (1, 2):
        wants.append(tables())
        draft_decode_metadata_reference(*wants[-1], seq_lens, rows, r2t, strided, max_pages, loc, decode_length,
                                        topk, page)
        gots.append(DraftStep(*(t.to(device) for t in tables()), strided.to(device), decode_length))
    draft_decode_metadata_all_steps(DraftStepTable.from_steps(gots), seq_lens.to(device), rows.to(device),
                                    r2t.to(device), max_pages, loc.to(device), topk, page)
    if not all(torch.equal(a.cpu(), b) for got, want in zip(gots, wants) for a, b in zip(got[:4], want)):
        return "FA3 all-steps draft metadata kernel differs from the reference"
    return ""


def _self_test_verify_bookkeeping(device: str, generation: str | None) -> str:
    """The paged verify's bookkeeping kernel on random verifies (accepted tokens ending mid-page,
    on a page boundary and past it), against the eager ops it replaces."""
    import torch

    from ..adapters.v1.verify import free_check, kernel_problem, verify_bookkeeping_inputs

    gen = torch.Generator().manual_seed(0)
    for bs, draft_tokens, page in ((1, 8, 16), (37, 64, 64), (9, 6, 2)):
        inputs = verify_bookkeeping_inputs(gen, bs, draft_tokens, page)
        problem = kernel_problem([t.to(device) for t in inputs] + [draft_tokens, page])
        if problem is not None:
            return f"verify bookkeeping kernel: {problem}"
    if generation != "v1":  # the page-list free is checked against v1 SGLang's own split kernel
        return ""
    for draft_tokens, page in ((64, 64), (16, 128), (6, 2)):
        problem = free_check(device, draft_tokens, page)
        if problem is not None:
            return f"verify page-list free: {problem}"
    return ""


def _what(hook) -> str:
    """A hook's kind and, where it has one, what it is for: two hooks of one kind on one target
    (the draft workers' warm-ups) each say which they are."""
    return f"{hook.kind}: {hook.purpose}" if hook.purpose else hook.kind


def _hook_lines(support, s) -> bool:
    """Register as SGLang would, then one line per hook of the adapter: hooked or not."""
    from .. import plugin
    from ..releases import adapter_module

    ok = True
    # register()'s own log lines repeat what the lines below say
    plugin.logger.setLevel(logging.CRITICAL + 1)
    try:
        plugin.register()
    except SystemExit as exc:
        return _line(False, "hooks", str(exc))
    except Exception as exc:  # doctor reports, never crashes
        return _line(False, "hooks", f"{type(exc).__name__}: {exc}")
    hooked = set(plugin.hooked_targets())
    adapter = adapter_module(support)
    for hook in adapter.hooks(s):
        took = hook.target in hooked
        if hook.required:
            ok &= _line(took, "hook", f"{hook.target} ({_what(hook)})")
        else:
            _line(None, "hook (optional)", f"{hook.target} ({_what(hook)}): {'applied' if took else 'absent'}")
    for label, detail in _adapter_lines(support, s):
        _line(None, label, detail)
    return ok


def _adapter_lines(support, s) -> list:
    """(label, detail) lines of the adapter serving this SGLang (v2: :mod:`.doctor_v2`)."""
    if support.generation != "v2":
        return []
    from . import doctor_v2

    return doctor_v2.lines(s)


def _progress(text: str) -> None:
    """What doctor is doing while it works (importing SGLang on a CPU takes a minute or more)."""
    print(f"doctor: {text} ...", file=sys.stderr, flush=True)


def _summary(ok: bool) -> int:
    print("doctor: all checks passed" if ok else "doctor: problems found (see FAIL lines)")
    return 0 if ok else 1


def run(args) -> int:
    from .quiet import quiet_sglang, torch_missing

    problem = torch_missing("doctor")
    if problem:
        _line(False, "torch", problem)
        return _summary(False)
    import torch

    quiet_sglang()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from .. import __version__, releases, settings
    from ..kernels import launch as kernel_launch

    ok = True
    ok &= _line(None, "sglang-eagle-paged", __version__)
    _progress("reading the installed SGLang")
    support = releases.support()
    ok &= _line(support.problem is None, "sglang", support.describe())
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    _line(None, "torch / triton", f"{torch.__version__} / {triton_version}")
    ep = _entry_point()
    ok &= _line(ep is not None, "entry point", f"{ep.group}: {ep.name} = {ep.value}" if ep else "not discovered: is the package installed (pip install .)?")
    allow = os.environ.get("SGLANG_PLUGINS")
    if allow and ep and ep.name not in {x.strip() for x in allow.split(",")}:
        ok &= _line(False, "SGLANG_PLUGINS", f"{allow!r} excludes {ep.name!r}: SGLang will not load us")
    try:
        s = settings.current()
    except settings.SettingsError as exc:
        _line(False, "settings", str(exc))
        return _summary(False)
    if s.mode is settings.Mode.FAKE:
        _line("warn", "mode", f"{settings.MODE}=fake: {plugin_fake_warning()}")
    else:
        _line(None, "mode", f"{settings.MODE}={s.mode.value}")
    unused = settings.unused_by(support.generation)
    if unused:
        _line("warn", "settings", f"{', '.join(unused)}: no effect on this SGLang (v1 releases only)")
    if support.problem is None and support.route != "patch" and s.mode is not settings.Mode.OFF:
        _progress("importing SGLang and hooking it, as a server would (a minute or more on a CPU)")
        ok &= _hook_lines(support, s)
    if os.environ.get("TRITON_INTERPRET") == "1":
        launches = "Triton's interpreter (no compiled variants)"
    elif kernel_launch._enabled():
        launches = "direct to the compiled variant after its first launch (the default)"
    else:
        launches = (f"through Triton's kernel[grid] ({settings.DIRECT_LAUNCH}=0 or a Triton release other than "
                    f"{', '.join(kernel_launch.CHECKED_TRITON)})")
    _line(None, "kernel launches", launches)
    if not args.no_self_test:
        label = f"kernel self-test ({device}{', Triton interpreter' if device == 'cpu' else ''})"
        _progress("running every kernel against its reference" + (" (interpreted: a minute or more)"
                                                                   if device == "cpu" else ""))
        try:
            err = _self_test(device, support.generation)
        except Exception as exc:
            err = f"{type(exc).__name__}: {exc}"
        ok &= _line(not err, label, err or "tree extension, free-list slots, assignment, duplication, "
                                          "post-verify move, verify bookkeeping"
                                          + (", verify page-list free" if support.generation == "v1" else "")
                                          + (", the v2 duplication against SGLang's" if support.generation == "v2" else "")
                                          + " and FA3 metadata match their references")
    return _summary(ok)


if __name__ == "__main__":
    sys.exit(run(type("A", (), {"no_self_test": False})()))
