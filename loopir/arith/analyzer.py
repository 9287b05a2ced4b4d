"""The [`Analyzer`][loopir.arith.analyzer.Analyzer] facade and the module-level convenience
functions."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

import attrs

from loopir.arith.bound import ConstIntBound
from loopir.arith.interval import IntervalSet, interval_of
from loopir.arith.linear import detect_linear_sum
from loopir.arith.modular import ModularSet, modular_set
from loopir.arith.simplify import Simplifier, is_index
from loopir.errors import ArithError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Range
from loopir.ir.expr import EQ, And, IntImm, Not, Or, PrimExpr, Var, convert

logger = logging.getLogger(__name__)

RangeLike = Range | tuple[Any, Any]


def to_range(var: Var, rng: Any, who: str = "Analyzer.bind") -> Range:
    """Accept a [`Range`][loopir.ir.buffer.Range] or a ``(lo, hi_exclusive)`` pair; the result has
    the variable's dtype (so ranges of int64 variables combine with int64 expressions)."""
    if isinstance(rng, Range):
        if rng.min.dtype == var.dtype and rng.extent.dtype == var.dtype:
            return rng
        return Range(_as_dtype(rng.min, var.dtype), _as_dtype(rng.extent, var.dtype))
    if isinstance(rng, tuple) and len(rng) == 2:
        lo_i, hi_i = rng
        if type(lo_i) is int and type(hi_i) is int:
            # what convert() below makes of two ints, without its dispatch: provers bind
            # dozens of integer ranges per query
            return Range(IntImm(lo_i, var.dtype), IntImm(hi_i - lo_i, var.dtype))
        try:
            lo, hi = convert(rng[0], var.dtype), convert(rng[1], var.dtype)
            if lo.dtype != var.dtype:
                lo = lo.astype(var.dtype)
            if hi.dtype != var.dtype:
                hi = hi.astype(var.dtype)
            if type(lo) is IntImm and type(hi) is IntImm:
                return Range(lo, IntImm(hi.value - lo.value, var.dtype))
            return Range(lo, hi - lo)
        except TypeError as exc:
            raise ArithError(f"{who}: bad range {rng!r} for {var.name}: {exc}") from None
    raise ArithError(
        f"{who}: range of {getattr(var, 'name', var)!r} must be a Range or a (lo, hi_exclusive) "
        f"pair, got {type(rng).__name__}: {rng!r}"
    )


def _post_order(e: PrimExpr) -> list[PrimExpr]:
    """Sub-expressions of ``e`` children first, without recursion (for very deep trees)."""
    out: list[PrimExpr] = []
    seen: set[int] = set()
    stack: list[tuple[PrimExpr, bool]] = [(e, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            out.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        # Every concrete PrimExpr class is an attrs class (PrimExpr itself is only the base).
        for f in attrs.fields(cast("type[attrs.AttrsInstance]", type(node))):
            v = getattr(node, f.name)
            if isinstance(v, PrimExpr):
                stack.append((v, False))
            elif isinstance(v, tuple):
                stack.extend((x, False) for x in v if isinstance(x, PrimExpr))
    return out


F = TypeVar("F", bound=Callable[..., Any])


def _deep_safe(fn: F) -> F:
    """Analyze very deep trees (long sums) that exceed Python's recursion limit: warm the
    memo tables bottom-up without recursion, then retry once."""

    @functools.wraps(fn)
    def wrapper(self: Analyzer, e: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, e, *args, **kwargs)
        except RecursionError:
            pass
        if isinstance(e, PrimExpr):
            simp = self._simp
            for node in _post_order(e):
                simp.keys.key(node)
                simp.bounds(node)
                if is_index(node.dtype):
                    simp.canon(node)
                else:
                    simp.simplify(node)
        try:
            return fn(self, e, *args, **kwargs)
        except RecursionError:
            raise ArithError(
                f"{fn.__name__}: expression too deep to analyze (nesting beyond Python's "
                "recursion limit)"
            ) from None

    return wrapper  # type: ignore[return-value]


def _as_dtype(e: PrimExpr, dtype: str) -> PrimExpr:
    if e.dtype == dtype:
        return e
    return IntImm(e.value, dtype) if type(e) is IntImm else e.astype(dtype)


def _expr(e: Any, who: str) -> PrimExpr:
    """``e`` as an expression (Python scalars are converted); anything else is refused."""
    if isinstance(e, PrimExpr):
        return e
    if isinstance(e, (bool, int)):
        return convert(e)
    raise ArithError(f"{who}: expected an expression or an int, got {type(e).__name__}: {e!r}")


def _check_var(var: Any, who: str) -> Var:
    if not isinstance(var, Var):
        raise ArithError(f"{who}: expected a Var, got {type(var).__name__}: {var!r}")
    if not is_index(var.dtype):
        raise ArithError(f"{who}: variable {var.name} has dtype {var.dtype}; ranges need integers")
    return var


class Analyzer:
    """Integer analysis under variable ranges: bounds, simplification, proofs, intervals.

    Parameters
    ----------
    ranges
        Optional initial ranges, ``{var: Range or (lo, hi_exclusive)}``.

    Examples
    --------
    >>> from loopir import Var, Range
    >>> i0, i1 = Var("i0"), Var("i1")
    >>> ana = Analyzer({i0: Range(0, 3), i1: Range(0, 32)})
    >>> ana.can_prove(i0 * 32 + i1 < 100)
    True

    Notes
    -----
    Results are memoized until the next [`bind`][loopir.arith.analyzer.Analyzer.bind]. Integer
    arithmetic is treated as exact (no overflow), as in TVM.
    """

    def __init__(self, ranges: Mapping[Var, RangeLike] | None = None) -> None:
        self._ranges: dict[Var, Range] = {}
        self._s: Simplifier | None = None
        for v, r in (ranges or {}).items():
            self.bind(v, r)

    # ----------------------------------------------------------------------------------------
    @property
    def ranges(self) -> Mapping[Var, Range]:
        """The current variable ranges (read-only view)."""
        return dict(self._ranges)

    @property
    def _simp(self) -> Simplifier:
        if self._s is None:
            self._s = Simplifier(self._ranges)
        return self._s

    def bind(self, var: Var, rng: RangeLike) -> None:
        """Declare that ``var`` ranges over ``rng`` (a Range or ``(lo, hi_exclusive)``).

        Binding a variable again replaces its range. Memoized results that may depend on
        ``var`` are dropped (binding a variable that no earlier query mentioned keeps them:
        the typical "bind loop vars on the way down" walk stays cheap).
        """
        v = _check_var(var, "Analyzer.bind")
        r = to_range(v, rng)
        if self._s is not None and (v in self._ranges or self._s.has_seen(v)):
            self._s = None
        # the simplifier shares this dict, so an unseen variable's range is visible at once
        self._ranges[v] = r

    def unbind(self, var: Var) -> None:
        """Forget the range of ``var`` (no-op when unbound)."""
        if self._ranges.pop(var, None) is not None:
            self._s = None

    @contextlib.contextmanager
    def scope(self, ranges: Mapping[Var, RangeLike]) -> Iterator[Analyzer]:
        """Temporarily bind ``ranges``; the previous ranges come back on exit."""
        saved = dict(self._ranges)
        try:
            for v, r in ranges.items():
                self.bind(v, r)
            yield self
        finally:
            self._ranges.clear()
            self._ranges.update(saved)
            self._s = None

    # ----------------------------------------------------------------------------------------
    @_deep_safe
    def const_int_bound(self, e: PrimExpr | int) -> ConstIntBound:
        """Inclusive constant bounds of an integer (or bool) expression.

        Unbounded sides are ``ConstIntBound.POS_INF`` / ``NEG_INF``; unbound integer
        variables range over their dtype; non-integer expressions are unbounded.
        """
        return self._simp.expr_bound(_expr(e, "const_int_bound"))

    @_deep_safe
    def simplify(self, e: PrimExpr | int) -> PrimExpr:
        """An equivalent, simplified expression (``e`` itself when nothing changed)."""
        return self._simp.simplify(_expr(e, "simplify"))

    @_deep_safe
    def can_prove(self, cond: PrimExpr | bool) -> bool:
        """Whether ``cond`` holds for every value of the bound variables.

        False means "could not prove" (not "false").
        """
        c = _expr(cond, "can_prove")
        if not (dt.is_bool(c.dtype) and dt.lanes(c.dtype) == 1):
            raise ArithError(f"can_prove: needs a scalar bool condition, got {c.dtype}: {c}")
        return self._prove(c, 0)

    def _prove(self, c: PrimExpr, depth: int) -> bool:
        s = self._simp
        sc = s.simplify(c)
        if type(sc) is IntImm:
            return bool(sc.value)
        if depth < 16:
            if type(sc) is And:
                return self._prove(sc.a, depth + 1) and self._prove(sc.b, depth + 1)
            if type(sc) is Or:
                return self._prove(sc.a, depth + 1) or self._prove(sc.b, depth + 1)
            if type(sc) is Not and (type(sc.a) is And or type(sc.a) is Or):
                # De Morgan: not(a and b) == (not a) or (not b)
                inner = sc.a
                na, nb = Not(inner.a), Not(inner.b)
                return self._prove(Or(na, nb) if type(inner) is And else And(na, nb), depth + 1)
        return s.bounds(sc).min_value >= 1

    def can_prove_equal(self, a: PrimExpr | int, b: PrimExpr | int) -> bool:
        """Whether ``a`` and ``b`` have the same value for every value of the bound vars."""
        x, y = _expr(a, "can_prove_equal"), _expr(b, "can_prove_equal")
        s = self._simp
        if is_index(x.dtype) and is_index(y.dtype):
            return s.canon(x).add(s.canon(y), -1).key() == ("sum", frozenset(), 0, x.dtype) or \
                s.decide(EQ, s.canon(x), s.canon(y)) is True
        sx, sy = s.simplify(x), s.simplify(y)
        return s.keys.key(sx) == s.keys.key(sy)

    @_deep_safe
    def int_set(self, e: PrimExpr | int, relax: Mapping[Var, RangeLike] | None = None) -> IntervalSet:
        """Symbolic inclusive bounds of ``e`` when ``relax``'s variables range over their
        ranges (other variables stay symbolic).

        ``int_set(k0*4 + k1, {k1: Range(0, 4)})`` is ``[k0*4, k0*4 + 3]`` (exact).

        Raises
        ------
        ArithError
            If ``e`` is not a scalar integer expression.
        """
        rel = {_check_var(v, "int_set"): to_range(v, r, "int_set") for v, r in (relax or {}).items()}
        return interval_of(self._simp, _expr(e, "int_set"), rel)

    def modular_set(self, e: PrimExpr | int) -> ModularSet:
        """The modular set of integer ``e`` (``loopir.arith.modular``); a
        variable whose range has one value counts as that constant."""
        fixed = {}
        for v, r in self._ranges.items():
            if type(r.min) is IntImm and type(r.extent) is IntImm and r.extent.value == 1:
                fixed[v] = ModularSet(0, r.min.value)
        return modular_set(_expr(e, "modular_set"), fixed)

    @_deep_safe
    def detect_linear(self, e: PrimExpr, vars: Sequence[Var]) -> list[PrimExpr] | None:
        """Coefficients of ``e`` in ``vars`` plus the base: ``e == sum(c_i * v_i) + base``.

        Returns ``[c_0, ..., c_{n-1}, base]`` (simplified expressions free of ``vars``), or
        None when ``e`` is not linear in ``vars``.
        """
        vs = [_check_var(v, "detect_linear") for v in vars]
        return detect_linear_sum(self._simp, _expr(e, "detect_linear"), vs)

    def __repr__(self) -> str:
        rs = ", ".join(f"{v.name}: {r}" for v, r in self._ranges.items())
        return f"Analyzer({{{rs}}})"


def _analyzer(ranges: Mapping[Var, RangeLike] | None) -> Analyzer:
    return Analyzer(ranges)


def simplify(e: PrimExpr | int, ranges: Mapping[Var, RangeLike] | None = None) -> PrimExpr:
    """Simplify ``e`` under ``ranges`` (see
    [`Analyzer.simplify`][loopir.arith.analyzer.Analyzer.simplify])."""
    return _analyzer(ranges).simplify(e)


def can_prove(cond: PrimExpr | bool, ranges: Mapping[Var, RangeLike] | None = None) -> bool:
    """Whether ``cond`` provably holds under ``ranges`` (see
    [`Analyzer.can_prove`][loopir.arith.analyzer.Analyzer.can_prove])."""
    return _analyzer(ranges).can_prove(cond)


def const_int_bound(
    e: PrimExpr | int, ranges: Mapping[Var, RangeLike] | None = None
) -> ConstIntBound:
    """Constant bounds of ``e`` under ``ranges`` (see
    [`Analyzer.const_int_bound`][loopir.arith.analyzer.Analyzer.const_int_bound])."""
    return _analyzer(ranges).const_int_bound(e)


def int_set(
    e: PrimExpr | int,
    relax: Mapping[Var, RangeLike],
    ranges: Mapping[Var, RangeLike] | None = None,
) -> IntervalSet:
    """Symbolic bounds of ``e`` with ``relax`` relaxed (see
    [`Analyzer.int_set`][loopir.arith.analyzer.Analyzer.int_set])."""
    return _analyzer(ranges).int_set(e, relax)


def detect_linear(e: PrimExpr, vars: Sequence[Var]) -> list[PrimExpr] | None:
    """``[c_0, ..., c_{n-1}, base]`` with ``e == sum(c_i * vars[i]) + base``, or None."""
    return Analyzer().detect_linear(e, vars)


def can_prove_equal(
    a: PrimExpr | int, b: PrimExpr | int, ranges: Mapping[Var, RangeLike] | None = None
) -> bool:
    """Whether ``a == b`` provably holds under ``ranges``."""
    return _analyzer(ranges).can_prove_equal(a, b)


__all__ = [
    "Analyzer", "simplify", "can_prove", "const_int_bound", "int_set", "detect_linear",
    "can_prove_equal", "to_range",
]  # fmt: skip
