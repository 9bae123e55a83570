"""Which symbols a wheel's shared libraries import that an older CUDA library wheel does not export.

    python lib_symbols.py USER_WHEEL OLD_LIB_WHEEL NEW_LIB_WHEEL [OLD NEW]...     (here: nm, no GPU)

For each pair: of the symbols USER_WHEEL's libraries import (nm -D --undefined-only) that NEW exports,
those OLD lacks. A library loaded with RTLD_NOW (CPython's extensions, torch's own libraries) fails on
the first: "undefined symbol". make_bundle_v3.sh's header has what it said of torch 2.14.1 against the
GPU machine's NCCL, cuDNN, cuBLAS and cuSPARSELt; the wheels come from `pip download --no-deps`.
"""

import os
import subprocess
import sys
import tempfile
import zipfile


def _symbols(path, undefined):
    flag = "--undefined-only" if undefined else "--defined-only"
    out = subprocess.run(["nm", "-D", flag, path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def _libraries(wheel, into):
    """Extract a wheel's shared libraries into ``into``; their paths."""
    paths = []
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if ".so" in os.path.basename(name) and not name.endswith("/"):
                paths.append(z.extract(name, into))
    return paths


def imports(paths):
    return set().union(*(_symbols(p, True) for p in paths)) if paths else set()


def exports(paths):
    return set().union(*(_symbols(p, False) for p in paths)) if paths else set()


def missing(user_imports, old_exports, new_exports):
    """(symbols the user takes from the new library, those the old one lacks, sorted)."""
    wanted = user_imports & new_exports
    return wanted, sorted(wanted - old_exports)


def main(argv):
    if len(argv) < 3 or len(argv) % 2 == 0:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        user = imports(_libraries(argv[0], os.path.join(tmp, "user")))
        for i in range(1, len(argv), 2):
            old, new = argv[i], argv[i + 1]
            wanted, lacks = missing(user, exports(_libraries(old, os.path.join(tmp, f"old{i}"))),
                                    exports(_libraries(new, os.path.join(tmp, f"new{i}"))))
            print(f"{os.path.basename(new)}: {len(wanted)} symbols imported; {os.path.basename(old)} lacks "
                  f"{len(lacks)}{': ' + ', '.join(lacks) if lacks else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
