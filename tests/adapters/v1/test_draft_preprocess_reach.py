"""Every v1 worker that drafts a tree reaches our hooked method (checked on the installed SGLang).
Run in the v1 environment (tests/adapters/v1 is run there by scripts/test.sh)."""

import subprocess
import sys

SCRIPT = r"""
import inspect
from sglang_eagle_paged import plugin
plugin.register()
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.standalone_worker import StandaloneWorker
import importlib.util, pathlib
hooked = EAGLEWorker._draft_preprocess_decode
assert hasattr(hooked, "__wrapped__"), "not hooked"
# STANDALONE inherits the method from EAGLEWorker
assert StandaloneWorker._draft_preprocess_decode is hooked
# multi-layer EAGLE is not a subclass, but calls the base method by name at run time.
# Read as text: on a CPU its module does not import (an annotation names ModelRunner,
# which SGLang 0.5.12.post1 imports only for type checking there).
spec = importlib.util.find_spec("sglang.srt.speculative.multi_layer_eagle_worker")
src = pathlib.Path(spec.origin).read_text()
body = src[src.index("def _draft_preprocess_decode"):]
body = body[:body.index("\n    def ", 10)]
assert "EAGLEWorker._draft_preprocess_decode(self, batch)" in body, body
print("OK")
"""


def test_standalone_and_multilayer_reach_our_method():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-3000:]
