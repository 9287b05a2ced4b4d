"""Hypothesis strategies for random integer/bool expressions and a reference interpreter."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from loopir.ir import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    Mutator,
    Not,
    Or,
    PrimExpr,
    Select,
    Sub,
    Var,
)

_ARITH = (Add, Sub, Mul, Min, Max)
_CMP = (EQ, NE, LT, LE, GT, GE)


def int_exprs(variables: list[Var], depth: int = 4) -> st.SearchStrategy[PrimExpr]:
    """Random int32 expressions over ``variables`` of nesting depth at most ``depth``.

    Division and modulo are only by nonzero constants. Each level refers to the one below
    (no nested ``st.recursive``), which keeps drawing cheap.
    """
    leaves = st.one_of(st.sampled_from(variables), st.integers(-20, 40).map(IntImm))
    level: st.SearchStrategy[PrimExpr] = leaves
    for _ in range(depth):
        below = level
        binary = st.builds(lambda c, a, b: c(a, b), st.sampled_from(_ARITH), below, below)
        div = st.builds(
            lambda c, a, d: c(a, IntImm(d)),
            st.sampled_from((FloorDiv, FloorMod)),
            below,
            st.integers(-7, 9).filter(lambda d: d != 0),
        )
        select = st.builds(Select, bool_exprs_from(below), below, below)
        level = st.one_of(leaves, binary, binary, div, select)
    return level


def bool_exprs_from(ints: st.SearchStrategy[PrimExpr]) -> st.SearchStrategy[PrimExpr]:
    """Random bool expressions whose comparisons draw operands from ``ints``."""
    cmp = st.builds(lambda c, a, b: c(a, b), st.sampled_from(_CMP), ints, ints)
    return st.one_of(
        cmp,
        cmp,
        st.builds(And, cmp, cmp),
        st.builds(Or, cmp, cmp),
        st.builds(Not, cmp),
    )


def interpret(e: PrimExpr, env: dict[Var, int]) -> Any:
    """Reference semantics of the IR (floor division/modulo as in Python)."""
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, IntImm):
        return bool(e.value) if e.dtype == "bool" else e.value
    if isinstance(e, Select):
        c = interpret(e.condition, env)
        return interpret(e.true_value, env) if c else interpret(e.false_value, env)
    if isinstance(e, Not):
        return not interpret(e.a, env)
    a, b = interpret(e.a, env), interpret(e.b, env)  # type: ignore[attr-defined]
    table = {
        Add: lambda: a + b,
        Sub: lambda: a - b,
        Mul: lambda: a * b,
        FloorDiv: lambda: a // b,
        FloorMod: lambda: a % b,
        Min: lambda: min(a, b),
        Max: lambda: max(a, b),
        EQ: lambda: a == b,
        NE: lambda: a != b,
        LT: lambda: a < b,
        LE: lambda: a <= b,
        GT: lambda: a > b,
        GE: lambda: a >= b,
        And: lambda: a and b,
        Or: lambda: a or b,
    }
    return table[type(e)]()


class Rebuild(Mutator):
    """Rebuilds every node (fresh objects), mapping variables through ``vmap``."""

    def __init__(self, vmap: dict[Var, PrimExpr] | None = None) -> None:
        self.vmap = vmap or {}

    def visit_Var(self, v: Var) -> PrimExpr:
        return self.vmap.get(v, v)

    def visit_IntImm(self, c: IntImm) -> PrimExpr:
        return IntImm(c.value, c.dtype)


class BumpConstant(Mutator):
    """Adds one to the ``target``-th integer constant (in visiting order)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.seen = 0

    def visit_IntImm(self, c: IntImm) -> PrimExpr:
        k = self.seen
        self.seen += 1
        if k != self.target:
            return c
        if c.dtype == "bool":
            return IntImm(1 - c.value, "bool")
        return IntImm(c.value + 1, c.dtype)


def count_int_constants(e: PrimExpr) -> int:
    n = [0]

    class _C(Mutator):
        def visit_IntImm(self, c: IntImm) -> PrimExpr:
            n[0] += 1
            return c

    _C().visit(e)
    return n[0]
