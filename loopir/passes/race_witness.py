"""The race checker's witness search: the instances of two accesses, evaluated over sampled
launch sizes as NumPy arrays ([`loopir.passes.race_check`][loopir.passes.race_check]'s
``_Kernel`` builds them), sorted and grouped by element, block and barrier count to find one
pair from different threads touching an element with nothing ordering them: the concrete
race that the checker reports (a symbolic proof failed, and the witness shows it is real)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from loopir.ir.expr import Var

__all__: list[str] = []


@attrs.frozen(eq=False)
class _Points:
    """The instances of one access: element tuple, block, thread and barrier count."""

    elem: tuple[np.ndarray, ...]
    block: np.ndarray
    thread: np.ndarray
    count: np.ndarray
    env: dict[Var, np.ndarray]
    approx: bool  # guards that could not be evaluated were taken as true
    value: np.ndarray | None = None  # instances with equal codes store equal values


def _linear(coords: Sequence[np.ndarray], extents: Sequence[int], size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.int64)
    for c, e in zip(coords, extents):
        out = out * e + c
    return out


@attrs.frozen
class _Witness:
    index: tuple[int, ...]
    first: dict[str, int]
    second: dict[str, int]


def _conflict(a: _Points, b: _Points, shared: bool) -> _Witness | None:
    """A pair of instances of ``a`` and ``b`` from different threads touching one element
    with nothing ordering them, or None."""
    na, nb = len(a.block), len(b.block)
    if not na or not nb:
        return None
    elem = [np.concatenate([x, y]) for x, y in zip(a.elem, b.elem)]
    side = np.concatenate([np.zeros(na, np.int8), np.ones(nb, np.int8)])
    block = np.concatenate([a.block, b.block])
    thread = np.concatenate([a.thread, b.thread])
    count = np.concatenate([a.count, b.count])
    value = None
    if a.value is not None and b.value is not None and a.value is b.value:
        value = np.concatenate([a.value, b.value])  # one store with itself: equal values agree
    rows = _conflicting_rows(elem, side, block, thread, count, shared, value)
    if rows is None:
        return None
    i, j = rows
    return _Witness(
        tuple(int(x[i]) for x in elem),
        _describe(a, i),
        _describe(b, j - na),
    )


def _conflicting_rows(
    elem: list[np.ndarray], side: np.ndarray, block: np.ndarray, thread: np.ndarray,
    count: np.ndarray, shared: bool, value: np.ndarray | None = None,
) -> tuple[int, int] | None:
    # Same-block pairs need the same barrier count; for global memory two blocks always race.
    keys: list[list[np.ndarray]] = [[*elem, block, count]]
    if not shared:
        keys.insert(0, [*elem])
    for key in keys:
        who = block if (not shared and key is keys[0]) else thread
        found = _group_pair(key, side, who, value)
        if found is not None:
            return found
    return None


_BIG = np.iinfo(np.int64).max


def _groups(key: list[np.ndarray], tiebreak: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Rows sorted by ``key`` (then ``tiebreak``): the order, each sorted row's group id
    (rows with equal ``key``) and the number of groups."""
    order = np.lexsort([tiebreak, *reversed(key)])
    same = np.ones(len(order), dtype=bool)
    for k in key:
        kk = k[order]
        same[1:] &= kk[1:] == kk[:-1]
    same[:1] = False
    gid = np.cumsum(~same) - 1
    return order, gid, int(gid[-1]) + 1 if len(gid) else 0


def _minmax(gid: np.ndarray, n: int, arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the least and greatest of ``arr`` (``_BIG`` / ``-_BIG`` for an empty one)."""
    lo, hi = np.full(n, _BIG), np.full(n, -_BIG)
    np.minimum.at(lo, gid, arr)
    np.maximum.at(hi, gid, arr)
    return lo, hi


def _group_pair(
    key: list[np.ndarray], side: np.ndarray, who: np.ndarray, value: np.ndarray | None = None
) -> tuple[int, int] | None:
    """Rows i (side 0) and j (side 1) with equal ``key`` and different ``who`` (and, with
    ``value``, different values: threads storing one value to one element do not race)."""
    if value is not None:
        return _group_pair_values(key, side, who, value)
    order, gid, n = _groups(key, who)
    s, w = side[order], who[order]
    (lo0, hi0), (lo1, hi1) = (_minmax(gid[s == sd], n, w[s == sd]) for sd in (0, 1))
    both = (lo0 != _BIG) & (lo1 != _BIG)
    differ = both & ~((lo0 == hi0) & (lo1 == hi1) & (lo0 == lo1))
    if not differ.any():
        return None
    rows = order[gid == int(np.argmax(differ))]
    ws, ss = who[rows], side[rows]
    for i in rows[ss == 0]:
        other = rows[(ss == 1) & (ws != who[i])]
        if len(other):
            return int(i), int(other[0])
    return None  # pragma: no cover - differ guarantees a pair


def _group_pair_values(
    key: list[np.ndarray], side: np.ndarray, who: np.ndarray, value: np.ndarray
) -> tuple[int, int] | None:
    # Both sides are one store: a group races iff it holds two threads and two values (then
    # some pair differs in both).
    one = side == 0
    ks, w, v = [k[one] for k in key], who[one], value[one]
    order, gid, n = _groups(ks, w)
    stats = [lo != hi for lo, hi in (_minmax(gid, n, w[order]), _minmax(gid, n, v[order]))]
    bad = stats[0] & stats[1]
    if not bad.any():
        return None
    rows = order[gid == int(np.argmax(bad))]
    base = np.flatnonzero(one)
    for i in rows:
        other = rows[(w[rows] != w[i]) & (v[rows] != v[i])]
        if len(other):
            return int(base[i]), int(base[other[0]]) + len(side) // 2
    return None  # pragma: no cover - bad guarantees a pair


def _describe(p: _Points, row: int) -> dict[str, int]:
    return {v.name: int(a[row]) for v, a in p.env.items()}
