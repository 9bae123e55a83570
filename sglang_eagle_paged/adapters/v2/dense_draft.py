"""The dense draft layout at page > 1 (issue 54): the draft slots where page 1 puts them.

SGLang's v2 worker at ``--page-size P > 1`` with ``topk > 1`` gives every draft branch pages of
its own (branch ``t``, step ``s`` at row position ``prefix_base + t*N*P + last + s``) and reserves
whole pages for every branch at every decode step. The dense layout puts branch ``t``, step ``s``
at ``L + t*steps + s`` (``L``: the committed length), as SGLang's page-1 path does
(``assign_draft_cache_locs_contiguous``), so page 1's reserve suffices and nothing is copied. The
study of what in SGLang 0.5.13 .. 0.5.23 knows the per-branch layout, and what must change, is
``docs/design.md``, "Page > 1 in page 1's memory".

This module holds the two pieces the study found SGLang cannot be told through its own
arguments, as pure functions proven on SGLang's own code (``tests/adapters/v2/test_dense_draft.py``):

- :func:`dense_out_cache_loc`: the draft's write slots in the dense layout (what replaces the
  paged branch's gather in ``prepare_for_draft``);
- :class:`DenseDraftIndices`: SGLang's ``generate_draft_decode_kv_indices`` (the flashinfer and
  triton draft decode's per-token index list, eager and CUDA graph alike) launched with
  ``page_size`` 1, its page-1 formula, which is all ``page_size`` selects where reads are not
  translated.

fa3 needs nothing here: its in-place form (:mod:`.fa3_in_place`) reads each branch's draft slots
from ``out_cache_loc`` per token, so it reads the dense slots once ``out_cache_loc`` holds them.

Not wired into serving: the hooks (reserve, ``prepare_for_draft``, the two index-kernel globals),
the start-up refusal and the fault hand-over the study describes are not built, so no setting
turns this on. SGLang is not imported here.
"""

import torch

# generate_draft_decode_kv_indices' positional page_size (0.5.17 .. 0.5.23: the 13th argument; it
# follows req_pool_indices, req_to_token, paged_kernel_lens, kv_indices, kv_indptr, positions, the
# row stride or pool_len, two buffer strides and three power-of-two bounds).
PAGE_SIZE_ARG = 12


def dense_positions(seq_lens: torch.Tensor, topk: int, steps: int) -> torch.Tensor:
    """Row positions of the draft slots, ``(bs, topk * steps)`` branch-major: ``L + t*steps + s``."""
    offsets = torch.arange(topk * steps, device=seq_lens.device, dtype=torch.int64)
    return seq_lens.to(torch.int64).view(-1, 1) + offsets.view(1, -1)


def dense_out_cache_loc(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                        topk: int, steps: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """The draft's ``out_cache_loc`` (``bs * topk * steps``, int64, branch-major) in the dense layout:
    what SGLang's ``assign_draft_cache_locs_contiguous`` writes at page 1. No host read; ``out``
    (SGLang's own ``out_cache_loc``) is written in place where given, so that whatever already
    holds that tensor (the forward batch) sees the dense slots."""
    rows = req_to_token[req_pool_indices.long()]
    slots = torch.gather(rows, 1, dense_positions(seq_lens, topk, steps)).reshape(-1)
    if out is None:
        return slots.to(torch.int64)
    out.copy_(slots)
    return out


class DenseDraftIndices:
    """SGLang's ``generate_draft_decode_kv_indices`` kernel, launched (``kernel[grid](...)``) with
    ``page_size`` 1 while ``active()`` says the dense layout serves: each branch's list is then its
    prefix ``[0, L)`` and ``L + t*steps + [0, i]``, page 1's list. Everything else, the launch
    grid and every other argument included, is SGLang's. A launch that translates its reads
    (0.5.23's ``TRANSLATE``/``ENTRY_PAGE_SIZE``, where ``page_size`` also sizes the translation's
    pages) is refused with ``ValueError``: the caller must not have chosen the dense layout there."""

    def __init__(self, kernel, active=lambda: True):
        self.kernel = kernel
        self.active = active

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        if not self.active():
            return launch

        def dense_launch(*args, **kwargs):
            if kwargs.get("TRANSLATE") or kwargs.get("ENTRY_PAGE_SIZE", 1) != 1:
                raise ValueError("the dense draft layout does not cover translated draft reads")
            if len(args) <= PAGE_SIZE_ARG or "page_size" in kwargs:
                raise ValueError("generate_draft_decode_kv_indices: page_size is not its 13th positional argument")
            args = args[:PAGE_SIZE_ARG] + (1,) + args[PAGE_SIZE_ARG + 1:]
            return launch(*args, **kwargs)

        return dense_launch

    def __getattr__(self, name):  # the kernel's own attributes (fn, cache, ...)
        return getattr(self.kernel, name)
