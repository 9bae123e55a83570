"""``sglang-eagle-paged`` console script: one sub-command per module."""

import argparse
import importlib
import sys

DESCRIPTION = ("EAGLE tree speculative decoding on a paged KV cache for SGLang. The plugin loads "
               "itself into SGLang's server; these commands check it, show it working and benchmark it.")

# name -> (module, help). Each module exposes add_arguments(parser) and run(args).
# Imported lazily so that ``doctor`` works even when another part cannot import.
SUBCOMMANDS = {
    "doctor": ("sglang_eagle_paged.tools.doctor", "check versions, hooks, mode and run a kernel self-test"),
    "demo": ("sglang_eagle_paged.tools.cpu_demo", "run the real duplication path on SGLang's pools and show the page layout"),
    "bench": ("sglang_eagle_paged.bench.mtbench", "MT-bench acceptance and throughput against a running server "
                                                  "(needs the bench extra)"),
    "serve-default": ("sglang_eagle_paged.bench.default_run", "launch SGLang on the embedded model pair (GPU, from a "
                                                              "checkout) and benchmark it"),
    "kv-size": ("sglang_eagle_paged.tools.kv_size", "the KV pool a server needs for its running requests at "
                                                    "each page size (SGLang's per-request reserve)"),
    "patch": ("sglang_eagle_paged.tools.patching", "make an older SGLang release load this plugin"),
}


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, where it has one worth showing."""

    def _get_help_string(self, action):
        help_text = action.help or ""
        default = action.default
        # flags (nargs 0) take no value: their "default" is the group's, not theirs to show
        if ("%(default)" in help_text or default in (None, argparse.SUPPRESS) or action.nargs == 0
                or not action.option_strings or "default:" in help_text):
            return help_text
        return f"{help_text} (default: %(default)s)" if help_text else "(default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """A bad value is one line naming the option and what it must be: argparse's usage block before
    it (twenty lines for ``bench``) would bury it. Sub-command parsers are of this class too."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = Parser(prog="sglang-eagle-paged", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=HelpFormatter)
        p.set_defaults(_module=module)
        try:
            importlib.import_module(module).add_arguments(p)
        except ImportError as exc:
            p.set_defaults(_import_error=exc)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "_import_error", None) is not None:
        print(f"sglang-eagle-paged {args.command}: unavailable ({args._import_error})", file=sys.stderr)
        return 2
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
