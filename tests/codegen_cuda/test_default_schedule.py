"""DefaultGPUSchedule: ``build(f, target="cuda")`` on unscheduled functions compiles and runs."""

from __future__ import annotations

import logging
import shutil

import attrs
import numpy as np
import pytest

import loopir
from loopir.codegen_cuda import prepare_function
from loopir.codegen_cuda.default_schedule import DefaultGPUSchedule
from loopir.codegen_cuda.units import build_library
from loopir.errors import CodegenError
from loopir.examples.reductions import softmax_func
from loopir.testing import check_equivalent
from loopir.testing.workloads import make_workload
from tests.schedule.test_default_gpu import CASES


def test_the_pass_logs_what_it_applied(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="loopir.codegen_cuda.default_schedule"):
        lowered = loopir.lower(softmax_func(4, 256), target="cuda")
    assert "applied the default GPU schedule: rows Y <- M, S (128 threads)" in caplog.text
    assert "threadIdx.x" in lowered.script()


def test_a_scheduled_function_is_returned_unchanged() -> None:
    from loopir.examples import softmax

    func = softmax(4, 256).func
    p = DefaultGPUSchedule()
    with loopir.PassContext():
        assert p(func) is func and p.applied == []


def test_disabling_it_gives_the_unbound_loop_error() -> None:
    with loopir.PassContext(disabled_passes=["DefaultGPUSchedule"]):
        with pytest.raises(CodegenError, match="bind its outer loops to blockIdx/threadIdx"):
            prepare_function(softmax_func(4, 256))


def test_a_gemm_cutlass_takes_is_not_scheduled(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("cutlass_library")
    f = make_workload("matmul", M=256, K=128, N=256, dtype="float16").func
    with caplog.at_level(logging.INFO, logger="loopir.codegen_cuda.default_schedule"):
        lowered = loopir.lower(f, target="cuda")
    assert "DefaultGPUSchedule" not in caplog.text
    assert "gemm_C" in lowered.script()


def test_tensor_cores_can_be_turned_off() -> None:
    f = make_workload("matmul", M=64, K=100, N=64, dtype="float16").func
    assert "loopir_mma_m16n8k16" in prepare_function(f).emitted.source
    with loopir.PassContext(config={"cuda.default_schedule.tensor_cores": False}):
        assert "loopir_mma_m16n8k16" not in prepare_function(f).emitted.source


@pytest.mark.parametrize("wgmma", ["off", "on"])
def test_the_default_schedules_pipeline_is_applied(wgmma: str) -> None:
    """Regression (session 12, measured on the H200): the default schedule annotates the GEMM's
    K loop with a cp.async pipeline, but lowering chose its passes from the unscheduled input,
    so InjectSoftwarePipeline never ran and the fused GEMM + GELU ran unpipelined (0.58x
    torch's unfused ops). The kernels must now issue cp.async in a prologue and wait in the
    loop."""
    func = CASES["gemm_f16_btrans_relu"][0]
    with loopir.PassContext(config={"cuda.default_schedule.wgmma": wgmma}):
        src = prepare_function(func).emitted.source
    assert "loopir_cp_async<" in src and "loopir_cp_async_wait<" in src
    assert "software_pipeline" not in loopir.script(loopir.lower(func, target="cuda"))


def test_wgmma_on_hopper_or_when_asked(caplog: pytest.LogCaptureFixture, cuda_cache) -> None:
    """``cuda.default_schedule.wgmma``: "on" puts a GEMM with B [N, K] on wgmma (sm_90a; equal to
    the unscheduled function on the CPU executor); "off" keeps mma.sync; "auto" follows the
    visible GPU; anything else is refused by name."""
    from loopir.codegen_cuda.default_schedule import hopper_visible
    from loopir.schedule.default_gpu import default_gpu_schedule

    func = CASES["gemm_f16_btrans_relu"][0]
    with loopir.PassContext(config={"cuda.default_schedule.wgmma": "on"}):
        with caplog.at_level(logging.INFO, logger="loopir.codegen_cuda.default_schedule"):
            code = prepare_function(func)
    assert "tiles on wgmma" in caplog.text
    assert "loopir_wgmma_async_m64n64k64_f16(" in code.emitted.source  # 64 x 64 tiles: M = 100, N = 90
    sch = loopir.Schedule(func)
    assert default_gpu_schedule(sch, wgmma=True)[0].startswith("tensor_core C (64 x 64 x 64 tiles on wgmma")
    check_equivalent(func, sch.func, norm=True)
    if shutil.which("nvcc") is not None:
        assert build_library([code], arch="sm_90a", cache_dir=cuda_cache).binary is not None
    with loopir.PassContext(config={"cuda.default_schedule.wgmma": "off"}):
        assert "loopir_mma_m16n8k16" in prepare_function(func).emitted.source
    auto = prepare_function(func).emitted.source
    assert ("loopir_wgmma_" in auto) == hopper_visible()
    with loopir.PassContext(config={"cuda.default_schedule.wgmma": "yes"}):
        with pytest.raises(loopir.errors.PassError, match="cuda.default_schedule.wgmma must be one of"):
            prepare_function(func)


def test_every_case_compiles_with_its_host_code(cuda_cache) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    codes = []
    for pad in (False, True):
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            codes += [prepare_function(attrs.evolve(f, name=f"{n}_{int(pad)}")) for n, (f, _) in sorted(CASES.items())]
    built = build_library(codes, arch="sm_90a", cache_dir=cuda_cache)
    assert built.binary is not None


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_unscheduled_functions_run_on_the_gpu(name: str) -> None:
    func, sizes = CASES[name]
    # a tiled GEMM adds its products in another order than the CPU executor's loop
    check_equivalent(func, func, sizes=sizes, target2="cuda", norm=name.startswith("gemm"))


@pytest.mark.gpu
def test_an_fp16_gemm_cutlass_cannot_take_runs_on_the_gpu() -> None:
    w = make_workload("matmul", M=96, K=100, N=80, dtype="float16")
    a = np.random.default_rng(0).random((96, 100)).astype("float16") - np.float16(0.5)
    b = np.random.default_rng(1).random((100, 80)).astype("float16") - np.float16(0.5)
    c = np.zeros((96, 80), "float16")
    loopir.build(w.func, target="cuda")(a, b, c)
    ref = a.astype("float64") @ b.astype("float64")
    # the te sum accumulates in float16, as written: 100 roundings of sums up to ~3
    np.testing.assert_allclose(c.astype("float64"), ref, atol=0.1, rtol=1e-2)
    assert np.abs(c.astype("float64") - ref).mean() < 1e-2
