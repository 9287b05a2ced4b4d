"""Shared fixtures of the bad-input tests."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopir
from loopir.ir.stmt import PrimFunc
from loopir.testing.workloads import matmul


@pytest.fixture(scope="session")
def gpu_matmul() -> PrimFunc:
    """An 8x6x5 matmul with its loops bound to blocks and threads (CUDA-buildable)."""
    sch = loopir.Schedule(matmul(8, 6, 5).func)
    b = sch.get_block("C")
    i, j, _ = sch.get_loops(b)
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    return sch.func


@pytest.fixture(scope="session")
def cuda_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One nvcc cache for the session (identical kernels compile once)."""
    return tmp_path_factory.mktemp("cuda-cache")
