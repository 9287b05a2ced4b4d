"""The accumulators of asynchronous ``wgmma``: untouched from the issue to their retiring wait.

``ptx_wgmma_async`` returns before the tensor cores have written its accumulator registers
(``wgmma.mma_async`` without ``wgmma.wait_group``): until a ``wgmma.wait_group`` retires its group
no other code may read or write them, nor the registers of a register A operand (PTX ISA,
"Asynchronous Warpgroup Level Matrix Multiply-Accumulate": accessing the accumulator registers
before the wait is undefined, and so is writing the A registers). Groups retire in the order they
were committed: ``wait_group N`` (a ``ptx_wgmma_wait`` with ``pending`` N) leaves at most the
``N`` newest groups in flight, and a synchronous ``ptx_wgmma`` ends with ``wait_group 0``. So a
pipeline that issues the next MMA into the same registers before its ``wait_group 1`` keeps them
in flight (the newest group holds them), while FlashAttention 3's ``S`` GEMM, issued before the
``P V`` GEMM, is retired by the ``wait_group 1`` after both (``passes.wgmma_waits``). Another
``wgmma`` accumulating into registers in flight is allowed: the hardware orders the MMAs of one
warpgroup on one accumulator.

[`check_accumulators`][loopir.codegen_cuda.wgmma_async.check_accumulators] walks a kernel in
program order (each loop body twice, so that the end of one iteration meets the start of the
next, a ``threadIdx`` loop's once: a thread runs one iteration; both branches of a condition, the groups of both kept, aligned from the newest) and raises
[`CodegenError`][loopir.errors.CodegenError] naming the first statement that touches registers in
flight, or the issue whose group no wait retires before the kernel ends.
"""

from __future__ import annotations

from loopir.errors import CodegenError
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, IntImm
from loopir.ir.functor import post_order_visit
from loopir.ir.op import WGMMA_ISSUES, wgmma_a_in_registers
from loopir.ir.printer import script
from loopir.ir.stmt import Allocate, BufferStore, Evaluate, For, ForKind, IfThenElse, SeqStmt, Stmt

__all__ = ["check_accumulators"]

#: The groups in flight, oldest first: each its registers (accumulator, register A), each
#: register mapped to the issue statement that put it in flight.
_InFlight = tuple[dict[Buffer, Stmt], ...]


def _merge(a: _InFlight, b: _InFlight) -> _InFlight:
    """The groups of either path, aligned from the newest (a wait keeps the newest ``N`` of
    each path: their union)."""
    n = max(len(a), len(b))
    empty: dict[Buffer, Stmt] = {}
    pa: _InFlight = (empty,) * (n - len(a)) + a
    pb: _InFlight = (empty,) * (n - len(b)) + b
    return tuple({**x, **y} for x, y in zip(pa, pb))


def _registers(state: _InFlight) -> dict[Buffer, Stmt]:
    out: dict[Buffer, Stmt] = {}
    for g in state:
        out.update(g)
    return out


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
        keep = pending.value if isinstance(pending, IntImm) else len(state)
        return state[len(state) - keep:] if keep < len(state) else state  # the newest `keep`
    if isinstance(call, Call) and call.op in WGMMA_ISSUES:
        acc, a = call.args[3], call.args[1]
        assert isinstance(acc, BufferLoad) and isinstance(a, BufferLoad)
        if call.op == "ptx_wgmma":
            return ()  # it ends with wait_group 0, which retires every earlier group too
        # the accumulator, and A when it is registers (the tensor cores read them until the
        # wait: PTX forbids writing them meanwhile); shared tiles are the race checker's
        regs = {acc.buffer: s, **({a.buffer: s} if wgmma_a_in_registers(call) else {})}
        return (*state, regs)
    flying = _registers(state)
    hit = _touched(s) & flying.keys()
    if hit:
        buf = sorted(hit, key=lambda b: b.name)[0]
        issue = script(flying[buf]).splitlines()[0].strip()
        raise _fail(kernel, f"the accumulator {buf.name} of an asynchronous wgmma ({issue}) is touched "
                    "before a ptx_wgmma_wait retires its group", s)  # fmt: skip
    return state


def _walk(kernel: str, s: Stmt, state: _InFlight) -> _InFlight:
    if isinstance(s, SeqStmt):
        for c in s.seq:
            state = _walk(kernel, c, state)
        return state
    if isinstance(s, For) and s.kind is ForKind.THREAD_BINDING:
        return _walk(kernel, s.body, state)  # a thread runs its own iteration
    if isinstance(s, For):
        # twice: what the end of one iteration leaves in flight meets the next iteration
        after = _walk(kernel, s.body, _walk(kernel, s.body, state))
        runs = isinstance(s.extent, IntImm) and s.extent.value >= 1
        return after if runs else _merge(state, after)  # a loop that may not run keeps the state
    if isinstance(s, Allocate):
        return _walk(kernel, s.body, state)
    if isinstance(s, IfThenElse):
        taken = _walk(kernel, s.then_case, state)
        other = _walk(kernel, s.else_case, state) if s.else_case is not None else state
        return _merge(other, taken)
    return _leaf(kernel, s, state)


def check_accumulators(kernel: str, body: Stmt) -> None:
    """Refuse a kernel that touches the registers of an asynchronous ``wgmma`` before a
    ``wgmma.wait_group`` retires its group, or leaves one in flight at its end (module doc).

    Raises
    ------
    CodegenError
        Naming the kernel, the accumulator, the issue and the offending statement.
    """
    left = _registers(_walk(kernel, body, ()))
    if left:
        buf, issue = sorted(left.items(), key=lambda kv: kv[0].name)[0]
        raise _fail(kernel, f"the asynchronous wgmma into {buf.name} is never retired by a ptx_wgmma_wait", issue)
