"""Memory-bound kernels through ``mod()``: loopir vs torch eager vs a Triton kernel (issue 14).

One command on the GPU machine::

    python benchmarks/memory_bound.py --json memory_bound.json

Cases, each checked against float64 on random data first, then timed with CUDA events around
``--calls`` back-to-back calls (median of ``--repeat`` samples):

- row softmax and layernorm over (4096, 4096) and (32768, 1024), fp32 and fp16
  (``loopir.examples.softmax`` / ``layernorm``: one block per row, cross-thread reductions);
- issue 35: softmax, layernorm and RMSNorm in fp16 and bf16 through the default GPU schedule
  with ``cuda.fast_math`` on ("loopir") and off ("accurate"); a cross-entropy forward over a
  128k vocabulary (``loss = logsumexp(x) - x[target]``); decode GEMVs ``y = x W^T`` (M = 1, 8, 16;
  K = 4096; N = 4096, 11008) against ``torch.nn.functional.linear``, bytes counted as the weight
  read; next to torch, Triton kernels for the same ops and, where ``liger_kernel`` imports,
  Liger's RMSNorm and cross-entropy;
- transpose 8192 x 8192 fp32 (``loopir.examples.transpose``, the padded shared tile);
- a fused elementwise chain ``gelu(x * 0.5 + bias[j])`` over 64 M elements (fp32).

Each case also times ``default``: the unscheduled te function built as it is, with the default
GPU schedule (``DefaultGPUSchedule``, issue 16).

Achieved bandwidth is the bytes each op must move once (inputs read once, output written
once) over its time, against the device-to-device copy bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path
from typing import Any

import loopir
from loopir import te
from loopir.examples import layernorm, softmax, tc_gemm, transpose
from loopir.examples.reductions import (
    CROSS_ENTROPY_CHUNK,
    layernorm_func,
    rmsnorm,
    rmsnorm_func,
    softmax_func,
)
from loopir.examples.reductions import cross_entropy_func as chunked_cross_entropy_func
from loopir.examples.transpose import transpose_func

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import events_per_call  # noqa: E402

ROWS = [(4096, 4096), (32768, 1024)]


def elementwise_func(rows: int, cols: int) -> Any:
    """The unscheduled ``Y = gelu(X * 0.5 + B[j])``."""
    X = te.placeholder((rows, cols), "float32", name="X")
    B = te.placeholder((cols,), "float32", name="B")

    def f(i: Any, j: Any) -> Any:
        x = X[i, j] * 0.5 + B[j]
        return 0.5 * x * (1.0 + te.erf(x * 0.7071067811865476))

    Y = te.compute((rows, cols), f, name="Y")
    return te.create_prim_func([X, B, Y])


def elementwise(rows: int, cols: int, threads: int = 256, vector: int = 1) -> Any:
    """``Y = gelu(X * 0.5 + B[j])``, flat over the elements, ``vector`` per thread (one
    vector load of X and of B, one vector store)."""
    sch = loopir.Schedule(elementwise_func(rows, cols))
    i, j = sch.get_loops(sch.get_block("Y"))
    parts = sch.split(sch.fuse(i, j), [None, threads, vector] if vector > 1 else [None, threads])
    sch.bind(parts[0], "blockIdx.x")
    sch.bind(parts[1], "threadIdx.x")
    if vector > 1:
        sch.vectorize(parts[2])
    return sch.func


def _triton() -> dict[str, Any]:
    """Triton kernels for the same ops ({} without Triton)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return {}

    @triton.jit
    def softmax_k(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        m = offs < cols
        x = tl.load(x_ptr + row * cols + offs, mask=m, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = e / tl.sum(e, axis=0)
        tl.store(y_ptr + row * cols + offs, y.to(y_ptr.dtype.element_ty), mask=m)

    @triton.jit
    def layernorm_k(x_ptr, w_ptr, b_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        m = offs < cols
        x = tl.load(x_ptr + row * cols + offs, mask=m, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / cols
        d = tl.where(m, x - mean, 0.0)
        var = tl.sum(d * d, axis=0) / cols
        w = tl.load(w_ptr + offs, mask=m).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=m).to(tl.float32)
        y = d * tl.rsqrt(var + eps) * w + b
        tl.store(y_ptr + row * cols + offs, y.to(y_ptr.dtype.element_ty), mask=m)

    @triton.jit
    def transpose_k(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):  # type: ignore[no-untyped-def]
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask)
        tl.store(y_ptr + rn[None, :] * M + rm[:, None], x, mask=mask)

    @triton.jit
    def gelu_k(x_ptr, b_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m) * 0.5 + tl.load(b_ptr + offs % cols, mask=m)
        y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
        tl.store(y_ptr + offs, y, mask=m)

    def p2(n: int) -> int:
        return 1 << (n - 1).bit_length()

    return {
        "softmax": lambda x, y: softmax_k[(x.shape[0],)](x, y, x.shape[1], BLOCK=p2(x.shape[1])),
        "layernorm": lambda x, w, b, y: layernorm_k[(x.shape[0],)](x, w, b, y, x.shape[1], 1e-5,
                                                                   BLOCK=p2(x.shape[1])),
        "transpose": lambda x, y: transpose_k[(triton.cdiv(x.shape[0], 64), triton.cdiv(x.shape[1], 64))](
            x, y, x.shape[0], x.shape[1], BM=64, BN=64),
        "gelu": lambda x, b, y: gelu_k[(triton.cdiv(x.numel(), 1024),)](x, b, y, x.numel(), x.shape[1], BLOCK=1024),
    }  # fmt: skip


def cross_entropy_func(rows: int, vocab: int, dtype: str) -> Any:
    """The unscheduled cross-entropy forward ``L[i] = log(sum_k exp(X[i, k] - M[i])) + M[i] -
    X[i, T[i]]`` (``M`` the row max; float32 statistics)."""
    X = te.placeholder((rows, vocab), dtype, name="X")
    T = te.placeholder((rows,), "int32", name="T")
    k = te.reduce_axis(vocab, name="k")
    M = te.compute((rows,), lambda i: te.max(X[i, k].astype("float32"), axis=k), name="M")
    k2 = te.reduce_axis(vocab, name="k2")
    S = te.compute((rows,), lambda i: te.sum(te.exp(X[i, k2].astype("float32") - M[i]), axis=k2), name="S")
    L = te.compute((rows,), lambda i: te.log(S[i]) + M[i] - X[i, T[i]].astype("float32"), name="L")
    return te.create_prim_func([X, T, L])


def gemv_func(m: int, n: int, k: int, dtype: str) -> Any:
    """The unscheduled ``Y = X W^T`` (``W`` as torch's Linear stores it, (n, k); float32 sums)."""
    X = te.placeholder((m, k), dtype, name="X")
    W = te.placeholder((n, k), dtype, name="W")
    r = te.reduce_axis(k, name="r")
    Y = te.compute((m, n), lambda i, j: te.sum(X[i, r].astype("float32") * W[j, r].astype("float32"), axis=r),
                   name="Y")  # fmt: skip
    return te.create_prim_func([X, W, Y])


def _triton_more() -> dict[str, Any]:
    """Triton kernels for RMSNorm, cross-entropy and a GEMV ({} without Triton)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return {}

    @triton.jit
    def rmsnorm_k(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        m = offs < cols
        x = tl.load(x_ptr + row * cols + offs, mask=m, other=0.0).to(tl.float32)
        r = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
        w = tl.load(w_ptr + offs, mask=m).to(tl.float32)
        tl.store(y_ptr + row * cols + offs, (x * r * w).to(y_ptr.dtype.element_ty), mask=m)

    @triton.jit
    def xent_k(x_ptr, t_ptr, l_ptr, vocab, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0).to(tl.int64)
        base = x_ptr + row * vocab
        mx = tl.full([BLOCK], -float("inf"), tl.float32)
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, vocab, BLOCK):  # online logsumexp: one read of the row
            offs = start + tl.arange(0, BLOCK)
            x = tl.load(base + offs, mask=offs < vocab, other=-float("inf")).to(tl.float32)
            new = tl.maximum(mx, x)
            acc = acc * tl.exp(mx - new) + tl.exp(x - new)
            mx = new
        m = tl.max(mx, axis=0)
        s = tl.sum(acc * tl.exp(mx - m), axis=0)
        xt = tl.load(base + tl.load(t_ptr + row)).to(tl.float32)
        tl.store(l_ptr + row, tl.log(s) + m - xt)

    @triton.jit
    def gemv_k(x_ptr, w_ptr, y_ptr, N, K, M: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):  # type: ignore[no-untyped-def]
        rn = tl.program_id(0) * BN + tl.arange(0, BN)
        rm = tl.arange(0, M)
        acc = tl.zeros([M, BN], tl.float32)
        for k0 in range(0, K, BK):
            rk = k0 + tl.arange(0, BK)
            w = tl.load(w_ptr + rn[:, None] * K + rk[None, :], mask=rn[:, None] < N)
            x = tl.load(x_ptr + rm[:, None] * K + rk[None, :])
            acc += tl.sum(x[:, None, :].to(tl.float32) * w[None, :, :].to(tl.float32), axis=2)
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=rn[None, :] < N)

    @triton.jit
    def swiglu_k(g_ptr, u_ptr, y_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        g = tl.load(g_ptr + offs, mask=m).to(tl.float32)
        u = tl.load(u_ptr + offs, mask=m).to(tl.float32)
        tl.store(y_ptr + offs, (g / (1.0 + tl.exp(-g)) * u).to(y_ptr.dtype.element_ty), mask=m)

    def p2(n: int) -> int:
        return 1 << (n - 1).bit_length()

    return {
        "rmsnorm": lambda x, w, y: rmsnorm_k[(x.shape[0],)](x, w, y, x.shape[1], 1e-6, BLOCK=p2(x.shape[1])),
        "xent": lambda x, t, loss: xent_k[(x.shape[0],)](x, t, loss, x.shape[1], BLOCK=4096),
        "swiglu": lambda g, u, y: swiglu_k[(triton.cdiv(g.numel(), 2048),)](g, u, y, g.numel(), BLOCK=2048),
        "gemv": lambda x, w, y: gemv_k[(triton.cdiv(w.shape[0], 16),)](x, w, y, w.shape[0], w.shape[1],
                                                                       M=x.shape[0], BN=16, BK=max(16, 256 // x.shape[0])),
    }  # fmt: skip


def _liger() -> dict[str, Any]:
    """Liger-Kernel's RMSNorm and cross-entropy where ``liger_kernel`` imports ({} otherwise)."""
    try:
        from liger_kernel.transformers.functional import liger_cross_entropy, liger_rms_norm
    except ImportError:
        return {}
    return {"rmsnorm": lambda x, w: liger_rms_norm(x, w, 1e-6),
            "xent": lambda x, t: liger_cross_entropy(x, t.long(), reduction="none")}  # fmt: skip


def _err(got: Any, ref: Any) -> float:
    return float((got.double() - ref).abs().max() / ref.abs().max())


def run_case(torch: Any, args: argparse.Namespace, name: str, nbytes: int, ref: Any, out: Any,
             impls: dict[str, Any], tol: float, copy_bw: float) -> dict[str, Any]:  # fmt: skip
    row: dict[str, Any] = {"case": name, "bytes": nbytes}
    for label, fn in impls.items():
        out.fill_(float("nan"))
        result = fn()
        torch.cuda.synchronize()
        got = result if isinstance(result, torch.Tensor) else out
        err = _err(got, ref)
        if not err < tol:
            raise AssertionError(f"{name} {label}: max relative error {err} >= {tol}")
        ms = events_per_call(torch, fn, args.calls, args.repeat, warmup=3)
        gbs = nbytes / ms / 1e6
        row[label] = {"ms": ms, "GB/s": gbs, "of_copy": gbs / copy_bw, "rel_err": err}
    row["copy_same_bytes"] = _same_bytes_copy(torch, args, nbytes, copy_bw)
    base = row.get("loopir", {}).get("ms")
    line = "  ".join(f"{k} {v['ms']:.4f} ms {v['GB/s']:.0f} GB/s ({v['of_copy']:.2f})"
                     for k, v in row.items() if isinstance(v, dict))  # fmt: skip
    print(f"{name}: {line}", flush=True)
    if base:
        for k, v in list(row.items()):
            if isinstance(v, dict) and k != "loopir":
                row[f"loopir_vs_{k}"] = v["ms"] / base
    return row


def xent_partials(torch: Any, rows: int, vocab: int, chunk: int = CROSS_ENTROPY_CHUNK) -> Any:
    """``cross_entropy_func``'s output ``P``: each row's per-chunk max and sum, float32 ``(rows,
    ceil(vocab / chunk), 2)`` (its chunk as the function clamps it, to ``vocab`` at most)."""
    return torch.empty(rows, -(-vocab // min(chunk, vocab)), 2, device="cuda")


def _same_bytes_copy(torch: Any, args: argparse.Namespace, nbytes: int, copy_bw: float) -> dict[str, float]:
    """A device-to-device copy moving the case's bytes (half read, half written): the ceiling of
    a kernel of this size, below the large copy's at a few tens of MB (launch and tail)."""
    src = torch.empty(max(nbytes // 2, 1), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = events_per_call(torch, lambda: dst.copy_(src), args.calls, args.repeat, warmup=3)
    gbs = nbytes / ms / 1e6
    return {"ms": ms, "GB/s": gbs, "of_copy": gbs / copy_bw, "rel_err": 0.0}


def _vec(args: argparse.Namespace, dtype: str) -> int | None:
    """``--vector`` for fp32; twice as many halves (the same 16 bytes) for fp16."""
    if args.vector is None:
        return None
    return args.vector * (2 if dtype == "float16" and args.vector > 1 else 1)


def copy_bandwidth(torch: Any, args: argparse.Namespace) -> float:
    """GB/s of a 256 MiB device-to-device copy (read + write)."""
    src = torch.rand(64 << 20, device="cuda")
    dst = torch.empty_like(src)
    ms = events_per_call(torch, lambda: dst.copy_(src), args.calls, args.repeat, warmup=3)
    return 2 * src.numel() * 4 / ms / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--vector", type=int, default=None,
                    help="output elements per thread computed as one vector, fp32 (fp16: twice as "
                         "many); default: the examples' defaults, and 4 for the elementwise chain")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads per row (softmax, layernorm; default: loopir.examples.reductions.default_threads)")
    ap.add_argument("--only", default="classic,rows,xent,gemv,swiglu",  # also: variants
                    help="comma-separated groups: classic (issue 14's cases), rows (fp16/bf16 softmax, "
                         "layernorm, rmsnorm), xent, gemv, swiglu (the LLaMA MLP's product), variants")
    ap.add_argument("--ops", default="softmax,layernorm,rmsnorm", help="rows: which ops")
    ap.add_argument("--dtypes", default="float16,bfloat16", help="rows: which dtypes")
    ap.add_argument("--no-accurate", action="store_true", help="rows: skip the fast-math-off builds")
    ap.add_argument("--no-triton", action="store_true", help="rows: skip the Triton kernels")
    ap.add_argument("--prebuild", action="store_true", help="rows: compile the loopir kernels in parallel first")
    ap.add_argument("--gemv-tc", type=json.loads, default=[],
                    help="gemv: also examples.tc_gemm on tensor cores (M padded to 16), a JSON list of "
                         "[block, warp, stages], e.g. '[[[16, 64, 128], [16, 16], 4]]'")
    ap.add_argument("--gemv-m", default="1,8,16", help="gemv: which M")
    ap.add_argument("--xent-vocabs", default="131072", help="xent: comma-separated vocabulary sizes (128256: "
                    "LLaMA 3's, a last chunk cut short)")  # fmt: skip
    ap.add_argument("--xent-chunks", default="", help="xent: also the chunked form with these chunk lengths "
                    "(comma-separated; the default is CROSS_ENTROPY_CHUNK, 16384)")  # fmt: skip
    args = ap.parse_args()
    groups = set(args.only.split(","))
    import torch

    out: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv), "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "cases": [],
    }  # fmt: skip
    tri = {} if args.no_triton else _triton()
    if tri:
        tri["more"] = _triton_more()
    copy_bw = out["copy_GBps"] = copy_bandwidth(torch, args)
    print(f"device-to-device copy: {copy_bw:.0f} GB/s", flush=True)
    if "rows" in groups:
        out["cases"] += low_precision_rows(torch, args, tri, copy_bw)
    if "xent" in groups:
        out["cases"] += cross_entropy_cases(torch, args, tri, copy_bw)
    if "gemv" in groups:
        out["cases"] += gemv_cases(torch, args, tri, copy_bw)
    if "swiglu" in groups:
        out["cases"] += swiglu_cases(torch, args, tri, copy_bw)
    if "variants" in groups:
        out["cases"] += row_variants(torch, args, tri, copy_bw)
    if "classic" in groups:
        classic_cases(torch, args, tri, copy_bw, out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


def prebuild(funcs: list[Any], fast: bool = True, **config: Any) -> None:
    """Compile ``funcs`` for CUDA in parallel (nvcc into the disk cache), so that the
    ``loopir.build`` calls after it only load them."""
    from concurrent.futures import ThreadPoolExecutor

    from loopir.codegen_cuda import prepare_function
    from loopir.codegen_cuda.compile import detect_arch
    from loopir.codegen_cuda.units import build_library

    arch = detect_arch()

    def one(f: Any) -> None:
        with _context(fast, config):
            build_library([prepare_function(f)], arch=arch)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, funcs))


def _context(fast: bool, config: dict[str, Any]) -> Any:
    """A PassContext with ``cuda.fast_math`` ``fast`` and the keys of ``config`` (``.`` spelled
    ``__``, as keyword arguments)."""
    return loopir.PassContext(config={"cuda.fast_math": fast, **{k.replace("__", "."): v for k, v in config.items()}})


def _fast(func: Any, on: bool = True, **config: Any) -> Any:
    """``func`` built for CUDA (default GPU schedule) with ``cuda.fast_math`` ``on`` and the
    other PassContext keys of ``config`` (``.`` spelled ``__``)."""
    with _context(on, config):
        return loopir.build(func, target="cuda")


def low_precision_rows(torch: Any, args: argparse.Namespace, tri: dict[str, Any], copy_bw: float) -> list[Any]:
    """softmax, layernorm and RMSNorm in fp16 and bf16: the default schedule, fast math on
    ("loopir") and off ("accurate"), torch, Triton, Liger's RMSNorm."""
    F = torch.nn.functional
    liger = _liger()
    rows = []
    ops_wanted = set(args.ops.split(","))
    dtypes = args.dtypes.split(",")
    if args.prebuild:
        prebuild([f(r, c, d) for d in dtypes for r, c in ROWS
                  for n, f in (("softmax", softmax_func), ("layernorm", layernorm_func), ("rmsnorm", rmsnorm_func))
                  if n in ops_wanted])  # fmt: skip
        prebuild([f(r, c, d) for d in dtypes for r, c in ROWS
                  for n, f in (("softmax", softmax_func), ("layernorm", layernorm_func), ("rmsnorm", rmsnorm_func))
                  if n in ops_wanted], cuda__default_schedule__row_registers=True)  # fmt: skip
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        for r, c in ROWS:
            x = (torch.rand(r, c, device="cuda") * 4 - 2).to(tdt)
            w = (torch.rand(c, device="cuda") + 0.5).to(tdt)
            b = (torch.rand(c, device="cuda") - 0.5).to(tdt)
            y = torch.empty_like(x)
            nbytes = 2 * x.numel() * x.element_size()
            xd = x.double()
            ops = {
                "softmax": (softmax_func(r, c, dtype), (x, y), lambda x=x: torch.softmax(x, dim=-1),
                            torch.softmax(xd, dim=-1), "softmax", (x, y)),
                "layernorm": (layernorm_func(r, c, dtype), (x, w, b, y), lambda x=x, w=w, b=b, c=c: F.layer_norm(x, (c,), w, b, 1e-5),
                              F.layer_norm(xd, (c,), w.double(), b.double(), 1e-5), "layernorm", (x, w, b, y)),
                "rmsnorm": (rmsnorm_func(r, c, dtype), (x, w, y), lambda x=x, w=w, c=c: F.rms_norm(x, (c,), w, 1e-6),
                            F.rms_norm(xd, (c,), w.double(), 1e-6), "rmsnorm", (x, w, y)),
            }  # fmt: skip
            for op, (func, margs, torch_fn, ref, tname, targs) in ops.items():
                if op not in ops_wanted:
                    continue
                fast = _fast(func)
                regs = _fast(func, cuda__default_schedule__row_registers=True)
                impls = {"loopir": lambda m=fast, a=margs: m(*a), "registers": lambda m=regs, a=margs: m(*a),
                         "torch": torch_fn}  # fmt: skip
                if not args.no_accurate:
                    accurate = _fast(func, on=False)
                    impls["accurate"] = lambda m=accurate, a=margs: m(*a)
                tf = (tri.get(tname) or tri["more"][tname]) if tri and not args.no_triton else None
                if tf is not None:
                    impls["triton"] = lambda f=tf, a=targs: f(*a)
                if op == "rmsnorm" and "rmsnorm" in liger:
                    impls["liger"] = lambda x=x, w=w: liger["rmsnorm"](x, w)
                rows.append(run_case(torch, args, f"{op} {dtype} {r}x{c}", nbytes, ref, y, impls, 2e-2, copy_bw))
    return rows


#: ``--only variants``: (threads per row, rows per block, row in registers) of the examples'
#: schedules (a warp per row from 32 threads; 8 halves per vector).
VARIANTS = [(32, 4, True), (32, 8, True), (32, 4, False), (64, 2, True), (64, 4, True), (128, 1, True),
            (128, 2, True), (256, 1, True), (128, 1, False), (256, 1, False)]  # fmt: skip


def row_variants(torch: Any, args: argparse.Namespace, tri: dict[str, Any], copy_bw: float) -> list[Any]:
    """fp16/bf16 softmax, layernorm and RMSNorm through the examples' schedules, fast math on,
    over threads per row, rows per block and the row kept in registers (``VARIANTS``, those whose
    row is whole vectors per thread and at most 64 elements per thread in registers), next to the
    default schedule, torch and Triton."""
    F = torch.nn.functional
    rows: list[Any] = []
    builders = {"softmax": softmax, "layernorm": layernorm, "rmsnorm": rmsnorm}
    funcs = {"softmax": softmax_func, "layernorm": layernorm_func, "rmsnorm": rmsnorm_func}
    ops_wanted = [op for op in args.ops.split(",") if op in builders]
    dtypes = args.dtypes.split(",")

    def fits(c: int, t: int, regs: bool) -> bool:
        return c % (t * 8) == 0 and (not regs or c // t <= 64)

    scheds = {(op, d, r, c, v): builders[op](r, c, d, threads=v[0], rows_per_block=v[1], registers=v[2], vector=8)
              for op in ops_wanted for d in dtypes for r, c in ROWS for v in VARIANTS if fits(c, v[0], v[2])}  # fmt: skip
    if args.prebuild:
        prebuild([sch.func for sch in scheds.values()] + [funcs[op](r, c, d) for op in ops_wanted for d in dtypes
                                                           for r, c in ROWS])  # fmt: skip
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        for r, c in ROWS:
            x = (torch.rand(r, c, device="cuda") * 4 - 2).to(tdt)
            w, b = (torch.rand(c, device="cuda") + 0.5).to(tdt), (torch.rand(c, device="cuda") - 0.5).to(tdt)
            y = torch.empty_like(x)
            xd = x.double()
            cases = {
                "softmax": ((x, y), lambda x=x: torch.softmax(x, dim=-1), torch.softmax(xd, dim=-1)),
                "layernorm": ((x, w, b, y), lambda x=x, w=w, b=b, c=c: F.layer_norm(x, (c,), w, b, 1e-5),
                              F.layer_norm(xd, (c,), w.double(), b.double(), 1e-5)),
                "rmsnorm": ((x, w, y), lambda x=x, w=w, c=c: F.rms_norm(x, (c,), w, 1e-6),
                            F.rms_norm(xd, (c,), w.double(), 1e-6)),
            }  # fmt: skip
            for op in ops_wanted:
                margs, torch_fn, ref = cases[op]
                dflt = _fast(funcs[op](r, c, dtype))
                impls = {"default": lambda m=dflt, a=margs: m(*a), "torch": torch_fn}
                for v in VARIANTS:
                    if (op, dtype, r, c, v) in scheds:
                        mod = _fast(scheds[op, dtype, r, c, v].func)
                        impls["t{}r{}{}".format(v[0], v[1], "-regs" if v[2] else "")] = lambda m=mod, a=margs: m(*a)
                tf = (tri.get(op) or tri["more"][op]) if tri and not args.no_triton else None
                if tf is not None:
                    impls["triton"] = lambda f=tf, a=margs: f(*a)
                rows.append(run_case(torch, args, f"{op} {dtype} {r}x{c} variants", 2 * x.numel() * 2, ref, y,
                                     impls, 2e-2, copy_bw))  # fmt: skip
    return rows


def cross_entropy_cases(torch: Any, args: argparse.Namespace, tri: dict[str, Any], copy_bw: float) -> list[Any]:
    """The cross-entropy forward over a 128k vocabulary (per-row losses), bytes: the logits.
    "loopir" is the one-read chunked form (``loopir.examples.reductions.cross_entropy_func``),
    "plain" the direct ``logsumexp - x[target]`` of this file, both through the default schedule."""
    liger = _liger()
    rows = []
    for dtype, vocab in ((d, int(v)) for v in args.xent_vocabs.split(",") for d in ("float16", "bfloat16")):
        n = 2048
        x = (torch.randn(n, vocab, device="cuda") * 2).to(getattr(torch, dtype))
        t = torch.randint(0, vocab, (n,), device="cuda", dtype=torch.int32)
        loss = torch.empty(n, device="cuda")
        p = xent_partials(torch, n, vocab)  # the default chunks
        mod = _fast(chunked_cross_entropy_func(n, vocab, dtype))
        plain = _fast(cross_entropy_func(n, vocab, dtype))
        impls = {"loopir": lambda mod=mod, x=x, t=t, loss=loss, p=p: mod(x, t, loss, p),
                 "plain": lambda mod=plain, x=x, t=t, loss=loss: mod(x, t, loss),
                 "torch": lambda x=x, t=t: torch.nn.functional.cross_entropy(x, t.long(), reduction="none")}
        for chunk in (int(c) for c in args.xent_chunks.split(",") if c):
            other = _fast(chunked_cross_entropy_func(n, vocab, dtype, chunk=chunk))
            pc = xent_partials(torch, n, vocab, chunk)
            impls[f"chunk{chunk}"] = lambda mod=other, x=x, t=t, loss=loss, p=pc: mod(x, t, loss, p)
        if tri:
            impls["triton"] = lambda x=x, t=t, loss=loss: tri["more"]["xent"](x, t, loss)
        if "xent" in liger:
            impls["liger"] = lambda x=x, t=t: liger["xent"](x, t)
        ref = torch.nn.functional.cross_entropy(x.double(), t.long(), reduction="none")
        # torch returns the losses in the logits' type: bf16 rounds them to 2^-8 relative
        rows.append(run_case(torch, args, f"cross-entropy {dtype} {n}x{vocab}", x.numel() * x.element_size(), ref,
                             loss, impls, 1e-2 if dtype == "bfloat16" else 1e-3, copy_bw))  # fmt: skip
    return rows


def swiglu_func(rows: int, cols: int, dtype: str) -> Any:
    """The LLaMA MLP's elementwise product ``Y = silu(G) * U`` (float32 inside)."""
    G = te.placeholder((rows, cols), dtype, name="G")
    U = te.placeholder((rows, cols), dtype, name="U")

    def f(i: Any, j: Any) -> Any:
        g = G[i, j].astype("float32")
        return (g / (1.0 + te.exp(-g)) * U[i, j].astype("float32")).astype(dtype)

    return te.create_prim_func([G, U, te.compute((rows, cols), f, name="Y")])


def swiglu_cases(torch: Any, args: argparse.Namespace, tri: dict[str, Any], copy_bw: float) -> list[Any]:
    """The LLaMA-7B layer's elementwise product at 2048 tokens (2048 x 11008), fp16 and bf16:
    the default schedule (fast math on and off), torch's ``silu(g) * u`` (two kernels) and
    Triton; bytes: G and U read, Y written."""
    rows = []
    for dtype in args.dtypes.split(","):
        tdt = getattr(torch, dtype)
        g, u = ((torch.rand(2048, 11008, device="cuda") * 8 - 4).to(tdt) for _ in range(2))
        y = torch.empty_like(g)
        fast, accurate = (_fast(swiglu_func(2048, 11008, dtype), on=on) for on in (True, False))
        impls = {"loopir": lambda m=fast, g=g, u=u, y=y: m(g, u, y),
                 "accurate": lambda m=accurate, g=g, u=u, y=y: m(g, u, y),
                 "torch": lambda g=g, u=u: torch.nn.functional.silu(g) * u}  # fmt: skip
        if tri and not args.no_triton:
            impls["triton"] = lambda g=g, u=u, y=y: tri["more"]["swiglu"](g, u, y)
        ref = torch.nn.functional.silu(g.double()) * u.double()
        rows.append(run_case(torch, args, f"swiglu {dtype} 2048x11008", 3 * g.numel() * g.element_size(), ref, y,
                             impls, 1e-2, copy_bw))  # fmt: skip
    return rows


def gemv_cases(torch: Any, args: argparse.Namespace, tri: dict[str, Any], copy_bw: float) -> list[Any]:
    """Decode GEMVs ``Y = X W^T`` through ``mod()`` (GemmOffload and the default schedule decide),
    bytes: the weight."""
    rows = []
    dtypes = args.dtypes.split(",")
    if args.prebuild:
        funcs = [gemv_func(int(m), n, 4096, d) for d in dtypes for n in (4096, 11008) for m in args.gemv_m.split(",")]
        prebuild(funcs, fast=False)
        prebuild(funcs, cuda__gemv_max_rows=16)
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        for n in (4096, 11008):
            k = 4096
            w = (torch.rand(n, k, device="cuda") - 0.5).to(tdt)
            for m in (int(v) for v in args.gemv_m.split(",")):
                x = (torch.rand(m, k, device="cuda") - 0.5).to(tdt)
                y = torch.empty(m, n, device="cuda")
                mod = loopir.build(gemv_func(m, n, k, dtype), target="cuda")
                rule = _fast(gemv_func(m, n, k, dtype), cuda__gemv_max_rows=16)
                impls = {"loopir": lambda mod=mod, x=x, w=w, y=y: mod(x, w, y),
                         "gemv-rule": lambda mod=rule, x=x, w=w, y=y: mod(x, w, y),
                         "torch": lambda x=x, w=w: torch.nn.functional.linear(x, w)}  # fmt: skip
                for block, warp, stages in args.gemv_tc:
                    tc = loopir.build(tc_gemm(m, k, n, dtype, block=tuple(block), warp=tuple(warp), stages=stages,
                                              b_trans=True).func, target="cuda")  # fmt: skip
                    label = "tc{}x{}x{}w{}x{}s{}".format(*block, *warp, stages)
                    impls[label] = lambda mod=tc, x=x, w=w, y=y: mod(x, w, y)
                if tri and not args.no_triton:
                    impls["triton"] = lambda x=x, w=w, y=y: tri["more"]["gemv"](x, w, y)
                ref = x.double() @ w.double().t()
                row = run_case(torch, args, f"gemv {dtype} M={m} K={k} N={n}", w.numel() * w.element_size(), ref, y,
                               impls, 1e-2, copy_bw)  # fmt: skip
                row["loopir_path"] = getattr(mod, "library_calls", None)
                rows.append(row)
    return rows


def classic_cases(torch: Any, args: argparse.Namespace, tri: dict[str, Any], copy_bw: float, out: dict[str, Any]) -> None:
    """Issue 14's cases: fp32 and fp16 softmax and layernorm through the examples' hand
    schedules and the default schedule, a transpose, an elementwise chain."""
    for dtype in ("float32", "float16"):
        tdt = getattr(torch, dtype)
        tol = 1e-4 if dtype == "float32" else 2e-2
        for r, c in ROWS:
            x = (torch.rand(r, c, device="cuda") * 4 - 2).to(tdt)
            y = torch.empty_like(x)
            mod = loopir.build(softmax(r, c, dtype, threads=args.threads, vector=_vec(args, dtype)).func, target="cuda")
            dflt = loopir.build(softmax_func(r, c, dtype), target="cuda")
            impls = {"loopir": lambda mod=mod, x=x, y=y: mod(x, y),
                     "default": lambda mod=dflt, x=x, y=y: mod(x, y),
                     "torch": lambda x=x: torch.softmax(x, dim=-1)}  # fmt: skip
            if tri:
                impls["triton"] = lambda x=x, y=y: tri["softmax"](x, y)
            ref = torch.softmax(x.double(), dim=-1)
            nbytes = 2 * x.numel() * x.element_size()
            out["cases"].append(run_case(torch, args, f"softmax {dtype} {r}x{c}", nbytes, ref, y, impls, tol, copy_bw))
            w = (torch.rand(c, device="cuda") + 0.5).to(tdt)
            b = (torch.rand(c, device="cuda") - 0.5).to(tdt)
            mod = loopir.build(layernorm(r, c, dtype, threads=args.threads, vector=_vec(args, dtype)).func, target="cuda")
            dflt = loopir.build(layernorm_func(r, c, dtype), target="cuda")
            impls = {"loopir": lambda mod=mod, x=x, w=w, b=b, y=y: mod(x, w, b, y),
                     "default": lambda mod=dflt, x=x, w=w, b=b, y=y: mod(x, w, b, y),
                     "torch": lambda x=x, w=w, b=b, c=c: torch.nn.functional.layer_norm(x, (c,), w, b, 1e-5)}  # fmt: skip
            if tri:
                impls["triton"] = lambda x=x, w=w, b=b, y=y: tri["layernorm"](x, w, b, y)
            ref = torch.nn.functional.layer_norm(x.double(), (c,), w.double(), b.double(), 1e-5)
            out["cases"].append(run_case(torch, args, f"layernorm {dtype} {r}x{c}", nbytes, ref, y, impls,
                                         tol * 4, copy_bw))  # fmt: skip
            del x, y
    n = 8192
    x = torch.rand(n, n, device="cuda") + 0.5
    y = torch.empty_like(x)
    mod = loopir.build(transpose(n, n).func, target="cuda")
    dflt = loopir.build(transpose_func(n, n), target="cuda")
    impls = {"loopir": lambda: mod(x, y), "default": lambda: dflt(x, y), "torch": lambda: y.copy_(x.t())}
    if tri:
        impls["triton"] = lambda: tri["transpose"](x, y)
    out["cases"].append(run_case(torch, args, f"transpose float32 {n}x{n}", 2 * x.numel() * 4, x.t().double(), y,
                                 impls, 1e-7, copy_bw))  # fmt: skip
    del x, y
    r, c = 65536, 1024
    x = torch.rand(r, c, device="cuda") * 4 - 2
    b = torch.rand(c, device="cuda") - 0.5
    y = torch.empty_like(x)
    mod = loopir.build(elementwise(r, c, vector=4 if args.vector is None else args.vector), target="cuda")
    dflt = loopir.build(elementwise_func(r, c), target="cuda")
    impls = {"loopir": lambda: mod(x, b, y), "default": lambda: dflt(x, b, y),
             "torch": lambda: torch.nn.functional.gelu(x * 0.5 + b)}
    if tri:
        impls["triton"] = lambda: tri["gelu"](x, b, y)
    xd = x.double() * 0.5 + b.double()
    ref = 0.5 * xd * (1.0 + torch.erf(xd / math.sqrt(2.0)))
    out["cases"].append(run_case(torch, args, "gelu(x*0.5+b) float32 64M", 2 * x.numel() * 4, ref, y, impls,
                                 1e-5, copy_bw))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
