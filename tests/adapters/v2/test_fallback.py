"""A failure on our path never reaches SGLang's scheduler: that call runs SGLang's own function,
our path is switched off for the process with one ERROR line, and the KV ends exactly as SGLang's
function leaves it. A kernel that fails at warm-up switches our path off before serving.

Failures are made in our own code (our module attributes: the buffer-table verdict, the kernel
launch), never by replacing SGLang's functions."""

import logging
from types import SimpleNamespace

import pytest

import v2_support as support

support.require_sglang()

import torch  # noqa: E402
from sglang.srt.speculative import eagle_worker_common as ewc  # noqa: E402

from sglang_eagle_paged.adapters.common import fa3_metadata  # noqa: E402
from sglang_eagle_paged.adapters.v2 import draft_step, fa3_in_place, fault, pools, warm_up  # noqa: E402
from sglang_eagle_paged.kernels.prefix_tail import duplicate_prefix_tail  # noqa: E402
from sglang_eagle_paged.settings import Mode  # noqa: E402

torch.set_num_threads(1)
SGLANG_FN = ewc.duplicate_prefix_tail_to_draft_branches
PAGE, TOPK, STEPS, SEQ = 4, 3, 2, [5, 6, 7]


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(fault.SWITCH, "reason", None)


def _layout():
    pool, rows = support.layout_rows(SEQ, PAGE, TOPK, STEPS, seed=4)
    support.fill_random(pool, 4)
    args = support.draft_args(SEQ, PAGE, STEPS)
    start = support.snapshot(pool)
    SGLANG_FN(pool, rows, *args, TOPK, PAGE)
    theirs = support.snapshot(pool)
    support.restore(pool, start)
    return pool, rows, args, theirs


def _half_then_fail(table, rows, prefix_base, last_page, num_new_pages, topk, page_size):
    # our kernel copies half the batch's tails, then the launcher fails: a partial write before the error
    n = max(1, rows.shape[0] // 2)
    duplicate_prefix_tail(table, rows[:n], prefix_base[:n], last_page[:n], num_new_pages[:n], topk, page_size)
    raise RuntimeError("launch failed")


def _raise(*_a, **_k):
    raise RuntimeError("broken on purpose")


def _raise_value(*_a, **_k):  # a bad argument or shape check of ours
    raise ValueError("broken on purpose")


def _raise_key(*_a, **_k):  # a cache lookup of ours
    raise KeyError("broken on purpose")


@pytest.mark.parametrize("module,attr,fn,kind", [
    (pools, "decline_reason", _raise, "RuntimeError"),              # building the verdict / buffer table
    (draft_step, "duplicate_prefix_tail", _raise, "RuntimeError"),   # the launch (compile errors included)
    (draft_step, "duplicate_prefix_tail", _half_then_fail, "RuntimeError"),
    # not only RuntimeError: whatever our path raises must stay out of SGLang's scheduler
    (pools, "decline_reason", _raise_value, "ValueError"),
    (draft_step, "duplicate_prefix_tail", _raise_key, "KeyError"),
], ids=["verdict", "launch", "partial-launch", "verdict-ValueError", "launch-KeyError"])
def test_a_failure_on_our_path_falls_back_to_sglang_and_switches_off(module, attr, fn, kind, fresh, monkeypatch,
                                                                      caplog):
    calls = []

    def broken(*a, **k):
        calls.append(1)
        return fn(*a, **k)

    monkeypatch.setattr(module, attr, broken)
    pool, rows, args, theirs = _layout()
    hook = draft_step.duplication_hook(Mode.ON)  # no draft runner recorded for the pool: it copies
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        assert hook(SGLANG_FN, pool, rows, *args, TOPK, PAGE) is None
        got = support.snapshot(pool)
        support.fill_random(pool, 9)
        hook(SGLANG_FN, pool, rows, *args, TOPK, PAGE)  # switched off: ours is not tried again
    for a, b in zip(theirs, got):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    assert len(calls) == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "switched off" in errors[0].getMessage() and kind in errors[0].getMessage()
    assert fault.SWITCH


def test_a_kernel_failing_at_warm_up_switches_our_path_off_before_serving(fresh, monkeypatch, caplog):
    def compile_error(*_a, **_k):
        raise RuntimeError("triton compilation failed")

    monkeypatch.setattr(warm_up, "compile_prefix_tail", compile_error)
    pool, rows, args, theirs = _layout()
    worker = SimpleNamespace(topk=TOPK, draft_runner=SimpleNamespace(
        token_to_kv_pool=pool, req_to_token_pool=SimpleNamespace(req_to_token=rows)))
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        assert warm_up.after_hook("result", worker) == "result"  # start-up goes on
        warm_up.after_hook("result", worker)  # another draft worker's warm-up fails alike: said once
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "warm-up" in errors[0].getMessage()
    # every v2 path of ours is off: FA3's metadata is SGLang's, and fa3 in place gives the copy back
    assert fault.SWITCH
    from sglang.srt.layers.attention import flashattention_backend as fa3b

    multi = object.__new__(fa3b.FlashAttentionMultiStepBackend)
    multi.attn_backends = [SimpleNamespace(**{fa3_in_place.MARK: True})]  # as the init hook marks a covered one
    assert not fa3_in_place.reads_in_place(multi)
    with support.observe() as (_probe, launches):
        draft_step.duplication_hook(Mode.ON)(SGLANG_FN, pool, rows, *args, TOPK, PAGE)
    assert "_duplicate_prefix_tail_kernel" not in launches and launches  # SGLang's own copy ran
    for a, b in zip(theirs, support.snapshot(pool)):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
