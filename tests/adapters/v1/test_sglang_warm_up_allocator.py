"""Start-up compilation of SGLang's paged ``alloc_extend`` kernel (allocator_warm_up.py): every
variant the allocator launches while serving must be one warm-up launched, on SGLang's real
allocator under the interpreter (which reports what a GPU launch would key its cache on)."""

import logging
import os
from types import SimpleNamespace

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.interpreter_order import capture_specializations  # noqa: E402
from sglang_eagle_paged.adapters.common.batch_classes import MAX_BATCH  # noqa: E402
from sglang_eagle_paged.adapters.v1 import sglang_warm_up as allocator_warm_up  # noqa: E402
from sglang_eagle_paged.adapters.v1 import sglang_api as compat  # noqa: E402
from sglang_eagle_paged.tools.harness import PagedTreeHarness  # noqa: E402

allocator = pytest.importorskip("sglang.srt.mem_cache.allocator")


@pytest.mark.parametrize("page", [16, 64])
def test_warm_up_launches_every_variant_serving_launches(page):
    kernel = compat.resolve(compat.ALLOC_EXTEND_KERNEL)
    with capture_specializations(kernel) as warm:
        launched = allocator_warm_up.warm_up_allocator("cpu", page, 8)
    assert launched == len(warm) == 2 * 4  # buckets 1, 2, 4, 8 x two free-list alignments
    with capture_specializations(kernel) as serve:
        PagedTreeHarness(page, 2, 1, num_tokens=1 << 14).extend_batches([1, 2, 3, 5, 8, 7], seed=page)
    served = {repr(s) for s in serve}
    assert len(served) > 4  # more than one variant per bucket met: the alignment varied, not vacuous
    assert served <= {repr(w) for w in warm}


def test_warm_up_writes_only_its_scratch():
    """What the kernel computed from the scratch lists: one slot per request, on its free page."""
    kernel = compat.resolve(compat.ALLOC_EXTEND_KERNEL)
    outs = []
    orig = type(kernel).run

    def run(self, *args, grid, warmup, **kwargs):
        result = orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        if self is kernel:
            outs.append((args[3].clone(), args[4].clone()))
        return result

    type(kernel).run = run
    try:
        allocator_warm_up.warm_up_allocator("cpu", 32, 4)
    finally:
        type(kernel).run = orig
    assert len(outs) == 6
    for free_pages, out in outs:
        assert torch.equal(out, free_pages * 32)


def test_buckets():
    assert allocator_warm_up.buckets(1) == [1]
    assert allocator_warm_up.buckets(48) == [1, 2, 4, 8, 16, 32, 64]
    assert allocator_warm_up.buckets(64) == [1, 2, 4, 8, 16, 32, 64]
    assert allocator_warm_up.buckets(10 ** 6)[-1] == MAX_BATCH


def test_nothing_at_page_1_or_without_a_batch_bound():
    assert allocator_warm_up.warm_up_allocator("cpu", 1, 48) == 0
    assert allocator_warm_up.warm_up_allocator("cpu", 64, None) == 0


def test_a_failing_launch_is_logged_and_serving_goes_on(monkeypatch, caplog):
    monkeypatch.setattr(compat, "ALLOC_EXTEND_KERNEL", "sglang.srt.mem_cache.allocator.no_such_kernel")
    with caplog.at_level(logging.WARNING, logger="sglang_eagle_paged"):
        assert allocator_warm_up.warm_up_allocator("cpu", 64, 48) == 0
    assert "alloc_extend kernel not compiled ahead" in caplog.text


def test_max_batch_size_from_the_worker():
    pool = SimpleNamespace(size=200)
    assert compat.max_batch_size(SimpleNamespace(server_args=SimpleNamespace(max_running_requests=48),
                                                 req_to_token_pool=pool)) == 48
    assert compat.max_batch_size(SimpleNamespace(server_args=SimpleNamespace(max_running_requests=None),
                                                 req_to_token_pool=pool)) == 200
    assert compat.max_batch_size(SimpleNamespace()) is None
