"""Sampling instructions: the pure part (draws and decision checks) behind ``sch.sample_*``.

As in TVM's MetaSchedule, a sampling instruction draws a *decision* from the schedule's random
state and the trace records it; replay with a recorded decision is deterministic, and a tuner
mutates a trace by changing or removing decisions (:meth:`loopir.Trace.with_decision`,
:meth:`loopir.Trace.without_decisions`).

Decisions (all JSON literals):

- ``sample_perfect_tile``: the list of factors, outermost first.
- ``sample_categorical``: the index of the chosen candidate (TVM's decision).
- ``sample_compute_location``: ``-2`` inline, ``-1`` root (stay where it is), ``i >= 0`` the
  ``i``-th candidate loop (TVM's encoding).
"""

from __future__ import annotations

import functools
import math
import random
from typing import TYPE_CHECKING, Any

from loopir.errors import ScheduleError
from loopir.ir.expr import IntImm, Var
from loopir.ir.stmt import For, PrimFunc
from loopir.schedule import tree

if TYPE_CHECKING:
    from loopir.schedule.schedule import Schedule
    from loopir.schedule.trace import BlockRV, ExprRV, LoopRV

#: ``sample_compute_location`` decisions for the two markers (TVM's encoding).
INLINE = -2
ROOT = -1


class Mark:
    """What a marker LoopRV of ``sample_compute_location`` resolves to (TVM's root/inline
    marks): ``compute_at`` to the root mark does nothing, to the inline mark inlines."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name} mark>"


ROOT_MARK = Mark("root")
INLINE_MARK = Mark("inline")


def _divisors(x: int) -> list[int]:
    small, large = [], []
    d = 1
    while d * d <= x:
        if x % d == 0:
            small.append(d)
            if d * d != x:
                large.append(x // d)
        d += 1
    return small + large[::-1]


@functools.lru_cache(maxsize=4096)
def _count(x: int, k: int) -> int:
    """Ordered factorizations of ``x`` into ``k`` positive factors."""
    if k == 1:
        return 1
    return sum(_count(x // d, k - 1) for d in _divisors(x))


def _weighted(rng: random.Random, items: list[int], weights: list[int]) -> int:
    # Exact integer weights: the counts can exceed float precision for large extents.
    r = rng.randrange(sum(weights))
    for item, w in zip(items, weights):
        if r < w:
            return item
        r -= w
    raise AssertionError("unreachable")  # pragma: no cover


def loop_extent(loop: For, primitive: str, func: PrimFunc) -> int:
    """The loop's constant extent, or a ScheduleError naming the primitive."""
    if not isinstance(loop.extent, IntImm):
        raise ScheduleError(
            f"loop {loop.loop_var.name} has the non-constant extent {loop.extent}; perfect "
            "tiles need a constant extent", primitive=primitive, func=func, node=loop,
        )  # fmt: skip
    return int(loop.extent.value)


def draw_perfect_tile(rng: random.Random, extent: int, n: int, max_innermost_factor: int) -> list[int]:
    """Draw ``n`` factors of ``extent`` (outermost first), uniformly over the valid tilings.

    Valid: the product is ``extent`` and the innermost factor is at most
    ``max_innermost_factor``. Sampling is exact (weights are counts of completions), so
    every valid tiling has the same probability.
    """
    if n == 1:
        return [extent]
    inner_choices = [d for d in _divisors(extent) if d <= max_innermost_factor]
    inner = _weighted(rng, inner_choices, [_count(extent // d, n - 1) for d in inner_choices])
    factors = [inner]
    rest = extent // inner
    for k in range(n - 1, 1, -1):  # k factors left for ``rest``; pick the innermost of them
        divs = _divisors(rest)
        d = _weighted(rng, divs, [_count(rest // d, k - 1) for d in divs])
        factors.append(d)
        rest //= d
    if n > 1:
        factors.append(rest)
    return factors[::-1]


def check_perfect_tile_args(n: Any, max_innermost_factor: Any) -> None:
    if type(n) is not int or n < 1:
        raise ScheduleError(f"n must be an int >= 1, got {n!r}", primitive="sample_perfect_tile")
    if type(max_innermost_factor) is not int or not (max_innermost_factor >= 1 or max_innermost_factor == -1):
        raise ScheduleError(
            f"max_innermost_factor must be an int >= 1 (or -1: no limit), got {max_innermost_factor!r}",
            primitive="sample_perfect_tile",
        )


def check_perfect_tile(decision: Any, extent: int, n: int, max_innermost_factor: int) -> list[int]:
    """Validate a recorded (or user-changed) perfect-tile decision."""

    def bad(why: str) -> ScheduleError:
        return ScheduleError(
            f"invalid decision={decision!r} for a {n}-way tile of extent {extent} "
            f"(max_innermost_factor={max_innermost_factor}): {why}",
            primitive="sample_perfect_tile",
        )

    if not isinstance(decision, list) or len(decision) != n:
        raise bad(f"expected a list of {n} ints")
    if any(type(f) is not int or f < 1 for f in decision):
        raise bad("every factor must be an int >= 1")
    if math.prod(decision) != extent:
        raise bad(f"the product is {math.prod(decision)}, not {extent}")
    if decision[-1] > max_innermost_factor:
        raise bad(f"the innermost factor {decision[-1]} exceeds {max_innermost_factor}")
    return list(decision)


def check_categorical(candidates: Any, probs: Any) -> list[float]:
    """Validate candidates (ints, as TVM) and probabilities; returns the normalized probs."""
    prim = "sample_categorical"
    if not isinstance(candidates, list) or not candidates:
        raise ScheduleError(f"candidates must be a non-empty list, got {candidates!r}", primitive=prim)
    if any(type(c) is not int for c in candidates):
        raise ScheduleError(f"candidates must be ints (as in TVM), got {candidates!r}", primitive=prim)
    if not isinstance(probs, list) or len(probs) != len(candidates):
        raise ScheduleError(
            f"probs must be a list of {len(candidates)} numbers (one per candidate), got {probs!r}",
            primitive=prim,
        )
    if any(type(p) not in (int, float) or not math.isfinite(p) or p < 0 for p in probs):
        raise ScheduleError(f"probs must be finite numbers >= 0, got {probs!r}", primitive=prim)
    total = float(sum(probs))
    if total <= 0:
        raise ScheduleError(f"probs must not all be zero, got {probs!r}", primitive=prim)
    return [p / total for p in probs]


def draw_categorical(rng: random.Random, probs: list[float]) -> int:
    """Draw an index with the given (normalized) probabilities."""
    r = rng.random()
    acc = 0.0
    last = max(i for i, p in enumerate(probs) if p > 0)
    for i, p in enumerate(probs):
        acc += p
        if r < acc and p > 0:
            return i
    return last  # rounding: the sum of the probs may fall just short of 1


def check_categorical_decision(decision: Any, candidates: list[int], probs: list[float]) -> int:
    if type(decision) is not int or not 0 <= decision < len(candidates):
        raise ScheduleError(
            f"invalid decision={decision!r}: expected a candidate index in [0, {len(candidates)})"
            f" for candidates {candidates}", primitive="sample_categorical",
        )  # fmt: skip
    return decision


def compute_locations(func: PrimFunc, block: str) -> tuple[list[Var], list[int]]:
    """Where ``compute_at(block, loop)`` is valid, and the decisions that are.

    Candidates are the loops enclosing every consumer of ``block`` in its scope (outermost
    first) on which ``compute_at`` succeeds; the decisions are ``ROOT`` (always), ``INLINE``
    when ``compute_inline`` succeeds, and the indices of the candidate loops. As TVM's
    ``CollectComputeLocation``, validity is decided by trying the primitive.
    """
    from loopir.schedule import compute_at as C
    from loopir.schedule import deps, inline

    decisions = [ROOT]
    try:
        inline.compute_inline(func, block)
        decisions.append(INLINE)
    except ScheduleError:
        pass
    consumers = deps.get_consumers(func, block)
    loops: list[Var] = []
    if consumers:
        chains = []
        for c in consumers:
            hit = tree.find_block_realize(func, c)
            assert hit is not None  # get_consumers names blocks of func
            chains.append([f.loop_var for f in tree.enclosing_loops(hit[1])])
        own = tree.find_block_realize(func, block)
        assert own is not None
        mine = {f.loop_var for f in tree.enclosing_loops(own[1])}
        for v in chains[0]:
            if v in mine or not all(v in ch for ch in chains[1:]):
                continue
            try:
                C.compute_at(func, block, v, False, -1)
            except ScheduleError:
                continue
            loops.append(v)
    decisions.extend(range(len(loops)))
    return loops, decisions


# --- Schedule methods (the recording decorator is applied in schedule.py) ---------------------
def sample_perfect_tile(
    self: Schedule,
    loop: LoopRV,
    n: int,
    max_innermost_factor: int = 16,
    decision: list[int] | None = None,
) -> list[ExprRV]:
    """Sample ``n`` tile sizes for ``loop``: factors whose product is its constant extent.

    Parameters
    ----------
    loop
        A loop with a constant extent.
    n
        Number of factors (>= 1).
    max_innermost_factor
        Upper bound of the innermost factor (-1: none), as in TVM.
    decision
        The factors to use instead of drawing (replay); checked for validity.

    Returns
    -------
    list of ExprRV
        ``n`` ints, outermost first, drawn uniformly over the valid tilings with the
        schedule's random state. Passing them to ``split`` records references, so a trace
        replayed with another decision splits with the new factors.

    Examples
    --------
    >>> f = sch.sample_perfect_tile(i, n=2, max_innermost_factor=16)   # e.g. [16, 4] for 64
    >>> i0, i1 = sch.split(i, f)
    >>> print(sch.trace)    # v1, v2 = sch.sample_perfect_tile(l0, n=2, ..., decision=[16, 4])
    """
    prim = "sample_perfect_tile"
    check_perfect_tile_args(n, max_innermost_factor)
    node = self._loop(loop, prim)[0]
    extent = loop_extent(node, prim, self.func)
    bound = extent if max_innermost_factor == -1 else max_innermost_factor
    if decision is None:
        if n == 1 and extent > bound:
            raise ScheduleError(
                f"no 1-way tile of extent {extent} has an innermost factor <= "
                f"{max_innermost_factor}", primitive=prim, func=self.func, node=node,
            )  # fmt: skip
        decision = draw_perfect_tile(self._rng, extent, n, bound)
    else:
        decision = check_perfect_tile(decision, extent, n, bound)
    return self.func, list(decision), decision  # type: ignore[return-value]


def sample_categorical(
    self: Schedule, candidates: list[int], probs: list[float], decision: int | None = None
) -> ExprRV:
    """Sample one of ``candidates`` (ints) with probabilities ``probs`` (normalized).

    The decision is the candidate's index, as in TVM; ``decision`` replays one.

    Examples
    --------
    >>> v = sch.sample_categorical([1, 2, 4], [0.5, 0.25, 0.25])
    >>> print(sch.trace)    # v0 = sch.sample_categorical([1, 2, 4], [0.5, ...], decision=0)
    """
    norm = check_categorical(candidates, probs)
    if decision is None:
        decision = draw_categorical(self._rng, norm)
    else:
        decision = check_categorical_decision(decision, candidates, norm)
    return self.func, candidates[decision], decision  # type: ignore[return-value]


def sample_compute_location(self: Schedule, block: BlockRV, decision: int | None = None) -> LoopRV:
    """Sample where to compute ``block``: a loop for ``compute_at``, or a marker.

    The candidates are ``-1`` (root: leave the block where it is), ``-2`` (inline, when
    ``compute_inline`` is possible) and every loop enclosing the block's consumers on which
    ``compute_at`` succeeds (decision ``i``: the ``i``-th, outermost first); they are drawn
    uniformly, as in TVM. The returned LoopRV is that loop, or a marker for root/inline:
    ``sch.compute_at(block, rv)`` then does nothing (root) or inlines the block (inline),
    as TVM's root and inline marks; ``sch.get(rv)`` is None for a marker.

    Examples
    --------
    >>> loc = sch.sample_compute_location(sch.get_block("B"))
    >>> sch.compute_at(sch.get_block("B"), loc)
    """
    prim = "sample_compute_location"
    name = self._block_name(block, prim)
    loops, decisions = compute_locations(self.func, name)
    if decision is None:
        decision = decisions[self._rng.randrange(len(decisions))]
    elif type(decision) is not int or decision not in decisions:
        raise ScheduleError(
            f"invalid decision={decision!r} for block {name!r}: valid are {decisions} "
            f"(-2 inline, -1 root, i the i-th of loops {[v.name for v in loops]})",
            primitive=prim, func=self.func,
        )  # fmt: skip
    target = ROOT_MARK if decision == ROOT else INLINE_MARK if decision == INLINE else loops[decision]
    return self.func, target, decision  # type: ignore[return-value]
