"""Asynchronous ``wgmma`` in the CUDA emitter (issue 32): ``ptx_wgmma_async`` emits fence, MMAs
and commit without a wait, ``ptx_wgmma_wait`` a ``wgmma.wait_group`` and a register fence on
the accumulators it retires; a kernel that touches an accumulator between its issue and the
``wait_group 0`` that retires it (or never retires it) is refused, naming the statement."""

from __future__ import annotations

import warnings

import pytest

import loopir
from loopir.codegen_cuda import emit_function, lower_for_cuda
from loopir.errors import CodegenError
from loopir.ir.expr import Call, IntImm
from loopir.ir.functor import Mutator, post_order_visit
from loopir.ir.stmt import Evaluate, SeqStmt, Stmt
from tests.examples.hopper_forms import hopper_gemm  # the forms of before the default changed


def _lowered() -> loopir.PrimFunc:
    sch = hopper_gemm(128, 256, 64, block=(64, 64, 64), wn=64, stages=3, async_mma=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return lower_for_cuda(sch.func)


class _LastWait(Mutator):
    """The final ``ptx_wgmma_wait(0)``: dropped, or its pending count set to 1."""

    def __init__(self, drop: bool) -> None:
        super().__init__()
        self.drop = drop

    def visit_SeqStmt(self, s: SeqStmt) -> Stmt:
        out = self.generic_visit(s)
        assert isinstance(out, SeqStmt)
        return SeqStmt(tuple(c for c in out.seq if c is not _DROPPED)) if self.drop else out

    def visit_Evaluate(self, s: Evaluate) -> Stmt:
        v = s.value
        if isinstance(v, Call) and v.op == "ptx_wgmma_wait" and v.args[0].value == 0:  # type: ignore[attr-defined]
            return _DROPPED if self.drop else Evaluate(Call(v.dtype, v.op, (IntImm(1, "int32"), *v.args[1:])))
        return s


_DROPPED = Evaluate(IntImm(0, "int32"))


def test_the_async_kernel_emits_issue_wait_and_fence() -> None:
    src = emit_function(_lowered()).emitted.source
    helper = src[src.index("void loopir_wgmma_async_m64n64k64_f16("):]
    helper = helper[:helper.index("\n}\n")]
    assert "wgmma.commit_group.sync.aligned" in helper and "wait_group" not in helper
    assert 'asm volatile("wgmma.wait_group.sync.aligned %0;\\n" :: "n"(N) : "memory");' in src
    assert "loopir_wgmma_wait<1>(); loopir_wgmma_fence_n64(&C_warp[0]);" in src
    assert "loopir_wgmma_wait<0>(); loopir_wgmma_fence_n64(&C_warp[0]);" in src
    assert src.count("fence.proxy.async.shared::cta") >= 2  # the rule before every barrier stays


def test_an_accumulator_stored_while_in_flight_is_refused() -> None:
    """The last wait leaves one group in flight: the stores of the accumulators that follow
    read registers the tensor cores may still write."""
    func = _lowered()
    bad = func.with_body(_LastWait(drop=False).visit(func.body))
    with pytest.raises(CodegenError, match=r"accumulator C_warp of an asynchronous wgmma .* is touched before a "
                       r"ptx_wgmma_wait retires its group:\n.*C_warp"):  # fmt: skip
        emit_function(bad)


def test_an_issue_never_retired_is_refused() -> None:
    """Without the last wait the stores touch the accumulators in flight; an issue with nothing
    after it is never retired at all."""
    from loopir.codegen_cuda.wgmma_async import check_accumulators

    func = _lowered()
    with pytest.raises(CodegenError, match="accumulator C_warp of an asynchronous wgmma"):
        emit_function(func.with_body(_LastWait(drop=True).visit(func.body)))
    only_issue = Evaluate(_issue(func))
    with pytest.raises(CodegenError, match=r"the asynchronous wgmma into C_warp is never retired by a ptx_wgmma_wait"):
        check_accumulators("k", only_issue)


def _issue(func: loopir.PrimFunc) -> Call:
    found: list[Call] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, Call) and n.op == "ptx_wgmma_async" else None)
    return found[0]
