"""``loopir.build`` dispatch: targets and the CUDA hand-off."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from strategies import te_matmul

import loopir
from loopir import te
from loopir.errors import CodegenError


def test_build_is_the_function_after_importing_the_driver() -> None:
    importlib.import_module("loopir.driver")
    tensors, ref = te_matmul(3, 4, 5)
    f = te.create_prim_func(tensors)
    a, b = np.ones((3, 4), np.float32), np.full((4, 5), 2.0, np.float32)
    c = np.zeros((3, 5), np.float32)
    loopir.build(f)(a, b, c)  # default target is cpu
    np.testing.assert_array_equal(c, ref(a, b))


def test_cuda_target_hands_off_to_codegen_cuda(monkeypatch) -> None:
    import loopir.codegen_cuda as cg

    seen = {}

    def fake_build_cuda(func, **options):
        seen["func"], seen["options"] = func, options
        return "cuda-module"

    monkeypatch.setattr(cg, "build_cuda", fake_build_cuda)
    tensors, _ = te_matmul(2, 2, 2)
    f = te.create_prim_func(tensors)
    assert loopir.build(f, target="cuda", arch="sm_90a") == "cuda-module"
    assert seen["func"] is f and seen["options"] == {"arch": "sm_90a"}


def test_unknown_target_names_it() -> None:
    tensors, _ = te_matmul(2, 2, 2)
    with pytest.raises(CodegenError, match=r"unknown target 'llvm'; known targets: cpu, cuda"):
        loopir.build(te.create_prim_func(tensors), target="llvm")


def test_cpu_opt_level_accepts_ints_and_rejects_nonsense() -> None:
    tensors, ref = te_matmul(3, 4, 5)
    f = te.create_prim_func(tensors)
    a, b = np.ones((3, 4), np.float32), np.full((4, 5), 2.0, np.float32)
    c = np.zeros((3, 5), np.float32)
    loopir.build(f, target="cpu", opt_level=0)(a, b, c)
    np.testing.assert_array_equal(c, ref(a, b))
    with pytest.raises(CodegenError, match="opt_level"):
        loopir.build(f, target="cpu", opt_level="fast")
