"""The ServerArgs gate: which attention backends may draft a paged EAGLE tree.

Two levels:

- the hook itself (``refusal`` / ``spec_args_hook``) on a namespace, with a fake
  ``original`` that records what SGLang's check would have seen;
- real ``ServerArgs(...)`` construction on CPU with the embedded testbed pair, in a
  subprocess (stock first, then after ``plugin.register()``). This works on CPU for
  triton, fa3, flashinfer, flashmla and cutlass_mla; ``trtllm_mla`` / ``trtllm_mha``
  are refused by SGLang's own "Blackwell only" check in ``__post_init__`` before
  ``_handle_speculative_decoding`` runs, so for those only the hook-level tests apply.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglang_eagle_paged.adapters.v1 import server_args_gate as gate

ROOT = Path(__file__).resolve().parents[3]
OPT_IN = gate.ALLOW_TRITON_ENV


def args(backend="triton", topk=8, page=64, algo="EAGLE", decode=None, prefill=None):
    return SimpleNamespace(
        speculative_algorithm=algo, speculative_eagle_topk=topk, page_size=page,
        attention_backend=backend, decode_attention_backend=decode, prefill_attention_backend=prefill,
    )


class Original:
    """Stands in for SGLang's ``_handle_speculative_decoding``: records the backend it saw."""

    def __init__(self, raises=None, set_backend=None):
        self.seen, self.raises, self.set_backend = [], raises, set_backend

    def __call__(self, a):
        self.seen.append(a.attention_backend)
        if self.set_backend:
            a.attention_backend = self.set_backend
        if self.raises:
            raise self.raises
        return "done"


# --- refusal ------------------------------------------------------------------------------

def spec_args_hook(original, a):
    """The hook as the plugin builds it from this process's settings."""
    from sglang_eagle_paged import settings

    return gate.spec_args_hook(settings.current().allow_triton)(original, a)


@pytest.mark.parametrize("backend", sorted(gate.NO_PER_BRANCH_PAGE_TABLE))
@pytest.mark.parametrize("where", ["attention", "decode", "prefill"])
def test_refused_backends_name_backend_and_alternatives(backend, where):
    a = args(**{"attention": {"backend": backend}, "decode": {"backend": "fa3", "decode": backend},
                "prefill": {"backend": "fa3", "prefill": backend}}[where])
    reason = gate.refusal(a)
    flag = {"attention": "--attention-backend", "decode": "--decode-attention-backend",
            "prefill": "--prefill-attention-backend"}[where]
    assert reason and f"{flag} {backend}" in reason
    assert "fa3 or flashinfer" in reason and gate.ALLOW_TRITON_ENV in reason and "--speculative-eagle-topk 8" in reason and "--page-size 64" in reason
    orig = Original()
    with pytest.raises(ValueError, match=rf"^\[sglang-eagle-paged\] {flag} {backend} "):
        spec_args_hook(orig, a)
    assert orig.seen == []  # SGLang's own check is not reached


@pytest.mark.parametrize("a", [
    args("flashmla", topk=1), args("trtllm_mha", topk=1), args("cutlass_mla", page=1), args("flashmla", page=None),
    args("trtllm_mla", algo=None), args("flashmla", algo="NGRAM"), args("flashmla", topk=None),
    args("fa3"), args("flashinfer"), args("triton"),
], ids=lambda a: f"{a.attention_backend}-topk{a.speculative_eagle_topk}-page{a.page_size}-{a.speculative_algorithm}")
def test_not_refused(a):
    assert gate.refusal(a) is None


@pytest.mark.parametrize("algo", ["eagle", "EAGLE3", "standalone"])
def test_all_eagle_algorithms_are_gated(algo):
    assert gate.refusal(args("flashmla", algo=algo))


# --- what SGLang's check sees ---------------------------------------------------------------

@pytest.mark.parametrize("a", [args("fa3"), args("flashinfer"), args("triton", topk=1), args("triton", page=1),
                               args("flashmla", topk=1), args("trtllm_mha", page=1)])
def test_unaffected_configs_pass_through(monkeypatch, a):
    monkeypatch.setenv(OPT_IN, "1")
    before = a.attention_backend
    orig = Original()
    assert spec_args_hook(orig, a) == "done"
    assert orig.seen == [before] and a.attention_backend == before


def test_triton_without_opt_in_is_sglangs_decision(monkeypatch):
    monkeypatch.delenv(OPT_IN, raising=False)
    orig = Original()
    a = args("triton")
    spec_args_hook(orig, a)
    assert orig.seen == ["triton"] and a.attention_backend == "triton"


@pytest.mark.parametrize("value,allowed", [("0", False), ("off", False), ("", False), ("1", True), ("true", True),
                                           ("yes", True)])
def test_triton_opt_in_takes_the_one_boolean_rule(monkeypatch, value, allowed):
    monkeypatch.setenv(OPT_IN, value)
    orig = Original()
    spec_args_hook(orig, args("triton"))
    assert orig.seen == (["flashinfer"] if allowed else ["triton"])


def test_triton_opt_in_masked_for_sglang_and_restored(monkeypatch):
    monkeypatch.setenv(OPT_IN, "1")
    orig = Original()
    a = args("triton")
    assert spec_args_hook(orig, a) == "done"
    assert orig.seen == ["flashinfer"] and a.attention_backend == "triton"


def test_triton_restored_when_sglang_raises(monkeypatch):
    monkeypatch.setenv(OPT_IN, "1")
    a = args("triton")
    with pytest.raises(RuntimeError, match="boom"):
        spec_args_hook(Original(raises=RuntimeError("boom")), a)
    assert a.attention_backend == "triton"


def test_backend_chosen_by_sglang_is_kept(monkeypatch):
    monkeypatch.setenv(OPT_IN, "1")
    a = args("triton")
    spec_args_hook(Original(set_backend="fa3"), a)
    assert a.attention_backend == "fa3"


@pytest.mark.parametrize("attr,flag,value", [
    ("page_size", "--page-size", 0), ("page_size", "--page-size", -16),
    ("speculative_eagle_topk", "--speculative-eagle-topk", 0), ("speculative_num_steps", "--speculative-num-steps", 0),
    ("speculative_num_draft_tokens", "--speculative-num-draft-tokens", -1),
])
def test_non_positive_tree_settings_refused_after_sglangs_defaults(attr, flag, value):
    a = args(backend="fa3", topk=8, page=64)
    a.speculative_num_steps, a.speculative_num_draft_tokens = 5, 64
    setattr(a, attr, value)
    with pytest.raises(ValueError, match=f"{flag} {value} is invalid"):
        spec_args_hook(Original(), a)


def test_valid_and_unset_tree_settings_pass():
    a = args(backend="fa3", topk=8, page=64)
    a.speculative_num_steps, a.speculative_num_draft_tokens = 5, None
    assert spec_args_hook(Original(), a) == "done"
    n = args(backend="fa3", algo=None, page=0)  # no speculation: not ours to judge
    assert spec_args_hook(Original(), n) == "done"


# --- real ServerArgs on CPU -------------------------------------------------------------------

SCRIPT = r"""
import json, os, pathlib, sys
import sglang_eagle_paged
from sglang.srt.server_args import ServerArgs
tb = pathlib.Path(sglang_eagle_paged.__file__).parent / "testbed"
CASES = [("triton", 8, 64), ("triton", 1, 64), ("triton", 8, 1), ("fa3", 8, 64), ("flashinfer", 8, 64),
         ("flashmla", 8, 64), ("flashmla", 1, 64), ("cutlass_mla", 8, 128), ("cutlass_mla", 1, 128),
         ("fa3", 8, 0), ("fa3", 0, 64)]

def build(backend, topk, page):
    try:
        a = ServerArgs(model_path=str(tb / "target"), speculative_algorithm="EAGLE",
                       speculative_draft_model_path=str(tb / "draft"), speculative_eagle_topk=topk,
                       speculative_num_steps=5, speculative_num_draft_tokens=64 if topk > 1 else 6,
                       page_size=page, attention_backend=backend, device="cpu")
        return {"ok": True, "backend": a.attention_backend, "page": a.page_size, "topk": a.speculative_eagle_topk}
    except ValueError as e:
        return {"ok": False, "error": str(e)}

def sweep():
    return {f"{b}-{t}-{p}": build(b, t, p) for b, t, p in CASES}

# the opt-in is read once, when the plugin registers: one interpreter per setting
suffix = "_opt_in" if os.environ.get("SGLANG_EAGLE_PAGED_ALLOW_TRITON") else ""
out = {"stock" + suffix: sweep()}
from sglang_eagle_paged import plugin
plugin.register()
assert plugin.active_mode() == "on", plugin.active_mode()
out["ours" + suffix] = sweep()
print("RESULT " + json.dumps(out))
"""

SGLANG_REFUSAL = "speculative_eagle_topk > 1 with page_size > 1 is unstable"


@pytest.fixture(scope="module")
def real():
    env = {k: v for k, v in os.environ.items() if k not in ("SGLANG_EAGLE_PAGED", "SGLANG_PLUGINS", OPT_IN)}
    env["TRITON_INTERPRET"] = "1"
    out = {}
    for extra in ({}, {OPT_IN: "1"}):
        p = subprocess.run([sys.executable, "-c", SCRIPT], env={**env, **extra}, cwd=ROOT, capture_output=True,
                           text=True, timeout=240)
        lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
        assert p.returncode == 0 and lines, p.stdout + p.stderr[-3000:]
        out.update(json.loads(lines[-1][len("RESULT "):]))
    return out


def test_real_non_positive_values_pass_stock_sglang_and_are_refused_with_plugin(real):
    assert real["stock"]["fa3-8-0"]["ok"] and real["stock"]["fa3-0-64"]["ok"]  # SGLang accepts them
    assert "--page-size 0 is invalid" in real["ours"]["fa3-8-0"]["error"]
    assert "--speculative-eagle-topk 0 is invalid" in real["ours"]["fa3-0-64"]["error"]


def test_real_triton_refused_by_stock_sglang(real):
    for run in ("stock", "stock_opt_in"):
        r = real[run]["triton-8-64"]
        assert not r["ok"] and SGLANG_REFUSAL in r["error"]


def test_real_triton_accepted_with_plugin_and_opt_in(real):
    assert real["ours_opt_in"]["triton-8-64"] == {"ok": True, "backend": "triton", "page": 64, "topk": 8}


def test_real_triton_without_opt_in_keeps_sglang_refusal(real):
    r = real["ours"]["triton-8-64"]
    assert not r["ok"] and SGLANG_REFUSAL in r["error"]


@pytest.mark.parametrize("case,backend", [("flashmla-8-64", "flashmla"), ("cutlass_mla-8-128", "cutlass_mla")])
def test_real_mla_refused_with_our_message(real, case, backend):
    for run in ("stock", "stock_opt_in"):
        assert SGLANG_REFUSAL in real[run][case]["error"]
    for run in ("ours", "ours_opt_in"):
        r = real[run][case]
        assert not r["ok"] and r["error"].startswith(f"[sglang-eagle-paged] --attention-backend {backend} ")
        assert "fa3 or flashinfer" in r["error"]


@pytest.mark.parametrize("case", ["triton-1-64", "triton-8-1", "fa3-8-64", "flashinfer-8-64", "flashmla-1-64",
                                  "cutlass_mla-1-128"])
def test_real_unaffected_configs_identical(real, case):
    assert real["stock"][case]["ok"], real["stock"][case]
    assert real["stock"][case] == real["stock_opt_in"][case] == real["ours"][case] == real["ours_opt_in"][case]
