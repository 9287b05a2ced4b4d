"""The race checker's symbolic proof: the element an access touches determines its thread.

Used by :mod:`loopir.passes.race_check` for iteration domains too large to enumerate (and by
ThreadSync, through it, to skip barriers between accesses of one thread to its own elements).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loopir import arith
from loopir.ir.expr import EQ, Add, FloorDiv, FloorMod, IntImm, Mul, PrimExpr, Sub, Var
from loopir.ir.functor import Mutator, Visitor, collect_vars, substitute
from loopir.ir.stmt import ForKind

__all__ = ["BLOCK_TAGS", "GRID_TAGS", "const_int", "prove_linear"]

GRID_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
BLOCK_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
# CUDA's grid limits bound every launch: a symbolic grid extent is at most these
GRID_LIMITS = {"blockIdx.x": 2**31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}


def const_int(e: PrimExpr) -> int | None:
    """The value of ``e`` when it simplifies to a constant, else None."""
    s = arith.simplify(e)
    return s.value if isinstance(s, IntImm) else None


def _divisors(e: PrimExpr) -> set[int]:
    out: set[int] = set()

    class V(Visitor):
        def visit_FloorDiv(self, n: FloorDiv) -> None:
            self.generic_visit(n)
            if isinstance(n.b, IntImm) and n.b.value > 1:
                out.add(n.b.value)

        visit_FloorMod = visit_FloorDiv

    V().visit(e)
    return out


class _Opaque(Mutator):
    """A non-linear part free of thread coordinates (``(k + 1) % 2``, the version index of a
    multi-buffered tile) becomes a fresh variable over its bounds: sound (a superset of its
    values), and it leaves an index linear in the coordinates and the other variables."""

    def __init__(self, coords: set[Var], ana: Any, ranges: dict[Var, tuple[int, int]]) -> None:
        super().__init__()
        self.coords, self.ana, self.ranges = coords, ana, ranges

    def _opaque(self, e: PrimExpr) -> PrimExpr:
        if any(v in self.coords for v in collect_vars(e)):
            out: PrimExpr = self.generic_visit(e)
            return out
        b = self.ana.const_int_bound(e)
        if b.min_value == arith.NEG_INF or b.max_value == arith.POS_INF:
            return e
        v = Var("opaque", e.dtype)
        self.ranges[v] = (b.min_value, b.max_value - b.min_value + 1)
        self.ana.bind(v, (b.min_value, b.max_value + 1))
        return v

    def visit_FloorDiv(self, e: FloorDiv) -> PrimExpr:
        return self._opaque(e)

    def visit_FloorMod(self, e: Any) -> PrimExpr:
        return self._opaque(e)


def _split_digits(v: Var, ext: int, d: int, digits: dict[Var, PrimExpr],
                  ranges: dict[Var, tuple[int, int]]) -> None:  # fmt: skip
    """``v = q * d + r`` with ``0 <= r < d`` and ``0 <= q < ceil(ext / d)`` (a superset of
    ``v``'s values when ``d`` does not divide ``ext``, which is still sound)."""
    q, r = Var(f"{v.name}_q", v.dtype), Var(f"{v.name}_r", v.dtype)
    digits[v] = Add(Mul(q, IntImm(d, v.dtype)), r)
    ranges[q], ranges[r] = (0, -(-ext // d)), (0, d)


def _divided_vars(e: PrimExpr) -> set[Var]:
    """Variables under a ``//`` or ``%`` by a constant in ``e``."""
    out: set[Var] = set()

    class V(Visitor):
        def visit_FloorDiv(self, n: FloorDiv) -> None:
            self.generic_visit(n)
            if isinstance(n.b, IntImm):
                out.update(collect_vars(n.a))

        visit_FloorMod = visit_FloorDiv

    V().visit(e)
    return out


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


def _symbolic_digits(forms: list[list[PrimExpr]], coords: set[Var], ranges: dict[Var, tuple[int, int]],
                     digits: dict[Var, PrimExpr], sizes: set[Var],
                     grid_exts: dict[Var, PrimExpr]) -> list[list[PrimExpr]]:  # fmt: skip
    """Split each coordinate ``c`` used as ``c // Q`` and ``c % Q`` for one non-constant ``Q``
    (a grid fused over symbolic sizes: ``(N + 127) // 128`` blocks a row) into the digits
    ``q = c // Q`` and ``r = c % Q``, which determine ``c = q * Q + r``; ``forms`` with the
    digits in their place.

    ``Q``'s variables must be buffer sizes (never negative, int32), so that ``Q >= 0``,
    ``0 <= q <= c`` and ``0 <= r < min(c + 1, max Q)``; ``Q == 0`` would divide by zero. A
    grid of ``P * Q`` blocks (``grid_exts``) bounds ``q`` by a constant ``P``.
    """
    found: dict[Var, dict[arith.StructuralKey, PrimExpr]] = {}

    class Find(Visitor):
        def visit_FloorDiv(self, n: FloorDiv | FloorMod) -> None:
            self.generic_visit(n)
            if isinstance(n.a, Var) and n.a in coords and not isinstance(n.b, IntImm):
                found.setdefault(n.a, {})[arith.structural_key(n.b)] = n.b

        visit_FloorMod = visit_FloorDiv

    for f in forms:
        for i in f:
            Find().visit(i)
    if not found:
        return forms  # the common case (constant divisors only): no analyzer to build
    size_ana = arith.Analyzer({v: (0, 2**31) for v in sizes})
    split: dict[Var, tuple[arith.StructuralKey, Var, Var]] = {}
    for c, divisors in found.items():
        if len(divisors) != 1:
            continue
        ((key, q_div),) = divisors.items()
        bound = size_ana.const_int_bound(q_div)
        if not set(collect_vars(q_div)) <= sizes or bound.min_value < 0:
            continue
        q, r = Var(f"{c.name}_q", c.dtype), Var(f"{c.name}_r", c.dtype)
        ranges[q] = (0, ranges[c][1])
        ranges[r] = (0, min(ranges[c][1], bound.max_value))
        rows = _quotient(grid_exts.get(c), key)
        if rows is not None:
            ranges[q] = (0, min(rows, ranges[c][1]))
        digits[c] = Add(Mul(q, q_div), r)
        split[c] = (key, q, r)

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

    return [[Replace().visit(i) for i in f] for f in forms] if split else forms


def _mixed_radix(terms: list[tuple[int, int]]) -> int | None:
    """For ``sum(c_i * v_i)`` with ``0 <= v_i < e_i`` (``terms`` of ``(|c_i|, e_i)``): the
    least difference between two distinct points when the coefficients form a mixed radix
    (0 for no term), else None."""
    sep, span = 0, 0
    for c, ext in sorted(terms):
        if c <= span:
            return None
        sep = c - span if not sep else min(sep, c - span)
        span += c * (ext - 1)
    return sep


def _pinned(acc: Any) -> dict[Var, int]:
    """Thread loop variables the access's guards fix to a constant (``tx == 0``)."""
    thread_vars = {f.loop_var for f in acc.loops if f.kind is ForKind.THREAD_BINDING}
    out: dict[Var, int] = {}
    for c in acc.conds:
        if isinstance(c, EQ):
            for v, k in ((c.a, c.b), (c.b, c.a)):
                if isinstance(v, Var) and v in thread_vars and isinstance(k, IntImm):
                    out[v] = k.value
    return out


def prove_linear(extent: Callable[[str], int | None], w: Any, x: Any) -> bool:
    """Whether the elements of ``w`` and ``x`` provably determine the thread (and, for global
    memory, the block): then two different threads never touch one element.

    Thread coordinates become canonical variables; a coordinate used under ``//`` or ``%`` by
    a constant that divides its extent, or by one symbolic size expression (a grid fused over
    symbolic sizes), is split into two digits; loops the indices do not use are left out. The
    flattened index must be linear in the coordinates with the same coefficients for both
    accesses, the coefficients must form a mixed radix (so distinct coordinates differ by at
    least ``sep``), and the rest of the two indices must differ by less than ``sep``.
    """
    shared = w.buffer.scope == "shared"
    tags = BLOCK_TAGS if shared else (*GRID_TAGS, *BLOCK_TAGS)
    coords: dict[str, Var] = {t: Var(f"c_{t}", "int32") for t in (*GRID_TAGS, *BLOCK_TAGS)}
    ranges: dict[Var, tuple[int, int]] = {}
    forms = []
    pins: list[dict[str, int]] = []
    # grid coordinates of a symbolic extent (bounded by CUDA's limit), with that extent
    grid_exts: dict[Var, PrimExpr] = {}
    for n, acc in enumerate((w, x)):
        vmap: dict[Var, PrimExpr] = {}
        pinned = _pinned(acc)
        pins.append({})
        used = {v for i in acc.indices for v in collect_vars(i)}
        for f in acc.loops:
            if f.loop_var not in used and f.thread_tag not in coords:
                continue  # a loop the element does not depend on: its range does not matter
            lo, ext = const_int(f.min), const_int(f.extent)
            if ext is None and f.kind is ForKind.THREAD_BINDING and f.thread_tag in GRID_LIMITS:
                ext = GRID_LIMITS[str(f.thread_tag)]
                grid_exts[coords[str(f.thread_tag)]] = f.extent
            if lo is None or ext is None:
                return False
            if f.kind is ForKind.THREAD_BINDING and f.thread_tag in coords and f.loop_var in pinned:
                # run by one thread along this tag (``if tx == 0``): not a coordinate
                vmap[f.loop_var] = IntImm(pinned[f.loop_var], f.loop_var.dtype)
                pins[n][str(f.thread_tag)] = pinned[f.loop_var]
                continue
            if f.kind is ForKind.THREAD_BINDING and f.thread_tag in coords:
                c = coords[f.thread_tag]
                vmap[f.loop_var] = Add(c, IntImm(lo, "int32")) if lo else c
                old = ranges.get(c, (0, 0))[1]
                ranges[c] = (0, max(old, ext))
            else:
                v = Var(f.loop_var.name, f.loop_var.dtype) if n else f.loop_var
                vmap[f.loop_var] = v
                ranges[v] = (lo, ext)
        for t in tags:
            if (extent(t) or 2) > 1 and not any(f.thread_tag == t for f in acc.loops):
                return False  # run by every thread of the tag: the element cannot tell them apart
        forms.append([substitute(i, vmap) for i in acc.indices])
    if pins[0] != pins[1]:
        return False  # pinned to different threads along a tag, or in one access only
    # digits for coordinates used under // and %
    digits: dict[Var, PrimExpr] = {}
    sizes = {v for b in (w.buffer, x.buffer) for e in b.shape for v in collect_vars(e)}
    forms = _symbolic_digits(forms, {c for c in coords.values() if c in ranges}, ranges, digits,
                             sizes, grid_exts)
    divs = set().union(*(_divisors(i) for f in forms for i in f))
    for c in coords.values():
        if c in digits:
            continue
        ext = ranges.get(c, (0, 1))[1]
        # c = q * d + r covers [0, ceil(ext / d) * d): exact when d divides ext, a superset
        # otherwise, which is still sound (and needed for a symbolic grid's c // d, c % d)
        d = max((d for d in divs if (ext % d == 0 or c in grid_exts) and d < ext), default=None)
        if d is not None:
            _split_digits(c, ext, d, digits, ranges)
    # the same digits for the other loop variables (an unrolled virtual-thread loop v used as
    # v // 2 and v % 2): the flattened index is then linear in them too
    coord_vars = set(coords.values())
    divided = set().union(*(_divided_vars(i) for f in forms for i in f))
    for v, (lo, ext) in list(ranges.items()):
        if v in coord_vars or lo != 0 or v not in divided:
            continue
        d = max((d for d in divs if ext % d == 0 and d < ext), default=None)
        if d is not None:
            _split_digits(v, ext, d, digits, ranges)
            del ranges[v]
    ana = arith.Analyzer({v: (lo, lo + ext) for v, (lo, ext) in ranges.items()})
    flat = []
    for f in forms:
        flat.append([ana.simplify(substitute(i, digits)) if digits else i for i in f])
    cvars = [v for c in coords.values() for v in (
        [digits[c].a.a, digits[c].b] if c in digits else [c]  # type: ignore[attr-defined]
    ) if v in ranges]
    thread_free = _Opaque(set(cvars), ana, ranges)
    flat = [[thread_free.visit(i) for i in f] for f in flat]
    widths = []
    for d in range(len(w.indices)):
        b = [ana.const_int_bound(f[d]) for f in flat]
        lo, hi = min(x.min_value for x in b), max(x.max_value for x in b)
        if lo == arith.NEG_INF or hi == arith.POS_INF:
            return False
        widths.append(hi - lo + 1)
    others = [[v for v in ranges if v not in coords.values() and v not in cvars
               and any(v is u for i in f for u in collect_vars(i))] for f in flat]
    lin = []
    for f, oth in zip(flat, others):
        e: PrimExpr = IntImm(0, "int64" if any(i.dtype == "int64" for i in f) else "int32")
        for i, wd in zip(f, widths):
            e = Add(Mul(e, IntImm(wd, e.dtype)), i if i.dtype == e.dtype else i.astype(e.dtype))
        got = ana.detect_linear(e, cvars)
        if got is None:
            return False
        coef_or_none = [const_int(c) for c in got[:-1]]
        coef = [c for c in coef_or_none if c is not None]
        if len(coef) != len(coef_or_none):
            return False
        full = ana.detect_linear(e, [*cvars, *oth])
        shape: tuple[list[tuple[int, int, int]], int] | None = None
        full_consts = [const_int(c) for c in full] if full is not None else []
        full_coef = [c for c in full_consts if c is not None]
        if full is not None and len(full_coef) == len(full_consts):
            shape = (sorted((abs(k), *ranges[v]) for k, v in zip(full_coef[len(cvars):-1], oth)
                            if k and ranges[v][1] > 1), full_coef[-1])
        lin.append((coef, got[-1], shape))
    (cw, bw, sw), (cx, bx, sx) = lin
    if cw != cx:
        return False
    terms: list[tuple[int, int]] = []
    for v, k in zip(cvars, cw):
        ext = ranges[v][1]
        is_thread = any(v is coords[t] or (coords[t] in digits and v in (
            digits[coords[t]].a.a, digits[coords[t]].b)) for t in tags)  # type: ignore[attr-defined]
        if not is_thread:
            continue  # a block coordinate of a shared access: equal for both, cancels
        if ext > 1:
            if not k:
                return False
            terms.append((abs(k), ext))
    if sw is not None and sw == sx and _mixed_radix(terms + [(k, n) for k, _, n in sw[0]]):
        # one injective map for both accesses: equal elements mean equal coordinates
        return True
    sep = _mixed_radix(terms)
    if sep is None:
        return False
    if sep == 0:
        return True  # one thread (per block) in all
    diff = ana.const_int_bound(ana.simplify(Sub(bx, bw)))
    return -sep < diff.min_value and diff.max_value < sep
