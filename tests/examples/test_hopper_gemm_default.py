"""The default form of ``hopper_gemm`` and of the default GPU schedule's ``wgmma`` rule (issue 32).

* ``hopper_gemm`` with ``tma``, ``warp_specialized``, ``persistent`` and ``raster`` left out is
  the explicit ``tma=True, warp_specialized=True, persistent=True, raster=8`` where the other
  arguments allow it, and each documented fallback where they do not (the same function as
  the explicit form in each case).
* The default form equals float64 on the CPU executor (whole and padded sizes) and is proven
  race-free; its trace replays from JSON; nvcc compiles it for sm_90a without spills at the
  benchmark shapes; on a GPU it equals float64.
* The default GPU schedule (``wgmma=True``) takes the same form for a GEMM that fits it, a bias
  and a GELU folded into the guarded fragment stores, and falls back to the ``cp.async`` form
  otherwise, its description saying which.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loopir
from loopir import te
from loopir.examples import hopper_gemm
from loopir.examples.tensor_core import tc_gemm_func
from loopir.schedule.default_gpu import default_gpu_schedule
from tests.examples.test_hopper_gemm_tma import SMALL, _inputs, gpu_equals_float64_and_the_cpu
from tests.tensor_intrin.kernels import from_storage

FASTEST = dict(tma=True, warp_specialized=True, persistent=True, raster=8)
EARLIER = dict(tma=False, warp_specialized=False, persistent=False, raster=1)


def _same(a: loopir.Schedule, b: loopir.Schedule) -> None:
    loopir.assert_structural_equal(a.func, b.func)


def test_the_default_is_the_fastest_form() -> None:
    shape = (4096, 4096, 4096)
    _same(hopper_gemm(*shape, out_dtype="float16"), hopper_gemm(*shape, out_dtype="float16", **FASTEST))


@pytest.mark.parametrize(
    ("shape", "given", "resolved"),
    [
        ((1000, 1000, 1000), {}, FASTEST),  # padded: C from the fragments
        ((256, 100, 256), {}, EARLIER),  # K not a multiple of 8: no TMA
        ((256, 256, 256), dict(a_prologue=lambda x: x * 2), EARLIER),  # a computed operand
        ((256, 256, 256), dict(batch=2), EARLIER),  # TMA copies 2-d boxes
        ((256, 256, 256), dict(stages=1), EARLIER),  # no pipeline
        ((256, 256, 256), dict(block=(128, 256, 64), wn=128), dict(EARLIER, tma=True)),  # two warp columns
        ((256, 256, 256), dict(tma=False), EARLIER),
        ((256, 256, 256), dict(warp_specialized=False), dict(EARLIER, tma=True)),
        ((256, 256, 256), dict(persistent=False), dict(FASTEST, persistent=False, raster=1)),
        ((256, 256, 256), dict(persistent=7, raster=2), dict(FASTEST, persistent=7, raster=2)),
        ((256, 256, 256), dict(warp_specialized=(40, 232)), dict(FASTEST, warp_specialized=(40, 232))),
    ],
    ids=["padded", "K % 8", "a_prologue", "batch", "stages 1", "two warp columns", "tma False", "ws False",
         "persistent False", "persistent 7", "setmaxnreg"],
)
def test_each_argument_left_out_takes_the_documented_value(shape: tuple[int, int, int], given: dict,
                                                           resolved: dict) -> None:  # fmt: skip
    explicit = {**resolved, **given}
    _same(hopper_gemm(*shape, **given), hopper_gemm(*shape, **explicit))


@pytest.mark.parametrize("shape", [(192, 256, 96), (150, 136, 70), (64, 8, 32)])
def test_the_default_equals_float64_on_the_cpu(shape: tuple[int, int, int]) -> None:
    M, K, N = shape
    a, b, c = _inputs(M, K, N, "float16", seed=M + K + N)
    sch = hopper_gemm(M, K, N, **SMALL)
    assert "loopir.warp_specialize" in str(sch.trace)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # proven race-free: no RaceCheckWarning
        low = loopir.lower(sch.func)
    loopir.build(low, target="cpu", thread_order="random")(a, b, c)
    want = from_storage(a, "float16") @ from_storage(b, "float16").T
    np.testing.assert_allclose(c, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_the_defaults_trace_replays_from_json() -> None:
    sch = hopper_gemm(1000, 512, 1000, out_dtype="float16")
    replay = loopir.Schedule(tc_gemm_func(1000, 512, 1000, b_trans=True, out_dtype="float16"))
    loopir.Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(replay)
    loopir.assert_structural_equal(sch.func, replay.func)


NVCC_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 11008), (1000, 1000, 1000)]


@pytest.mark.nvcc
@pytest.mark.parametrize("shape", NVCC_SHAPES)
def test_the_default_compiles_for_sm_90a_without_spills(shape: tuple[int, int, int], tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda, emit_function, lower_for_cuda

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    sch = hopper_gemm(*shape, out_dtype="float16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        src = emit_function(lower_for_cuda(sch.func)).emitted.source
    assert "k_0_0_produce <" in src and src.split("__global__")[-1].count("__syncthreads") == 1
    binary = compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, binary.log


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (4096, 4096, 11008), (1000, 1000, 1000), (192, 256, 96)])
@pytest.mark.parametrize("out_dtype", [None, "float16"])
def test_gpu_the_default_equals_float64(shape: tuple[int, int, int], out_dtype: str | None) -> None:
    # gpu_equals_float64_and_the_cpu passes tma=True itself: the rest left to the default
    gpu_equals_float64_and_the_cpu(shape, dict(out_dtype=out_dtype))


# --- the default GPU schedule ----------------------------------------------------------------


def _linear(M: int, K: int, N: int, bias: bool, batch: int | None = None) -> loopir.PrimFunc:
    """``D = (A @ B.T [+ bias]).astype(float16)``, unscheduled."""
    lead: tuple[int, ...] = () if batch is None else (batch,)
    A = te.placeholder((*lead, M, K), "float16", name="A")
    B = te.placeholder((*lead, N, K), "float16", name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((*lead, M, N), lambda *i: te.sum(A[(*i[:-1], k)].astype("float32") *
                                                   B[(*i[:-2], i[-1], k)].astype("float32"), axis=k), name="C")  # fmt: skip
    args: list[Any] = [A, B]
    if bias:
        bv = te.placeholder((N,), "float32", name="bias")
        args.append(bv)
        D = te.compute(C.shape, lambda *i: (C[i] + bv[i[-1]]).astype("float16"), name="D")
    else:
        D = te.compute(C.shape, lambda *i: C[i].astype("float16"), name="D")
    return te.create_prim_func([*args, D])


@pytest.mark.parametrize(
    ("shape", "bias", "batch", "want"),
    [
        ((4096, 4096, 4096), False, None, "128 x 256 x 64 tiles on wgmma, 4-stage TMA pipeline, warp-specialized (a "
                                          "producer warpgroup), persistent over 132 blocks in groups of 8 block rows, "
                                          "async wgmma, fragment stores"),
        ((4096, 4096, 4096), True, None, "persistent over 132 blocks in groups of 8 block rows, async wgmma, guarded "
                                         "stores from the fragments"),
        ((1000, 1000, 1000), True, None, "4-stage TMA pipeline, warp-specialized (a producer warpgroup), persistent "
                                         "over 32 blocks in groups of 8 block rows"),
        ((256, 100, 256), False, None, "4-stage cp.async pipeline, waits first, async wgmma"),
        ((256, 256, 256), False, 2, "cp.async pipeline"),
    ],
    ids=["4096^3", "bias", "padded bias", "K % 8", "batch"],
)
def test_the_default_schedule_takes_the_form_where_it_fits(shape: tuple[int, int, int], bias: bool,
                                                           batch: int | None, want: str) -> None:  # fmt: skip
    sch = loopir.Schedule(_linear(*shape, bias, batch))
    (line,) = default_gpu_schedule(sch, wgmma=True)
    assert line.startswith("tensor_core C (") and want in line, line
    assert ("loopir.warp_specialize" in str(sch.trace)) == ("TMA" in line)


@pytest.mark.parametrize(("shape", "bias"), [((192, 128, 96), True), ((130, 64, 70), True), ((256, 128, 256), False)])
def test_the_default_schedules_form_equals_float64_on_the_cpu(shape: tuple[int, int, int], bias: bool) -> None:
    M, K, N = shape
    sch = loopir.Schedule(_linear(M, K, N, bias))
    (line,) = default_gpu_schedule(sch, wgmma=True)
    assert "warp-specialized" in line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        low = loopir.lower(sch.func)
    rng = np.random.default_rng(M + K + N)
    a = rng.standard_normal((M, K)).astype("float16")
    b = rng.standard_normal((N, K)).astype("float16")
    bv = rng.standard_normal(N).astype("float32")
    d = np.full((M, N), np.nan, "float16")
    loopir.build(low, target="cpu", thread_order="random")(*((a, b, bv, d) if bias else (a, b, d)))
    want = a.astype(np.float64) @ b.astype(np.float64).T + (bv if bias else 0.0)
    np.testing.assert_allclose(d.astype(np.float64), want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
