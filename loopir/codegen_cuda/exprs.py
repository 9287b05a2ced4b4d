"""Expression helpers shared by the splitter, emitter and runtime.

* :func:`structural_key`: a deterministic string for comparing expressions structurally
  (variables by identity);
* :func:`eval_int`: evaluate an integer expression of sizes and host loop variables on the
  host (launch extents, host loop bounds, temporary shapes).
"""

from __future__ import annotations

from collections.abc import Mapping

from loopir.errors import CodegenError
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
    Cast,
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


def structural_key(e: PrimExpr) -> str:
    """A string that is equal for structurally equal expressions (Vars compared by identity)."""
    if isinstance(e, Var):
        return f"{e.name}#{id(e)}"
    if isinstance(e, (IntImm, FloatImm)):
        return f"{e.value}:{e.dtype}"
    if isinstance(e, BinaryOp):
        return f"({type(e).__name__} {structural_key(e.a)} {structural_key(e.b)})"
    if isinstance(e, Cast):
        return f"(Cast {e.dtype} {structural_key(e.value)})"
    if isinstance(e, Select):
        return (
            f"(Select {structural_key(e.condition)} {structural_key(e.true_value)} "
            f"{structural_key(e.false_value)})"
        )
    if isinstance(e, (And, Or)):
        return f"({type(e).__name__} {structural_key(e.a)} {structural_key(e.b)})"
    if isinstance(e, Not):
        return f"(Not {structural_key(e.a)})"
    return f"<{type(e).__name__}#{id(e)}>"


_INT_BINOPS = {
    Add: lambda a, b: a + b,
    Sub: lambda a, b: a - b,
    Mul: lambda a, b: a * b,
    Min: min,
    Max: max,
    EQ: lambda a, b: a == b,
    NE: lambda a, b: a != b,
    LT: lambda a, b: a < b,
    LE: lambda a, b: a <= b,
    GT: lambda a, b: a > b,
    GE: lambda a, b: a >= b,
}


def eval_int(e: PrimExpr, env: Mapping[Var, int]) -> int:
    """Evaluate integer/bool expression ``e`` with variables from ``env``.

    Raises
    ------
    CodegenError
        If ``e`` uses a variable missing from ``env`` or a node that has no host meaning.
    """
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        try:
            return env[e]
        except KeyError:
            raise CodegenError(
                f"host evaluation: variable {e.name} has no value (known: "
                f"{', '.join(sorted(v.name for v in env)) or 'none'})"
            ) from None
    if isinstance(e, FloorDiv):
        a, b = eval_int(e.a, env), eval_int(e.b, env)
        if b == 0:
            raise CodegenError(f"host evaluation: division by zero in {e}")
        return a // b
    if isinstance(e, FloorMod):
        a, b = eval_int(e.a, env), eval_int(e.b, env)
        if b == 0:
            raise CodegenError(f"host evaluation: modulo by zero in {e}")
        return a % b
    fn = _INT_BINOPS.get(type(e))
    if fn is not None:
        return int(fn(eval_int(e.a, env), eval_int(e.b, env)))  # type: ignore[attr-defined]
    if isinstance(e, And):
        return int(bool(eval_int(e.a, env)) and bool(eval_int(e.b, env)))
    if isinstance(e, Or):
        return int(bool(eval_int(e.a, env)) or bool(eval_int(e.b, env)))
    if isinstance(e, Not):
        return int(not eval_int(e.a, env))
    if isinstance(e, Select):
        return eval_int(e.true_value if eval_int(e.condition, env) else e.false_value, env)
    if isinstance(e, Cast):
        return _cast_int(eval_int(e.value, env), e)
    raise CodegenError(f"host evaluation: cannot evaluate {type(e).__name__} {e} on the host")


def _cast_int(value: int, e: Cast) -> int:
    """``value`` converted as the device converts it to ``e.dtype``.

    A narrowing cast wraps (two's complement, as CUDA's integer conversions do) and a cast to
    bool tests for nonzero; keeping the Python value would give the host a different launch
    extent or condition than the kernel computes.
    """
    if dt.is_bool(e.dtype):
        return int(value != 0)
    if dt.is_int(e.dtype):
        width = dt.bits(e.dtype)
        value &= (1 << width) - 1
        if not dt.is_uint(e.dtype) and value >= 1 << (width - 1):
            value -= 1 << width
        return value
    raise CodegenError(
        f"host evaluation: cannot evaluate Cast {e} on the host: it evaluates integer "
        f"expressions, and {e.dtype} is not an integer type"
    )
