"""The allocation warm-up (alloc_warm_up.py) on 0.5.17, the GPU machine's release, from its published
wheel: test_alloc_warm_up.py runs 0.5.23's code; 0.5.17 does not import beside it (see
test_hook_points.py), so this checks on the parsed source that 0.5.17 launches the same kernels
with the same arguments and dtypes, and therefore has the variants the warm-up compiles.

The wheels come from scripts/fetch_sglang_wheels.sh (.sglang-wheels/<version>/, or SGLANG_WHEELS).
"""

import ast
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
WHEELS = Path(os.environ.get("SGLANG_WHEELS", REPO / ".sglang-wheels"))
RELEASES = ("0.5.17", "0.5.23")

KERNELS = {  # kernel: its module
    "alloc_extend_kernel": "sglang.kernels.ops.memory.allocator",
    "get_last_loc_kernel": "sglang.kernels.ops.memory.common",
    "assign_req_to_token_pool": "sglang.srt.mem_cache.allocation",
}
LAUNCHERS = {  # function that launches a kernel: its module
    "PagedTokenToKVPoolAllocator.alloc_extend": "sglang.srt.mem_cache.allocator.paged",
    "get_last_loc_triton": "sglang.kernels.ops.memory.common",
    "assign_req_to_token_pool_func": "sglang.srt.mem_cache.allocation",
}


def _source(version, module):
    path = WHEELS / version / (module.replace(".", "/") + ".py")
    if not path.is_file():
        pytest.skip(f"{path} missing: run scripts/fetch_sglang_wheels.sh")
    return path.read_text()


def _node(version, module, dotted):
    nodes = ast.parse(_source(version, module)).body
    for part in dotted.split("."):
        node = next(n for n in nodes if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)
        nodes = node.body
    return node


def _launches(node):
    """Every ``kernel[grid](...)`` in ``node``, as (kernel name, the call's AST without the grid)."""
    out = []
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Subscript) and isinstance(call.func.value, ast.Name):
            out.append((call.func.value.id, ast.dump(ast.Call(ast.Name("k"), call.args, call.keywords))))
    return out


def _flat(version, module, dotted):
    return re.sub(r"\s+", "", ast.unparse(_node(version, module, dotted)))


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_each_kernel_is_the_same_in_both_releases(kernel):
    """Same parameters, constexprs, do_not_specialize lists and body: the same specialisations."""
    a, b = (ast.dump(_node(v, KERNELS[kernel], kernel)) for v in RELEASES)
    assert a == b


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_each_launch_passes_the_same_arguments_in_both_releases(launcher):
    a, b = (_launches(_node(v, LAUNCHERS[launcher], launcher)) for v in RELEASES)
    assert a == b and len(a) == 1 and a[0][0] in KERNELS


@pytest.mark.parametrize("version", RELEASES)
def test_serving_calls_them_with_the_dtypes_the_warm_up_passes(version):
    mem = "sglang.srt.mem_cache.allocation"
    extend = _flat(version, mem, "alloc_for_extend")
    assert "prefix_lens_cpu=torch.tensor(batch.prefix_lens,dtype=torch.int64" in extend
    assert "alloc_paged_token_slots_extend(" in extend
    spec = _flat(version, mem, "alloc_for_spec_decode")
    assert "last_loc=get_last_loc(req_to_token_pool.req_to_token,req_pool_indices,cur_kv_lens)" in spec
    assert ("assign_req_to_token_pool_func(req_pool_indices,req_to_token_pool.req_to_token,cur_kv_lens,"
            "nxt_kv_lens,out_cache_loc,len(reqs))") in spec
    decode = re.sub(r"\s+", "", _source(version, "sglang.srt.speculative.eagle_utils"))
    assert "cur_kv_lens_cpu=torch.tensor(cur_kv_lens,dtype=torch.int32," in decode
    assert "nxt_kv_lens_cpu=torch.tensor(nxt_kv_lens,dtype=torch.int32," in decode
    assert "impl=get_last_loc_triton" in _flat(version, mem, "get_last_loc")  # fa3 on CUDA: the Triton lookup
