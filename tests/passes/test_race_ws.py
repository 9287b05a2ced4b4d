"""The race check's model of warp-specialized pipelines (``loopir.passes.race_ws``).

The kernels of ``hopper_gemm(tma=True, warp_specialized=True)`` are proven (every pipeline form,
K steps from one to more than twice the stages); each protocol mistake, made by mutating the
proven kernel, is refused naming the copy or the access, by its own check (each test fails if
that check is removed: the kernel is otherwise the proven one).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from loopir.codegen_cuda import lower_for_cuda
from loopir.errors import CodegenError
from loopir.ir import tma as T
from loopir.ir.expr import Call, FloatImm, FloorMod, IntImm, PrimExpr
from loopir.ir.functor import Mutator, post_order_visit
from loopir.ir.stmt import BufferStore, Evaluate, For, IfThenElse, PrimFunc, SeqStmt, Stmt, seq
from loopir.passes.race_check import check_races, find_races
from loopir.passes.race_phase import check_phases
from loopir.passes.race_ws import prove_ws
from tests.examples.hopper_forms import hopper_gemm  # the forms of before the default changed

SMALL = dict(block=(64, 32, 64), wn=32)


def _kernel(kt: int = 7, stages: int = 3, async_mma: bool = True) -> PrimFunc:
    return lower_for_cuda(hopper_gemm(64, 64 * kt, 32, **SMALL, stages=stages, async_mma=async_mma, tma=True,
                                      warp_specialized=True).func)  # fmt: skip


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_every_form_is_proven(stages: int) -> None:
    for kt in sorted({1, 2, stages, stages + 1, 2 * stages + 1}):
        for async_mma in (False, True) if stages >= 3 else (False,):
            f = _kernel(kt, stages, async_mma)
            report = find_races(f)
            assert not report.races and not report.unproven, (kt, async_mma, report.unproven[:1])
            check_phases(f)  # check_races' other part (find_races above is its race part)
            (root,) = [s for s in [f.body] if isinstance(s, For)]
            proof = prove_ws(root)
            assert {b.name for b in proof.tiles} == {"A_shared", "B_shared"}
            assert {b.name for b in proof.bars} == {"k_0_0_tma_bar", "k_0_0_empty_bar"}
            assert len(proof.copies) == 2


def _has(s: Stmt, name: str) -> bool:
    found: list[bool] = []
    post_order_visit(s, lambda n: found.append(True) if isinstance(n, Call) and n.op == name else None)
    return bool(found)


class _Calls(Mutator):
    """Each ``Evaluate`` of a call ``fn`` maps to a statement, or to an expression evaluated in
    its place (None: left as it is)."""

    def __init__(self, fn: Callable[[Call, Evaluate], Stmt | PrimExpr | None]) -> None:
        super().__init__()
        self.fn = fn

    def visit_Evaluate(self, s: Evaluate) -> Stmt:
        v = s.value
        out = self.fn(v, s) if isinstance(v, Call) else None
        return s if out is None else Evaluate(out) if isinstance(out, PrimExpr) else out


class _Seqs(Mutator):
    """Each sequence of statements in the consumers' loop rewritten by ``fn``."""

    def __init__(self, fn: Callable[[list[Stmt]], list[Stmt]]) -> None:
        super().__init__()
        self.fn = fn

    def visit_For(self, s: For) -> Stmt:
        s = self.generic_visit(s)
        if s.loop_var.name.endswith("_consume"):
            return attrs.evolve(s, body=_Inner(self.fn).visit(s.body))
        return s


class _Inner(Mutator):
    def __init__(self, fn: Callable[[list[Stmt]], list[Stmt]]) -> None:
        super().__init__()
        self.fn = fn

    def visit_SeqStmt(self, s: SeqStmt) -> Stmt:
        s2 = self.generic_visit(s)
        assert isinstance(s2, SeqStmt)
        return seq(*self.fn(list(s2.seq)))


def _release_first(stmts: list[Stmt]) -> list[Stmt]:
    """The release before the wgmma_wait that retires what it releases."""
    w = [i for i, s in enumerate(stmts) if _has(s, "ptx_wgmma_wait")]
    r = [i for i, s in enumerate(stmts) if _has(s, "ptx_mbarrier_arrive")]
    if not (w and r and w[0] < r[0]):
        return stmts
    out = list(stmts)
    out[w[0]], out[r[0]] = out[r[0]], out[w[0]]
    return out


def _no_empty_wait(call: Call, s: Evaluate) -> Stmt | None:
    if call.op == "ptx_mbarrier_wait" and "empty" in call.args[0].buffer.name:  # type: ignore[attr-defined]
        return Evaluate(IntImm(0, "int32"))
    return None


def _parity(which: str, fn: Callable[[PrimExpr], PrimExpr]) -> Callable[[Call, Evaluate], Stmt | None]:
    def f(call: Call, s: Evaluate) -> Stmt | None:
        if call.op == "ptx_mbarrier_wait" and which in call.args[0].buffer.name:  # type: ignore[attr-defined]
            return Evaluate(T.mbarrier_wait(call.args[0], fn(call.args[1])))
        return None

    return f


def _init_count(n: int) -> Callable[[Call, Evaluate], Stmt | None]:
    def f(call: Call, s: Evaluate) -> Stmt | None:
        if call.op == "ptx_mbarrier_init" and "empty" in call.args[0].buffer.name:  # type: ignore[attr-defined]
            return Evaluate(T.mbarrier_init(call.args[0], n))
        return None

    return f


def _bytes(call: Call, s: Evaluate) -> Stmt | None:
    if call.op == "ptx_mbarrier_arrive_expect_tx":
        return Evaluate(T.mbarrier_arrive_expect_tx(call.args[0], call.args[1] - 2048))
    return None


class _Version(Mutator):
    """The consumers' wgmma issue reads version ``(k + 1) % V``: the one the producer may be
    filling."""

    def visit_Call(self, e: Call) -> PrimExpr:
        if e.op != "ptx_wgmma_async":
            return self.generic_visit(e)  # type: ignore[no-any-return]
        args = []
        for a in e.args:
            if hasattr(a, "buffer") and a.buffer.name in ("A_shared", "B_shared"):
                i = a.indices[0]
                assert isinstance(i, FloorMod)
                a = a.buffer[(FloorMod(i.a + 1, i.b), *a.indices[1:])]
            args.append(a)
        return Call(e.dtype, e.op, tuple(args))


class _OneWarpWaits(Mutator):
    """The consumers' full wait in warp 0 only: the other warps read without waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.ty: For | None = None

    def visit_For(self, s: For) -> Stmt:
        if s.thread_tag == "threadIdx.y":
            self.ty = s
        return self.generic_visit(s)  # type: ignore[no-any-return]

    def visit_Evaluate(self, s: Evaluate) -> Stmt:
        v = s.value
        if isinstance(v, Call) and v.op == "ptx_mbarrier_wait" and "tma_bar" in v.args[0].buffer.name:  # type: ignore[attr-defined]
            assert self.ty is not None
            return IfThenElse(self.ty.loop_var == 0, s)
        return s


class _ReleaseNow(Mutator):
    """Iteration ``k`` released in iteration ``k`` (lag 0, after its wgmma issue, before the
    wait that retires it), the release after the loop dropped."""

    def visit_IfThenElse(self, s: IfThenElse) -> Stmt:
        s2 = self.generic_visit(s)
        assert isinstance(s2, IfThenElse)
        body = s2.then_case
        if isinstance(body, SeqStmt) and _has(body, "ptx_mbarrier_arrive") and _has(body, "ptx_wgmma_wait"):
            wait = [x for x in body.seq if _has(x, "ptx_wgmma_wait")]
            rel = [_Calls(_lag0).visit(x) for x in body.seq if _has(x, "ptx_mbarrier_arrive")]
            return seq(IfThenElse(s2.condition, seq(*wait)), *rel)
        return s2


def _lag0(call: Call, s: Evaluate) -> Stmt | None:
    if call.op == "ptx_mbarrier_arrive":
        bar = call.args[0]
        i = bar.indices[0]  # type: ignore[attr-defined]
        assert isinstance(i, FloorMod)
        return Evaluate(T.mbarrier_arrive(bar.buffer[FloorMod(i.a + 1, i.b)], call.args[1]))  # type: ignore[attr-defined]
    return None


def _no_tail_release(call: Call, s: Evaluate) -> Stmt | None:
    if call.op == "ptx_mbarrier_arrive" and isinstance(call.args[0].indices[0], IntImm):  # type: ignore[attr-defined]
        return Evaluate(IntImm(0, "int32"))
    return None


def _pending_2(call: Call, s: Evaluate) -> Stmt | None:
    if call.op == "ptx_wgmma_wait" and isinstance(call.args[0], IntImm) and call.args[0].value == 1:
        return Evaluate(Call(call.dtype, call.op, (IntImm(2, "int32"), *call.args[1:])))
    return None


class _BlockGuardedWait(Mutator):
    """The consumers' full wait in the first block row only (a guard on blockIdx.y)."""

    def __init__(self) -> None:
        super().__init__()
        self.by: For | None = None

    def visit_For(self, s: For) -> Stmt:
        if s.thread_tag == "blockIdx.y":
            self.by = s
        return self.generic_visit(s)  # type: ignore[no-any-return]

    def visit_Evaluate(self, s: Evaluate) -> Stmt:
        v = s.value
        if isinstance(v, Call) and v.op == "ptx_mbarrier_wait" and "tma_bar" in v.args[0].buffer.name:  # type: ignore[attr-defined]
            assert self.by is not None
            return IfThenElse(self.by.loop_var == 0, s)
        return s


class _ProducerStores(Mutator):
    """The producer also stores into the tile it copies into (after its copies)."""

    def visit_Evaluate(self, s: Evaluate) -> Stmt:
        v = s.value
        if isinstance(v, Call) and v.op == "ptx_tma_load" and v.args[0].buffer.name == "A_shared":  # type: ignore[attr-defined]
            dst = v.args[0]
            return seq(s, BufferStore(dst.buffer, FloatImm(0.0, "float16"), dst.indices))  # type: ignore[attr-defined]
        return s


WS = r"race check(.*): warp-specialized pipeline: "
CASES = {
    "release_before_retiring_wait": (lambda b: _Seqs(_release_first).visit(b),
                                     WS + r"the consumers release the version this wgmma reads before a wgmma_wait "
                                     r"retires it:\n  T.ptx_wgmma_async"),
    # released at lag 0: the last iteration's version, read by the wait_group 0 after the loop,
    # was released in it
    "release_lag_0": (lambda b: _Calls(_no_tail_release).visit(_ReleaseNow().visit(b)),
                      WS + r"the consumers read version \(n - 1\) % 3 after the loop, released in the loop:\n  "
                      r"T.ptx_wgmma_wait\(0"),
    "wait_retires_too_little": (lambda b: _Calls(_pending_2).visit(b),
                                WS + r"the consumers release the version this wgmma reads before a wgmma_wait retires "
                                r"it:\n  T.ptx_wgmma_async"),
    "no_empty_wait": (lambda b: _Calls(_no_empty_wait).visit(b),
                      WS + r"the TMA copy into A_shared is issued without waiting on the empty barrier(.|\n)*"
                      r"T.ptx_tma_load\(A_shared\[k_0_0_produce % 3"),
    "full_parity_0": (lambda b: _Calls(_parity("tma_bar", lambda p: IntImm(0, "int32"))).visit(b),
                      WS + r"the consumers' wait is not an unguarded one on k_0_0_tma_bar\[k_0_0_consume % 3\] with "
                      r"parity"),
    "empty_parity_flipped": (lambda b: _Calls(_parity("empty", lambda p: 1 - p)).visit(b),
                             WS + r"the producer's wait polls parity .*, not that of the release of iteration"),
    "empty_init_count": (lambda b: _Calls(_init_count(2)).visit(b),
                         WS + r"k_0_0_empty_bar\[0\] is initialized with count 2, its phases take 4 arrivals"),
    "expect_tx_bytes": (lambda b: _Calls(_bytes).visit(b),
                        WS + r"the arrive_expect_tx announces 10240 bytes, its step's copies bring 12288"),
    "read_in_flight_version": (lambda b: _Version().visit(b),
                               WS + r"the consumers read version \(k_0_0_consume - 2\) % 3 without the guard "
                               r"k_0_0_consume >= 2(.|\n)*T.ptx_wgmma_async\(\"m64n32k64\", A_shared\[\(k_0_0_consume \+ 1\)"),
    "one_warp_waits": (lambda b: _OneWarpWaits().visit(b),
                       WS + r"a consumer thread reads a tile without waiting on its full barrier itself"),
    "block_guarded_wait": (lambda b: _BlockGuardedWait().visit(b),
                           WS + r"the guard i0_0_0 == 0 names neither only the threads nor only the pipeline's loop"),
    "producer_stores_tile": (lambda b: _ProducerStores().visit(b),
                             WS + r"the producer accesses a tile other than by its copies"),
    # no wait at all: no roles are recognized, and the barrier-count model refuses the copy
    "no_full_wait": (lambda b: _Calls(_no_full_wait).visit(b),
                     r"race check \(main\): the TMA copy is in loop k_0_0_produce and not waited on in its iteration"),
}  # fmt: skip


def _no_full_wait(call: Call, s: Evaluate) -> Stmt | None:
    if call.op == "ptx_mbarrier_wait" and "tma_bar" in call.args[0].buffer.name:  # type: ignore[attr-defined]
        return Evaluate(IntImm(0, "int32"))
    return None


@pytest.mark.parametrize("name", list(CASES))
def test_a_broken_protocol_is_refused(name: str) -> None:
    f = _kernel()
    check_races(f)  # the kernel as generated is proven
    mutate, match = CASES[name]
    bad = f.with_body(mutate(f.body))
    assert bad.script() != f.script()
    with pytest.raises(CodegenError, match=match):
        check_races(bad)


def test_a_sync_release_before_the_wgmma_is_refused() -> None:
    """Synchronous wgmma: the release moved before the wgmma of its iteration."""
    f = _kernel(async_mma=False)
    check_races(f)

    def swap(stmts: list[Stmt]) -> list[Stmt]:
        w = [i for i, s in enumerate(stmts) if _has(s, "ptx_wgmma")]
        r = [i for i, s in enumerate(stmts) if _has(s, "ptx_mbarrier_arrive")]
        if not (w and r):
            return stmts
        out = list(stmts)
        out[w[0]], out[r[0]] = out[r[0]], out[w[0]]
        return out

    with pytest.raises(CodegenError, match=r"release the version read here \(iteration k - 0\) before the read"):
        check_races(f.with_body(_Seqs(swap).visit(f.body)))


def test_the_proof_is_symbolic_in_the_k_steps() -> None:
    """1000 K steps (the loop's indices not specialized by its range): proven as 9 are, by the
    symbolic path (``v * q + s``), not by iterations."""
    f = _kernel(kt=1000, stages=4)
    check_races(f)
    bad = f.with_body(_Calls(_parity("empty", lambda p: 1 - p)).visit(f.body))
    with pytest.raises(CodegenError, match=WS + r"the producer's wait polls parity"):
        check_races(bad)


def test_peeled_range_bounds_the_block_loops() -> None:
    """A consumer loop ``[1, 15 - i0)`` after the peeled step of ``n = 16 - i0`` steps (the
    longest-first query tiles' counts): equal to ``max(n - 1, 0)`` and ``n >= 1`` only with
    ``i0``'s range (a block loop of 16), refused without it."""
    from loopir.ir.expr import Var
    from loopir.ir.stmt import ForKind
    from loopir.passes.race_ws_peel import peeled_range

    i0, j = Var("i0"), Var("j")
    n = 16 - i0
    lc = For(j, 1, 15 - i0, ForKind.SERIAL, Evaluate(IntImm(0, "int32")))
    assert peeled_range(lc, n, [], {i0: (0, 16)}) is None  # i0 in [0, 16)
    assert "does not run [1, 16 - i0)" in str(peeled_range(lc, n, []))
    assert "does not run" in str(peeled_range(lc, n, [], {i0: (0, 17)}))  # i0 = 16: extent -1, not max(-1, 0)
