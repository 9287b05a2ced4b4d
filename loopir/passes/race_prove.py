"""The symbolic proof behind ThreadSync and the race checker: two threads never share an element.

A question is about two accesses ``w`` and ``x`` to one buffer, each under its loops and guards:
can an instance of ``w`` and an instance of ``x`` touch the same element from two different
threads (``who``: the thread coordinates, and for global memory across blocks the block
coordinates, that must then be equal)? Optionally the two instances must also have passed the
same number of barriers (``counts``: otherwise a barrier orders them).

The proof never enumerates elements, so its cost does not grow with the tensor sizes:

1. Each access's loop variables become variables of its own *side* (the two instances run
   different iterations), with the thread and block coordinates among them; coordinates that
   ``fixed`` names (the block, when the question is about two threads of one block) are one
   variable for both sides.
2. A variable used as ``v // d`` and ``v % d`` for constants ``d`` is written as digits
   (``v = q * 32 + m * 8 + r``); a grid coordinate fused over symbolic sizes (``f // Q``,
   ``f % Q`` for a size expression ``Q``) likewise; a sum used so (a persistent kernel's tile
   ``t * ctas + bx``) first becomes one variable, linked to the sum by an equation of its own
   (``race_problem.Problem._fuse_sums``), which stands for the sum in the guards too.
3. Guards become bounds (``tx * 4 + ax < 512`` gives ``tx <= 127``, ``tx == 0`` pins ``tx``; a
   fused sum ``s < 64 * 19`` bounds ``s // 19``, the rows a block's staged epilogue stores).
4. Equal elements give one affine equation per dimension (and one over the flattened
   dimensions, so that ``(e // 9, e % 9)`` becomes ``e``); equal barrier counts give another.
   Parts that are not affine become fresh variables over their bounds (a sound
   over-approximation that loses only precision).
5. The equations are solved by digit separation: in ``sum(a_i * v_i) = b``, when the terms with
   the smallest coefficients can take only one value modulo the gcd of the other coefficients,
   that value is forced and the equation splits in two; an equation ``v - v' = 0`` between the
   two sides' copies of one variable makes them equal (and they are then one variable). A
   contradiction (no solution) proves the question too: the accesses never meet.
6. A bitwise XOR (a swizzled layout, ``x ^ y``) is a non-affine part like any other (step 4), a
   fresh variable over its bounds; in addition, ``x ^ y == x' ^ y'`` with ``y == y'`` known
   gives ``x == x'``. Other bitwise operations stay opaque: the proof is then only weaker.

The pair is proven when every coordinate in ``who`` is forced equal on both sides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from loopir import arith
from loopir.ir.expr import (
    Add,
    FloorDiv,
    FloorMod,
    IntImm,
    Mul,
    PrimExpr,
    Var,
)
from loopir.ir.functor import collect_vars, post_order_visit
from loopir.passes import race_memo
from loopir.passes.race_problem import (
    SIZE_MAX,
    Contradiction,
    Eq,
    Extent,
    Problem,
    Unknown,
    const_int,
    has_bitwise,
)

__all__ = ["BLOCK_TAGS", "GRID_TAGS", "prove_exclusive"]

GRID_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
BLOCK_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
# the solver's work is bounded by the number of terms; this caps pathological inputs
_MAX_STEPS = 400


def _minus(a: Eq, b: Eq) -> Eq:
    """The equation ``a - b == 0`` of two affine forms."""
    coef = dict(a[0])
    for v, k in b[0].items():
        coef[v] = coef.get(v, 0) - k
    return {v: k for v, k in coef.items() if k}, a[1] - b[1]




class _Solver:
    """Equations ``sum(coef * var) + const == 0`` over bounded integers, solved for which
    variables the two sides must share (see the module doc, step 5)."""

    def __init__(self, p: Problem) -> None:
        self.p = p
        self.rep: dict[Var, Var] = {}  # side-1 variable -> the side-0 twin it equals
        self.value: dict[Var, int] = {}

    def find(self, v: Var) -> Var:
        while v in self.rep:
            v = self.rep[v]
        return v

    def normal(self, eq: Eq) -> Eq:
        coef: dict[Var, int] = {}
        const = eq[1]
        for v, a in eq[0].items():
            r = self.find(v)
            if r in self.value:
                const += a * self.value[r]
            else:
                coef[r] = coef.get(r, 0) + a
        coef = {v: a for v, a in coef.items() if a}
        g = math.gcd(*coef.values()) if coef else 0
        if not coef:
            if const:
                raise Contradiction
            return coef, 0
        if const % g:
            raise Contradiction
        sign = 1 if next(iter(sorted(coef.values(), key=abs, reverse=True))) > 0 else -1
        return {v: sign * a // g for v, a in coef.items()}, sign * const // g

    def _pin(self, v: Var, val: int) -> bool:
        p = self.p
        if not p.lo[v] <= val <= p.hi[v]:
            raise Contradiction
        if v in self.value:
            return False
        self.value[v] = val
        return True

    def _merge(self, a: Var, b: Var) -> bool:
        """``a == b`` for twins: ``b`` becomes ``a`` (bounds intersected)."""
        p = self.p
        p.lo[a], p.hi[a] = max(p.lo[a], p.lo[b]), min(p.hi[a], p.hi[b])
        if p.lo[a] > p.hi[a]:
            raise Contradiction
        self.rep[b] = a
        return True

    def _span(self, terms: dict[Var, int]) -> tuple[int, int]:
        p = self.p
        lo = sum(a * (p.lo[v] if a > 0 else p.hi[v]) for v, a in terms.items())
        hi = sum(a * (p.hi[v] if a > 0 else p.lo[v]) for v, a in terms.items())
        return lo, hi

    def step(self, eq: Eq) -> list[Eq] | None:
        """What ``eq`` forces: new equations (None: nothing yet)."""
        coef, const = self.normal(eq)
        if not coef:
            return []
        lo, hi = self._span(coef)
        if not lo <= -const <= hi:
            raise Contradiction
        if len(coef) == 1:
            ((v, a),) = coef.items()
            if -const % a:
                raise Contradiction
            self._pin(v, -const // a)
            return []
        if len(coef) == 2 and const == 0:
            (u, a), (v, b) = coef.items()
            if a == -b and abs(a) == 1:
                pair = (u, v) if self.p.twin.get(u) is v else (v, u) if self.p.twin.get(v) is u else None
                if pair is not None:
                    self._merge(*pair)
                    return []
                cancelled = self._xor_cancel(u, v)
                if cancelled is not None:
                    return cancelled
        mags = sorted({abs(a) for a in coef.values()})
        for m in mags[:-1]:
            low = {v: a for v, a in coef.items() if abs(a) <= m}
            high = {v: a for v, a in coef.items() if abs(a) > m}
            g = math.gcd(*high.values())
            lo, hi = self._span(low)
            r = (-const) % g
            first = lo + (r - lo) % g
            if first > hi:
                raise Contradiction
            if first + g > hi:  # the low terms' sum is forced to ``first``
                return [(low, -first), (high, const + first)]
        return None

    def _xor_cancel(self, u: Var, v: Var) -> list[Eq] | None:
        """``x ^ y == x' ^ y'`` with ``y == y'`` known: then ``x == x'`` (and the XORs are then
        equal, so that equation says nothing more). None while no operand pair is known equal."""
        du, dv = self.p.xors.get(u), self.p.xors.get(v)
        if du is None or dv is None:
            return None
        for x0, y0 in (du, du[::-1]):
            for x1, y1 in (dv, dv[::-1]):
                if self._known_equal(y0, y1):
                    return [_minus(x0, x1)]
        return None

    def _known_equal(self, a: Eq, b: Eq) -> bool:
        """Whether two affine forms are equal under what the solver knows (twins merged,
        values pinned); never raises."""
        coef: dict[Var, int] = {}
        const = a[1] - b[1]
        for form, sign in ((a, 1), (b, -1)):
            for v, k in form[0].items():
                r = self.find(v)
                if r in self.value:
                    const += sign * k * self.value[r]
                else:
                    coef[r] = coef.get(r, 0) + sign * k
        return const == 0 and not any(coef.values())

    def solve(self, eqs: list[Eq]) -> None:
        pending = list(eqs)
        seen: set[Any] = set()
        steps = 0
        progress = True
        while progress and steps < _MAX_STEPS:
            progress = False
            waiting = []
            for eq in pending:
                steps += 1
                coef, const = self.normal(eq)
                key = (frozenset(coef.items()), const)
                got = self.step((coef, const))
                if got is None:
                    waiting.append((coef, const))
                    continue
                progress = True
                for new in got:
                    k = (frozenset(new[0].items()), new[1])
                    if k not in seen:
                        seen.add(k)
                        waiting.append(new)
                seen.add(key)
            pending = waiting

    def equal(self, a: Var, b: Var) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra is rb:
            return True
        va = self.value.get(ra, self.p.lo[ra] if self.p.lo[ra] == self.p.hi[ra] else None)
        vb = self.value.get(rb, self.p.lo[rb] if self.p.lo[rb] == self.p.hi[rb] else None)
        return va is not None and va == vb


def _flatten(dims: list[tuple[PrimExpr, PrimExpr]], ana: arith.Analyzer) -> tuple[
    PrimExpr, PrimExpr
] | None:
    """Both sides' elements flattened with one row-major stride per dimension, wide enough
    for either side's values there (equal tuples then give equal flat indices)."""
    if len(dims) < 2:
        return None
    # the analyzer's integers are exact (no overflow), so the index dtype serves at any size
    dtype = "int64" if any(e.dtype == "int64" for pair in dims for e in pair) else "int32"
    flat: list[PrimExpr] = [IntImm(0, dtype), IntImm(0, dtype)]
    for pair in dims:
        bs = [ana.const_int_bound(e) for e in pair]
        lo, hi = min(b.min_value for b in bs), max(b.max_value for b in bs)
        if lo == arith.NEG_INF or hi == arith.POS_INF:
            return None
        width = IntImm(hi - lo + 1, dtype)
        flat = [Add(Mul(f, width), e if e.dtype == dtype else e.astype(dtype))
                for f, e in zip(flat, pair)]  # fmt: skip
    return ana.simplify(flat[0]), ana.simplify(flat[1])


def prove_exclusive(
    extent: Extent, w: Any, x: Any, who: Sequence[str], fixed: Sequence[str] = (),
    counts: bool = False, same_value: bool = False, same_iteration: Sequence[Var] = (),
) -> bool:  # fmt: skip
    """Whether an instance of ``w`` and one of ``x`` that touch one element (and, with
    ``counts``, have passed the same number of barriers) always have equal ``who``
    coordinates; the ``fixed`` coordinates are the same for both (see the module doc).
    ``same_iteration``: variables of loops enclosing both accesses whose value the two
    instances share (the caller knows they run in one iteration of those loops).

    ``extent(tag)`` is the launch extent of a tag (None: symbolic). Accesses are the race
    checker's (``indices``, ``loops``, ``conds``, ``count``, ``buffer``). False means "not
    proven"; ``same_value``: ``w`` is a store whose value is pure (it loads no buffer the
    kernel writes), so that with itself two instances that store equal values do not race.
    The cost depends on the number of loops and terms, never on their extents. Answers are
    remembered by the whole question ([`race_memo`][loopir.passes.race_memo]); equal barrier
    counts are not asked for when they are one constant on both sides (``c == c`` holds).
    """
    same_value = same_value and w is x
    if counts and race_memo.vacuous_counts(w, x):
        counts = False
    key, pins = race_memo.question_key(w, x, who, fixed, counts, same_value, same_iteration)
    return race_memo.ANSWERS.prove(
        key, pins, extent,
        lambda ext: _prove_exclusive(ext, w, x, who, fixed, counts, same_value, same_iteration),
    )


def _prove_exclusive(
    extent: Extent, w: Any, x: Any, who: Sequence[str], fixed: Sequence[str], counts: bool,
    same_value: bool, same_iteration: Sequence[Var] = (),
) -> bool:  # fmt: skip
    """The proof as the module doc says; when it fails, once more with the sums under ``//``
    and ``%`` made variables (step 2): a second form of the same equations, which proves a
    persistent kernel's tiles, tried second so that no pair the first proves is lost."""
    args = (extent, w, x, who, fixed, counts, same_value, same_iteration)
    return _prove_with(*args, fuse_sums=False) or (_sum_digits(w, x) and _prove_with(*args, fuse_sums=True))


def _sum_digits(w: Any, x: Any) -> bool:
    """Whether an index of ``w`` or ``x`` takes ``//`` or ``%`` of something but a variable
    (only then can the second form of the proof differ from the first)."""
    found = False

    def visit(n: object) -> None:
        nonlocal found
        found = found or (isinstance(n, (FloorDiv, FloorMod)) and not isinstance(n.a, Var))

    for e in (*w.indices, *x.indices):
        post_order_visit(e, visit)
    return found


def _prove_with(
    extent: Extent, w: Any, x: Any, who: Sequence[str], fixed: Sequence[str], counts: bool,
    same_value: bool, same_iteration: Sequence[Var] = (), fuse_sums: bool = False,
) -> bool:  # fmt: skip
    p = Problem(extent, who, fixed)
    p.fuse_sums = fuse_sums
    # with equal barrier counts, the loops _iteration_loops names run one iteration too: one
    # variable for both sides (so that a pipeline's versions of one iteration compare)
    p.same_iteration = frozenset(same_iteration) | (frozenset(_iteration_loops(w, x)) if counts else frozenset())
    if same_value:
        p.keep = [w.stmt.value]
    try:
        loop_vars: dict[Var, Var] = {}
        sides = [p.access(s, acc, counts, loop_vars) for s, acc in enumerate((w, x))]
        ndim = len(w.indices)
        if p.same_iteration and _versions_differ(sides[0][0][:ndim], sides[1][0][:ndim], p):
            return True
        flat_in = [e for exprs, conds in sides for e in (*exprs, *conds)]
        if any(has_bitwise(e) for e in flat_in):
            # shifts and masks by constants become // and % (digits), disjoint bits a sum
            pre = arith.Analyzer({v: (p.lo[v], p.hi[v] + 1) for v in p.lo})
            flat_in = [pre.simplify(e) for e in flat_in]
        flat_out = p.split_digits(flat_in)
        ana = arith.Analyzer({v: (p.lo[v], p.hi[v] + 1) for v in p.lo})
        for v in p.sizes:
            if v not in p.lo:
                ana.bind(v, (0, SIZE_MAX + 1))
        parts, at = [], 0
        for exprs, conds in sides:
            n, m = len(exprs), len(conds)
            parts.append((flat_out[at:at + n], flat_out[at + n:at + n + m]))
            at += n + m
        p.tighten([c for _, conds in parts for c in conds], ana)
        ana = arith.Analyzer({v: (p.lo[v], p.hi[v] + 1) for v in p.lo})
        for v in p.sizes:
            if v not in p.lo:
                ana.bind(v, (0, SIZE_MAX + 1))
        exprs0 = [ana.simplify(e) for e in parts[0][0]]
        exprs1 = [ana.simplify(e) for e in parts[1][0]]
        eqs = _equations(p, ana, exprs0, exprs1, ndim)
        solver = _Solver(p)
        solver.solve(eqs)
    except Contradiction:
        return True
    except Unknown:
        return False
    if _same(p, solver, [(p.coords[0].get(t), p.coords[1].get(t), t) for t in who]):
        return True
    if not same_value:
        return False
    # one store with itself: equal elements store equal values when the variables of the
    # (pure) value are forced equal too, and then two threads storing there do not race
    used = dict.fromkeys(collect_vars(w.stmt.value))
    return _same(p, solver, [(p.base[0].get(u), p.base[1].get(u), None) for u in used])


def _same(p: Problem, solver: _Solver, pairs: list[tuple[Var | None, Var | None, str | None]]
          ) -> bool:  # fmt: skip
    """Whether each pair of variables (or their digits) is forced equal; a missing one is fine
    only for a thread tag of extent 1."""
    for a, b, tag in pairs:
        if a is None or b is None:
            if tag is None or (p.extent(tag) or 2) > 1:
                return False
            continue
        da, db = p.digits.get(a, [a]), p.digits.get(b, [b])
        if len(da) != len(db) or not all(solver.equal(u, v) for u, v in zip(da, db)):
            if not solver.equal(a, b):
                return False
    return True


def _versions_differ(e0: Sequence[PrimExpr], e1: Sequence[PrimExpr], p: Problem | None = None) -> bool:
    """Whether some dimension is ``(a + c0) % m`` on one side and ``(a + c1) % m`` on the other
    (one constant ``m``, the same ``a``: the variables the sides share), ``c0 - c1`` not a
    multiple of ``m``: the two never index one element. A pipeline's buffer versions ``(k + S -
    1) % S`` and ``k % S`` in one iteration ``k`` are such a pair. One side may be ``a + c1``
    without the ``% m`` where the bounds of ``p``'s variables keep it in ``0 .. m - 1`` (the
    simplifier drops a ``% m`` that changes nothing: a loop of at most ``m`` iterations)."""
    ana: arith.Analyzer | None = None  # the bounds of p's variables, built when first needed
    for a, b in zip(e0, e1):
        if not isinstance(a, FloorMod):
            a, b = b, a
        if not isinstance(a, FloorMod):
            continue
        m = const_int(a.b)
        if isinstance(b, FloorMod):
            if const_int(b.b) != m:
                continue
            b = b.a
        else:
            if p is None or m is None:
                continue
            if ana is None:
                ana = arith.Analyzer({v: (p.lo[v], p.hi[v] + 1) for v in p.lo})
            if not (ana.can_prove(b >= 0) and ana.can_prove(b < m)):
                continue
        diff = const_int(arith.simplify(a.a - b))
        if m is not None and m > 0 and diff is not None and diff % m:
            return True
    return False


def _iteration_loops(w: Any, x: Any) -> list[Var]:
    """The variables of the enclosing loops both accesses share whose every iteration passes a
    barrier, from the outermost barrier loop in, as long as neither access's place in the
    iteration is unknown and they are not one in the head (before the body's first barrier)
    and one in the tail (after its last): with equal barrier counts, the two instances then
    run one iteration of each (a tail and the next iteration's head run between the same two
    barriers)."""
    out: list[Var] = []
    for (fw, always, pw), (fx, _, px) in zip(w.barrier_loops, x.barrier_loops):
        # one in an iteration's tail and one in the head: maybe consecutive iterations
        if fw is not fx or not always or "?" in (pw, px) or {pw, px} == {"head", "tail"}:
            break
        out.append(fw.loop_var)
    return out


def _fuse_div_mod(e0: list[PrimExpr], e1: list[PrimExpr], ndim: int) -> tuple[
    list[PrimExpr], list[PrimExpr], int
]:
    """Dimensions ``(e // Q, e % Q)`` on both sides become one, ``e``: the pairs are equal
    exactly when the ``e`` are (a fused loop over a symbolic size ``Q``, whose flattening by a
    constant stride would not simplify)."""
    def fusable(a: PrimExpr, b: PrimExpr) -> bool:
        return isinstance(a, FloorDiv) and isinstance(b, FloorMod) and \
            arith.structural_key(a.a) == arith.structural_key(b.a) and \
            arith.structural_key(a.b) == arith.structural_key(b.b) and const_int(a.b) is None

    out0, out1, d = list(e0), list(e1), 0
    while d + 1 < ndim:
        if fusable(out0[d], out0[d + 1]) and fusable(out1[d], out1[d + 1]) and \
                arith.structural_key(out0[d].b) == arith.structural_key(out1[d].b):  # type: ignore[attr-defined]
            out0[d:d + 2] = [out0[d].a]  # type: ignore[attr-defined]
            out1[d:d + 2] = [out1[d].a]  # type: ignore[attr-defined]
            ndim -= 1
        d += 1
    return out0, out1, ndim


def _equations(p: Problem, ana: arith.Analyzer, e0: list[PrimExpr], e1: list[PrimExpr],
               ndim: int) -> list[Eq]:  # fmt: skip
    """One equation per dimension, the count's, and the flattened element's."""
    memo: dict[Any, Var] = {}
    e0, e1, ndim = _fuse_div_mod(e0, e1, ndim)
    pairs = list(zip(e0, e1))
    dims = pairs[:ndim]
    cands = list(pairs)
    flat = _flatten(dims, ana)
    if flat is not None:
        cands.append(flat)
    coord_vars = set()
    for tag in p.who:
        for s in (0, 1):
            c = p.coords[s].get(tag)
            if c is not None:
                coord_vars.update([c, *p.digits.get(c, [])])
    with_coords = [d for d in dims if any(v in coord_vars for e in d for v in collect_vars(e))]
    if 1 < len(with_coords) < len(dims):
        flat = _flatten(with_coords, ana)
        if flat is not None:
            cands.append(flat)
    eqs = []
    for link in p.links:  # a sum made one variable: its definition (race_problem._fuse_sums)
        form = p.affine(ana.simplify(link), memo, ana)  # simplified as the elements are (a unit extent's 0)
        if form is not None:
            eqs.append(form)
    for a, b in cands:
        fa, fb = p.affine(a, memo, ana), p.affine(b, memo, ana)
        if fa is None or fb is None:
            continue
        coef = dict(fa[0])
        for v, k in fb[0].items():
            coef[v] = coef.get(v, 0) - k
        eqs.append(({v: k for v, k in coef.items() if k}, fa[1] - fb[1]))
    return eqs
