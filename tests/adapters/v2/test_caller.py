"""SGLang 0.5.23's own paged-branch caller, ``prepare_for_draft``, calls our replacement once
the v2 hooks are installed through its HookRegistry, and the KV it leaves equals SGLang's.

Run in a fresh interpreter: the registry patches SGLang's module for the whole process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import v2_support as support

support.require_sglang()

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]

_PROBE = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from types import SimpleNamespace
import torch
import v2_support as support
from sglang.srt.speculative import eagle_worker_common as ewc
import sglang_eagle_paged.adapters.v2 as v2
from sglang_eagle_paged.adapters.v2 import draft_plan
from sglang_eagle_paged.hooks import install

original = ewc.duplicate_prefix_tail_to_draft_branches
page, topk, steps, seq = 8, 3, 4, [5, 9, 16, 1]
pool, rows = support.layout_rows(seq, page, topk, steps, seed=11)
support.fill_random(pool, 11)
start = support.snapshot(pool)
original(pool, rows, *support.draft_args(seq, page, steps), topk, page)
theirs = support.snapshot(pool)
support.restore(pool, start)

hooked = install(v2.hooks("on"), "SGLang 0.5.23")
calls = []
inner = draft_plan.current
def counting(*a, **k):
    calls.append(1)
    return inner(*a, **k)
draft_plan.current = counting

bs = len(seq)
batch = SimpleNamespace(
    forward_mode=SimpleNamespace(is_idle=lambda: False), seq_lens=torch.tensor(seq, dtype=torch.int64),
    seq_lens_cpu=torch.tensor(seq), token_to_kv_pool_allocator=SimpleNamespace(page_size=page),
    req_pool_indices=torch.arange(bs), device="cpu", multimodal_inputs=[None] * bs)
runner = SimpleNamespace(token_to_kv_pool=pool)
r2t = SimpleNamespace(req_to_token=rows)
error = None
with support.observe() as (probe, launches):
    try:
        ewc.prepare_for_draft(SimpleNamespace(), r2t, batch, None, runner, topk, steps)
    except Exception as exc:  # the stub batch carries only what the paged branch reads
        error = f"{type(exc).__name__}: {exc}"
ours = support.snapshot(pool)
same = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(theirs, ours))
changed = not all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(start, ours))
print("RESULT" + json.dumps(dict(hooked=hooked, calls=len(calls), same=same, changed=changed, error=error,
                                 out_cache_loc=batch.__dict__.get("out_cache_loc") is not None,
                                 launches=launches, reads=probe.reads)))
"""


def test_prepare_for_draft_calls_ours():
    env = dict(os.environ, TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, "-c", _PROBE, str(HERE), str(REPO / "tests")], capture_output=True,
                       text=True, env=env, timeout=400, cwd=REPO)
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT")]
    assert lines, p.stdout[-2000:] + p.stderr[-3000:]
    r = json.loads(lines[-1][len("RESULT"):])
    assert "sglang.srt.speculative.eagle_worker_common.duplicate_prefix_tail_to_draft_branches" in r["hooked"]
    assert r["out_cache_loc"], r  # the paged branch ran ...
    assert r["calls"] == 1, r     # ... and called our replacement, once
    assert r["same"] and r["changed"], r
    assert r["launches"].count("_duplicate_prefix_tail_kernel") == 1, r
