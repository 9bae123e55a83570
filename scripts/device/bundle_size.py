"""How many device calls a bundle's pieces take, and (ESTIMATE=1 of make_bundle.sh) what xz would make of
its units without compressing them whole.

    python bundle_size.py calls CAP_MIB FILE...          pieces -> total and calls (first fit, largest first)
    python bundle_size.py plan CAP_MIB DIR               each call's carry list (checksum lists in call 1)
    python bundle_size.py estimate PRESET PART_MIB CAP_MIB UNIT=PATH...   sampled xz estimate per unit

The estimate compresses evenly spaced 4 MiB samples of each large member (an eighth of its bytes, at
least six samples) with the preset the build uses and applies each member's ratio to its whole size;
members under 16 MiB (and every member's tar header) are compressed together in full, or in twelve
samples where they add up to more than 48 MiB. Samples are compressed one by one, so
matches across samples are lost, and a library's parts compress unevenly: scripts/device/README.md has
the estimate against the real xz of the 0.5.17 bundle's units.
"""

import json
import lzma
import math
import os
import sys
import zipfile

MIB = 1024 * 1024
SAMPLE = 4 * MIB
LARGE = 16 * MIB


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


def _filters(preset):
    level = int(preset.strip("-e"))
    return [{"id": lzma.FILTER_LZMA2, "preset": level | (lzma.PRESET_EXTREME if preset.endswith("e") else 0)}]


def _xz_len(data, filters):
    return len(lzma.compress(data, format=lzma.FORMAT_XZ, filters=filters))


def _sampled(read_at, size, filters, k):
    """Compressed-size estimate of ``size`` bytes from ``k`` evenly spaced samples."""
    if size <= SAMPLE * k:
        return _xz_len(read_at(0, size), filters)
    step = (size - SAMPLE) // (k - 1)
    raw = comp = 0
    for i in range(k):
        chunk = read_at(i * step, SAMPLE)
        raw += len(chunk)
        comp += _xz_len(chunk, filters)
    return size * comp / raw


def _members(path):
    """(name, size, reader) of every file in a unit: a folder of wheels (their members) or a single file."""
    if os.path.isfile(path):
        def read(off, n, p=path):
            with open(p, "rb") as f:
                f.seek(off)
                return f.read(n)
        yield os.path.basename(path), os.path.getsize(path), read
        return
    for whl in sorted(os.listdir(path)):
        z = zipfile.ZipFile(os.path.join(path, whl))
        for info in z.infolist():
            if info.is_dir():
                continue

            def read(off, n, z=z, name=info.filename):
                with z.open(name) as f:  # stored members: seek is cheap
                    f.seek(off)
                    return f.read(n)
            yield f"{whl}:{info.filename}", info.file_size, read


def estimate_unit(path, preset, coverage=8):
    """(stored bytes, estimated xz bytes) of a unit; large members sampled over 1/``coverage`` of their bytes."""
    filters = _filters(preset)
    raw = est = 0.0
    small = []
    for name, size, read in _members(path):
        raw += size
        small.append(tar_header(name))  # the tar's headers go with the small members
        if size >= LARGE:
            est += _sampled(read, size, filters, max(6, math.ceil(size / (coverage * SAMPLE))))
        else:
            small.append(read(0, size))
    blob = b"".join(small)
    est += _sampled(lambda off, n: blob[off:off + n], len(blob), filters, 12)
    return int(raw), int(est)


def tar_header(name):
    """A stand-in for a member's 512-byte tar header: its name, zero-padded."""
    return name.encode()[:512].ljust(512, b"\0")


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
        preset, part, cap = argv[1], int(float(argv[2]) * MIB), float(argv[3]) * MIB
        every = []
        total_raw = total_est = 0
        print(f"{'unit':8s} {'stored MiB':>11s} {'xz MiB (est)':>13s} {'ratio':>6s} {'pieces':>6s}")
        for spec in argv[4:]:
            unit, path = spec.split("=", 1)
            unit_preset = "-9e" if unit == "fa3" else preset
            raw, est = estimate_unit(path, unit_preset)
            parts = pieces(est, part)
            every += parts
            total_raw += raw
            total_est += est
            print(f"{unit:8s} {raw / MIB:11.1f} {est / MIB:13.1f} {est / raw:6.3f} {len(parts):6d}  (xz {unit_preset})")
        print(f"total    {total_raw / MIB:11.1f} {total_est / MIB:13.1f} {total_est / total_raw:6.3f} {len(every):6d}")
        print(f"estimate: {len(every)} pieces, {total_est / MIB:.0f} MiB: {calls(every, cap)} calls of at most "
              f"{argv[3]} MiB of pieces ({math.ceil(total_est / cap)} if pieces packed perfectly)")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
