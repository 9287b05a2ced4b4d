"""Fixtures of the CUDA codegen tests: a per-session nvcc cache and a compile checker."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from loopir.codegen_cuda import CompiledBinary, compile_cuda


@pytest.fixture(scope="session")
def cuda_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory shared by the session (identical sources compile once)."""
    return tmp_path_factory.mktemp("cuda-cache")


@pytest.fixture
def nvcc_compiles(cuda_cache: Path):
    """``nvcc_compiles(source)``: compile ``source`` for sm_90a (skips without nvcc)."""

    def check(source: str) -> CompiledBinary:
        if shutil.which("nvcc") is None:
            pytest.skip("nvcc is not on PATH")
        return compile_cuda(source, arch="sm_90a", cache_dir=cuda_cache)

    return check
