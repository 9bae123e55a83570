"""``sglang-eagle-paged`` console script: one sub-command per module."""

import argparse
import importlib
import sys

# name -> (module, help). Each module exposes add_arguments(parser) and run(args).
# Imported lazily so that ``doctor`` works even when another part cannot import.
SUBCOMMANDS = {
    "doctor": ("sglang_eagle_paged.tools.doctor", "check versions, hooks, mode and run a kernel self-test"),
    "demo": ("sglang_eagle_paged.tools.cpu_demo", "run the real duplication path on SGLang's pools and show the page layout"),
    "bench": ("sglang_eagle_paged.bench.mtbench", "MT-bench acceptance and throughput against a server"),
    "serve-default": ("sglang_eagle_paged.bench.default_run", "launch the embedded default model pair and benchmark it"),
    "patch": ("sglang_eagle_paged.tools.patching", "make an older SGLang release load this plugin"),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="sglang-eagle-paged")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module)
        try:
            importlib.import_module(module).add_arguments(p)
        except ImportError as exc:
            p.set_defaults(_import_error=exc)
    args = parser.parse_args(argv)
    if getattr(args, "_import_error", None) is not None:
        print(f"sglang-eagle-paged {args.command}: unavailable ({args._import_error})", file=sys.stderr)
        return 2
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
