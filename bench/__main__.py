"""One entry to the lab: ``python -m bench NAME [ARGS...]`` runs ``bench/NAME.py`` as ``python -m
bench.NAME ARGS...`` does; without a name it lists them."""

import pkgutil
import runpy
import sys
from pathlib import Path


def tools() -> list:
    """The lab's runnable modules (read from their source: importing them all would load torch)."""
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.ispkg and not m.name.startswith("_")
                  and 'if __name__ == "__main__"' in (here / f"{m.name}.py").read_text())


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in tools():
        print("usage: python -m bench NAME [ARGS...]; NAME one of: " + ", ".join(tools()))
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    sys.argv = [f"bench.{argv[0]}", *argv[1:]]
    runpy.run_module(f"bench.{argv[0]}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
