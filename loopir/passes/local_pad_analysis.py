"""Proof helpers of the LocalPadding pass: iteration domains, store safety, element predicates.

Each question is answered by exhaustion over the iteration domain (see :mod:`loopir.arith.vectorized`) when it is
small and constant, and otherwise by the arith analyzer; an unproven fact is treated as false,
so every doubt keeps a guard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs
import numpy as np

from loopir.arith import vectorized as _enum
from loopir.ir.buffer import Buffer
from loopir.ir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    BufferLoad,
    Call,
    Cast,
    IntImm,
    Not,
    Or,
    PrimExpr,
    Ramp,
    Var,
)
from loopir.ir.functor import collect_vars, post_order_visit
from loopir.ir.stmt import BufferStore, For
from loopir.passes._walk import loop_range

if TYPE_CHECKING:
    from loopir.arith import Analyzer

__all__ = [
    "ElementPred",
    "always_true",
    "image_within",
    "written_where",
    "analyzer",
    "atomic_reason",
    "common_prefix",
    "ElementSet",
    "within_bounds",
    "element_image",
    "index_use",
    "normalize_lt0",
    "StoreChecker",
    "store_safe",
    "strip_casts",
]


def analyzer(loops: Sequence[For]) -> Analyzer:
    """An Analyzer with every loop of ``loops`` bound to its range."""
    from loopir.arith import Analyzer

    ana = Analyzer()
    for f in loops:
        ana.bind(f.loop_var, loop_range(f))
    return ana


def common_prefix(a: Sequence[For], b: Sequence[For]) -> int:
    """How many outermost loops (the same nodes) ``a`` and ``b`` share."""
    n = 0
    while n < len(a) and n < len(b) and a[n] is b[n]:
        n += 1
    return n


def index_use(store: BufferStore, conds: Sequence[PrimExpr], buf: Buffer) -> str:
    """Where ``buf`` is read other than as a value: in a store index, a load index or a guard
    of ``store`` ('' when nowhere)."""

    def reads(es: Iterable[PrimExpr]) -> bool:
        return any(ld.buffer is buf for e in es for ld in loads_of(e))

    if reads(store.indices):
        return "a store index"
    if any(reads(ld.indices) for ld in loads_of(store.value)):
        return "a load index"
    if reads(conds):
        return "the guard"
    return ""


def has_load_or_call(e: PrimExpr) -> bool:
    found = False

    def f(n: object) -> None:
        nonlocal found
        if isinstance(n, (BufferLoad, Call)):
            found = True

    post_order_visit(e, f)
    return found


def atomic_reason(c: PrimExpr) -> str | None:
    """Why conjunct ``c`` must be kept as it is (None: it may be analysed)."""
    if isinstance(c, Or):
        return "'||' conjunct: never split or dropped"
    if isinstance(c, Not):
        return "'!' conjunct: never split or dropped"
    if isinstance(c, (EQ, NE)):
        return f"'{'==' if isinstance(c, EQ) else '!='}' conjunct: never dropped"
    if isinstance(c, Call) or has_load_or_call(c):
        return "contains a call or a load: never dropped"
    if not isinstance(c, (LT, LE, GT, GE)):
        return f"{type(c).__name__} conjunct is not a comparison: never dropped"
    return None


def normalize_lt0(c: PrimExpr) -> PrimExpr | None:
    """``d`` with ``c <=> d < 0`` for an integer comparison ``c`` (None otherwise)."""
    if not isinstance(c, (LT, LE, GT, GE)):
        return None
    from loopir.ir import dtype as dt

    if not dt.is_int(c.a.dtype):
        return None
    if isinstance(c, LT):
        return c.a - c.b
    if isinstance(c, LE):
        return c.a - c.b - 1
    if isinstance(c, GT):
        return c.b - c.a
    return c.b - c.a - 1


def _const_ranges(loops: Sequence[For]) -> list[tuple[Var, int, int]] | None:
    out = []
    for f in loops:
        if not isinstance(f.min, IntImm) or not isinstance(f.extent, IntImm):
            return None
        out.append((f.loop_var, f.min.value, f.extent.value))
    return out


def _mask(
    conds: Sequence[PrimExpr],
    xs: set[Var],
    env: Mapping[Var, np.ndarray],
    size: int,
    strict: bool = False,
) -> np.ndarray:
    mask = np.ones(size, dtype=bool)
    for c in conds:
        if set(collect_vars(c)) <= xs:
            mask &= _enum.evaluate(c, env, size) != 0
        elif strict:
            raise _enum.NotEnumerable(f"condition on variables outside the domain: {c}")
        # Otherwise the condition is dropped from the assumptions: proving a fact for every
        # point of a larger domain is still a proof.
    return mask


def store_safe(
    indices: Sequence[PrimExpr],
    buffer: Buffer,
    assumed: Sequence[PrimExpr],
    domain_loops: Sequence[For],
    all_loops: Sequence[For],
    injective: bool,
) -> tuple[bool, str]:
    """Whether a store to ``buffer[indices]`` guarded only by ``assumed`` is safe.

    Safe means: in bounds at every iteration, and (when ``injective``) no two iterations of
    ``domain_loops`` write the same element.

    Returns
    -------
    (bool, str)
        The verdict and, when unsafe or unproven, the reason.
    """
    return StoreChecker(indices, buffer, domain_loops, all_loops, injective)(assumed)


class StoreChecker:
    """[`store_safe`][loopir.passes.local_pad_analysis.store_safe] for one store under many
    candidate guards: the domain, the index values and each condition's mask are computed once
    (LocalPadding tries the guard without each of its conjuncts in turn)."""

    def __init__(self, indices: Sequence[PrimExpr], buffer: Buffer, domain_loops: Sequence[For],
                 all_loops: Sequence[For], injective: bool) -> None:  # fmt: skip
        from loopir.ir import dtype as dt

        self.buffer, self.injective = buffer, injective
        self.vector = any(
            isinstance(i, Ramp) or not dt.is_int(i.dtype) or dt.lanes(i.dtype) != 1 for i in indices
        )
        self.ana = analyzer(all_loops)
        self.idx = [] if self.vector else [self.ana.simplify(i) for i in indices]
        self.enumerated: tuple[Mapping[Var, np.ndarray], int, list[np.ndarray], list[int]] | None = None
        self.masks: dict[int, tuple[PrimExpr, np.ndarray]] = {}
        ranges = _const_ranges(domain_loops)
        if ranges is None or self.vector:
            return
        self.xs = {v for v, _, _ in ranges}
        try:
            shape = []
            for d in buffer.shape:
                if not isinstance(d, IntImm):
                    raise _enum.NotEnumerable("symbolic buffer shape")
                shape.append(d.value)
            env = _enum.domain(ranges)
            size = next(iter(env.values())).size if env else 1
            vals = [_enum.evaluate(i, env, size) for i in self.idx]
        except _enum.NotEnumerable:
            return
        self.enumerated = (env, size, vals, shape)

    def _mask(self, assumed: Sequence[PrimExpr]) -> np.ndarray | None:
        """Where ``assumed`` holds (each condition's mask computed once, by ``_mask``'s rule:
        a condition on variables outside the domain is dropped); None: not evaluable."""
        assert self.enumerated is not None
        env, size, _, _ = self.enumerated
        mask = np.ones(size, dtype=bool)
        try:
            for c in assumed:
                hit = self.masks.get(id(c))
                if hit is None or hit[0] is not c:
                    hit = (c, _mask([c], self.xs, env, size))
                    self.masks[id(c)] = hit
                mask &= hit[1]
        except _enum.NotEnumerable:
            return None
        return mask

    def __call__(self, assumed: Sequence[PrimExpr]) -> tuple[bool, str]:
        if self.vector:
            return False, "vector store index: not analysed"
        buffer = self.buffer
        mask = None if self.enumerated is None else self._mask(assumed)
        if self.enumerated is not None and mask is not None:
            _, _, vals, shape = self.enumerated
            for d, (v, n) in enumerate(zip(vals, shape)):
                vv = v[mask]
                if vv.size and (vv.min() < 0 or vv.max() >= n):
                    return False, (
                        f"without it the store index {self.idx[d]} of {buffer.name} could leave "
                        f"[0, {n}) (reaches {int(vv.min())}..{int(vv.max())})"
                    )
            if self.injective:
                lin = np.zeros(int(mask.sum()), dtype=np.int64)
                for v, n in zip(vals, shape):
                    lin = lin * n + v[mask]
                if np.unique(lin).size != lin.size:
                    return False, (
                        f"without it two iterations could write the same element of {buffer.name}"
                    )
            return True, ""
        for d, (i, dim) in enumerate(zip(self.idx, buffer.shape)):
            if not (self.ana.can_prove(i >= 0) and self.ana.can_prove(i < dim)):
                return False, f"cannot prove the store index {self.idx[d]} of {buffer.name} stays in [0, {dim})"
        if self.injective:
            return False, (
                f"cannot prove that no two iterations write the same element of {buffer.name} "
                "(iteration domain not enumerable)"
            )
        return True, ""


@attrs.frozen(eq=False)
class ElementSet:
    """A set of integer tuples held as the rows of an array: the inclusion and disjointness
    tests run in numpy (sorting), not over Python tuples."""

    rows: np.ndarray  # (n, k) int64

    def _keys(self, other: ElementSet) -> tuple[np.ndarray, np.ndarray]:
        """Each row as one integer (a mixed radix over both sets' column ranges)."""
        a, b = self.rows, other.rows
        if not len(a) or not len(b) or not a.shape[1]:
            return np.zeros(len(a), np.int64), np.zeros(len(b), np.int64)
        both = np.concatenate([a, b])
        lo = both.min(axis=0)
        width = [int(w) for w in both.max(axis=0) - lo + 1]
        stride, strides = 1, []
        for w in reversed(width):
            strides.append(stride)
            stride *= w
        if stride >= 2**62:  # too wide for one int64: compare the rows as raw bytes
            va, vb = (np.ascontiguousarray(x).view(np.dtype((np.void, 8 * x.shape[1]))).ravel()
                      for x in (a, b))  # fmt: skip
            return va, vb
        st = strides[::-1]

        def key(x: np.ndarray) -> np.ndarray:  # integer matmul has no fast path: add columns
            out = np.zeros(len(x), np.int64)
            for j, k in enumerate(st):
                out += (x[:, j] - lo[j]) * k
            return out

        return key(a), key(b)

    def __le__(self, other: ElementSet) -> bool:
        ka, kb = self._keys(other)
        return bool(np.isin(ka, kb).all())

    def isdisjoint(self, other: ElementSet) -> bool:
        ka, kb = self._keys(other)
        return not bool(np.isin(ka, kb).any())

    def __len__(self) -> int:
        return len(self.rows)

    def box(self) -> list[tuple[int, int]] | None:
        """Per column ``(lo, hi)`` when the set is every tuple of that box (else None)."""
        rows = self.rows
        if not len(rows):
            return None
        lo, hi = rows.min(axis=0), rows.max(axis=0)
        volume = 1
        for a, b in zip(lo, hi):
            volume *= int(b) - int(a) + 1
            if volume > len(rows):  # fewer rows than points: not the whole box
                return None
        distinct = len(np.unique(rows, axis=0)) if rows.shape[1] else 1
        if volume != distinct:
            return None
        return [(int(a), int(b)) for a, b in zip(lo, hi)]

    def is_whole(self, shape: Sequence[int]) -> bool:
        """Whether the set is every element of a buffer of ``shape`` (and nothing else)."""
        rows = self.rows
        if rows.shape[1] != len(shape):
            return False
        inside = all(((rows[:, j] >= 0) & (rows[:, j] < n)).all() for j, n in enumerate(shape))
        total = int(np.prod(shape)) if len(shape) else 1
        return inside and len(np.unique(rows, axis=0)) == total


def within_bounds(indices: Sequence[PrimExpr], shape: Sequence[int], loops: Sequence[For]) -> bool:
    """Whether every index stays inside ``shape`` over the loops' ranges (interval analysis:
    a proof whose cost does not grow with the loops' extents)."""
    ana = analyzer(loops)
    for i, n in zip(indices, shape):
        b = ana.const_int_bound(i)
        if b.min_value < 0 or b.max_value >= n:
            return False
    return True


def _rows(cols: list[np.ndarray], mask: np.ndarray) -> ElementSet:
    if not cols:
        return ElementSet(np.zeros((1 if mask.any() else 0, 0), np.int64))
    return ElementSet(np.stack([c[mask].astype(np.int64) for c in cols], axis=1))


def element_image(
    indices: Sequence[PrimExpr],
    buffer: Buffer,
    assumed: Sequence[PrimExpr],
    domain_loops: Sequence[For],
    all_loops: Sequence[For],
    exact: bool = False,
) -> ElementSet | None:
    """The set of elements ``buffer[indices]`` touched over the domain (None: unknown).

    Conditions on variables outside the domain are ignored, which over-approximates the set
    (right for "what may be read"); with ``exact`` they make the answer unknown instead (needed
    for "what is surely written")."""
    ranges = _const_ranges(domain_loops)
    if ranges is None:
        return None
    ana = analyzer(all_loops)
    idx = [ana.simplify(i) for i in indices]
    xs = {v for v, _, _ in ranges}
    try:
        env = _enum.domain(ranges)
        size = next(iter(env.values())).size if env else 1
        vals = [_enum.evaluate(i, env, size) for i in idx]
        mask = _mask(assumed, xs, env, size, strict=exact)
    except _enum.NotEnumerable:
        return None
    return _rows(vals, mask)


def image_within(
    indices: Sequence[PrimExpr],
    assumed: Sequence[PrimExpr],
    domain_loops: Sequence[For],
    all_loops: Sequence[For],
    box: Sequence[tuple[int, int]],
) -> bool | None:
    """Whether [`element_image`][loopir.passes.local_pad_analysis.element_image] of ``indices``
    lies inside ``box`` (per index, an inclusive ``(lo, hi)``); None when it cannot be evaluated.

    A tuple set lies inside a box exactly when each column's range does, and each column's
    exact range over the domain costs the sum of its independent variables' extents
    ([`hull`][loopir.arith.vectorized.hull]), not the product of all of them."""
    ranges = _const_ranges(domain_loops)
    if ranges is None:
        return None
    ana = analyzer(all_loops)
    xs = {v for v, _, _ in ranges}
    usable = [c for c in assumed if set(collect_vars(c)) <= xs]
    try:
        for i, (lo, hi) in zip(indices, box):
            got = _enum.hull(ana.simplify(i), ranges, usable)
            if got is None:
                return True  # no point of the domain reads anything
            if got[0] < lo or got[1] > hi:
                return False
    except _enum.NotEnumerable:
        return None
    return True


def written_where(
    indices: Sequence[PrimExpr],
    keys: Sequence[Var],
    loops: Sequence[For],
    assumed: Sequence[PrimExpr],
    unless: Sequence[PrimExpr] = (),
) -> ElementSet | None:
    """The ``(keys, indices)`` values over every point of ``loops`` (all of them, outermost
    included) where ``assumed`` holds and, given ``unless``, not all of ``unless`` hold.

    Conditions of ``assumed`` on other variables are dropped (a superset); ``unless`` must be
    evaluable exactly. None when the nest is too large or something cannot be evaluated."""
    ranges = _const_ranges(loops)
    if ranges is None:
        return None
    xs = {v for v, _, _ in ranges}
    ana = analyzer(loops)
    try:
        env = _enum.domain(ranges)
        size = next(iter(env.values())).size if env else 1
        mask = _mask(assumed, xs, env, size)
        if unless:
            mask &= ~_mask(unless, xs, env, size, strict=True)
        cols = [_enum.evaluate(ana.simplify(e), env, size) for e in (*keys, *indices)]
    except _enum.NotEnumerable:
        return None
    return _rows(cols, mask)


def always_true(
    cond: PrimExpr,
    assumed: Sequence[PrimExpr],
    domain_loops: Sequence[For],
    all_loops: Sequence[For],
) -> bool:
    """Whether ``cond`` holds at every point of the domain where ``assumed`` holds (exact:
    assumptions on other variables make the answer False)."""
    ranges = _const_ranges(domain_loops)
    if ranges is None:
        return False
    xs = {v for v, _, _ in ranges}
    ana = analyzer(all_loops)
    try:
        env = _enum.domain(ranges)
        size = next(iter(env.values())).size if env else 1
        mask = _mask(assumed, xs, env, size, strict=True)
        vals = _enum.evaluate(ana.simplify(cond), env, size) != 0
    except _enum.NotEnumerable:
        return False
    return bool(vals[mask].all())


@attrs.frozen(eq=False)
class ElementPred:
    """``sign * (p[dim] + offset) + rest < 0``: true exactly for the real (unpadded) elements
    ``p`` of a padded buffer, as far as one inlined fetch conjunct is concerned."""

    dim: int
    sign: int
    offset: PrimExpr
    rest: PrimExpr
    source: PrimExpr  # the fetch conjunct it came from (for reports)

    def at(self, p: Sequence[PrimExpr]) -> PrimExpr:
        return self.sign * (p[self.dim] + self.offset) + self.rest


def strip_casts(e: PrimExpr) -> PrimExpr:
    from loopir.ir import dtype as dt

    while isinstance(e, Cast) and dt.is_float(e.dtype) == dt.is_float(e.value.dtype):
        e = e.value
    return e


def loads_of(e: PrimExpr) -> list[BufferLoad]:
    out: list[BufferLoad] = []

    def f(n: object) -> None:
        if isinstance(n, BufferLoad):
            out.append(n)

    post_order_visit(e, f)
    return out
