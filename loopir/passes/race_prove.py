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
   ``f % Q`` for a size expression ``Q``) likewise.
3. Guards become bounds (``tx * 4 + ax < 512`` gives ``tx <= 127``, ``tx == 0`` pins ``tx``).
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
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from loopir import arith
from loopir.arith.bitwise import BITWISE
from loopir.ir import dtype as dt
from loopir.ir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Call,
    Cast,
    CmpOp,
    FloorDiv,
    FloorMod,
    IntImm,
    Mul,
    Not,
    PrimExpr,
    Sub,
    Var,
)
from loopir.ir.functor import Mutator, Visitor, collect_vars, post_order_visit, substitute
from loopir.ir.stmt import ForKind
from loopir.passes import race_memo

__all__ = ["BLOCK_TAGS", "GRID_TAGS", "const_int", "prove_exclusive"]

GRID_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
BLOCK_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
# CUDA's launch limits bound every coordinate, also one of a symbolic extent
LIMITS = {
    "blockIdx.x": 2**31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535,
    "threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64,
}  # fmt: skip
_SIZE_MAX = 2**31 - 1
# the solver's work is bounded by the number of terms; this caps pathological inputs
_MAX_STEPS = 400

Extent = Callable[[str], "int | None"]
Eq = tuple[dict[Var, int], int]  # sum(coef * var) + const == 0


def const_int(e: PrimExpr) -> int | None:
    """The value of ``e`` when it simplifies to a constant, else None."""
    if type(e) is IntImm:  # what simplifying it gives, without building an analyzer
        return e.value
    s = arith.simplify(e)
    return s.value if isinstance(s, IntImm) else None


class _Contradiction(Exception):
    """The two accesses can never touch one element (or never run): the question is proven."""


class _Unknown(Exception):
    """The model cannot express an access (a loop of unbounded range used by its element)."""


class _Problem:
    """Variables with inclusive bounds, the two sides' copies of each (twins), equations."""

    def __init__(self, extent: Extent, who: Sequence[str], fixed: Sequence[str]) -> None:
        self.extent, self.who, self.fixed = extent, tuple(who), tuple(fixed)
        self.lo: dict[Var, int] = {}
        self.hi: dict[Var, int] = {}
        self.side: dict[Var, int] = {}
        self.twin: dict[Var, Var] = {}  # side-0 variable -> side-1 variable
        self.shared: dict[str, Var] = {}  # fixed tags: one variable for both sides
        self.coords: list[dict[str, Var]] = [{}, {}]
        self.digits: dict[Var, list[Var]] = {}
        self.sizes: set[Var] = set()
        self.grid_ext: dict[Var, PrimExpr] = {}  # coordinates of a symbolic grid extent
        self.keep: list[PrimExpr] = []  # expressions whose loops are modelled even if unused
        self.base: list[dict[Var, Var]] = [{}, {}]  # loop variable -> this side's variable
        # opaque variable of ``x ^ y`` -> the affine forms of ``x`` and ``y`` (step 6)
        self.xors: dict[Var, tuple[Eq, Eq]] = {}
        # loop variables both instances share (prove_exclusive's same_iteration)
        self.same_iteration: frozenset[Var] = frozenset()

    # -- variables ------------------------------------------------------------------------
    def new(self, name: str, lo: int, hi: int, side: int | None) -> Var:
        v = Var(name, "int32")
        self.lo[v], self.hi[v] = lo, hi
        if side is not None:
            self.side[v] = side
        return v

    def _tag_extent(self, tag: str, loop_ext: PrimExpr | None) -> int:
        ext = const_int(loop_ext) if loop_ext is not None else self.extent(tag)
        return LIMITS[tag] if ext is None else ext

    def coord(self, side: int, tag: str, loop_ext: PrimExpr | None) -> Var:
        """The coordinate variable of ``tag`` on ``side`` (one for both when fixed)."""
        ext = self._tag_extent(tag, loop_ext)
        if tag in self.fixed:
            v = self.shared.get(tag)
            if v is None:
                v = self.shared[tag] = self.new(f"c_{tag}", 0, ext - 1, None)
            self.hi[v] = max(self.hi[v], ext - 1)
        else:
            v = self.coords[side].get(tag)
            if v is None:
                v = self.coords[side][tag] = self.new(f"c{side}_{tag}", 0, ext - 1, side)
                if side == 1 and tag in self.coords[0]:
                    self.twin[self.coords[0][tag]] = v
            self.hi[v] = max(self.hi[v], ext - 1)
        if loop_ext is not None and const_int(loop_ext) is None:
            self.grid_ext[v] = loop_ext
        return v

    # -- one access -----------------------------------------------------------------------
    def access(self, side: int, acc: Any, count: bool, loop_vars: dict[Var, Var]) -> tuple[
        list[PrimExpr], list[PrimExpr]
    ]:
        """The access's element (and barrier count) and guards over this side's variables.

        ``loop_vars`` maps side 0's loop variables to their copies, so that side 1's copy of
        a loop both accesses are under is its twin.
        """
        exprs = list(acc.indices) + ([acc.count] if count else [])
        used = {v for e in (*exprs, *acc.conds, *self.keep) for v in collect_vars(e)}
        vmap: dict[Var, PrimExpr] = {}
        for f in acc.loops:
            tag = f.thread_tag if f.kind is ForKind.THREAD_BINDING else None
            if tag in LIMITS:
                c = self.coord(side, str(tag), f.extent)
                lo = const_int(f.min)
                if lo is None:
                    raise _Unknown(f"loop {f.loop_var.name} has a symbolic start")
                vmap[f.loop_var] = Add(c, IntImm(lo, "int32")) if lo else c
                self.base[side][f.loop_var] = c
                continue
            if f.loop_var not in used:
                continue  # a loop the element does not depend on: its range does not matter
            lo, ext = const_int(f.min), _max_extent(f.extent)
            if lo is None or ext is None:
                raise _Unknown(f"loop {f.loop_var.name} has a symbolic range")
            if ext <= 0:
                raise _Contradiction
            if side == 1 and f.loop_var in self.same_iteration and f.loop_var in loop_vars:
                v = loop_vars[f.loop_var]  # one iteration of this loop: one variable for both
                vmap[f.loop_var] = v
                self.base[side][f.loop_var] = v
                continue
            v = self.new(f"{f.loop_var.name}_{side}", lo, lo + ext - 1, side)
            if side == 0:
                loop_vars[f.loop_var] = v
            elif f.loop_var in loop_vars:
                self.twin[loop_vars[f.loop_var]] = v
            vmap[f.loop_var] = v
            self.base[side][f.loop_var] = v
        bound = {f.thread_tag for f in acc.loops if f.kind is ForKind.THREAD_BINDING}
        for tag in (*self.who, *self.fixed):
            if tag not in bound and ((self.extent(tag) or 2) > 1 or tag in self.fixed):
                self.coord(side, tag, None)  # run by every thread of the tag when not bound
        for b in (acc.buffer,):
            for e in b.shape:
                self.sizes.update(collect_vars(e))
        return [substitute(e, vmap) for e in exprs], [substitute(c, vmap) for c in acc.conds]

    # -- digits ---------------------------------------------------------------------------
    def split_digits(self, exprs: list[PrimExpr]) -> list[PrimExpr]:
        """Write variables used under ``//`` and ``%`` as digits (see the module doc)."""
        divs: dict[Var, set[int]] = {}
        sym: dict[Var, dict[arith.StructuralKey, PrimExpr]] = {}

        class Find(Visitor):
            def visit_FloorDiv(self, n: FloorDiv | FloorMod) -> None:
                self.generic_visit(n)
                if isinstance(n.a, Var):
                    if isinstance(n.b, IntImm) and n.b.value > 1:
                        divs.setdefault(n.a, set()).add(n.b.value)
                    elif not isinstance(n.b, IntImm):
                        sym.setdefault(n.a, {})[arith.structural_key(n.b)] = n.b

            visit_FloorMod = visit_FloorDiv

        for e in exprs:
            Find().visit(e)
        # twins share one chain of divisors, so their digits are twins too
        for a, b in self.twin.items():
            both = divs.get(a, set()) | divs.get(b, set())
            if both:
                divs[a], divs[b] = set(both), set(both)
        smap: dict[Var, PrimExpr] = {}
        for v, ds in divs.items():
            if v in sym or v not in self.lo or self.lo[v] != 0:
                continue
            chain: list[int] = []
            for d in sorted(ds, reverse=True):
                if d <= self.hi[v] and (not chain or chain[-1] % d == 0):
                    chain.append(d)
            if chain:
                smap[v] = self._digits(v, chain)
        for a, b in list(self.twin.items()):
            for da, db in zip(self.digits.get(a, ()), self.digits.get(b, ())):
                self.twin[da] = db
        out = [substitute(e, smap) if smap else e for e in exprs]
        return self._symbolic_digits(out, sym) if sym else out

    def _digits(self, v: Var, chain: list[int]) -> PrimExpr:
        side = self.side.get(v)
        radix = [-(-(self.hi[v] + 1) // chain[0])] + [
            hi // lo for hi, lo in zip(chain, chain[1:])
        ] + [chain[-1]]
        ds = [self.new(f"{v.name}_d{i}", 0, r - 1, side) for i, r in enumerate(radix)]
        self.digits[v] = ds
        e: PrimExpr = ds[-1]
        for d, weight in zip(ds[:-1], chain):
            e = Add(Mul(d, IntImm(weight, "int32")), e)
        return e

    def _symbolic_digits(self, exprs: list[PrimExpr],
                         sym: dict[Var, dict[arith.StructuralKey, PrimExpr]]) -> list[PrimExpr]:  # fmt: skip
        """A coordinate ``c`` used as ``c // Q`` and ``c % Q`` for one size expression ``Q``
        (a grid fused over symbolic sizes) becomes the digits ``q`` and ``r``. ``Q``'s
        variables must be buffer sizes, so that ``Q >= 0``; a grid of ``P * Q`` blocks bounds
        ``q`` by ``P``."""
        size_ana = arith.Analyzer({v: (0, _SIZE_MAX + 1) for v in self.sizes})
        split: dict[Var, tuple[arith.StructuralKey, Var, Var]] = {}
        for c, found in sym.items():
            if len(found) != 1 or c not in self.lo or c in self.digits:
                continue
            ((key, q_div),) = found.items()
            bound = size_ana.const_int_bound(q_div)
            if not set(collect_vars(q_div)) <= self.sizes or bound.min_value < 0:
                continue
            side = self.side.get(c)
            rows = _quotient(self.grid_ext.get(c), key)
            q = self.new(f"{c.name}_q", 0, self.hi[c] if rows is None else rows - 1, side)
            r = self.new(f"{c.name}_r", 0, min(self.hi[c], bound.max_value - 1), side)
            self.digits[c] = [q, r]
            split[c] = (key, q, r)
        for a, b in list(self.twin.items()):
            if a in split and b in split and split[a][0] == split[b][0]:
                self.twin[split[a][1]], self.twin[split[a][2]] = split[b][1], split[b][2]

        class Replace(Mutator):
            def _digit(self, n: FloorDiv | FloorMod, quotient: bool) -> PrimExpr:
                hit = split.get(n.a) if isinstance(n.a, Var) else None
                if hit is not None and arith.structural_key(n.b) == hit[0]:
                    return hit[1] if quotient else hit[2]
                out: PrimExpr = self.generic_visit(n)
                return out

            def visit_FloorDiv(self, n: FloorDiv) -> PrimExpr:
                return self._digit(n, True)

            def visit_FloorMod(self, n: FloorMod) -> PrimExpr:
                return self._digit(n, False)

        return [Replace().visit(e) for e in exprs] if split else exprs

    # -- guards ---------------------------------------------------------------------------
    def tighten(self, conds: Iterable[PrimExpr], ana: arith.Analyzer) -> None:
        """Narrow the variables' bounds by the guards (linear inequalities and equalities)."""
        leq: list[Eq] = []  # sum(coef * var) + const <= 0
        for c in conds:
            for e in _inequalities(ana.simplify(c)):
                got = self.affine(e, None, ana)
                if got is not None:
                    leq.append(got)
        for _ in range(3):
            changed = False
            for coef, const in leq:
                for v, a in coef.items():
                    rest = const + sum(
                        k * (self.lo[u] if k > 0 else self.hi[u])
                        for u, k in coef.items() if u is not v
                    )
                    # a * v <= -rest
                    if a > 0:
                        bound = (-rest) // a
                        if bound < self.hi[v]:
                            self.hi[v], changed = bound, True
                    else:
                        bound = -((-rest) // (-a))  # a * v <= -rest: v >= ceil(rest / -a)
                        if bound > self.lo[v]:
                            self.lo[v], changed = bound, True
                    if self.lo[v] > self.hi[v]:
                        raise _Contradiction
            if not changed:
                break

    # -- affine forms ---------------------------------------------------------------------
    def affine(self, e: PrimExpr, opaque: dict[Any, Var] | None,
               ana: arith.Analyzer) -> Eq | None:  # fmt: skip
        """``e`` as ``sum(coef * var) + const`` over the problem's variables; a non-affine part
        becomes a fresh variable over its bounds (``opaque`` memoizes them; None: give up)."""
        coef: dict[Var, int] = {}
        const = 0

        def walk(n: PrimExpr, k: int) -> bool:
            nonlocal const
            if isinstance(n, IntImm):
                const += k * n.value
                return True
            if isinstance(n, Var) and n in self.lo:
                coef[n] = coef.get(n, 0) + k
                return True
            if isinstance(n, Add):
                return walk(n.a, k) and walk(n.b, k)
            if isinstance(n, Cast) and n.dtype in ("int64", n.value.dtype):
                return walk(n.value, k)  # a widening index cast: exact
            if isinstance(n, Sub):
                return walk(n.a, k) and walk(n.b, -k)
            if isinstance(n, Mul):
                if isinstance(n.b, IntImm):
                    return walk(n.a, k * n.b.value)
                if isinstance(n.a, IntImm):
                    return walk(n.b, k * n.a.value)
            if opaque is None:
                return False
            v = self._opaque(n, opaque, ana)
            if v is None:
                return False
            coef[v] = coef.get(v, 0) + k
            return True

        if not walk(e, 1):
            return None
        return {v: a for v, a in coef.items() if a}, const

    def _opaque(self, n: PrimExpr, memo: dict[Any, Var], ana: arith.Analyzer) -> Var | None:
        vs = [v for v in collect_vars(n) if v in self.lo]
        sides = {self.side[v] for v in vs if v in self.side}
        key = (arith.structural_key(n), tuple(sides))
        hit = memo.get(key)
        if hit is not None:
            return hit
        b = ana.const_int_bound(n)
        if b.min_value == arith.NEG_INF or b.max_value == arith.POS_INF:
            return None
        side = next(iter(sides)) if len(sides) == 1 else None
        v = memo[key] = self.new("opaque", b.min_value, b.max_value, side)
        if isinstance(n, Call) and n.op == "bitwise_xor" and dt.is_int(n.dtype):
            fx, fy = (self.affine(a, memo, ana) for a in n.args)
            if fx is not None and fy is not None:
                self.xors[v] = (fx, fy)
        return v


def _has_bitwise(e: PrimExpr) -> bool:
    found = False

    def f(n: object) -> None:
        nonlocal found
        found = found or (isinstance(n, Call) and n.op in BITWISE)

    post_order_visit(e, f)
    return found


def _minus(a: Eq, b: Eq) -> Eq:
    """The equation ``a - b == 0`` of two affine forms."""
    coef = dict(a[0])
    for v, k in b[0].items():
        coef[v] = coef.get(v, 0) - k
    return {v: k for v, k in coef.items() if k}, a[1] - b[1]


def _max_extent(e: PrimExpr) -> int | None:
    """The largest value of a loop extent, its variables being sizes (in ``[0, 2**31)``)."""
    c = const_int(e)
    if c is not None:
        return c
    b = arith.Analyzer({v: (0, _SIZE_MAX + 1) for v in collect_vars(e)}).const_int_bound(e)
    return None if b.max_value == arith.POS_INF else b.max_value


def _quotient(ext: PrimExpr | None, divisor: arith.StructuralKey) -> int | None:
    """``P`` when ``ext`` is ``P * Q`` (or ``Q``) for the divisor ``Q`` and a constant ``P``."""
    if ext is None:
        return None
    if arith.structural_key(ext) == divisor:
        return 1
    if isinstance(ext, Mul):
        for a, b in ((ext.a, ext.b), (ext.b, ext.a)):
            if isinstance(b, IntImm) and b.value >= 1 and arith.structural_key(a) == divisor:
                return b.value
    return None


_NEGATED: dict[type, type[CmpOp]] = {LT: GE, LE: GT, GT: LE, GE: LT, NE: EQ}


def _inequalities(c: PrimExpr) -> list[PrimExpr]:
    """Expressions ``e`` with ``e <= 0`` implied by the guard ``c`` (conjuncts of integer
    comparisons; anything else implies nothing here)."""
    if isinstance(c, And):
        return _inequalities(c.a) + _inequalities(c.b)
    if isinstance(c, Not):
        neg = _NEGATED.get(type(c.a))
        return _inequalities(neg(c.a.a, c.a.b)) if neg and isinstance(c.a, CmpOp) else []
    if not isinstance(c, CmpOp) or not c.a.dtype.startswith("int"):
        return []
    a, b, one = c.a, c.b, IntImm(1, c.a.dtype)
    if isinstance(c, LT):
        return [Add(Sub(a, b), one)]
    if isinstance(c, LE):
        return [Sub(a, b)]
    if isinstance(c, GT):
        return [Add(Sub(b, a), one)]
    if isinstance(c, GE):
        return [Sub(b, a)]
    if isinstance(c, EQ):
        return [Sub(a, b), Sub(b, a)]
    return []


class _Solver:
    """Equations ``sum(coef * var) + const == 0`` over bounded integers, solved for which
    variables the two sides must share (see the module doc, step 5)."""

    def __init__(self, p: _Problem) -> None:
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
                raise _Contradiction
            return coef, 0
        if const % g:
            raise _Contradiction
        sign = 1 if next(iter(sorted(coef.values(), key=abs, reverse=True))) > 0 else -1
        return {v: sign * a // g for v, a in coef.items()}, sign * const // g

    def _pin(self, v: Var, val: int) -> bool:
        p = self.p
        if not p.lo[v] <= val <= p.hi[v]:
            raise _Contradiction
        if v in self.value:
            return False
        self.value[v] = val
        return True

    def _merge(self, a: Var, b: Var) -> bool:
        """``a == b`` for twins: ``b`` becomes ``a`` (bounds intersected)."""
        p = self.p
        p.lo[a], p.hi[a] = max(p.lo[a], p.lo[b]), min(p.hi[a], p.hi[b])
        if p.lo[a] > p.hi[a]:
            raise _Contradiction
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
            raise _Contradiction
        if len(coef) == 1:
            ((v, a),) = coef.items()
            if -const % a:
                raise _Contradiction
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
                raise _Contradiction
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
    p = _Problem(extent, who, fixed)
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
        if any(_has_bitwise(e) for e in flat_in):
            # shifts and masks by constants become // and % (digits), disjoint bits a sum
            pre = arith.Analyzer({v: (p.lo[v], p.hi[v] + 1) for v in p.lo})
            flat_in = [pre.simplify(e) for e in flat_in]
        flat_out = p.split_digits(flat_in)
        ana = arith.Analyzer({v: (p.lo[v], p.hi[v] + 1) for v in p.lo})
        for v in p.sizes:
            if v not in p.lo:
                ana.bind(v, (0, _SIZE_MAX + 1))
        parts, at = [], 0
        for exprs, conds in sides:
            n, m = len(exprs), len(conds)
            parts.append((flat_out[at:at + n], flat_out[at + n:at + n + m]))
            at += n + m
        p.tighten([c for _, conds in parts for c in conds], ana)
        ana = arith.Analyzer({v: (p.lo[v], p.hi[v] + 1) for v in p.lo})
        for v in p.sizes:
            if v not in p.lo:
                ana.bind(v, (0, _SIZE_MAX + 1))
        exprs0 = [ana.simplify(e) for e in parts[0][0]]
        exprs1 = [ana.simplify(e) for e in parts[1][0]]
        eqs = _equations(p, ana, exprs0, exprs1, ndim)
        solver = _Solver(p)
        solver.solve(eqs)
    except _Contradiction:
        return True
    except _Unknown:
        return False
    if _same(p, solver, [(p.coords[0].get(t), p.coords[1].get(t), t) for t in who]):
        return True
    if not same_value:
        return False
    # one store with itself: equal elements store equal values when the variables of the
    # (pure) value are forced equal too, and then two threads storing there do not race
    used = dict.fromkeys(collect_vars(w.stmt.value))
    return _same(p, solver, [(p.base[0].get(u), p.base[1].get(u), None) for u in used])


def _same(p: _Problem, solver: _Solver, pairs: list[tuple[Var | None, Var | None, str | None]]
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


def _versions_differ(e0: Sequence[PrimExpr], e1: Sequence[PrimExpr], p: _Problem | None = None) -> bool:
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


def _equations(p: _Problem, ana: arith.Analyzer, e0: list[PrimExpr], e1: list[PrimExpr],
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
    for a, b in cands:
        fa, fb = p.affine(a, memo, ana), p.affine(b, memo, ana)
        if fa is None or fb is None:
            continue
        coef = dict(fa[0])
        for v, k in fb[0].items():
            coef[v] = coef.get(v, 0) - k
        eqs.append(({v: k for v, k in coef.items() if k}, fa[1] - fb[1]))
    return eqs
