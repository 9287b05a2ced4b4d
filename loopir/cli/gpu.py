"""GPU parts of the demo and ``bench``: only imported when [`probe_gpu`][loopir.cli.env.probe_gpu]
found a device (they need pycuda, and torch for the cuBLAS baseline)."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from loopir.cli.env import probe_torch_cuda
from loopir.cli.term import Console
from loopir.ir.stmt import PrimFunc

__all__ = ["compare_dense", "cutlass_gemm", "fp16_gemm_func", "rel_error", "tflops"]

TOL = {"float32": 1e-5, "float16": 5e-3}
"""Relative Frobenius error accepted against a float64 reference (fp32 / fp16 data)."""


def tflops(shape: tuple[int, int, int], ms: float) -> float:
    """TFLOP/s of an ``M x K x N`` GEMM (2*M*K*N flops) taking ``ms`` milliseconds."""
    M, K, N = shape
    return 2.0 * M * K * N / (ms * 1e-3) / 1e12


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    """Relative Frobenius error; inf when ``got`` has a NaN/inf (an element never written)."""
    got64 = got.astype(np.float64)
    if not np.all(np.isfinite(got64)):
        return float("inf")
    return float(np.linalg.norm(got64 - ref) / np.linalg.norm(ref))


def fp16_gemm_func(M: int, K: int, N: int) -> PrimFunc:
    """``D = fp16(A @ B)`` with fp16 inputs and fp32 accumulation: what GemmOffload hands to
    CUTLASS."""
    from loopir import te

    A = te.placeholder((M, K), "float16", name="A")
    B = te.placeholder((K, N), "float16", name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute(
        (M, N),
        lambda i, j: te.sum(A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k),
        name="C",
    )
    D = te.compute((M, N), lambda i, j: C[i, j].astype("float16"), name="D")
    return te.create_prim_func([A, B, D])


def _row(label: str, ms: float, shape: tuple[int, int, int], err: float, tol: float) -> list[str]:
    return [label, f"{ms:.3f}", f"{tflops(shape, ms):.1f}", f"{err:.1e}", "ok" if err < tol else "MISMATCH"]


def _torch_matmul(a: np.ndarray, b: np.ndarray, ref: np.ndarray, shape: tuple[int, int, int],
                  label: str, tol: float) -> list[str]:  # fmt: skip
    """Time ``torch.matmul`` (cuBLAS) with CUDA events, TF32 off, on the same inputs."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    out = torch.matmul(ta, tb)
    torch.cuda.synchronize()
    err = rel_error(out.cpu().numpy(), ref)
    for _ in range(10):
        torch.matmul(ta, tb)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(50):
        start.record()
        torch.matmul(ta, tb)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return _row(label, statistics.median(times), shape, err, tol)


def compare_dense(con: Console, sch: Any, shape: tuple[int, int, int]) -> tuple[list[list[str]], bool, list[str]]:
    """The dense schedule at ``shape`` on the GPU, local padding off and on, and cuBLAS.

    Each result is checked against a float64 reference (outputs poisoned with NaN first)
    before it is timed. Returns the table rows, whether every check passed, and what was
    skipped (with why).
    """
    import loopir

    M, K, N = shape
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    rows, ok, notes = [], True, []
    for pad in (False, True):
        label = f"loopir, local padding {'on' if pad else 'off'}"
        cfg = {"tir.enable_local_pad": pad, "cuda.gemm_backend": "generated"}
        with con.progress(f"build + check: {label}"), loopir.PassContext(config=cfg):
            mod = loopir.build(sch.func, target="cuda")
            c = np.full((M, N), np.nan, np.float32)
            mod(a, b, c)
            err = rel_error(c, ref)
            ms = mod.benchmark(a, b, c)
        rows.append(_row(label, ms, shape, err, TOL["float32"]))
        ok &= err < TOL["float32"]
    has_torch, why = probe_torch_cuda()
    if has_torch:
        with con.progress("cuBLAS (torch.matmul, TF32 off)"):
            rows.append(_torch_matmul(a, b, ref, shape, "cuBLAS (torch.matmul, fp32)", TOL["float32"]))
    else:
        notes.append(f"the cuBLAS baseline: {why}")
    return rows, ok, notes


def cutlass_gemm(con: Console, func: PrimFunc, shape: tuple[int, int, int]) -> tuple[list[list[str]], str, bool]:
    """Build ``func`` (an fp16 GEMM) for CUDA with the GEMM handed to CUTLASS, check it against
    float64, time it, and time cuBLAS fp16 on the same inputs when torch is there.

    Returns the table rows, the chosen CUTLASS kernel's name and whether the check passed.
    """
    import loopir

    M, K, N = shape
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    with con.progress("building the CUTLASS kernel (first time: a few minutes of nvcc; cached after)"):
        mod = loopir.build(func, target="cuda")
    if not mod.library_calls:
        raise RuntimeError("the build did not hand the GEMM to CUTLASS (mod.library_calls is empty)")
    kernel = str(mod.library_calls[0]["cutlass_kernel"])
    d = np.full((M, N), np.nan, np.float16)
    mod(a, b, d)
    err = rel_error(d, ref)
    ms = mod.benchmark(a, b, d)
    rows = [_row("loopir -> CUTLASS (fp16)", ms, shape, err, TOL["float16"])]
    has_torch, _ = probe_torch_cuda()
    if has_torch:
        rows.append(_torch_matmul(a, b, ref, shape, "cuBLAS (torch.matmul, fp16)", TOL["float16"]))
    return rows, kernel, err < TOL["float16"]
