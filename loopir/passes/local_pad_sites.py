"""Structure of the LocalPadding pass: candidate sites (guarded stores with their loops) and the
reductions and identities they take part in."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from loopir.ir import dtype as dt
from loopir.ir import op
from loopir.ir.expr import (
    Add,
    BinaryOp,
    BufferLoad,
    Call,
    FloatImm,
    IntImm,
    Max,
    Min,
    PrimExpr,
    make_const,
)
from loopir.ir.functor import Mutator, Visitor, post_order_visit
from loopir.ir.stmt import BufferStore, For, IfThenElse, SeqStmt, Stmt, seq
from loopir.passes._walk import conjuncts
from loopir.passes.local_pad_analysis import has_load_or_call, loads_of

__all__ = ["Distribute", "Reduction", "Site", "Sites", "const_value", "identity", "impure",
           "reduction", "same_indices"]  # fmt: skip


# --------------------------------------------------------------------------------------------
# Structure: distribute pure guards over sequences, find candidate sites
# --------------------------------------------------------------------------------------------


def _pure_cond(c: PrimExpr) -> bool:
    return not has_load_or_call(c)


def _has_cache_store(s: Stmt) -> bool:
    found = False

    def f(n: object) -> None:
        nonlocal found
        if isinstance(n, BufferStore) and n.buffer.scope in ("shared", "local"):
            found = True

    post_order_visit(s, f)
    return found


def _merge_chain(s: Stmt) -> Stmt:
    """``if a: if b: s`` (no else, pure conditions) -> ``if a && b: s``."""
    if (
        isinstance(s, IfThenElse)
        and s.else_case is None
        and isinstance(s.then_case, IfThenElse)
        and s.then_case.else_case is None
        and _pure_cond(s.condition)
        and _pure_cond(s.then_case.condition)
    ):
        inner = _merge_chain(s.then_case)
        assert isinstance(inner, IfThenElse)
        return IfThenElse(op.all_(s.condition, inner.condition), inner.then_case)
    return s


class Distribute(Mutator):
    """``if c: {s1; s2}`` -> ``{if c: s1; if c: s2}`` for pure ``c`` (conditions only read loop
    variables, which the statements cannot change), so each store gets its own guard."""

    def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
        node = self.generic_visit(node)
        if node.else_case is not None or not _pure_cond(node.condition):
            return node
        if isinstance(node.then_case, SeqStmt) and _has_cache_store(node.then_case):
            return seq(*[_merge_chain(IfThenElse(node.condition, s)) for s in node.then_case.seq])
        if isinstance(node.then_case, IfThenElse) and _has_cache_store(node.then_case):
            return _merge_chain(node)
        return node


@attrs.define(eq=False)
class Site:
    top: Stmt  # the statement replaced by the rewrite (the outermost guard, or the store)
    store: BufferStore
    conds: list[PrimExpr]
    loops: tuple[For, ...]
    in_else: bool
    outer_conds: tuple[PrimExpr, ...] = ()  # conditions of ifs around the loops of the store


class Sites(Visitor):
    def __init__(self) -> None:
        self.loops: list[For] = []
        self.else_depth = 0
        self.sites: list[Site] = []
        self.outer: list[PrimExpr] = []

    def visit_For(self, node: For) -> None:
        self.loops.append(node)
        self.visit(node.body)
        self.loops.pop()

    def visit_IfThenElse(self, node: IfThenElse) -> None:
        if node.else_case is None:
            chain = [node]
            t = node.then_case
            while isinstance(t, IfThenElse) and t.else_case is None:
                chain.append(t)
                t = t.then_case
            if isinstance(t, BufferStore):
                conds = [c for n in chain for c in conjuncts(n.condition)]
                self.sites.append(Site(node, t, conds, tuple(self.loops), self.else_depth > 0,
                                        tuple(self.outer)))  # fmt: skip
                return
        self.outer.append(node.condition)
        self.visit(node.then_case)
        self.outer.pop()
        if node.else_case is not None:
            self.else_depth += 1
            self.visit(node.else_case)
            self.else_depth -= 1

    def visit_BufferStore(self, node: BufferStore) -> None:
        self.sites.append(
            Site(node, node, [], tuple(self.loops), self.else_depth > 0, tuple(self.outer))
        )


# --------------------------------------------------------------------------------------------
# Reductions and identities
# --------------------------------------------------------------------------------------------


@attrs.frozen(eq=False)
class Reduction:
    kind: str  # "sum" | "max" | "min"
    acc: BufferLoad
    term: PrimExpr


def same_indices(a: Sequence[PrimExpr], b: Sequence[PrimExpr]) -> bool:
    from loopir.ir.equality import structural_equal

    return len(a) == len(b) and all(x is y or structural_equal(x, y) for x, y in zip(a, b))


def reduction(store: BufferStore) -> Reduction | None:
    v = store.value
    kinds: dict[type[PrimExpr], str] = {Add: "sum", Max: "max", Min: "min"}
    kind = kinds.get(type(v))
    if kind is None or not isinstance(v, BinaryOp):  # (an exact Add, Max or Min is a BinaryOp)
        return None
    for acc, term in ((v.a, v.b), (v.b, v.a)):
        if (
            isinstance(acc, BufferLoad)
            and acc.buffer is store.buffer
            and same_indices(acc.indices, store.indices)
            and all(ld.buffer is not store.buffer for ld in loads_of(term))
        ):
            return Reduction(kind, acc, term)
    return None


def identity(kind: str, dtype: str) -> PrimExpr | None:
    if dt.is_bool(dtype) or dt.lanes(dtype) != 1:
        return None
    if kind == "sum":
        return make_const(0, dtype)
    if kind == "max":
        return make_const(dt.min_value(dtype), dtype)
    return make_const(dt.max_value(dtype), dtype)


def const_value(e: PrimExpr) -> float | int | None:
    return e.value if isinstance(e, (IntImm, FloatImm)) else None


def impure(e: PrimExpr) -> bool:
    bad = False

    def f(n: object) -> None:
        nonlocal bad
        if isinstance(n, Call) and not n.pure:
            bad = True

    post_order_visit(e, f)
    return bad
