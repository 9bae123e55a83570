#!/usr/bin/env python
"""Run the MT-bench benchmark from a source checkout: same as ``sglang-eagle-paged bench``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_eagle_paged.tools.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
