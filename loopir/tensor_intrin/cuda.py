"""The built-in CUDA tensor-core intrinsics (sm_80+), registered under TVM's names.

Each is a description PrimFunc (what one call computes, a sequential TensorIR nest over the
fragment layouts of [`loopir.tensor_intrin.layouts`][loopir.tensor_intrin.layouts]) and an
implementation PrimFunc (the calls of [`loopir.ir.op`][loopir.ir.op] that do it, under
``threadIdx.x`` bound to the 32 lanes of a warp).
Fragments are ``warp`` buffers ``[32, 8]``: lane, then the lane's 8 elements.

=============================  =====================================  ==========================
name                           description (16x16 tiles)              implementation
=============================  =====================================  ==========================
mma_ldmatrix_{t}_a             ``A_warp[MMA_A(i, k)] = A_s[i, k]``     ``ldmatrix.x4``
mma_ldmatrix_{t}_a_trans       ``A_warp[MMA_A(i, k)] = A_s[k, i]``     ``ldmatrix.x4.trans``
mma_ldmatrix_{t}_b             ``B_warp[MMA_B(k, j)] = B_s[k, j]``     ``ldmatrix.x4.trans``
mma_ldmatrix_{t}_b_trans       ``B_warp[MMA_B(k, j)] = B_s[j, k]``     ``ldmatrix.x4``
mma_f16f16f32, mma_bf16bf16f32 ``C[i, j] += A[i, k] * B[k, j]``       two ``mma.sync.m16n8k16``
mma_f16f16f16                  (fp32 / fp16 accumulation)             (one per half of N)
mma_fill_f32, mma_fill_f16     ``C_warp[MMA_C(i, j)] = 0``             ``mma_fill``
mma_store_{a}_shared           ``C_s[i, j] = C_warp[MMA_C(i, j)]``     ``mma_store``
mma_store_{a}_global           ``C_g[i, j] = C_warp[MMA_C(i, j)]``     ``mma_store``
mma_store_f32_{o}_{scope}      ``D[i, j] = o(C_warp[MMA_C(i, j)])``    ``mma_store`` (converting)
wgmma_m64n{n}k{k}_{t}{t}f32    ``C[i, j] += A[i, k] * B[j, k]``        ``k / 16`` ``wgmma``
                               (one warp's 16 x n x k)                (sm_90a)
wgmma_rs_m64n{n}k{k}_{t}{t}f32 ``C[i, j] += A[i, k] * B[k, j]``        ``k / 16`` ``wgmma``, A
                               (A registers, B MN-major)              from registers, trans-b
=============================  =====================================  ==========================

with ``{t}`` one of ``f16``, ``bf16``, ``{a}`` one of ``f32``, ``f16``, ``{o}`` one of ``f16``,
``bf16`` (a float32 accumulator stored as the half-precision result) and ``{scope}`` one of
``shared``, ``global``, ``{n}`` a multiple of 16 from 16 to 256 and ``{k}`` 16 or 64 (a whole
128-byte row: one wait for 4 instructions), or 128, 192, 256 (whole rows of 2 to 4 64-column
blocks, each block a further index along a dimension before the rows once stored: one wait for
all, as a ``head_dim`` of 128 wants). Parameters, in order:
ldmatrix ``(shared [16, 16], warp [32, 8])``; mma ``(A warp, B warp, C warp)``; fill
``(C warp,)``; store ``(C warp, destination [16, 16])``; wgmma ``(A shared [16, 64], B shared
[n, 64], C warp [n / 16, 32, 8])``: A and B K-major (B stored ``[N, K]``), the description
reading columns 0 to k - 1 of their 64-element rows, the implementation reading them through the
128-byte swizzle ([`ptx_wgmma`][loopir.ir.op.ptx_wgmma]): it computes the description on tiles
*stored* swizzled, as ``transform_layout`` with
[`sw128`][loopir.tensor_intrin.layouts.sw128]'s map leaves them; the
accumulator is the warp's ``n / 16`` tiles in the ``MMA_C`` layout. ``wgmma_rs`` (FlashAttention
3's ``P V``; ``{n}`` a multiple of 64 up to 256, ``{k}`` of 16 up to 256): ``(A warp [k / 16, 32,
8], B shared [k, n], C warp [n / 16, 32, 8])``, A the warp's ``k / 16`` tiles of 16 x 16 in the
``MMA_A`` layout (the registers ``wgmma`` takes A from: the accumulator layout, so an ``MMA_C``
fragment such as the softmax's P is A as it is), B ``[K, N]`` N-major, read by the
implementation through the MN-major 128-byte swizzle (``ptx_wgmma(..., trans_b=True)``: rows
of 64 elements of N, each 64 columns a block along the dimension before the rows, as
``transform_layout`` with ``(k, n) -> (n // 64, k, sw128(k, n % 64))`` stores it). The shared source of a ldmatrix and the
destination of a store may have any row stride (a tile of a larger buffer): the
implementations index them as 2-D tiles, and ldmatrix needs its rows 16-byte aligned.

Differences from TVM: the B fragment's layout does not depend on how B is stored (``_b`` and
``_b_trans`` load the same fragment), so there is one mma description per dtype and no
``mma_*_trans_b``; fill takes a value (the registered fills store 0).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from loopir.ir import op
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import PrimExpr, Var, make_const
from loopir.ir.stmt import (
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IterKind,
    IterVar,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.tensor_intrin import _register_builtin
from loopir.tensor_intrin.layouts import MMA_A, MMA_B, MMA_C, SW128_ROW, WARP_SIZE, FragmentLayout

__all__ = ["DTYPE_ABBREV", "INTRIN_NAMES", "WGMMA_INTRIN_NAMES", "wgmma_intrin", "wgmma_rs_intrin"]

#: The dtypes of the names, abbreviated as in TVM.
DTYPE_ABBREV = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
#: The names this module registers, in registration order.
INTRIN_NAMES: list[str] = []
#: The ``wgmma`` names among them (sm_90a).
WGMMA_INTRIN_NAMES: list[str] = []


def wgmma_intrin(dtype: str, n: int, k: int = 16) -> str:
    """The name of the ``wgmma`` intrinsic of ``dtype`` inputs, width ``n`` and depth ``k``."""
    t = DTYPE_ABBREV[dtype]
    return f"wgmma_m64n{n}k{k}_{t}{t}f32"


def wgmma_rs_intrin(dtype: str, n: int, k: int) -> str:
    """The name of the ``wgmma`` intrinsic with A from registers and B MN-major (``C[i, j] +=
    A[i, k] * B[k, j]``) of ``dtype`` inputs, width ``n`` (a multiple of 64) and depth ``k``
    (a multiple of 16 up to 256)."""
    t = DTYPE_ABBREV[dtype]
    return f"wgmma_rs_m64n{n}k{k}_{t}{t}f32"

_Index = tuple[PrimExpr, PrimExpr]


def _region(buf: Buffer, idx: tuple[PrimExpr, ...] | None = None) -> BufferRegion:
    """One element of ``buf`` (``idx``) or all of it."""
    if idx is None:
        return BufferRegion.full(buf)
    return BufferRegion(buf, tuple(Range(i, make_const(1, i.dtype)) for i in idx))


def _root(reads: list[Buffer], writes: list[Buffer], body: Stmt) -> Stmt:
    block = Block(name="root", iter_vars=(), reads=tuple(_region(b) for b in reads),
                  writes=tuple(_region(b) for b in writes), body=body)  # fmt: skip
    return BlockRealize((), block=block)


def _grid(name: str, extents: tuple[int, ...], kinds: str,
          make: Callable[[list[Var]], tuple[Stmt, list[BufferRegion], list[BufferRegion]]]) -> Stmt:  # fmt: skip
    """A nest of serial loops over ``extents`` around one block whose iter vars (spatial ``S``
    or reduce ``R`` per ``kinds``) are bound to them; ``make(iter vars)`` gives the body and
    its read and write regions."""
    loops = [Var(f"ax{d}", "int32") for d in range(len(extents))]
    ivs = [Var(f"v{d}", "int32") for d in range(len(extents))]
    body, reads, writes = make(ivs)
    block = Block(
        name=name,
        iter_vars=tuple(IterVar(v, Range(0, n), IterKind.REDUCE if k == "R" else IterKind.SPATIAL)
                        for v, n, k in zip(ivs, extents, kinds)),  # fmt: skip
        reads=tuple(reads), writes=tuple(writes), body=body,
    )
    out: Stmt = BlockRealize(tuple(loops), block=block)
    for v, n in reversed(list(zip(loops, extents))):
        out = For(v, 0, n, ForKind.SERIAL, out)
    return out


def _lanes(body: Callable[[Var], Stmt]) -> Stmt:
    """``body(tx)`` under ``threadIdx.x`` bound to the 32 lanes of a warp."""
    tx = Var("tx", "int32")
    return For(tx, 0, WARP_SIZE, ForKind.THREAD_BINDING, body(tx), thread_tag="threadIdx.x")


def _warp(name: str, dtype: str) -> Buffer:
    return Buffer(name, (WARP_SIZE, 8), dtype, scope="warp")


# --- ldmatrix -------------------------------------------------------------------------------

# operand -> (fragment layout, is the stored tile transposed w.r.t. the layout's (row, col),
#             ptx trans flag, the row address lane tx supplies)
_LDMATRIX: dict[str, tuple[FragmentLayout, bool, bool, Callable[[Var], _Index]]] = {
    "a": (MMA_A, False, False, lambda tx: (tx % 16, 8 * (tx // 16))),
    "a_trans": (MMA_A, True, True, lambda tx: (8 * (tx // 16) + tx % 8, 8 * (tx // 8 % 2))),
    "b": (MMA_B, False, True, lambda tx: (tx % 16, 8 * (tx // 16))),
    "b_trans": (MMA_B, True, False, lambda tx: (8 * (tx // 16) + tx % 8, 8 * (tx // 8 % 2))),
}


def _ldmatrix(name: str, dtype: str, which: str) -> tuple[PrimFunc, PrimFunc]:
    layout, stored_t, ptx_trans, address = _LDMATRIX[which]
    shared = Buffer("shared", (16, 16), dtype, scope="shared")
    warp = _warp("warp", dtype)

    def make(v: list[Var]) -> tuple[Stmt, list[BufferRegion], list[BufferRegion]]:
        row, col = (v[1], v[0]) if stored_t else (v[0], v[1])
        dst = layout.to_lane_local(row, col)
        return (BufferStore(warp, shared[v[0], v[1]], dst), [_region(shared, (v[0], v[1]))],
                [_region(warp, dst)])  # fmt: skip

    desc = _grid("shared_warp", (16, 16), "SS", make)
    impl = _lanes(lambda tx: Evaluate(op.ptx_ldmatrix(warp[tx, 0], shared[address(tx)], 4, ptx_trans)))
    return (PrimFunc((shared, warp), _root([shared], [warp], desc), name=f"{name}_desc"),
            PrimFunc((shared, warp), _root([shared], [warp], impl), name=f"{name}_impl"))  # fmt: skip


# --- mma ------------------------------------------------------------------------------------


def _mma(name: str, in_dtype: str, out_dtype: str) -> tuple[PrimFunc, PrimFunc]:
    a, b, c = _warp("A", in_dtype), _warp("B", in_dtype), _warp("C", out_dtype)

    def make(v: list[Var]) -> tuple[Stmt, list[BufferRegion], list[BufferRegion]]:
        i, j, k = v
        ci, ai, bi = MMA_C.to_lane_local(i, j), MMA_A.to_lane_local(i, k), MMA_B.to_lane_local(k, j)
        value = c[ci] + a[ai].astype(out_dtype) * b[bi].astype(out_dtype)
        reads = [_region(c, ci), _region(a, ai), _region(b, bi)]
        return BufferStore(c, value, ci), reads, [_region(c, ci)]

    desc = _grid("C", (16, 16, 16), "SSR", make)
    impl = _lanes(lambda tx: seq(Evaluate(op.ptx_mma(a[tx, 0], b[tx, 0], c[tx, 0])),
                                 Evaluate(op.ptx_mma(a[tx, 0], b[tx, 4], c[tx, 4]))))  # fmt: skip
    return (PrimFunc((a, b, c), _root([c, a, b], [c], desc), name=f"{name}_desc"),
            PrimFunc((a, b, c), _root([c, a, b], [c], impl), name=f"{name}_impl"))  # fmt: skip


def _wgmma(name: str, dtype: str, n: int, k: int) -> tuple[PrimFunc, PrimFunc]:
    # rows of 64 (one swizzle row: the K step reads columns 0 .. k - 1), or k past 64: the
    # rows' whole 64-column blocks (stored as further blocks along a dimension before the rows)
    width = max(SW128_ROW, k)
    a = Buffer("A", (16, width), dtype, scope="shared")
    b = Buffer("B", (n, width), dtype, scope="shared")
    c = Buffer("C", (n // 16, WARP_SIZE, 8), "float32", scope="warp")

    def make(v: list[Var]) -> tuple[Stmt, list[BufferRegion], list[BufferRegion]]:
        i, j, k = v
        ci = (j // 16, *MMA_C.to_lane_local(i, j % 16))
        value = c[ci] + a[i, k].astype("float32") * b[j, k].astype("float32")
        reads = [_region(c, ci), _region(a, (i, k)), _region(b, (j, k))]
        return BufferStore(c, value, ci), reads, [_region(c, ci)]

    desc = _grid("C", (16, n, k), "SSR", make)
    zero = make_const(0, "int32")
    impl = _lanes(lambda tx: Evaluate(op.ptx_wgmma(a[zero, zero], b[zero, zero], c[zero, tx, zero], n, k)))
    # the tiles are the rows' first k columns (the rest of a 128-byte row is other K steps')
    reads = (BufferRegion.full(c), BufferRegion(a, (Range(0, 16), Range(0, k))),
             BufferRegion(b, (Range(0, n), Range(0, k))))  # fmt: skip

    def root(body: Stmt) -> Stmt:
        block = Block(name="root", iter_vars=(), reads=reads, writes=(BufferRegion.full(c),), body=body)
        return BlockRealize((), block=block)

    return (PrimFunc((a, b, c), root(desc), name=f"{name}_desc"),
            PrimFunc((a, b, c), root(impl), name=f"{name}_impl"))  # fmt: skip


def _wgmma_rs(name: str, dtype: str, n: int, k: int) -> tuple[PrimFunc, PrimFunc]:
    """``C[i, j] += A[i, kk] * B[kk, j]``: A the warp's ``k / 16`` fragments (registers), B a
    ``[k, n]`` shared tile (MN-major: n contiguous), read by the implementation through the
    MN-major 128-byte swizzle (``ptx_wgmma`` with ``trans_b``)."""
    a = Buffer("A", (k // 16, WARP_SIZE, 8), dtype, scope="warp")
    b = Buffer("B", (k, n), dtype, scope="shared")
    c = Buffer("C", (n // 16, WARP_SIZE, 8), "float32", scope="warp")

    def make(v: list[Var]) -> tuple[Stmt, list[BufferRegion], list[BufferRegion]]:
        i, j, kk = v
        ci = (j // 16, *MMA_C.to_lane_local(i, j % 16))
        ai = (kk // 16, *MMA_A.to_lane_local(i, kk % 16))
        value = c[ci] + a[ai].astype("float32") * b[kk, j].astype("float32")
        reads = [_region(c, ci), _region(a, ai), _region(b, (kk, j))]
        return BufferStore(c, value, ci), reads, [_region(c, ci)]

    desc = _grid("C", (16, n, k), "SSR", make)
    zero = make_const(0, "int32")
    impl = _lanes(lambda tx: Evaluate(op.ptx_wgmma(a[zero, tx, zero], b[zero, zero], c[zero, tx, zero], n, k,
                                                   trans_b=True)))  # fmt: skip
    return (PrimFunc((a, b, c), _root([c, a, b], [c], desc), name=f"{name}_desc"),
            PrimFunc((a, b, c), _root([c, a, b], [c], impl), name=f"{name}_impl"))  # fmt: skip


# --- fill and store ---------------------------------------------------------------------------


def _fill(name: str, dtype: str) -> tuple[PrimFunc, PrimFunc]:
    c = _warp("C", dtype)
    zero = make_const(0, dtype)

    def make(v: list[Var]) -> tuple[Stmt, list[BufferRegion], list[BufferRegion]]:
        ci = MMA_C.to_lane_local(v[0], v[1])
        return BufferStore(c, zero, ci), [], [_region(c, ci)]

    desc = _grid("C_init", (16, 16), "SS", make)
    impl = _lanes(lambda tx: Evaluate(op.mma_fill(c[tx, 0], MMA_C.locals, zero)))
    return (PrimFunc((c,), _root([], [c], desc), name=f"{name}_desc"),
            PrimFunc((c,), _root([], [c], impl), name=f"{name}_impl"))  # fmt: skip


def _store(name: str, dtype: str, scope: str, out: str | None = None) -> tuple[PrimFunc, PrimFunc]:
    """``dst[i, j] = C_warp[MMA_C(i, j)]``, converted to ``out`` when given."""
    c = _warp("C", dtype)
    dst = Buffer("dst", (16, 16), out or dtype, scope=scope)

    def make(v: list[Var]) -> tuple[Stmt, list[BufferRegion], list[BufferRegion]]:
        ci = MMA_C.to_lane_local(v[0], v[1])
        return (BufferStore(dst, op.cast(c[ci], dst.dtype), (v[0], v[1])), [_region(c, ci)],
                [_region(dst, (v[0], v[1]))])  # fmt: skip

    desc = _grid("C_store", (16, 16), "SS", make)
    impl = _lanes(lambda tx: Evaluate(op.mma_store(dst[0, 0], c[tx, 0], 16, 16)))
    return (PrimFunc((c, dst), _root([c], [dst], desc), name=f"{name}_desc"),
            PrimFunc((c, dst), _root([c], [dst], impl), name=f"{name}_impl"))  # fmt: skip


def _register(name: str, make: Callable[[str], tuple[PrimFunc, PrimFunc]]) -> None:
    # built on the first lookup of the name (tensor_intrin.get): importing stays cheap
    _register_builtin(name, functools.partial(make, name))
    INTRIN_NAMES.append(name)


def _register_all() -> None:
    for dtype in ("float16", "bfloat16"):
        t = DTYPE_ABBREV[dtype]
        for which in _LDMATRIX:
            _register(f"mma_ldmatrix_{t}_{which}", functools.partial(_ldmatrix, dtype=dtype, which=which))
    for in_dtype, out_dtype in (("float16", "float32"), ("bfloat16", "float32"), ("float16", "float16")):
        i, o = DTYPE_ABBREV[in_dtype], DTYPE_ABBREV[out_dtype]
        _register(f"mma_{i}{i}{o}", functools.partial(_mma, in_dtype=in_dtype, out_dtype=out_dtype))
    for dtype in ("float16", "bfloat16"):
        for n in range(16, 257, 16):
            for k in (16, 64, 128, 192, 256):
                _register(wgmma_intrin(dtype, n, k), functools.partial(_wgmma, dtype=dtype, n=n, k=k))
                WGMMA_INTRIN_NAMES.append(wgmma_intrin(dtype, n, k))
        for n in range(64, 257, 64):
            for k in range(16, 257, 16):
                _register(wgmma_rs_intrin(dtype, n, k), functools.partial(_wgmma_rs, dtype=dtype, n=n, k=k))
                WGMMA_INTRIN_NAMES.append(wgmma_rs_intrin(dtype, n, k))
    for dtype in ("float32", "float16"):
        a = DTYPE_ABBREV[dtype]
        _register(f"mma_fill_{a}", functools.partial(_fill, dtype=dtype))
        for scope in ("shared", "global"):
            _register(f"mma_store_{a}_{scope}", functools.partial(_store, dtype=dtype, scope=scope))
    for src, out in sorted(op.STORE_CASTS):
        a, o = DTYPE_ABBREV[src], DTYPE_ABBREV[out]
        for scope in ("shared", "global"):
            _register(f"mma_store_{a}_{o}_{scope}", functools.partial(_store, dtype=src, scope=scope, out=out))


_register_all()
