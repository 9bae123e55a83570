"""doctor's kernel self-test passes on the real kernels and fails on a broken one."""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from sglang_eagle_paged.tools import doctor  # noqa: E402
import sglang_eagle_paged.kernels  # noqa: E402,F401  (loads the kernel modules)


def test_self_test_passes_on_the_real_kernels():
    assert doctor._self_test("cpu") == ""


def _module(name):
    # kernels/__init__ exports functions named like their modules: reach the modules themselves
    return sys.modules[f"sglang_eagle_paged.kernels.{name}"]


def test_a_one_pass_move_is_caught(monkeypatch):
    move_rows = _module("move_rows")
    real = move_rows.move_kv_rows

    def one_pair_at_a_time(table, tgt, src, chunk=256):  # reads after earlier writes
        for i in range(tgt.numel()):
            real(table, tgt[i:i + 1], src[i:i + 1], chunk)

    monkeypatch.setattr(move_rows, "move_kv_rows", one_pair_at_a_time)
    assert "post-verify move" in doctor._self_test_move("cpu")


@pytest.mark.parametrize("arg,delta", [(10, 1), (8, -1)])  # decode_length, max_seq_pages
def test_wrong_fa3_metadata_is_caught(monkeypatch, arg, delta):
    module = _module("draft_decode_metadata")
    real = module.draft_decode_metadata

    def off(*args):
        args = list(args)
        args[arg] += delta
        return real(*args)

    monkeypatch.setattr(module, "draft_decode_metadata", off)
    assert "FA3 draft metadata" in doctor._self_test_fa3_metadata("cpu")


@pytest.mark.parametrize("field", ["seq_lens", "last_loc"])
def test_wrong_tree_extension_is_caught(monkeypatch, field):
    module = _module("tree_extension")
    real = module.tree_extension

    def off(*args):
        out = real(*args)
        return out._replace(**{field: getattr(out, field) + 1})

    monkeypatch.setattr(module, "tree_extension", off)
    assert "tree-extension kernel" in doctor._self_test_tree_extension("cpu")


@pytest.mark.parametrize("shift", [1, -1])
def test_wrong_free_page_assignment_is_caught(monkeypatch, shift):
    """The draft step's one launch on the free-list path: a free list read one page off either way."""
    module = _module("assign")
    real = module.assign_tree_draft_slots_from_free_pages

    def off(rows, req_to_token, seq_lens, free_pages, *rest):
        return real(rows, req_to_token, seq_lens, free_pages.roll(shift), *rest)

    monkeypatch.setattr(module, "assign_tree_draft_slots_from_free_pages", off)
    assert "free-page assignment kernel" in doctor._self_test_tree_alloc("cpu")


def test_wrong_verify_bookkeeping_is_caught(monkeypatch):
    """The paged verify's bookkeeping kernel, freeing one slot too many."""
    module = _module("verify_bookkeeping")
    real = module.src_and_free_counts

    def one_more(*args):
        src, tgt, free = real(*args)
        return src, tgt, free + 1

    monkeypatch.setattr(module, "src_and_free_counts", one_more)
    assert "verify bookkeeping kernel" in doctor._self_test("cpu")
