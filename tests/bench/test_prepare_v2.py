"""The v2 duplication benchmark's batch layout on SGLang's real pool (CPU); the timing needs a GPU."""

import pytest

from bench import prepare_v2


def test_rows_hold_whole_disjoint_pages_of_the_pool_as_the_paged_allocator_leaves_them():
    pytest.importorskip("sglang.srt.mem_cache.memory_pool")
    seq_lens, page, topk, steps = [5, 64, 130, 1], 64, 8, 5
    pool, rows = prepare_v2.layout(seq_lens, page, topk, steps, layers=1, heads=1, head_dim=8, seed=3, device="cpu")
    pages_seen = set()
    for r, n in enumerate(seq_lens):
        used = rows[r][rows[r] > 0]
        assert len(used) % page == 0 and len(used) >= n
        pages = used.view(-1, page)
        assert (pages[:, 0] % page == 0).all() and (pages - pages[:, :1] == rows.new_tensor(range(page))).all()
        ids = set((pages[:, 0] // page).tolist())
        assert not ids & pages_seen and 0 not in ids  # no page shared, SGLang's padding page never handed out
        pages_seen |= ids
    assert max(pages_seen) * page < pool.size + page


def test_the_table_names_both_sides_per_case():
    row = {"page_size": 64, "batch": 8, "copied_slots": 700,
           "sglang": {"host_ms": {"median": 2.5, "p90": 3.0}, "gpu_ms": {"median": 4.0, "p90": 4.5}},
           "ours": {"host_ms": {"median": 0.3, "p90": 0.4}, "gpu_ms": {"median": 0.5, "p90": 0.6}}}
    res = {"gpu": "G", "sglang": "0.5.17", "topk": 8, "steps": 5, "layers": 16, "heads": 8, "head_dim": 128,
           "queued_ms": 2.0, "iters": 50, "rows": [row]}
    assert "| 64 | 8 | 700 | 2.500 / 3.000 | 0.300 / 0.400 | 4.000 / 4.500 | 0.500 / 0.600 |" in prepare_v2.markdown(res)
    res["skipped"] = [{"page_size": 128, "batch": 256, "why": "out of GPU memory"}]
    assert "Not measured (page 128, batch 256): out of GPU memory." in prepare_v2.markdown(res)


def test_without_a_gpu_it_says_so_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        prepare_v2.main(["--out", str(tmp_path)])
