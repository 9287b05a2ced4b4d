"""LowerWarpMemory: warp buffers -> each thread's registers, or a clear refusal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import loopir
from loopir.errors import PassError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Var
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.passes import LowerWarpMemory, ThreadSync
from loopir.passes.lower_warp_memory import WARP_REGISTERS_ATTR
from loopir.passes.pipeline import default_pipeline

from .kernels import Gemm, tile_16x8


def _scopes(func: PrimFunc) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}

    def f(n: object) -> None:
        if isinstance(n, (Allocate, BufferLoad, BufferStore)):
            out.setdefault(n.buffer.name, set()).add(n.buffer.scope)

    post_order_visit(func.body, f)
    return out


def _calls(func: PrimFunc) -> list[str]:
    out: list[str] = []
    post_order_visit(func.body, lambda n: out.append(n.value.op) if isinstance(n, Evaluate) and
                     hasattr(n.value, "op") else None)  # fmt: skip
    return out


def test_fragments_become_registers_and_per_lane_calls_loops() -> None:
    func = LowerWarpMemory()(ThreadSync()(Gemm(store="shared").func()))
    scopes = _scopes(func)
    assert scopes["A_warp"] == scopes["B_warp"] == scopes["C_warp"] == {"local"}
    allocs: dict[str, tuple[int, ...]] = {}
    post_order_visit(func.body, lambda n: allocs.setdefault(n.buffer.name, tuple(int(x) for x in n.buffer.shape))
                     if isinstance(n, Allocate) else None)  # fmt: skip
    # C_warp (1, 2, 32, 8), its first axis the warp's threadIdx.y (of extent 1): that warp's slot only
    assert allocs["A_warp"] == (8,) and allocs["C_warp"] == (2, 8)
    calls = _calls(func)
    assert "mma_fill" not in calls and "mma_store" not in calls
    assert calls.count("ptx_ldmatrix") == 2 and calls.count("ptx_mma") == 2
    assert set(func.attrs[WARP_REGISTERS_ATTR]) == {"A_warp", "B_warp", "C_warp"}
    assert LowerWarpMemory()(func) is func  # idempotent


def test_cuda_pipeline_runs_it_and_the_cpu_pipeline_does_not() -> None:
    names = [p.name for p in default_pipeline(target="cuda").passes]
    # HoistIfThenElse only moves guards; it runs after the warp registers are lowered
    assert names[-2:] == ["LowerWarpMemory", "HoistIfThenElse"]
    assert "LowerWarpMemory" not in [p.name for p in default_pipeline(target="cpu").passes]
    assert "LowerWarpMemory" not in [p.name for p in default_pipeline().passes]


def test_warp_buffer_allocated_outside_the_kernel_moves_into_it() -> None:
    gemm = Gemm()
    func = gemm.func()
    kernel = func.body
    assert isinstance(kernel, For)
    # hoist the allocation of C_warp above the kernel (as LowerBlocks leaves a root buffer)
    inner: list[Allocate] = []
    post_order_visit(kernel, lambda n: inner.append(n) if isinstance(n, Allocate) and n.buffer.name == "C_warp" else None)
    cw = inner[0]

    from loopir.ir.functor import Mutator

    class Drop(Mutator):
        def visit_Allocate(self, node: Allocate) -> Stmt:
            return self.visit(node.body) if node is cw else self.generic_visit(node)

    moved = PrimFunc(func.params, Allocate(cw.buffer, Drop().visit(kernel)), name=func.name)
    # same results on the CPU before lowering, and the warp buffer becomes a kernel local
    rng = np.random.default_rng(0)
    a, b, c = gemm.inputs(rng)
    c2 = c.copy()
    loopir.build(ThreadSync()(func), target="cpu")(a, b, c)
    loopir.build(ThreadSync()(moved), target="cpu")(a, b, c2)
    assert np.array_equal(c, c2)
    low = LowerWarpMemory()(ThreadSync()(moved))
    assert isinstance(low.body, For) and isinstance(low.body.body, Allocate)
    assert low.body.body.buffer.name == "C_warp" and low.body.body.buffer.scope == "local"


tx = Var("tx")
W = Buffer("W", (32, 8), "float32", scope="warp")
G = Buffer("G", (64, 8), "float32")


def _kernel(body: Stmt, tx_extent: int = 32, alloc: Buffer = W) -> PrimFunc:
    loop = For(tx, 0, tx_extent, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
    bx = Var("bx")
    return PrimFunc((G,), For(bx, 0, 1, ForKind.THREAD_BINDING, Allocate(alloc, loop), thread_tag="blockIdx.x"))


@pytest.mark.parametrize(
    "func,match",
    [
        (_kernel(BufferStore(W, 1.0, ((tx + 1) % 32, 0))), "is not the variable of an enclosing"),
        (_kernel(BufferStore(W, 1.0, (tx, 0)), tx_extent=64), "take it modulo 32"),
        (_kernel(BufferStore(W, 1.0, (tx % 32, 0)), tx_extent=48), "not a constant multiple of 32"),
        (_kernel(Evaluate(op.ptx_mma(Buffer("A", (32, 8), "float16", scope="warp")[tx, 0],
                                     Buffer("B", (32, 8), "float16", scope="warp")[tx, 0], W[tx, 0])),
                 tx_extent=16), "warp-collective"),  # fmt: skip
        (_kernel(BufferStore(G, W[tx, 0], (tx, 0)), alloc=Buffer("V", (16, 8), "float32", scope="warp")),
         "second-to-last"),  # fmt: skip
        (_kernel(IfThenElse(tx < 16, Evaluate(op.ptx_mma(Buffer("A", (32, 8), "float16", scope="warp")[tx, 0],
                                                         Buffer("B", (32, 8), "float16", scope="warp")[tx, 0],
                                                         W[tx, 0])))), "depends on threadIdx.x"),  # fmt: skip
    ],
    ids=["lane moved", "lane not modulo", "block of 48", "partial warp", "no lane dim", "lane condition"],
)
def test_refusals(func: PrimFunc, match: str) -> None:
    with pytest.raises(PassError, match=match):
        LowerWarpMemory()(func)


def test_lane_modulo_32_in_a_wider_block_is_accepted() -> None:
    func = _kernel(seq(Evaluate(op.mma_fill(W[tx % 32, 0], 8, 0.0)),
                       BufferStore(G, W[tx % 32, 3], (tx, 0))), tx_extent=64)  # fmt: skip
    out = LowerWarpMemory()(func)
    assert _scopes(out)["W"] == {"local"}




def _guarded_store(cond: Callable[[Var], Any], lane: Any, els: bool = False) -> PrimFunc:
    """``G[tx, e] = W[lane, e]`` under ``cond(e)`` (in its else branch with ``els``), e in 0..7."""
    e = Var("e")
    store = BufferStore(G, W[lane, e], (tx, e))
    body = IfThenElse(cond(e), Evaluate(0), store) if els else IfThenElse(cond(e), store)
    return _kernel(For(e, 0, 8, ForKind.UNROLLED, body))


@pytest.mark.parametrize(
    ("cond", "lane", "els"),
    [
        (lambda e: op.all_(Var("r") < 5, tx % 4 * 2 + e % 2 < 1), tx // 4 * 4, False),
        (lambda e: tx // 4 < 1, tx % 4, False),
        (lambda e: tx % 4 >= 1, tx // 4 * 4, True),
    ],
    ids=["a column's guard pins tx % 4", "a row's guard pins tx // 4", "the else branch"],
)
def test_a_lane_index_equal_to_the_lane_under_its_guards_is_accepted(cond: Callable[[Var], Any], lane: Any,
                                                                      els: bool) -> None:  # fmt: skip
    """A fragment element stored under a guard that pins part of the lane (a C of one column,
    whose block variable became 0): ``tx // 4 * 4`` is ``tx`` where ``tx % 4 == 0`` (a
    conjunct on other variables, a size, left out)."""
    out = LowerWarpMemory()(_guarded_store(cond, lane, els))
    assert _scopes(out)["W"] == {"local"}


@pytest.mark.parametrize(
    ("cond", "lane"),
    [
        (lambda e: tx % 4 * 2 < 3, tx // 4 * 4),
        (lambda e: tx < 64, tx // 4 * 4),
        (lambda e: Var("n") < 1, tx // 4 * 4),
        (lambda e: tx % 4 == 0, (tx + 4) % 32),
        (lambda e: op.any_(tx % 4 == 0, Var("n") < 1), tx // 4 * 4),
    ],
    ids=["guard lets tx % 4 = 1 through", "guard always true", "guard on a size", "another lane's row",
         "a disjunction with a size"],
)
def test_a_lane_index_that_differs_where_the_access_runs_is_refused(cond: Callable[[Var], Any], lane: Any) -> None:
    with pytest.raises(PassError, match="is not the variable of an enclosing"):
        LowerWarpMemory()(_guarded_store(cond, lane))

def test_a_warp_buffer_used_by_two_kernels_is_refused() -> None:
    k1 = For(tx, 0, 32, ForKind.THREAD_BINDING, BufferStore(W, 1.0, (tx, 0)), thread_tag="threadIdx.x")
    t2 = Var("t2")
    k2 = For(t2, 0, 32, ForKind.THREAD_BINDING, BufferStore(G, W[t2, 0], (t2, 0)), thread_tag="threadIdx.x")
    with pytest.raises(PassError, match="used by 2 kernels"):
        LowerWarpMemory()(PrimFunc((G,), Allocate(W, seq(k1, k2))))


def test_a_warp_parameter_is_refused() -> None:
    with pytest.raises(PassError, match="parameter W is a warp buffer"):
        LowerWarpMemory()(PrimFunc((W,), BufferStore(W, 1.0, (0, 0))))


def test_tile_16x8_lowers() -> None:
    out = LowerWarpMemory()(tile_16x8(2, True))
    assert _scopes(out)["B_warp"] == {"local"}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_compaction_gives_each_warp_its_fragments(dtype: str) -> None:
    """Root-allocated fragments of the whole problem shrink to one warp's tile inside the warp
    nest (the lanes relaxed, the lane dimension whole); ldmatrix's 8-wide rows keep the shared
    tile 16 columns wide. The CPU result is unchanged, in either thread order, and the CUDA
    lowering gives per-thread registers of 8."""
    from .kernels import from_storage, gemm_one_nest, to_storage

    func = gemm_one_nest(dtype=dtype)
    low = loopir.lower(func)
    shapes: dict[str, tuple[int, ...]] = {}
    post_order_visit(low.body, lambda n: shapes.setdefault(n.buffer.name, tuple(int(x) for x in n.buffer.shape))
                     if isinstance(n, Allocate) else None)  # fmt: skip
    assert shapes == {"A_shared": (32, 16), "B_shared": (16, 32), "C_warp": (1, 1, 32, 8),
                      "A_warp": (1, 1, 32, 8), "B_warp": (1, 1, 32, 8)}  # fmt: skip
    rng = np.random.default_rng(0)
    a = to_storage(rng.standard_normal((64, 32)), dtype)
    b = to_storage(rng.standard_normal((32, 64)), dtype)
    want = from_storage(a, dtype) @ from_storage(b, dtype)
    for g, order in ((ThreadSync()(func), "sequential"), (low, "sequential"), (low, "random")):
        c = np.full((64, 64), np.nan, np.float32)
        loopir.build(g, target="cpu", thread_order=order)(a, b, c)
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    cuda = loopir.lower(func, target="cuda")
    regs: dict[str, tuple[int, ...]] = {}
    post_order_visit(cuda.body, lambda n: regs.setdefault(n.buffer.name, tuple(int(x) for x in n.buffer.shape))
                     if isinstance(n, Allocate) and n.buffer.scope == "local" else None)  # fmt: skip
    assert regs == {"C_warp": (1, 1, 8), "A_warp": (1, 1, 8), "B_warp": (1, 1, 8)}


def _two_warps(read_index: str) -> tuple[Buffer, Stmt]:
    """Two warps (threadIdx.y) write their slot of a warp buffer W[2, 32, 1]; a second thread
    nest reads slot ``ty`` (its own warp's) or ``1 - ty`` (the other warp's)."""
    x, y = Buffer("X", (64,), "float32"), Buffer("Y", (64,), "float32")
    w = Buffer("W", (2, 32, 1), "float32", scope="warp")
    ty, tx, ty2, tx2 = (Var(n, "int32") for n in ("ty", "tx", "ty2", "tx2"))

    def nest(a: Var, b: Var, body: Stmt) -> Stmt:
        inner = For(b, 0, 32, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
        return For(a, 0, 2, ForKind.THREAD_BINDING, inner, thread_tag="threadIdx.y")

    slot = ty2 if read_index == "own" else 1 - ty2
    body = seq(nest(ty, tx, BufferStore(w, x[ty * 32 + tx], (ty, tx, 0))),
               nest(ty2, tx2, BufferStore(y, w[slot, tx2, 0], (ty2 * 32 + tx2,))))  # fmt: skip
    return w, Allocate(w, body)


def test_a_warp_axis_indexed_by_threadidx_y_everywhere_is_dropped() -> None:
    from loopir.passes.lower_warp_memory import warp_axes

    w, body = _two_warps("own")
    assert warp_axes(body) == {w: 0}
    w, body = _two_warps("other")  # a warp reads the other's slot: the axis must stay
    assert warp_axes(body) == {}
