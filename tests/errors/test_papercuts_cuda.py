"""CUDA papercuts (issue 29, item 4): no device is said as such, tuning for CUDA without one
fails at once, CUDA modules take arrays by parameter name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import loopir
from loopir.codegen_cuda import device as cuda_device
from loopir.errors import LaunchError
from loopir.ir.stmt import PrimFunc
from loopir.testing.workloads import matmul

NO_DRIVER = cuda_device.DeviceProbe(0, "no NVIDIA driver is installed (libcuda.so.1 cannot be loaded)")
INSUFFICIENT = ("main: no usable CUDA device: CUDA driver version is insufficient for CUDA runtime "
                "version (cudaErrorInsufficientDriver)")  # fmt: skip


class _FakeCudaArray:
    def __init__(self, shape: tuple[int, ...], ptr: int) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "strides": None,
                                         "data": (ptr, False), "version": 3}  # fmt: skip


# ---- the message mapping (no GPU, no nvcc needed) ------------------------------------------------


def test_insufficient_driver_without_a_driver_is_said_as_no_cuda_device(monkeypatch) -> None:
    monkeypatch.setattr(cuda_device, "probe", lambda: NO_DRIVER)
    msg = cuda_device.explain(INSUFFICIENT)
    assert msg.startswith("main: no usable CUDA device: this machine has no CUDA device: no NVIDIA driver")
    assert "cudaErrorInsufficientDriver" in msg  # the runtime's own words stay, after ours


def test_no_device_error_is_said_as_no_cuda_device(monkeypatch) -> None:
    probe = cuda_device.DeviceProbe(0, "the NVIDIA driver sees no device (CUDA_VISIBLE_DEVICES='')")
    monkeypatch.setattr(cuda_device, "probe", lambda: probe)
    msg = cuda_device.explain("f: no usable CUDA device: no CUDA-capable device is detected (cudaErrorNoDevice)")
    assert "this machine has no CUDA device: the NVIDIA driver sees no device" in msg


def test_a_real_old_driver_keeps_the_runtime_message(monkeypatch) -> None:
    monkeypatch.setattr(cuda_device, "probe", lambda: cuda_device.DeviceProbe(1, ""))
    assert cuda_device.explain(INSUFFICIENT) == INSUFFICIENT
    assert cuda_device.explain("f: an illegal memory access (cudaErrorIllegalAddress)").endswith("IllegalAddress)")


def test_the_probe_agrees_with_this_machine() -> None:
    found = cuda_device.probe()
    assert found.count >= 0
    assert (found.count == 0) == bool(found.reason)


# ---- tune(target="cuda") without a device --------------------------------------------------------


def test_tune_for_cuda_without_a_device_fails_before_any_candidate(monkeypatch) -> None:
    from loopir.tune import tune

    monkeypatch.setattr(cuda_device, "probe", lambda: NO_DRIVER)
    sampled: list[int] = []

    def space(sch: loopir.Schedule) -> None:
        sampled.append(1)

    with pytest.raises(LaunchError, match=r"tune\(target='cuda'\): this machine has no CUDA device: no NVIDIA driver"):
        tune(matmul(16, 8, 12).func, space, target="cuda", trials=4, show_progress=False)
    assert sampled == []


def test_tune_refuses_an_unknown_target() -> None:
    from loopir.tune import tune

    with pytest.raises(loopir.LoopIRError, match=r"tune: unknown target 'gpu'; known targets: cpu, cuda"):
        tune(matmul(16, 8, 12).func, lambda sch: None, target="gpu", trials=1, show_progress=False)


def test_tune_for_cuda_with_its_own_runner_does_not_probe(monkeypatch) -> None:
    from loopir.tune import tune

    monkeypatch.setattr(cuda_device, "probe", lambda: NO_DRIVER)
    res = tune(matmul(16, 8, 12).func, lambda sch: None, target="cuda", trials=1, runner=lambda f: 1.0,
               show_progress=False)  # fmt: skip
    assert res.ms == 1.0


# ---- with nvcc: the real library on this machine -------------------------------------------------


@pytest.fixture(scope="module")
def gpu_func() -> PrimFunc:
    sch = loopir.Schedule(matmul(16, 8, 12).func)
    i, j, _ = sch.get_loops(sch.get_block("C"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    return sch.func


@pytest.mark.nvcc
@pytest.mark.skipif(cuda_device.probe().count > 0, reason="checks what a machine without a GPU says")
def test_calling_a_cuda_module_without_a_gpu_says_there_is_no_device(gpu_func: PrimFunc, tmp_path: Path) -> None:
    mod = loopir.build(gpu_func, target="cuda", cache_dir=tmp_path)
    a, b, c = np.ones((16, 8), "float32"), np.ones((8, 12), "float32"), np.zeros((16, 12), "float32")
    with pytest.raises(LaunchError, match="main: no usable CUDA device: this machine has no CUDA device"):
        mod(a, b, c)


@pytest.mark.nvcc
def test_cuda_module_takes_arrays_by_parameter_name(gpu_func: PrimFunc, tmp_path: Path) -> None:
    mod = loopir.build(gpu_func, target="cuda", cache_dir=tmp_path, nvcc_flags=("-DLOOPIR_HOST_TRACE",))
    a, b, c = _FakeCudaArray((16, 8), 0x1000), _FakeCudaArray((8, 12), 0x2000), _FakeCudaArray((16, 12), 0x3000)
    mod(C=c, A=a, B=b)
    mod(a, C=c, B=b)
    launches = [x for x in mod._library().trace().splitlines() if x.startswith("launch")]
    assert len(launches) == 2 and launches[0] == launches[1]
    assert " 0x1000 0x2000 0x3000" in launches[0]
    with pytest.raises(LaunchError, match=r"main: no parameter named 'D'; its parameters are A, B, C"):
        mod(A=a, B=b, D=c)
    with pytest.raises(LaunchError, match=r"main: parameter 'B' is given twice \(by position 1 and by name\)"):
        mod(a, b, B=b, C=c)
