"""Timing of the CPU reference executor: ``python -m loopir.runtime.bench [M K N]``.

Builds a te matmul (default 128x128x128 float32) with and without bounds checks, and the
lowered DietCode dense schedule of the same shape, each in a fresh cache directory so the
compile is really measured; times the call (median of several runs) and checks the result
against numpy. Prints a Markdown table. "frontend" is te + create_prim_func for the matmul
and schedule + lowering for the dense schedule.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time

import numpy as np

from loopir import te
from loopir.ir.stmt import PrimFunc
from loopir.runtime.c_codegen import generate_c
from loopir.runtime.cpu import build_cpu


def _matmul(M: int, K: int, N: int) -> PrimFunc:
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def run(M: int, K: int, N: int, repeats: int = 7) -> list[dict[str, float | bool | str]]:
    """Measure codegen, compile and run time for both bounds-check settings."""
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 1.5, (M, K)).astype(np.float32)
    b = rng.uniform(0.5, 1.5, (K, N)).astype(np.float32)
    expect = a.astype(np.float64) @ b.astype(np.float64)
    rows: list[dict[str, float | bool | str]] = []
    for check in (True, False):  # warm up lazy imports so the timings measure codegen only
        generate_c(_matmul(M, K, N), check_bounds=check)
    for check in (True, False):
        with tempfile.TemporaryDirectory() as cache:
            t0 = time.perf_counter()
            func = _matmul(M, K, N)
            te_s = time.perf_counter() - t0
            mod = build_cpu(func, check_bounds=check, cache_dir=cache)
            c = np.zeros((M, N), np.float32)
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                mod(a, b, c)
                times.append(time.perf_counter() - t0)
            err = float(np.max(np.abs(c - expect) / np.abs(expect)))
            rows.append({
                "what": "te matmul (TensorIR blocks)", "check_bounds": check, "te_s": te_s, "codegen_s": mod.codegen_seconds,
                "compile_s": mod.compile_seconds, "run_s": statistics.median(times),
                "max_rel_err": err,
            })  # fmt: skip
    rows.append(_lowered_dense(M, K, N, a, b, expect, repeats))
    return rows


def _lowered_dense(M: int, K: int, N: int, a: np.ndarray, b: np.ndarray, expect: np.ndarray,
                   repeats: int) -> dict[str, float | bool | str]:  # fmt: skip
    """The DietCode dense schedule, lowered (thread regions with barriers run as fibers)."""
    import loopir
    from loopir import examples

    t0 = time.perf_counter()
    low = loopir.lower(examples.dense(M, K, N).func)
    te_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as cache:
        mod = build_cpu(low, check_bounds=True, cache_dir=cache)
        c = np.zeros((M, N), np.float32)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            mod(a, b, c)
            times.append(time.perf_counter() - t0)
    return {
        "what": "dense schedule, lowered", "check_bounds": True, "te_s": te_s,
        "codegen_s": mod.codegen_seconds, "compile_s": mod.compile_seconds,
        "run_s": statistics.median(times),
        "max_rel_err": float(np.max(np.abs(c - expect) / np.abs(expect))),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("shape", nargs="*", type=int, default=[128, 128, 128], help="M K N")
    args = p.parse_args()
    M, K, N = (args.shape + [128, 128, 128])[:3]
    rows = run(M, K, N)
    lines = [
        f"te matmul {M}x{K}x{N} float32 on {platform.machine()} ({platform.processor() or 'cpu'}), "
        f"python {platform.python_version()}",
        "",
        "| function | check_bounds | frontend (s) | C codegen (s) | gcc compile (s) | run, median of 7 (s) | max rel. error |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['what']} | {r['check_bounds']} | {r['te_s']:.4f} | {r['codegen_s']:.4f} | {r['compile_s']:.3f} "
            f"| {r['run_s']:.4f} | {r['max_rel_err']:.1e} |"
        )
    print("\n".join(lines))  # a command-line tool: printing is its output


if __name__ == "__main__":
    main()
