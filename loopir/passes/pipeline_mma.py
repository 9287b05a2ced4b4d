"""Asynchronous ``wgmma`` in a software pipeline: ``loopir.pipeline_mma_in_flight``.

With the annotation [`MMA_IN_FLIGHT_KEY`][loopir.passes.pipeline_mma.MMA_IN_FLIGHT_KEY] ``= 1``
on a loop that InjectSoftwarePipeline pipelines, each statement that issues ``ptx_wgmma`` (the
compute of stage ``s``) issues it asynchronously instead (``ptx_wgmma_async``: fence, MMAs,
commit, no wait), and a new statement right after it in the step's order retires it one step
later: the same loop nest with each issue replaced by ``ptx_wgmma_wait(g, issue)``, in stage
``s + 1`` (``g``: the groups one execution of the compute issues, what the next step's compute
leaves in flight when the wait runs; 0 in the last step, where no compute follows: the
``wgmma.wait_group 0`` before the accumulators are stored). The MMAs of step ``k`` thus run
while step ``k + 1`` waits for its copies and synchronizes (CUTLASS's sm90 mainloops:
``warpgroup_wait<K_PIPE_MMAS>``, then the buffer of the retired step is released).

The wait reads what its groups read (the operand tiles, ``ptx_wgmma_wait``'s arguments), so the
pipeline's own rules do the rest: the tiles, written in stage 0 and read in stage ``s + 1``, get
``s + 2`` versions, so the copies run ``s`` steps ahead of the compute with ``S = s + 2``
versions (a prefetch distance of ``S - 2``: the copy issued during step ``k + 1`` writes the
version step ``k - 1`` read, retired by the wait of step ``k``), and ThreadSync places the
barrier that orders that copy after the wait. The race checker sees the issue's tile reads in
flight until the wait that retires them (``loopir.passes.race_check``), so a version
overwritten before its wait (a distance of ``S - 1``) is a proven race.

Example (before / after, one async stage, the compute in stage 1, ``S = 3`` versions)::

    for k in T.serial(n, annotations={      A_s[0] = copy(0)                      # prologue
            "software_pipeline_stage":       A_s[1] = copy(1); commit; wait(1); sync
                [0, 1],                      ptx_wgmma_async(A_s[0], C)
            "loopir.pipeline_mma_in_flight": for k in T.serial(n - 2):            # steady
                1, ...}):                        A_s[(k + 2) % 3] = copy(k + 2); commit; wait(1); sync
        A_s = copy(k)                            ptx_wgmma_async(A_s[(k + 1) % 3], C)
        ptx_wgmma(A_s, C)                        ptx_wgmma_wait(1, A_s[k % 3], C)
                                             ptx_wgmma_async(A_s[(n - 1) % 3], C); ...   # epilogue
                                             ptx_wgmma_wait(1, A_s[(n - 2) % 3], C)
                                             ptx_wgmma_wait(0, A_s[(n - 1) % 3], C)

(ThreadSync adds the barrier at the top of each steady step: the copy of version
``(k + 2) % 3`` comes after every thread's wait for the MMAs that read it.)
"""

from __future__ import annotations

from typing import Any

from loopir.errors import PassError
from loopir.ir import op
from loopir.ir.expr import Call, IntImm
from loopir.ir.functor import Mutator, post_order_visit
from loopir.ir.stmt import Evaluate, For, ForKind, SeqStmt, Stmt

__all__ = ["MMA_IN_FLIGHT_KEY", "WgmmaAsync", "set_pending", "with_retiring_waits"]

MMA_IN_FLIGHT_KEY = "loopir.pipeline_mma_in_flight"
"""On a pipelined loop: the ``wgmma`` steps in flight while the next step runs (1, or 0 / absent:
each step's ``wgmma`` completes in its call). See the module doc."""


def _fail(loop: For, why: str) -> PassError:
    return PassError(f"pass InjectSoftwarePipeline: loop {loop.loop_var.name}: {MMA_IN_FLIGHT_KEY}: {why}")


def _issues(s: Stmt, loop: For) -> int:
    """How many ``ptx_wgmma`` one thread issues running ``s``, after checking that ``s`` does
    nothing else (the wait statement copies its loops)."""
    if isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.op == "ptx_wgmma":
        return 1
    if isinstance(s, SeqStmt):
        return sum(_issues(c, loop) for c in s.seq)
    if isinstance(s, For):
        inner = _issues(s.body, loop)
        if s.kind is ForKind.THREAD_BINDING or inner == 0:
            return inner  # a thread runs its own iteration of a thread loop
        if not isinstance(s.extent, IntImm):
            raise _fail(loop, f"the wgmma calls are under loop {s.loop_var.name} of extent {s.extent}, "
                        "not a constant: the groups per step are unknown")  # fmt: skip
        return s.extent.value * inner
    raise _fail(loop, f"the statement with wgmma calls also does other work ({type(s).__name__}); "
                "only the wgmma calls and their loops can be issued asynchronously")  # fmt: skip


class WgmmaAsync(Mutator):
    """Each ``ptx_wgmma`` call: issued asynchronously (``wait`` None) or its retiring wait
    (``wgmma.wait_group wait``); also ``passes.wgmma_waits``'."""

    def __init__(self, wait: int | None) -> None:
        super().__init__()
        self.wait = wait

    def visit_Evaluate(self, s: Evaluate) -> Stmt:
        v = s.value
        if not (isinstance(v, Call) and v.op == "ptx_wgmma"):
            return s
        issue = Call(v.dtype, "ptx_wgmma_async", v.args)
        return Evaluate(issue if self.wait is None else op.ptx_wgmma_wait(self.wait, issue))


def with_retiring_waits(loop: For, stmts: list[Stmt], stages: list[int], order: list[int]
                        ) -> tuple[list[Stmt], list[int], list[int], dict[int, int]]:  # fmt: skip
    """The loop's statements with their ``wgmma`` issued asynchronously and a retiring wait
    after each compute (module doc): new statements, stages and order, and the wait statements'
    indices mapped to their computes'."""
    depth: Any = loop.annotations.get(MMA_IN_FLIGHT_KEY, 0)
    if isinstance(depth, bool) or depth not in (0, 1):
        raise _fail(loop, f"must be 0 or 1 (one step's MMAs in flight), got {depth!r}")
    stmts, stages, order = list(stmts), list(stages), list(order)
    retire: dict[int, int] = {}
    for i in range(len(stmts) if depth else 0):
        if not _wgmma_calls(stmts[i]):
            continue
        groups = _issues(stmts[i], loop)
        w = len(stmts)
        stmts.append(WgmmaAsync(groups).visit(stmts[i]))
        stmts[i] = WgmmaAsync(None).visit(stmts[i])
        stages.append(stages[i] + 1)
        order.insert(order.index(i) + 1, w)
        retire[w] = i
    if depth and not retire:
        raise _fail(loop, "the loop issues no ptx_wgmma")
    return stmts, stages, order, retire


def _wgmma_calls(s: Stmt) -> list[Call]:
    out: list[Call] = []
    post_order_visit(s, lambda n: out.append(n) if isinstance(n, Call) and n.op == "ptx_wgmma" else None)
    return out


class _Pending(Mutator):
    def visit_Call(self, e: Call) -> Any:
        if e.op == "ptx_wgmma_wait":
            return Call(e.dtype, e.op, (IntImm(0, "int32"), *e.args[1:]))
        return self.generic_visit(e)


def set_pending(s: Stmt) -> Stmt:
    """``s`` with the pending count of its ``ptx_wgmma_wait`` calls 0: a step after the last
    compute, where nothing newer is in flight (the ``wgmma.wait_group 0`` before the
    accumulators are read)."""
    out: Stmt = _Pending().visit(s)
    return out
