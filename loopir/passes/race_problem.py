"""The question [`race_prove`][loopir.passes.race_prove] answers, as a problem over bounded
integers: each access's loop variables on its own side, digits of ``v // d`` and ``v % d``,
guards as bounds, non-affine parts as fresh opaque variables (the module doc of ``race_prove``,
steps 1-4 and 6). The solver (step 5) stays in ``race_prove``.
"""

from __future__ import annotations

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

__all__ = ["LIMITS", "SIZE_MAX", "Contradiction", "Eq", "Extent", "Problem", "Unknown", "const_int", "has_bitwise"]

# CUDA's launch limits bound every coordinate, also one of a symbolic extent
LIMITS = {
    "blockIdx.x": 2**31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535,
    "threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64,
}  # fmt: skip
SIZE_MAX = 2**31 - 1

Extent = Callable[[str], "int | None"]
Eq = tuple[dict[Var, int], int]  # sum(coef * var) + const == 0


def const_int(e: PrimExpr) -> int | None:
    """The value of ``e`` when it simplifies to a constant, else None."""
    if type(e) is IntImm:  # what simplifying it gives, without building an analyzer
        return e.value
    s = arith.simplify(e)
    return s.value if isinstance(s, IntImm) else None


class Contradiction(Exception):
    """The two accesses can never touch one element (or never run): the question is proven."""


class Unknown(Exception):
    """The model cannot express an access (a loop of unbounded range used by its element)."""


class Problem:
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
        # a sum under ``//`` and ``%`` made one variable (``_fuse_sums``, when ``fuse_sums``):
        # ``e == 0`` for each
        self.fuse_sums = False
        self.links: list[PrimExpr] = []

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
                    raise Unknown(f"loop {f.loop_var.name} has a symbolic start")
                vmap[f.loop_var] = Add(c, IntImm(lo, "int32")) if lo else c
                self.base[side][f.loop_var] = c
                continue
            if f.loop_var not in used:
                continue  # a loop the element does not depend on: its range does not matter
            lo, ext = const_int(f.min), _max_extent(f.extent)
            if lo is None or ext is None:
                raise Unknown(f"loop {f.loop_var.name} has a symbolic range")
            if ext <= 0:
                raise Contradiction
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
        """Write variables used under ``//`` and ``%`` as digits (see the module doc); sums
        so used first become variables (``_fuse_sums``)."""
        exprs, fused = self._fuse_sums(exprs) if self.fuse_sums else (exprs, {})
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
        links = {u: Sub(smap.get(u, u), substitute(e, smap)) for u, e in fused.items()}
        self.links += links.values()
        for a, b in self.twin.items():
            if a in links and b in links:  # both sides' sums at once: their difference
                self.links.append(Sub(links[a], links[b]))
        return self._symbolic_digits(out, sym) if sym else out

    def _fuse_sums(self, exprs: list[PrimExpr]) -> tuple[list[PrimExpr], dict[Var, PrimExpr]]:
        """A non-negative affine sum of the problem's variables used as ``e // d`` or ``e % d``
        for a constant ``d > 1`` becomes one variable ``u`` (the link ``u == e`` kept in
        ``links``), whose digits the divisors then give: a persistent kernel's tile ``t * ctas +
        bx`` taken apart into the tile's row and column. Each side's sum is its own variable,
        twins when the sums are (the side-0 sum with its variables' twins is the side-1 sum),
        so that equal digits make the sums equal, and the link's difference then the terms
        (``bx`` below ``ctas``: digit separation). The cost is the number of such sums."""
        ana = arith.Analyzer({v: (self.lo[v], self.hi[v] + 1) for v in self.lo})
        found: dict[arith.StructuralKey, Var] = {}
        fused: dict[Var, PrimExpr] = {}
        problem = self

        class Fuse(Mutator):
            def _sum(self, n: FloorDiv | FloorMod) -> PrimExpr:
                out = self.generic_visit(n)
                assert isinstance(out, (FloorDiv, FloorMod))
                a, b = out.a, out.b
                if isinstance(a, Var) or not (isinstance(b, IntImm) and b.value > 1):
                    return out
                u = problem._sum_var(a, found, fused, ana)
                if u is None:
                    return out
                return FloorDiv(u, b) if isinstance(out, FloorDiv) else FloorMod(u, b)

            def visit_FloorDiv(self, n: FloorDiv) -> PrimExpr:
                return self._sum(n)

            def visit_FloorMod(self, n: FloorMod) -> PrimExpr:
                return self._sum(n)

        out = [Fuse().visit(e) for e in exprs]
        if found:
            # the same sums elsewhere (a guard ``e < c`` bounding the tile's digits): their
            # variable too, so that ``tighten`` narrows it (the link keeps ``u == e``)
            class Same(Mutator):
                def visit(self, node: Any) -> Any:
                    if isinstance(node, PrimExpr) and not isinstance(node, (Var, IntImm)):
                        u = found.get(arith.structural_key(node))
                        if u is not None:
                            return u
                    return super().visit(node)

            out = [Same().visit(e) for e in out]
        twin_of = {a: b for a, b in self.twin.items()}
        keys = {arith.structural_key(substitute(e, twin_of)): u for u, e in fused.items() if self.side.get(u) == 0}
        for u, e in fused.items():
            u0 = keys.get(arith.structural_key(e)) if self.side.get(u) == 1 else None
            if u0 is not None:
                self.twin[u0] = u
        return out, fused

    def _sum_var(self, e: PrimExpr, found: dict[arith.StructuralKey, Var], fused: dict[Var, PrimExpr],
                 ana: arith.Analyzer) -> Var | None:  # fmt: skip
        """The variable standing for the sum ``e`` (``_fuse_sums``), or None when ``e`` is not
        a non-negative affine sum of the problem's variables of one side."""
        key = arith.structural_key(e)
        if key in found:
            return found[key]
        form = self.affine(e, None, ana)
        if form is None or not form[0]:
            return None
        sides = {self.side[v] for v in form[0] if v in self.side}
        b = ana.const_int_bound(e)
        if len(sides) != 1 or b.min_value < 0 or b.max_value == arith.POS_INF:
            return None
        u = found[key] = self.new("sum", 0, int(b.max_value), sides.pop())
        fused[u] = e
        return u

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
        size_ana = arith.Analyzer({v: (0, SIZE_MAX + 1) for v in self.sizes})
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
                        raise Contradiction
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


def has_bitwise(e: PrimExpr) -> bool:
    found = False

    def f(n: object) -> None:
        nonlocal found
        found = found or (isinstance(n, Call) and n.op in BITWISE)

    post_order_visit(e, f)
    return found


def _max_extent(e: PrimExpr) -> int | None:
    """The largest value of a loop extent, its variables being sizes (in ``[0, 2**31)``)."""
    c = const_int(e)
    if c is not None:
        return c
    b = arith.Analyzer({v: (0, SIZE_MAX + 1) for v in collect_vars(e)}).const_int_bound(e)
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
