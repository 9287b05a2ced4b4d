"""The one structural key (loopir.arith.structural_key): equal exactly for structurally equal
expressions, variables by identity, valid on its own (the ids it holds stay alive)."""

from __future__ import annotations

import gc

from hypothesis import given

from loopir.arith import structural_key
from loopir.ir import op
from loopir.ir.equality import structural_equal
from loopir.ir.expr import And, Cast, FloatImm, IntImm, Not, Or, PrimExpr, Select, Var
from tests.ir.ir_strategies import int_exprs

n, m = Var("n"), Var("m")


def test_structural_key() -> None:
    a = And(n > 0, Not(m < 2))
    b = And(n > 0, Not(m < 2))
    assert structural_key(a) == structural_key(b)
    assert hash(structural_key(a)) == hash(structural_key(b))
    assert structural_key(Or(n > 0, m > 0)) != structural_key(And(n > 0, m > 0))
    assert structural_key(Cast("int64", n)) == structural_key(Cast("int64", n))
    assert structural_key(Cast("int64", n)) != structural_key(Cast("int32", n))
    assert structural_key(Select(n > 0, n, m)) == structural_key(Select(n > 0, n, m))
    assert structural_key(IntImm(1)) != structural_key(FloatImm(1.0))
    assert structural_key(IntImm(1, "int64")) != structural_key(IntImm(1))
    assert structural_key(FloatImm(0.0)) != structural_key(FloatImm(-0.0))
    # variables by identity: a different Var of the same name is a different key
    assert structural_key(n + 1) != structural_key(Var("n") + 1)
    # calls of intrinsics compare by their operator, dtype and arguments
    assert structural_key(op.call("exp", FloatImm(1.0))) == structural_key(op.call("exp", FloatImm(1.0)))
    assert structural_key(op.call("exp", FloatImm(1.0))) != structural_key(op.call("log", FloatImm(1.0)))


def test_a_key_outlives_the_expression_it_was_made_from() -> None:
    # the key pins the Var, so a Var created later cannot take its id and alias the key
    key = structural_key(Var("x") + 1)
    gc.collect()
    others = [structural_key(Var("x") + 1) for _ in range(200)]
    assert all(k != key for k in others)


@given(int_exprs([n, m], depth=3), int_exprs([n, m], depth=3))
def test_keys_agree_with_structural_equality(a: PrimExpr, b: PrimExpr) -> None:
    assert (structural_key(a) == structural_key(b)) == structural_equal(a, b, map_free_vars=False)
    assert structural_key(a) == structural_key(a)
