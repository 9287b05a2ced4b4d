"""The simplifier: canonical sums, bound-driven folding, comparisons and boolean logic.

[`Simplifier`][loopir.arith.simplify.Simplifier] holds the variable ranges and memo tables of one
analyzer. Integer scalar expressions go through
[`Simplifier.canon`][loopir.arith.simplify.Simplifier.canon] (a [`Sum`][loopir.arith.canonical.Sum])
and come back through [`Simplifier.to_expr`][loopir.arith.simplify.Simplifier.to_expr];
floordiv/floormod rules live in [`loopir.arith.divmod`][loopir.arith.divmod]. Every rewrite is an
identity of integer arithmetic with floor semantics (valid for negative values), or is justified by
the variable ranges.

Floating-point arithmetic is never rewritten (``x * 1``, ``x + 0`` and friends are not safe
with -0.0 and NaN); only its integer sub-expressions (indices) are simplified, and casts of
integer constants to float are folded when exact.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import attrs

from loopir.arith import divmod as dm
from loopir.arith.bitwise import is_bitwise, shift_in_range
from loopir.arith.bound import (
    BoundEvaluator,
    ConstIntBound,
    bound_add,
    bound_const,
    bound_scale,
    decide_compare,
    dtype_bound,
)
from loopir.arith.canonical import ExprKeys, Key, Sum
from loopir.ir import dtype as dt
from loopir.ir.buffer import Range
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
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    Not,
    Or,
    PrimExpr,
    Select,
    Sub,
    Var,
)

_MEMO_LIMIT = 200_000


@functools.cache
def is_index(dtype: str) -> bool:
    """Scalar integer dtype (the domain of the canonical simplifier)."""
    return dt.is_int(dtype) and dt.lanes(dtype) == 1


@functools.cache
def _is_scalar_bool(dtype: str) -> bool:
    return dt.is_bool(dtype) and dt.lanes(dtype) == 1


def _power_of_two_dividing(s: Sum) -> int:
    """The largest power of two dividing every value of ``s`` (its coefficients and constant);
    0 for the sum 0, which every power divides."""
    g = math.gcd(s.const, *(c for _, c in s.terms.values()))
    return g & -g


def true_() -> IntImm:
    return IntImm(1, "bool")


def false_() -> IntImm:
    return IntImm(0, "bool")


# significand bits and largest exponent of each float type
_FLOAT_FORMAT = {"float16": (11, 15), "bfloat16": (8, 127), "float32": (24, 127), "float64": (53, 1023)}


def _float_exact(value: int, dtype: str) -> float | None:
    """``float(value)`` if ``dtype`` represents the integer ``value`` exactly, else None."""
    mant, max_exp = _FLOAT_FORMAT[dt.element(dtype)]
    v = abs(value)
    if v == 0:
        return 0.0
    if v.bit_length() - 1 > max_exp:
        return None
    odd = v >> ((v & -v).bit_length() - 1)  # strip trailing zero bits
    return float(value) if odd.bit_length() <= mant else None


class Simplifier:
    """Rewrite engine of one [`Analyzer`][loopir.arith.analyzer.Analyzer] (ranges fixed for its
    lifetime).

    Parameters
    ----------
    ranges
        Variable ranges; the simplifier reads them but never changes them.
    """

    def __init__(self, ranges: Mapping[Var, Range]) -> None:
        self.ranges = ranges
        self.keys = ExprKeys()
        self.bounds = BoundEvaluator(ranges)
        self._canon: dict[PrimExpr, Sum] = {}
        self._simp: dict[PrimExpr, PrimExpr] = {}
        self._order: dict[Key, int] = {}
        self._atom_bounds: dict[Key, ConstIntBound] = {}
        # canonical floordiv/floormod of a sum by a constant, keyed by (op, sum key, c)
        self.divmod_memo: dict[tuple[str, Key, int], Sum] = {}

    def has_seen(self, v: Var) -> bool:
        """Whether any memoized result may depend on the range of ``v``."""
        return self.keys.has_seen(v) or id(v) in self.bounds.seen_vars

    # ----------------------------------------------------------------------------------------
    # memo management
    # ----------------------------------------------------------------------------------------
    def _trim(self) -> None:
        if len(self._canon) + len(self._simp) > _MEMO_LIMIT:
            self._canon.clear()
            self._simp.clear()
            self._atom_bounds.clear()
            self.divmod_memo.clear()
            self.bounds.clear()

    # ----------------------------------------------------------------------------------------
    # bounds
    # ----------------------------------------------------------------------------------------
    def atom_bound(self, key: Key, atom: PrimExpr) -> ConstIntBound:
        b = self._atom_bounds.get(key)
        if b is None:
            b = self.bounds(atom)
            self._atom_bounds[key] = b
        return b

    def sum_bound(self, s: Sum) -> ConstIntBound:
        """Sound bound of a sum (terms bounded independently)."""
        acc = bound_const(s.const)
        for k, (a, c) in s.terms.items():
            acc = bound_add(acc, bound_scale(self.atom_bound(k, a), c))
        return acc

    def expr_bound(self, e: PrimExpr) -> ConstIntBound:
        """Bound of ``e``: the tighter of its tree bound and its canonical form's bound."""
        b = self.bounds(e)
        if _is_scalar_bool(e.dtype) and not b.is_const:
            sb = self.simplify(e)
            if type(sb) is IntImm:
                return bound_const(sb.value)
        if is_index(e.dtype) and not b.is_const:
            cb = self.sum_bound(self.canon(e))
            lo, hi = max(b.min_value, cb.min_value), min(b.max_value, cb.max_value)
            if lo <= hi:
                b = ConstIntBound(lo, hi)
        return b

    # ----------------------------------------------------------------------------------------
    # atoms and rendering
    # ----------------------------------------------------------------------------------------
    def make_atom(self, expr: PrimExpr, coeff: int = 1) -> Sum:
        """A sum holding one atom (folded to a constant when the ranges pin its value)."""
        if type(expr) is IntImm:
            return Sum.constant(expr.value * coeff, expr.dtype)
        k = self.keys.key(expr)
        if k not in self._order:
            self._order[k] = len(self._order)
        b = self.atom_bound(k, expr)
        if b.is_const:
            return Sum.constant(b.min_value * coeff, expr.dtype)
        return Sum.atom(k, expr, coeff)

    def to_expr(self, s: Sum) -> PrimExpr:
        """Render a sum deterministically: positive terms by decreasing coefficient, then
        negative ones, then the constant; ties by name, then by first appearance."""
        d = s.dtype
        if not s.terms:
            return IntImm(s.const, d)
        if len(s.terms) == 1 and s.const == 0:
            (a, c), = s.terms.values()
            if c == 1:
                return a
        names = self.keys.name
        order = self._order
        items = sorted(
            s.terms.items(),
            key=lambda kv: (kv[1][1] < 0, -abs(kv[1][1]), names(kv[1][0]), order.get(kv[0], 0)),
        )
        res: PrimExpr | None = None
        const = s.const
        for _k, (a, c) in items:
            t = a if abs(c) == 1 else Mul(a, IntImm(abs(c), d))
            if res is None:
                if c > 0:
                    res = t
                elif const > 0:
                    res = Sub(IntImm(const, d), t)
                    const = 0
                else:
                    res = Sub(IntImm(0, d), t)
            else:
                res = Add(res, t) if c > 0 else Sub(res, t)
        assert res is not None
        if const > 0:
            res = Add(res, IntImm(const, d))
        elif const < 0:
            res = Sub(res, IntImm(-const, d))
        self._canon[res] = s
        return res

    # ----------------------------------------------------------------------------------------
    # entry point
    # ----------------------------------------------------------------------------------------
    def simplify(self, e: PrimExpr) -> PrimExpr:
        """Simplified equivalent of ``e`` (``e`` itself when nothing changes structurally)."""
        hit = self._simp.get(e)
        if hit is not None:
            return hit
        d = e.dtype
        if is_index(d):
            r = self.to_expr(self.canon(e))
        elif _is_scalar_bool(d):
            r = self._simplify_bool(e)
        else:
            r = self._simplify_other(e)
        if r is not e and self.keys.key(r) == self.keys.key(e):
            r = e
        self._trim()
        self._simp[e] = r
        # canonical forms are fixpoints: remember that simplifying the result changes nothing
        self._simp.setdefault(r, r)
        return r

    def simplify_children(self, e: PrimExpr) -> PrimExpr:
        """``e`` with every expression-valued field simplified."""
        changes: dict[str, Any] = {}
        node: Any = e  # every PrimExpr class is an attrs class
        for f in attrs.fields(type(node)):
            if not f.init:
                continue
            v = getattr(e, f.name)
            if isinstance(v, PrimExpr):
                nv = self.simplify(v)
                if nv is not v:
                    changes[f.name] = nv
            elif isinstance(v, tuple) and v and all(isinstance(x, PrimExpr) for x in v):
                nt = tuple(self.simplify(x) for x in v)
                if any(a is not b for a, b in zip(nt, v)):
                    changes[f.name] = nt
        out: PrimExpr = attrs.evolve(node, **changes) if changes else e
        return out

    def _simplify_other(self, e: PrimExpr) -> PrimExpr:
        if isinstance(e, Cast) and dt.lanes(e.dtype) == 1:
            v = self.simplify(e.value)
            if e.value.dtype == e.dtype:
                return v
            if dt.is_float(e.dtype) and isinstance(v, IntImm):
                f = _float_exact(v.value, e.dtype)
                if f is not None:
                    return FloatImm(f, e.dtype)
            return e if v is e.value else Cast(e.dtype, v)
        return self.simplify_children(e)

    # ----------------------------------------------------------------------------------------
    # canonical forms of integer expressions
    # ----------------------------------------------------------------------------------------
    def canon(self, e: PrimExpr) -> Sum:
        """Canonical sum of the scalar integer expression ``e``."""
        hit = self._canon.get(e)
        if hit is not None:
            return hit
        s = self._canon_impl(e)
        self._canon[e] = s
        return s

    def _canon_impl(self, e: PrimExpr) -> Sum:
        # isinstance so that the checker narrows: every class tested here is a leaf
        if isinstance(e, IntImm):
            return Sum.constant(e.value, e.dtype)
        if isinstance(e, Var):
            return self.make_atom(e)
        if isinstance(e, Add):
            return self.merge_divmod(self.canon(e.a).add(self.canon(e.b)))
        if isinstance(e, Sub):
            return self.merge_divmod(self.canon(e.a).add(self.canon(e.b), -1))
        if isinstance(e, Mul):
            return self.mul(self.canon(e.a), self.canon(e.b))
        if isinstance(e, FloorDiv):
            return dm.floordiv(self, self.canon(e.a), self.canon(e.b))
        if isinstance(e, FloorMod):
            return dm.floormod(self, self.canon(e.a), self.canon(e.b))
        if isinstance(e, (Min, Max)):
            return self.minmax(type(e), self.canon(e.a), self.canon(e.b))
        if isinstance(e, Select):
            return self._select(e)
        if isinstance(e, Cast):
            return self._cast(e)
        if isinstance(e, Call) and is_bitwise(e):
            return self._bitwise(e)
        return self.make_atom(self.simplify_children(e))

    def merge_divmod(self, s: Sum) -> Sum:
        """Fuse/split round trips: ``a*(u % c) + a*c*(u // c) -> a*u`` and its inverse
        ``a*u - a*c*(u // c) -> a*(u % c)``; repeated until nothing matches."""
        changed = True
        rounds = 0
        while changed and rounds < 16:  # each round removes terms; the cap is a safety net
            changed = False
            rounds += 1
            for k, (atom, a) in list(s.terms.items()):
                if k not in s.terms:
                    continue
                if type(atom) is FloorMod and type(atom.b) is IntImm and atom.b.value > 0:
                    c = atom.b.value
                    u = self.canon(atom.a)
                    q = dm.floordiv_const(self, u, c)
                    if q.terms and s.contains(q, a * c):
                        s = s.add(q, -a * c).add(Sum.atom(k, atom, a), -1).add(u, a)
                        changed = True
                elif type(atom) is FloorDiv and type(atom.b) is IntImm and atom.b.value > 0:
                    c = atom.b.value
                    if a % c:
                        continue
                    m = -a // c
                    u = self.canon(atom.a)
                    if u.terms and s.contains(u, m):
                        r = dm.floormod_const(self, u, c)
                        s = s.add(u, -m).add(Sum.atom(k, atom, a), -1).add(r, m)
                        changed = True
        return s

    def mul(self, sa: Sum, sb: Sum) -> Sum:
        """Canonical ``a * b``: scaling when one side is constant, else a product atom."""
        if sb.is_const:
            return sa.scale(sb.const)
        if sa.is_const:
            return sb.scale(sa.const)
        ea, eb = self.to_expr(sa), self.to_expr(sb)
        # commutative: order the operands so that a*b and b*a are one atom
        ka, kb = self.keys.key(ea), self.keys.key(eb)
        if (self.keys.name(eb), self._order.get(kb, 0)) < (self.keys.name(ea), self._order.get(ka, 0)):
            ea, eb = eb, ea
        return self.make_atom(Mul(ea, eb))

    def minmax(self, t: type, sa: Sum, sb: Sum) -> Sum:
        """Canonical ``Min``/``Max`` (``t``) of two sums; decided by the ranges when possible."""
        if self.decide(LE, sa, sb):
            return sa if t is Min else sb
        if self.decide(GE, sa, sb):
            return sb if t is Min else sa
        # min(min(x, c1), c2) -> min(x, min(c1, c2)) (and the same for max)
        if sa.is_const and not sb.is_const:
            sa, sb = sb, sa
        inner = sa.single_atom()
        if sb.is_const and isinstance(inner, (Min, Max)) and type(inner) is t and isinstance(inner.b, IntImm):
            pick = min if t is Min else max
            c = pick(inner.b.value, sb.const)
            return self.minmax(t, self.canon(inner.a), Sum.constant(c, sb.dtype))
        return self.make_atom(t(self.to_expr(sa), self.to_expr(sb)))

    def _select(self, e: Select) -> Sum:
        cond = self.simplify(e.condition)
        if type(cond) is IntImm:
            return self.canon(e.true_value if cond.value else e.false_value)
        st, sf = self.canon(e.true_value), self.canon(e.false_value)
        if st.key() == sf.key():
            return st
        return self.make_atom(Select(cond, self.to_expr(st), self.to_expr(sf)))

    def _bitwise(self, e: Call) -> Sum:
        """Shifts by constants become arithmetic (``a << c`` is ``a * 2**c``, ``a >> c`` is
        ``a // 2**c``), a mask ``a & (2**k - 1)`` is ``a % 2**k`` (two's complement: also for
        negative ``a``), ``^``/``|`` with 0 and ``&`` with -1 vanish, so that the analyses see
        them; other calls are atoms, folded when their bound is one value (constants)."""
        args = tuple(self.simplify(a) for a in e.args)
        consts = [a.value if type(a) is IntImm else None for a in args]
        op, d = e.op, e.dtype
        if op in ("shift_left", "shift_right") and consts[1] is not None and \
                shift_in_range(consts[1], d):  # fmt: skip
            sa = self.canon(args[0])
            if op == "shift_left":
                return sa.scale(1 << consts[1])
            return dm.floordiv(self, sa, Sum.constant(1 << consts[1], d))
        if op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            for k in (0, 1):
                c, other = consts[k], args[1 - k]
                if c is None:
                    continue
                if (c == 0 and op != "bitwise_and") or (c == -1 and op == "bitwise_and"):
                    return self.canon(other)
                if op == "bitwise_and" and c >= 0 and c & (c + 1) == 0:
                    return dm.floormod(self, self.canon(other), Sum.constant(c + 1, d))
            for k in (0, 1):
                # disjoint bits: a multiple of 2**p and a value in [0, 2**p)
                sa, b = self.canon(args[k]), self.expr_bound(args[1 - k])
                p = _power_of_two_dividing(sa)
                if b.min_value >= 0 and b.max_value < p:
                    if op == "bitwise_and":
                        return Sum.constant(0, d)
                    return sa.add(self.canon(args[1 - k]))
        same = all(a is b for a, b in zip(args, e.args))
        return self.make_atom(e if same else Call(d, op, args))

    def _cast(self, e: Cast) -> Sum:
        src = e.value.dtype
        if src == e.dtype:
            return self.canon(e.value)
        v = self.simplify(e.value)
        if type(v) is IntImm:
            lim = dtype_bound(e.dtype)
            if lim.min_value <= v.value <= lim.max_value:
                return Sum.constant(v.value, e.dtype)
        elif type(v) is FloatImm and math.isfinite(v.value):
            iv = math.trunc(v.value)  # C conversion rounds toward zero
            lim = dtype_bound(e.dtype)
            if lim.min_value <= iv <= lim.max_value:
                return Sum.constant(iv, e.dtype)
        return self.make_atom(e if v is e.value else Cast(e.dtype, v))

    # ----------------------------------------------------------------------------------------
    # proofs on sums
    # ----------------------------------------------------------------------------------------
    def upper_bound(self, d: Sum) -> int:
        """Upper bound of a sum, sharpened by substituting each variable with a symbolic
        range by its extreme value: ``d(v) <= d(v_max)`` pointwise when ``v`` has a positive
        coefficient (``v_min`` for a negative one). So ``x - n`` with ``x`` in ``[0, n)`` is
        known to be negative although ``x`` and ``n`` have no constant bounds."""
        best = self.sum_bound(d).max_value
        for _ in range(4):
            pick = None
            for _k, (a, c) in d.terms.items():
                if type(a) is Var and a in self.ranges:
                    r = self.ranges[a]
                    if not (type(r.min) is IntImm and type(r.extent) is IntImm):
                        pick = (a, c, r)
                        break
            if pick is None:
                break
            a, c, r = pick
            lo = self.canon(r.min)
            end = lo if c < 0 else lo.add(self.canon(r.extent)).add_const(-1)
            d = d.add(self.make_atom(a), -c).add(end, c)
            best = min(best, self.sum_bound(d).max_value)
        return best

    def decide(self, op: type, sa: Sum, sb: Sum) -> bool | None:
        """Decide ``a <op> b`` for canonical integer sums; None if the ranges don't."""
        d = self.merge_divmod(sa.add(sb, -1))
        r = decide_compare(op, self.sum_bound(d))
        if r is None and any(type(a) is Var for a, _c in d.terms.values()):
            r = self._decide_symbolic(op, d)
        return r

    def _decide_symbolic(self, op: type, d: Sum) -> bool | None:
        hi = self.upper_bound(d)
        lo = -self.upper_bound(d.scale(-1))
        if lo > hi:  # only on unreachable code (empty ranges); decide nothing there
            return None
        return decide_compare(op, ConstIntBound(lo, hi))

    # ----------------------------------------------------------------------------------------
    # booleans
    # ----------------------------------------------------------------------------------------
    def _simplify_bool(self, e: PrimExpr) -> PrimExpr:
        t = type(e)
        if isinstance(e, IntImm):
            return e
        if isinstance(e, CmpOp):
            if is_index(e.a.dtype):
                return self.compare(t, self.canon(e.a), self.canon(e.b))
            a, b = self.simplify(e.a), self.simplify(e.b)
            if _is_scalar_bool(a.dtype) and isinstance(a, IntImm) and isinstance(b, IntImm):
                r = decide_compare(t, bound_const(a.value - b.value))
                if r is not None:
                    return IntImm(int(r), "bool")
            return e if (a is e.a and b is e.b) else type(e)(a, b)
        if isinstance(e, (And, Or)):
            return self._and_or(t, self.simplify(e.a), self.simplify(e.b))
        if isinstance(e, Not):
            return self._not(self.simplify(e.a))
        if isinstance(e, Select):
            cond = self.simplify(e.condition)
            if isinstance(cond, IntImm):
                return self.simplify(e.true_value if cond.value else e.false_value)
            tv, fv = self.simplify(e.true_value), self.simplify(e.false_value)
            if self.keys.key(tv) == self.keys.key(fv):
                return tv
            return Select(cond, tv, fv)
        if isinstance(e, Cast) and is_index(e.value.dtype):
            v = self.simplify(e.value)
            bv = self.expr_bound(v)
            if bv.min_value > 0 or bv.max_value < 0:
                return true_()
            if bv.min_value == bv.max_value == 0:
                return false_()
            return e if v is e.value else Cast(e.dtype, v)
        if isinstance(e, Var):
            bv = self.bounds(e)
            return IntImm(bv.min_value, "bool") if bv.is_const else e
        return self.simplify_children(e)

    def _and_or(self, t: type, a: PrimExpr, b: PrimExpr) -> PrimExpr:
        absorbing = 0 if t is And else 1
        for x, y in ((a, b), (b, a)):
            if isinstance(x, IntImm):
                return x if x.value == absorbing else y
        ka, kb = self.keys.key(a), self.keys.key(b)
        if ka == kb:
            return a
        if self.keys.key(self._not(a)) == kb:
            # a and not a == False, a or not a == True
            return IntImm(absorbing, "bool")
        # comparisons of one linear form against constants: keep the stricter (and) or the
        # weaker (or) one, detect empty (and) or all-covering (or) pairs
        fb = self._lt_form(b)
        if fb is not None:
            parts = self._chain(t, a)
            for c in parts:
                fc = self._lt_form(c)
                if fc is None:
                    continue
                r = self._combine(t, fc, fb)
                if r == "left":  # b adds nothing to the conjunct (disjunct) c of a
                    return a
                if r == "right" and len(parts) == 1:
                    return b
                if r in ("false", "true"):
                    return IntImm(int(r == "true"), "bool")
        both: PrimExpr = t(a, b)
        return both

    def _chain(self, t: type, e: PrimExpr) -> list[PrimExpr]:
        """The operands of a left-nested chain of ``t`` (And or Or) nodes."""
        out: list[PrimExpr] = []
        while isinstance(e, (And, Or)) and type(e) is t:
            out.append(e.b)
            e = e.a
        out.append(e)
        return out

    def _lt_form(self, e: PrimExpr) -> tuple[Key, Sum, int] | None:
        """``e`` as ``D + k < 0`` (``D`` without constant): (key of D, D, k), for integer
        comparisons LT/LE/GT/GE; None for anything else."""
        t = type(e)
        if not isinstance(e, (LT, LE, GT, GE)) or not is_index(e.a.dtype):
            return None
        sa, sb = self.canon(e.a), self.canon(e.b)
        if t is LT:
            d = sa.add(sb, -1)
        elif t is LE:
            d = sa.add(sb, -1).add_const(-1)
        elif t is GT:
            d = sb.add(sa, -1)
        else:
            d = sb.add(sa, -1).add_const(-1)
        dd = d.without_const()
        return dd.key(), dd, d.const

    def _combine(self, t: type, x: tuple[Key, Sum, int], y: tuple[Key, Sum, int]) -> str | None:
        """Relation of ``X: D + kx < 0`` and ``Y: D' + ky < 0`` under ``t`` (And/Or).

        Returns "left" when ``t(X, Y) == X``, "right" when it equals ``Y``, "false"/"true"
        when it is constant, None when nothing is known.
        """
        (kx_key, dx, kx), (ky_key, _dy, ky) = x, y
        if kx_key == ky_key:
            # same D: D < -kx and D < -ky; the larger k is the stricter condition
            if t is And:
                return "left" if kx >= ky else "right"
            return "left" if kx <= ky else "right"
        if dx.scale(-1).key() == ky_key:
            # D < -kx and -D < -ky, i.e. ky < D < -kx
            if t is And:
                return "false" if ky + 1 >= -kx else None
            # D <= -kx - 1 or D >= ky + 1 covers every integer iff ky + 1 <= -kx
            return "true" if ky + 1 <= -kx else None
        return None

    def _not(self, a: PrimExpr) -> PrimExpr:
        if isinstance(a, IntImm):
            return IntImm(1 - a.value, "bool")
        if isinstance(a, Not):
            inner: PrimExpr = a.a
            return inner
        if isinstance(a, CmpOp) and is_index(a.a.dtype):
            # exact for integers (not for floats, where NaN makes both sides false)
            inv = {LT: GE, GE: LT, LE: GT, GT: LE, EQ: NE, NE: EQ}[type(a)]
            return self.compare(inv, self.canon(a.a), self.canon(a.b))
        return Not(a)

    def compare(self, op: type, sa: Sum, sb: Sum) -> PrimExpr:
        """Canonical form of the integer comparison ``a <op> b``.

        Decided comparisons fold to constants. Otherwise the result is ``lhs < rhs``,
        ``lhs <= rhs`` (only for ``P - N - 1 < 0``), ``lhs >= c``, ``lhs == rhs`` or
        ``lhs != rhs`` with positive terms on the left,
        the constant on the right, and the common factor of the coefficients divided out.
        """
        r = self.decide(op, sa, sb)
        if r is not None:
            return IntImm(int(r), "bool")
        if op is GT or op is GE:
            op, sa, sb = (LT if op is GT else LE), sb, sa
        d = self.merge_divmod(sa.add(sb, -1))
        if op is LE:  # d <= 0  <=>  d - 1 < 0
            op, d = LT, d.add_const(-1)
        g = 0
        for _a, c in d.terms.values():
            g = math.gcd(g, c)
        if g > 1:
            if op is LT:
                # g*T + k < 0  <=>  T < ceil(-k / g)  <=>  T + floor(k / g) < 0
                d = Sum({k: (a, c // g) for k, (a, c) in d.terms.items()}, d.const // g, d.dtype)
            else:
                if d.const % g:
                    return IntImm(int(op is NE), "bool")
                d = d.exact_div(g)
        pos = Sum({k: v for k, v in d.terms.items() if v[1] > 0}, 0, d.dtype)
        neg = Sum({k: v for k, v in d.terms.items() if v[1] < 0}, d.const, d.dtype)
        if op is LT:
            if pos.terms:
                if d.const == -1 and len(neg.terms):
                    # P - N - 1 < 0  <=>  P <= N (reads better than P < N + 1)
                    return LE(self.to_expr(pos), self.to_expr(neg.without_const().scale(-1)))
                return LT(self.to_expr(pos), self.to_expr(neg.scale(-1)))
            # -(P) + k < 0  <=>  P > k  <=>  P >= k + 1
            return GE(self.to_expr(neg.without_const().scale(-1)), IntImm(d.const + 1, d.dtype))
        if not pos.terms:
            pos, neg = neg.without_const().scale(-1), Sum({}, -d.const, d.dtype)
        cmp: PrimExpr = op(self.to_expr(pos), self.to_expr(neg.scale(-1)))
        return cmp


__all__ = ["Simplifier", "is_index", "true_", "false_"]
