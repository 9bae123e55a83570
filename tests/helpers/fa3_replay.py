"""FA3 draft replay batches and state comparison, shared by the v1 and v2 replay tests."""

import dataclasses
import types

import torch

from sglang_eagle_paged.tools.harness import DraftInputStub, branch_slots


def random_seq_lens(rng, bs, page_size, max_len):
    kind = rng.choice(("random", "multiples", "mixed"))
    out = []
    for _ in range(bs):
        if kind == "multiples" or (kind == "mixed" and rng.random() < 0.5):
            out.append(page_size * rng.randint(0, max_len // page_size))  # last page full (or empty prefix)
        else:
            out.append(rng.randint(0, max_len))
    return out


def replay_batch(rng, multi, raw_bs, bs, pool=12):
    """The forward batch EAGLEDraftCudaGraphRunner.replay hands the backend: padded to the
    captured bs (seq_lens 1, req_pool_indices 0, the CPU lengths 1), out_cache_loc unpadded."""
    b0 = multi.attn_backends[0]
    page, topk, steps = b0.page_size, multi.topk, multi.speculative_num_steps
    max_len = b0.max_context_len - steps - page
    seq = random_seq_lens(rng, raw_bs, page, max_len)
    seq_lens = torch.ones(bs, dtype=torch.int64)
    seq_lens[:raw_bs] = torch.tensor(seq)
    rpi = torch.zeros(bs, dtype=torch.int64)
    rpi[:raw_bs] = torch.tensor(rng.sample(range(pool), raw_bs))
    if page > 1:
        out_cache_loc = branch_slots(rng, seq, topk, page, steps)
    else:
        out_cache_loc = torch.tensor(rng.sample(range(1, 100_000), raw_bs * topk * steps))
    return types.SimpleNamespace(
        batch_size=bs, req_pool_indices=rpi, seq_lens=seq_lens, seq_lens_sum=int(seq_lens.sum()),
        seq_lens_cpu=seq_lens.clone(), out_cache_loc=out_cache_loc, encoder_lens=None,
        spec_info=DraftInputStub(), positions=None)


def _same(a, b, where):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif dataclasses.is_dataclass(a):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    else:
        assert type(a) is type(b) and a == b, (where, a, b)


def assert_same_state(ma, mb, bs):
    for i, (a, b) in enumerate(zip(ma.attn_backends, mb.attn_backends)):
        for name in ("draft_decode_metadata_topk_normal", "draft_decode_metadata_topk_expand"):
            da, db = getattr(a, name), getattr(b, name)
            assert da.keys() == db.keys()
            for k in da:
                _same(da[k], db[k], f"step {i} {name}[{k!r}]")
        assert a.forward_metadata is a.draft_decode_metadata_topk_normal[bs]
        assert b.forward_metadata is b.draft_decode_metadata_topk_normal[bs]
        assert a.forward_metadata_spec_decode_expand is a.draft_decode_metadata_topk_expand[bs]
        assert b.forward_metadata_spec_decode_expand is b.draft_decode_metadata_topk_expand[bs]
