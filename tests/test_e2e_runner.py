"""The GPU suite's runner on the CPU: fake servers, real client, real bookkeeping.

The runner only ever ran on the H200 inside the suite; these tests keep a later
device session from spending its minutes on a bookkeeping bug.
"""

import json
from pathlib import Path

import pytest

from sglang_eagle_paged.bench import e2e
from test_bench_mtbench import QUESTIONS, fake_server  # noqa: F401  (fixture)


class FakeServer:
    """Stands in for ServerProcess: records its env and 'compiles' one kernel variant."""

    started = []

    def __init__(self, args, *, port, env, log_path, startup_timeout, base_url):
        self.args, self.env, self.base_url = args, env, base_url
        FakeServer.started.append(self)

    def __enter__(self):
        variant = Path(self.env["TRITON_CACHE_DIR"]) / "hash0"
        variant.mkdir(parents=True, exist_ok=True)
        (variant / "_duplicate_kv_kernel.json").write_text("{}")
        (variant / "__grp___duplicate_kv_kernel.json").write_text("{}")  # not a variant
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def questions(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return p


def test_run_configs_warms_up_measures_and_counts_variants(monkeypatch, tmp_path, questions, fake_server):  # noqa: F811
    url, _ = fake_server
    FakeServer.started = []
    monkeypatch.setattr(e2e, "ServerProcess", lambda args, **kw: FakeServer(args, base_url=url, **kw))
    configs = [e2e.RunConfig("nospec_p1", algorithm=None), e2e.RunConfig("on_p64", page_size=64, mode="on"),
               e2e.RunConfig("fake_p64", page_size=64, mode="fake")]
    out = tmp_path / "e2e.json"
    res = e2e.run_configs(configs, target="T", draft="D", out_json=str(out), log_dir=str(tmp_path / "logs"),
                          num_questions=2, question_file=str(questions), warmup=1, max_new_tokens=8)

    assert json.loads(out.read_text()) == res
    assert [s.env["SGLANG_EAGLE_PAGED"] for s in FakeServer.started] == ["on", "on", "fake"]
    assert len({s.env["TRITON_CACHE_DIR"] for s in FakeServer.started}) == 3  # fresh cache per server
    assert "--speculative-algorithm" not in FakeServer.started[0].args
    assert FakeServer.started[1].args[FakeServer.started[1].args.index("--page-size") + 1] == "64"
    for name in ("nospec_p1", "on_p64", "fake_p64"):
        rec = res[name]
        assert not rec.get("error"), rec
        assert rec["summary"]["num_requests"] == 4  # 2 measured questions x 2 turns, warm-up not counted
        assert set(rec["outputs"]) == {"1/1", "1/2", "2/1", "2/2"}
        assert rec["triton_variants_after_warmup"]["_duplicate_kv_kernel"] == 1
        assert rec["triton_variants_after_run"] == rec["triton_variants_after_warmup"]
    assert res["on_p64"]["summary"]["acceptance_length"] == pytest.approx(3.0)

    # A resumed run skips what was measured already.
    FakeServer.started = []
    e2e.run_configs(configs, target="T", draft="D", out_json=str(out), log_dir=str(tmp_path / "logs"),
                    num_questions=2, question_file=str(questions), warmup=1)
    assert FakeServer.started == []


def test_failed_start_is_recorded_not_raised(monkeypatch, tmp_path, questions):
    def boom(args, **kw):
        raise e2e.ServerStartError("server exited with code 1", "log tail here")

    monkeypatch.setattr(e2e, "ServerProcess", boom)
    res = e2e.run_configs([e2e.RunConfig("on_p64", page_size=64)], target="T", draft="D",
                          out_json=str(tmp_path / "e.json"), log_dir=str(tmp_path), num_questions=1,
                          question_file=str(questions), warmup=0)
    assert res["on_p64"]["error"].startswith("server exited with code 1") and res["on_p64"]["log_tail"] == "log tail here"


def test_agreement_counts_and_first_divergence():
    ref = {"1/1": "abcdef", "1/2": "same", "2/1": "xyz", "3/1": None}
    other = {"1/1": "abcXef", "1/2": "same", "2/1": "xyz", "3/1": "ignored", "4/1": "extra"}
    a = e2e.agreement(ref, other)
    assert (a["compared"], a["exact"]) == (3, 2)
    assert a["rate"] == pytest.approx(2 / 3)
    assert a["first_divergence"]["prompt"] == "1/1" and a["first_divergence"]["char"] == 3


def test_triton_variants_counts_only_named_kernel_files(tmp_path):
    for h, name in [("a", "_assign_tree_draft_slots_kernel"), ("b", "_assign_tree_draft_slots_kernel"),
                    ("c", "assign_draft_cache_locs"), ("d", "unrelated")]:
        (tmp_path / h).mkdir()
        (tmp_path / h / f"{name}.json").write_text("{}")
    counts = e2e.triton_variants(tmp_path)
    assert counts["_assign_tree_draft_slots_kernel"] == 2 and counts["assign_draft_cache_locs"] == 1
    assert counts["_duplicate_kv_kernel"] == 0 and "unrelated" not in counts
