"""What a padded iteration computes, for the LocalPadding pass.

Dropping a compute guard runs the store at *padded* iterations, which the original skipped.
That is a no-op only if

- the padded operand reaches the reduction as its identity: each cast between the load and
  the reduction must map the identity of its operand type to the identity of its result type
  (:func:`pad_reaches`; ``int8(INT32_MIN)`` is 0, and the int8 pad -128 widened to int32 is not
  INT32_MIN); and
- everything else the store evaluates there is defined and finite (:func:`undefined_reason`):
  no division or modulo by something that can be zero there (an integer division by zero
  traps; ``0 * (1 / 0.0)`` is NaN), no ``sqrt``/``log``/... outside its domain, no
  ``exp``/``pow`` or cast that could overflow.

Definedness is proven node by node for the nodes that can fail (divisions, modulos, calls,
casts that can overflow). A node that depends only on loops of constant range is evaluated at
every padded iteration (exhaustively, with numpy in the node's type: a proof, or a named
iteration where it fails); otherwise only structural facts count: a nonzero constant divisor,
an integer divisor the arith analyzer bounds away from zero, a call that is finite on finite
input. Loaded values are taken as finite (the standing assumption on the inputs), and so are
``+``, ``-`` and ``*`` of finite values (the arithmetic of the unpadded kernel itself).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import attrs
import numpy as np

from loopir.arith import vectorized as _enum
from loopir.arith.evaluate import evaluate
from loopir.errors import ArithError
from loopir.ir import dtype as dt
from loopir.ir.expr import (
    And,
    BinaryOp,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    CmpOp,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Mul,
    Not,
    Or,
    PrimExpr,
    Ramp,
    Select,
    StringImm,
    Var,
)
from loopir.ir.functor import collect_vars
from loopir.ir.stmt import For
from loopir.passes.local_pad_analysis import analyzer
from loopir.passes.local_pad_sites import const_value, identity

if TYPE_CHECKING:
    from loopir.arith import Analyzer

__all__ = ["pad_reaches", "undefined_reason"]


# --------------------------------------------------------------------------------------------
# The identity through casts
# --------------------------------------------------------------------------------------------


def pad_reaches(term: PrimExpr, load: BufferLoad, kind: str) -> tuple[bool, str]:
    """Whether a padded ``load`` makes ``term`` the identity of reduction ``kind``.

    sum: ``load`` is a factor of the product chain ``term`` (0 times anything finite is 0);
    max/min: ``term`` is ``load`` itself: ``max(acc, a * b)`` with a -inf operand is not -inf
    in general. Either way up to casts that keep float-ness, and each of those casts must turn
    the identity of its operand type into the identity of its own type.

    Returns
    -------
    (bool, str)
        ``(True, "")``; ``(False, "")`` when ``load`` is not where it must be; ``(False, why)``
        when a cast on the way changes the identity.
    """
    casts = _path(term, load, kind)
    if casts is None:
        return False, ""
    for c in reversed(casts):  # innermost first: where the identity is first lost
        why = _cast_changes_identity(c, kind)
        if why:
            return False, why
    return True, ""


def _path(x: PrimExpr, load: BufferLoad, kind: str, casts: tuple[Cast, ...] = ()) -> list[Cast] | None:
    """The casts between ``x`` and ``load`` along the product chain (None: not on it)."""
    while isinstance(x, Cast) and dt.is_float(x.dtype) == dt.is_float(x.value.dtype):
        casts = (*casts, x)
        x = x.value
    if x is load:
        return list(casts)
    if kind == "sum" and isinstance(x, Mul):
        found = _path(x.a, load, kind, casts)
        return found if found is not None else _path(x.b, load, kind, casts)
    return None


def _cast_changes_identity(c: Cast, kind: str) -> str:
    """Why cast ``c`` does not map the ``kind`` identity to the ``kind`` identity ('' if it does)."""
    src, dst = identity(kind, c.value.dtype), identity(kind, c.dtype)
    if src is None or dst is None:
        return f"the cast to {c.dtype} has no {kind} identity on both sides"
    try:
        got: object = evaluate(Cast(c.dtype, src), {})
    except ArithError:
        got = "an undefined value"
    if got == const_value(dst):
        return ""
    return (
        f"the cast to {c.dtype} turns the {kind} pad {const_value(src)} of {c.value.dtype} into "
        f"{got}, not the {c.dtype} identity {const_value(dst)}"
    )


# --------------------------------------------------------------------------------------------
# Definedness at the padded iterations
# --------------------------------------------------------------------------------------------

# Calls that are finite wherever their arguments are finite (fma: arithmetic).
_FINITE_CALLS = frozenset(
    {"fabs", "floor", "ceil", "round", "trunc", "sin", "cos", "tanh", "sigmoid", "erf", "isnan", "fma"}
)

_NUMPY_CALLS: dict[str, Callable[..., np.ndarray]] = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log1p": np.log1p,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "fabs": np.abs, "floor": np.floor, "ceil": np.ceil,
    "round": np.round, "trunc": np.trunc, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "pow": np.power, "fma": lambda a, b, c: a * b + c, "isnan": np.isnan,
    "fast_exp": np.exp, "fast_log": np.log, "fast_div": np.divide,
}  # fmt: skip

def undefined_reason(
    e: PrimExpr, assumed: Sequence[PrimExpr], loops: Sequence[For], sizes: Iterable[Var] = ()
) -> str:
    """Why ``e`` may be undefined or not finite at an iteration of ``loops`` where every
    conjunct of ``assumed`` holds ('' when it provably is defined and finite at all of them).

    ``sizes`` are the symbolic buffer sizes (never negative) the analyzer may assume."""
    return _Defined(assumed, loops, sizes).why(e)


def _children(e: PrimExpr) -> tuple[PrimExpr, ...]:
    if isinstance(e, (BinaryOp, And, Or)):
        return (e.a, e.b)
    if isinstance(e, Not):
        return (e.a,)
    if isinstance(e, Select):
        return (e.condition, e.true_value, e.false_value)
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, BufferLoad):
        return e.indices
    if isinstance(e, Ramp):
        return (e.base, e.stride)
    if isinstance(e, Broadcast):
        return (e.value,)
    return ()


# Nodes that are defined wherever their operands are (loads: the inputs are finite).
_TOTAL = (IntImm, FloatImm, StringImm, Var, BinaryOp, And, Or, Not, Select, Cast, BufferLoad, Ramp, Broadcast)


def _finite_max(dtype: str) -> float:
    e = dt.element(dtype)
    return 3.3895313892515355e38 if e == "bfloat16" else float(np.finfo(np.dtype(e)).max)


def _risky_cast(c: Cast) -> bool:
    """Whether cast ``c`` of a finite value can overflow or be undefined."""
    src, dst = c.value.dtype, c.dtype
    if dt.is_bool(dst) or not dt.is_float(dst):
        return dt.is_float(src)  # float -> int: undefined out of range
    if dt.is_float(src):
        return _finite_max(dst) < _finite_max(src)
    if dt.is_bool(src):
        return False
    return _finite_max(dst) < max(abs(int(dt.min_value(src))), int(dt.max_value(src)))


@attrs.frozen
class _Points:
    """The padded iterations a node is evaluated at: its loop variables' values there."""

    env: dict[Var, np.ndarray]
    size: int
    order: tuple[Var, ...]

    def at(self, where: np.ndarray, used: Iterable[Var]) -> str:
        """The first iteration of mask ``where``, as ``v = value`` for the variables in ``used``."""
        i = int(np.nonzero(where)[0][0])
        names = set(used)
        return ", ".join(f"{v.name} = {int(self.env[v][i])}" for v in self.order if v in names)


class _Defined:
    def __init__(self, assumed: Sequence[PrimExpr], loops: Sequence[For], sizes: Iterable[Var]) -> None:
        self.assumed = list(assumed)
        self.loops = list(loops)
        self.sizes = list(sizes)
        self.ranges: dict[Var, tuple[int, int]] = {
            f.loop_var: (f.min.value, f.extent.value)
            for f in loops
            if isinstance(f.min, IntImm) and isinstance(f.extent, IntImm)
        }
        self._ana: Analyzer | None = None

    @property
    def ana(self) -> Analyzer:
        """The loops' (and sizes') analyzer, made on first use."""
        if self._ana is None:
            self._ana = analyzer(self.loops)
            for v in self.sizes:
                self._ana.bind(v, (0, 2**31))  # a buffer size: never negative, int32
        return self._ana

    def under(self, cond: PrimExpr) -> _Defined:
        """The same question where ``cond`` also holds (a branch, as C evaluates it)."""
        sub = _Defined([*self.assumed, cond], self.loops, self.sizes)
        sub._ana = self._ana
        return sub

    def why(self, e: PrimExpr) -> str:
        """Why ``e`` may be undefined or not finite ('' when it provably is not)."""
        if isinstance(e, Select):  # each branch only where it is taken
            return (self.why(e.condition) or self.under(e.condition).why(e.true_value)
                    or self.under(Not(e.condition)).why(e.false_value))  # fmt: skip
        if isinstance(e, (And, Or)):  # the right operand only where the left one does not decide
            return self.why(e.a) or self.under(e.a if isinstance(e, And) else Not(e.a)).why(e.b)
        for kid in _children(e):
            r = self.why(kid)
            if r:
                return r
        return self.node(e)

    def node(self, e: PrimExpr) -> str:
        if isinstance(e, FloatImm):
            return "" if math.isfinite(e.value) else f"the constant {e} is not finite"
        if isinstance(e, (FloorDiv, FloorMod)) and not dt.is_float(e.dtype):
            return self.int_division(e)
        if isinstance(e, (Div, FloorDiv, FloorMod, Call)) or (isinstance(e, Cast) and _risky_cast(e)):
            return self.float_node(e)
        if isinstance(e, _TOTAL):
            return ""
        return f"{type(e).__name__} {e} is not analysed"

    # --- enumeration ----------------------------------------------------------------------------
    def points(self, e: PrimExpr) -> _Points | None:
        """Every iteration where the assumptions hold, over the loops ``e`` uses (assumptions on
        other loops are dropped: a superset); None when not enumerable."""
        used = set(collect_vars(e))
        if not used <= self.ranges.keys():
            return None
        conds = [c for c in self.assumed if set(collect_vars(c)) & used]
        wide = used | {v for c in conds for v in collect_vars(c)}
        for xs in ((wide, used) if wide <= self.ranges.keys() else (used,)):
            order = tuple(f.loop_var for f in self.loops if f.loop_var in xs)
            try:
                env = _enum.domain([(v, *self.ranges[v]) for v in order])
            except _enum.NotEnumerable:
                continue
            size = next(iter(env.values())).size if env else 1
            mask = np.ones(size, dtype=bool)
            for c in conds:
                if set(collect_vars(c)) <= xs:
                    try:
                        mask &= _enum.evaluate(c, env, size) != 0
                    except _enum.NotEnumerable:
                        pass  # dropped: a superset of the iterations
            return _Points({v: a[mask] for v, a in env.items()}, int(mask.sum()), order)
        return None

    def int_values(self, e: PrimExpr) -> tuple[np.ndarray, _Points] | None:
        pts = self.points(e)
        if pts is None:
            return None
        try:
            return _enum.evaluate(e, pts.env, pts.size), pts
        except _enum.NotEnumerable:
            return None

    # --- integer division -------------------------------------------------------------------------
    def int_division(self, e: FloorDiv | FloorMod) -> str:
        b = e.b
        got = self.int_values(b)
        if got is not None:
            vals, pts = got
            zero = vals == 0
            if zero.any():
                return f"{e} divides by zero (at {pts.at(zero, collect_vars(b))})"
            minus_one = bool((vals == -1).any())
        else:
            bound = self.ana.const_int_bound(b)
            if not (bound.min_value > 0 or bound.max_value < 0):
                return f"cannot prove the divisor {b} of {e} nonzero"
            minus_one = bound.min_value <= -1 <= bound.max_value
        if not minus_one or dt.is_uint(e.dtype):
            return ""
        # The minimum of a signed type divided by -1 overflows.
        got = self.int_values(e.a)
        lo = int(got[0].min()) if got is not None and got[0].size else self.ana.const_int_bound(e.a).min_value
        if lo > int(dt.min_value(e.dtype)):
            return ""
        return f"{e} may overflow (the lowest {e.dtype} divided by -1)"

    def nonzero_int(self, e: PrimExpr) -> bool:
        got = self.int_values(e)
        if got is not None:
            return not bool((got[0] == 0).any())
        bound = self.ana.const_int_bound(e)
        return bound.min_value > 0 or bound.max_value < 0

    # --- float nodes, calls and casts ----------------------------------------------------------------
    def float_node(self, e: PrimExpr) -> str:
        pts = self.points(e)
        if pts is not None:
            try:
                with np.errstate(all="ignore"):
                    div = _values(e.b, pts) if isinstance(e, (Div, FloorDiv, FloorMod)) else None
                    vals = _values(e.value if isinstance(e, Cast) else e, pts)
            except _enum.NotEnumerable:
                pass
            else:
                used = collect_vars(e)
                if div is not None and (div == 0).any():
                    return f"{e} divides by zero (at {pts.at(div == 0, used)})"
                bad = _bad(e, vals)
                if bad.any():
                    return f"{e} is not finite or undefined (at {pts.at(bad, used)})"
                return ""
        return self.structural(e)

    def structural(self, e: PrimExpr) -> str:
        if isinstance(e, (Div, FloorDiv, FloorMod)):
            b = e.b
            if isinstance(b, FloatImm) and b.value != 0 and math.isfinite(b.value):
                return ""
            # |an integer| >= 1 when nonzero, so a finite dividend stays finite
            if isinstance(b, Cast) and dt.is_int(b.value.dtype) and self.nonzero_int(b.value):
                return ""
            return f"cannot prove the divisor {b} of {e} nonzero"
        if isinstance(e, Call):
            if e.op in _FINITE_CALLS:
                return ""
            return f"cannot prove that {e} is defined and finite"
        return f"cannot prove that the cast {e} does not overflow"


def _bad(e: PrimExpr, vals: np.ndarray) -> np.ndarray:
    """Where the node's values (its operand's, for a cast) are not finite or not representable."""
    out: np.ndarray
    with np.errstate(all="ignore"):
        if not isinstance(e, Cast):
            out = ~np.isfinite(vals) if dt.is_float(e.dtype) else np.zeros(vals.shape, dtype=bool)
        elif dt.is_float(e.dtype):
            v = vals.astype(np.float64)
            out = ~np.isfinite(v) | (np.abs(v) > _finite_max(e.dtype))
        else:  # float -> int: defined only for finite values in the target's range
            t = np.trunc(vals.astype(np.float64))
            out = ~np.isfinite(t) | (t < int(dt.min_value(e.dtype))) | (t > int(dt.max_value(e.dtype)))
    return out


def _values(e: PrimExpr, pts: _Points) -> np.ndarray:
    """``e`` at every point, in its own type (floats rounded after each operation, as the
    device does); unchecked: every node that can fail is checked on its own."""
    if not dt.is_float(e.dtype) and not _has_float(e):
        return _enum.evaluate(e, pts.env, pts.size)
    if dt.lanes(e.dtype) != 1:
        raise _enum.NotEnumerable(f"vector expression {e}")
    out: np.ndarray
    if isinstance(e, FloatImm):
        out = np.full(pts.size, e.value, dtype=_np_type(e.dtype))
    elif isinstance(e, Cast):
        v = _values(e.value, pts)
        out = v != 0 if dt.is_bool(e.dtype) else (v if dt.is_float(e.dtype) else np.trunc(v))
        out = out.astype(_np_type(e.dtype))
    elif isinstance(e, Select):
        c = _values(e.condition, pts) != 0
        out = np.where(c, _values(e.true_value, pts), _values(e.false_value, pts))
    elif isinstance(e, Call) and e.op in _NUMPY_CALLS:
        out = _NUMPY_CALLS[e.op](*[_values(a, pts) for a in e.args])
        out = out.astype(_np_type(e.dtype))
    elif isinstance(e, Not):
        out = _values(e.a, pts) == 0
    elif isinstance(e, (And, Or, BinaryOp)) and e.symbol in _OPS:
        t = _np_type(e.a.dtype if isinstance(e, CmpOp) else e.dtype)
        a, b = _values(e.a, pts).astype(t), _values(e.b, pts).astype(t)
        if isinstance(e, (FloorDiv, FloorMod)) and not dt.is_float(e.dtype) and (b == 0).any():
            raise _enum.NotEnumerable(f"division by zero in {e}")
        out = _OPS[e.symbol](a, b)
    else:
        raise _enum.NotEnumerable(f"cannot evaluate {type(e).__name__} {e}")
    return out


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.floor_divide(a, b) if a.dtype.kind in "iu" else np.floor(a / b)
    return out


def _floor_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.mod(a, b) if a.dtype.kind in "iu" else a - b * np.floor(a / b)
    return out


_OPS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "//": _floor_div,
    "%": _floor_mod, "min": np.minimum, "max": np.maximum, "<": np.less, "<=": np.less_equal,
    ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
    "and": np.logical_and, "or": np.logical_or,
}  # fmt: skip


def _np_type(dtype: str) -> np.dtype:
    """The numpy type computing ``dtype``'s values (integers exactly, in int64)."""
    e = dt.element(dtype)
    if e == "bfloat16":
        raise _enum.NotEnumerable("bfloat16 arithmetic is not evaluated")
    return np.dtype(e) if dt.is_float(e) or e == "bool" else np.dtype(np.int64)


def _has_float(e: PrimExpr) -> bool:
    return dt.is_float(e.dtype) or any(_has_float(k) for k in _children(e))
