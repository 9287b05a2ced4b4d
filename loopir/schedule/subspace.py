"""Subspace division of block bindings: what ``blockize`` builds its two blocks from.

TVM's ``arith::SubspaceDivide``, restricted to the bindings loopir's primitives produce:
given the loops above a block split into *outer* loops (above the blockized loop) and *inner*
loops (the blockized loop and those below it), every binding is written

    binding == outer * inner_extent + inner

where ``inner`` ranges over ``inner_extent`` consecutive values as the inner loops run and
``outer`` depends on the outer loops only. For a binding affine in the loop vars (after
``split``, ``reorder``, ``loop_partition``) this holds when the inner terms form a mixed radix
(coefficients 1, e1, e1*e2... for inner loops of extents e1, e2...) and every outer
coefficient is a multiple of the inner extent; the outer terms divided by it must form a
mixed radix too (as in TVM, which refuses e.g. ``i0 * 32 + i1`` with ``i1`` of extent 16).
A binding that uses only outer or only inner loops divides trivially, whatever its form
(TVM's ``TrivialSubspaceDivision``). A constant part of an affine binding goes to the outer
side when the inner extent divides it and stays in the inner binding otherwise (whose
domain then starts at the remainder; TVM 0.27 keeps the inner domain at 0 there and loses
the offset of an outer-only binding, both wrong).

The predicate divides by conjunct: a conjunct over inner loops guards the inner block, one
over outer loops (or none) the outer block; one mixing both is not divisible.

Unit loops (extent 1) stand for their minimum in the inner part; with
``preserve_unit_iters=False`` also in the outer part (TVM's ``simplify_trivial_iterators``).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from loopir.arith import Analyzer
from loopir.ir.buffer import Range
from loopir.ir.expr import IntImm, PrimExpr
from loopir.ir.functor import collect_vars, substitute
from loopir.ir.stmt import For, IterVar

__all__ = ["Division", "IterDivision", "divide"]


@attrs.frozen
class IterDivision:
    """One binding divided: ``binding == outer * inner_extent + inner``.

    ``inner`` is None when the inner extent is 1 (no inner iter var is made); ``outer_dom``
    and ``inner_dom`` are the domains of the new iter vars.
    """

    outer: PrimExpr
    outer_dom: Range
    inner: PrimExpr | None
    inner_dom: Range | None
    # the inner binding takes the least value of inner_dom (False: not known to)
    reaches_min: bool = True

    @property
    def inner_extent(self) -> PrimExpr | None:
        return None if self.inner_dom is None else self.inner_dom.extent


@attrs.frozen
class Division:
    """Every binding divided, and the predicate split into its outer and inner conjuncts."""

    iters: tuple[IterDivision, ...]
    outer_predicate: tuple[PrimExpr, ...]
    inner_predicate: tuple[PrimExpr, ...]


class NotDivisible(Exception):
    """The bindings cannot be divided; the message says which binding and why."""


def _is_unit(loop: For) -> bool:
    return isinstance(loop.extent, IntImm) and loop.extent.value == 1


def _mixed_radix(
    terms: list[tuple[PrimExpr, For]], ana: Analyzer
) -> PrimExpr | None:
    """The extent covered by ``sum(coef * loop)`` when the coefficients form a mixed radix
    (1, e1, e1*e2, ... in some order), else None. The sum then takes every value of
    ``[min, min + extent)`` exactly once."""
    left = list(terms)
    acc: PrimExpr = IntImm(1, terms[0][1].loop_var.dtype) if terms else IntImm(1)
    while left:
        for k, (coef, loop) in enumerate(left):
            if ana.can_prove_equal(coef, acc):
                acc = ana.simplify(acc * loop.extent)
                del left[k]
                break
        else:
            return None
    return acc


def _affine_parts(
    value: PrimExpr, loops: Sequence[For], ana: Analyzer
) -> tuple[list[tuple[PrimExpr, For]], PrimExpr] | None:
    """``value == sum(coef * loop) + base`` over ``loops`` (zero coefficients dropped)."""
    if not loops:
        return [], value
    found = ana.detect_linear(value, [lp.loop_var for lp in loops])
    if found is None:
        return None
    *coefs, base = found
    terms = [(c, lp) for c, lp in zip(coefs, loops) if not (isinstance(c, IntImm) and c.value == 0)]
    if any(not ana.can_prove(c > 0) for c, _ in terms):
        return None
    return terms, base


def _low(terms: list[tuple[PrimExpr, For]], base: PrimExpr, ana: Analyzer) -> PrimExpr:
    """The smallest value of ``sum(coef * loop) + base`` (positive coefficients)."""
    out = base
    for coef, loop in terms:
        out = out + coef * loop.min
    return ana.simplify(out)


def _dense_dom(
    terms: list[tuple[PrimExpr, For]], base: PrimExpr, dom: Range, ana: Analyzer
) -> Range:
    """The domain of a binding on one side: the values its affine terms cover, when they
    form a mixed radix inside the original domain ``dom`` (TVM's iter-map extent), else
    ``dom`` itself (always valid: a binding stays in its iter var's domain)."""
    extent = _mixed_radix(terms, ana) if terms else IntImm(1, dom.extent.dtype)
    if extent is None:
        return dom
    lo = _low(terms, base, ana)
    inside = ana.can_prove(lo >= dom.min) and ana.can_prove(lo + extent <= dom.min + dom.extent)
    return Range(lo, extent) if inside else dom


def _divide_one(
    value: PrimExpr,
    iv: IterVar,
    outer: Sequence[For],
    inner: Sequence[For],
    ana: Analyzer,
    preserve_unit_iters: bool,
) -> IterDivision:
    dtype = iv.var.dtype
    units = {lp.loop_var: lp.min for lp in inner if _is_unit(lp)}
    if not preserve_unit_iters:
        units.update((lp.loop_var, lp.min) for lp in outer if _is_unit(lp))
    value = ana.simplify(substitute(value, units)) if units else value
    used = set(collect_vars(value))
    inner_l = [lp for lp in inner if lp.loop_var in used]
    outer_l = [lp for lp in outer if lp.loop_var in used]
    zero, one = IntImm(0, dtype), IntImm(1, dtype)
    if not inner_l:
        parts = _affine_parts(value, outer_l, ana)
        dom = iv.dom if parts is None else _dense_dom(parts[0], parts[1], iv.dom, ana)
        if not outer_l:  # a constant: one value
            dom = Range(value, one) if isinstance(value, IntImm) else iv.dom
        return IterDivision(value, dom, None, None)
    if not outer_l:
        parts = _affine_parts(value, inner_l, ana)
        dom = iv.dom if parts is None else _dense_dom(parts[0], parts[1], iv.dom, ana)
        # affine with positive coefficients: its least value is taken (all loops at their min)
        reaches = parts is not None and ana.can_prove_equal(_low(parts[0], parts[1], ana), dom.min)
        return IterDivision(zero, Range(zero, one), value, dom, reaches)
    return _divide_mixed(value, iv, outer_l, inner_l, ana)


def _divide_mixed(
    value: PrimExpr, iv: IterVar, outer: list[For], inner: list[For], ana: Analyzer
) -> IterDivision:
    """A binding over outer and inner loops: affine, inner mixed radix, outer divisible."""
    dtype = iv.var.dtype
    parts = _affine_parts(value, [*outer, *inner], ana)
    if parts is None:
        raise NotDivisible(
            f"the binding {iv.var.name} = {value} is not affine with positive coefficients "
            "in the loops"
        )
    terms, base = parts
    inner_set = {lp.loop_var for lp in inner}
    in_terms = [(c, lp) for c, lp in terms if lp.loop_var in inner_set]
    out_terms = [(c, lp) for c, lp in terms if lp.loop_var not in inner_set]
    extent = _mixed_radix(in_terms, ana)
    if extent is None:
        raise NotDivisible(
            f"the inner loops do not cover consecutive values of {iv.var.name} = {value}"
        )
    q_terms: list[tuple[PrimExpr, For]] = []
    for coef, loop in out_terms:
        if not ana.can_prove((coef % extent) == 0):
            raise NotDivisible(
                f"in {iv.var.name} = {value}, the coefficient {coef} of outer loop "
                f"{loop.loop_var.name} is not a multiple of the inner extent {extent}"
            )
        q_terms.append((ana.simplify(coef // extent), loop))
    q_extent = _mixed_radix(q_terms, ana)
    if q_extent is None:
        raise NotDivisible(f"the outer loops do not cover consecutive tiles of {iv.var.name} = {value}")
    q_base: PrimExpr
    r_base: PrimExpr
    if isinstance(base, IntImm) and isinstance(extent, IntImm):
        q, r = divmod(base.value, extent.value)
        q_base, r_base = IntImm(q, dtype), IntImm(r, dtype)
    elif ana.can_prove((base % extent) == 0):
        q_base, r_base = ana.simplify(base // extent), IntImm(0, dtype)
    else:
        raise NotDivisible(f"the offset {base} of {iv.var.name} = {value} is not divisible by {extent}")
    outer_v: PrimExpr = q_base
    for coef, loop in q_terms:
        outer_v = outer_v + coef * loop.loop_var
    inner_v: PrimExpr = r_base
    for coef, loop in in_terms:
        inner_v = inner_v + coef * loop.loop_var
    outer_v, inner_v = ana.simplify(outer_v), ana.simplify(inner_v)
    outer_dom = Range(_low(q_terms, q_base, ana), q_extent)
    inner_dom = Range(_low(in_terms, r_base, ana), extent)
    return IterDivision(outer_v, outer_dom, inner_v, inner_dom)


def _split_predicate(
    predicate: Sequence[PrimExpr], inner: Sequence[For]
) -> tuple[tuple[PrimExpr, ...], tuple[PrimExpr, ...]]:
    inner_vars = {lp.loop_var for lp in inner}
    outer_c: list[PrimExpr] = []
    inner_c: list[PrimExpr] = []
    for c in predicate:
        used = set(collect_vars(c))
        uses_inner = bool(used & inner_vars)
        if uses_inner and used - inner_vars:
            raise NotDivisible(
                f"the predicate {c} mixes loops inside and outside the blockized subtree"
            )
        (inner_c if uses_inner else outer_c).append(c)
    return tuple(outer_c), tuple(inner_c)


def divide(
    iter_vars: Sequence[IterVar],
    bindings: Sequence[PrimExpr],
    predicate: Sequence[PrimExpr],
    outer: Sequence[For],
    inner: Sequence[For],
    preserve_unit_iters: bool,
) -> Division:
    """Divide ``bindings`` (of ``iter_vars``) between ``outer`` and ``inner`` loops.

    ``predicate`` is the block predicate as conjuncts. Variables that are not loop vars
    (shape vars, iter vars of enclosing blocks) count as outer.

    Raises
    ------
    NotDivisible
        Naming the binding (or conjunct) that cannot be divided.
    """
    ana = Analyzer({lp.loop_var: Range(lp.min, lp.extent) for lp in (*outer, *inner)})
    iters = tuple(
        _divide_one(v, iv, outer, inner, ana, preserve_unit_iters)
        for iv, v in zip(iter_vars, bindings)
    )
    outer_p, inner_p = _split_predicate(predicate, inner)
    return Division(iters, outer_p, inner_p)

