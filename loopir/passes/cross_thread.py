"""LowerCrossThreadReduction: a reduction loop bound to ``threadIdx.x`` becomes a partial
reduction per thread, a cross-thread combine and a write-back by one thread.

``bind`` lets a loop that feeds only reduce iter vars of a sum/max/min reduction block (see
[`loopir.ir.reducer`][loopir.ir.reducer]) be bound to ``threadIdx.x``; sequentially the program
means what it meant before (the reduction runs in loop order). On a GPU the threads of that loop
must each reduce a part and then combine the parts, which is what this pass writes out (TVM's
LowerCrossThreadReduction does the same with ``tvm_thread_allreduce``)::

    for tx in T.thread_binding(128, "threadIdx.x"):
        for ko in range(8):
            with T.block("S"):
                vi = T.axis.spatial(R, i); vk = T.axis.reduce(1000, ko * 128 + tx)
                T.where(ko * 128 + tx < 1000)
                with T.init(): S[vi] = 0.0
                S[vi] = S[vi] + A[vi, vk]

becomes::

    for tx in T.thread_binding(128, "threadIdx.x"):
        S_acc[0] = 0.0                                     # local: one per thread
        for ko in range(8):
            with T.block("S_in_thread"):                   # the thread's part, no init
                vi = ...; vk = ...; T.where(ko * 128 + tx < 1000)
                S_acc[0] = S_acc[0] + A[vi, vk]
        T.thread_allreduce("sum", S_acc[0], 128)          # every thread: the row's total
        with T.block("S_write_back"):
            vi = T.axis.spatial(R, i); T.where(tx == 0)
            S[vi] = S_acc[0]

``thread_allreduce`` synchronizes the thread block like a barrier (the CUDA backend emits warp
shuffles and, above 32 threads, a shared-memory combine across warps; the CPU executor runs
it among a thread region's fibers). A non-identity ``init`` is combined into the written
value. Refused, with a [`PassError`][loopir.errors.PassError] naming the block: a reducer that is
not sum/max/min, a bound reduction loop that is not ``threadIdx.x``, loops between it and the
block that feed a spatial iter var or are thread-bound, other statements under it, and
reduction loops of the same block outside it (reorder the bound loop outermost).
"""

from __future__ import annotations

import attrs

from loopir.errors import PassError
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import EQ, BufferLoad, IntImm, PrimExpr, Var
from loopir.ir.functor import (
    Mutator,
    all_buffers,
    collect_vars,
    post_order_visit,
    substitute,
    touches_buffer,
)
from loopir.ir.op import thread_allreduce
from loopir.ir.reducer import combine, identity, is_identity, match_reducer
from loopir.ir.stmt import (
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IterKind,
    IterVar,
    PrimFunc,
    SeqStmt,
    Stmt,
    seq,
)
from loopir.passes._walk import all_true, conjuncts
from loopir.passes.base import Pass
from loopir.passes.context import PassContext

__all__ = ["LowerCrossThreadReduction", "cross_thread_reduce_vars"]

_P = "pass LowerCrossThreadReduction"


def cross_thread_reduce_vars(realize: BlockRealize) -> set[Var]:
    """Loop variables that feed a reduce iter var of ``realize``'s block."""
    out: set[Var] = set()
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        if iv.kind is not IterKind.SPATIAL:
            out.update(collect_vars(value))
    return out


def _realizes(stmt: Stmt) -> list[BlockRealize]:
    found: list[BlockRealize] = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, BlockRealize) else None)
    return found


def _parts(loop: For, realize: BlockRealize) -> tuple[list[Stmt], list[For], list[Stmt]]:
    """``loop``'s body as (statements before, the loops down to ``realize``, statements
    after): the block must sit under a nest of single loops, beside other statements (the
    per-thread producers of an rfactor, say) that do not touch its output."""
    items = list(loop.body.seq) if isinstance(loop.body, SeqStmt) else [loop.body]
    pos = next(k for k, it in enumerate(items) if any(r is realize for r in _realizes(it)))
    inner: list[For] = []
    node: Stmt = items[pos]
    while isinstance(node, For):
        inner.append(node)
        node = node.body
    name = realize.block.name
    if node is not realize:
        raise PassError(
            f"{_P}: loop {loop.loop_var.name} is bound to threadIdx.x and feeds the reduction "
            f"of block {name!r}, so that block must sit under a nest of single loops (found "
            f"{type(node).__name__}); move the other work out of that nest"
        )
    out = realize.block.writes[0].buffer
    for other in items[:pos] + items[pos + 1:]:
        if touches_buffer(other, out):
            raise PassError(
                f"{_P}: other statements under the threadIdx.x reduction loop "
                f"{loop.loop_var.name} of block {name!r} access its output {out.name}"
            )
    return items[:pos], inner, items[pos + 1:]


class _Lower(Mutator):
    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.loops: list[For] = []
        self.new_buffers: list[Buffer] = []
        self.names = {b.name for b in all_buffers(func)}

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def visit_For(self, node: For) -> Stmt:
        if node.kind is ForKind.THREAD_BINDING and str(node.thread_tag).startswith("threadIdx."):
            target = [r for r in _realizes(node.body) if node.loop_var in cross_thread_reduce_vars(r)]
            if len(target) > 1:
                raise PassError(
                    f"{_P}: loop {node.loop_var.name} ({node.thread_tag}) feeds the reductions of "
                    f"blocks {', '.join(repr(r.block.name) for r in target)}; each cross-thread "
                    "reduction needs a thread loop of its own (compute them in separate loops)"
                )
            if target:
                return self.lower(node, target[0])
        self.loops.append(node)
        try:
            out: Stmt = self.generic_visit(node)  # a statement mutates to a statement
            return out
        finally:
            self.loops.pop()

    def lower(self, loop: For, realize: BlockRealize) -> Stmt:
        block = realize.block
        name = block.name
        if loop.thread_tag != "threadIdx.x":
            raise PassError(
                f"{_P}: the reduction of block {name!r} is bound to {loop.thread_tag}; cross-"
                "thread reductions run over threadIdx.x (bind the reduction loop to threadIdx.x "
                "and the spatial loops to the other axes)"
            )
        if not isinstance(loop.extent, IntImm) or not isinstance(loop.min, IntImm) or loop.min.value != 0:
            raise PassError(f"{_P}: the threadIdx.x loop of block {name!r} needs range [0, constant)")
        red = match_reducer(block)
        if isinstance(red, str):
            raise PassError(f"{_P}: loop {loop.loop_var.name} is bound to threadIdx.x but {red}")
        before, inner, after = _parts(loop, realize)
        feeds = cross_thread_reduce_vars(realize)
        spatial_uses = {
            v for iv, e in zip(block.iter_vars, realize.iter_values)
            if iv.kind is IterKind.SPATIAL for v in collect_vars(e)
        }  # fmt: skip
        for lp in (loop, *inner):
            if lp.loop_var in spatial_uses:
                raise PassError(
                    f"{_P}: loop {lp.loop_var.name} under the threadIdx.x reduction loop of block "
                    f"{name!r} feeds one of its spatial iter vars; only reduction loops may lie "
                    "between the bound loop and the block (reorder the spatial loops outside)"
                )
        for lp in inner:
            if lp.kind is ForKind.THREAD_BINDING:
                raise PassError(
                    f"{_P}: loop {lp.loop_var.name} ({lp.thread_tag}) lies under the threadIdx.x "
                    f"reduction loop of block {name!r}; no other thread loop may be inside it"
                )
            if lp.loop_var not in feeds and not (isinstance(lp.extent, IntImm) and lp.extent.value == 1):
                raise PassError(
                    f"{_P}: loop {lp.loop_var.name} under the threadIdx.x reduction loop of block "
                    f"{name!r} feeds none of its iter vars (it would repeat the reduction)"
                )
        kernel = self._kernel_loops()
        for lp in kernel:
            if lp.loop_var in feeds:
                raise PassError(
                    f"{_P}: loop {lp.loop_var.name} outside the threadIdx.x loop "
                    f"{loop.loop_var.name} also feeds the reduction of block {name!r}; reorder "
                    "so that the threadIdx.x loop is the outermost reduction loop"
                )
        return self.rewrite(loop, before, inner, after, realize, red)

    def _kernel_loops(self) -> list[For]:
        """Enclosing loops from the kernel's outermost thread-bound loop inwards (all of them
        when there is none: sequential code around a thread loop is the kernel's too)."""
        for k, lp in enumerate(self.loops):
            if lp.kind is ForKind.THREAD_BINDING:
                return self.loops[k:]
        return list(self.loops)

    def rewrite(self, loop: For, before: list[Stmt], inner: list[For], after: list[Stmt],
                realize: BlockRealize, red: object) -> Stmt:  # fmt: skip
        from loopir.ir.reducer import Reducer

        assert isinstance(red, Reducer)
        block = realize.block
        c = red.store.buffer
        acc = Buffer(self.fresh(f"{block.name}_acc"), (1,), c.dtype, scope="local")
        self.new_buffers.append(acc)
        zero = IntImm(0, "int32")
        acc_load = BufferLoad(acc, (zero,))
        acc_region = BufferRegion(acc, (Range(zero, IntImm(1, "int32")),))
        part = Block(
            self.fresh(f"{block.name}_in_thread"), block.iter_vars,
            tuple(r for r in block.reads if r.buffer is not c) + (acc_region,), (acc_region,),
            BufferStore(acc, combine(red.op, acc_load, red.value), (zero,)),
        )  # fmt: skip
        nest: Stmt = BlockRealize(realize.iter_values, realize.predicate, part)
        for lp in reversed(inner):
            nest = attrs.evolve(lp, body=nest)
        # the write-back: the spatial iter vars only, written by thread 0 of the row
        reduce_vars = {loop.loop_var} | {lp.loop_var for lp in inner}
        spatial = [(iv, v) for iv, v in zip(block.iter_vars, realize.iter_values)
                   if iv.kind is IterKind.SPATIAL]  # fmt: skip
        new_ivs = [IterVar(Var(iv.var.name, iv.var.dtype), iv.dom, IterKind.SPATIAL) for iv, _ in spatial]
        vmap: dict[Var, PrimExpr] = {iv.var: n.var for (iv, _), n in zip(spatial, new_ivs)}
        reduce_ivs = {iv.var for iv in block.iter_vars if iv.kind is not IterKind.SPATIAL}
        kept = [
            cj for cj in conjuncts(realize.predicate)
            if not set(collect_vars(cj)) & (reduce_vars | reduce_ivs)
        ]  # fmt: skip
        init_value = substitute(red.init_value, vmap)
        value = acc_load if is_identity(red.op, red.init_value) else combine(red.op, init_value, acc_load)
        indices = tuple(substitute(i, vmap) for i in red.store.indices)
        init_reads = [r for r in block.reads if r.buffer is not c]
        back = Block(
            self.fresh(f"{block.name}_write_back"), tuple(new_ivs),
            (acc_region, *(attrs.evolve(r, region=tuple(substitute(x, vmap) for x in r.region))
                           for r in init_reads if touches_buffer(red.init_value, r.buffer))),
            tuple(attrs.evolve(w, region=tuple(substitute(x, vmap) for x in w.region)) for w in block.writes),
            BufferStore(c, value, indices),
        )  # fmt: skip
        pred = all_true([EQ(loop.loop_var, IntImm(0, loop.loop_var.dtype)), *kept])
        write_back = BlockRealize(tuple(v for _, v in spatial), pred, back)
        body = seq(
            *(self.visit(b) for b in before),
            BufferStore(acc, identity(red.op, c.dtype), (zero,)),
            nest,
            Evaluate(thread_allreduce(red.op, acc_load, loop.extent.value)),  # type: ignore[attr-defined]
            write_back,
            *(self.visit(a) for a in after),
        )
        return attrs.evolve(loop, body=body)


class LowerCrossThreadReduction(Pass):
    """Write out reductions bound to ``threadIdx.x`` (see the module doc)."""

    name = "LowerCrossThreadReduction"

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        root = func.body
        if not isinstance(root, BlockRealize):
            return func  # lowered (no blocks) or no root block: nothing bound to rewrite
        low = _Lower(func)
        body = low.visit(root)
        if body is root:
            return func
        assert isinstance(body, BlockRealize)
        block = attrs.evolve(body.block, alloc_buffers=body.block.alloc_buffers + tuple(low.new_buffers))
        return func.with_body(attrs.evolve(body, block=block))
