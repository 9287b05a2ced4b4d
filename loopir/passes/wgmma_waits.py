"""SinkWgmmaWaits: synchronous ``wgmma`` issued asynchronously, each wait sunk to its first use.

A ``ptx_wgmma`` call is ``wgmma.fence``, its MMAs, ``commit_group`` and ``wait_group 0``: the
issuing threads idle until the tensor cores are done. The pass splits it into the issue
(``ptx_wgmma_async``: the same ``asm`` without the wait) and a
[`ptx_wgmma_wait`][loopir.ir.op.ptx_wgmma_wait] placed as late as the program allows, so that
the code between them (on the CUDA cores) runs while the MMAs do: FlashAttention 3's
intra-warpgroup overlap of the softmax with the GEMMs (``examples.attention(..., overlap=True)``)
is this pass on a software-pipelined KV loop.

Where the wait goes: just before the first statement, in program order after the issue, that

* touches the group's accumulator or its register A operand (reading them before the wait is
  undefined, writing them too: PTX ISA, "Asynchronous Warpgroup Level Matrix
  Multiply-Accumulate"), including another ``wgmma`` into the same accumulator; or
* may write a buffer the group reads (its shared tiles: a store, a tensor-core or other call
  naming it), whoever the writer: the tensor cores read the tiles until the wait.

Barriers do not stop it (they do not order the tensor cores' reads; the race checker sees the
reads in flight until the wait, ``loopir.passes.race_inflight``, and ThreadSync the wait as a
read of the tiles). The search leaves the issue's enclosing statements outward: a ``threadIdx``
loop (the wait is wrapped in a copy of it, so that the issue's operands stay defined), a loop of
only ``wgmma`` issues (likewise, one wait per issue), a condition (the wait after it is
unconditional: ``wait_group`` with nothing of ours in flight waits for nothing; but first,
consecutive statements under one condition that reads only variables are put under one ``if``,
a pipeline's guarded prologue and epilogue steps among them, so that their waits stay inside it:
ptxas serializes every ``wgmma`` of a kernel whose issue under a condition is waited for outside
it, warning C7515). It stops at
the end of an allocation's body (the buffers may be the operands; and the race checker bounds a
wait's in-flight reads by walking back through the statements before it in its sequence,
``race_inflight.backward_span``, which sees an allocation's barriers only as a whole), and at
the end of the body of any other loop: the wait before the back-edge, so that the next iteration and the loop's exit both find the group
retired (a wait at the top of the next iteration would let the group run on across the
back-edge; left out: the first iteration and the exit would need their own). At the end of the
region every group left is retired.

The wait's count: ``wgmma.wait_group N`` waits until at most ``N`` of the thread's groups are
pending, and groups retire in the order they were committed, so a group is retired once at most
``N`` groups committed after it remain: ``N`` is the fewest groups any path commits between the
issue and the wait (a loop of unknown extent and a branch not taken count none).

``wgmma.fence`` (required before the first ``wgmma`` and whenever the accumulator or A registers
were written by other code) is part of every issue (``codegen_cuda.wgmma``'s helpers), so the
converted code needs no new fence.

What it applies to: the ``ptx_wgmma`` calls inside loops annotated
[`WGMMA_ASYNC_KEY`][loopir.passes.wgmma_waits.WGMMA_ASYNC_KEY] (``loopir.wgmma_async``; a
schedule puts it on the loop around its kernel, ``sch.annotate(i0, "loopir.wgmma_async", 1)``,
and it survives InjectSoftwarePipeline, which rewrites the loops inside), or every one in the
function under the PassContext key ``cuda.wgmma_async`` (default False: kernels that ask for
nothing are unchanged). It runs after InjectSoftwarePipeline (it places waits in the final
program order) and before ThreadSync. The CPU executor runs ``ptx_wgmma_async`` as the MMA at
the issue and the wait as nothing, so the result computes what the input did.

Example (before / after; ``tests/passes/test_wgmma_waits.py`` checks it as a golden file)::

    for j in T.serial(n):                              for j in T.serial(n):
        for ty in T.thread_binding(4, "threadIdx.y"):      for ty in T.thread_binding(4, "threadIdx.y"):
            ptx_wgmma(Q_s, K_s, S)                             ptx_wgmma_async(Q_s, K_s, S)
        for ty in T.thread_binding(4, "threadIdx.y"):      for ty in T.thread_binding(4, "threadIdx.y"):
            ptx_wgmma(P, V_s, acc)                             ptx_wgmma_async(P, V_s, acc)
        m = ...                                            m = ...
        S = softmax(S)                                     for ty in T.thread_binding(4, "threadIdx.y"):
        P = S                                                  ptx_wgmma_wait(1, Q_s, K_s, S)
                                                           S = softmax(S)
                                                           for ty in T.thread_binding(4, "threadIdx.y"):
                                                               ptx_wgmma_wait(0, P, V_s, acc)
                                                           P = S
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.equality import structural_equal
from loopir.ir.expr import BufferLoad, Call, IntImm, PrimExpr
from loopir.ir.functor import Mutator, fresh_loop_vars, post_order_stmts, post_order_visit
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
    seq,
)
from loopir.passes.base import Pass, require_lowered
from loopir.passes.context import PassContext, register_config
from loopir.passes.pipeline_mma import WgmmaAsync

__all__ = ["WGMMA_ASYNC_CONFIG", "WGMMA_ASYNC_KEY", "SinkWgmmaWaits", "wgmma_async_requested"]

WGMMA_ASYNC_KEY = "loopir.wgmma_async"
"""On a loop: the ``ptx_wgmma`` calls in its body are issued asynchronously, their waits sunk
(module doc)."""
WGMMA_ASYNC_CONFIG = "cuda.wgmma_async"

register_config(
    WGMMA_ASYNC_CONFIG,
    bool,
    False,
    "SinkWgmmaWaits: issue every synchronous ptx_wgmma asynchronously, its wgmma.wait_group sunk to "
    "the first statement that touches its accumulator or register A or writes its tiles (else only "
    "in loops annotated loopir.wgmma_async)",
)


@attrs.frozen
class _Open:
    """A group (or a loop nest of them) issued and not yet waited for: the wait statement for a
    count, the registers it holds, the buffers it reads, the fewest groups committed since."""

    wait: Callable[[int], Stmt]
    regs: frozenset[Buffer]
    tiles: frozenset[Buffer]
    after: int = 0

    def wrap(self, loop: For) -> _Open:
        """The wait inside a copy of ``loop`` (the issue's loop, whose variable its operands use)."""
        inner = self.wait
        return attrs.evolve(self, wait=lambda n: attrs.evolve(loop, body=inner(n)))

    def place(self) -> Stmt:
        return fresh_loop_vars(self.wait(self.after))


def _touched(s: Stmt) -> tuple[set[Buffer], set[Buffer]]:
    """The buffers ``s`` loads or stores, and those it may write: stored, or named by a call
    that is not a ``wgmma`` issue or wait (which only read their tiles)."""
    touched: set[Buffer] = set()
    written: set[Buffer] = set()

    def visit(n: object) -> None:
        if isinstance(n, BufferStore):
            touched.add(n.buffer)
            written.add(n.buffer)
        elif isinstance(n, BufferLoad):
            touched.add(n.buffer)
        elif isinstance(n, Call) and n.op not in (*op.WGMMA_ISSUES, "ptx_wgmma_wait"):
            written.update(a.buffer for a in n.args if isinstance(a, BufferLoad))

    post_order_visit(s, visit)
    return touched, written


def _groups(s: Stmt) -> int:
    """The fewest ``wgmma`` groups one thread commits running ``s`` (a call is one group)."""
    if isinstance(s, Evaluate):
        return int(isinstance(s.value, Call) and s.value.op in op.WGMMA_ISSUES)
    if isinstance(s, SeqStmt):
        return sum(_groups(c) for c in s.seq)
    if isinstance(s, For):
        inner = _groups(s.body)
        if s.kind is ForKind.THREAD_BINDING or inner == 0:
            return inner  # a thread runs its own iteration
        return s.extent.value * inner if isinstance(s.extent, IntImm) else 0
    if isinstance(s, IfThenElse):
        return min(_groups(s.then_case), _groups(s.else_case) if s.else_case is not None else 0)
    if isinstance(s, Allocate):
        return _groups(s.body)
    return 0


def _waits_of(s: Stmt) -> Callable[[int], Stmt]:
    """The wait nest of the issues ``s`` for a pending count."""

    def wait(n: int) -> Stmt:
        out: Stmt = WgmmaAsync(n).visit(s)
        return out

    return wait


def _only_issues(s: Stmt) -> bool:
    """Whether ``s`` is ``ptx_wgmma`` calls and loops around them, nothing else."""
    if isinstance(s, Evaluate):
        return isinstance(s.value, Call) and s.value.op == "ptx_wgmma"
    if isinstance(s, SeqStmt):
        return all(_only_issues(c) for c in s.seq)
    return isinstance(s, For) and _only_issues(s.body)


def _operands(s: Stmt) -> tuple[frozenset[Buffer], frozenset[Buffer]]:
    """The registers (accumulators, register A) and the tiles the issues of ``s`` use."""
    regs: set[Buffer] = set()
    tiles: set[Buffer] = set()

    def visit(n: object) -> None:
        if isinstance(n, Call) and n.op == "ptx_wgmma":
            _, a, b, c = n.args
            assert isinstance(a, BufferLoad) and isinstance(b, BufferLoad) and isinstance(c, BufferLoad)
            regs.add(c.buffer)
            (regs if op.wgmma_a_in_registers(n) else tiles).add(a.buffer)
            tiles.add(b.buffer)

    post_order_visit(s, visit)
    return frozenset(regs), frozenset(tiles)


def _sink(s: Stmt) -> tuple[Stmt, list[_Open]]:
    """``s`` with its ``ptx_wgmma`` issued asynchronously and the waits placed inside it, and
    the groups whose waits belong after it (module doc)."""
    if not _has_sync_issue(s):
        return s, []
    if _only_issues(s):  # an issue, or a loop nest of them: one wait nest, the same loops
        regs, tiles = _operands(s)
        issued: Stmt = WgmmaAsync(None).visit(s)
        return issued, [_Open(_waits_of(s), regs, tiles)]
    if isinstance(s, SeqStmt):
        return _sink_seq(list(s.seq))
    if isinstance(s, For):
        body, left = _sink(s.body)
        if s.kind is ForKind.THREAD_BINDING:
            return _evolve(s, body), [o.wrap(s) for o in left]
        return _evolve(s, seq(body, *_close(left))), []  # the waits before the back-edge
    if isinstance(s, IfThenElse):
        then, left = _sink(s.then_case)
        other, more = _sink(s.else_case) if s.else_case is not None else (None, [])
        if then is s.then_case and other is s.else_case:
            return s, left + more
        return attrs.evolve(s, then_case=then, else_case=other), left + more
    if isinstance(s, Allocate):
        body, left = _sink(s.body)
        return _evolve_alloc(s, seq(body, *_close(left))), []
    return s, []


def _merge_guards(stmts: list[Stmt]) -> list[Stmt]:
    """Consecutive ``if c`` without ``else`` and with one condition that reads no memory as one
    ``if c`` (the statements cannot change ``c``: it reads only variables), so that a wait can
    follow its issue inside it: a software pipeline's prologue and epilogue guard each
    statement of a step alike, and ptxas serializes every ``wgmma`` of a kernel where an issue
    under a condition is waited for outside it (C7515)."""
    out: list[Stmt] = []
    for c in stmts:
        prev = out[-1] if out else None
        if (isinstance(c, IfThenElse) and isinstance(prev, IfThenElse) and c.else_case is None
                and prev.else_case is None and _pure(c.condition)
                and structural_equal(c.condition, prev.condition, map_free_vars=False)):  # fmt: skip
            out[-1] = attrs.evolve(prev, then_case=seq(prev.then_case, c.then_case))
        else:
            out.append(c)
    return out


def _pure(cond: PrimExpr) -> bool:
    """Whether ``cond`` reads no buffer and calls nothing."""
    found: list[bool] = []
    post_order_visit(cond, lambda n: found.append(True) if isinstance(n, (BufferLoad, Call)) else None)
    return not found


def _sink_seq(stmts: list[Stmt]) -> tuple[Stmt, list[_Open]]:
    out: list[Stmt] = []
    open_: list[_Open] = []
    for c in _merge_guards(stmts):
        if open_:
            touched, written = _touched(c)
            due = [o for o in open_ if touched & o.regs or written & o.tiles]
            out += _close(due)
            open_ = [o for o in open_ if o not in due]
        new, left = _sink(c)
        g = _groups(c)
        open_ = [attrs.evolve(o, after=o.after + g) for o in open_] + left
        out.append(new)
    return seq(*out), open_


def _close(waits: list[_Open]) -> list[Stmt]:
    """The wait statements, the least pending count first (each retires what it names)."""
    return [o.place() for o in sorted(waits, key=lambda o: o.after)]


def _evolve_alloc(alloc: Allocate, body: Stmt) -> Allocate:
    return alloc if body is alloc.body else attrs.evolve(alloc, body=body)


def _evolve(loop: For, body: Stmt) -> For:
    return loop if body is loop.body else attrs.evolve(loop, body=body)


def _has_sync_issue(s: Stmt) -> bool:
    found: list[bool] = []
    post_order_visit(s, lambda n: found.append(True) if isinstance(n, Call) and n.op == "ptx_wgmma" else None)
    return bool(found)


def _region(s: Stmt) -> Stmt:
    if not _has_sync_issue(s):
        return s
    body, left = _sink(s)
    return seq(body, *_close(left))


class _Regions(Mutator):
    def visit_For(self, s: For) -> Stmt:
        if s.annotations.get(WGMMA_ASYNC_KEY):
            return _evolve(s, _region(s.body))
        out: Stmt = self.generic_visit(s)
        return out


def wgmma_async_requested(func: PrimFunc | None, ctx: PassContext) -> bool:
    """Whether the pass has work on ``func``: ``cuda.wgmma_async``, or a loop annotated
    ``loopir.wgmma_async``."""
    if ctx.get(WGMMA_ASYNC_CONFIG):
        return True
    if func is None:
        return False
    found: list[bool] = []
    post_order_stmts(func.body, lambda n: found.append(True) if isinstance(n, For) and n.annotations.get(
        WGMMA_ASYNC_KEY) else None)  # fmt: skip
    return bool(found)


class SinkWgmmaWaits(Pass):
    """Issue ``ptx_wgmma`` asynchronously with its wait sunk to its first use (module doc)."""

    name = "SinkWgmmaWaits"
    opt_level = 0
    required = False

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        require_lowered(func, self.name)
        body = _region(func.body) if ctx.get(WGMMA_ASYNC_CONFIG) else _Regions().visit(func.body)
        return func if body is func.body else func.with_body(body)
