"""Arrays of the wrong dtype, shape, layout or device passed to built modules: LaunchError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loopir
from loopir.errors import LaunchError
from loopir.ir.stmt import PrimFunc
from loopir.testing import random_inputs
from loopir.testing.workloads import matmul, symbolic_matmul
from loopir.tune.workers import visible_devices


class FakeCudaArray:
    """Looks like a device array (``__cuda_array_interface__``) without any device memory."""

    def __init__(self, shape: tuple[int, ...], typestr: str = "<f4", strides: Any = None) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (0x1000, False), "version": 3,
            "strides": strides,
        }  # fmt: skip


def _good() -> list[np.ndarray]:
    return random_inputs(matmul(8, 6, 5).func)


def _cases() -> list[tuple[str, int, Any, str]]:
    """(label, argument index, bad value, what the CPU message says)."""
    a = np.ones((8, 6), np.float32)
    return [
        ("float64", 0, a.astype(np.float64), "dtype float64 does not match float32"),
        ("int32", 1, np.ones((6, 5), np.int32), "dtype int32 does not match float32"),
        ("rank", 0, a.reshape(48), "array has 1 dimensions"),
        ("shape", 2, np.zeros((8, 4), np.float32), r"dimension 1 should be 5"),
        ("transposed", 0, np.ones((6, 8), np.float32).T, "not C-contiguous"),
        ("list", 0, a.tolist(), "expected a numpy.ndarray, got list"),
        ("device", 0, FakeCudaArray((8, 6)), "expected a numpy.ndarray, got FakeCudaArray"),
    ]


@pytest.mark.parametrize("label, idx, bad, match", _cases(), ids=[c[0] for c in _cases()])
def test_cpu_module_rejects(label: str, idx: int, bad: Any, match: str) -> None:
    mod = loopir.build(matmul(8, 6, 5).func, target="cpu")
    args: list[Any] = _good()
    args[idx] = bad
    with pytest.raises(LaunchError, match=match):
        mod(*args)
    # The message names the function, the argument position and the parameter.
    with pytest.raises(LaunchError, match=rf"main: argument {idx} \({'ABC'[idx]}\)"):
        mod(*args)


def test_cpu_module_count_readonly_and_symbolic() -> None:
    mod = loopir.build(matmul(8, 6, 5).func, target="cpu")
    a, b, c = _good()
    with pytest.raises(LaunchError, match=r"expected 3 arrays \(A, B, C\), got 2"):
        mod(a, b)
    c.flags.writeable = False
    with pytest.raises(LaunchError, match="writes this buffer but the array is read-only"):
        mod(a, b, c)
    w = symbolic_matmul(7, 4, 3)
    smod = loopir.build(w.func, target="cpu")
    a, b, c = random_inputs(w.func, w.sizes)
    smod(a, b, c)  # n bound to 7 by A
    with pytest.raises(LaunchError, match=r"dimension 0 should be 7 \(with n=7\)"):
        smod(a, b, np.zeros((6, 3), np.float32))


needs_nvcc = pytest.mark.nvcc  # skipped without nvcc (tests/conftest.py)


@needs_nvcc
@pytest.mark.parametrize(
    "idx, bad, match",
    [
        (0, np.ones((8, 6), np.float64), "parameter 'A': dtype must be float32"),
        (2, np.zeros((8, 4), np.float32), "parameter 'C': dimension 1 must be 5"),
        (0, np.ones(48, np.float32), "parameter 'A': expected 2 dimensions"),
        (0, np.ones((6, 8), np.float32).T, "parameter 'A': array is not C-contiguous"),
        (1, [[1.0] * 5] * 6, r"expected a CUDA array \(torch, cupy, or any object with __cuda_array_interface__ or __dlpack__\) or a numpy array, got list"),
        (0, FakeCudaArray((8, 6), "<f8"), "dtype must be float32, got float64"),
        (0, FakeCudaArray((8, 6), strides=(4, 32)), "parameter 'A': array is not C-contiguous"),
        (0, FakeCudaArray((8, 7)), "dimension 1 must be 6"),
    ],
)
def test_cuda_module_rejects(gpu_matmul: PrimFunc, cuda_cache_dir: Path, idx: int, bad: Any,
                             match: str) -> None:  # fmt: skip
    mod = loopir.build(gpu_matmul, target="cuda", cache_dir=cuda_cache_dir)
    args: list[Any] = _good()
    args[idx] = bad
    with pytest.raises(LaunchError, match=match):
        mod(*args)
    with pytest.raises(LaunchError, match=r"expected 3 arrays"):
        mod(*args[:2])


@needs_nvcc
@pytest.mark.skipif(bool(visible_devices()), reason="a GPU is usable here; the no-GPU path cannot be exercised")
def test_cuda_module_without_gpu_raises_launch_error(gpu_matmul: PrimFunc, cuda_cache_dir: Path) -> None:
    mod = loopir.build(gpu_matmul, target="cuda", cache_dir=cuda_cache_dir)
    assert "__global__" in mod.source
    with pytest.raises(LaunchError, match="no usable CUDA device"):
        mod(*_good())
    # A well-typed fake device array gets past argument checks, then fails the same way.
    a, b, c = _good()
    with pytest.raises(LaunchError, match="no usable CUDA device"):
        mod(FakeCudaArray((8, 6)), b, c)
