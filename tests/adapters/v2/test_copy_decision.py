"""The copy decision comes from the draft decode backend object a v2 release really builds, never
from a process-wide accessor (0.5.23 retired ``get_global_server_args``: it always raises).

- On the parsed wheels of 0.5.13.post1, 0.5.15.post1, 0.5.17 and 0.5.23: SGLang's
  ``DraftBackendFactory`` builds, for flashinfer, triton and fa3, exactly the classes
  ``backends.READERS`` names, and the draft worker's ``init_attention_backend`` (the warm-up's
  hook point) stores that object on its draft runner, where the decision reads it.
- On 0.5.23 as installed: objects of its real backend classes (``object.__new__``: the decision
  reads the class and the per-step backends' ``dcp_size``, nothing a constructor needs a GPU for)
  on a real pool, through the duplication hook itself: flashinfer and triton launch nothing,
  fa3 copies exactly as SGLang's function does. The other releases' attention modules do not
  import beside 0.5.23's transformers (their model configs register names it already has): their
  classes are checked on the parsed wheels only.
"""

import ast
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import v2_support as support

support.require_sglang()

import torch  # noqa: E402
from sglang.srt.layers.attention import flashattention_backend as fa3b  # noqa: E402
from sglang.srt.layers.attention import flashinfer_backend as fib  # noqa: E402
from sglang.srt.layers.attention import triton_backend as trb  # noqa: E402
from sglang.srt.speculative import eagle_worker_common as ewc  # noqa: E402

from sglang_eagle_paged.adapters.v2 import backends, draft_plan, draft_step, warm_up  # noqa: E402
from sglang_eagle_paged.settings import Mode  # noqa: E402

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[3]
WHEELS = Path(os.environ.get("SGLANG_WHEELS", REPO / ".sglang-wheels"))
# The wheels scripts/fetch_sglang_wheels.sh fetches, and any other v2 release unpacked beside them
# (RELEASES="0.5.14 0.5.16 ..." scripts/fetch_sglang_wheels.sh).
WHEEL_RELEASES = sorted({"0.5.13.post1", "0.5.15.post1", "0.5.17", "0.5.23"}
                        | {d.name for d in WHEELS.glob("0.5.*") if (d / ".unpacked").is_file()})
SGLANG_FN = ewc.duplicate_prefix_tail_to_draft_branches
# The factory method that builds each backend's multi-step draft decode object.
FACTORY_METHOD = {"flashinfer": "_create_flashinfer_decode_backend", "triton": "_create_triton_decode_backend",
                  "fa3": "_create_fa_decode_backend"}


def _tree(version, module):
    path = WHEELS / version / (module.replace(".", "/") + ".py")
    if not path.is_file():
        pytest.skip(f"{path} missing: run scripts/fetch_sglang_wheels.sh")
    return ast.parse(path.read_text())


def _method(tree, cls, name):
    c = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(n for n in c.body if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.parametrize("version", WHEEL_RELEASES)
def test_each_release_builds_the_classes_the_decision_knows(version):
    factory = _tree(version, "sglang.srt.speculative.draft_utils")
    for path, (name, _reads, _why) in backends.READERS.items():
        module, cls = path.rsplit(".", 1)
        imports = [(n.module, a.name) for n in ast.walk(_method(factory, "DraftBackendFactory", FACTORY_METHOD[name]))
                   if isinstance(n, ast.ImportFrom) for a in n.names]
        assert (module, cls) in imports, (name, imports)
        defined = _tree(version, module)
        assert any(isinstance(n, ast.ClassDef) and n.name == cls for n in defined.body), path  # qualname == name
    # the draft worker stores that object on the runner whose pool the duplication is handed
    worker = _tree(version, "sglang.srt.speculative.eagle_worker_v2")
    init = _method(worker, "EagleDraftWorker", "init_attention_backend")
    stores = [ast.unparse(t) for n in ast.walk(init) if isinstance(n, ast.Assign) for t in n.targets]
    assert "self.draft_runner.draft_attn_backend" in stores, stores


def _decide(backend):
    pool = support.make_pool(4, 64)
    plan = draft_plan.record(pool, SimpleNamespace(draft_attn_backend=backend, token_to_kv_pool=pool))
    return backends.CopyDecision(plan.copy != draft_plan.SKIP, plan.reason, plan.in_place)


@pytest.mark.parametrize("cls,copies", [(fib.FlashInferMultiStepDraftBackend, False),
                                        (trb.TritonMultiStepDraftBackend, False),
                                        (fa3b.FlashAttentionMultiStepBackend, True)])
def test_real_backend_classes_of_0_5_23_decide(cls, copies, monkeypatch):
    monkeypatch.delenv("SGLANG_USE_HND_KVCACHE", raising=False)
    decision = _decide(object.__new__(cls))
    # a bare backend object: no FA3 step marked for reading in place, so no decision says in place
    assert decision.copy is copies and not decision.in_place and decision.reason and "\n" not in decision.reason


def test_what_the_proof_does_not_cover_copies(monkeypatch):
    monkeypatch.delenv("SGLANG_USE_HND_KVCACHE", raising=False)
    sub = type("MyTritonDraft", (trb.TritonMultiStepDraftBackend,), {})  # a subclass may read otherwise
    assert _decide(object.__new__(sub))[0] is True
    assert _decide(None)[0] is True  # steps <= 1: no multi-step draft decode backend
    dcp = object.__new__(trb.TritonMultiStepDraftBackend)
    step = object.__new__(trb.TritonAttnBackend)
    step.dcp_size = 2
    dcp.attn_backends = [step]
    assert "context parallelism" in _decide(dcp)[1]
    monkeypatch.setenv("SGLANG_USE_HND_KVCACHE", "1")
    assert _decide(object.__new__(trb.TritonMultiStepDraftBackend))[0] is True
    unrecorded = support.make_pool(4, 64)  # no warm-up ran for it
    assert draft_plan.current(unrecorded).copy != draft_plan.SKIP


def test_0_5_23_retired_the_process_accessor():
    # why the decision cannot come from it: the accessor the old decision asked always raises here
    from sglang.srt.server_args import get_global_server_args

    with pytest.raises(RuntimeError, match="retired"):
        get_global_server_args()


@pytest.mark.parametrize("cls,copies", [(trb.TritonMultiStepDraftBackend, False),
                                        (fib.FlashInferMultiStepDraftBackend, False),
                                        (fa3b.FlashAttentionMultiStepBackend, True)])
def test_the_hook_decides_from_the_runners_backend(cls, copies, monkeypatch, caplog):
    monkeypatch.delenv("SGLANG_USE_HND_KVCACHE", raising=False)
    page, topk, steps, seq = 4, 3, 2, [5, 6, 7]
    pool, rows = support.layout_rows(seq, page, topk, steps, seed=3)
    support.fill_random(pool, 3)
    runner = SimpleNamespace(draft_attn_backend=object.__new__(cls), token_to_kv_pool=pool,
                             req_to_token_pool=SimpleNamespace(req_to_token=rows))
    # as a server: the warm-up hook runs after the draft worker's init_attention_backend
    warm_up.after_hook(None, SimpleNamespace(topk=topk, draft_runner=runner))
    args = support.draft_args(seq, page, steps)
    start = support.snapshot(pool)
    SGLANG_FN(pool, rows, *args, topk, page)
    theirs = support.snapshot(pool)
    support.restore(pool, start)
    hook = draft_step.duplication_hook(Mode.ON)  # the decision a server runs: no test double
    with support.observe() as (_probe, launches), caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        hook(SGLANG_FN, pool, rows, *args, topk, page)
    want = theirs if copies else start
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(want, support.snapshot(pool)))
    assert launches == (["_duplicate_prefix_tail_kernel"] if copies else [])
    # SGLang swaps the runner's backend when its step configuration changes: decided again
    plan = draft_plan.current(pool)
    runner.draft_attn_backend = None
    assert draft_plan.current(pool) is not plan and draft_plan.current(pool).copy == draft_plan.OURS
