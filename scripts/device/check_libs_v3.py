"""Does the machine's CUDA stack serve the 0.5.23 bundle's torch 2.14.1?   (on the GPU machine)

    python check_libs_v3.py [SITE]      (setup_v3.sh runs it in the bundle's environment, before the import check)

Six checks, one line each ("ok NAME: ..." or "FAIL NAME: ..."): import (torch from the bundle's site),
matmul (bf16 and fp32 through cuBLAS, against references), triton (a kernel compiled and run), fa3
(sgl_kernel's flash_attn_with_kvcache against plain attention), cudagraph (capture, replay with new
input), nccl (a one-rank process group and an all-reduce). Then "cuda libs: ..." says which file each
CUDA library was loaded from, the bundle's site or the machine's, so a failure names its library.
Exit 0 only if none fails (fa3 may wait for its pieces: said, not failed).
"""

import os
import re
import sys
import traceback

SITE = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("DEVBUNDLE_SITE", "/tmp/site-v3")
LIBS = ("libcudart.so", "libcublas.so", "libcublasLt.so", "libcudnn.so", "libnccl.so", "libcusparseLt.so",
        "libnvshmem_host.so", "libnvrtc.so", "libnvJitLink.so", "libcusparse.so", "libcufft.so", "libcuda.so")


def lib_origins(maps_text, site):
    """{library: "bundle" | "machine:DIR"} of the CUDA libraries in a /proc/self/maps text."""
    found = {}
    for line in maps_text.splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        base = os.path.basename(path)
        for lib in LIBS:
            if base.startswith(lib) and re.fullmatch(re.escape(lib) + r"(\.\d+)*", base):
                found[base] = "bundle" if path.startswith(site.rstrip("/") + "/") else f"machine:{os.path.dirname(path)}"
    return found


def libs_line(origins):
    return "cuda libs: " + (", ".join(f"{k} ({v})" for k, v in sorted(origins.items())) or "none loaded")


def why(exc):
    """The first line of an error, with the library it names where it names one."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    m = re.search(r"(lib[\w+-]+\.so[.\d]*)", text)
    sym = re.search(r"undefined symbol: (\S+)", text)
    lib = f" [library {m.group(1)}]" if m else ""
    return f"{type(exc).__name__}: {text}{lib}" + (f" [symbol {sym.group(1)}]" if sym else "")


def summary(results):
    """(exit code, last line) of [(name, ok, detail)]; ok None: waiting, not failed."""
    failed = [name for name, ok, _ in results if ok is False]
    waiting = [name for name, ok, _ in results if ok is None]
    if failed:
        return 1, f"libs FAIL: {', '.join(failed)}"
    return 0, f"libs ok: {len(results) - len(waiting)} of {len(results)} checks" + (
        f" ({', '.join(waiting)} waiting)" if waiting else "")


def check_import():
    import torch

    if not torch.__file__.startswith(SITE.rstrip("/") + "/"):
        raise RuntimeError(f"torch {torch.__version__} imported from {torch.__file__}, not from {SITE}")
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
    return f"torch {torch.__version__} cuda {torch.version.cuda} nccl {nccl} cudnn {cudnn} on {torch.cuda.get_device_name(0)}"


def check_matmul():
    import torch

    a, b = torch.randn(256, 256, dtype=torch.float64), torch.randn(256, 256, dtype=torch.float64)
    torch.backends.cuda.matmul.allow_tf32 = False
    err32 = ((a.float().cuda() @ b.float().cuda()).double().cpu() - a @ b).abs().max().item()
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    ref = x.float() @ y.float()
    rel = ((x @ y).float() - ref).norm().item() / ref.norm().item()
    assert err32 < 1e-3 and rel < 1e-2, f"fp32 max error {err32:.2e}, bf16 relative error {rel:.2e}"
    return f"fp32 max error {err32:.1e}, bf16 4096^3 relative error {rel:.1e}"


def check_triton():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    n = 100_003
    u, v = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(u)
    _axpy[(triton.cdiv(n, 1024),)](u, v, out, n, 2.5, BLOCK=1024)
    # Triton may contract alpha * x + y into one FMA (one rounding) where torch rounds twice, so
    # the two differ by an ulp of the operands, not of the result (which cancellation can make tiny):
    # the bound is relative to the operands' size.
    err = ((out - (2.5 * u + v)).abs() / (2.5 * u.abs() + v.abs() + 1e-30)).max().item()
    assert err < 1e-6, f"the Triton kernel's output differs from torch's (max error {err:.1e} of the operands)"
    return f"triton {triton.__version__}: a kernel compiled and ran, max error {err:.1e} of the operands"


class Waiting(Exception):
    """A check that cannot run yet (its bundle pieces are still to come): said, not failed."""


def check_fa3():
    import sgl_kernel
    import torch

    if not os.path.exists(os.path.join(os.path.dirname(sgl_kernel.__file__), "flash_ops.abi3.so")):
        raise Waiting("the FA3 library is not installed yet (fa3 pieces still to come): checked once they are")
    from sgl_kernel.flash_attn import flash_attn_with_kvcache

    bsz, seq, heads, kv_heads, dim = 2, 300, 8, 2, 128
    q = torch.randn(bsz, 1, heads, dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(bsz, seq, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(bsz, seq, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
    lens = torch.tensor([seq, 177], device="cuda", dtype=torch.int32)
    res = flash_attn_with_kvcache(q=q, k_cache=k, v_cache=v, cache_seqlens=lens, causal=True)
    res = res[0] if isinstance(res, tuple) else res
    worst = 0.0
    for i in range(bsz):
        n = int(lens[i])
        kf = k[i, :n].float().repeat_interleave(heads // kv_heads, dim=1)  # (n, heads, dim)
        vf = v[i, :n].float().repeat_interleave(heads // kv_heads, dim=1)
        scores = torch.einsum("hd,nhd->hn", q[i, 0].float(), kf) / dim ** 0.5
        ref = torch.einsum("hn,nhd->hd", scores.softmax(-1), vf)
        worst = max(worst, (res[i, 0].float() - ref).abs().max().item())
    assert worst < 2e-2, f"FA3 differs from plain attention by {worst:.3e}"
    return f"flash_attn_with_kvcache against plain attention: max error {worst:.1e}"


def check_cudagraph():
    import torch

    w = torch.randn(512, 512, device="cuda")
    inp = torch.randn(64, 512, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            out = torch.relu(inp @ w) + 1
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.relu(inp @ w) + 1
    inp.copy_(torch.randn(64, 512, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(out, torch.relu(inp @ w) + 1, atol=1e-4), "a replayed CUDA graph gives another result"
    return "captured, replayed on new input, output matches"


def check_nccl():
    import socket

    import torch
    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    try:
        t = torch.arange(8, device="cuda", dtype=torch.float32)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        assert torch.equal(t.cpu(), torch.arange(8, dtype=torch.float32)), "all_reduce over one rank changed the tensor"
    finally:
        dist.destroy_process_group()
    return f"process group up, all_reduce ok (NCCL {'.'.join(map(str, torch.cuda.nccl.version()))})"


NAMES = ("import", "matmul", "triton", "fa3", "cudagraph", "nccl")


def main():
    results = []
    for name in NAMES:
        if results and results[0][1] is False:
            results.append((name, False, "not run (torch did not import)"))
        else:
            try:
                results.append((name, True, globals()[f"check_{name}"]()))
            except Waiting as exc:
                results.append((name, None, str(exc)))
            except Exception as exc:  # the line names the error and its library; the log keeps the trace
                traceback.print_exc(file=sys.stdout)
                results.append((name, False, why(exc)))
        name, ok, detail = results[-1]
        print(f"{ {True: 'ok', None: 'wait', False: 'FAIL'}[ok]} {name}: {detail}", flush=True)
    with open("/proc/self/maps") as f:
        print(libs_line(lib_origins(f.read(), SITE)))
    code, line = summary(results)
    print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
