"""Constant integer bounds: [`ConstIntBound`][loopir.arith.bound.ConstIntBound] and sound interval
arithmetic on it.

A bound is an inclusive pair ``[min_value, max_value]`` of Python ints. The sentinels
[`POS_INF`][loopir.arith.bound.POS_INF] and [`NEG_INF`][loopir.arith.bound.NEG_INF] mean "unbounded"
on that side (they equal the int64 limits, as in TVM, so the full int64 range reads as unbounded).
Every operation here treats the sentinels as true infinities, so no arithmetic can turn "unbounded"
into a finite bound.

[`BoundEvaluator`][loopir.arith.bound.BoundEvaluator] computes the bound of an expression tree under
variable ranges. It is sound for negative operands and uses floor semantics for ``//`` and ``%``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import attrs

from loopir.arith.bitwise import apply_bitwise, is_bitwise, shift_in_range
from loopir.errors import ArithError
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

POS_INF: int = 2**63 - 1
NEG_INF: int = -POS_INF
_INF = (POS_INF, NEG_INF)


@attrs.frozen
class ConstIntBound:
    """Inclusive integer bounds ``[min_value, max_value]`` of an expression.

    ``ConstIntBound.POS_INF`` / ``ConstIntBound.NEG_INF`` mark an unbounded side.
    """

    min_value: int
    max_value: int

    POS_INF: ClassVar[int] = POS_INF
    NEG_INF: ClassVar[int] = NEG_INF

    def __attrs_post_init__(self) -> None:
        if self.min_value > self.max_value:
            raise ArithError(
                f"ConstIntBound: min_value {self.min_value} exceeds max_value {self.max_value}"
            )

    @property
    def is_const(self) -> bool:
        """Whether the bound is a single (finite) value."""
        return self.min_value == self.max_value and self.min_value not in _INF

    @property
    def is_everything(self) -> bool:
        return self.min_value == NEG_INF and self.max_value == POS_INF

    def contains(self, value: int) -> bool:
        """Whether ``value`` lies inside the bound (infinite sides contain everything)."""
        lo_ok = self.min_value == NEG_INF or value >= self.min_value
        hi_ok = self.max_value == POS_INF or value <= self.max_value
        return lo_ok and hi_ok

    def __repr__(self) -> str:
        lo = "-inf" if self.min_value == NEG_INF else str(self.min_value)
        hi = "+inf" if self.max_value == POS_INF else str(self.max_value)
        return f"ConstIntBound[{lo}, {hi}]"


EVERYTHING = ConstIntBound(NEG_INF, POS_INF)
BOOL_BOUND = ConstIntBound(0, 1)


# --------------------------------------------------------------------------------------------
# Saturating arithmetic on bound values
# --------------------------------------------------------------------------------------------


def clamp(v: int) -> int:
    """Saturate a finite result onto the sentinels (anything past them is unbounded)."""
    if v >= POS_INF:
        return POS_INF
    if v <= NEG_INF:
        return NEG_INF
    return v


def _add(a: int, b: int, ambiguous: int) -> int:
    # ``ambiguous`` is the conservative answer for inf + -inf (NEG_INF for a lower bound).
    if a in _INF or b in _INF:
        if {a, b} == set(_INF):
            return ambiguous
        return a if a in _INF else b
    return clamp(a + b)


def _mul(a: int, b: int) -> int:
    if a == 0 or b == 0:
        return 0
    if a in _INF or b in _INF:
        return POS_INF if (a > 0) == (b > 0) else NEG_INF
    return clamp(a * b)


def _neg(a: int) -> int:
    return -a  # NEG_INF == -POS_INF, so negation maps the sentinels onto each other


def bound_const(v: int) -> ConstIntBound:
    c = clamp(v)
    return ConstIntBound(c, c)


def bound_add(x: ConstIntBound, y: ConstIntBound) -> ConstIntBound:
    return ConstIntBound(
        _add(x.min_value, y.min_value, NEG_INF), _add(x.max_value, y.max_value, POS_INF)
    )


def bound_neg(x: ConstIntBound) -> ConstIntBound:
    return ConstIntBound(_neg(x.max_value), _neg(x.min_value))


def bound_sub(x: ConstIntBound, y: ConstIntBound) -> ConstIntBound:
    return bound_add(x, bound_neg(y))


def bound_scale(x: ConstIntBound, c: int) -> ConstIntBound:
    """Bound of ``c * x`` for a constant ``c``."""
    a, b = _mul(x.min_value, c), _mul(x.max_value, c)
    return ConstIntBound(min(a, b), max(a, b))


def bound_mul(x: ConstIntBound, y: ConstIntBound) -> ConstIntBound:
    corners = [
        _mul(p, q) for p in (x.min_value, x.max_value) for q in (y.min_value, y.max_value)
    ]
    return ConstIntBound(min(corners), max(corners))


def _fdiv(a: int, b: int) -> int | None:
    """floor(a / b) with infinities (b != 0); None when undetermined (inf / inf)."""
    a_inf, b_inf = a in _INF, b in _INF
    if a_inf and b_inf:
        return None
    if b_inf:
        # the limit of floor(a / b) for |b| -> inf
        if a == 0:
            return 0
        return 0 if (a > 0) == (b > 0) else -1
    if a_inf:
        return POS_INF if (a > 0) == (b > 0) else NEG_INF
    return clamp(a // b)


def bound_floordiv(x: ConstIntBound, y: ConstIntBound) -> ConstIntBound:
    """Bound of ``floordiv(x, y)``. A divisor range containing 0 gives no information."""
    if y.min_value <= 0 <= y.max_value:
        return EVERYTHING
    # For a divisor of fixed sign, floor(a / b) is monotone in a and in b separately, so the
    # extremes are attained at the corners of the box.
    corners = [_fdiv(p, q) for p in (x.min_value, x.max_value) for q in (y.min_value, y.max_value)]
    if any(c is None for c in corners):
        return EVERYTHING
    vals = [c for c in corners if c is not None]
    return ConstIntBound(min(vals), max(vals))


def bound_floormod(x: ConstIntBound, y: ConstIntBound) -> ConstIntBound:
    """Bound of ``floormod(x, y)`` (the result has the sign of the divisor)."""
    if y.min_value > 0:
        if y.is_const and x.min_value not in _INF and x.max_value not in _INF:
            c = y.min_value
            q = x.min_value // c
            if x.max_value // c == q:
                # no wrap-around: floormod is a shift of x
                return ConstIntBound(x.min_value - q * c, x.max_value - q * c)
        hi = _add(y.max_value, -1, POS_INF)
        if x.min_value >= 0:
            if x.max_value < y.min_value:
                return x  # x < every divisor: x % y == x
            hi = min(hi, x.max_value)
        return ConstIntBound(0, hi)
    if y.max_value < 0:
        lo = _add(y.min_value, 1, NEG_INF)
        if x.max_value <= 0:
            if x.min_value > y.max_value:
                return x
            lo = max(lo, x.min_value)
        return ConstIntBound(lo, 0)
    return EVERYTHING


def bound_min(x: ConstIntBound, y: ConstIntBound) -> ConstIntBound:
    return ConstIntBound(min(x.min_value, y.min_value), min(x.max_value, y.max_value))


def bound_max(x: ConstIntBound, y: ConstIntBound) -> ConstIntBound:
    return ConstIntBound(max(x.min_value, y.min_value), max(x.max_value, y.max_value))


def bound_union(x: ConstIntBound, y: ConstIntBound) -> ConstIntBound:
    return ConstIntBound(min(x.min_value, y.min_value), max(x.max_value, y.max_value))


def bound_intersect(x: ConstIntBound, y: ConstIntBound) -> ConstIntBound:
    """Intersection of two sound bounds of the same value (falls back to ``x`` if disjoint)."""
    lo, hi = max(x.min_value, y.min_value), min(x.max_value, y.max_value)
    if lo > hi:  # only possible on unreachable code (empty ranges); stay conservative
        return x
    return ConstIntBound(lo, hi)


@functools.cache
@functools.cache  # (a frozen result: sharing it is safe)
def dtype_bound(dtype: str) -> ConstIntBound:
    """The value range of a scalar integer or bool dtype (EVERYTHING for other types)."""
    if dt.is_bool(dtype):
        return BOOL_BOUND
    if dt.is_int(dtype):
        lo = int(dt.min_value(dtype))
        hi = int(dt.max_value(dtype))
        return ConstIntBound(clamp(lo), clamp(hi))
    return EVERYTHING


@functools.cache
@functools.cache
def _int_like(dtype: str) -> bool:
    """Scalar integer or bool."""
    return dt.lanes(dtype) == 1 and (dt.is_int(dtype) or dt.is_bool(dtype))


def _fits(b: ConstIntBound, dtype: str) -> bool:
    d = dtype_bound(dtype)
    return d.min_value <= b.min_value and b.max_value <= d.max_value


def decide_compare(op: type, d: ConstIntBound) -> bool | None:
    """Decide ``a <op> b`` from the bound ``d`` of ``a - b``; None when undecided."""
    lo, hi = d.min_value, d.max_value
    if op is LT:
        return True if hi < 0 else (False if lo >= 0 else None)
    if op is LE:
        return True if hi <= 0 else (False if lo > 0 else None)
    if op is GT:
        return True if lo > 0 else (False if hi <= 0 else None)
    if op is GE:
        return True if lo >= 0 else (False if hi < 0 else None)
    if op is EQ:
        if lo == hi == 0:
            return True
        return False if (lo > 0 or hi < 0) else None
    if op is NE:
        if lo == hi == 0:
            return False
        return True if (lo > 0 or hi < 0) else None
    return None


# --------------------------------------------------------------------------------------------
# Bounds of expression trees
# --------------------------------------------------------------------------------------------


def range_bound(
    rng: Range, bound_of: Callable[[PrimExpr], ConstIntBound]
) -> ConstIntBound:
    """Bound of a variable ranging over ``rng`` (``[min, min + extent)``)."""
    bmin = bound_of(rng.min)
    bext = bound_of(rng.extent)
    hi = _add(_add(bmin.max_value, bext.max_value, POS_INF), -1, POS_INF)
    # An empty range (extent <= 0) binds a variable that never takes a value; any bound is
    # vacuously sound, keep a well-formed one.
    return ConstIntBound(bmin.min_value, max(hi, bmin.min_value))


class BoundEvaluator:
    """Memoized bottom-up bound computation of expression trees.

    Parameters
    ----------
    ranges
        Variable ranges (others take their dtype's range).
    atom_hook
        Optional function consulted first for every node; returning a bound short-circuits
        (the simplifier uses it to share bounds of canonical atoms).
    var_bounds
        Optional constant bounds of variables, used where ``ranges`` has no entry (a bound may be
        open on one side, which a [`Range`][loopir.ir.buffer.Range] cannot say: a size ``n >= 0``).
    """

    def __init__(
        self,
        ranges: Mapping[Var, Range],
        atom_hook: Callable[[PrimExpr], ConstIntBound | None] | None = None,
        var_bounds: Mapping[Var, ConstIntBound] | None = None,
    ) -> None:
        self.ranges = ranges
        self.atom_hook = atom_hook
        self.var_bounds = var_bounds or {}
        self._memo: dict[PrimExpr, ConstIntBound] = {}
        self._active: set[int] = set()
        # ids of the variables whose range was consulted (pinned so ids stay unique)
        self.seen_vars: dict[int, Var] = {}

    def clear(self) -> None:
        self._memo.clear()

    def __call__(self, e: PrimExpr) -> ConstIntBound:
        hit = self._memo.get(e)
        if hit is not None:
            return hit
        res = self._compute(e)
        if len(self._memo) > 200_000:  # bound memory in long-lived analyzers
            self._memo.clear()
        self._memo[e] = res
        return res

    def var_bound(self, v: Var) -> ConstIntBound:
        self.seen_vars[id(v)] = v
        rng = self.ranges.get(v)
        if rng is None and v in self.var_bounds:
            return bound_intersect(self.var_bounds[v], dtype_bound(v.dtype))
        if rng is None or id(v) in self._active:
            # unbound, or a range that mentions its own variable: only the dtype is known
            return dtype_bound(v.dtype)
        self._active.add(id(v))
        try:
            b = range_bound(rng, self)
        finally:
            self._active.discard(id(v))
        return bound_intersect(b, dtype_bound(v.dtype))

    def _compute(self, e: PrimExpr) -> ConstIntBound:
        if self.atom_hook is not None:
            hooked = self.atom_hook(e)
            if hooked is not None:
                return hooked
        dtype = e.dtype
        if not _int_like(dtype):
            return EVERYTHING
        limit = dtype_bound(dtype)
        handler = _HANDLERS.get(type(e))
        if handler is None:
            return limit
        res = handler(self, e)
        # Results never leave the dtype's range (we assume no overflow, as TVM does).
        if res.min_value < limit.min_value or res.max_value > limit.max_value:
            res = bound_intersect(res, limit)
        return res


def _h_intimm(ev: BoundEvaluator, e: Any) -> ConstIntBound:
    return bound_const(e.value)


def _h_var(ev: BoundEvaluator, e: Any) -> ConstIntBound:
    return ev.var_bound(e)


def _binary(fn: Callable[[ConstIntBound, ConstIntBound], ConstIntBound]) -> Any:
    def h(ev: BoundEvaluator, e: Any) -> ConstIntBound:
        return fn(ev(e.a), ev(e.b))

    return h


def _h_cmp(ev: BoundEvaluator, e: Any) -> ConstIntBound:
    ta = e.a.dtype
    if dt.lanes(ta) == 1 and (dt.is_int(ta) or dt.is_bool(ta)):
        r = decide_compare(type(e), bound_sub(ev(e.a), ev(e.b)))
        if r is not None:
            return bound_const(int(r))
    return BOOL_BOUND


def _h_and(ev: BoundEvaluator, e: Any) -> ConstIntBound:
    a, b = ev(e.a), ev(e.b)
    return ConstIntBound(min(a.min_value, b.min_value), min(a.max_value, b.max_value))


def _h_or(ev: BoundEvaluator, e: Any) -> ConstIntBound:
    a, b = ev(e.a), ev(e.b)
    return ConstIntBound(max(a.min_value, b.min_value), max(a.max_value, b.max_value))


def _h_not(ev: BoundEvaluator, e: Any) -> ConstIntBound:
    a = ev(e.a)
    return ConstIntBound(1 - a.max_value, 1 - a.min_value)


def _h_select(ev: BoundEvaluator, e: Any) -> ConstIntBound:
    c = ev(e.condition)
    if c.min_value >= 1:
        return ev(e.true_value)
    if c.max_value <= 0:
        return ev(e.false_value)
    return bound_union(ev(e.true_value), ev(e.false_value))


def _h_cast(ev: BoundEvaluator, e: Any) -> ConstIntBound:
    src = e.value.dtype
    if dt.lanes(src) == 1 and (dt.is_int(src) or dt.is_bool(src)):
        b = ev(e.value)
        if dt.is_bool(e.dtype):
            if b.min_value > 0 or b.max_value < 0:
                return bound_const(1)
            if b.min_value == b.max_value == 0:
                return bound_const(0)
            return BOOL_BOUND
        if _fits(b, e.dtype):
            return b
    return dtype_bound(e.dtype)


def _ones_below(hi: int) -> int:
    """``2**k - 1`` for the least ``k`` with ``hi < 2**k`` (``hi >= 0``): every value whose bits
    are all below ``hi``'s highest bit or at it."""
    return POS_INF if hi >= POS_INF else (1 << hi.bit_length()) - 1


def bound_bitwise(op: str, xs: list[ConstIntBound], dtype: str) -> ConstIntBound:
    """Bound of a bitwise intrinsic (``loopir.arith.bitwise``) on operands of bounds ``xs``.

    Exact for constants. Otherwise: for non-negative operands ``a & b`` lies in ``[0, min(a, b)]``
    (one non-negative operand bounds it alone), ``a | b`` in ``[max(a, b), 2**k - 1]`` and
    ``a ^ b`` in ``[0, 2**k - 1]`` for the least ``k`` with both below ``2**k``; ``~a`` is
    ``-a - 1``; shifts by an amount in ``[0, bits)`` scale or floor-divide by powers of two
    (extremes at the amount's ends). Anything else: the dtype's range.
    """
    if all(x.is_const for x in xs):
        args = [x.min_value for x in xs]
        if op not in ("shift_left", "shift_right") or shift_in_range(args[1], dtype):
            return bound_const(apply_bitwise(op, args, dtype))
    if op == "bitwise_not":
        return bound_sub(bound_neg(xs[0]), bound_const(1))
    a, b = xs
    nonneg_a, nonneg_b = a.min_value >= 0, b.min_value >= 0
    if op == "bitwise_and" and (nonneg_a or nonneg_b):
        his = [x.max_value for x, nn in ((a, nonneg_a), (b, nonneg_b)) if nn]
        return ConstIntBound(0, min(his))
    if op in ("bitwise_or", "bitwise_xor") and nonneg_a and nonneg_b:
        top = _ones_below(max(a.max_value, b.max_value))
        lo = max(a.min_value, b.min_value) if op == "bitwise_or" else 0
        return ConstIntBound(lo, top)
    if op in ("shift_left", "shift_right") and b.min_value >= 0 and b.max_value < dt.bits(dtype):
        ends = [1 << b.min_value, 1 << b.max_value]
        if op == "shift_left":
            return bound_union(bound_scale(a, ends[0]), bound_scale(a, ends[1]))
        return bound_union(*(bound_floordiv(a, bound_const(c)) for c in ends))
    return dtype_bound(dtype)


def _h_call(ev: BoundEvaluator, e: Any) -> ConstIntBound:
    if is_bitwise(e):
        return bound_bitwise(e.op, [ev(a) for a in e.args], e.dtype)
    return dtype_bound(e.dtype)


_HANDLERS: dict[type, Callable[[BoundEvaluator, Any], ConstIntBound]] = {
    IntImm: _h_intimm,
    Var: _h_var,
    Add: _binary(bound_add),
    Sub: _binary(bound_sub),
    Mul: _binary(bound_mul),
    FloorDiv: _binary(bound_floordiv),
    FloorMod: _binary(bound_floormod),
    Min: _binary(bound_min),
    Max: _binary(bound_max),
    LT: _h_cmp,
    LE: _h_cmp,
    GT: _h_cmp,
    GE: _h_cmp,
    EQ: _h_cmp,
    NE: _h_cmp,
    And: _h_and,
    Or: _h_or,
    Not: _h_not,
    Select: _h_select,
    Cast: _h_cast,
    Call: _h_call,
}

__all__ = [
    "POS_INF", "NEG_INF", "ConstIntBound", "EVERYTHING", "BOOL_BOUND", "BoundEvaluator",
    "bound_add", "bound_sub", "bound_neg", "bound_mul", "bound_scale", "bound_floordiv",
    "bound_floormod", "bound_min", "bound_max", "bound_union", "bound_intersect", "bound_const",
    "dtype_bound", "decide_compare", "range_bound", "clamp", "bound_bitwise",
]  # fmt: skip
