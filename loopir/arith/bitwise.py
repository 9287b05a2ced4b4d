"""The bitwise intrinsics (``bitwise_and/or/xor/not``, ``shift_left/right``; see
[`BITWISE_OPS`][loopir.ir.expr.BITWISE_OPS]) for the analyses: which calls they are and their exact
values.

Values are Python ints in two's complement, as C computes them on the dtype: ``&``, ``|``, ``^``
and ``~`` of in-range operands stay in range; ``a >> b`` is floor division by ``2**b``
(arithmetic shift); ``a << b`` is ``a * 2**b``, exact like every other operation of the analyses
(overflow is assumed not to happen, see ``loopir.arith``). A shift amount outside ``[0, bits)``
is undefined in C and an error here.
"""

from __future__ import annotations

from collections.abc import Sequence

from loopir.errors import ArithError
from loopir.ir import dtype as dt
from loopir.ir.expr import BITWISE_OPS, Call, PrimExpr

__all__ = ["BITWISE", "apply_bitwise", "is_bitwise", "shift_in_range"]

BITWISE = frozenset([*BITWISE_OPS, "bitwise_not"])
"""Every bitwise intrinsic: the binary ones and ``bitwise_not``."""


def is_bitwise(e: PrimExpr) -> bool:
    """Whether ``e`` is a call of a bitwise intrinsic on scalar integers."""
    return (
        isinstance(e, Call) and e.op in BITWISE and dt.is_int(e.dtype) and dt.lanes(e.dtype) == 1
    )


def shift_in_range(amount: int, dtype: str) -> bool:
    """Whether ``amount`` is a defined shift of a ``dtype`` value (``0 <= amount < bits``)."""
    return 0 <= amount < dt.bits(dtype)


def apply_bitwise(op: str, args: Sequence[int], dtype: str) -> int:
    """The value of ``op`` on ``args`` (ints of ``dtype``).

    Raises
    ------
    ArithError
        For a shift amount outside ``[0, bits)``, or an unknown ``op``.
    """
    if op == "bitwise_not":
        return ~args[0]
    a, b = args
    if op == "bitwise_and":
        return a & b
    if op == "bitwise_or":
        return a | b
    if op == "bitwise_xor":
        return a ^ b
    if op in ("shift_left", "shift_right"):
        if not shift_in_range(b, dtype):
            raise ArithError(
                f"{op} of a {dtype} value by {b}: the amount must be in [0, {dt.bits(dtype)})"
            )
        return a << b if op == "shift_left" else a >> b
    raise ArithError(f"unknown bitwise intrinsic {op!r}")
