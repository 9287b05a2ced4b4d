"""Hand-written lowered GEMM kernels on tensor cores, for the CPU, CUDA and pass tests.

``inline_impl`` puts a registered intrinsic's implementation in place the way ``tensorize``
substitutes it: each parameter bound to a region of a real buffer (its position: the region's
minimum, the parameter covering the last dimensions).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from loopir import tensor_intrin
from loopir.ir import dtype as dt
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, PrimExpr, Var
from loopir.ir.functor import Mutator
from loopir.ir.stmt import (
    Allocate,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.tensor_intrin.layouts import MMA_A, MMA_B_16x8, MMA_C_16x8

Operand = tuple[Buffer, Sequence[PrimExpr | int]]


class _Bind(Mutator):
    def __init__(self, binding: dict[Buffer, Operand]) -> None:
        self.binding = binding

    def _indices(self, buf: Buffer, idx: tuple[PrimExpr, ...]) -> tuple[Buffer, tuple[PrimExpr, ...]]:
        real, mins = self.binding[buf]
        lead = len(mins) - len(idx)
        return real, (*mins[:lead], *(m + i for m, i in zip(mins[lead:], idx)))

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        node = self.generic_visit(node)
        if node.buffer not in self.binding:
            return node
        real, idx = self._indices(node.buffer, node.indices)
        return BufferLoad(real, idx)

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        node = self.generic_visit(node)
        if node.buffer not in self.binding:
            return node
        real, idx = self._indices(node.buffer, node.indices)
        return BufferStore(real, node.value, idx)


def inline_impl(name: str, *operands: Operand) -> Stmt:
    """The body of intrinsic ``name``'s implementation with its parameters bound."""
    impl = tensor_intrin.get(name).impl
    assert isinstance(impl.body, BlockRealize)
    binding = dict(zip(impl.params, operands))
    return _Bind(binding).visit(impl.body.block.body)


def bind(var: Var, extent: int | PrimExpr, tag: str, body: Stmt) -> For:
    return For(var, 0, extent, ForKind.THREAD_BINDING, body, thread_tag=tag)


def serial(var: Var, extent: int | PrimExpr, body: Stmt) -> For:
    return For(var, 0, extent, ForKind.SERIAL, body)


@attrs.frozen
class Gemm:
    """``C[M, N] = A @ B`` (A ``[M, K]``, or ``[K, M]`` when ``a_trans``; B ``[K, N]``, or
    ``[N, K]`` when ``b_trans``) on tensor cores:
    blocks of ``warps_m x warps_n`` warps (threadIdx.y, threadIdx.z), each warp one 16x16 tile
    of C per block, K in steps of 16 through shared tiles."""

    M: int = 32
    N: int = 32
    K: int = 32
    dtype: str = "float16"
    acc: str = "float32"
    warps_m: int = 1
    warps_n: int = 2
    b_trans: bool = False
    a_trans: bool = False
    store: str = "global"  # where mma_store writes: "global", or "shared" then copied out

    @property
    def names(self) -> dict[str, str]:
        t = {"float16": "f16", "bfloat16": "bf16"}[self.dtype]
        a = {"float32": "f32", "float16": "f16"}[self.acc]
        return {
            "ld_a": f"mma_ldmatrix_{t}_a" + ("_trans" if self.a_trans else ""),
            "ld_b": f"mma_ldmatrix_{t}_b" + ("_trans" if self.b_trans else ""),
            "mma": f"mma_{t}{t}{a}",
            "fill": f"mma_fill_{a}",
            "store": f"mma_store_{a}_{self.store}",
        }

    def func(self) -> PrimFunc:
        M, N, K, wm, wn = self.M, self.N, self.K, self.warps_m, self.warps_n
        BM, BN = 16 * wm, 16 * wn
        assert M % BM == 0 and N % BN == 0 and K % 16 == 0
        A = Buffer("A", (K, M) if self.a_trans else (M, K), self.dtype)
        B = Buffer("B", (N, K) if self.b_trans else (K, N), self.dtype)
        C = Buffer("C", (M, N), self.acc)
        As = Buffer("A_shared", (16, BM) if self.a_trans else (BM, 16), self.dtype, scope="shared")
        Bs = Buffer("B_shared", (BN, 16) if self.b_trans else (16, BN), self.dtype, scope="shared")
        Cw = Buffer("C_warp", (wm, wn, 32, 8), self.acc, scope="warp")
        Aw = Buffer("A_warp", (32, 8), self.dtype, scope="warp")
        Bw = Buffer("B_warp", (32, 8), self.dtype, scope="warp")
        by, bx, ko = Var("by"), Var("bx"), Var("ko")
        n = self.names

        def warps(body_of) -> Stmt:
            ty, tz = Var("ty"), Var("tz")
            return bind(ty, wm, "threadIdx.y", bind(tz, wn, "threadIdx.z", body_of(ty, tz)))

        def copy(dst: Buffer, src: Buffer, r0: PrimExpr, c0: PrimExpr) -> Stmt:
            rows, cols = (int(x) for x in dst.shape)
            threads = 32 * wm * wn
            ty, tz, tx, f = Var("ty"), Var("tz"), Var("tx"), Var("f")
            flat = f * threads + (ty * wn + tz) * 32 + tx
            r, c = flat // cols, flat % cols
            store = BufferStore(dst, src[r0 + r, c0 + c], (r, c))
            body = serial(f, (rows * cols + threads - 1) // threads, IfThenElse(flat < rows * cols, store))
            return bind(ty, wm, "threadIdx.y", bind(tz, wn, "threadIdx.z", bind(tx, 32, "threadIdx.x", body)))

        fill = warps(lambda ty, tz: inline_impl(n["fill"], (Cw, (ty, tz, 0, 0))))
        b_src = (bx * BN, ko * 16) if self.b_trans else (ko * 16, bx * BN)
        step = warps(lambda ty, tz: Allocate(Aw, Allocate(Bw, seq(
            inline_impl(n["ld_a"], (As, (0, ty * 16) if self.a_trans else (ty * 16, 0)), (Aw, (0, 0))),
            inline_impl(n["ld_b"], (Bs, (tz * 16, 0) if self.b_trans else (0, tz * 16)), (Bw, (0, 0))),
            inline_impl(n["mma"], (Aw, (0, 0)), (Bw, (0, 0)), (Cw, (ty, tz, 0, 0))),
        ))))  # fmt: skip
        a_src = (ko * 16, by * BM) if self.a_trans else (by * BM, ko * 16)
        kloop = serial(ko, K // 16, seq(copy(As, A, *a_src), copy(Bs, B, *b_src), step))
        if self.store == "global":
            out = warps(lambda ty, tz: inline_impl(
                n["store"], (Cw, (ty, tz, 0, 0)), (C, (by * BM + ty * 16, bx * BN + tz * 16))))
        else:
            Cs = Buffer("C_shared", (BM, BN), self.acc, scope="shared")
            to_shared = warps(lambda ty, tz: inline_impl(
                n["store"], (Cw, (ty, tz, 0, 0)), (Cs, (ty * 16, tz * 16))))
            out = Allocate(Cs, seq(to_shared, _copy_out(C, Cs, by * BM, bx * BN, wm, wn)))
        body = Allocate(As, Allocate(Bs, Allocate(Cw, seq(fill, kloop, out))))
        grid = bind(by, M // BM, "blockIdx.y", bind(bx, N // BN, "blockIdx.x", body))
        return PrimFunc((A, B, C), grid, name="tc_gemm")

    def inputs(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = to_storage(rng.standard_normal((self.K, self.M) if self.a_trans else (self.M, self.K)), self.dtype)
        b_shape = (self.N, self.K) if self.b_trans else (self.K, self.N)
        b = to_storage(rng.standard_normal(b_shape), self.dtype)
        c = np.full((self.M, self.N), np.nan, dtype=dt.to_numpy(self.acc))
        return a, b, c

    def reference(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        am, bm = from_storage(a, self.dtype), from_storage(b, self.dtype)
        return (am.T if self.a_trans else am) @ (bm.T if self.b_trans else bm)


def gemm_one_nest(M: int = 64, N: int = 64, K: int = 32, warps_m: int = 2, warps_n: int = 2,
                  dtype: str = "float16") -> PrimFunc:
    """``C = A @ B`` in TVM's tensorized structure: one ``threadIdx.y/z`` nest per block holding
    the whole warp's work (fill, the K loop with its cooperative copies, store), every buffer
    allocated at the root with its full shape (as lowering leaves a schedule's cache buffers):
    CompactBufferAllocation shrinks the warp fragments to one warp's tile, inside the nest."""
    BM, BN = 16 * warps_m, 16 * warps_n
    t = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    A, B, C = Buffer("A", (M, K), dtype), Buffer("B", (K, N), dtype), Buffer("C", (M, N), "float32")
    As = Buffer("A_shared", (M, K), dtype, scope="shared")
    Bs = Buffer("B_shared", (K, N), dtype, scope="shared")
    Cw = Buffer("C_warp", (M // 16, N // 16, 32, 8), "float32", scope="warp")
    Aw = Buffer("A_warp", (M // 16, K // 16, 32, 8), dtype, scope="warp")
    Bw = Buffer("B_warp", (K // 16, N // 16, 32, 8), dtype, scope="warp")
    by, bx, ty, tz, ko = (Var(n) for n in ("by", "bx", "ty", "tz", "ko"))
    mi, ni = by * warps_m + ty, bx * warps_n + tz  # this warp's 16x16 tile of C
    threads = 32 * warps_m * warps_n

    def copy(dst: Buffer, src: Buffer, r0: PrimExpr, c0: PrimExpr, rows: int, cols: int) -> Stmt:
        tx, f = Var("tx"), Var("f")
        flat = f * threads + (ty * warps_n + tz) * 32 + tx
        r, c = flat // cols, flat % cols
        body = IfThenElse(flat < rows * cols, BufferStore(dst, src[r0 + r, c0 + c], (r0 + r, c0 + c)))
        return bind(tx, 32, "threadIdx.x", serial(f, (rows * cols + threads - 1) // threads, body))

    step = seq(
        copy(As, A, by * BM, ko * 16, BM, 16),
        copy(Bs, B, ko * 16, bx * BN, 16, BN),
        inline_impl(f"mma_ldmatrix_{t}_a", (As, (mi * 16, ko * 16)), (Aw, (mi, ko, 0, 0))),
        inline_impl(f"mma_ldmatrix_{t}_b", (Bs, (ko * 16, ni * 16)), (Bw, (ko, ni, 0, 0))),
        inline_impl(f"mma_{t}{t}f32", (Aw, (mi, ko, 0, 0)), (Bw, (ko, ni, 0, 0)), (Cw, (mi, ni, 0, 0))),
    )
    nest = bind(ty, warps_m, "threadIdx.y", bind(tz, warps_n, "threadIdx.z", seq(
        inline_impl("mma_fill_f32", (Cw, (mi, ni, 0, 0))),
        serial(ko, K // 16, step),
        inline_impl("mma_store_f32_global", (Cw, (mi, ni, 0, 0)), (C, (mi * 16, ni * 16))),
    )))  # fmt: skip
    grid = bind(by, M // BM, "blockIdx.y", bind(bx, N // BN, "blockIdx.x", nest))
    body = Allocate(As, Allocate(Bs, Allocate(Aw, Allocate(Bw, Allocate(Cw, grid)))))
    return PrimFunc((A, B, C), body, name="tc_gemm_one_nest")


def _copy_out(C: Buffer, Cs: Buffer, r0: PrimExpr, c0: PrimExpr, wm: int, wn: int) -> Stmt:
    rows, cols = (int(x) for x in Cs.shape)
    ty, tz, tx, f = Var("ty"), Var("tz"), Var("tx"), Var("f")
    threads = 32 * wm * wn
    flat = f * threads + (ty * wn + tz) * 32 + tx
    r, c = flat // cols, flat % cols
    store = BufferStore(C, Cs[r, c], (r0 + r, c0 + c))
    body = serial(f, (rows * cols + threads - 1) // threads, IfThenElse(flat < rows * cols, store))
    return bind(ty, wm, "threadIdx.y", bind(tz, wn, "threadIdx.z", bind(tx, 32, "threadIdx.x", body)))


def to_storage(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to ``dtype``, as the executor stores it (bfloat16: uint16 bits, RNE)."""
    if dtype == "bfloat16":
        bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return bits.astype(np.uint16)
    return np.asarray(x).astype(dt.to_numpy(dtype))


def from_storage(x: np.ndarray, dtype: str) -> np.ndarray:
    """Stored values as float64."""
    if dtype == "bfloat16":
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def tile_16x8(x_steps: int = 1, b_x1: bool = False, dtype: str = "float16") -> PrimFunc:
    """One warp, one 16x8 tile of ``C = A @ B`` (A ``[16, 16 * x_steps]``, B ``[16 * x_steps, 8]``)
    written with the calls directly: A by ``ldmatrix.x4``, B by ``ldmatrix.x2.trans`` (or two
    ``x1.trans``), one ``mma.m16n8k16`` per K step, ``mma_store`` of the 16x8 accumulator."""
    K = 16 * x_steps
    A, B, C = Buffer("A", (16, K), dtype), Buffer("B", (K, 8), dtype), Buffer("C", (16, 8), "float32")
    As = Buffer("A_shared", (16, K), dtype, scope="shared")
    Bs = Buffer("B_shared", (K, 8), dtype, scope="shared")
    Aw = Buffer("A_warp", (x_steps, 32, 8), dtype, scope="warp")
    Bw = Buffer("B_warp", (x_steps, 32, 4), dtype, scope="warp")
    Cw = Buffer("C_warp", (32, 4), "float32", scope="warp")
    tx, i, ib, s = Var("tx"), Var("i"), Var("ib"), Var("s")  # a Var per loop (loopir.verify)

    def lanes(body: Stmt) -> Stmt:
        return bind(tx, 32, "threadIdx.x", body)

    copy_a = serial(i, 16 * K // 32, BufferStore(As, A[(i * 32 + tx) // K, (i * 32 + tx) % K],
                                                 ((i * 32 + tx) // K, (i * 32 + tx) % K)))  # fmt: skip
    copy_b = serial(ib, 8 * K // 32, BufferStore(Bs, B[(ib * 32 + tx) // 8, (ib * 32 + tx) % 8],
                                                 ((ib * 32 + tx) // 8, (ib * 32 + tx) % 8)))  # fmt: skip
    if b_x1:
        load_b = seq(Evaluate(op.ptx_ldmatrix(Bw[s, tx, 0], Bs[16 * s + tx % 8, 0], num=1, trans=True)),
                     Evaluate(op.ptx_ldmatrix(Bw[s, tx, 2], Bs[16 * s + 8 + tx % 8, 0], num=1, trans=True)))  # fmt: skip
    else:
        load_b = Evaluate(op.ptx_ldmatrix(Bw[s, tx, 0], Bs[16 * s + tx % 16, 0], num=2, trans=True))
    steps = serial(s, x_steps, seq(
        Evaluate(op.ptx_ldmatrix(Aw[s, tx, 0], As[tx % 16, 16 * s + 8 * (tx // 16)])),
        load_b,
        Evaluate(op.ptx_mma(Aw[s, tx, 0], Bw[s, tx, 0], Cw[tx, 0])),
    ))  # fmt: skip
    body = seq(copy_a, copy_b, Evaluate(op.storage_sync("shared")),
               Evaluate(op.mma_fill(Cw[tx, 0], 4, 0.0)), steps,
               Evaluate(op.mma_store(C[0, 0], Cw[tx, 0], 16, 8)))  # fmt: skip
    alloc = Allocate(As, Allocate(Bs, Allocate(Aw, Allocate(Bw, Allocate(Cw, lanes(body))))))
    bx = Var("bx")
    return PrimFunc((A, B, C), bind(bx, 1, "blockIdx.x", alloc), name="tile_16x8")


__all__ = ["Gemm", "from_storage", "gemm_one_nest", "inline_impl", "tile_16x8", "to_storage", "MMA_A", "MMA_B_16x8",
           "MMA_C_16x8"]  # fmt: skip
