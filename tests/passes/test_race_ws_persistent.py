"""The race check's model of persistent warp-specialized pipelines (``race_ws``: the consumers'
tile loop around their K loop, ``hopper_gemm(persistent=...)``).

The kernels are proven for every pipeline form, K steps from one to more than twice the
stages, tile counts the CTAs do and do not divide; each mistake of the persistent protocol,
made by mutating the proven kernel, is refused by its own check (the message names it: each
test fails if that check is removed, the kernel being otherwise the proven one).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from loopir.codegen_cuda import lower_for_cuda
from loopir.errors import CodegenError
from loopir.ir import tma as T
from loopir.ir.expr import BufferLoad, Call, FloorDiv, FloorMod, IntImm, PrimExpr
from loopir.ir.functor import Mutator, post_order_visit
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    PrimFunc,
    SeqStmt,
    Stmt,
    seq,
)
from loopir.passes.race_check import check_races, find_races
from loopir.passes.race_phase import check_phases
from loopir.passes.race_ws import prove_ws
from tests.examples.hopper_forms import hopper_gemm  # the forms of before the default changed
from tests.passes.test_race_ws import _Calls, _has

SMALL = dict(block=(64, 32, 64), wn=32)


def _kernel(kt: int = 7, stages: int = 3, async_mma: bool = True, ctas: int = 4, M: int = 192) -> PrimFunc:
    """``M / 64 * 3`` tiles (9 at the default) over ``ctas`` blocks."""
    return lower_for_cuda(hopper_gemm(M, 64 * kt, 96, **SMALL, stages=stages, async_mma=async_mma, tma=True,
                                      warp_specialized=True, persistent=ctas).func)  # fmt: skip


def _proven(f: PrimFunc) -> None:
    """No race and nothing unproven, the epilogue's stores through the tile's digits too."""
    report = find_races(f)
    assert not report.races and not report.unproven, report.unproven[:1]
    check_phases(f)  # check_races' other part (find_races above is its race part)


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("ctas", [3, 4, 9])
def test_every_form_is_proven(stages: int, ctas: int) -> None:
    for kt in sorted({1, 2, stages, stages + 1, 2 * stages + 1}):
        for async_mma in (False, True) if stages >= 3 else (False,):
            f = _kernel(kt, stages, async_mma, ctas)
            _proven(f)
            assert isinstance(f.body, For)
            proof = prove_ws(f.body)
            assert {b.name for b in proof.tiles} == {"A_shared", "B_shared"}
            assert {b.name for b in proof.bars} == {"k_0_0_tma_bar", "k_0_0_empty_bar"}


def _is_consume(s: Stmt) -> bool:
    return isinstance(s, For) and s.loop_var.name.endswith("_consume")


def _is_tiles(s: Stmt) -> bool:
    return isinstance(s, For) and s.kind is ForKind.SERIAL and "fused_0" in s.loop_var.name


class _TileBody(Mutator):
    """The statements of the consumers' tile loop body rewritten by ``fn``."""

    def __init__(self, fn: Callable[[list[Stmt]], list[Stmt]]) -> None:
        super().__init__()
        self.fn = fn

    def visit_For(self, s: For) -> Stmt:
        if not _is_tiles(s):
            return self.generic_visit(s)  # type: ignore[no-any-return]
        alloc = s.body  # the accumulators' allocation, then the tile's statements
        assert isinstance(alloc, Allocate) and isinstance(alloc.body, SeqStmt), alloc
        return attrs.evolve(s, body=attrs.evolve(alloc, body=seq(*self.fn(list(alloc.body.seq)))))


def _tail(stmts: list[Stmt]) -> tuple[int, int]:
    """The positions of the tail's wgmma_wait and release (after the consumers' K loop)."""
    k = next(i for i, s in enumerate(stmts) if _is_consume(s))
    w = next(i for i, s in enumerate(stmts) if i > k and _has(s, "ptx_wgmma_wait"))
    r = next(i for i, s in enumerate(stmts) if i > k and _has(s, "ptx_mbarrier_arrive"))
    return w, r


def _drop_tail_release(stmts: list[Stmt]) -> list[Stmt]:
    _, r = _tail(stmts)
    return stmts[:r] + stmts[r + 1 :]


def _release_before_tail_wait(stmts: list[Stmt]) -> list[Stmt]:
    w, r = _tail(stmts)
    out = list(stmts)
    out[w], out[r] = out[r], out[w]
    return out


def _tail_wait_1(stmts: list[Stmt]) -> list[Stmt]:
    w, _ = _tail(stmts)

    def f(c: Call, _s: Evaluate) -> PrimExpr | None:
        return Call(c.dtype, c.op, (IntImm(1, "int32"), *c.args[1:])) if c.op == "ptx_wgmma_wait" else None

    return [_Calls(f).visit(s) if i == w else s for i, s in enumerate(stmts)]


class _PerTileStages(Mutator):
    """The consumers' full wait at the stage and parity of ``k`` alone (a K loop restarting its
    stages each tile, as the non-persistent kernel's)."""

    def visit_For(self, s: For) -> Stmt:
        if not _is_consume(s):
            return self.generic_visit(s)  # type: ignore[no-any-return]
        k = s.loop_var

        def f(c: Call, _s: Evaluate) -> PrimExpr | None:
            if c.op != "ptx_mbarrier_wait":
                return None
            bar = c.args[0]
            assert isinstance(bar, BufferLoad)
            three = IntImm(3, "int32")
            return T.mbarrier_wait(bar.buffer[FloorMod(k, three)], FloorMod(FloorDiv(k, three), IntImm(2, "int32")))

        return attrs.evolve(s, body=_Calls(f).visit(s.body))


class _ProducerShort(Mutator):
    """The producer runs one tile's steps fewer than the consumers wait for."""

    def visit_For(self, s: For) -> Stmt:
        if s.loop_var.name.endswith("_produce"):
            return attrs.evolve(s, extent=s.extent - 7)
        return self.generic_visit(s)  # type: ignore[no-any-return]


class _KLoopInAnother(Mutator):
    """The consumers' K loop inside a second serial loop (of one iteration) in the tile loop."""

    def visit_For(self, s: For) -> Stmt:
        if _is_consume(s):
            from loopir.ir.expr import Var

            return For(Var("extra", "int32"), 0, 1, ForKind.SERIAL, s)
        return self.generic_visit(s)  # type: ignore[no-any-return]


class _ReadAfterTiles(Mutator):
    """After the tile loop the consumers read a tile (the producer may be refilling it)."""

    def visit_For(self, s: For) -> Stmt:
        if not _is_tiles(s):
            return self.generic_visit(s)  # type: ignore[no-any-return]
        a = next(iter(_buffers(s, "A_shared")))
        c = next(iter(_buffers(s, "C")))
        zero = IntImm(0, "int32")
        return seq(s, BufferStore(c, a[zero, zero, zero].astype("float32"), (zero, zero)))


def _buffers(s: Stmt, name: str) -> set:  # type: ignore[type-arg]
    out: set = set()  # type: ignore[type-arg]
    post_order_visit(s, lambda n: out.add(n.buffer) if isinstance(n, (BufferLoad, BufferStore))
                     and n.buffer.name == name else None)  # fmt: skip
    if name == "A_shared":  # the wgmma reads it through its call's arguments
        post_order_visit(s, lambda n: out.update(a.buffer for a in n.args if isinstance(a, BufferLoad)
                                                 and a.buffer.name == name) if isinstance(n, Call) else None)  # fmt: skip
    return out


WS = r"race check(.*): warp-specialized pipeline: "
CASES = {
    "tail_release_dropped": (lambda b: _TileBody(_drop_tail_release).visit(b),
                             WS + r"the consumers do not release iterations n - 1 .. n - 1 after their K loop, in tile "
                             r"loop i0_0_0_i1_0_0_fused_0: the producer waits for them in the next tile"),
    "tail_release_before_its_read": (lambda b: _TileBody(_release_before_tail_wait).visit(b),
                                     WS + r"the consumers release iteration n - 1 after their K loop before the tail's "
                                     r"read of its version"),
    "tail_wait_leaves_a_group": (lambda b: _TileBody(_tail_wait_1).visit(b),
                                 WS + r"the consumers release iteration n - 1 after their K loop with wgmma groups in "
                                 r"flight"),
    "per_tile_stages": (lambda b: _PerTileStages().visit(b),
                        WS + r"the consumers' wait is not an unguarded one on k_0_0_tma_bar"),
    "producer_one_tile_short": (lambda b: _ProducerShort().visit(b),
                                WS + r"the producer's loop k_0_0_produce runs .* steps, not the consumers' .* tiles "
                                r"of 7"),
    "k_loop_in_two_serial_loops": (lambda b: _KLoopInAnother().visit(b),
                                   WS + r"the consumers' loop k_0_0_consume is inside another serial loop than one "
                                   r"tile loop of their role"),
    "tile_read_after_the_tile_loop": (lambda b: _ReadAfterTiles().visit(b),
                                      WS + r"a consumer access of the tiles or their barriers before its loop \(or "
                                      r"outside its tile loop\)"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_a_broken_persistent_protocol_is_refused(name: str) -> None:
    f = _kernel()
    _proven(f)  # the kernel as generated is proven
    mutate, match = CASES[name]
    bad = f.with_body(mutate(f.body))
    assert bad.script() != f.script()
    with pytest.raises(CodegenError, match=match):
        check_races(bad)


def test_the_proof_is_symbolic_in_the_steps_and_tiles() -> None:
    """1000 K steps and 1200 tiles over 132 CTAs: proven as the small kernel is, by the
    symbolic path; its cost does not grow with the sizes (a parity mistake is still found)."""
    prove_ws(_kernel(kt=9, stages=4).body)  # type: ignore[arg-type]
    f = lower_for_cuda(hopper_gemm(64 * 40, 64 * 1000, 32 * 30, **SMALL, stages=4, tma=True, warp_specialized=True,
                                   persistent=132).func)  # fmt: skip
    prove_ws(f.body)  # type: ignore[arg-type]  # no timing assertion: the parity check below exercises the symbolic path
    bad = f.with_body(_Calls(lambda c, _s: T.mbarrier_wait(c.args[0], 1 - c.args[1]) if c.op == "ptx_mbarrier_wait"
                             and "empty" in c.args[0].buffer.name else None).visit(f.body))  # type: ignore[attr-defined]  # fmt: skip
    with pytest.raises(CodegenError, match=WS + r"the producer's wait polls parity"):
        check_races(bad)
