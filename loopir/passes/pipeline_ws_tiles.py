"""The tile loop of a persistent warp-specialized GEMM, as ``InjectSoftwarePipeline`` takes it.

A persistent kernel (``hopper_gemm(persistent=...)``) fuses the block tiles into one loop, splits
it by the number of thread blocks (``blockIdx.x``) and keeps the outer part a serial loop
``t`` around the K loop and the epilogue, under the thread loops. When the CTAs do not divide
the tiles the split is inexact and every block under ``t`` carries the predicate
``t * ctas + bx < tiles``: after lowering, each statement of ``t``'s body is guarded by it (the
copies inside their innermost loops). [`persistent_tiles`][loopir.passes.pipeline_ws_tiles.persistent_tiles]
lifts that guard into ``t``'s extent: ``t`` runs ``min(n, ceil((tiles - bx) / ctas))`` iterations,
all of whose statements the guard let run, and none of the others, so the program is the same;
the copies are box copies again (TMA), and the warp-specialized pipeline
([`loopir.passes.pipeline_ws`][loopir.passes.pipeline_ws]) has a producer loop over exactly
the (tile, k) steps that the consumers run, with no guard on either side.

A guard may also be a conjunction of the tile's guard and conditions on the statement's own
loops (a padded C's copy-out, stored straight from the fragments with a guard on each element,
``hopper_gemm``'s persistent epilogue): the tile's conjunct is lifted, the others stay.

Why a guard linear in ``t`` (``a * t + e < b``, ``a > 0``): its true iterations are a prefix
of the loop, so the guard is a bound on ``t``; any other guard is left alone (the pipeline then
refuses the copies, naming the guard).
"""

from __future__ import annotations

import attrs

from loopir import arith
from loopir.errors import PassError
from loopir.ir import op
from loopir.ir.expr import LT, FloorDiv, IntImm, Max, Min, PrimExpr, Var
from loopir.ir.functor import collect_vars, post_order_stmts, substitute
from loopir.ir.printer import script
from loopir.ir.stmt import Allocate, BufferStore, Evaluate, For, ForKind, IfThenElse, SeqStmt, Stmt
from loopir.passes._walk import conjuncts

__all__ = ["WS_KEY", "persistent_tiles", "ws_child"]

WS_KEY = "loopir.warp_specialize"
"""On a loop with [`TMA_KEY`][loopir.passes.pipeline_tma.TMA_KEY]: a producer warpgroup issues
the copies on *full*/*empty* mbarriers, the consumer warps wait on them themselves ([`loopir.passes.pipeline_ws`][loopir.passes.pipeline_ws]'s module doc).
``True``, or ``(dec, inc)``: also ``setmaxnreg`` (the producer's and the consumers' registers
per thread)."""



def ws_child(loop: For) -> Var | None:
    """The variable of the warp-specialized loop directly in ``loop``'s body (through
    allocations and sequences, under no other loop or guard), or None."""
    todo: list[Stmt] = [loop.body]
    while todo:
        s = todo.pop()
        if isinstance(s, Allocate):
            todo.append(s.body)
        elif isinstance(s, SeqStmt):
            todo += list(s.seq)
        elif isinstance(s, For) and s.annotations.get(WS_KEY):
            return s.loop_var
    return None


def _fail(loop: For, why: str) -> PassError:
    return PassError(f"pass InjectSoftwarePipeline: tile loop {loop.loop_var.name} around a {WS_KEY} loop: {why}")


def _bound(loop: For, cond: PrimExpr) -> PrimExpr | None:
    """``m`` with ``cond`` exactly when ``t < m`` (``t`` the loop's variable), for ``cond``
    ``a * t + e < b`` with a constant ``a > 0``; None for another condition."""
    if not isinstance(cond, LT):
        return None
    t = loop.loop_var
    d = arith.simplify(cond.a - cond.b)
    d0 = arith.simplify(substitute(d, {t: IntImm(0, t.dtype)}))
    a = arith.simplify(substitute(d, {t: IntImm(1, t.dtype)}) - d0)
    if not (isinstance(a, IntImm) and a.value > 0) or t in collect_vars(d0):
        return None
    rest = arith.simplify(d - a * t - d0)
    if not (isinstance(rest, IntImm) and rest.value == 0):
        return None
    # a * t + d0 < 0  <=>  t < ceil(-d0 / a)
    return FloorDiv(IntImm(a.value - 1, d0.dtype) - d0, a)


def persistent_tiles(loop: For) -> For:
    """``loop`` (a serial tile loop around a warp-specialized K loop) with the guard that every
    statement of its body carries lifted into its extent (module doc); ``loop`` itself when its
    statements carry none (the CTAs divide the tiles).

    Raises
    ------
    PassError
        When some statements are guarded by a condition on the tile and others not, or by
        several, or by one that is not a bound on ``t`` (naming the condition).
    """
    if loop.kind is not ForKind.SERIAL or not (isinstance(loop.min, IntImm) and loop.min.value == 0):
        raise _fail(loop, f"needs a serial loop from 0, got {loop.kind.value} from {loop.min}")
    t = loop.loop_var
    inner: set[Var] = set()
    post_order_stmts(loop.body, lambda n: inner.add(n.loop_var) if isinstance(n, For) else None)

    def split(s: Stmt) -> tuple[PrimExpr | None, list[PrimExpr]]:
        """A guard's conjunct on the tile alone (naming ``t``, no loop inside) and the others."""
        if not isinstance(s, IfThenElse) or s.else_case is not None:
            return None, []
        tile: list[PrimExpr] = []
        rest: list[PrimExpr] = []
        for c in conjuncts(s.condition):
            used = set(collect_vars(c))
            (tile if t in used and not used & inner else rest).append(c)
        if len(tile) != 1:  # none, or several: left to the checks below (named there)
            return None, []
        return tile[0], rest

    def tile_guard(s: Stmt) -> bool:
        return split(s)[0] is not None

    conds: dict[str, PrimExpr] = {}
    bare: list[Stmt] = []

    def walk(s: Stmt, guarded: bool) -> None:
        if tile_guard(s):
            assert isinstance(s, IfThenElse)
            cond = split(s)[0]
            assert cond is not None
            conds.setdefault(script(cond).strip(), cond)
            walk(s.then_case, True)
        elif isinstance(s, SeqStmt):
            for c in s.seq:
                walk(c, guarded)
        elif isinstance(s, (Allocate, For)):
            walk(s.body, guarded)
        elif isinstance(s, IfThenElse):
            walk(s.then_case, guarded)
            if s.else_case is not None:
                walk(s.else_case, guarded)
        elif isinstance(s, (BufferStore, Evaluate)) and not guarded:
            bare.append(s)

    walk(loop.body, False)
    if not conds:
        return loop
    if len(conds) > 1 or bare:
        why = f"guards {sorted(conds)}" if len(conds) > 1 else f"a statement without the guard {next(iter(conds))}"
        raise _fail(loop, f"every statement of the tile loop must carry one guard on the tile (the split's predicate), "
                          f"got {why}")  # fmt: skip
    cond = next(iter(conds.values()))
    bound = _bound(loop, cond)
    if bound is None:
        raise _fail(loop, f"the tile's guard {script(cond).strip()} is not a bound a * {t.name} + e < b (a > 0)")

    def strip(s: Stmt) -> Stmt:
        if tile_guard(s):
            assert isinstance(s, IfThenElse)
            rest = split(s)[1]
            then = strip(s.then_case)
            return IfThenElse(op.all_(*rest), then) if rest else then
        if isinstance(s, SeqStmt):
            return SeqStmt(tuple(strip(c) for c in s.seq))
        if isinstance(s, (Allocate, For)):
            return attrs.evolve(s, body=strip(s.body))
        if isinstance(s, IfThenElse):
            return attrs.evolve(s, then_case=strip(s.then_case),
                                else_case=None if s.else_case is None else strip(s.else_case))  # fmt: skip
        return s

    zero = IntImm(0, loop.extent.dtype)
    extent = arith.simplify(Min(loop.extent, Max(bound, zero)))
    return attrs.evolve(loop, extent=extent, body=strip(loop.body))
