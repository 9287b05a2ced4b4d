"""HoistIfThenElse: loop-invariant guards above their serial, unrolled and vectorized loops."""

from __future__ import annotations

import re

import numpy as np
import pytest

import loopir
from loopir.codegen_cuda import emit_cuda
from loopir.examples.reductions import layernorm_func, softmax_func
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.ir.stmt import BufferStore, For, ForKind, IfThenElse, PrimFunc
from loopir.passes.hoist_if import hoist_if_then_else


def _nest(cond_of, kind: ForKind = ForKind.UNROLLED, else_case: bool = False) -> PrimFunc:
    """``for i < 4: for j: if cond_of(i, j, n): Y[i, j] = X[i, j] + 1`` over ``(n, 8)`` buffers
    (the inner loop of ``kind``)."""
    n = Var("n")
    X, Y = Buffer("X", (n, 8), "float32"), Buffer("Y", (n, 8), "float32")
    i, j = Var("i"), Var("j")
    store = BufferStore(Y, X[i, j] + 1.0, (i, j))
    other = BufferStore(Y, X[i, j] * 0.0, (i, j)) if else_case else None
    inner = For(j, 0, 8, kind, IfThenElse(cond_of(i, j, n), store, other))
    return PrimFunc((X, Y), For(i, 0, 4, ForKind.SERIAL, inner))


def test_before_and_after(golden) -> None:
    f = _nest(lambda i, j, n: i < n)
    g = hoist_if_then_else(f)
    # out of the unrolled j loop, not out of the i loop it reads
    assert isinstance(g.body, For) and isinstance(g.body.body, IfThenElse)
    golden("passes/hoist_if_then_else", f"# before\n{f.script()}\n# after\n{g.script()}")


@pytest.mark.parametrize("case", ["reads j", "reads memory", "has an else", "parallel loop"])
def test_what_stays(case: str) -> None:
    f = {
        "reads j": _nest(lambda i, j, n: i + j < n),
        "reads memory": _nest(lambda i, j, n: Buffer("F", (4,), "int32")[i] < n),
        "has an else": _nest(lambda i, j, n: i < n, else_case=True),
        "parallel loop": _nest(lambda i, j, n: i < n, kind=ForKind.PARALLEL),
    }[case]
    assert hoist_if_then_else(f) is f


@pytest.mark.parametrize("n", [1, 2, 4])
def test_the_same_results(n: int) -> None:
    f = _nest(lambda i, j, n: i < n)
    x = np.random.default_rng().standard_normal((n, 8)).astype("float32")
    want, got = np.full((n, 8), 7.0, "float32"), np.full((n, 8), 7.0, "float32")
    loopir.build(f, target="cpu")(x, want)
    loopir.build(hoist_if_then_else(f), target="cpu")(x, got)
    np.testing.assert_array_equal(got, x + 1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("func", [softmax_func, layernorm_func])
def test_symbolic_rows_keep_16_byte_loads(func) -> None:
    """A warp per row, 4 rows a block, a symbolic row count: the guard of the last block's rows
    stands above each statistic's loop, whose loads stay 16-byte vectors (scalar loads when the
    guard sat inside)."""
    with loopir.PassContext(config={"cuda.fast_math": True}):
        (text,) = emit_cuda(loopir.lower(func(Var("n"), 1024, "float16"), target="cuda")).kernel_texts
    assert "X[" not in text  # no scalar load of X anywhere
    assert len(re.findall(r"const uint4 X_v\w* = \*\(const uint4\*\)\(X(_base\w*)? \+ ", text)) >= 3, text
