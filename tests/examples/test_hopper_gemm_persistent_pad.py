"""``hopper_gemm(..., persistent=...)`` with M or N off the block tile (issue 32).

The padded C of a persistent kernel is stored from the accumulator fragments straight to the
result, each lane its own elements under a guard on the sizes (``tensor_core_gemm.schedule``'s
``direct``): no shared tile of C and no block barrier, which the producer warpgroup, running
ahead into the next tile, would never reach.

* On the CPU executor (both thread orders) the kernel equals the non-persistent one (whose
  padded C goes through shared memory) bit for bit and float64 closely, on drawn shapes off the
  tile in M, N and K, with tile counts the CTAs do not divide, ``setmaxnreg`` too (each role
  one branch now), and the unscheduled program exactly.
* The structure: no shared C tile, no block barrier in the roles, the guard on each element.
* Sizes that are not ints are refused by name (as every ``hopper_gemm``).
* nvcc compiles padded shapes for sm_90a without spills; on a GPU they equal float64 and the
  CPU executor.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopir.errors import ScheduleError
from loopir.examples import hopper_gemm
from loopir.examples.tensor_core import tc_gemm_func
from loopir.ir.expr import Var
from loopir.passes.race_check import RaceCheckWarning
from tests.examples.test_hopper_gemm_persistent import (
    _run,
    compiles_without_spills,
    gpu_equals_the_cpu,
    lowered,
    persistent_source,
    races_left,
)
from tests.examples.test_hopper_gemm_tma import SMALL, _inputs, gpu_equals_float64_and_the_cpu
from tests.tensor_intrin.kernels import from_storage, to_storage


def _out(M: int, N: int, out_dtype: str | None) -> np.ndarray:
    return to_storage(np.full((M, N), np.nan), out_dtype or "float32")


@settings(max_examples=8, deadline=None)
@given(M=st.integers(1, 200), N=st.integers(1, 100), k8=st.integers(1, 24), ctas=st.integers(1, 7),
       stages=st.integers(2, 4), async_mma=st.booleans(), regs=st.booleans(),
       dtype=st.sampled_from(["float16", "bfloat16"]), half=st.booleans(),
       order=st.sampled_from(["sequential", "random"]))  # fmt: skip
def test_padded_persistent_equals_ws_and_float64_on_the_cpu(M: int, N: int, k8: int, ctas: int, stages: int,
                                                            async_mma: bool, regs: bool, dtype: str, half: bool,
                                                            order: str) -> None:  # fmt: skip
    """Drawn sizes off the 64 x 32 tile in M and N (and K in most), 1 to 7 CTAs: equal to the
    non-persistent kernel exactly (its C through shared memory), to float64 closely."""
    K = 8 * k8
    out_dtype = dtype if half else None
    params = dict(SMALL, stages=stages, async_mma=async_mma and stages >= 3, dtype=dtype, tma=True,
                  out_dtype=out_dtype)  # fmt: skip
    a, b, _ = _inputs(M, K, N, dtype, seed=M * 1000 + K * 10 + N)
    c = _out(M, N, out_dtype)
    sch = hopper_gemm(M, K, N, **params, warp_specialized=(40, 232) if regs else True, persistent=ctas)
    assert races_left(sch.func) == []
    got = _run(lowered(sch), a, b, c, order)
    plain = _run(lowered(hopper_gemm(M, K, N, **params, warp_specialized=True)), a, b, c)
    np.testing.assert_array_equal(got, plain)
    want = from_storage(a, dtype) @ from_storage(b, dtype).T
    tol = 1e-2 if half else 2e-3
    np.testing.assert_allclose(from_storage(got, out_dtype or "float32"), want, rtol=tol, atol=tol * max(np.abs(want).max(), 1.0))


@pytest.mark.parametrize("order", ["sequential", "random"])
@pytest.mark.parametrize(("shape", "ctas"), [((150, 136, 70), 4), ((65, 64, 33), 2), ((190, 8, 95), 9)])
def test_both_thread_orders(order: str, shape: tuple[int, int, int], ctas: int) -> None:
    """3 x 3 tiles off the tile in M and N over 4 CTAs, 2 x 2 tiles (one row and column of
    the last tile inside the sizes) over 2, 3 x 3 tiles of one K step over 9."""
    M, K, N = shape
    a, b, c = _inputs(M, K, N, "float16", seed=ctas)
    sch = hopper_gemm(M, K, N, **SMALL, stages=3, tma=True, warp_specialized=True, persistent=ctas)
    got = _run(lowered(sch), a, b, c, order)
    want = from_storage(a, "float16") @ from_storage(b, "float16").T
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_equals_the_unscheduled_program() -> None:
    from loopir.testing import check_equivalent

    sch = hopper_gemm(100, 200, 70, **SMALL, stages=3, tma=True, warp_specialized=True, persistent=3,
                      out_dtype="float16")  # fmt: skip
    want = tc_gemm_func(100, 200, 70, b_trans=True, out_dtype="float16")
    check_equivalent(want, lowered(sch), thread_order="random")


def test_structure() -> None:
    """No shared tile of C and no block barrier but the one after the mbarriers' init: each
    lane stores its fragment elements to D itself, guarded by the sizes (the tile's guard
    lifted into the tile loop, the elements' kept); ``setmaxnreg`` in each role's branch."""
    sch = hopper_gemm(100, 128, 40, **SMALL, stages=2, tma=True, warp_specialized=(40, 232), persistent=3,
                      raster=1, out_dtype="float16")  # fmt: skip
    low = lowered(sch).script()
    assert "C_pad_shared" not in low and '"float32", "shared"' not in low
    assert low.count("tvm_storage_sync") == 1
    consumer = low[low.index("else:") :]
    assert "T.setmaxnreg(232, T.bool(True))" in consumer or "setmaxnreg(232" in consumer
    t, bx = "i0_0_0_i1_0_0_fused_0", "i0_0_0_i1_0_0_fused_1"
    assert f"for {t} in T.serial((0 - {bx}) // 3 + 2):" in consumer
    assert f"if ({t} * 3 + {bx}) // 2 * 64 + i0_0_1 * 16 + " in consumer and " < 100 and (" in consumer
    assert "< 40:" in consumer and f"{t} * 3 + {bx} < 4" not in consumer
    assert 'D[' in consumer and 'T.Cast("float16", C_pad_warp[0, ' in consumer


def test_the_fragments_are_each_lanes_own_registers_for_cuda() -> None:
    """``LowerWarpMemory`` accepts the lanes' stores (their lane index is threadIdx.x): the
    fragment becomes the thread's registers, indexed by the element alone."""
    from loopir.codegen_cuda import lower_for_cuda

    sch = hopper_gemm(100, 128, 40, **SMALL, stages=2, tma=True, warp_specialized=True, persistent=3, raster=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RaceCheckWarning)
        low = lower_for_cuda(sch.func).script()
    assert 'C_pad_warp = T.allocate((1, 2, 8), "float32", "local")' in low
    assert "= C_pad_warp[0, ax1_0, ax1_1 * 4 + ax0_1 * 2 + ax1_3]" in low


def test_symbolic_sizes_are_refused_by_name() -> None:
    """``hopper_gemm`` takes constant sizes only (the fragments' layouts need constant shapes);
    persistent says so first, naming the sizes."""
    M = Var("M", "int32")
    with pytest.raises(ScheduleError, match=r"examples.hopper_gemm: persistent=True needs constant sizes M and N.*"
                                            r"got M=M, N=64"):  # fmt: skip
        hopper_gemm(M, 256, 64, **SMALL, tma=True, warp_specialized=True, persistent=True)  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match=r"M must be a positive int, got M"):
        hopper_gemm(M, 256, 64, **SMALL, tma=True, warp_specialized=True)  # type: ignore[arg-type]


def test_the_default_depth_counts_no_c_tile() -> None:
    """4 stages of 128 x 256 x 64 tiles (4 x 48 KB) at 1000^3: no shared C tile to fit with
    them (the non-persistent form's 128 KB tile of C leaves 2)."""
    persistent = lowered(hopper_gemm(1000, 256, 1000, tma=True, warp_specialized=True, persistent=True)).script()
    plain = lowered(hopper_gemm(1000, 256, 1000, tma=True, warp_specialized=True, persistent=False)).script()
    assert 'A_pad_shared = T.allocate((4, 128, 64), "float16", "shared")' in persistent
    assert 'T.allocate((2, 128, 64), "float16", "shared") as A_pad_shared' in plain
    assert 'C_pad = T.allocate((128, 256), "float32", "shared")' in plain and 'C_pad = ' not in persistent


# --- nvcc and the GPU ------------------------------------------------------------------------

NVCC_CASES = {
    "default_tile_1000_fp16_out": ((1000, 1000, 1000), dict(out_dtype="float16")),
    "setmaxnreg_4000x1000x3000": ((4000, 1000, 3000), dict(out_dtype="bfloat16", dtype="bfloat16",
                                                           warp_specialized=(40, 232))),
    "raster_2000x4096x1500": ((2000, 4096, 1500), dict(raster=8)),
    "block_128x128_odd_n": ((777, 520, 333), dict(block=(128, 128, 64), wn=128, stages=3, persistent=5)),
}  # fmt: skip


@pytest.mark.nvcc
@pytest.mark.parametrize("name", list(NVCC_CASES))
def test_compiles_with_nvcc_for_sm_90a_without_spills(name: str, tmp_path: Path) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    shape, params = NVCC_CASES[name]
    src = persistent_source(shape, dict(dict(raster=8), **params))  # hopper_gemm's default raster here
    body = src.split("__global__")[-1]
    assert "k_0_0_produce <" in body and "__syncthreads" in body and body.count("__syncthreads") == 1
    compiles_without_spills(src, tmp_path)


GPU_CASES = [
    ((1000, 1000, 1000), dict(out_dtype="float16")),
    ((4000, 1000, 3000), dict(dtype="bfloat16", out_dtype="bfloat16", warp_specialized=(40, 232))),
    ((2000, 4096, 1500), dict(raster=8)),
    ((777, 520, 333), dict(block=(128, 128, 64), wn=128, stages=3, persistent=5)),
    ((100, 64, 40), dict(SMALL, stages=2, persistent=3)),  # one K step, tiles of 64 x 32
    ((4095, 4096, 4097), dict(out_dtype="float16")),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("shape", "params"), GPU_CASES)
def test_gpu_equals_float64_and_the_cpu(shape: tuple[int, int, int], params: dict) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RaceCheckWarning)
        gpu_equals_float64_and_the_cpu(shape, dict(dict(tma=True, warp_specialized=True, persistent=True), **params))


@pytest.mark.gpu
@settings(max_examples=10, deadline=None)
@given(M=st.integers(1, 700), N=st.integers(1, 600), k8=st.integers(1, 70), ctas=st.integers(1, 20),
       stages=st.integers(2, 4), async_mma=st.booleans(), regs=st.booleans(),
       dtype=st.sampled_from(["float16", "bfloat16"]))  # fmt: skip
def test_gpu_equals_the_cpu_on_drawn_shapes(M: int, N: int, k8: int, ctas: int, stages: int, async_mma: bool,
                                            regs: bool, dtype: str) -> None:  # fmt: skip
    gpu_equals_the_cpu((M, 8 * k8, N), ctas, stages, async_mma, regs, dtype, raster=8)  # hopper_gemm's default
