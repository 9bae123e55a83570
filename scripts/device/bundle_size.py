"""How many device calls a bundle's pieces take, and (ESTIMATE=1 of make_bundle.sh) what its units come to.

    python bundle_size.py calls CAP_MIB FILE...          pieces -> total and calls (first fit, largest first)
    python bundle_size.py plan CAP_MIB DIR               each call's carry list (checksum lists in call 1)
    python bundle_size.py estimate PART_MIB CAP_MIB < LINES   "unit stored deflated xz1" per line -> table

The estimate scales each unit's whole xz -1 size by what -1 -> -9 (-9e for FA3) did to the 0.5.17
bundle's units, whose xz sizes are known (scripts/device/README.md has the figures). Samples of a unit
compressed at -9 predicted the 0.5.17 FA3 library's xz between half and one and a half times its real
size (its parts compress unevenly), so nothing here samples. The wheels' own deflate, kept members
only, is exact: what the bundle would be without recompression.
"""

import json
import os
import sys

MIB = 1024 * 1024


def calls(sizes, cap):
    """Calls of at most ``cap`` bytes each that carry every piece (first fit, largest first)."""
    bins = []
    for s in sorted(sizes, reverse=True):
        if s > cap:
            raise ValueError(f"a piece of {s} bytes does not fit a call of {cap}")
        for i, used in enumerate(bins):
            if used + s <= cap:
                bins[i] += s
                break
        else:
            bins.append(s)
    return len(bins)


def plan(named_sizes, cap, small=(), max_paths=8):
    """Calls as lists of names: pieces packed first fit, largest first, into ``cap`` bytes; the ``small``
    files (the checksum lists) go with the first call, which the device tool lets carry ``max_paths`` paths."""
    bins = []
    for name, size in sorted(named_sizes, key=lambda x: (-x[1], x[0])):
        if size > cap:
            raise ValueError(f"{name}: {size} bytes do not fit a call of {cap}")
        for b in bins:
            if b[0] + size <= cap and len(b[1]) < max_paths:
                b[0] += size
                b[1].append(name)
                break
        else:
            bins.append([size, [name]])
    calls_ = [sorted(names) for _, names in bins]
    if calls_ and len(calls_[0]) + len(small) > max_paths:
        raise ValueError(f"the first call would carry more than {max_paths} paths")
    return [sorted(small) + calls_[0], *calls_[1:]] if calls_ else [sorted(small)]


def pieces(nbytes, part):
    """Sizes of the pieces ``split -b part`` makes of ``nbytes``."""
    full, rest = divmod(nbytes, part)
    return [part] * full + ([rest] if rest else [])


# xz -9 / xz -1 over the 0.5.17 bundle's core (its wheels, stored), and xz -9e / xz -1 over its FA3
# library: a unit of Python wheels and one of CUDA kernels
SCALE = {"wheels": float(os.environ.get("XZ9_PER_XZ1", "0.823")),
         "kernels": float(os.environ.get("XZ9E_PER_XZ1_FA3", "0.598"))}


def estimate(rows):
    """[(unit, stored, deflated, xz1, estimated xz)] of "unit stored deflated xz1" lines."""
    out = []
    for line in rows:
        if not line.strip():
            continue
        unit, stored, deflated, xz1 = line.split()
        scale = SCALE["kernels" if unit == "fa3" else "wheels"]
        out.append((unit, int(stored), int(deflated), int(xz1), int(int(xz1) * scale)))
    return out


def main(argv):
    if argv[0] == "calls":
        cap = float(argv[1]) * MIB
        sizes = [os.path.getsize(f) for f in argv[2:]]
        print(f"{len(sizes)} pieces, {sum(sizes) / MIB:.1f} MiB: {calls(sizes, cap)} calls "
              f"of at most {argv[1]} MiB of pieces")
        return 0
    if argv[0] == "plan":  # plan CAP_MIB DIR: the carry list of each call, for scripts/device/README.md's recipe
        cap, folder = float(argv[1]) * MIB, argv[2].rstrip("/")
        names = sorted(os.listdir(folder))
        parts = [(n, os.path.getsize(os.path.join(folder, n))) for n in names if ".part" in n]
        small = [n for n in names if n.endswith(".sha256")]
        for i, call in enumerate(plan(parts, cap, small), 1):
            mib = sum(os.path.getsize(os.path.join(folder, n)) for n in call) / MIB
            print(f"call {i:2d} ({mib:5.1f} MiB): " + json.dumps([f"{folder}/{n}" for n in call]))
        return 0
    if argv[0] == "estimate":
        part, cap = int(float(argv[1]) * MIB), float(argv[2]) * MIB
        rows = estimate(sys.stdin)
        print(f"{'unit':8s} {'stored':>8s} {'deflate':>8s} {'xz -1':>8s} {'xz est':>8s}   MiB")
        for unit, stored, deflated, xz1, est in rows:
            print(f"{unit:8s} {stored / MIB:8.1f} {deflated / MIB:8.1f} {xz1 / MIB:8.1f} {est / MIB:8.1f}")
        tot = [sum(r[i] for r in rows) for i in range(1, 5)]
        print(f"{'total':8s} " + " ".join(f"{t / MIB:8.1f}" for t in tot))
        for unit, *sizes in rows + [("total", *tot)]:
            print(f"bytes {unit}: stored {sizes[0]} deflate {sizes[1]} xz-1 {sizes[2]} estimate {sizes[3]}")
        for what, col in (("as the wheels' deflate (exact)", 2), ("xz -1 (measured)", 3), ("xz as built (estimate)", 4)):
            ps = [p for r in rows for p in pieces(r[col], part)]
            print(f"{what}: {len(ps)} pieces, {sum(ps) / MIB:.0f} MiB: {calls(ps, cap)} calls of at most {argv[2]} MiB")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
