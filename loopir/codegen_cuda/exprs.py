"""Host-side expression evaluation shared by the splitter, emitter and runtime.

* [`eval_int`][loopir.codegen_cuda.exprs.eval_int]: evaluate an integer expression of sizes and host
  loop variables on the host (launch extents, host loop bounds, temporary shapes).
"""

from __future__ import annotations

from collections.abc import Mapping

from loopir.arith.evaluate import evaluate
from loopir.errors import ArithError, CodegenError
from loopir.ir import dtype as dt
from loopir.ir.expr import (
    Cast,
    PrimExpr,
    Var,
)
from loopir.ir.functor import post_order_visit


def eval_int(e: PrimExpr, env: Mapping[Var, int]) -> int:
    """Evaluate integer/bool expression ``e`` with variables from ``env``.

    The value is [`loopir.arith.evaluate`][loopir.arith.evaluate.evaluate]'s, whose Cast rule is the
    device's: a narrowing cast wraps (two's complement, as CUDA's integer conversions do) and a cast
    to bool tests for nonzero; keeping the Python value would give the host a different launch
    extent or condition than the kernel computes. Bool results are returned as 0 or 1.

    Raises
    ------
    CodegenError
        If ``e`` uses a variable missing from ``env``, divides by zero, or has a node with no
        host meaning (floats, loads, calls).
    """
    _refuse_floats(e)
    try:
        value = evaluate(e, env)
    except ArithError as exc:
        msg = str(exc).removeprefix("evaluate: ")
        raise CodegenError(f"host evaluation: {msg}") from None
    return int(value)


def _refuse_floats(e: PrimExpr) -> None:
    """The host evaluates integers only: refuse the first float-typed node of ``e``."""

    def visit(node: object) -> None:
        if isinstance(node, PrimExpr) and dt.is_float(node.dtype):
            if isinstance(node, Cast):
                raise CodegenError(
                    f"host evaluation: cannot evaluate Cast {node} on the host: it evaluates "
                    f"integer expressions, and {node.dtype} is not an integer type"
                )
            raise CodegenError(
                f"host evaluation: cannot evaluate {type(node).__name__} {node} on the host"
            )

    post_order_visit(e, visit)
