"""Cross-thread reductions on the GPU against the CPU executor (sum/max/min, fp32/fp16)."""

from __future__ import annotations

import numpy as np
import pytest

import loopir
from loopir.examples import layernorm, rmsnorm, row_sum, softmax
from tests.passes.test_cross_thread import REFS, _reduction, _vthread_reduction


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("dtype,acc", [("float32", None), ("float16", "float32"), ("float16", None)])
@pytest.mark.parametrize("n", [1, 31, 32, 33, 1000])
def test_reduction_over_threads_matches_the_cpu(op, dtype, acc, n) -> None:
    rows = 5
    sch = _reduction(op, rows, n, n, dtype, acc)  # one thread per element of the row
    a = (np.random.default_rng(n).random((rows, n)) - 0.5).astype(dtype)
    out_dtype = acc or dtype
    gpu = np.full(rows, np.nan, out_dtype)
    loopir.build(sch.func, target="cuda")(a, gpu)
    cpu = np.full(rows, np.nan, out_dtype)
    loopir.build(sch.func, target="cpu")(a, cpu)
    ref = REFS[op](a.astype("float64"), axis=1)
    tol = 1e-5 * n if out_dtype == "float32" else 2e-3 * n
    np.testing.assert_allclose(gpu.astype("float64"), ref, atol=tol + 1e-6)
    np.testing.assert_allclose(gpu.astype("float64"), cpu.astype("float64"), atol=tol + 1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [32, 128, 1024])
def test_strided_parts_then_threads(threads) -> None:
    sch = _reduction("sum", 3, 10_000, threads)
    a = np.random.default_rng(threads).random((3, 10_000)).astype("float32")
    out = np.full(3, np.nan, "float32")
    loopir.build(sch.func, target="cuda")(a, out)
    np.testing.assert_allclose(out, a.astype("float64").sum(1), rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", [(64, 1000), (7, 4096), (3, 33), (5, 1024)])
def test_examples_on_the_gpu(dtype, shape) -> None:
    r, c = shape
    rng = np.random.default_rng(c)
    x = ((rng.random((r, c)) - 0.5) * 4).astype(dtype)
    w, b = (rng.random(c) + 0.5).astype(dtype), (rng.random(c) - 0.5).astype(dtype)
    xd = x.astype("float64")
    e = np.exp(xd - xd.max(1, keepdims=True))
    m, v = xd.mean(1, keepdims=True), xd.var(1, keepdims=True)
    cases = [
        (softmax(r, c, dtype), (x,), e / e.sum(1, keepdims=True), dtype),
        (layernorm(r, c, dtype), (x, w, b), (xd - m) / np.sqrt(v + 1e-5) * w.astype("float64") + b.astype("float64"), dtype),
        (row_sum(r, c, dtype), (x,), xd.sum(1), "float32"),
        (rmsnorm(r, c, dtype), (x, w), xd / np.sqrt((xd * xd).mean(1, keepdims=True) + 1e-6) * w.astype("float64"), dtype),
    ]  # fmt: skip
    tol = 1e-4 if dtype == "float32" else 2e-2
    for sch, args, ref, out_dtype in cases:
        out = np.full(ref.shape, np.nan, out_dtype)
        loopir.build(sch.func, target="cuda")(*args, out)
        np.testing.assert_allclose(out.astype("float64"), ref, atol=tol * max(1.0, np.abs(ref).max()))


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [16, 64])
def test_reduction_under_a_vthread_loop_on_the_gpu(threads) -> None:
    """Issue 28: one accumulator per virtual thread, each combined in place (CUDA and CPU)."""
    from loopir.testing import check_equivalent

    base, sch = _vthread_reduction(threads)
    check_equivalent(base, sch.func, target2="cuda")
    check_equivalent(base, loopir.lower(sch.func))
