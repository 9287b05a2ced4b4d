"""The docstring examples that are complete programs run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "loopir.arith.analyzer",
    "loopir.arith.canonical",
    "loopir.ir.c_printer",
    "loopir.ir.module",
    "loopir.schedule.database",
    "loopir.schedule.default_gpu",
    "loopir.schedule.tensor_core_gemm",
    "loopir.te",
    "loopir.tune.spaces",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
