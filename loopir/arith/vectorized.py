"""The numpy-vectorized backend of [`loopir.arith.evaluate`][loopir.arith.evaluate.evaluate]: an
expression at many points.

Some facts the lowering and the verifier need are hard for an interval analysis but trivial to
decide by looking at every point of a small iteration domain: "is this store index injective over
the iterations where this guard holds?", "does this binding leave its domain?". For domains of at
most [`MAX_POINTS`][loopir.arith.vectorized.MAX_POINTS] points this module evaluates integer and
bool expressions on all points at once, with exactly the semantics of the scalar evaluator
([`loopir.arith.evaluate`][loopir.arith.evaluate]), which are the C semantics the executors
implement:

* ``//`` and ``%`` are floor division and floor modulo;
* a [`Cast`][loopir.ir.expr.Cast] to an integer type wraps to the target width, a cast to bool tests
  nonzero;
* ``Select`` evaluates each branch only at the points that take it, and ``and``/``or``
  short-circuit, so a guarded division by zero is not an error;
* arithmetic is exact: values that could leave the exact range of int64 raise
  [`NotEnumerable`][loopir.arith.vectorized.NotEnumerable] instead of wrapping silently.

The bitwise intrinsics (``loopir.arith.bitwise``) evaluate as in C on two's complement values.
The result is a proof by exhaustion; anything it cannot evaluate (loads, other calls, floats, vectors, a
division by zero at a point that evaluates it) raises
[`NotEnumerable`][loopir.arith.vectorized.NotEnumerable], and callers fall back to the symbolic
analyzer or to the conservative answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from loopir.arith.bitwise import is_bitwise
from loopir.errors import ArithError
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

__all__ = ["MAX_POINTS", "NotEnumerable", "domain", "evaluate", "hull"]

MAX_POINTS = 1 << 18
"""Largest iteration domain [`domain`][loopir.arith.vectorized.domain] enumerates (keeps every proof
well under a second)."""

# Every computed value stays below this magnitude (checked before each operation, from its
# operands' magnitudes), so that it is exact and callers can still combine results in int64.
_SAFE = 1 << 40


class NotEnumerable(ArithError):
    """The expression or domain cannot be evaluated exhaustively."""


def domain(ranges: Sequence[tuple[Var, int, int]]) -> dict[Var, np.ndarray]:
    """All points of the box ``{v: [lo, lo + extent)}`` as flat int64 arrays (one per var).

    Raises
    ------
    NotEnumerable
        If the domain has more than [`MAX_POINTS`][loopir.arith.vectorized.MAX_POINTS] points.
    """
    total = 1
    for _, _, ext in ranges:
        total *= max(int(ext), 0)
    if total > MAX_POINTS:
        raise NotEnumerable(f"domain: {total} points exceed MAX_POINTS={MAX_POINTS}")
    if not ranges:
        return {}
    axes = [np.arange(lo, lo + max(int(ext), 0), dtype=np.int64) for _, lo, ext in ranges]
    grids = np.meshgrid(*axes, indexing="ij")
    return {v: g.reshape(-1) for (v, _, _), g in zip(ranges, grids)}


def _terms(e: PrimExpr, sign: int, out: list[tuple[int, PrimExpr]]) -> None:
    if isinstance(e, Add):
        _terms(e.a, sign, out)
        _terms(e.b, sign, out)
    elif isinstance(e, Sub):
        _terms(e.a, sign, out)
        _terms(e.b, -sign, out)
    else:
        out.append((sign, e))


def _components(parts: Sequence[list[Var]]) -> list[set[Var]]:
    """The connected components of the variables, two being connected when one part uses both."""
    parent: dict[Var, Var] = {}

    def find(v: Var) -> Var:
        while parent.setdefault(v, v) is not v:
            v = parent[v]
        return v

    for vs in parts:
        for v in vs[1:]:
            a, b = find(vs[0]), find(v)
            if a is not b:
                parent[a] = b
        if vs:
            find(vs[0])
    groups: dict[Var, set[Var]] = {}
    for v in parent:
        groups.setdefault(find(v), set()).add(v)
    return list(groups.values())


def hull(e: PrimExpr, ranges: Sequence[tuple[Var, int, int]],
         conds: Sequence[PrimExpr] = ()) -> tuple[int, int] | None:  # fmt: skip
    """Exact ``(min, max)`` of integer expression ``e`` over the box ``ranges`` (as for
    [`domain`][loopir.arith.vectorized.domain]) restricted to the points where every ``conds``
    holds; None when no point does.

    ``e`` is split into its additive terms and the box into independent parts: variables are
    grouped when a term or a condition uses them together, and each group is enumerated on its
    own (the extremes of a sum of terms over disjoint variables of a box are the sums of the
    terms' extremes). A tile index such as ``b // 18 * 128 + t // 32 * 16 + i * 4 + k`` costs
    the sum of its variables' extents, not their product.

    Raises
    ------
    NotEnumerable
        As [`evaluate`][loopir.arith.evaluate], or when a group has more than ``MAX_POINTS``
        points.
    """
    from loopir.ir.functor import collect_vars

    known = {v: (lo, ext) for v, lo, ext in ranges}
    terms: list[tuple[int, PrimExpr]] = []
    _terms(e, 1, terms)
    term_vars = [collect_vars(t) for _, t in terms]
    cond_vars = [collect_vars(c) for c in conds]
    for vs in (*term_vars, *cond_vars):
        for v in vs:
            if v not in known:
                raise NotEnumerable(f"hull: variable {v.name} has no range")
    lo_total = hi_total = 0
    empty = False  # decided after every group is evaluated: each may still refuse
    for group in _components([*term_vars, *cond_vars]):
        box = [(v, *known[v]) for v, _, _ in ranges if v in group]
        env = domain(box)
        size = next(iter(env.values())).size if env else 1
        mask: np.ndarray | None = None
        for c, vs in zip(conds, cond_vars):
            if vs and vs[0] in group:
                m = evaluate(c, env, size) != 0
                mask = m if mask is None else mask & m
        vals = np.zeros(size, dtype=np.int64)
        for (sign, t), vs in zip(terms, term_vars):
            if vs and vs[0] in group:
                tv = evaluate(t, env, size)
                vals = vals + tv if sign > 0 else vals - tv
        if mask is not None:
            vals = vals[mask]
        if vals.size == 0:
            empty = True
            continue
        lo_total += int(vals.min())
        hi_total += int(vals.max())
    env0: dict[Var, np.ndarray] = {}
    for (sign, t), vs in zip(terms, term_vars):
        if not vs:  # constant terms
            c0 = int(evaluate(t, env0, 1)[0]) * sign
            lo_total += c0
            hi_total += c0
    for c, vs in zip(conds, cond_vars):
        if not vs and not bool(evaluate(c, env0, 1)[0]):
            empty = True
    return None if empty else (lo_total, hi_total)


def evaluate(e: PrimExpr, env: Mapping[Var, np.ndarray], size: int) -> np.ndarray:
    """Evaluate integer/bool expression ``e`` at ``size`` points.

    Parameters
    ----------
    e
        A scalar integer or bool expression.
    env
        Each variable's values at the points: an array of length ``size`` (or anything that
        broadcasts to it).
    size
        The number of points.

    Returns
    -------
    numpy.ndarray
        Length ``size``: int64 for integer expressions, bool for bool ones.

    Raises
    ------
    NotEnumerable
        For a variable not in ``env``, a buffer load, a call, a float or vector expression, a
        value beyond exact int64 range, or a division by zero at a point that evaluates it.
    """
    return _Eval(env, size).run(e, None)


_CMP: dict[type, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    LT: np.less, LE: np.less_equal, GT: np.greater, GE: np.greater_equal,
    EQ: np.equal, NE: np.not_equal,
}  # fmt: skip


def _mag(a: np.ndarray) -> int:
    if not a.size:
        return 0
    lo, hi = int(a.min()), int(a.max())
    return max(abs(lo), abs(hi))


class _Eval:
    """One evaluation; ``idx`` (None: every point) selects the points a subtree is asked at."""

    def __init__(self, env: Mapping[Var, np.ndarray], size: int) -> None:
        self.env = env
        self.size = size

    def n(self, idx: np.ndarray | None) -> int:
        return self.size if idx is None else int(idx.size)

    def run(self, e: PrimExpr, idx: np.ndarray | None) -> np.ndarray:
        if dt.lanes(e.dtype) != 1 or not (dt.is_int(e.dtype) or dt.is_bool(e.dtype)):
            raise NotEnumerable(
                f"vectorized evaluate: {type(e).__name__} of dtype {e.dtype} is not a scalar "
                "integer or bool expression"
            )
        out = self._node(e, idx)
        return out.astype(bool) if dt.is_bool(e.dtype) else out

    def _node(self, e: PrimExpr, idx: np.ndarray | None) -> np.ndarray:
        # isinstance (not type(e) is ...) so that the checker narrows; these classes are leaves
        if isinstance(e, IntImm):
            return np.full(self.n(idx), e.value, dtype=np.int64)
        if isinstance(e, Var):
            try:
                v = self.env[e]
            except KeyError:
                raise NotEnumerable(f"vectorized evaluate: variable {e.name!r} has no values") from None
            a = np.broadcast_to(np.asarray(v, dtype=np.int64), (self.size,))
            return a if idx is None else a[idx]
        if isinstance(e, (Add, Sub, Mul)):
            a, b = self.run(e.a, idx).astype(np.int64), self.run(e.b, idx).astype(np.int64)
            ma, mb = _mag(a), _mag(b)
            if (ma * mb if isinstance(e, Mul) else ma + mb) >= _SAFE:
                raise NotEnumerable(
                    f"vectorized evaluate: {type(e).__name__} {e} may leave the exact int64 range"
                )
            out: np.ndarray = a * b if isinstance(e, Mul) else (a + b if isinstance(e, Add) else a - b)
            return out
        if isinstance(e, (Min, Max)):
            a, b = self.run(e.a, idx), self.run(e.b, idx)
            return np.minimum(a, b) if isinstance(e, Min) else np.maximum(a, b)
        if isinstance(e, (FloorDiv, FloorMod)):
            a, b = self.run(e.a, idx), self.run(e.b, idx)
            if np.any(b == 0):
                what = "modulo" if isinstance(e, FloorMod) else "division"
                raise NotEnumerable(f"vectorized evaluate: division by zero ({what}) in {e}")
            # numpy's // and % on integers are floor division and floor modulo, as in the IR
            return np.floor_divide(a, b) if isinstance(e, FloorDiv) else np.mod(a, b)
        if isinstance(e, CmpOp) and type(e) in _CMP:
            return _CMP[type(e)](self.run(e.a, idx), self.run(e.b, idx))
        if isinstance(e, Not):
            out = self.run(e.a, idx) == 0
            return out
        if isinstance(e, (And, Or)):
            return self._logic(e, idx)
        if isinstance(e, Select):
            return self._select(e, idx)
        if isinstance(e, Cast):
            return self._cast(e, idx)
        if isinstance(e, Call) and is_bitwise(e):
            return self._bitwise(e, idx)
        raise NotEnumerable(f"vectorized evaluate: cannot evaluate a {type(e).__name__} node ({e})")

    def _bitwise(self, e: Call, idx: np.ndarray | None) -> np.ndarray:
        """The bitwise intrinsics with ``loopir.arith.bitwise``'s semantics (numpy's operators
        on int64 are two's complement, ``>>`` arithmetic)."""
        args = [self.run(a, idx).astype(np.int64) for a in e.args]
        if e.op == "bitwise_not":
            return np.invert(args[0])
        a, b = args
        if e.op in ("shift_left", "shift_right"):
            if b.size and (int(b.min()) < 0 or int(b.max()) >= dt.bits(e.dtype)):
                raise NotEnumerable(f"vectorized evaluate: a shift amount of {e} leaves [0, bits)")
            if e.op == "shift_right":
                return np.right_shift(a, b)
            if b.size and _mag(a) * (1 << int(b.max())) >= _SAFE:
                raise NotEnumerable(f"vectorized evaluate: {e} may leave the exact int64 range")
            return np.left_shift(a, b)
        fn = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
              "bitwise_xor": np.bitwise_xor}[e.op]  # fmt: skip
        out: np.ndarray = fn(a, b)
        return out

    def _sub(self, idx: np.ndarray | None, keep: np.ndarray) -> np.ndarray:
        """The points of ``idx`` where ``keep`` holds."""
        where = np.nonzero(keep)[0]
        return where if idx is None else idx[where]

    def _logic(self, e: And | Or, idx: np.ndarray | None) -> np.ndarray:
        a = self.run(e.a, idx) != 0
        # as in C, the right operand is evaluated only where the left one does not decide
        need = a if type(e) is And else ~a
        out: np.ndarray = a.copy()
        if need.any():
            out[need] = self.run(e.b, self._sub(idx, need)) != 0
        return out

    def _select(self, e: Select, idx: np.ndarray | None) -> np.ndarray:
        c = self.run(e.condition, idx) != 0
        out = np.zeros(c.size, dtype=np.int64)
        if c.any():
            out[c] = self.run(e.true_value, self._sub(idx, c))
        if (~c).any():
            out[~c] = self.run(e.false_value, self._sub(idx, ~c))
        return out

    def _cast(self, e: Cast, idx: np.ndarray | None) -> np.ndarray:
        v = self.run(e.value, idx)
        if dt.is_bool(e.dtype):
            nonzero: np.ndarray = v != 0
            return nonzero
        bits = dt.bits(e.dtype)
        if bits >= 64 and not dt.is_uint(e.dtype):
            return v.astype(np.int64)
        lo, hi = (int(v.min()), int(v.max())) if v.size else (0, 0)
        if dt.min_value(e.dtype) <= lo and hi <= dt.max_value(e.dtype):
            return v.astype(np.int64)  # every value fits: the cast changes nothing
        if bits >= 64:
            raise NotEnumerable(f"vectorized evaluate: {e} wraps beyond the int64 range")
        # wrap to the target width exactly as the scalar evaluator (and C) does
        mask = np.int64((1 << bits) - 1)
        w = v.astype(np.int64) & mask
        if not dt.is_uint(e.dtype):
            w = np.where(w >= (1 << (bits - 1)), w - (1 << bits), w)
        return w
