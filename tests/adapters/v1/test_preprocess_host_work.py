"""The host work of one draft preprocess, ours against SGLang's own, counted on the CPU.

Host time per draft step is mostly dispatch: every torch op and every Triton launch costs
microseconds on the host whatever the GPU does. This counts both (real SGLang pools, Triton under
its interpreter, whose own tensor traffic inside a launch is not counted) for SGLang's
``_draft_preprocess_decode`` at page 1 and page N and for ours at page N, on the same batch.
(Counted by ``scripts/count_preprocess_ops.py``, in git at 7f316a4; what it found is in
docs/performance.md.)
"""

import torch
from helpers.op_count import count


def _host_work(page, topk, steps, lens):
    from sglang.srt.speculative.eagle_worker import EAGLEWorker

    from sglang_eagle_paged.adapters.v1.draft_preprocess import draft_preprocess_decode
    from sglang_eagle_paged.settings import Mode
    from sglang_eagle_paged.tools.harness import PagedTreeHarness

    stock = EAGLEWorker._draft_preprocess_decode
    stock = getattr(stock, "__wrapped__", stock)
    rows = {}
    for p, impl in ((1, "sglang"), (page, "sglang"), (page, "ours")):
        h = PagedTreeHarness(p, topk, steps, num_tokens=1 << 15, max_reqs=len(lens) + 4,
                             max_context_len=max(lens) + 4 * page * topk, kv_copy=True)
        ids = [h.add_request(n) for n in lens]
        w = h.worker
        w.extend_lens = torch.empty((), dtype=torch.int64)  # SGLang's method stores these on the worker
        w.num_new_pages_per_topk = torch.empty((), dtype=torch.int64)
        batch = h.batch(ids)
        fn = (lambda: stock(w, batch)) if impl == "sglang" else (lambda: draft_preprocess_decode(w, batch, Mode.ON))
        fn()  # first call: lazy imports and caches
        c = count(fn)
        rows[f"{impl} page {p}"] = dict(torch_ops=sum(c.ops.values()), triton_launches=sum(c.launches.values()),
                                        launches=dict(c.launches), ops=dict(c.ops))
    return rows


def test_ours_launches_twice_and_dispatches_less_than_sglang():
    rows = _host_work(page=16, topk=4, steps=3, lens=[5, 16, 37])
    # the draft's slots are read from the free pages, not allocated (no alloc_extend_kernel), inside
    # the assignment's launch (no _tree_alloc_kernel)
    assert rows["ours page 16"]["launches"] == {"_assign_tree_draft_slots_kernel": 1, "_duplicate_kv_kernel": 1}
    assert rows["ours page 16"]["ops"]["empty"] == 3  # the layout's three outputs: no slot tensor
    assert rows["sglang page 1"]["triton_launches"] == 1 and rows["sglang page 16"]["triton_launches"] >= 4
    assert 0 < rows["sglang page 1"]["torch_ops"] < rows["sglang page 16"]["torch_ops"]
    assert 0 < rows["ours page 16"]["torch_ops"] < rows["sglang page 16"]["torch_ops"]
