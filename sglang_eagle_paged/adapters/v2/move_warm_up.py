"""Compile SGLang's post-verify KV move at start-up, not while serving (v2 worker, topk > 1).

After every tree verify, ``move_accept_tokens_to_target_kvcache`` (``spec_utils``) moves each
request's accepted KV to the front of its verify window with three Triton launches, each
specialised on the batch:

- the front slots: ``assign_extend_cache_locs`` takes ``next_power_of_2(bs)`` as a constexpr
  (0.5.17 through ``req_to_token``, 0.5.23 through ``fill_front_out_cache_loc_func`` over the
  verify window);
- the accepted slots: ``fill_accept_out_cache_loc`` takes ``next_power_of_2(bs * depth)``;
- the copy: the pool's ``move_kv_cache`` launches ``copy_all_layer_kv_cache_tiled`` over the
  ``N = bs * depth`` slot pairs in chunks of at most the pool's ``num_locs_upper``; each launch
  takes ``next_power_of_2(chunk)`` as a constexpr and the chunk length as an integer that
  Triton specialises on (1, a multiple of 16, other). SGLang compiles one variant at pool
  creation; the others compiled on first use, stalling the scheduler.

``depth`` is ``accept_index``'s width, the tree's ``spec_steps + 1``. Every variant is a function
of ``bs`` alone, so calling SGLang's own function once per batch size the server can run
compiles all of them, whichever release's kernels it launches. The calls move slot 0 onto
itself (SGLang's padding slot): every index handed over is 0 and no path is accepted.
An optimisation only: a failure is logged in one line and the move compiles on first use,
as without the plugin.
"""

from types import SimpleNamespace

import torch

from ...hooks import resolve
from .sglang_api import MOVE
from .warm_up_scope import warm_up_once



def warm_up_move(allocator, req_to_token: torch.Tensor, depth: int, draft_tokens: int, max_batch: int) -> int:
    """Call SGLang's post-verify move once per batch size 1..``max_batch`` with the dtypes and
    shapes the verify hands it; returns the calls made."""
    move = resolve(MOVE)
    device = allocator.get_kvcache().device
    i32, i64 = dict(dtype=torch.int32, device=device), dict(dtype=torch.int64, device=device)
    # 0.5.17 reads the front slots from req_to_token: a zero row of the same width (its row
    # stride is specialised on) keeps the pool's own rows out of it.
    rows = SimpleNamespace(req_to_token=torch.zeros((1, req_to_token.shape[1]), dtype=req_to_token.dtype,
                                                    device=device))
    for bs in range(1, max_batch + 1):
        batch = SimpleNamespace(seq_lens=torch.zeros(bs, **i64), req_pool_indices=torch.zeros(bs, **i64),
                                out_cache_loc=torch.zeros(bs * draft_tokens, **i64), req_to_token_pool=rows)
        # as verify builds them: accept_index (bs, spec_steps + 1) int32, accept_lens - 1 int32
        move(batch, torch.full((bs, depth), -1, **i32), torch.zeros(bs, **i32), allocator)
    return max_batch


def _plan(worker, allocator, rows, max_batch):
    key = (worker.speculative_num_steps + 1, worker.speculative_num_draft_tokens, max_batch)
    return allocator.get_kvcache(), key, lambda: warm_up_move(allocator, rows.req_to_token, *key)


def warm_up_worker(worker) -> int:
    """Warm up the move for a v2 draft worker once its pools exist; returns the calls made (0
    where there is nothing to warm, it was warmed already, or it failed: logged)."""
    return warm_up_once("post-verify KV move", worker, _plan)
