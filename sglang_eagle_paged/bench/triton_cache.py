"""Per-server Triton caches: counting compiled variants, and seeding from earlier servers.

Each benchmarked server gets a fresh ``TRITON_CACHE_DIR`` so that the variants it
compiles can be counted (ours must compile once, at start-up; SGLang's built-in
compiles through its run). A fresh cache also makes every server compile all of
SGLang's other Triton kernels again, dozens of servers at once on a shared host.
:func:`seed` fills a fresh cache with what earlier servers compiled, except the
kernels being counted, so the counts stay each server's own.
"""

import os
import re
from pathlib import Path
from typing import Iterable

OUR_KERNELS = ("_tree_extension_kernel", "_assign_tree_draft_slots_kernel",
               "_duplicate_kv_kernel", "_duplicate_prefix_tail_kernel", "_move_rows_kernel", "_src_to_free_kernel",
               "_draft_decode_metadata_all_steps_kernel", "_draft_decode_metadata_kernel",
               "_expand_draft_page_table_kernel", "_split_verify_slots_kernel", "_per_token_all_steps_kernel")
# Kernels whose compiled variants are counted: ours, and SGLang's built-in ones that take
# the copy length or the pair count as a constexpr.
COUNTED_KERNELS = OUR_KERNELS + ("assign_draft_cache_locs", "copy_all_layer_kv_cache_tiled")


def variants(cache_dir) -> dict:
    """Compiled variants per counted kernel in a Triton cache dir (one ``<name>.json`` per variant)."""
    counts = {name: 0 for name in COUNTED_KERNELS}
    for name in variant_entries(cache_dir).values():
        if name in counts:
            counts[name] += 1
    return counts


def variant_entries(cache_dir) -> dict:
    """``{entry directory: kernel name}`` for every compiled variant in a Triton cache dir."""
    return {meta.parent.name: meta.stem for meta in Path(cache_dir).glob("*/*.json")
            if not meta.stem.startswith("__grp__")}


_LOC = re.compile(r"\s*loc\((?:[^()]|\([^()]*\))*\)")


def signature(cache_dir, entry: str, name: str) -> str | None:
    """What a compiled variant was specialised on: its TTIR function line (argument types,
    divisibility, constants folded away), source locations dropped; None if there is no TTIR."""
    ttir = Path(cache_dir) / entry / f"{name}.ttir"
    try:
        text = ttir.read_text(errors="replace")
    except OSError:
        return None
    line = next((ln.strip() for ln in text.splitlines() if ln.lstrip().startswith("tt.func")), None)
    return _LOC.sub("", line)[:2000] if line else None


def compiled_since(before: dict, cache_dir) -> tuple:
    """``(entries now, {kernel: variants compiled since before}, [their signatures])``, where
    ``before`` is an earlier :func:`variant_entries`: what a server compiled in between (a compile
    stalls its scheduler for 0.1-1.5 s, which reads as lower throughput)."""
    now = variant_entries(cache_dir) if cache_dir else {}
    new = sorted((entry, name) for entry, name in now.items() if entry not in before)
    counts: dict = {}
    for _, name in new:
        counts[name] = counts.get(name, 0) + 1
    return now, counts, [f"{name}: {signature(cache_dir, entry, name)}" for entry, name in new]


def _counted(entry: Path) -> bool:
    # a variant's directory holds <kernel>.json (and __grp__<kernel>.json)
    return any(f.stem.removeprefix("__grp__") in COUNTED_KERNELS for f in entry.glob("*.json"))


def seed(cache_dir, seed_dirs: Iterable) -> int:
    """Hard-link into ``cache_dir`` every variant found in ``seed_dirs`` (Triton cache dirs),
    except the counted kernels'; returns how many variants it added.

    Links, not copies: Triton writes a cache entry under a temporary name and renames it,
    never rewriting a file in place, so sharing the files is safe.
    """
    cache_dir = Path(cache_dir)
    added = 0
    for src in seed_dirs:
        src = Path(src)
        if not src.is_dir() or src.resolve() == cache_dir.resolve():
            continue
        for entry in src.iterdir():
            dst = cache_dir / entry.name
            if not entry.is_dir() or dst.exists() or _counted(entry):
                continue
            dst.mkdir(parents=True)
            for f in entry.iterdir():
                try:
                    os.link(f, dst / f.name)
                except OSError:  # another filesystem: a copy will do
                    (dst / f.name).write_bytes(f.read_bytes())
            added += 1
    return added
