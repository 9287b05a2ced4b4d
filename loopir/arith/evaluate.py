"""A reference evaluator of scalar expressions on concrete values.

Used to test the analyzer against brute force and handy for anyone who needs the exact value of an
index expression. Integers are exact (Python ints, floor semantics for ``//`` and ``%``, no
overflow) except that a [`Cast`][loopir.ir.expr.Cast] to an integer type wraps to that type, as C
does; floats are Python floats (double precision).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from loopir.arith.bitwise import apply_bitwise, is_bitwise
from loopir.errors import ArithError
from loopir.ir import dtype as dt
from loopir.ir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    BinaryOp,
    Call,
    Cast,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    Not,
    Or,
    PrimExpr,
    Select,
    Sub,
    Var,
)

Value = int | float | bool


def wrap_int(v: int, dtype: str) -> int:
    """``v`` converted to the integer ``dtype`` as C converts it: wrapped to its width."""
    bits = dt.bits(dtype)
    if dt.is_uint(dtype):
        return v & ((1 << bits) - 1)
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def _cast(v: Value, dtype: str) -> Value:
    if dt.is_bool(dtype):
        return bool(v)
    if dt.is_float(dtype):
        return float(v)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            raise ArithError(f"evaluate: cannot cast {v} to {dtype}")
        v = math.trunc(v)  # C conversion rounds toward zero
    return wrap_int(int(v), dtype)


def _div_check(e: PrimExpr, b: Value) -> None:
    if b == 0:
        what = "modulo" if type(e) is FloorMod else "division"
        raise ArithError(f"evaluate: division by zero ({what} by zero) in {e}: the divisor is 0")


_BIN: dict[type, Callable[[Any, Any], Value]] = {
    Add: lambda a, b: a + b,
    Sub: lambda a, b: a - b,
    Mul: lambda a, b: a * b,
    Min: min,
    Max: max,
    LT: lambda a, b: a < b,
    LE: lambda a, b: a <= b,
    GT: lambda a, b: a > b,
    GE: lambda a, b: a >= b,
    EQ: lambda a, b: a == b,
    NE: lambda a, b: a != b,
}


def evaluate(expr: PrimExpr, env: Mapping[Var, Value]) -> Value:
    """Evaluate a scalar expression with the variables' values taken from ``env``.

    Parameters
    ----------
    expr
        A scalar expression over IntImm/FloatImm/Var, arithmetic, comparisons, logic,
        Select, Cast and the bitwise intrinsics (``loopir.arith.bitwise``).
    env
        Value of every variable in ``expr``.

    Notes
    -----
    Like C, ``Select`` evaluates only the taken branch and ``and``/``or`` short-circuit, so a
    guarded division by zero is not an error.

    Returns
    -------
    int, float or bool
        bool for boolean expressions, int for integer ones, float for float ones.

    Raises
    ------
    ArithError
        For an unbound variable, a division by zero, or a node it cannot evaluate
        (loads, calls, vectors).
    """
    # Iterative (explicit stack) so that long sums do not hit Python's recursion limit.
    # Select evaluates only the taken branch and And/Or short-circuit, as in C: an untaken
    # branch may be undefined (a guarded division by zero).
    memo: dict[int, Value] = {}
    keep: list[PrimExpr] = []  # keeps nodes alive so that ids stay unique
    stack: list[tuple[PrimExpr, int]] = [(expr, 0)]
    while stack:
        e, stage = stack.pop()
        k = id(e)
        if stage == 0 and k in memo:
            continue
        if isinstance(e, (Select, And, Or)):
            first = e.condition if isinstance(e, Select) else e.a
            if stage == 0:
                stack.append((e, 1))
                stack.append((first, 0))
                continue
            c = bool(memo[id(first)])
            if stage == 1:
                if isinstance(e, And) and not c:
                    memo[k] = False
                    continue
                if isinstance(e, Or) and c:
                    memo[k] = True
                    continue
            if isinstance(e, Select):
                nxt = e.true_value if c else e.false_value
            else:
                nxt = e.b
            if stage == 1:
                stack.append((e, 2))
                stack.append((nxt, 0))
                continue
            v = memo[id(nxt)]
            memo[k] = v if isinstance(e, Select) else bool(v)
            keep.append(e)
            continue
        kids = _children(e)
        if stage == 0 and kids:
            stack.append((e, 1))
            stack.extend((c, 0) for c in kids)
            continue
        memo[k] = _eval_node(e, [memo[id(c)] for c in kids], env)
        keep.append(e)
    return memo[id(expr)]


def _children(e: PrimExpr) -> tuple[PrimExpr, ...]:
    if isinstance(e, BinaryOp):  # the _BIN operators, FloorDiv, FloorMod, Div
        return (e.a, e.b)
    if isinstance(e, Call) and is_bitwise(e):
        return e.args
    if isinstance(e, Not):
        return (e.a,)
    if isinstance(e, Cast):
        return (e.value,)
    return ()


def _eval_node(e: PrimExpr, args: list[Value], env: Mapping[Var, Value]) -> Value:
    t = type(e)
    if isinstance(e, IntImm):
        return bool(e.value) if dt.is_bool(e.dtype) else e.value
    if isinstance(e, FloatImm):
        v: Value = e.value
        return v
    if isinstance(e, Var):
        try:
            v = env[e]
        except KeyError:
            known = ", ".join(sorted(x.name for x in env)) or "none"
            raise ArithError(f"evaluate: variable {e.name} has no value (known: {known})") from None
        return bool(v) if dt.is_bool(e.dtype) else v
    fn = _BIN.get(t)
    if fn is not None:
        return fn(args[0], args[1])
    if t is FloorDiv or t is FloorMod:
        a, b = args
        _div_check(e, b)
        if isinstance(a, float) or isinstance(b, float):
            q = math.floor(a / b)
            return float(q) if t is FloorDiv else a - b * q
        return a // b if t is FloorDiv else a % b
    if t is Div:
        a, b = args
        if b == 0:
            if a == 0 or math.isnan(a):
                return math.nan
            return math.copysign(math.inf, a) * math.copysign(1.0, b)
        return a / b
    if t is Not:
        return not args[0]
    if t is Cast:
        return _cast(args[0], e.dtype)
    if isinstance(e, Call) and is_bitwise(e):
        return apply_bitwise(e.op, [int(a) for a in args], e.dtype)
    raise ArithError(f"evaluate: cannot evaluate a {t.__name__} node ({e})")


__all__ = ["evaluate", "wrap_int"]
