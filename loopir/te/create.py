"""``create_prim_func``: te tensors -> a TensorIR PrimFunc.

The output form is a contract other areas rely on (see the design brief):

* the body is a BlockRealize of a block ``"root"`` without iter vars whose ``alloc_buffers``
  are the intermediate tensors and whose body is the stages in topological order;
* each stage is a perfect nest of serial loops starting at 0 (spatial loops named after the
  lambda parameters, then reduce loops named after the reduce axes) around one BlockRealize of
  a block named after the tensor, with iter vars ``v_<name>`` bound to the loop vars (plus
  ``lo`` for ``reduce_axis((lo, hi))``);
* read/write regions are the exact bounding boxes of the accesses; reductions get an ``init``
  storing the identity and a body ``C[v] = C[v] + ...`` (or max/min), and, as in TVM, the
  reduction's read of its own output is not listed in ``reads``.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from loopir.errors import IRValidationError
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import BufferLoad, Max, Min, PrimExpr, Select, Var, make_const
from loopir.ir.functor import Mutator, post_order_visit
from loopir.ir.stmt import (
    Block,
    BlockRealize,
    BufferStore,
    For,
    ForKind,
    IterVar,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.te.regions import access_regions
from loopir.te.tensor import (
    ComputeOp,
    PlaceholderOp,
    Reduce,
    ReduceAxis,
    Tensor,
    comm_reducer_identity,
)

__all__ = ["create_prim_func"]


def _topo_order(tensors: Sequence[Tensor]) -> list[Tensor]:
    """Post-DFS order of every tensor reachable from ``tensors`` (inputs before users)."""
    order: list[Tensor] = []
    state: dict[Tensor, int] = {}  # 1 = visiting, 2 = done

    def dfs(t: Tensor) -> None:
        # iterative DFS: long elementwise chains must not hit Python's recursion limit
        stack: list[tuple[Tensor, int]] = [(t, 0)]
        while stack:
            cur, i = stack.pop()
            if i == 0:
                if state.get(cur) == 2:
                    continue
                state[cur] = 1
            inputs = cur.op.inputs if isinstance(cur.op, ComputeOp) else ()
            if i < len(inputs):
                stack.append((cur, i + 1))
                nxt = inputs[i]
                if state.get(nxt) != 2:
                    stack.append((nxt, 0))
                continue
            state[cur] = 2
            order.append(cur)

    for t in tensors:
        dfs(t)
    return order


def _unique_names(buffers: list[Buffer]) -> dict[Buffer, Buffer]:
    """Rename buffers whose names clash (``_1``, ``_2`` ...); identity for the others.

    Buffer names are also block names, so ``root`` (the root block) counts as taken.
    """
    taken: set[str] = {"root"}
    out: dict[Buffer, Buffer] = {}
    for b in buffers:
        name = b.name
        k = 0
        while name in taken:
            k += 1
            name = f"{b.name}_{k}"
        taken.add(name)
        out[b] = b if name == b.name else attrs.evolve(b, name=name)
    return out


class _Rewrite(Mutator):
    """Substitute axis vars by block iter vars and redirect buffers to their renamed copies."""

    def __init__(self, vmap: dict[Var, PrimExpr], bmap: dict[Buffer, Buffer]) -> None:
        self.vmap = vmap
        self.bmap = bmap

    def visit_Var(self, node: Var) -> PrimExpr:
        return self.vmap.get(node, node)

    visit_ReduceAxis = visit_Var  # te reduce axes are Vars with a domain

    def visit_Buffer(self, node: Buffer) -> Buffer:
        return self.bmap.get(node, node)


def _check_reduce_axes(name: str, body: PrimExpr) -> None:
    """Every reduce axis the body uses must be one its reduction lists (as in TVM, where an
    unlisted one has no loop and fails only at build)."""
    red = body if isinstance(body, Reduce) else None
    listed = {id(a) for a in red.axis} if red is not None else set()
    used: dict[int, ReduceAxis] = {}

    def visit(n: object) -> None:
        if isinstance(n, ReduceAxis) and id(n) not in listed:
            used.setdefault(id(n), n)

    for part in ((red.source, red.where) if red is not None else (body,)):
        if part is not None:
            post_order_visit(part, visit)
    if not used:
        return
    names = ", ".join(repr(a.name) for a in used.values())
    if red is None:
        where = "outside any reduction; use it inside te.sum/te.max/te.min(..., axis=...)"
    else:
        axes = ", ".join(a.var.name for a in red.axis)
        where = f"that its te.{red.combiner} does not list (axis=[{axes}]); add it to axis="
    raise IRValidationError(
        f"create_prim_func: compute {name!r} uses reduce axis {names} {where}",
        check="te-reduce-axis",
    )


def _stage(t: Tensor, buf: Buffer, bmap: dict[Buffer, Buffer]) -> Stmt:
    op = t.op
    assert isinstance(op, ComputeOp)
    body = op.body
    _check_reduce_axes(t.name, body)
    red = body if isinstance(body, Reduce) else None
    loops: list[tuple[Var, PrimExpr]] = []  # (loop var, extent), outermost first
    iter_vars: list[IterVar] = []
    bindings: list[PrimExpr] = []
    vmap: dict[Var, PrimExpr] = {}
    axes = list(op.axis) + (list(red.axis) if red is not None else [])
    for ax in axes:
        name = ax.var.name
        loop_var = Var(name, ax.var.dtype)
        v = Var("v_" + name, ax.var.dtype)
        loops.append((loop_var, ax.dom.extent))
        vmap[ax.var] = v
        lo = ax.dom.min
        binding: PrimExpr = loop_var
        if not (hasattr(lo, "value") and not isinstance(lo, Var) and lo.value == 0):
            binding = loop_var + lo
        bindings.append(binding)
        iter_vars.append(IterVar(v, ax.dom, ax.kind))
    rw = _Rewrite(vmap, bmap)
    out_idx = tuple(vmap[ax.var] for ax in op.axis)
    init: Stmt | None = None
    if red is None:
        value = rw.visit(body)
        reads = access_regions([value])
        stmt: Stmt = BufferStore(buf, value, out_idx)
    else:
        src = rw.visit(red.source)
        scan = [src]
        identity = comm_reducer_identity(red.combiner, red.dtype)
        if red.where is not None:
            cond = rw.visit(red.where)
            scan = [cond, src]
            src = Select(cond, src, identity)
        reads = access_regions(scan, exclude=(buf,))
        cur = BufferLoad(buf, out_idx)
        if red.combiner == "sum":
            update = cur + src
        elif red.combiner == "max":
            update = Max(cur, src)
        else:
            update = Min(cur, src)
        stmt = BufferStore(buf, update, out_idx)
        init = BufferStore(buf, identity, out_idx)
    writes = [BufferRegion(buf, tuple(Range(v, make_const(1, v.dtype)) for v in out_idx))]
    block = Block(
        name=buf.name,
        iter_vars=tuple(iter_vars),
        reads=tuple(reads),
        writes=tuple(writes),
        body=stmt,
        init=init,
    )
    out: Stmt = BlockRealize(tuple(bindings), block=block)
    for loop_var, extent in reversed(loops):
        out = For(loop_var, make_const(0, loop_var.dtype), extent, ForKind.SERIAL, out)
    return out


def create_prim_func(tensors: Sequence[Tensor], name: str = "main") -> PrimFunc:
    """Build a TensorIR PrimFunc computing ``tensors``.

    Parameters
    ----------
    tensors
        The function parameters, in call order: every placeholder the computation reads and
        the outputs. Computed tensors not listed become intermediate buffers allocated in the
        root block.
    name
        The function name.

    Raises
    ------
    IRValidationError
        If an entry is not a te tensor, is listed twice, a placeholder the computation
        reads is missing from ``tensors``, or a compute uses a reduce axis that its reduction
        does not list (``te.sum(A[i, k], axis=k2)``), naming the compute and the axis.
    """
    params = list(tensors) if not isinstance(tensors, Tensor) else [tensors]
    for t in params:
        if not isinstance(t, Tensor):
            raise IRValidationError(
                f"create_prim_func: parameters must be te tensors, got {type(t).__name__}: {t!r}",
                check="te-params",
            )
    if len({id(t) for t in params}) != len(params):
        dup = next(t for t in params if sum(u is t for u in params) > 1)
        raise IRValidationError(
            f"create_prim_func: tensor {dup.name} is listed twice", check="te-params"
        )
    order = _topo_order(params)
    in_params = {id(t) for t in params}
    for t in order:
        if isinstance(t.op, PlaceholderOp) and id(t) not in in_params:
            users = [
                u.name for u in order if isinstance(u.op, ComputeOp) and any(x is t for x in u.op.inputs)
            ]
            raise IRValidationError(
                f"create_prim_func: placeholder {t.name} is read by {', '.join(users)} but is "
                "not in the parameter list; add it to the tensors passed to create_prim_func",
                check="te-params",
            )
    intermediates = [t for t in order if id(t) not in in_params]
    bmap = _unique_names([t.buffer for t in params] + [t.buffer for t in intermediates])
    stages = [_stage(t, bmap[t.buffer], bmap) for t in order if isinstance(t.op, ComputeOp)]
    root = Block(
        name="root",
        iter_vars=(),
        reads=(),
        writes=(),
        body=seq(*stages) if stages else _empty_body(),
        alloc_buffers=tuple(bmap[t.buffer] for t in intermediates),
    )
    return PrimFunc(
        params=tuple(bmap[t.buffer] for t in params),
        body=BlockRealize((), block=root),
        name=name,
    )


def _empty_body() -> Stmt:
    from loopir.ir.stmt import Evaluate

    return Evaluate(make_const(0, "int32"))
