"""InjectSharedPrefetch through the CUDA backend: emitted source, nvcc resources, GPU vs CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _prefetch_kernels import tile_sum

import loopir
from loopir.codegen_cuda import build_cuda

PAD = pytest.mark.parametrize("pad", [False, True], ids=["pad_off", "pad_on"])


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prefetch-cuda-cache")


def _build(func: loopir.PrimFunc, pad: bool, cache: Path, prefetch: bool = True, **kw: object):
    with loopir.PassContext(config={"tir.enable_local_pad": pad, "tir.prefetch_shared": prefetch}):
        return build_cuda(func, cache_dir=cache, **kw)


@pytest.mark.nvcc
@PAD
def test_dense_source_and_resources(pad: bool, cache: Path) -> None:
    func = loopir.examples.dense(960, 770, 2304).func
    mod = _build(func, pad, cache)
    src = mod.source
    assert src.count("__syncthreads();") == 2  # no extra barrier
    assert "float A_shared_prefetch[4];" in src and "float B_shared_prefetch[4];" in src
    # next-tile loads: predicated vector loads (no branch), prologue + loop body
    assert src.count("@p ld.global.nc.v4.f32") == 2  # B: float4 rows (N = 2304)
    assert src.count("@p ld.global.nc.v2.f32") == 4  # A: K = 770 rows allow only float2
    assert "k_0 < 192" in src  # loads of k_0 + 1 only while there is a next tile
    # shared stores from the registers stay vector stores
    assert "= make_float4(B_shared_prefetch[0], B_shared_prefetch[1], B_shared_prefetch[2], B_shared_prefetch[3]);" in src
    r = mod.resource_usage["main_kernel0"]
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0 and r.stack_frame_bytes == 0
    # capped at 128 registers (2 blocks of 256 threads per SM) it still fits without spills
    capped = _build(func, pad, cache, nvcc_flags=("-maxrregcount=128",))
    r = capped.resource_usage["main_kernel0"]
    assert r.registers <= 128 and r.spill_store_bytes == 0 and r.spill_load_bytes == 0


@pytest.mark.nvcc
def test_dense_aligned_and_scalar_fetch_compile(cache: Path) -> None:
    src = _build(loopir.examples.dense(1024, 772, 2304).func, False, cache).source
    assert "@p ld.global.nc.v4.f32" in src and "< 1024" not in src
    mod = _build(loopir.examples.dense(130, 35, 260, vec=1).func, True, cache)
    assert "float A_shared_prefetch[2];" in mod.source
    assert "ld.global" not in mod.source  # scalar registers: plain guarded loads
    assert mod.resource_usage["main_kernel0"].spill_store_bytes == 0


@pytest.mark.nvcc
def test_without_prefetch_source_is_unchanged(cache: Path) -> None:
    src = _build(loopir.examples.dense(960, 770, 2304).func, True, cache, prefetch=False).source
    assert "_prefetch" not in src and "asm" not in src


@pytest.mark.gpu
@pytest.mark.nvcc
@PAD
@pytest.mark.parametrize("vec", [1, 2, 4])
@pytest.mark.parametrize("shape", [(60, 50, 70), (130, 35, 260), (960, 770, 2304)], ids=str)
def test_gpu_dense_prefetch_matches_cpu(shape: tuple[int, int, int], pad: bool, vec: int, cache: Path) -> None:
    M, K, N = shape
    func = loopir.examples.dense(M, K, N, vec=vec).func
    mod = _build(func, pad, cache)
    rng = np.random.default_rng(M + K + N)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c_gpu = np.full((M, N), np.nan, np.float32)
    mod(a, b, c_gpu)
    if M * N <= 130 * 260:
        c_cpu = np.full((M, N), np.nan, np.float32)
        with loopir.PassContext(config={"tir.enable_local_pad": pad, "tir.prefetch_shared": True}):
            loopir.build(func, target="cpu")(a, b, c_cpu)
        np.testing.assert_allclose(c_gpu, c_cpu, rtol=1e-4, atol=1e-4)
    assert not np.isnan(c_gpu).any()
    np.testing.assert_allclose(c_gpu, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-3)


@pytest.mark.nvcc
def test_int32_registers_compile(cache: Path) -> None:
    mod = _build(loopir.examples.dense(60, 50, 70, dtype="int32").func, True, cache)
    assert '@p ld.global.nc.v2.b32 {%0, %1}, [%3]; }" : "+r"(A_shared_prefetch_v.x)' in mod.source
    assert mod.resource_usage["main_kernel0"].spill_store_bytes == 0


@pytest.mark.gpu
@pytest.mark.nvcc
@PAD
def test_gpu_int32_dense_prefetch_matches_numpy(pad: bool, cache: Path) -> None:
    M, K, N = 130, 35, 260
    mod = _build(loopir.examples.dense(M, K, N, dtype="int32").func, pad, cache)
    rng = np.random.default_rng(7)
    a = rng.integers(-5, 6, (M, K)).astype(np.int32)
    b = rng.integers(-5, 6, (K, N)).astype(np.int32)
    c = np.full((M, N), -12345, np.int32)
    mod(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.gpu
@pytest.mark.nvcc
@pytest.mark.parametrize("n", [1, 8, 37])
def test_gpu_symbolic_tile_sum(n: int, cache: Path) -> None:
    nv = loopir.Var("n")
    f = tile_sum(nv)
    mod = build_cuda(f, cache_dir=cache)  # annotated loop: prefetched by lowering
    assert "S_prefetch" in mod.source
    a = np.random.default_rng(n).uniform(0.5, 1.5, n).astype(np.float32)
    idx = np.ones(8, np.int32)
    got, want = np.full(8, np.nan, np.float32), np.full(8, np.nan, np.float32)
    mod(a, idx, got)
    loopir.build(f, target="cpu")(a, idx, want)
    np.testing.assert_allclose(got, want, rtol=1e-6)
