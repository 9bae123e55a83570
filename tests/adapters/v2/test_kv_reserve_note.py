"""The start-up line on SGLang's per-request KV reserve (kv_reserve_note.py), on SGLang 0.5.23's own
paged allocator and request pool on CPU; the draft worker is a namespace holding what the real
classes hold (checked on their source, every v2 release's wheel, at the end)."""

import v2_support as support

support.require_sglang()

import ast  # noqa: E402
import logging  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool  # noqa: E402

from sglang_eagle_paged.adapters.v2 import kv_reserve_note, warm_up  # noqa: E402


def _worker(page=64, size=131072, topk=8, steps=5, draft=64, max_running=None, rows=64):
    kv = MHATokenToKVPool(size, page, torch.bfloat16, 1, 1, 1, "cpu", enable_memory_saver=False,
                          enable_alt_stream=False, enable_kv_cache_copy=False)
    allocator = PagedTokenToKVPoolAllocator(size, page, torch.bfloat16, "cpu", kv, need_sort=False)
    return SimpleNamespace(topk=topk, speculative_num_steps=steps, speculative_num_draft_tokens=draft,
                           server_args=SimpleNamespace(max_running_requests=max_running),
                           token_to_kv_pool_allocator=allocator,
                           req_to_token_pool=ReqToTokenPool(rows, 64, "cpu", enable_memory_saver=False))


def test_the_line_says_what_the_pool_holds_once(caplog):
    w = _worker(page=64, size=131072, max_running=48)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        line = kv_reserve_note.note(w)
        assert kv_reserve_note.note(w) is None  # once per pool
    assert "keeps 2,048 KV slots free per running request" in line and "128 at page 1" in line
    assert "this pool's 131,072 slots hold that for 64 requests" in line
    assert [r.levelname for r in caplog.records] == ["INFO"] and caplog.records[0].getMessage() == line


def test_a_running_cap_the_pool_cannot_reserve_for_is_a_warning(caplog):
    w = _worker(page=128, size=131072, max_running=64)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        line = kv_reserve_note.note(w)
    assert "keeps 4,096 KV slots" in line and "hold that for 32 requests" in line
    assert line.endswith("--max-running-requests 64 needs 262,144 for the reserves alone")
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    # no cap given: the request pool's rows bound the running requests
    unset = _worker(page=128, size=131072, max_running=None, rows=48)
    assert "--max-running-requests 48 needs 196,608" in kv_reserve_note.note(unset)


def test_with_the_dense_layout_serving_the_line_says_page_1s_reserve(caplog, monkeypatch):
    """The pool a dense-layout server holds the reserve for (the figure `kv-size` prints in its dense
    columns): whether the layout serves is ours to say, so saying it here fakes nothing of SGLang's."""
    w = _worker(page=64, size=99968, max_running=64)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        line = kv_reserve_note.note(w, dense=True)
    assert "keeps 128 KV slots free per running request" in line and "(page 64, topk 8" in line
    assert "this pool's 99,968 slots hold that for 781 requests" in line
    assert [r.levelname for r in caplog.records] == ["INFO"]  # 64 x 128 fits: no warning
    per_branch = kv_reserve_note.note(_worker(page=64, size=99968, max_running=64))
    assert "keeps 2,048 KV slots" in per_branch and per_branch.endswith("needs 131,072 for the reserves alone")


def test_nothing_for_a_chain_page_1_or_a_worker_it_cannot_read(caplog):
    assert kv_reserve_note.note(_worker(topk=1)) is None
    assert kv_reserve_note.note(_worker(page=1)) is None
    broken = _worker()
    del broken.speculative_num_steps
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        assert kv_reserve_note.note(broken) is None
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]


def test_the_draft_workers_hook_notes_after_its_warm_ups(caplog, monkeypatch):
    w = _worker(page=64, size=65536, max_running=16)
    # our own steps of the hook, not SGLang's: this test is about the note's place in it
    monkeypatch.setattr(warm_up, "warm_up_worker", lambda worker, options: False)
    monkeypatch.setattr(warm_up.move_warm_up, "warm_up_worker", lambda worker: 0)
    monkeypatch.setattr(warm_up.alloc_warm_up, "warm_up_worker", lambda worker: 0)
    with caplog.at_level(logging.INFO, logger="sglang_eagle_paged"):
        assert warm_up.after_hook("result", w) == "result"
    assert any("hold that for 32 requests" in r.getMessage() for r in caplog.records)


WHEELS = Path(__file__).resolve().parents[3] / ".sglang-wheels"


@pytest.mark.parametrize("version", ["0.5.13.post1", "0.5.15.post1", "0.5.17", "0.5.23"])
def test_the_draft_worker_holds_what_the_note_reads(version):
    path = WHEELS / version / "sglang" / "srt" / "speculative" / "eagle_worker_v2.py"
    if not path.is_file():
        pytest.skip(f"{path} missing: run scripts/fetch_sglang_wheels.sh")
    cls = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == "EagleDraftWorker")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assigned = {t.attr for n in ast.walk(init) if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    assert {"topk", "speculative_num_steps", "speculative_num_draft_tokens", "server_args"} <= assigned
