"""Access collection shared by the passes: every load/store with its enclosing loops and guards."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from loopir.ir import op
from loopir.ir.buffer import Buffer, Range
from loopir.ir.expr import And, BufferLoad, Call, IntImm, PrimExpr, Ramp, Var
from loopir.ir.functor import Visitor
from loopir.ir.stmt import Allocate, BufferStore, Evaluate, For, ForKind, IfThenElse, Stmt
from loopir.ir.tma import is_tma_call
from loopir.tensor_intrin.calls import FOOTPRINT_KEY, hardware_lane
from loopir.tensor_intrin.tma import call_touches

__all__ = [
    "Access",
    "collect_accesses",
    "conjuncts",
    "is_thread_loop",
    "loop_range",
    "outside_footprints",
    "index_bounds_exprs",
    "int_of",
]


def conjuncts(cond: PrimExpr) -> list[PrimExpr]:
    """Top-level conjuncts of ``cond`` (nested ``And`` flattened, left to right)."""
    if isinstance(cond, And):
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


def is_thread_loop(f: For, prefixes: Iterable[str] = ("threadIdx.", "vthread.")) -> bool:
    """Whether ``f`` is bound to a thread tag starting with one of ``prefixes``."""
    return f.kind is ForKind.THREAD_BINDING and any(
        (f.thread_tag or "").startswith(p) for p in prefixes
    )


def outside_footprints(loops: list[For]) -> list[For]:
    """``loops`` without the trailing loops over a tensor-core call's footprint (which are not
    in the IR: nothing can be placed inside them)."""
    n = len(loops)
    while n and loops[n - 1].annotations.get(FOOTPRINT_KEY):
        n -= 1
    return loops[:n]


def loop_range(f: For) -> Range:
    return Range(f.min, f.extent)


def int_of(e: PrimExpr) -> int:
    """``int(e)`` of a constant extent or stride: an IntImm's value; anything else is a
    TypeError (as ``int()`` of a non-constant expression is)."""
    if not isinstance(e, IntImm):
        raise TypeError(f"expected a constant integer, got {type(e).__name__} {e}")
    return int(e)


def index_bounds_exprs(idx: PrimExpr) -> list[PrimExpr]:
    """Scalar expressions whose hull is the set of values ``idx`` takes (a Ramp: ends)."""
    if isinstance(idx, Ramp):
        return [idx.base, idx.base + idx.stride * (idx.lanes - 1)]
    return [idx]


@attrs.frozen(eq=False)
class Access:
    """One load or store of a buffer, with its context.

    Attributes
    ----------
    buffer, indices
        What is accessed.
    is_store
        Store (``BufferStore``) or load (``BufferLoad``).
    loops
        Enclosing ``For`` nodes, outermost first.
    conds
        Conjuncts of the enclosing ``if`` conditions (then-branches only), outermost first.
    in_else
        Whether some enclosing ``if`` has the access in its else-branch.
    stmt
        The innermost enclosing BufferStore/Evaluate/... statement.
    """

    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    is_store: bool
    loops: tuple[For, ...]
    conds: tuple[PrimExpr, ...]
    in_else: bool
    stmt: Stmt | None


class _Collector(Visitor):
    def __init__(self) -> None:
        self.loops: list[For] = []
        self.conds: list[PrimExpr] = []
        self.else_depth = 0
        self.stmt: Stmt | None = None
        self.accesses: list[Access] = []
        self.allocs: list[tuple[Allocate, tuple[For, ...]]] = []

    def _add(self, buf: Buffer, idx: tuple[PrimExpr, ...], store: bool) -> None:
        self.accesses.append(
            Access(buf, idx, store, tuple(self.loops), tuple(self.conds), self.else_depth > 0,
                   self.stmt)  # fmt: skip
        )

    def visit_For(self, node: For) -> None:
        self.visit(node.min)
        self.visit(node.extent)
        self.loops.append(node)
        self.visit(node.body)
        self.loops.pop()

    def visit_IfThenElse(self, node: IfThenElse) -> None:
        self.visit(node.condition)
        parts = conjuncts(node.condition)
        self.conds.extend(parts)
        self.visit(node.then_case)
        del self.conds[len(self.conds) - len(parts):]
        if node.else_case is not None:
            self.else_depth += 1
            self.visit(node.else_case)
            self.else_depth -= 1

    def visit_Allocate(self, node: Allocate) -> None:
        self.allocs.append((node, tuple(self.loops)))
        self.visit(node.body)

    def visit_BufferStore(self, node: BufferStore) -> None:
        prev, self.stmt = self.stmt, node
        self._add(node.buffer, node.indices, True)
        self.visit(node.value)
        for i in node.indices:
            self.visit(i)
        self.stmt = prev

    def visit_Evaluate(self, node: Evaluate) -> None:
        prev, self.stmt = self.stmt, node
        if op.is_tensor_core_call(node.value) or is_tma_call(node.value):
            self._tensor_core(node)
        else:
            self.generic_visit(node)
        self.stmt = prev

    def _tensor_core(self, node: Evaluate) -> None:
        """What a lane's tensor-core call touches, each as an access nested in loops over its
        footprint (annotated ``FOOTPRINT_KEY``: they are not in the IR)."""
        assert isinstance(node.value, Call)
        for t in call_touches(node.value, hardware_lane(self.loops)):
            loops = t.loops(node)
            self.loops.extend(loops)
            parts = conjuncts(t.cond) if t.cond is not None else []
            self.conds.extend(parts)
            self._add(t.buffer, t.indices, t.is_store)
            del self.conds[len(self.conds) - len(parts):]
            del self.loops[len(self.loops) - len(loops):]

    def visit_BufferLoad(self, node: BufferLoad) -> None:
        self._add(node.buffer, node.indices, False)
        for i in node.indices:
            self.visit(i)


def collect_accesses(body: Stmt) -> tuple[list[Access], list[tuple[Allocate, tuple[For, ...]]]]:
    """All buffer accesses of ``body`` and its ``Allocate`` nodes (with their enclosing loops)."""
    c = _Collector()
    c.visit(body)
    return c.accesses, c.allocs


def all_true(conds: Iterable[PrimExpr]) -> PrimExpr:
    return op.all_(*conds)


def vars_of(e: PrimExpr) -> set[Var]:
    from loopir.ir.functor import collect_vars

    return set(collect_vars(e))
