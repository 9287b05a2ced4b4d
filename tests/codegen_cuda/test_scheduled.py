"""Scheduled workloads end to end: te -> schedule -> lower -> CUDA, against the CPU executor."""

from __future__ import annotations

import numpy as np
import pytest

import loopir
from loopir import te
from loopir.codegen_cuda import build_cuda
from loopir.schedule import Schedule

pytestmark = pytest.mark.nvcc

PAD = pytest.mark.parametrize("local_pad", [False, True], ids=["pad_off", "pad_on"])


def _build(func, local_pad: bool, cache):
    with loopir.PassContext(config={"tir.enable_local_pad": local_pad}):
        return build_cuda(func, cache_dir=cache)


def _elementwise_schedule(n: int) -> Schedule:
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n,), "float32", name="B")
    C = te.compute((n,), lambda i: te.exp(A[i]) * B[i] + 1.0, name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    (i,) = sch.get_loops(sch.get_block("C"))
    bx, tx = sch.split(i, [None, 128])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch


def _rowsum_schedule(m: int, n: int) -> Schedule:
    A = te.placeholder((m, n), "float32", name="A")
    k = te.reduce_axis(n, name="k")
    S = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="S")
    sch = Schedule(te.create_prim_func([A, S]))
    i, kk = sch.get_loops(sch.get_block("S"))
    bx, tx = sch.split(i, [None, 64])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch


def test_dense_schedule_source(cuda_cache):
    mod = _build(loopir.examples.dense(960, 770, 2304).func, False, cuda_cache)
    src = mod.source
    assert "vthread" not in src
    assert "float C_local[64];" in src  # 2 virtual threads x 32 accumulators
    assert src.count("__syncthreads();") == 2
    assert "__launch_bounds__(256)" in src
    r = mod.resource_usage["main_kernel0"]
    assert r.stack_frame_bytes == 0 and r.spill_store_bytes == 0


def test_dense_tile_aligned_is_vectorized_and_unguarded(cuda_cache):
    src = _build(loopir.examples.dense(1024, 772, 2304).func, False, cuda_cache).source
    assert "*(float4*)(A_shared" in src and "*(float4*)(B_shared" in src
    assert "< 1024" not in src and "< 772" not in src


@PAD
def test_dense_local_pad_removes_compute_guards(local_pad, cuda_cache):
    src = _build(loopir.examples.dense(960, 770, 2304).func, local_pad, cuda_cache).source
    compute = src[src.rindex("__syncthreads();"):src.index("  C[(")]
    assert "C_local[" in compute
    assert ("< 770" in compute) is not local_pad


@pytest.mark.gpu
@PAD
@pytest.mark.parametrize("shape", [(200, 70, 256), (130, 33, 130), (128, 8, 128)])
def test_gpu_dense_matches_cpu(shape, local_pad, cuda_cache):
    M, K, N = shape
    func = loopir.examples.dense(M, K, N).func
    mod = _build(func, local_pad, cuda_cache)
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c_gpu = np.full((M, N), np.nan, np.float32)
    c_cpu = np.full((M, N), np.nan, np.float32)
    mod(a, b, c_gpu)
    loopir.build(func, target="cpu")(a, b, c_cpu)
    assert not np.isnan(c_gpu).any()
    np.testing.assert_allclose(c_gpu, c_cpu, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_gpu_dense_symbolic_sizes(cuda_cache):
    M, K, N = loopir.Var("M"), loopir.Var("K"), loopir.Var("N")
    func = loopir.examples.dense(M, K, N).func
    mod = _build(func, False, cuda_cache)
    cpu = loopir.build(func, target="cpu")
    rng = np.random.default_rng()
    for m, k, n in [(130, 9, 257), (64, 64, 128)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c1, c2 = np.zeros((m, n), np.float32), np.zeros((m, n), np.float32)
        mod(a, b, c1)
        cpu(a, b, c2)
        np.testing.assert_allclose(c1, c2, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@PAD
def test_gpu_elementwise_and_rowsum_match_cpu(local_pad, cuda_cache):
    rng = np.random.default_rng()
    ew = _elementwise_schedule(1000).func
    a, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    c1, c2 = np.zeros(1000, np.float32), np.zeros(1000, np.float32)
    _build(ew, local_pad, cuda_cache)(a, b, c1)
    loopir.build(ew, target="cpu")(a, b, c2)
    # the GPU contracts exp(a) * b + 1 into an FMA: absolute error near zero results
    np.testing.assert_allclose(c1, c2, rtol=1e-5, atol=1e-5)
    rs = _rowsum_schedule(100, 37).func
    x = rng.standard_normal((100, 37)).astype(np.float32)
    s1, s2 = np.zeros(100, np.float32), np.zeros(100, np.float32)
    _build(rs, local_pad, cuda_cache)(x, s1)
    loopir.build(rs, target="cpu")(x, s2)
    np.testing.assert_allclose(s1, s2, rtol=1e-5, atol=1e-5)


def test_build_dispatch_through_loopir_build(cuda_cache):
    mod = loopir.build(_elementwise_schedule(256).func, target="cuda", cache_dir=cuda_cache)
    assert "expf(A[" in mod.source
