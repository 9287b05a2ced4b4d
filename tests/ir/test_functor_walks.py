"""The fast paths of the generic walks give what the plain field walk gives."""

from __future__ import annotations

import attrs
import pytest

import loopir
from loopir.ir import stmt as stmt_module
from loopir.ir.expr import Var
from loopir.ir.functor import (
    Mutator,
    Visitor,
    _child_fields,
    collect_vars,
    post_order_stmts,
    post_order_visit,
    stmt_fields,
    substitute,
)
from loopir.ir.stmt import Stmt
from loopir.schedule import tree


def _funcs() -> list[loopir.PrimFunc]:
    sch = loopir.examples.dense(100, 77, 230)
    with loopir.PassContext(config={"tir.enable_local_pad": True}):
        lowered = loopir.lower(sch.func)
    return [sch.func, lowered]


@pytest.mark.parametrize("which", [0, 1], ids=["scheduled", "lowered"])
def test_post_order_stmts_is_post_order_visit_on_statements(which: int) -> None:
    f = _funcs()[which]
    every: list[object] = []
    post_order_visit(f.body, every.append)
    stmts: list[Stmt] = []
    post_order_stmts(f.body, stmts.append)
    expected = [n for n in every if isinstance(n, Stmt)]
    assert len(stmts) == len(expected) and all(a is b for a, b in zip(stmts, expected))
    # tree.walk (pre-order, skipping the fields that hold no statement) meets the same ones
    walked = [s for s, _ in tree.walk(f)]
    assert {id(s) for s in walked} == {id(s) for s in expected}


def test_stmt_fields_are_the_fields_that_can_hold_statements() -> None:
    for name in dir(stmt_module):
        cls = getattr(stmt_module, name)
        if not (isinstance(cls, type) and attrs.has(cls) and issubclass(cls, Stmt)):
            continue
        kept = set(stmt_fields(cls))
        for f in attrs.fields(cls):
            if f.name in _child_fields(cls) and f.name not in kept:
                assert "Stmt" not in str(f.type) and "Block" not in str(f.type), (name, f.name)


def test_binary_fast_paths_match_the_field_walk() -> None:
    i, j, k = Var("i"), Var("j"), Var("k")
    e = (i * 4 + j) // 2 - (i % 3) * k
    assert collect_vars(e) == [i, j, k]
    # unchanged: the very same object; changed: rebuilt with the operator's class
    assert substitute(e, {Var("z"): j}) is e
    out = substitute(e, {i: j})
    assert collect_vars(out) == [j, k] and type(out) is type(e)

    class Count(Visitor):
        def __init__(self) -> None:
            self.n = 0

        def visit_Var(self, v: Var) -> None:
            self.n += 1

    c = Count()
    c.visit(e)
    assert c.n == 4  # i, j, i, k

    class Keep(Mutator):
        pass

    assert Keep().visit(e) is e
