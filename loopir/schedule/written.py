"""Which elements the producers under a loop wrote in the current iteration of its loops.

``reverse_compute_at`` places a consumer under a loop; its new loops cover the hull of what
the producers there write, relaxed over the loops inside the position. The hull ignores the
producers' predicates and, where a producer writes one element for several inner iterations
(a dimension simplified to a constant, a reduction loop), it cannot say whether *this*
iteration of the position's loops wrote it at all. The consumer placed there must only touch
elements written in the current iteration: under a thread loop the producers' buffer may be
per thread (a ``local`` accumulator compacted per thread), and an element computed by another
thread -- or by none -- would be copied as garbage (issue 11 item 3).

:func:`written_condition` turns a producer's write and predicate into a condition on the
consumer's element (its index expressions over the position's loops and the consumer's new
loops). It is exact when each written dimension is ``base + sum(c_k * v_k)`` over the inner
loops ``v_k`` with the coefficients forming a mixed radix (each point written by exactly one
inner iteration, as tiling by split produces), and the predicate's conjuncts are linear
comparisons. Otherwise it returns a reason, and the caller decides (refuses under thread
loops, where copying an element another thread owns is a race).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from loopir.ir.buffer import BufferRegion, Range
from loopir.ir.expr import GE, GT, LE, LT, IntImm, PrimExpr, Var
from loopir.ir.functor import collect_vars, substitute
from loopir.ir.stmt import BlockRealize, For, Stmt
from loopir.schedule import region as rg

if TYPE_CHECKING:  # pragma: no cover
    from loopir.arith import Analyzer


class Inexact(Exception):
    """The written set cannot be described exactly; the message says why."""


def written_condition(
    realize: BlockRealize,
    ancestors: tuple[Stmt, ...],
    loop: Stmt,
    write: BufferRegion,
    element: Sequence[PrimExpr],
    ana: Analyzer,
) -> PrimExpr:
    """When ``realize`` writes ``element`` of ``write.buffer`` in this iteration of ``loop``.

    Parameters
    ----------
    realize
        The producer block (with its predicate and bindings).
    ancestors
        Its ancestors; the loops strictly below ``loop`` are the inner loops, which vary
        within one iteration of the position.
    loop
        The position loop (or the block whose scope holds the producer's whole loop nest:
        then every loop above the producer is an inner loop).
    write
        One of the producer's write regions (point accesses, or tiles of constant extent
        starting at such points: a blockized producer's).
    element
        The consumer's index per dimension, over the position's loops and its new loops.
    ana
        Analyzer with the position's loops (and the consumer's new loops) bound.

    Returns
    -------
    PrimExpr
        A condition over the loops at or above the position, the consumer's loops and
        symbolic sizes; true for exactly the elements written in the current iteration
        (terms the analyzer proves from the bound loop ranges are left out).

    Raises
    ------
    Inexact
        When the write pattern or the predicate is outside the exact cases.
    """
    inner = rg.loops_between(ancestors, loop)
    inner_vars = [lp.loop_var for lp in inner]
    by_var = {lp.loop_var: lp for lp in inner}
    bindings = {iv.var: v for iv, v in zip(realize.block.iter_vars, realize.iter_values)}
    conds: list[PrimExpr] = []
    solved: dict[Var, PrimExpr] = {}  # inner var -> its value for the consumer's element
    for dim, (rng, x) in enumerate(zip(write.region, element)):
        if not (isinstance(rng.extent, IntImm) and rng.extent.value >= 1):
            raise Inexact(f"{write.buffer.name} is written with extent {rng.extent} at dim {dim}")
        e = ana.simplify(substitute(rng.min, bindings))
        lin = ana.detect_linear(e, inner_vars) if inner_vars else [e]
        if lin is None:
            raise Inexact(f"index {e} of {write.buffer.name} is not linear in the inner loops")
        base = lin[-1]
        # (coefficient, constant extent, loop); a region of a blockized producer (a tile of
        # constant extent) is a dense innermost digit of coefficient 1 without a loop
        terms: list[tuple[int, int, For | None]] = []
        if not _is_one(rng.extent):
            assert isinstance(rng.extent, IntImm)
            terms.append((1, rng.extent.value, None))
        for v, c in zip(inner_vars, lin[:-1]):
            if isinstance(c, IntImm) and c.value == 0:
                continue
            lp = by_var[v]
            if not (isinstance(c, IntImm) and c.value > 0 and isinstance(lp.extent, IntImm)):
                raise Inexact(f"index {e}: coefficient {c} of loop {v.name} (extent {lp.extent})")
            if v in solved:
                raise Inexact(f"loop {v.name} indexes two dimensions of {write.buffer.name}")
            terms.append((c.value, lp.extent.value, lp))
        terms.sort(key=lambda t: t[0])
        stride = 1
        lo = base
        for coef, ext, digit in terms:
            if coef != stride:
                what = "the tile" if digit is None else digit.loop_var.name
                raise Inexact(f"index {e} skips or repeats elements (coefficient {coef} of "
                              f"{what}, expected {stride})")  # fmt: skip
            stride *= ext
            if digit is not None:
                lo = lo + coef * digit.min
        lo = ana.simplify(lo)
        off = x - lo
        conds.append(off >= 0)
        conds.append(off < stride)
        for coef, ext, digit in terms:
            if digit is None:
                continue
            # the unique inner iteration that writes the element (mixed radix digits)
            solved[digit.loop_var] = ana.simplify(digit.min + (off // coef) % ext)
    unused = [v for v in inner_vars if v not in solved]
    seen: set[Var] = set()
    for c in rg.conjuncts(realize.predicate):
        mentioned = set(collect_vars(c))
        if not mentioned & set(inner_vars):
            conds.append(c)
            continue
        if not isinstance(c, (LT, LE, GT, GE)):
            raise Inexact(f"predicate term {c} is not a comparison")
        d = substitute(c.a - c.b, solved)
        free = [v for v in unused if v in mentioned]
        if free:
            if set(free) & seen:
                # two terms over one loop: projecting each separately over-approximates
                raise Inexact(f"predicate terms share loop {free[0].name}")
            seen |= set(free)
            relax = {v: Range(by_var[v].min, by_var[v].extent) for v in free}
            bounds = ana.int_set(d, relax)
            # exists v: d < 0  <=>  min(d) < 0, when the bound is attained
            if not bounds.exact:
                raise Inexact(f"predicate term {c}: no tight bound over {free[0].name}")
            d = bounds.min if isinstance(c, (LT, LE)) else bounds.max
            if any(v in set(inner_vars) for v in collect_vars(d)):
                raise Inexact(f"predicate term {c}: bound {d} still depends on inner loops")
        zero = IntImm(0, d.dtype)
        conds.append(type(c)(d, zero))
    # drop what the consumer's loop ranges already guarantee (its hull covers the write)
    return rg.conjunction([ana.simplify(c) for c in conds if not ana.can_prove(c)])


def _is_one(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 1
