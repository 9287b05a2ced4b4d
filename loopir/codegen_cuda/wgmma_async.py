"""The accumulators of asynchronous ``wgmma``: untouched from the issue to their retiring wait.

``ptx_wgmma_async`` returns before the tensor cores have written its accumulator registers
(``wgmma.mma_async`` without ``wgmma.wait_group``): until a ``wgmma.wait_group 0`` (a
``ptx_wgmma_wait`` with ``pending`` 0, or a synchronous ``ptx_wgmma``, which ends with one)
no other code may read or write them (PTX ISA, "Asynchronous Warpgroup Level Matrix
Multiply-Accumulate": accessing the accumulator registers before the wait is undefined). A
``wait_group N > 0`` retires only older groups, and the pipelines that use it issue the next
MMA into the same registers, so only the wait 0 ends the ban. Another ``wgmma`` accumulating
into them is allowed: the hardware orders the MMAs of one warpgroup on one accumulator.

[`check_accumulators`][loopir.codegen_cuda.wgmma_async.check_accumulators] walks a kernel in
program order (each loop body twice, so that the end of one iteration meets the start of the
next; both branches of a condition) and raises [`CodegenError`][loopir.errors.CodegenError]
naming the first statement that touches an accumulator in flight, or the issue whose group no
wait 0 retires before the kernel ends.
"""

from __future__ import annotations

from loopir.errors import CodegenError
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, IntImm
from loopir.ir.functor import post_order_visit
from loopir.ir.op import WGMMA_ISSUES, wgmma_a_in_registers
from loopir.ir.printer import script
from loopir.ir.stmt import Allocate, BufferStore, Evaluate, For, IfThenElse, SeqStmt, Stmt

__all__ = ["check_accumulators"]

#: accumulator buffer -> the issue statement that put it in flight
_InFlight = dict[Buffer, Stmt]


def _fail(kernel: str, why: str, stmt: Stmt) -> CodegenError:
    return CodegenError(f"CUDA codegen: kernel {kernel}: {why}:\n  {script(stmt).splitlines()[0]}")


def _touched(s: Stmt) -> set[Buffer]:
    """The buffers a leaf statement loads or stores."""
    out: set[Buffer] = set()
    if isinstance(s, BufferStore):
        out.add(s.buffer)
    post_order_visit(s, lambda n: out.add(n.buffer) if isinstance(n, BufferLoad) else None)
    return out


def _leaf(kernel: str, s: Stmt, state: _InFlight) -> _InFlight:
    call = s.value if isinstance(s, Evaluate) else None
    if isinstance(call, Call) and call.op == "ptx_wgmma_wait":
        pending = call.args[0]
        return {} if isinstance(pending, IntImm) and pending.value == 0 else state
    if isinstance(call, Call) and call.op in WGMMA_ISSUES:
        acc, a = call.args[3], call.args[1]
        assert isinstance(acc, BufferLoad) and isinstance(a, BufferLoad)
        if call.op == "ptx_wgmma":
            return {}  # it ends with wait_group 0, which retires every earlier group too
        # the accumulator, and A when it is registers (the tensor cores read them until the
        # wait: PTX forbids writing them meanwhile); shared tiles are the race checker's
        regs = {acc.buffer: s, **({a.buffer: s} if wgmma_a_in_registers(call) else {})}
        return {**state, **regs}
    hit = _touched(s) & state.keys()
    if hit:
        buf = sorted(hit, key=lambda b: b.name)[0]
        issue = script(state[buf]).splitlines()[0].strip()
        raise _fail(kernel, f"the accumulator {buf.name} of an asynchronous wgmma ({issue}) is touched "
                    "before a ptx_wgmma_wait(0) retires its group", s)  # fmt: skip
    return state


def _walk(kernel: str, s: Stmt, state: _InFlight) -> _InFlight:
    if isinstance(s, SeqStmt):
        for c in s.seq:
            state = _walk(kernel, c, state)
        return state
    if isinstance(s, For):
        # twice: what the end of one iteration leaves in flight meets the next iteration
        after = _walk(kernel, s.body, _walk(kernel, s.body, state))
        runs = isinstance(s.extent, IntImm) and s.extent.value >= 1
        return after if runs else {**state, **after}  # a loop that may not run keeps the state
    if isinstance(s, Allocate):
        return _walk(kernel, s.body, state)
    if isinstance(s, IfThenElse):
        taken = _walk(kernel, s.then_case, state)
        other = _walk(kernel, s.else_case, state) if s.else_case is not None else state
        return {**other, **taken}
    return _leaf(kernel, s, state)


def check_accumulators(kernel: str, body: Stmt) -> None:
    """Refuse a kernel that touches the accumulator of an asynchronous ``wgmma`` before a
    ``wgmma.wait_group 0`` retires it, or leaves one in flight at its end (module doc).

    Raises
    ------
    CodegenError
        Naming the kernel, the accumulator, the issue and the offending statement.
    """
    left = _walk(kernel, body, {})
    if left:
        buf, issue = sorted(left.items(), key=lambda kv: kv[0].name)[0]
        raise _fail(kernel, f"the asynchronous wgmma into {buf.name} is never retired by a ptx_wgmma_wait(0)", issue)
