"""The C-family expression printer base: one operator table, one dispatch, minimal parentheses.

The CPU executor's C (``loopir.runtime.c_expr.ExprEmitter``) and the CUDA C++ printer
(``loopir.codegen_cuda.exprs_cuda.ExprPrinter``) are subclasses. The base prints what
reads the same in every C dialect: the infix operators, whose symbols come from the expression
classes (``Add.symbol``; ``and``/``or`` spelled ``&&``/``||``), ``!``, ``?:``, and negative
literals, each with C's precedence so that only the parentheses C needs are printed. A
subclass adds how its dialect prints leaves, loads, casts, calls, ``min``/``max`` and floor
division (``floor_op``), and may wrap any rule (the CPU executor casts narrow integer results
back to their width).

Dispatch is by class name, ``visit_<Class>``, looked up along the expression's MRO (so
``visit_CmpOp`` serves the six comparisons); each visitor returns ``(text, precedence)``.

>>> from loopir.ir.expr import Var
>>> class Demo(CPrinter):
...     def visit_Var(self, e):
...         return e.name, P_ATOM
>>> a, b, c = Var("a"), Var("b"), Var("c")
>>> Demo().print((a - (b - c)) * c < a)
'(a - (b - c)) * c < a'
"""

from __future__ import annotations

from typing import Any, ClassVar

from loopir.errors import CodegenError
from loopir.ir.expr import (
    BITWISE_OPS,
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
    Div,
    FloorDiv,
    FloorMod,
    Mul,
    Not,
    Or,
    PrimExpr,
    Select,
    StringImm,
    Sub,
)

__all__ = [
    "CPrinter",
    "Printed",
    "PRECEDENCE",
    "BITWISE_PRECEDENCE",
    "c_operator",
    "P_ATOM",
    "P_UNARY",
    "P_MUL",
    "P_ADD",
    "P_SHIFT",
    "P_REL",
    "P_EQ",
    "P_BAND",
    "P_BXOR",
    "P_BOR",
    "P_AND",
    "P_OR",
    "P_COND",
]

# C operator precedence (higher binds tighter).
P_ATOM = 100
P_UNARY = 90
P_MUL = 80
P_ADD = 70
P_SHIFT = 65
P_REL = 60
P_EQ = 55
P_BAND = 50
P_BXOR = 47
P_BOR = 44
P_AND = 40
P_OR = 30
P_COND = 20

Printed = tuple[str, int]
"""Text and precedence of a printed expression."""

_C_SPELLING = {"and": "&&", "or": "||"}
"""C spellings of the class symbols C writes differently."""


def _precedence() -> dict[type[PrimExpr], int]:
    table: dict[type[PrimExpr], int] = {Add: P_ADD, Sub: P_ADD, Mul: P_MUL, Div: P_MUL, And: P_AND, Or: P_OR}
    table.update({cls: P_REL for cls in (LT, LE, GT, GE)})
    table.update({cls: P_EQ for cls in (EQ, NE)})
    return table


PRECEDENCE: dict[type[PrimExpr], int] = _precedence()
"""C precedence of each class printed infix; the operator is the class's own symbol."""


BITWISE_PRECEDENCE: dict[str, int] = {
    "bitwise_and": P_BAND, "bitwise_or": P_BOR, "bitwise_xor": P_BXOR, "shift_left": P_SHIFT,
    "shift_right": P_SHIFT,
}  # fmt: skip
"""C precedence of the binary bitwise intrinsics, printed infix with their
[`BITWISE_OPS`][loopir.ir.expr.BITWISE_OPS] symbol."""


def c_operator(cls: type[BinaryOp] | type[And] | type[Or]) -> str:
    """The C spelling of infix class ``cls``'s symbol (``Add`` -> ``+``, ``And`` -> ``&&``)."""
    symbol: str = cls.symbol
    return _C_SPELLING.get(symbol, symbol)


class CPrinter:
    """Base of the C-family expression printers (see the module docstring)."""

    language: ClassVar[str] = "C codegen"
    """Names the printer in its errors ("CUDA codegen: cannot print ...")."""
    _visitors: ClassVar[dict[type, str]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._visitors = {}  # per subclass: each resolves its own visit_ names

    def print(self, e: PrimExpr) -> str:
        """C code for ``e``."""
        return self.print_prec(e)[0]

    def print_prec(self, e: PrimExpr) -> Printed:
        """C code for ``e`` and the precedence of its outermost operator."""
        name = self._visitors.get(type(e))
        if name is None:
            name = next(f"visit_{k.__name__}" for k in type(e).__mro__ if hasattr(self, f"visit_{k.__name__}"))
            self._visitors[type(e)] = name
        result: Printed = getattr(self, name)(e)
        return result

    def wrap(self, e: PrimExpr, min_prec: int) -> str:
        """``e`` parenthesised unless its operator binds at least as tightly as ``min_prec``."""
        text, prec = self.print_prec(e)
        return f"({text})" if prec < min_prec else text

    @staticmethod
    def literal(text: str) -> Printed:
        """A literal's text: a leading minus makes it a unary expression (``a - -1``)."""
        return text, (P_UNARY if text.startswith("-") else P_ATOM)

    def infix(self, e: Any) -> Printed:
        """``a op b`` with the class's symbol; the right operand of an operator of the same
        precedence is parenthesised, which keeps the IR's association (float rounding)."""
        prec = PRECEDENCE[type(e)]
        return f"{self.wrap(e.a, prec)} {c_operator(type(e))} {self.wrap(e.b, prec + 1)}", prec

    visit_Add = visit_Sub = visit_Mul = visit_Div = visit_CmpOp = visit_And = visit_Or = infix

    def bitwise_infix(self, e: Call) -> Printed:
        """A bitwise intrinsic as C's operator (``a ^ b``, ``~a``); a dialect adds the
        conversions its types need (shifts of signed values, narrow types). Operands looser than
        ``*`` are parenthesised, more than C needs: ``(i + 1) ^ j`` reads as meant (and compilers
        warn about ``i + 1 ^ j``)."""
        if e.op == "bitwise_not":
            return f"~{self.wrap(e.args[0], P_UNARY)}", P_UNARY
        a, b = e.args
        return f"{self.wrap(a, P_MUL)} {BITWISE_OPS[e.op]} {self.wrap(b, P_MUL)}", \
            BITWISE_PRECEDENCE[e.op]

    def visit_Not(self, e: Not) -> Printed:
        return f"!{self.wrap(e.a, P_UNARY)}", P_UNARY

    def visit_Select(self, e: Select) -> Printed:
        # C's ?: evaluates only the chosen branch: a guarded out-of-bounds load in the other
        # branch (padding) is never performed.
        c = self.wrap(e.condition, P_UNARY)  # parenthesised unless atomic, for reading
        t = self.wrap(e.true_value, P_OR)
        f = self.wrap(e.false_value, P_COND)
        return f"{c} ? {t} : {f}", P_COND

    def visit_FloorDiv(self, e: FloorDiv) -> Printed:
        return self.floor_op(e, mod=False)

    def visit_FloorMod(self, e: FloorMod) -> Printed:
        return self.floor_op(e, mod=True)

    def floor_op(self, e: FloorDiv | FloorMod, mod: bool) -> Printed:
        """Floor division (``mod`` False) or modulo: C's ``/`` and ``%`` truncate, so each
        dialect says how it rounds toward minus infinity."""
        raise CodegenError(f"{self.language}: cannot print {type(e).__name__} {e}")

    def visit_StringImm(self, e: StringImm) -> Printed:
        raise CodegenError(f"{self.language}: string {e.value!r} used as a value")

    def visit_PrimExpr(self, e: PrimExpr) -> Printed:
        raise CodegenError(f"{self.language}: cannot print {type(e).__name__} {e}")
