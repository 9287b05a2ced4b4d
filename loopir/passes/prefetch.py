"""InjectSharedPrefetch: register double buffering of cooperative shared-memory fetches.

TVM users know this as software pipelining / double buffering. A serial loop ``L`` (the
``k0`` loop of a GEMM) whose body, after lowering, is ::

    sync; S[..] = G[.. L ..] (guarded, per thread, a few instances); ...; sync; compute(S)

is rewritten so that the global loads of the *next* iteration are in flight while the
current tile is computed::

    R = allocate((n,), "local")                   # one register per store instance
    if L_extent > 0: R[i] = G[.. L_min ..]        # prologue: the loads of the first iteration
    for L:
        sync
        S[..] = R[i]                              # same guards as the original stores
        sync
        if L + 1 < L_min + L_extent:
            R[i] = G[.. L + 1 ..]                 # guards of iteration L + 1
        compute(S)

Why it is exact: the moved loads read only global buffers that nothing in the function writes,
so reading them one iteration early gives the same values; each load runs under the guards the
original store would have at that iteration (with ``L + 1`` substituted), so no access becomes
out of bounds; the store of iteration ``L`` runs under its unchanged guards, which are the very
conditions under which the register was loaded. Registers are private to a thread, so no new
barrier is needed. The test ``L + 1 < L_min + L_extent`` is written as the first conjunct of
each fetch's outermost guard, so nothing of iteration ``L + 1`` (not even a guard, which could
divide by zero) is evaluated unless the original evaluates it too. The pass adds no barrier and
moves none, so barrier uniformity is that of its input (ThreadSync's checks). Anything the pass
cannot prove safe is left unchanged and the reason logged (and kept in
[`InjectSharedPrefetch.report`][loopir.passes.prefetch.InjectSharedPrefetch.report]).

Which loops: serial loops annotated ``"loopir.prefetch_shared": True`` (``sch.annotate``),
or every eligible serial loop when the PassContext sets ``tir.prefetch_shared``. An explicit
``False`` annotation opts a loop out.
"""

from __future__ import annotations

import logging
import math

import attrs

from loopir import arith
from loopir.errors import PassError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import And, BufferLoad, Call, IntImm, PrimExpr, Ramp
from loopir.ir.functor import (
    Mutator,
    fresh_loop_vars,
    post_order_stmts,
    post_order_visit,
    substitute,
)
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
    seq,
)
from loopir.passes._walk import int_of
from loopir.passes.base import Pass, require_lowered
from loopir.passes.context import PassContext, register_config
from loopir.passes.thread_sync import is_sync

__all__ = ["ANNOTATION_KEY", "MAX_PREFETCH_REGISTERS", "InjectSharedPrefetch", "prefetch_requested"]

logger = logging.getLogger(__name__)

ANNOTATION_KEY = "loopir.prefetch_shared"
"""The loop annotation that requests the rewrite (set with ``sch.annotate``)."""
MAX_PREFETCH_REGISTERS = 64
"""Registers a thread may spend on prefetching one loop; more would risk spills, so refuse."""

register_config(
    "tir.prefetch_shared",
    bool,
    False,
    "prefetch the next shared-memory tile of every eligible serial loop into registers "
    "(InjectSharedPrefetch; per loop: annotation 'loopir.prefetch_shared')",
)


class _Refuse(Exception):
    """The loop cannot be rewritten safely; the message says why."""


@attrs.frozen(eq=False)
class _Fetch:
    """One cooperative fetch: a chain of loops / guards ending in one shared-memory store."""

    stmt: Stmt
    loops: tuple[For, ...]
    store: BufferStore


def _annotation(loop: For) -> bool | None:
    """The loop's prefetch request: True/False, or None when not annotated."""
    if ANNOTATION_KEY not in loop.annotations:
        return None
    value = loop.annotations[ANNOTATION_KEY]
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise PassError(
        f"pass InjectSharedPrefetch: loop {loop.loop_var.name}: annotation {ANNOTATION_KEY!r} "
        f"must be a bool, got {value!r}"
    )


def _written_buffers(func: PrimFunc) -> set[Buffer]:
    out: set[Buffer] = set()

    def f(n: object) -> None:
        if isinstance(n, BufferStore):
            out.add(n.buffer)

    post_order_visit(func.body, f)
    return out


def _check_expr(e: PrimExpr, what: str, allow_global_loads: frozenset[Buffer] | None) -> int:
    """Refuse loads (unless of read-only global buffers, when allowed) and impure calls.

    Returns the number of global loads found.
    """
    loads = 0
    problem: list[str] = []

    def f(n: object) -> None:
        nonlocal loads
        if isinstance(n, BufferLoad):
            if allow_global_loads is None:
                problem.append(f"{what} reads buffer {n.buffer.name}")
            elif n.buffer.scope != "global":
                problem.append(f"{what} reads {n.buffer.scope} buffer {n.buffer.name}")
            elif n.buffer not in allow_global_loads:
                problem.append(f"{what} reads {n.buffer.name}, which the function writes")
            else:
                loads += 1
        elif isinstance(n, Call) and not n.pure:
            problem.append(f"{what} calls impure {n.op}")
        elif isinstance(n, Ramp):
            problem.append(f"{what} is a vector (Ramp) expression")

    post_order_visit(e, f)
    if problem:
        raise _Refuse(problem[0])
    return loads


def _analyze_fetch(s: Stmt, readonly: frozenset[Buffer]) -> _Fetch:
    """``s`` as a fetch chain, or `_Refuse`."""
    loops: list[For] = []
    node = s
    while True:
        if isinstance(node, For):
            if node.kind not in (ForKind.SERIAL, ForKind.UNROLLED, ForKind.VECTORIZED):
                raise _Refuse(f"fetch loop {node.loop_var.name} is {node.kind.name.lower()}")
            if not (isinstance(node.min, IntImm) and isinstance(node.extent, IntImm)):
                raise _Refuse(f"fetch loop {node.loop_var.name} has a non-constant range")
            loops.append(node)
            node = node.body
        elif isinstance(node, IfThenElse):
            if node.else_case is not None:
                raise _Refuse("a fetch guard has an else branch")
            _check_expr(node.condition, "a fetch guard", None)
            node = node.then_case
        elif isinstance(node, BufferStore):
            break
        else:
            raise _Refuse(f"the fetch is not a single guarded store ({type(node).__name__})")
    if node.buffer.scope != "shared":
        raise _Refuse(f"the store writes {node.buffer.scope} buffer {node.buffer.name}, not shared")
    if dt.lanes(node.value.dtype) != 1:
        raise _Refuse(f"the store into {node.buffer.name} is a vector store")
    for i in node.indices:
        _check_expr(i, f"the store index of {node.buffer.name}", None)
    if _check_expr(node.value, f"the value stored into {node.buffer.name}", readonly) == 0:
        raise _Refuse(f"the value stored into {node.buffer.name} reads no global buffer")
    return _Fetch(s, tuple(loops), node)


def _stores_shared(s: Stmt) -> bool:
    found = False

    def f(n: object) -> None:
        nonlocal found
        if isinstance(n, BufferStore) and n.buffer.scope == "shared":
            found = True

    post_order_visit(s, f)
    return found


def _guard_first(chain: Stmt, cond: PrimExpr) -> Stmt:
    """``chain`` with ``cond`` evaluated before any of its guards.

    ``cond`` (the next iteration exists) becomes the first conjunct of the outermost guard, so
    nothing of iteration ``L + 1`` is evaluated unless that iteration exists (the guards of an
    iteration the original never runs could trap, e.g. divide by zero); with no guard in the
    chain it guards the store. Keeping it next to the other guards, rather than around the whole
    chain, lets the CUDA backend fold all of them into one predicate of a branch-free load in
    the compute's basic block (an ``if`` around the group becomes a branch that nvcc places
    after the FMAs).
    """

    class _G(Mutator):
        def __init__(self) -> None:
            self.done = False

        def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
            if self.done:
                return node
            self.done = True
            return attrs.evolve(node, condition=And(cond, node.condition))

        def visit_BufferStore(self, node: BufferStore) -> Stmt:
            if self.done:
                return node
            self.done = True
            return IfThenElse(cond, node)

    out: Stmt = _G().visit(chain)
    return out


class _ReplaceLeaf(Mutator):
    def __init__(self, old: BufferStore, new: Stmt) -> None:
        self.old, self.new = old, new

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        return self.new if node is self.old else node


def _simplify_conds(s: Stmt) -> Stmt:
    """Fold ``(k_0 + 1) * 4``-style terms the substitution left in guards, values, indices."""

    class _S(Mutator):
        def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
            then = self.visit(node.then_case)
            return attrs.evolve(node, condition=arith.simplify(node.condition), then_case=then)

        def visit_BufferStore(self, node: BufferStore) -> Stmt:
            return attrs.evolve(
                node,
                value=arith.simplify(node.value),
                indices=tuple(arith.simplify(i) for i in node.indices),
            )

    out: Stmt = _S().visit(s)
    return out


class InjectSharedPrefetch(Pass):
    """Prefetch the next iteration's shared-memory tile into registers (see module doc).

    Parameters
    ----------
    max_registers
        Most registers one loop's prefetch may use per thread; loops needing more are refused.

    Attributes
    ----------
    report
        After a run: ``[(loop name, "prefetched n registers" or the refusal reason)]`` for every
        loop that was requested.
    """

    name = "InjectSharedPrefetch"

    def __init__(self, max_registers: int = MAX_PREFETCH_REGISTERS) -> None:
        if isinstance(max_registers, bool) or not isinstance(max_registers, int) or max_registers < 1:
            raise PassError(
                f"pass InjectSharedPrefetch: max_registers must be a positive int, got {max_registers!r}"
            )
        self.max_registers = max_registers
        self.report: list[tuple[str, str]] = []

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        require_lowered(func, self.name)
        self.report = []
        everywhere = bool(ctx.get("tir.prefetch_shared"))
        readonly = frozenset(b for b in func.params if b.scope == "global") - _written_buffers(func)
        taken = {b.name for b in func.params}

        def names(n: object) -> None:
            if isinstance(n, Allocate):
                taken.add(n.buffer.name)

        post_order_visit(func.body, names)
        outer = self

        class _Walk(Mutator):
            def visit_For(self, node: For) -> Stmt:
                node = self.generic_visit(node)  # inner loops first
                want = _annotation(node)
                if node.kind is not ForKind.SERIAL:
                    if want:
                        outer._note(node, f"the loop is {node.kind.name.lower()}, not serial", True)
                    return node
                if not (want or (want is None and everywhere)):
                    return node
                if not want and not _stores_shared(node.body):
                    return node  # under the config only loops that fill shared memory count
                try:
                    new, nregs = outer._rewrite(node, readonly, taken)
                except _Refuse as r:
                    outer._note(node, f"not prefetched: {r}", bool(want))
                    return node
                outer._note(node, f"prefetched {nregs} registers", False)
                return new

        body = _Walk().visit(func.body)
        return func if body is func.body else func.with_body(body)

    def _note(self, loop: For, text: str, warn: bool) -> None:
        self.report.append((loop.loop_var.name, text))
        (logger.warning if warn else logger.info)(
            "pass %s: loop %s: %s", self.name, loop.loop_var.name, text
        )

    def _rewrite(self, loop: For, readonly: frozenset[Buffer], taken: set[str]) -> tuple[Stmt, int]:
        stmts = list(loop.body.seq) if isinstance(loop.body, SeqStmt) else [loop.body]
        i = 1 if stmts and is_sync(stmts[0]) else 0
        head = stmts[:i]
        fetches: list[_Fetch] = []
        reason = ""
        while i < len(stmts) and not is_sync(stmts[i]):
            try:
                fetches.append(_analyze_fetch(stmts[i], readonly))
            except _Refuse as r:
                reason = str(r)
                break
            i += 1
        if not fetches:
            raise _Refuse(reason or "the loop body does not start with a shared-memory fetch")
        if i >= len(stmts) or not is_sync(stmts[i]):
            tail = f" ({reason})" if reason else ""
            raise _Refuse(f"the fetch is not followed by a barrier{tail}")
        rest = stmts[i + 1 :]
        if not rest:
            raise _Refuse("nothing after the fetch's barrier to overlap the loads with")
        # (fetch loops have constant ranges: _analyze_fetch refuses others)
        total = sum(math.prod(int_of(f.extent) for f in x.loops) for x in fetches)
        if total > self.max_registers:
            raise _Refuse(f"it needs {total} registers per thread (limit {self.max_registers})")

        L = loop.loop_var
        allocs: list[Buffer] = []
        stores: list[Stmt] = []
        loads: list[tuple[_Fetch, BufferStore]] = []
        for x in fetches:
            n = math.prod(int_of(f.extent) for f in x.loops)
            name = f"{x.store.buffer.name}_prefetch"
            k = 1
            while name in taken:
                name = f"{x.store.buffer.name}_prefetch_{k}"
                k += 1
            taken.add(name)
            reg = Buffer(name, (n,), x.store.buffer.dtype, "local")
            allocs.append(reg)
            # Row-major slot of this instance: innermost (vectorized) loop has stride 1.
            idx: PrimExpr | None = None
            stride = 1
            for f in reversed(x.loops):
                term = f.loop_var if int_of(f.min) == 0 else f.loop_var - f.min
                part = term if stride == 1 else term * stride
                idx = part if idx is None else idx + part
                stride *= int_of(f.extent)
            idx = IntImm(0, "int32") if idx is None else arith.simplify(idx)
            store = BufferStore(x.store.buffer, BufferLoad(reg, (idx,)), x.store.indices)
            stores.append(_ReplaceLeaf(x.store, store).visit(x.stmt))
            loads.append((x, BufferStore(reg, x.store.value, (idx,))))

        def loads_at(it: PrimExpr, cond: PrimExpr | None) -> Stmt:
            """The loads with ``L -> it``, each chain also guarded by ``cond``."""
            out = []
            for x, leaf in loads:
                chain = _ReplaceLeaf(x.store, leaf).visit(x.stmt)
                chain = _simplify_conds(fresh_loop_vars(substitute(chain, {L: it})))
                out.append(chain if cond is None else _guard_first(chain, cond))
            return seq(*out)

        end = loop.min + loop.extent
        nxt = arith.simplify(L + 1)
        in_loop = loads_at(nxt, arith.simplify(nxt < end))
        body = seq(*head, *stores, stmts[i], in_loop, *rest)
        # Drop the request once served, so lowering an already lowered function again does
        # not try to prefetch the prefetch registers.
        new_loop = attrs.evolve(loop, body=body, annotations=loop.annotations.remove(ANNOTATION_KEY))
        prologue = loads_at(loop.min, None)
        if not arith.can_prove(loop.extent > 0):
            prologue = IfThenElse(arith.simplify(loop.extent > 0), prologue)
        out: Stmt = seq(prologue, new_loop)
        for reg in reversed(allocs):
            out = Allocate(reg, out)
        return out, total


def prefetch_requested(func: PrimFunc | None, ctx: PassContext) -> bool:
    """Whether lowering ``func`` under ``ctx`` should run
    [`InjectSharedPrefetch`][loopir.passes.prefetch.InjectSharedPrefetch]: ``tir.prefetch_shared``
    is set, or some loop carries the annotation."""
    if ctx.get("tir.prefetch_shared"):
        return True
    if func is None:
        return False
    found = False

    def f(n: object) -> None:
        nonlocal found
        if isinstance(n, For) and ANNOTATION_KEY in n.annotations:
            found = True

    post_order_stmts(func.body, f)
    return found
