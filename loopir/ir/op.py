"""Expression-building helpers (the functional counterparts of the Python operators)."""

from __future__ import annotations

from functools import reduce

from loopir.ir import dtype as dt
from loopir.ir.expr import (
    And,
    Call,
    Cast,
    ExprLike,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Not,
    Or,
    PrimExpr,
    Select,
    _match,
    bitwise,
    convert,
    make_const,
)


def const(value: int | float | bool, dtype: str) -> PrimExpr:
    """A constant of ``dtype``: ``const(0, "float16")`` (a FloatImm for float dtypes, an IntImm
    for the others, broadcast for vector dtypes)."""
    return make_const(value, dtype)


def true() -> PrimExpr:
    """The bool constant true."""
    return IntImm(1, "bool")


def false() -> PrimExpr:
    """The bool constant false."""
    return IntImm(0, "bool")


def min_(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``min(a, b)`` as a [`Min`][loopir.ir.expr.Min] node."""
    return Min(*_match(a, b))


def max_(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``max(a, b)`` as a [`Max`][loopir.ir.expr.Max] node."""
    return Max(*_match(a, b))


def floordiv(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a // b``: integer division rounding toward -inf (Python's ``//``)."""
    return FloorDiv(*_match(a, b))


def floormod(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a % b`` with the sign of ``b`` (Python's ``%``)."""
    return FloorMod(*_match(a, b))


def ceildiv(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``ceil(a / b)`` for integers, as ``(a + b - 1) // b``."""
    x, y = _match(a, b)
    return FloorDiv(x + y - 1, y)


def cast(value: ExprLike, dtype: str) -> PrimExpr:
    """``value`` converted to ``dtype`` (a [`Cast`][loopir.ir.expr.Cast], or ``value`` itself when
    it already has that dtype); ``x.astype(dtype)`` is the same."""
    v = convert(value)
    d = dt.canonical(dtype)
    return v if v.dtype == d else Cast(d, v)


def if_then_else(cond: ExprLike, t: ExprLike, f: ExprLike) -> PrimExpr:
    """``t if cond else f`` as a [`Select`][loopir.ir.expr.Select]."""
    tv, fv = _match(t, f)
    return Select(convert(cond), tv, fv)


def all_(*conds: ExprLike) -> PrimExpr:
    """Conjunction of ``conds`` (true for none)."""
    items = [convert(c) for c in conds]
    return reduce(And, items) if items else true()


def any_(*conds: ExprLike) -> PrimExpr:
    """Disjunction of ``conds`` (false for none)."""
    items = [convert(c) for c in conds]
    return reduce(Or, items) if items else false()


def not_(cond: ExprLike) -> PrimExpr:
    """The negation of bool ``cond``."""
    return Not(convert(cond))


def call(op: str, *args: ExprLike, dtype: str | None = None) -> PrimExpr:
    """Call intrinsic ``op``; the result dtype defaults to the first argument's."""
    from loopir.ir.expr import INTRINSICS

    cargs = [convert(a) for a in args]
    if len(cargs) > 1 and all(isinstance(a, PrimExpr) for a in cargs):
        # math intrinsics take operands of one type: the first operand's (call('pow', f16, f32)
        # is float16; write the cast yourself for another type)
        first = cargs[0]
        cargs = [first] + [a.astype(first.dtype) if a.dtype != first.dtype else a for a in cargs[1:]]
    spec = INTRINSICS.get(op)
    if dtype is None:
        if spec is not None and spec.result != "same":
            dtype = spec.result
        else:
            dtype = cargs[0].dtype if cargs else "int32"
    return Call(dtype, op, tuple(cargs))


def _math(name: str, x: ExprLike) -> PrimExpr:
    """Call math intrinsic ``name`` on ``x``, cast to float32 unless it is a float."""
    v = convert(x)
    if not dt.is_float(v.dtype):
        v = v.astype("float32")
    return call(name, v)


def exp(x: ExprLike) -> PrimExpr:
    """``e ** x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("exp", x)


def exp2(x: ExprLike) -> PrimExpr:
    """``2 ** x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("exp2", x)


def log(x: ExprLike) -> PrimExpr:
    """The natural logarithm of ``x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("log", x)


def log2(x: ExprLike) -> PrimExpr:
    """The base-2 logarithm of ``x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("log2", x)


def log1p(x: ExprLike) -> PrimExpr:
    """``log(1 + x)``, accurate for small ``x``
    (elementwise; an integer ``x`` is cast to float32)."""
    return _math("log1p", x)


def sqrt(x: ExprLike) -> PrimExpr:
    """The square root of ``x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("sqrt", x)


def rsqrt(x: ExprLike) -> PrimExpr:
    """``1 / sqrt(x)`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("rsqrt", x)


def tanh(x: ExprLike) -> PrimExpr:
    """The hyperbolic tangent of ``x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("tanh", x)


def sigmoid(x: ExprLike) -> PrimExpr:
    """``1 / (1 + exp(-x))`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("sigmoid", x)


def erf(x: ExprLike) -> PrimExpr:
    """The error function of ``x`` (elementwise; an integer ``x`` is cast to float32)."""
    return _math("erf", x)


def sin(x: ExprLike) -> PrimExpr:
    """The sine of ``x`` (radians) (elementwise; an integer ``x`` is cast to float32)."""
    return _math("sin", x)


def cos(x: ExprLike) -> PrimExpr:
    """The cosine of ``x`` (radians) (elementwise; an integer ``x`` is cast to float32)."""
    return _math("cos", x)


def floor(x: ExprLike) -> PrimExpr:
    """``x`` rounded toward -inf (elementwise; an integer ``x`` is cast to float32)."""
    return _math("floor", x)


def ceil(x: ExprLike) -> PrimExpr:
    """``x`` rounded toward +inf (elementwise; an integer ``x`` is cast to float32)."""
    return _math("ceil", x)


def round(x: ExprLike) -> PrimExpr:  # noqa: A001 - mirrors te.round
    """``x`` rounded to the nearest integer, halves away from zero (C's ``round``)
    (elementwise; an integer ``x`` is cast to float32)."""
    return _math("round", x)


def fabs(x: ExprLike) -> PrimExpr:
    """The absolute value of ``x``, elementwise (integers stay integers)."""
    return call("fabs", convert(x))


def abs(x: ExprLike) -> PrimExpr:  # noqa: A001 - mirrors te.abs
    """The absolute value of ``x`` (the same as [`fabs`][loopir.ir.op.fabs])."""
    return fabs(x)


def pow(x: ExprLike, y: ExprLike) -> PrimExpr:  # noqa: A001
    """``x ** y``, elementwise, in the operands' common dtype."""
    a, b = _match(x, y)
    return call("pow", a, b)


def fma(a: ExprLike, b: ExprLike, c: ExprLike) -> PrimExpr:
    """``a * b + c`` with one rounding (C's ``fma``), in ``a``'s dtype."""
    x, y = _match(a, b)
    x, z = _match(x, c)
    return call("fma", x, y.astype(x.dtype), z)


def storage_sync(scope: str = "shared") -> PrimExpr:
    """A barrier among the threads sharing ``scope`` (``__syncthreads()`` for shared)."""
    from loopir.ir.expr import StringImm

    return Call("int32", "tvm_storage_sync", (StringImm(scope),))


def thread_allreduce(reducer: str, acc: PrimExpr, extent: int) -> PrimExpr:
    """Combine ``acc`` (a load of an element of a thread's ``local`` accumulator: its one
    element, or one per virtual thread after InjectVirtualThread) across the ``extent``
    threads of a ``threadIdx.x`` row with ``reducer`` ("sum", "max", "min"), writing the
    row's total back into that element in every thread of the row.

    Lowered IR only (``LowerCrossThreadReduction`` makes it, for reductions over threadIdx.x
    alone; other thread axes combine through shared memory in IR). It synchronizes the thread
    block like a barrier, so every thread of the block must reach it; the CUDA backend emits
    warp shuffles and a shared-memory combine across warps, the CPU executor runs it among
    the fibers of a thread region.
    """
    from loopir.ir.expr import BufferLoad, IntImm, StringImm

    if not isinstance(acc, BufferLoad) or acc.buffer.scope != "local":
        raise TypeError(f"thread_allreduce: expected a load of a local buffer, got {acc}")
    return Call("int32", "loopir.thread_allreduce", (StringImm(reducer), acc, IntImm(extent, "int32")))


def is_barrier(expr: object) -> bool:
    """Whether ``expr`` is a call that synchronizes threads: ``storage_sync`` or a
    ``thread_allreduce`` (which contains barriers)."""
    return isinstance(expr, Call) and expr.op in ("tvm_storage_sync", "loopir.thread_allreduce")


def bitwise_and(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a & b`` of integers (TVM's ``tir.bitwise_and``); see
    [`BITWISE_OPS`][loopir.ir.expr.BITWISE_OPS]."""
    return bitwise("bitwise_and", a, b)


def bitwise_or(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a | b`` of integers (TVM's ``tir.bitwise_or``)."""
    return bitwise("bitwise_or", a, b)


def bitwise_xor(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a ^ b`` of integers (TVM's ``tir.bitwise_xor``): XOR swizzles of shared layouts."""
    return bitwise("bitwise_xor", a, b)


def bitwise_not(a: ExprLike) -> PrimExpr:
    """``~a`` of an integer (TVM's ``tir.bitwise_not``)."""
    x = convert(a)
    if not dt.is_int(x.dtype):
        raise TypeError(f"bitwise_not (~) needs an integer operand, got {x.dtype}: {x}")
    return Call(x.dtype, "bitwise_not", (x,))


def shift_left(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a << b`` (TVM's ``tir.shift_left``): ``a * 2**b`` wrapped to the dtype, ``0 <= b <
    bits``."""
    return bitwise("shift_left", a, b)


def shift_right(a: ExprLike, b: ExprLike) -> PrimExpr:
    """``a >> b`` (TVM's ``tir.shift_right``): arithmetic for signed values, ``a // 2**b``."""
    return bitwise("shift_right", a, b)


__all__ = [
    "const", "true", "false", "min_", "max_", "floordiv", "floormod", "ceildiv", "cast",
    "if_then_else", "all_", "any_", "not_", "call", "exp", "exp2", "log", "log2", "log1p",
    "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos", "floor", "ceil", "round", "fabs",
    "abs", "pow", "fma", "storage_sync", "make_const", "thread_allreduce", "is_barrier",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left", "shift_right",
]  # fmt: skip
