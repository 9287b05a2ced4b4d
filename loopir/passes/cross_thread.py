"""LowerCrossThreadReduction: a reduction whose loops are bound to ``threadIdx`` becomes a
partial reduction per thread, a cross-thread combine and a write-back by one thread.

``bind`` lets a loop that feeds only reduce iter vars of a sum/max/min reduction block (see
``loopir.ir.reducer``) be bound to ``threadIdx.x/y/z``; sequentially the program means what
it meant before (the reduction runs in loop order). On a GPU the threads of those loops must
each reduce a part and then combine the parts, which is what this pass writes out, as TVM's
LowerCrossThreadReduction does. The block's reduction loops (every loop feeding a reduce iter
var, down from the outermost) must be the innermost loops above the block; the thread-bound
ones move outermost, keeping their order, and the serial ones form each thread's part,
wherever they were (``split(k, [None, 64])`` with ``k_1`` bound and ``k_0`` outside is the usual
schedule)::

    for ko in range(8):
        for tx in T.thread_binding(128, "threadIdx.x"):
            with T.block("S"):
                vi = T.axis.spatial(R, i); vk = T.axis.reduce(1000, ko * 128 + tx)
                T.where(ko * 128 + tx < 1000)
                with T.init(): S[vi] = 0.0
                S[vi] = S[vi] + A[vi, vk]

becomes::

    for tx in T.thread_binding(128, "threadIdx.x"):
        with T.block("S_in_thread_init"):                  # local: one per thread
            S_acc[0] = 0.0
        for ko in range(8):
            with T.block("S_in_thread"):                   # the thread's part, no init
                vi = ...; vk = ...; T.where(ko * 128 + tx < 1000)
                S_acc[0] = S_acc[0] + A[vi, vk]
        with T.block("S_cross_thread"):
            T.thread_allreduce("sum", S_acc[0], 128)      # every thread: the row's total
        with T.block("S_write_back"):
            vi = T.axis.spatial(R, i); T.where(tx == 0)
            S[vi] = S_acc[0]

``thread_allreduce`` over more than 32 threads synchronizes the thread block like a barrier
(the CUDA backend emits warp shuffles and a shared-memory combine across warps); over at most
32 it is warp shuffles alone, no barrier, and ThreadSync orders the shared accesses around it
(the CPU executor runs it among a thread region's fibers either way). A reduction over ``threadIdx.y``/``z``, over several
thread axes, or over ``threadIdx.x`` rows that would share warps combines through shared
memory instead (``loopir.passes.cross_thread_tree``), and the write-back reads the total
from there. A non-identity ``init`` is combined into the written value. A block whose init
never runs within its reduction loops (the copy of a later partition of ``loop_partition``, whose
reduce iter var starts past its minimum) combines the total with the stored value instead.
Thread-bound spatial
loops and unit loops may lie among the reduction loops (the threads run in parallel anyway).
Refused, with a ``loopir.errors.PassError`` naming the block: a reducer that is not
sum/max/min; an init that may run at another iteration than the first or only for some
values of other variables; a ``blockIdx`` or ``vthread`` loop among the reduction loops (which includes a
reduction loop outside the kernel), or a serial one that feeds a spatial iter var (reorder it
outside); a loop among them that feeds no iter var (it would repeat the reduction); other
statements among them, except beside the block under thread loops with no serial reduction
loop around them, and then only if they do not touch its output; two blocks sharing their
outermost reduction loop; a shared-memory combine that a thread axis the kernel launches does
not enclose (its threads would store the same parts).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from loopir.arith import Analyzer
from loopir.errors import PassError
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import EQ, BufferLoad, IntImm, PrimExpr, Var
from loopir.ir.functor import (
    Mutator,
    all_buffers,
    collect_vars,
    substitute,
    touches_buffer,
)
from loopir.ir.op import thread_allreduce
from loopir.ir.reducer import Reducer, combine, identity, is_identity, match_reducer
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
from loopir.passes._walk import all_true, conjuncts, is_thread_loop
from loopir.passes.base import Pass
from loopir.passes.context import PassContext
from loopir.passes.cross_thread_tree import rows_fit_warps, tree_combine
from loopir.passes.lower_blocks import is_const_true

__all__ = ["LowerCrossThreadReduction", "cross_thread_reduce_vars"]

_P = "pass LowerCrossThreadReduction"


def cross_thread_reduce_vars(realize: BlockRealize) -> set[Var]:
    """Loop variables that feed a reduce iter var of ``realize``'s block."""
    out: set[Var] = set()
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        if iv.kind is not IterKind.SPATIAL:
            out.update(collect_vars(value))
    return out


def _spatial_vars(realize: BlockRealize) -> set[Var]:
    return {
        v for iv, e in zip(realize.block.iter_vars, realize.iter_values)
        if iv.kind is IterKind.SPATIAL for v in collect_vars(e)
    }  # fmt: skip


def _is_threadidx(lp: For) -> bool:
    return is_thread_loop(lp, ("threadIdx.",))


def _unit(lp: For) -> bool:
    return isinstance(lp.extent, IntImm) and lp.extent.value == 1


def _plan(root: Stmt) -> dict[Var, list[BlockRealize]]:
    """The blocks whose reduction runs across threads (a ``threadIdx`` loop feeds a reduce
    iter var), keyed by their outermost reduction loop."""
    plan: dict[Var, list[BlockRealize]] = {}

    def walk(node: Stmt, loops: list[For]) -> None:
        if isinstance(node, For):
            walk(node.body, [*loops, node])
        elif isinstance(node, SeqStmt):
            for s in node.seq:
                walk(s, loops)
        elif isinstance(node, BlockRealize):
            feeds = cross_thread_reduce_vars(node)
            related = [lp for lp in loops if lp.loop_var in feeds]
            if any(_is_threadidx(lp) for lp in related):
                plan.setdefault(related[0].loop_var, []).append(node)
            walk(node.block.body, loops)
        else:
            for child in _children(node):
                walk(child, loops)

    walk(root, [])
    return plan


def _children(node: Stmt) -> list[Stmt]:
    out: list[Stmt] = []
    for name in ("body", "then_case", "else_case", "init"):
        child = getattr(node, name, None)
        if isinstance(child, Stmt):
            out.append(child)
    return out


def _contains(node: Stmt, target: Stmt) -> bool:
    if node is target:
        return True
    if isinstance(node, SeqStmt):
        return any(_contains(s, target) for s in node.seq)
    if isinstance(node, BlockRealize):
        return _contains(node.block.body, target)
    return any(_contains(c, target) for c in _children(node))


@attrs.frozen
class _Level:
    """A loop of the reduction's nest with the statements beside the nest in its body."""

    loop: For
    role: str  # "reduce" (thread-bound reduction), "serial" (the thread's part) or "spatial"
    before: tuple[Stmt, ...]
    after: tuple[Stmt, ...]


def _levels(outer: For, realize: BlockRealize) -> list[_Level]:
    """The loops from ``outer`` down to ``realize``, each classified; raises what cannot be
    lowered (see the module doc)."""
    name = realize.block.name
    feeds, spatial = cross_thread_reduce_vars(realize), _spatial_vars(realize)
    out: list[_Level] = []
    node: Stmt = outer
    serial_above: For | None = None
    while node is not realize:
        if not isinstance(node, For):
            raise PassError(
                f"{_P}: the reduction of block {name!r} runs across threads, so the block must "
                f"sit under a nest of loops below its outermost reduction loop "
                f"{outer.loop_var.name} (found {type(node).__name__}); move the other work out"
            )
        items = list(node.body.seq) if isinstance(node.body, SeqStmt) else [node.body]
        pos = next(k for k, it in enumerate(items) if _contains(it, realize))
        role = _role(node, feeds, spatial, outer, name)
        before, after = tuple(items[:pos]), tuple(items[pos + 1:])
        if before or after:
            _check_siblings(node, role, serial_above, before + after, realize)
        if role == "serial" and serial_above is None:
            serial_above = node
        out.append(_Level(node, role, before, after))
        node = items[pos]
    return out


def _role(lp: For, feeds: set[Var], spatial: set[Var], outer: For, name: str) -> str:
    v = lp.loop_var
    where = f"loop {v.name}" + (f" ({lp.thread_tag})" if lp.kind is ForKind.THREAD_BINDING else "")
    if v in feeds and v in spatial:
        raise PassError(
            f"{_P}: {where} feeds both spatial and reduce iter vars of block {name!r} (a fused "
            "loop); a cross-thread reduction needs loops of the reduction alone"
        )
    if _unit(lp) and v not in feeds:
        return "spatial"  # one iteration: it goes anywhere
    if lp.kind is ForKind.THREAD_BINDING and not _is_threadidx(lp):
        raise PassError(
            f"{_P}: {where} lies between the reduction loop {outer.loop_var.name} and block "
            f"{name!r}, whose reduction runs across threads; only threadIdx loops and the "
            "reduction's own loops may lie there, all inside the kernel (reorder the reduction "
            "loops inside the blockIdx/vthread loops)"
        )
    if v in feeds:
        if _is_threadidx(lp):
            return "reduce"
        if lp.kind in (ForKind.SERIAL, ForKind.UNROLLED):
            return "serial"
        raise PassError(f"{_P}: {where} ({lp.kind.value}) feeds the cross-thread reduction of block {name!r}")
    if _is_threadidx(lp) and v in spatial:
        return "spatial"  # threads run in parallel anyway
    if v in spatial:
        raise PassError(
            f"{_P}: {where} lies between the reduction loop {outer.loop_var.name} and block "
            f"{name!r} and feeds one of its spatial iter vars; only reduction loops and thread "
            "loops may lie between the outermost reduction loop and the block (reorder the "
            "spatial loops outside)"
        )
    raise PassError(
        f"{_P}: {where} lies among the reduction loops of block {name!r} but feeds none of its "
        "iter vars (it would repeat the reduction)"
    )


def _init_runs(realize: BlockRealize, levels: list[_Level], enclosing: Sequence[For]) -> bool:
    """Whether the block's init runs within its reduction loops (else it accumulates onto the
    stored value throughout, as the copy of a later partition of ``loop_partition`` does).

    The init runs where every reduce iter var is at the minimum of its domain. Each iter
    var's value must be smallest at the first iteration of the reduction loops (then, bindings
    being one-to-one, the init runs there or nowhere); the predicate there must be provably
    true or provably false. Raises a PassError naming the block when either cannot be shown.
    ``enclosing``: the loops around ``levels`` (their variables are not sizes).
    """
    block, name = realize.block, realize.block.name
    loops = [lv.loop for lv in levels if lv.role != "spatial"]
    first: dict[Var, PrimExpr] = {lp.loop_var: lp.min for lp in loops}
    ana = Analyzer({lp.loop_var: Range(lp.min, lp.extent) for lp in loops})
    loop_names = ", ".join(lp.loop_var.name for lp in loops)
    conds: list[PrimExpr] = []
    for iv, value in zip(block.iter_vars, realize.iter_values):
        if iv.kind is IterKind.SPATIAL:
            continue
        start = ana.simplify(substitute(value, first))
        if not ana.can_prove(value >= start):
            raise PassError(
                f"{_P}: reduce iter var {iv.var.name} of block {name!r} (bound to {value}) is not "
                f"smallest at the first iteration of its reduction loops {loop_names}, so where "
                "its init runs cannot be placed before the cross-thread combine"
            )
        conds.append(EQ(start, iv.dom.min))
    feeds = set(first)
    conds += [substitute(cj, first) for cj in conjuncts(realize.predicate) if set(collect_vars(cj)) & feeds]
    cond = ana.simplify(all_true(conds))
    if not isinstance(cond, IntImm):
        # A symbolic size of 0 empties the reduction (``0 < cols`` at the first iteration):
        # then no iteration runs the block and nothing is combined; decide for sizes >= 1,
        # where the block runs (the write-back of an empty reduction stores the identity).
        loop_vars = {lp.loop_var for lp in (*enclosing, *(lv.loop for lv in levels))}
        sizes = [v for v in collect_vars(cond) if v not in loop_vars]
        for v in sizes:
            ana.bind(v, Range(IntImm(1, v.dtype), IntImm(2**31 - 2, v.dtype)))
        cond = ana.simplify(all_true(conds))
    if isinstance(cond, IntImm):
        return cond.value != 0
    raise PassError(
        f"{_P}: whether the init of block {name!r} runs within its reduction loops {loop_names} "
        f"depends on other values ({cond}); a cross-thread reduction needs it to run always or "
        "never (keep its reduction loops serial, or bind them so that it does)"
    )


def _check_siblings(lp: For, role: str, serial_above: For | None, others: tuple[Stmt, ...],
                    realize: BlockRealize) -> None:  # fmt: skip
    name = realize.block.name
    serial = serial_above or (lp if role == "serial" else None)
    if serial is not None:
        raise PassError(
            f"{_P}: other statements lie beside block {name!r} in the body of loop "
            f"{lp.loop_var.name}, inside its serial reduction loop {serial.loop_var.name}: the "
            "thread loops of a cross-thread reduction move outside its serial loops, which "
            "would change how often those statements run (move them out of the nest, or "
            "reorder the serial reduction loops inside the thread loops)"
        )
    out = realize.block.writes[0].buffer
    if any(touches_buffer(s, out) for s in others):
        raise PassError(
            f"{_P}: other statements under loop {lp.loop_var.name} beside the cross-thread "
            f"reduction of block {name!r} access its output {out.name}"
        )


def _threadidx_extents(root: Stmt) -> dict[str, int]:
    """The threadIdx extents launched under ``root`` (a kernel's outermost loop)."""
    out: dict[str, int] = {}

    def walk(node: Stmt) -> None:
        if isinstance(node, For) and _is_threadidx(node) and isinstance(node.extent, IntImm):
            out[str(node.thread_tag)] = node.extent.value
        if isinstance(node, SeqStmt):
            for s in node.seq:
                walk(s)
        elif isinstance(node, BlockRealize):
            walk(node.block.body)
        else:
            for c in _children(node):
                walk(c)

    walk(root)
    return out


class _Lower(Mutator):
    def __init__(self, func: PrimFunc, plan: dict[Var, list[BlockRealize]]) -> None:
        self.plan = plan
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
        targets = self.plan.get(node.loop_var)
        if targets:
            if len(targets) > 1:
                raise PassError(
                    f"{_P}: loop {node.loop_var.name} is the outermost reduction loop of blocks "
                    f"{', '.join(repr(r.block.name) for r in targets)}, reduced across threads; "
                    "each cross-thread reduction needs loops of its own (compute them in "
                    "separate loops)"
                )
            return self.lower(node, targets[0])
        self.loops.append(node)
        try:
            out: Stmt = self.generic_visit(node)  # a statement mutates to a statement
            return out
        finally:
            self.loops.pop()

    def lower(self, outer: For, realize: BlockRealize) -> Stmt:
        name = realize.block.name
        red = match_reducer(realize.block)
        if isinstance(red, str):
            raise PassError(f"{_P}: the reduction of block {name!r} is bound to threads but {red}")
        levels = _levels(outer, realize)
        for lv in levels:
            lp = lv.loop
            if _is_threadidx(lp) and not (isinstance(lp.extent, IntImm) and isinstance(lp.min, IntImm)
                                          and lp.min.value == 0):  # fmt: skip
                raise PassError(f"{_P}: the {lp.thread_tag} loop of block {name!r} needs range [0, constant)")
        shell = [lv for lv in levels if lv.role != "serial"]
        acc = Buffer(self.fresh(f"{name}_acc"), (1,), red.store.buffer.dtype, scope="local")
        self.new_buffers.append(acc)
        kernel = next((lp for lp in self.loops if lp.kind is ForKind.THREAD_BINDING), outer)
        combine_stmts, total = self.combine(red.op, acc, shell, _threadidx_extents(kernel), name)
        zero, one = IntImm(0, "int32"), IntImm(1, "int32")
        written = total.buffer  # the accumulator (thread_allreduce) or the shared parts
        cross = Block(
            self.fresh(f"{name}_cross_thread"), (), (BufferRegion(acc, (Range(zero, one),)),),
            (BufferRegion(written, tuple(Range(zero, e) for e in written.shape)),), seq(*combine_stmts),
        )  # fmt: skip
        core = seq(
            self.init_block(acc, red.op, name),
            self.in_thread(acc, realize, red, [lv.loop for lv in levels if lv.role == "serial"]),
            BlockRealize((), block=cross),
            self.write_back(realize, red, total, levels, _init_runs(realize, levels, self.loops)),
        )
        body = core
        for k in reversed(range(len(shell))):
            lv = shell[k]
            self.loops.extend(x.loop for x in shell[: k + 1])
            try:
                before = [self.visit(s) for s in lv.before]
                after = [self.visit(s) for s in lv.after]
            finally:
                del self.loops[len(self.loops) - k - 1:]
            body = attrs.evolve(lv.loop, body=seq(*before, body, *after))
        return body

    def init_block(self, acc: Buffer, op: str, name: str) -> Stmt:
        zero = IntImm(0, "int32")
        region = BufferRegion(acc, (Range(zero, IntImm(1, "int32")),))
        blk = Block(self.fresh(f"{name}_in_thread_init"), (), (), (region,),
                    BufferStore(acc, identity(op, acc.dtype), (zero,)))  # fmt: skip
        return BlockRealize((), block=blk)

    def in_thread(self, acc: Buffer, realize: BlockRealize, red: Reducer, serial: list[For]) -> Stmt:
        """The thread's part: the block without init, accumulating into ``acc``, under the
        serial reduction loops."""
        block, c = realize.block, red.store.buffer
        zero = IntImm(0, "int32")
        region = BufferRegion(acc, (Range(zero, IntImm(1, "int32")),))
        part = Block(
            self.fresh(f"{block.name}_in_thread"), block.iter_vars,
            tuple(r for r in block.reads if r.buffer is not c) + (region,), (region,),
            BufferStore(acc, combine(red.op, BufferLoad(acc, (zero,)), red.value), (zero,)),
        )  # fmt: skip
        nest: Stmt = BlockRealize(realize.iter_values, realize.predicate, part)
        for lp in reversed(serial):
            nest = attrs.evolve(lp, body=nest)
        return nest

    def combine(self, op: str, acc: Buffer, shell: list[_Level], launched: dict[str, int],
                name: str) -> tuple[list[Stmt], BufferLoad]:  # fmt: skip
        """The statements combining the threads' parts, and the load of the total."""
        part = BufferLoad(acc, (IntImm(0, "int32"),))
        reduce = [lv.loop for lv in shell if lv.role == "reduce"]
        inscope = [lp for lp in self.loops if is_thread_loop(lp)]
        inscope += [lv.loop for lv in shell if _is_threadidx(lv.loop)]
        tags = [str(lp.thread_tag) for lp in inscope if _is_threadidx(lp)]
        dup = next((t for t in tags if tags.count(t) > 1), None)
        if dup is not None:
            raise PassError(f"{_P}: two nested loops are bound to {dup} around the cross-thread reduction of block {name!r}")
        missing = sorted(set(launched) - set(tags))
        if {str(lp.thread_tag) for lp in reduce} == {"threadIdx.x"}:
            nt = launched.get("threadIdx.x", 1)
            rows = launched.get("threadIdx.y", 1) * launched.get("threadIdx.z", 1)
            # rows sharing warps combine through shared memory, when every thread knows its
            # row (else thread_allreduce, which CUDA refuses for them but the CPU runs)
            if rows == 1 or rows_fit_warps(nt) or missing:
                return [Evaluate(thread_allreduce(op, part, nt))], part
        if missing:
            raise PassError(
                f"{_P}: the cross-thread reduction of block {name!r} combines through shared "
                f"memory, but the kernel's {', '.join(missing)} loops do not enclose it (their "
                "threads would store the same parts); bind a loop around it to each thread axis "
                "the kernel launches"
            )
        group = [lp for lp in inscope if all(lp is not r for r in reduce)]
        buf, stmts, total = tree_combine(op, part, group, reduce, self.fresh(f"{name}_red"))
        self.new_buffers.append(buf)
        return stmts, total

    def write_back(self, realize: BlockRealize, red: Reducer, total: BufferLoad, levels: list[_Level],
                   init_runs: bool) -> Stmt:  # fmt: skip
        """The block's result stored by the threads at index 0 of the reduced thread axes:
        its spatial iter vars only, with the predicate's conjuncts that do not involve the
        reduction. The total is combined with the init value where the init runs, else with
        the value already stored (see [`_init_runs`][loopir.passes.cross_thread._init_runs])."""
        block, c = realize.block, red.store.buffer
        spatial = [(iv, v) for iv, v in zip(block.iter_vars, realize.iter_values)
                   if iv.kind is IterKind.SPATIAL]  # fmt: skip
        new_ivs = [IterVar(Var(iv.var.name, iv.var.dtype), iv.dom, IterKind.SPATIAL) for iv, _ in spatial]
        vmap: dict[Var, PrimExpr] = {iv.var: n.var for (iv, _), n in zip(spatial, new_ivs)}
        reduce_vars = {lv.loop.loop_var for lv in levels if lv.role != "spatial"}
        reduce_vars |= {iv.var for iv in block.iter_vars if iv.kind is not IterKind.SPATIAL}
        kept = [cj for cj in conjuncts(realize.predicate)
                if not set(collect_vars(cj)) & reduce_vars and not is_const_true(cj)]  # fmt: skip
        indices = tuple(substitute(i, vmap) for i in red.store.indices)
        writes = tuple(attrs.evolve(w, region=tuple(substitute(x, vmap) for x in w.region)) for w in block.writes)
        total_region = BufferRegion(total.buffer, tuple(Range(IntImm(0, "int32"), e) for e in total.buffer.shape))
        if init_runs:
            init_value = substitute(red.init_value, vmap)
            value = total if is_identity(red.op, red.init_value) else combine(red.op, init_value, total)
            init_reads = [r for r in block.reads if r.buffer is not c and touches_buffer(red.init_value, r.buffer)]
            reads = (total_region, *(attrs.evolve(r, region=tuple(substitute(x, vmap) for x in r.region))
                                     for r in init_reads))  # fmt: skip
        else:  # the block accumulates onto what is stored (a later partition of its loop)
            value = combine(red.op, BufferLoad(c, indices), total)
            reads = (total_region, *(w for w in writes if w.buffer is c))
        back = Block(self.fresh(f"{block.name}_write_back"), tuple(new_ivs), reads, writes,
                     BufferStore(c, value, indices))  # fmt: skip
        zeros = [EQ(lv.loop.loop_var, IntImm(0, lv.loop.loop_var.dtype)) for lv in levels if lv.role == "reduce"]
        return BlockRealize(tuple(v for _, v in spatial), all_true([*zeros, *kept]), back)


class LowerCrossThreadReduction(Pass):
    """Write out reductions bound to ``threadIdx`` loops (see the module doc)."""

    name = "LowerCrossThreadReduction"

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        root = func.body
        if not isinstance(root, BlockRealize):
            return func  # lowered (no blocks) or no root block: nothing bound to rewrite
        plan = _plan(root)
        if not plan:
            return func
        low = _Lower(func, plan)
        body = low.visit(root)
        assert isinstance(body, BlockRealize)
        block = attrs.evolve(body.block, alloc_buffers=body.block.alloc_buffers + tuple(low.new_buffers))
        return func.with_body(attrs.evolve(body, block=block))
