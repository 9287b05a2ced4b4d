"""``transform_block_layout``: iterate a spatial block through an index map (TVM's primitive).

A block over a 16 x 16 tile whose buffers live in a warp's ``mma`` fragments (a ``warp``
buffer ``W[.., lane, local]`` in the layout
``MMA_C`` of [`loopir.tensor_intrin.layouts`][loopir.tensor_intrin.layouts]) reads ``W[i // 16, j // 16, lane(i, j),
local(i, j)]`` for each ``(i, j)``. Re-expressed through the same map, the block iterates
``(tile, lane, local)`` instead, so that after binding ``lane`` to ``threadIdx.x`` every lane
touches exactly the elements it holds: what ``LowerWarpMemory`` turns into the lane's
registers. The primitive is general: any bijective index map of the block's loop-bound iter
vars (proven so symbolically: permutations, splits, fusions, XOR swizzles, by
``loopir.schedule.layout_map``), not a special case of fragments.

The block's *nest*, the loops directly above it that contain nothing else, is replaced by
loops over the map's image: a new spatial iter var per output, bound to its new loop, and the
old iter vars become the inverse map's expressions of the new ones in the body, the init, the
regions and the predicate (simplified knowing the new ranges: ``W[(16 * t + r(lane, v)) //
16, ..]`` becomes ``W[t, ..]``).

Preconditions (a [`ScheduleError`][loopir.errors.ScheduleError] naming the primitive and the
offending value otherwise): every iter var bound to a nest loop is spatial with domain
``[0, extent)`` and bound to exactly that loop (a trivial binding), each nest loop is serial,
unannotated, starts at 0 and binds exactly one iter var; the other iter vars do not use the
nest's loops; the map takes as many indices as there are such iter vars (in the block's order)
and is a proven bijection of their constant box.
"""

from __future__ import annotations

import logging

import attrs

from loopir import arith
from loopir.errors import ScheduleError
from loopir.ir.buffer import BufferRegion, Range
from loopir.ir.expr import BufferLoad, IntImm, PrimExpr, Var
from loopir.ir.functor import Mutator, substitute
from loopir.ir.stmt import (
    BlockRealize,
    BufferStore,
    For,
    ForKind,
    IterKind,
    IterVar,
    PrimFunc,
    Stmt,
)
from loopir.schedule import tree
from loopir.schedule.layout import _params_of, parse_index_map
from loopir.schedule.layout_map import prove_bijective

__all__ = ["transform_block_layout"]

logger = logging.getLogger(__name__)

_P = "transform_block_layout"


class _Simplify(Mutator):
    """Indices of loads, stores and regions simplified under the new iter vars' ranges."""

    def __init__(self, ana: arith.Analyzer) -> None:
        self.ana = ana

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        node = self.generic_visit(node)
        return BufferLoad(node.buffer, tuple(self.ana.simplify(i) for i in node.indices))

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        node = self.generic_visit(node)
        return BufferStore(node.buffer, node.value, tuple(self.ana.simplify(i) for i in node.indices))

    def visit_BufferRegion(self, node: BufferRegion) -> BufferRegion:
        region = tuple(Range(self.ana.simplify(r.min), self.ana.simplify(r.extent)) for r in node.region)
        return BufferRegion(node.buffer, region)


def _nest(realize: BlockRealize, anc: tuple[Stmt, ...]) -> list[For]:
    """The loops directly above ``realize`` that contain nothing else, outermost first."""
    loops: list[For] = []
    child: Stmt = realize
    for a in reversed(anc):
        if not (isinstance(a, For) and a.body is child):
            break
        loops.insert(0, a)
        child = a
    return loops


def _const(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) else None


def transform_block_layout(func: PrimFunc, block: str, index_map: str) -> tuple[PrimFunc, list[Var]]:
    """Iterate ``block`` through ``index_map`` (module doc); returns the function and the new
    loops' vars, outermost first.

    Parameters
    ----------
    func
        The function.
    block
        The block's name.
    index_map
        The map's text, a lambda over the block's loop-bound iter vars in their order
        (``Schedule.transform_block_layout`` takes the lambda itself).

    Raises
    ------
    ScheduleError
        See the module doc's preconditions.

    Examples
    --------
    Before::

        for i, j in T.grid(4, 8):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * T.float32(2)

    After ``transform_block_layout(func, "B", "lambda i, j: (j // 2, i, j % 2)")``::

        for ax0, ax1, ax2 in T.grid(4, 4, 2):
            with T.block("B"):
                v_ax0, v_ax1, v_ax2 = T.axis.remap("SSS", [ax0, ax1, ax2])
                B[v_ax1, v_ax0 * 2 + v_ax2] = A[v_ax1, v_ax0 * 2 + v_ax2] * T.float32(2)
    """
    hit = tree.find_block_realize(func, block)
    if hit is None:
        raise ScheduleError(f"no block named {block!r}", primitive=_P, func=func)
    realize, anc = hit
    blk = realize.block
    loops = _nest(realize, anc)

    def fail(msg: str, node: object = blk) -> ScheduleError:
        return ScheduleError(f"block {block!r}: {msg}", primitive=_P, func=func, node=node)

    by_var = {f.loop_var: f for f in loops}
    moved: list[int] = []
    for k, (iv, b) in enumerate(zip(blk.iter_vars, realize.iter_values)):
        if isinstance(b, Var) and b in by_var:
            moved.append(k)
        elif any(v in by_var for v in _vars(b)):
            raise fail(f"iter var {iv.var.name} is bound to {b}, which uses the loops above the block "
                       "but is not one of them (a trivial binding is needed: fuse or split the block "
                       "with blockize first)")  # fmt: skip
    bound = [realize.iter_values[k] for k in moved]
    for f in loops:
        if sum(1 for b in bound if b is f.loop_var) != 1:
            raise fail(f"loop {f.loop_var.name} above the block binds no iter var, or several", f)
        if f.kind is not ForKind.SERIAL or f.annotations or f.thread_tag:
            raise fail(f"loop {f.loop_var.name} is {f.kind.name.lower()}"
                       f"{' with annotations' if f.annotations else ''}; the loops replaced must be plain "
                       "serial loops (bind, unroll and annotate the new ones)", f)  # fmt: skip
        if _const(f.min) != 0 or _const(f.extent) is None:
            raise fail(f"loop {f.loop_var.name} has range [{f.min}, {f.min} + {f.extent}); a constant "
                       "range starting at 0 is needed", f)  # fmt: skip
    shape: list[int] = []
    for k in moved:
        iv, f = blk.iter_vars[k], by_var[realize.iter_values[k]]  # type: ignore[index]
        if iv.kind is not IterKind.SPATIAL:
            raise fail(f"iter var {iv.var.name} is a {iv.kind.name.lower()} iter var; "
                       "transform_block_layout re-expresses spatial blocks only (a reduction over "
                       "a fragment is a tensor intrinsic, e.g. the fragment row reductions)")  # fmt: skip
        if _const(iv.dom.min) != 0 or _const(iv.dom.extent) != _const(f.extent):
            raise fail(f"iter var {iv.var.name} has domain [{iv.dom.min}, {iv.dom.min} + {iv.dom.extent}) "
                       f"but its loop {f.loop_var.name} has extent {f.extent}")  # fmt: skip
        shape.append(_const(f.extent))  # type: ignore[arg-type]
    if not moved:
        raise fail("no iter var is bound to a loop directly above the block")
    names, exprs = parse_index_map(index_map)
    if len(names) != len(moved):
        raise fail(f"index map {index_map!r} takes {len(names)} indices, but the block has "
                   f"{len(moved)} loop-bound iter vars ({', '.join(blk.iter_vars[k].var.name for k in moved)})")  # fmt: skip
    params = _params_of(exprs, names)
    proof = prove_bijective(params, exprs, shape)
    if proof is None:
        raise fail(f"index map {index_map!r} on {shape} is not proven a bijection (permutations, splits, "
                   "fusions and XOR swizzles are)")  # fmt: skip
    new_shape = list(proof.new_shape)
    new_loops = [Var(f"ax{k}", "int32") for k in range(len(new_shape))]
    new_ivs = [Var(f"v_ax{k}", "int32") for k in range(len(new_shape))]
    _, inverse = proof.inverse(new_ivs)
    old_ivs = [blk.iter_vars[k].var for k in moved]
    iv_map: dict[Var, PrimExpr] = dict(zip(old_ivs, inverse))
    loop_inv = [substitute(e, dict(zip(new_ivs, new_loops))) for e in inverse]
    loop_map: dict[Var, PrimExpr] = {realize.iter_values[k]: e for k, e in zip(moved, loop_inv)}  # type: ignore[misc]
    ana = arith.Analyzer({v: (0, n) for v, n in zip(new_ivs, new_shape)})
    simp = _Simplify(ana)

    def rewrite_stmt(s: Stmt | None) -> Stmt | None:
        if s is None:
            return None
        out: Stmt = simp.visit(substitute(s, iv_map))
        return out

    def rewrite_region(r: BufferRegion) -> BufferRegion:
        out: BufferRegion = simp.visit_BufferRegion(substitute(r, iv_map))
        return out

    first = moved[0]
    iter_vars: list[IterVar] = []
    values: list[PrimExpr] = []
    for k, (iv, b) in enumerate(zip(blk.iter_vars, realize.iter_values)):
        if k == first:
            iter_vars += [IterVar(v, Range(0, n), IterKind.SPATIAL) for v, n in zip(new_ivs, new_shape)]
            values += new_loops
        elif k not in moved:
            iter_vars.append(iv)
            values.append(b)
    body = rewrite_stmt(blk.body)
    assert body is not None
    new_blk = attrs.evolve(
        blk, iter_vars=tuple(iter_vars), body=body, init=rewrite_stmt(blk.init),
        reads=tuple(rewrite_region(r) for r in blk.reads), writes=tuple(rewrite_region(r) for r in blk.writes),
    )  # fmt: skip
    pana = arith.Analyzer({v: (0, n) for v, n in zip(new_loops, new_shape)})
    predicate = pana.simplify(substitute(realize.predicate, loop_map))
    out: Stmt = BlockRealize(tuple(values), predicate=predicate, block=new_blk)
    for v, n in reversed(list(zip(new_loops, new_shape))):
        out = For(v, IntImm(0, "int32"), IntImm(n, "int32"), ForKind.SERIAL, out)
    logger.debug("transform_block_layout %s: %s -> %s", block, shape, new_shape)
    return tree.replace(func, loops[0], out), new_loops


def _vars(e: PrimExpr) -> list[Var]:
    from loopir.ir.functor import collect_vars

    return list(collect_vars(e))
