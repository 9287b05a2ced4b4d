"""The verifier's range checks evaluate with loopir.arith's one rule set (C semantics)."""

from __future__ import annotations

import pytest

from loopir.analysis.verifier import verify
from loopir.errors import IRValidationError
from loopir.ir import op
from loopir.ir.expr import Cast, IntImm, Select
from tests.ir.test_ir_verifier import copy_func


def test_binding_through_a_wrapping_cast_is_rejected() -> None:
    # Regression: the verifier's own numpy evaluator ignored a cast's width, so i8(i) for i in
    # [0, 200) looked like 0..199, inside the domain, although it wraps to -128 at i = 128.
    f = copy_func(extent=200, dom=200, binding=lambda i: Cast("int32", Cast("int8", i)))
    with pytest.raises(IRValidationError, match=r"is -128 at i=128"):
        verify(f)
    verify(copy_func(extent=100, dom=100, binding=lambda i: Cast("int32", Cast("int8", i))))


def test_untaken_select_branch_does_not_block_the_check() -> None:
    # Select is lazy as in C: the division by zero in the untaken branch is not evaluated, so
    # the binding is decided (and found outside the domain at i = 0) instead of given up on.
    bad = copy_func(
        extent=100,
        dom=100,
        binding=lambda i: Select(i == 0, IntImm(-1), op.floordiv(IntImm(100), i)),
    )
    with pytest.raises(IRValidationError, match=r"is -1 at i=0"):
        verify(bad)
