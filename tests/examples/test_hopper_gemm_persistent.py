"""``hopper_gemm(tma=True, warp_specialized=True, persistent=...)`` (issue 32): a persistent
tile scheduler. A grid of ``ctas`` thread blocks, each looping over the block tiles
``it * ctas + blockIdx.x``; the producer warpgroup runs the flattened (tile, k) steps, the
consumers tile by tile with their epilogue between, the stage and parity of the global step.

* On the CPU executor (mbarriers as barriers in thread regions) the lowered kernel equals the
  non-persistent warp-specialized one bit for bit and float64 closely, on drawn shapes with
  K off the tile (TMA's zeros) and tile counts that the CTAs do not divide (the split's
  predicate lifted into the tile loop's extent), in both thread orders.
* The race check proves the kernel (``race_ws`` the protocol, ``race_prove`` the epilogue's
  global stores, whose tile ``(it * ctas + bx) // cols`` it takes apart into digits): no
  ``RaceCheckWarning``; a wrong tile index in the stores is a race it reports with a witness.
* The structure, the knob in the trace, refusals by name; nvcc compiles it without spills; on
  a GPU it equals float64 and the CPU executor.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.codegen_cuda import lower_for_cuda
from loopir.errors import ScheduleError
from loopir.examples.tensor_core import tc_gemm_func
from loopir.passes.race_check import RaceCheckWarning, find_races
from tests.examples.hopper_forms import hopper_gemm  # the forms of before the default changed
from tests.examples.test_hopper_gemm_tma import SMALL, _inputs, gpu_equals_float64_and_the_cpu
from tests.tensor_intrin.kernels import from_storage


def lowered(sch: loopir.Schedule) -> loopir.PrimFunc:
    """``loopir.lower``, with no warning (the race check proves every pair)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return loopir.lower(sch.func)


def races_left(f: loopir.PrimFunc) -> list[str]:
    """The race check's report on the CUDA lowering: no race, the unproven pairs' buffers."""
    report = find_races(lower_for_cuda(f))
    assert not report.races
    return sorted({u.split(":", 1)[0] for u in report.unproven})


def _run(func: loopir.PrimFunc, a: np.ndarray, b: np.ndarray, c: np.ndarray, order: str = "random") -> np.ndarray:
    out = c.copy()
    loopir.build(func, target="cpu", thread_order=order)(a, b, out)
    return out


@settings(max_examples=8, deadline=None)
@given(mt=st.integers(1, 4), nt=st.integers(1, 3), k8=st.integers(1, 40), ctas=st.integers(1, 7),
       stages=st.integers(2, 4), async_mma=st.booleans(), regs=st.booleans(),
       dtype=st.sampled_from(["float16", "bfloat16"]), order=st.sampled_from(["sequential", "random"]))  # fmt: skip
def test_persistent_equals_ws_and_float64_on_the_cpu(mt: int, nt: int, k8: int, ctas: int, stages: int,
                                                     async_mma: bool, regs: bool, dtype: str, order: str) -> None:  # fmt: skip
    """Drawn sizes: M, N whole tiles (``mt * nt`` of them, CTAs from 1 to 7: more CTAs than
    tiles too), K a multiple of 8 (1 to 5 K steps, most off the tile): equal to the
    non-persistent kernel exactly, to float64 closely."""
    M, N, K = 64 * mt, 32 * nt, 8 * k8
    params = dict(SMALL, stages=stages, async_mma=async_mma and stages >= 3, dtype=dtype, tma=True,
                  warp_specialized=(40, 232) if regs else True)  # fmt: skip
    a, b, c = _inputs(M, K, N, dtype, seed=M * 1000 + K * 10 + N)
    sch = hopper_gemm(M, K, N, **params, persistent=ctas)
    assert races_left(sch.func) == []
    got = _run(lowered(sch), a, b, c, order)
    plain = _run(lowered(hopper_gemm(M, K, N, **params)), a, b, c)
    np.testing.assert_array_equal(got, plain)
    want = from_storage(a, dtype) @ from_storage(b, dtype).T
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * max(np.abs(want).max(), 1.0))


@pytest.mark.parametrize("order", ["sequential", "random"])
@pytest.mark.parametrize(("ctas", "kt"), [(4, 5), (2, 1), (9, 3)])
def test_both_thread_orders(order: str, ctas: int, kt: int) -> None:
    """9 tiles over 4 CTAs (3, 2, 2, 2 each), over 2 (5 and 4 tiles of one K step each), over
    9 (one each): the GEMM in either order of the executor's threads."""
    M, K, N = 192, 64 * kt - 24, 96
    a, b, c = _inputs(M, K, N, "float16", seed=ctas)
    sch = hopper_gemm(M, K, N, **SMALL, stages=3, tma=True, warp_specialized=True, persistent=ctas)
    got = _run(lowered(sch), a, b, c, order)
    want = from_storage(a, "float16") @ from_storage(b, "float16").T
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_equals_the_unscheduled_program() -> None:
    from loopir.testing import check_equivalent

    sch = hopper_gemm(128, 320, 64, **SMALL, stages=3, tma=True, warp_specialized=True, persistent=3)
    check_equivalent(tc_gemm_func(128, 320, 64, b_trans=True), lowered(sch), thread_order="random")


def test_structure() -> None:
    """The defaults' 128 x 256 tile at 4096^3 (512 tiles) over 132 CTAs: a grid of 132 blocks,
    each running 4 tiles (3 from block 116): the producer's one loop over their 64 K steps
    each, the consumers' tile loop around their K loop, the wait, the wgmma and the release
    at the global step (k % 4 here: 64 steps a tile), the epilogue in the tile loop."""
    sch = hopper_gemm(4096, 4096, 4096, out_dtype="float16", tma=True, warp_specialized=True, persistent=True)
    trace = str(sch.trace)
    assert "sch.split(l43, [None, 132]" in trace and 'sch.bind(l45, "blockIdx.x")' in trace  # fused tiles, split
    low = lowered(sch).script()
    assert 'T.thread_binding(132, thread="blockIdx.x")' in low and "blockIdx.y" not in low
    fused = "i0_0_0_i1_0_0_fused"
    producer = low[low.index("if i0_0_1 >= 8:") : low.index("else:")]
    assert f"for k_0_0_produce in T.serial((115 - {fused}_1) // 132 * 64 + 256):" in producer
    assert "T.ptx_mbarrier_wait(k_0_0_empty_bar[k_0_0_produce % 4], (k_0_0_produce // 4 + 1) % 2)" in producer
    assert f"A[(k_0_0_produce // 64 * 132 + {fused}_1) // 16 * 128, k_0_0_produce % 64 * 64]" in producer
    consumer = low[low.index("else:") :]
    assert f"for {fused}_0 in T.serial((115 - {fused}_1) // 132 + 4):" in consumer
    assert "T.ptx_mbarrier_wait(k_0_0_tma_bar[k_0_0_consume % 4], k_0_0_consume // 4 % 2)" in consumer
    assert "tvm_storage_sync" not in low[low.index("if i0_0_1 >= 8:") :]


def test_the_global_step_goes_on_across_tiles() -> None:
    """7 K steps a tile and 3 stages: the consumers' stage and parity are those of
    ``t * 7 + k`` (a K loop that restarted its stages each tile would wait on the wrong
    phase), the tail releases ``t * 7 + 6`` (its stage ``t * 7 % 3``)."""
    low = lowered(hopper_gemm(192, 448, 96, **SMALL, stages=3, tma=True, warp_specialized=True,
                              persistent=4)).script()  # fmt: skip
    t = "i0_0_0_i1_0_0_fused_0"
    assert f"T.ptx_mbarrier_wait(k_0_0_tma_bar[({t} * 7 + k_0_0_consume) % 3], ({t} * 7 + k_0_0_consume) // 3 % 2)" in low
    assert f"T.ptx_mbarrier_arrive(k_0_0_empty_bar[({t} * 7 + k_0_0_consume - 1) % 3], 1)" in low
    assert f"T.ptx_mbarrier_arrive(k_0_0_empty_bar[{t} * 7 % 3], 1)" in low


def test_no_more_blocks_than_tiles() -> None:
    """4 tiles and ``persistent=True`` (132): 4 blocks of one tile each, the tile loop gone (an
    idle block would keep the split's guard on blockIdx alone, no loop to lift it into)."""
    low = lowered(hopper_gemm(128, 256, 64, **SMALL, stages=3, tma=True, warp_specialized=True,
                              persistent=True)).script()  # fmt: skip
    assert 'T.thread_binding(4, thread="blockIdx.x")' in low and "fused_0" not in low
    assert "for k_0_0_produce in T.serial(4):" in low


def test_the_knob_is_in_the_trace_and_replays() -> None:
    sch = hopper_gemm(128, 256, 64, **SMALL, stages=3, tma=True, warp_specialized=True, persistent=3)
    replay = loopir.Schedule(tc_gemm_func(128, 256, 64, b_trans=True))
    loopir.Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(replay)
    loopir.assert_structural_equal(sch.func, replay.func)


def test_bad_parameters_are_refused_by_name() -> None:
    with pytest.raises(ScheduleError, match=r"examples.hopper_gemm.*persistent must be False, True or a positive "
                                            r"number of thread blocks, with warp_specialized; got True"):  # fmt: skip
        hopper_gemm(128, 256, 64, **SMALL, tma=True, persistent=True)
    for bad in (0, -3, 2.5, "132"):
        with pytest.raises(ScheduleError, match=rf"persistent must be .*got {bad!r}"):
            hopper_gemm(128, 256, 64, **SMALL, tma=True, warp_specialized=True, persistent=bad)  # type: ignore[arg-type]
    # M and N off the block tile: tests/examples/test_hopper_gemm_persistent_pad.py


# --- nvcc and the GPU ------------------------------------------------------------------------

NVCC_CASES = {
    "defaults_4096_fp16_out": ((4096, 4096, 4096), dict(out_dtype="float16")),
    "setmaxnreg_4096": ((4096, 4096, 4096), dict(out_dtype="float16", warp_specialized=(40, 232))),
    "bf16_ragged_k_3_stages": ((512, 1000, 512), dict(dtype="bfloat16", block=(128, 128, 64), wn=128, stages=3,
                                                      persistent=5)),
}  # fmt: skip


def persistent_source(shape: tuple[int, int, int], params: dict) -> str:
    """The CUDA source of ``hopper_gemm(*shape, tma=True, warp_specialized=True,
    persistent=True, **params)`` (params win), race-proven (a RaceCheckWarning fails)."""
    from loopir.codegen_cuda import emit_function

    sch = hopper_gemm(*shape, **dict(dict(warp_specialized=True, persistent=True), **params), tma=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RaceCheckWarning)
        return emit_function(lower_for_cuda(sch.func)).emitted.source


def compiles_without_spills(src: str, tmp_path: Path) -> None:
    """nvcc for sm_90a: no spills, and ptxas did not serialize the wgmma (C7508)."""
    from loopir.codegen_cuda import compile_cuda

    binary = compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
    assert "C7508" not in binary.log
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, binary.log


@pytest.mark.nvcc
@pytest.mark.parametrize("name", list(NVCC_CASES))
def test_compiles_with_nvcc_for_sm_90a_without_spills(name: str, tmp_path: Path) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    src = persistent_source(*NVCC_CASES[name])
    body = src.split("__global__")[-1]
    assert "k_0_0_produce <" in body and "loopir_mbarrier_arrive(&k_0_0_empty_bar" in body
    compiles_without_spills(src, tmp_path)


GPU_CASES = [
    ((4096, 4096, 4096), dict(out_dtype="float16")),
    ((4096, 4096, 4096), dict(out_dtype="float16", warp_specialized=(40, 232))),
    ((1024, 4096, 768), dict(dtype="bfloat16", persistent=7)),  # 12 tiles over 7 CTAs
    ((512, 1000, 512), dict(block=(128, 128, 64), wn=128, stages=3, persistent=5)),  # K off the tile
    ((256, 192, 256), dict(block=(128, 128, 64), wn=128, stages=2, async_mma=False, persistent=3)),
    ((128, 64, 256), dict(SMALL, stages=4, persistent=3)),  # one K step, 8 tiles over 3 CTAs
    ((2048, 1024, 2048), dict(raster=8, persistent=100)),  # tiles in L2 groups, 128 over 100 CTAs
]


@pytest.mark.gpu
@pytest.mark.parametrize(("shape", "params"), GPU_CASES)
def test_gpu_equals_float64_and_the_cpu(shape: tuple[int, int, int], params: dict) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RaceCheckWarning)
        gpu_equals_float64_and_the_cpu(shape, dict(dict(warp_specialized=True, persistent=True), **params))


@pytest.mark.gpu
@settings(max_examples=10, deadline=None)
@given(mt=st.integers(1, 6), kt=st.integers(1, 9), nt=st.integers(1, 4), ctas=st.integers(1, 20),
       stages=st.integers(2, 4), async_mma=st.booleans(), regs=st.booleans(),
       dtype=st.sampled_from(["float16", "bfloat16"]))  # fmt: skip
def test_gpu_equals_the_cpu_on_drawn_shapes(mt: int, kt: int, nt: int, ctas: int, stages: int, async_mma: bool,
                                            regs: bool, dtype: str) -> None:  # fmt: skip
    M, K, N = 128 * mt, 64 * kt - 8 * (kt % 3), 128 * nt  # K off the tile in some
    gpu_equals_the_cpu((M, K, N), ctas, stages, async_mma, regs, dtype)


def gpu_equals_the_cpu(shape: tuple[int, int, int], ctas: int, stages: int, async_mma: bool, regs: bool,
                       dtype: str, raster: int = 1) -> None:  # fmt: skip
    """The persistent kernel (128 x 128 tiles, ``ctas`` blocks; ``regs``: setmaxnreg 40 / 232)
    on the GPU equals its lowered kernel on the CPU executor, with no NaN left in C."""
    M, K, N = shape
    params = dict(block=(128, 128, 64), wn=128, stages=stages, async_mma=async_mma and stages >= 3, dtype=dtype,
                  raster=raster)  # fmt: skip
    sch = hopper_gemm(M, K, N, **params, tma=True, warp_specialized=(40, 232) if regs else True, persistent=ctas)
    a, b, c = _inputs(M, K, N, dtype, seed=M * 90000 + K * 300 + N)
    cpu = c.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RaceCheckWarning)
        loopir.build(loopir.lower(sch.func), target="cpu")(a, b, cpu)
        loopir.build(sch.func, target="cuda")(a, b, c)
    assert not np.isnan(c).any()
    np.testing.assert_allclose(c, cpu, rtol=1e-4, atol=1e-4 * max(np.abs(cpu).max(), 1.0))
