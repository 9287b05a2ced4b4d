"""Range checks of the verifier: block bindings within domains, accesses within regions.

Both checks report a problem only when it is certain (see
[`verifier_eval`][loopir.analysis.verifier_eval]): they return None ("fine or undecidable") or a
message describing a concrete counterexample. Bounds come from
[`loopir.arith.bound`][loopir.arith.bound] and
[`loopir.arith.Analyzer`][loopir.arith.analyzer.Analyzer], exhaustive evaluation from
[`loopir.arith.vectorized`][loopir.arith.vectorized] (the C semantics of the executors: wrapping
casts, lazy ``Select``, short-circuit ``and``/``or``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from loopir.analysis.verifier_eval import (
    Interval,
    conditions_to_enumerate,
    linear_distinct,
    split_and,
)
from loopir.arith.analyzer import Analyzer
from loopir.arith.bound import NEG_INF, POS_INF, BoundEvaluator
from loopir.arith.vectorized import NotEnumerable, domain, evaluate
from loopir.errors import ArithError
from loopir.ir.buffer import BufferRegion, Range
from loopir.ir.expr import IntImm, PrimExpr, Var
from loopir.ir.functor import collect_vars
from loopir.ir.printer import expr_to_str, script
from loopir.ir.stmt import Block, IterVar

if TYPE_CHECKING:
    from loopir.analysis.verifier import _Access

logger = logging.getLogger(__name__)

LoopMap = Mapping[int, tuple[Var, PrimExpr, PrimExpr]]
Ranges = Mapping[Var, Interval]


def _finite(lo: int, hi: int) -> Interval | None:
    return None if lo == NEG_INF or hi == POS_INF else (lo, hi)


def const_int(e: PrimExpr) -> int | None:
    """The value of an integer constant expression, or None."""
    if isinstance(e, IntImm):
        return e.value
    b = BoundEvaluator({})(e)
    return b.min_value if b.is_const else None


def _bound(e: PrimExpr, ranges: Ranges) -> Interval | None:
    """Constant bounds of ``e`` when every variable of ``e`` has a constant range (a sound
    over-approximation, exact for [`linear_distinct`][loopir.analysis.verifier_eval.linear_distinct]
    expressions), else None."""
    vs = collect_vars(e)
    if any(v not in ranges for v in vs):
        return None
    b = BoundEvaluator({v: Range(ranges[v][0], ranges[v][1] - ranges[v][0] + 1) for v in vs})(e)
    return _finite(b.min_value, b.max_value)


def _arith_bound(e: PrimExpr, loops: LoopMap) -> Interval | None:
    """Bounds from the simplifying [`loopir.arith.Analyzer`][loopir.arith.analyzer.Analyzer]
    (tighter, and symbolic loop ranges count), or None where it cannot say."""
    try:
        b = Analyzer({v: Range(lo, ext) for v, lo, ext in loops.values()}).const_int_bound(e)
    except ArithError as exc:  # too deep to analyze: the check is only undecided
        logger.debug("arith.const_int_bound gave up on %s: %s", e, exc)
        return None
    return _finite(b.min_value, b.max_value)


def const_ranges(loops: LoopMap) -> dict[Var, Interval]:
    """Inclusive constant ranges of the loop vars whose min and extent are constant."""
    out: dict[Var, Interval] = {}
    for _vid, (v, lo, ext) in loops.items():
        lo_c, ext_c = const_int(lo), const_int(ext)
        if lo_c is not None and ext_c is not None and ext_c > 0:
            out[v] = (lo_c, lo_c + ext_c - 1)
    return out


def enumerate_space(variables: list[Var], ranges: Ranges) -> dict[Var, np.ndarray] | None:
    """Every combination of the variables' values as flat arrays (None if too many/unknown)."""
    if any(v not in ranges for v in variables):
        return None
    try:
        return domain([(v, ranges[v][0], ranges[v][1] - ranges[v][0] + 1) for v in variables])
    except NotEnumerable:
        return None


def _mask(conds: Sequence[PrimExpr], env: Mapping[Var, np.ndarray], n: int) -> np.ndarray:
    mask = np.ones(n, dtype=bool)
    for c in conds:
        mask &= evaluate(c, env, n) != 0
    return mask


def _point(variables: Sequence[Var], env: Mapping[Var, np.ndarray], k: int) -> str:
    return ", ".join(f"{v.name}={int(env[v][k])}" for v in variables) or "(no variables)"


def _size(env: Mapping[Var, np.ndarray]) -> int:
    return len(next(iter(env.values()))) if env else 1


def check_binding_range(
    iv: IterVar,
    value: PrimExpr,
    predicate: PrimExpr,
    ranges: Ranges,
    loops: LoopMap,
) -> str | None:
    """A message if ``value`` certainly leaves ``iv``'s domain for some loop point, else None."""
    lo_c, ext_c = const_int(iv.dom.min), const_int(iv.dom.extent)
    if lo_c is None or ext_c is None:
        return None  # symbolic domain: not decided here
    lo, hi = lo_c, lo_c + ext_c - 1
    name = iv.var.name
    bound = _bound(value, ranges)
    if bound is not None and lo <= bound[0] and bound[1] <= hi:
        return None  # sound over-approximation inside the domain: fine
    conds, all_vars = conditions_to_enumerate(collect_vars(value), split_and(predicate), ranges)
    env = enumerate_space(all_vars, ranges)
    if env is not None:
        # small loop space: decide exactly (this also honours the predicate)
        try:
            n = _size(env)
            vals = evaluate(value, env, n)
            mask = _mask(conds, env, n)
        except NotEnumerable:
            return None
        bad = np.nonzero(mask & ((vals < lo) | (vals > hi)))[0]
        if bad.size == 0:
            return None
        k = int(bad[0])
        return (
            f"binding {expr_to_str(value)} of iter var {name} is {int(vals[k])} at "
            f"{_point(all_vars, env, k)}{' where the predicate holds' if conds else ''}, "
            f"outside its domain [{lo}, {hi + 1})"
        )
    tighter = _arith_bound(value, loops)
    if tighter is not None and lo <= tighter[0] and tighter[1] <= hi:
        return None
    if bound is not None and not conds and linear_distinct(value):
        # interval bounds of a sum of distinct vars are attained: a certain violation
        return (
            f"binding {expr_to_str(value)} of iter var {name} takes values in "
            f"[{bound[0]}, {bound[1]}], outside its domain [{lo}, {hi + 1})"
        )
    return None  # cannot decide cheaply: accept


def _coverage_problem(acc: _Access, regions: list[BufferRegion]) -> str | None:
    """A message if the access certainly falls outside every region, else None."""
    ranges = const_ranges(acc.loops)
    seed: dict[int, Var] = {}
    for e in acc.indices:
        for v in collect_vars(e):
            seed.setdefault(id(v), v)
    for r in regions:
        for rg in r.region:
            for e in (rg.min, rg.extent):
                for v in collect_vars(e):
                    seed.setdefault(id(v), v)
    all_conds = [c for cond in acc.conds for c in split_and(cond)]
    conds, all_vars = conditions_to_enumerate(list(seed.values()), all_conds, ranges)
    env = enumerate_space(all_vars, ranges)
    if env is None and len(regions) == 1:
        # A box is the product of its dimensions: check each dimension on its own.
        return _per_dim_problem(acc, regions[0], ranges, all_conds)
    if env is None:
        return None
    try:
        n = _size(env)
        mask = _mask(conds, env, n)
        idx = [
            evaluate(e, env, n) for e in acc.indices
        ]
        covered = np.zeros(n, dtype=bool)
        for r in regions:
            inside = np.ones(n, dtype=bool)
            for i, rg in zip(idx, r.region):
                lo = evaluate(rg.min, env, n)
                ext = evaluate(rg.extent, env, n)
                inside &= (lo <= i) & (i < lo + ext)
            covered |= inside
    except NotEnumerable:
        return None
    bad = np.nonzero(mask & ~covered)[0]
    if bad.size == 0:
        return None
    k = int(bad[0])
    point = ", ".join(str(int(i[k])) for i in idx)
    return (
        f"{_what(acc)} accesses {acc.buffer.name}[{point}] at {_point(all_vars, env, k)}, "
        f"outside its declared region(s) {', '.join(script(r) for r in regions)}"
    )


def _what(acc: _Access) -> str:
    kind = "store to" if acc.is_store else "load"
    return f"{kind} {acc.buffer.name}[{', '.join(expr_to_str(i) for i in acc.indices)}]"


def _per_dim_problem(
    acc: _Access, region: BufferRegion, ranges: Ranges, all_conds: list[PrimExpr]
) -> str | None:
    for d, (e, rg) in enumerate(zip(acc.indices, region.region)):
        seed = collect_vars(e) + collect_vars(rg.min) + collect_vars(rg.extent)
        conds, vars_d = conditions_to_enumerate(seed, all_conds, ranges)
        env = enumerate_space(vars_d, ranges)
        if env is None:
            continue
        try:
            n = _size(env)
            mask = _mask(conds, env, n)
            i = evaluate(e, env, n)
            lo = evaluate(rg.min, env, n)
            ext = evaluate(rg.extent, env, n)
        except NotEnumerable:
            continue
        bad = np.nonzero(mask & ~((lo <= i) & (i < lo + ext)))[0]
        if bad.size:
            k = int(bad[0])
            return (
                f"{_what(acc)}: index {d} is {int(i[k])} at {_point(vars_d, env, k)}, "
                f"outside its declared region {script(region)}"
            )
    return None


def check_coverage(blk: Block, accesses: Sequence[_Access]) -> tuple[str, Any] | None:
    """(message, node) for the first access of ``blk`` not covered by its regions, or None."""
    own = {id(b) for b in blk.alloc_buffers}
    reads: dict[int, list[BufferRegion]] = {}
    writes: dict[int, list[BufferRegion]] = {}
    for r in blk.reads:
        reads.setdefault(id(r.buffer), []).append(r)
    for r in blk.writes:
        writes.setdefault(id(r.buffer), []).append(r)
    for acc in accesses:
        bid = id(acc.buffer)
        if bid in own:
            continue  # the block's own buffers need no declared regions
        if acc.is_store:
            regions = writes.get(bid, [])
            if not regions:
                return (
                    f"stores to buffer {acc.buffer.name!r}, which T.writes does not list",
                    acc.node,
                )
        else:
            # A reduction update reads its output: loads are covered by reads or writes.
            regions = reads.get(bid, []) + writes.get(bid, [])
            if not regions:
                return (
                    f"loads from buffer {acc.buffer.name!r}, which neither T.reads nor "
                    "T.writes lists",
                    acc.node,
                )
        problem = _coverage_problem(acc, regions)
        if problem is not None:
            return problem, acc.node
    return None
