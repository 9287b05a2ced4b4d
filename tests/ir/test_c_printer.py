"""The C-family printer base: its minimal parentheses parse back, by C's grammar, to the tree
printed; its operators are the expression classes' symbols; dispatch and errors."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopir.errors import CodegenError
from loopir.ir.c_printer import P_ATOM, PRECEDENCE, CPrinter, Printed, c_operator
from loopir.ir.expr import (
    EQ,
    Add,
    And,
    BinaryOp,
    Div,
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
    StringImm,
    Sub,
    Var,
)
from tests.ir.ir_strategies import bool_exprs_from, int_exprs

VARS = [Var("a"), Var("b"), Var("c")]


class _Demo(CPrinter):
    """The base plus leaves and function-call spellings of what it leaves to dialects."""

    language = "demo codegen"

    def visit_Var(self, e: Var) -> Printed:
        return e.name, P_ATOM

    def visit_IntImm(self, e: IntImm) -> Printed:
        return self.literal(str(e.value))

    def _call(self, e: Any) -> Printed:
        return f"{type(e).__name__}({self.print(e.a)}, {self.print(e.b)})", P_ATOM

    visit_Min = visit_Max = _call

    def floor_op(self, e: FloorDiv | FloorMod, mod: bool) -> Printed:
        return self._call(e)


# --- an independent reader of C: precedence climbing over C's grammar ------------------------

_TOKEN = re.compile(r"\s*(\|\||&&|==|!=|<=|>=|[<>+\-*/!?:(),]|[A-Za-z_]\w*|\d+)")
# C's binary operators by precedence level, loosest first
_LEVELS = [("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="), ("+", "-"), ("*", "/")]


class _Reader:
    def __init__(self, text: str) -> None:
        self.toks: list[str] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            assert m is not None, f"cannot tokenize {text[pos:]!r}"
            self.toks.append(m.group(1))
            pos = m.end()
        self.k = 0

    def peek(self) -> str | None:
        return self.toks[self.k] if self.k < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.toks[self.k]
        assert want is None or tok == want, f"expected {want!r}, got {tok!r}"
        self.k += 1
        return tok

    def conditional(self) -> Any:
        cond = self.binary(0)
        if self.peek() != "?":
            return cond
        self.take("?")
        t = self.conditional()
        self.take(":")
        return ("?", cond, t, self.conditional())  # right-associative

    def binary(self, level: int) -> Any:
        if level == len(_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in _LEVELS[level]:
            op = self.take()
            left = (op, left, self.binary(level + 1))  # left-associative
        return left

    def unary(self) -> Any:
        tok = self.take()
        if tok == "!":
            return ("!", self.unary())
        if tok == "-":
            inner = self.unary()
            return -inner if isinstance(inner, int) else ("neg", inner)
        if tok == "(":
            inner = self.conditional()
            self.take(")")
            return inner
        if tok.isdigit():
            return int(tok)
        if self.peek() == "(":
            self.take("(")
            a = self.conditional()
            self.take(",")
            b = self.conditional()
            self.take(")")
            return (tok, a, b)
        return tok


def _read(text: str) -> Any:
    r = _Reader(text)
    tree = r.conditional()
    assert r.peek() is None, f"trailing tokens in {text!r}"
    return tree


def _tree(e: PrimExpr) -> Any:
    """The tree ``e`` should read back as."""
    if isinstance(e, Var):
        return e.name
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, (Min, Max, FloorDiv, FloorMod)):
        return (type(e).__name__, _tree(e.a), _tree(e.b))
    if isinstance(e, (BinaryOp, And, Or)):
        return (c_operator(type(e)), _tree(e.a), _tree(e.b))
    if isinstance(e, Not):
        return ("!", _tree(e.a))
    assert isinstance(e, Select)
    return ("?", _tree(e.condition), _tree(e.true_value), _tree(e.false_value))


@given(int_exprs(VARS, depth=3))
def test_printed_int_expressions_read_back_as_the_tree(e: PrimExpr) -> None:
    text = _Demo().print(e)
    assert _read(text) == _tree(e), text


@given(bool_exprs_from(int_exprs(VARS, depth=2)), bool_exprs_from(int_exprs(VARS, depth=2)), st.data())
def test_printed_logic_reads_back_as_the_tree(p: PrimExpr, q: PrimExpr, data: st.DataObject) -> None:
    e = data.draw(st.sampled_from([And(p, q), Or(p, q), Not(And(p, q)), Or(And(p, q), Not(q)),
                                   And(Or(p, q), p)]))  # fmt: skip
    text = _Demo().print(e)
    assert _read(text) == _tree(e), text


def test_parentheses_are_minimal_and_keep_association() -> None:
    a, b, c = VARS
    p = _Demo()
    assert p.print(Add(Add(a, b), c)) == "a + b + c"
    assert p.print(Add(a, Add(b, c))) == "a + (b + c)"  # float rounding: the IR's order
    assert p.print(Mul(Add(a, b), c)) == "(a + b) * c"
    assert p.print(Sub(a, IntImm(-1))) == "a - -1"
    assert p.print(Select(EQ(a, b), a, Select(EQ(b, c), b, c))) == "(a == b) ? a : (b == c) ? b : c"
    assert p.print(Not(EQ(a, b))) == "!(a == b)"
    x, y = Var("x", "float32"), Var("y", "float32")
    assert p.print(Div(x, Mul(x, y))) == "x / (x * y)" and p.print(Div(Mul(x, y), x)) == "x * y / x"


def test_operators_come_from_the_expression_classes() -> None:
    for cls in PRECEDENCE:
        assert c_operator(cls) == {"and": "&&", "or": "||"}.get(cls.symbol, cls.symbol)
    assert c_operator(And) == "&&" and c_operator(Or) == "||" and c_operator(Div) == "/"


def test_what_a_dialect_does_not_print_is_an_error_naming_it() -> None:
    class Bare(CPrinter):
        language = "bare codegen"

        def visit_Var(self, e: Var) -> Printed:
            return e.name, P_ATOM

    a, b = VARS[:2]
    with pytest.raises(CodegenError, match=r"bare codegen: cannot print FloorDiv"):
        Bare().print(FloorDiv(a, b))
    with pytest.raises(CodegenError, match=r"bare codegen: cannot print Min"):
        Bare().print(Min(a, b))
    with pytest.raises(CodegenError, match=r"bare codegen: string 's' used as a value"):
        Bare().print(StringImm("s"))
