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


def _gpu_cpu_ref(base, sch, a, out_dtype, rows):
    """(GPU result, CPU executor result, float64 reference inputs) of ``sch`` on ``a``; the
    GPU build must be race-check clean (no RaceCheckWarning)."""
    import warnings

    from loopir.passes.race_check import RaceCheckWarning

    gpu = np.full(rows, np.nan, out_dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RaceCheckWarning)
        loopir.build(sch.func, target="cuda")(a, gpu)
    cpu = np.full(rows, np.nan, out_dtype)
    loopir.build(loopir.lower(sch.func), target="cpu", thread_order="random", seed=1)(a, cpu)
    return gpu.astype("float64"), cpu.astype("float64")


def _check(op, gpu, cpu, ref, n, out_dtype) -> None:
    if op != "sum":  # max/min round nothing: exact
        np.testing.assert_array_equal(gpu, ref)
        np.testing.assert_array_equal(cpu, ref)
        return
    tol = (1e-6 if out_dtype == "float32" else 1e-3) * n + 1e-6
    np.testing.assert_allclose(gpu, ref, atol=tol)
    np.testing.assert_allclose(gpu, cpu, atol=tol)


# (input dtype, accumulator dtype or None): fp16 sums of 100003 values need an fp32 accumulator
_DTYPES = [("float32", None), ("float16", "float32"), ("float16", None)]
_ISSUE_29 = [(op, dt, acc, n) for op in ("sum", "max", "min") for dt, acc in _DTYPES
             for n in (1, 31, 33, 1000, 100003)
             if not (op == "sum" and acc is None and dt == "float16" and n > 1000)]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("op,dtype,acc,n", _ISSUE_29)
def test_serial_part_outside_the_thread_loop_on_the_gpu(op, dtype, acc, n) -> None:
    """Issue 29: ``k0, k1 = split(k, [None, 64]); bind(k1, "threadIdx.x")``, k0 outside."""
    from tests.passes.test_cross_thread_yz import _base

    rows = 5
    base = _base(op, rows, n, dtype, acc)
    sch = loopir.Schedule(base)
    i, kk = sch.get_loops(sch.get_block("S"))
    _, k1 = sch.split(kk, [None, 64])
    sch.bind(i, "blockIdx.x")
    sch.bind(k1, "threadIdx.x")
    a = (np.random.default_rng(n).random((rows, n)) - 0.5).astype(dtype)
    out_dtype = acc or dtype
    gpu, cpu = _gpu_cpu_ref(base, sch, a, out_dtype, rows)
    _check(op, gpu, cpu, REFS[op](a.astype("float64"), axis=1), n, out_dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("dtype,acc", _DTYPES)
@pytest.mark.parametrize("n", [1, 33, 1000])
def test_reductions_over_y_and_z_on_the_gpu(op, dtype, acc, n) -> None:
    """Issue 29 item 2: reductions bound to threadIdx.y/z (and x with y), shared-memory tree."""
    from tests.passes.test_cross_thread_yz import _base, _schedules

    rows = 8
    base = _base(op, rows, n, dtype, acc)
    a = (np.random.default_rng(n + 1).random((rows, n)) - 0.5).astype(dtype)
    out_dtype = acc or dtype
    ref = REFS[op](a.astype("float64"), axis=1)
    for name, sch in _schedules(base).items():
        gpu, cpu = _gpu_cpu_ref(base, sch, a, out_dtype, rows)
        try:
            _check(op, gpu, cpu, ref, n, out_dtype)
        except AssertionError as e:
            raise AssertionError(f"schedule {name}: {e}") from None
