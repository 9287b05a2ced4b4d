"""Bitwise operations on integer expressions (issue 31): the operators, their printing (script, C,
CUDA), the analyses' rules, and what the executors compute."""

from __future__ import annotations

import numpy as np
import pytest

import loopir
from loopir import arith
from loopir.arith.bound import ConstIntBound
from loopir.codegen_cuda.exprs_cuda import ExprPrinter
from loopir.errors import ArithError
from loopir.ir.buffer import Buffer
from loopir.ir.expr import NE, And, Call, IntImm, Or, Var
from loopir.ir.stmt import BufferStore, For, ForKind, PrimFunc
from loopir.runtime.c_expr import ExprEmitter

i, j = Var("i"), Var("j")


def test_operators_build_the_tvm_intrinsics() -> None:
    for e, op in [(i ^ j, "bitwise_xor"), (i & j, "bitwise_and"), (i | j, "bitwise_or"),
                  (i << 2, "shift_left"), (i >> 2, "shift_right"), (~i, "bitwise_not"),
                  (3 ^ i, "bitwise_xor"), (1 << i, "shift_left"), (7 & i, "bitwise_and")]:  # fmt: skip
        assert isinstance(e, Call) and e.op == op and e.dtype == "int32"
    assert (Var("k", "int64") ^ 1).dtype == "int64"  # a Python int takes the other side's type
    # bools keep their logical meaning; ^ of two bools is their inequality
    assert isinstance((i < j) & (j < i), And) and isinstance((i < j) | (j < i), Or)
    assert isinstance((i < j) ^ (j < i), NE)


def test_float_operands_are_refused() -> None:
    x = Var("x", "float32")
    with pytest.raises(TypeError, match=r"bitwise_xor \(\^\) needs integer operands, got float32"):
        _ = x ^ x
    with pytest.raises(TypeError, match="shift_left"):
        _ = x << 1


def test_script_prints_python_operators_with_python_precedence() -> None:
    e = ((j // 8) ^ (i % 8)) * 8 + j % 8
    assert str(e) == "(j // 8 ^ i % 8) * 8 + j % 8"
    assert str((i + 1) >> 2 & 7) == "i + 1 >> 2 & 7"  # + binds tighter than >>, >> than &
    assert str(i ^ (j ^ i)) == "i ^ (j ^ i)" and str((i ^ j) ^ i) == "i ^ j ^ i"
    assert str(~(i + 1)) == "~(i + 1)" and str((i | j) < 3) == "i | j < 3"


def test_evaluate_is_twos_complement_and_refuses_undefined_shifts() -> None:
    env = {i: -6, j: 3}
    assert [arith.evaluate(e, env) for e in (i ^ j, i & j, i | j, ~i, i >> 1, i << 2)] == [
        -6 ^ 3, -6 & 3, -6 | 3, 5, -3, -24]
    with pytest.raises(ArithError, match=r"shift_left of a int32 value by 32: the amount must be "
                       r"in \[0, 32\)"):
        arith.evaluate(i << 32, env)


@pytest.mark.parametrize(("expr", "lo", "hi"), [
    (i ^ j, 0, 63), (i & 7, 0, 7), (i & j, 0, 31), (i | j, 3, 63), (~i, -32, -1),
    (i >> 2, 0, 7), (i << 2, 0, 124), ((j // 8) ^ (i % 8), 0, 7), (i ^ -1, -2**31, 2**31 - 1),
])  # fmt: skip
def test_bounds(expr, lo: int, hi: int) -> None:
    ana = arith.Analyzer({i: (0, 32), j: (3, 64)})
    assert ana.const_int_bound(expr) == ConstIntBound(lo, hi)


def test_simplifier_folds_and_makes_shifts_and_masks_arithmetic() -> None:
    ana = arith.Analyzer({i: (0, 8), j: (0, 64)})
    cases = {
        IntImm(5) ^ 3: "6", IntImm(-8) >> 1: "-4", ~IntImm(5): "-6", i << 3: "i * 8",
        j >> 3: "j // 8", j & 7: "j % 8", j & 0: "0", j | 0: "j", j ^ 0: "j", j & -1: "j",
        (i * 8) ^ (j % 8): "i * 8 + j % 8", (i * 8) & (j % 8): "0",
        ((j >> 3) ^ (i & 7)) << 3 | (j & 7): "(j // 8 ^ i) * 8 + j % 8", (i ^ j) - (i ^ j): "0",
    }
    for e, want in cases.items():
        assert str(ana.simplify(e)) == want, e


def _c(e) -> str:
    c = ExprEmitter(False)
    c.vars = {i: "i", j: "j"}
    return c.print(e)


class _Scope:
    env: dict = {}

    def var_name(self, v: Var) -> str:
        return v.name

    def note_dtype(self, dtype: str) -> None:
        pass


def test_c_and_cuda_spellings() -> None:
    cuda = ExprPrinter(_Scope())
    assert cuda.print((i + 1) ^ j) == "((i + 1) ^ j)"
    assert cuda.print(i << j) == "((int)((unsigned int)(i) << j))"  # no UB for negative i
    assert cuda.print(i >> 2) == "(i >> 2)" and cuda.print(~i) == "(~i)"
    k = Var("k", "int8")
    assert cuda.print(k & k) == "((signed char)(k & k))"  # C++ computes it as int
    assert _c(i ^ j) == "(i ^ j)"
    assert _c(i << j) == "((int32_t)((int64_t)((uint64_t)(int64_t)(i) << (j))))"


def _run_cpu(dtype: str, fn) -> np.ndarray:
    n = 64
    A = Buffer("A", (n,), dtype)
    B = Buffer("B", (n,), dtype)
    k = Var("k")
    kk = k if dtype == "int32" else k.astype(dtype)
    body = For(k, 0, n, ForKind.SERIAL, BufferStore(B, fn(A[k], kk), (k,)))
    mod = loopir.build(PrimFunc((A, B), body), target="cpu")
    a = np.arange(-32, 32).astype(dtype)
    b = np.zeros(n, dtype)
    mod(a, b)
    return a, b


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "uint32"])
def test_the_cpu_executor_computes_what_numpy_does(dtype: str) -> None:
    a, b = _run_cpu(dtype, lambda x, k: ((x ^ k) & 0x5A | (x >> 2)) + (x << 1) + ~x)
    k = np.arange(64).astype(dtype)
    want = ((a ^ k) & np.array(0x5A).astype(dtype) | (a >> 2)) + (a << 1) + ~a
    np.testing.assert_array_equal(b, want.astype(dtype))


def test_swizzled_index_on_the_cpu_executor() -> None:
    # B[i, j] = A[i, (j // 8 ^ i % 8) * 8 + j % 8]: a permutation of each row
    rows, cols = 8, 64
    A = Buffer("A", (rows, cols), "float32")
    B = Buffer("B", (rows, cols), "float32")
    r, c = Var("r"), Var("c")
    load = A[r, ((c // 8) ^ (r % 8)) * 8 + c % 8]
    body = For(r, 0, rows, ForKind.SERIAL, For(c, 0, cols, ForKind.SERIAL, BufferStore(B, load, (r, c))))
    mod = loopir.build(PrimFunc((A, B), body), target="cpu")
    a = np.arange(rows * cols, dtype="float32").reshape(rows, cols)
    b = np.zeros_like(a)
    mod(a, b)
    rr, cc = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    np.testing.assert_array_equal(b, a[rr, ((cc // 8) ^ (rr % 8)) * 8 + cc % 8])
