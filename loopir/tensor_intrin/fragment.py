"""Row reductions over a warp's ``mma`` accumulator fragments (FlashAttention 2's softmax
statistics), registered as tensor intrinsics.

A warp holds a 16 x ``n`` tile of an accumulator as ``n / 16`` tiles of the ``MMA_C`` layout
([`loopir.tensor_intrin.layouts`][loopir.tensor_intrin.layouts]): a ``warp`` buffer ``X[n / 16,
32, 8]`` whose lane ``l`` holds, of each tile, the elements of rows ``l // 4`` (locals 0, 1, 4,
5) and ``l // 4 + 8`` (locals 2, 3, 6, 7). A row is thus spread over the 4 lanes of a *quad*
(``l // 4`` equal). The intrinsic ``frag_row_{op}_{t}_n{n}`` (``op`` ``max`` or ``sum``, ``t``
the fragment's type ``f32``, ``f16`` or ``bf16``, ``n`` a multiple of 16 up to 256) is

* the description: ``m[i] = op(m[i], X[j // 16, MMA_C(i, j % 16)])`` over ``i < 16`` (spatial)
  and ``j < n`` (reduced), ``m`` a float32 ``shared`` vector of the tile's 16 rows and the
  element cast to float32 (``T.max`` / ``+``; no init: ``m`` holds the running value);
* the implementation: each lane reduces its ``n / 4`` elements of each of its two rows in
  registers (a scratch ``warp`` buffer ``[32, 2]``, from the identity), two
  [`ptx_shfl_xor`][loopir.ir.op.ptx_shfl_xor] steps (lane masks 1 and 2) combine the quad, and
  the quad's first lane folds the total into ``m``.

With the suffix ``_quad`` the statistics are *quad-replicated* registers instead: ``m`` is a
``warp`` buffer ``[32, 2]`` holding copy ``q`` (0 to 3) of row ``i``'s value at
``ROW_STATS.to_lane_local(i, q)`` ([`loopir.tensor_intrin.layouts`][loopir.tensor_intrin.layouts]),
the description ``m[ROW_STATS(i, q)] = op(m[..], X[j // 16, MMA_C(i, j % 16)])`` over ``i < 16``, ``q < 4``
(spatial) and ``j < n`` (reduced): every copy is the whole row's reduction, which the
implementation's shuffles give every lane of the quad, so each lane folds its own copies and
nothing goes through shared memory (a program keeps one copy per quad lane, ``s[i, q]``, and
reads copy ``j % 8 // 2`` at column ``j``: the one the lane holding ``(i, j)`` holds).

The description is the meaning: the CPU executor runs the implementation (its shuffles as the
warp's exchange) and the property tests compare the two; ``max`` is exact, ``sum`` adds in
another order. On the GPU the per-lane work is ``n / 2`` register operations and 4 shuffles
per pair of rows, instead of a row's pass through shared memory.
"""

from __future__ import annotations

import functools

from loopir.ir import op
from loopir.ir.buffer import Buffer, BufferRegion
from loopir.ir.expr import IntImm, PrimExpr, Var
from loopir.ir.reducer import identity
from loopir.ir.stmt import (
    Block,
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
from loopir.tensor_intrin import _register_builtin
from loopir.tensor_intrin.cuda import DTYPE_ABBREV, _grid, _lanes, _region
from loopir.tensor_intrin.layouts import MMA_C, ROW_STATS, WARP_SIZE

__all__ = ["FRAGMENT_INTRIN_NAMES", "row_reduce_intrin"]

#: The names this module registers.
FRAGMENT_INTRIN_NAMES: list[str] = []
_OPS = ("max", "sum")
_DTYPES = ("float32", "float16", "bfloat16")


def row_reduce_intrin(reducer: str, dtype: str, n: int, quad: bool = False) -> str:
    """The name of the row reduction ``reducer`` (``"max"``, ``"sum"``) over a 16 x ``n``
    accumulator tile of ``dtype`` elements (``quad``: into quad-replicated statistics)."""
    return f"frag_row_{reducer}_{DTYPE_ABBREV[dtype]}_n{n}" + ("_quad" if quad else "")


def _combine(reducer: str, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return op.max_(a, b) if reducer == "max" else a + b


def _identity(reducer: str) -> PrimExpr:
    return identity(reducer, "float32")


def _row_reduce(name: str, reducer: str, dtype: str, n: int, quad: bool) -> tuple[PrimFunc, PrimFunc]:
    tiles = n // 16
    x = Buffer("X", (tiles, WARP_SIZE, 8), dtype, scope="warp")
    m = Buffer("m", (WARP_SIZE, 2) if quad else (16,), "float32", scope="warp" if quad else "shared")

    def make(v: list[Var]) -> tuple[Stmt, list[BufferRegion], list[BufferRegion]]:
        i, j = v[0], v[-1]
        mi = ROW_STATS.to_lane_local(i, v[1]) if quad else (i,)
        xi = (j // 16, *MMA_C.to_lane_local(i, j % 16))
        value = _combine(reducer, m[mi], op.cast(x[xi], "float32"))
        return BufferStore(m, value, mi), [_region(m, mi), _region(x, xi)], [_region(m, mi)]

    desc_body = _grid(name, (16, 4, n) if quad else (16, n), "SSR" if quad else "SR", make)
    red = Buffer("red", (WARP_SIZE, 2), "float32", scope="warp")
    other = Buffer("other", (WARP_SIZE, 2), "float32", scope="warp")

    def impl_lane(tx: Var) -> Stmt:
        r, t, e = Var("r", "int32"), Var("t", "int32"), Var("e", "int32")
        local = 2 * r + e % 2 + 4 * (e // 2)  # the lane's elements of row tx // 4 + 8 r
        part = BufferStore(red, _combine(reducer, red[tx, r], op.cast(x[t, tx, local], "float32")), (tx, r))
        reduce_ = seq(
            BufferStore(red, _identity(reducer), (tx, r)),
            For(t, 0, tiles, ForKind.UNROLLED, For(e, 0, 4, ForKind.UNROLLED, part)),
        )
        steps: list[Stmt] = [For(r, 0, 2, ForKind.UNROLLED, reduce_)]
        for mask in (1, 2):
            r2 = Var("r", "int32")
            steps.append(For(r2, 0, 2, ForKind.UNROLLED, seq(
                Evaluate(op.ptx_shfl_xor(other[tx, r2], red[tx, r2], mask)),
                BufferStore(red, _combine(reducer, red[tx, r2], other[tx, r2]), (tx, r2)),
            )))  # fmt: skip
        r3 = Var("r", "int32")
        if quad:  # every lane: its copies of its two rows' statistics
            fold = BufferStore(m, _combine(reducer, m[tx, r3], red[tx, r3]), (tx, r3))
            steps.append(For(r3, 0, 2, ForKind.UNROLLED, fold))
        else:  # the quad's first lane: the row's one value
            row = tx // 4 + 8 * r3
            fold = BufferStore(m, _combine(reducer, m[row], red[tx, r3]), (row,))
            steps.append(IfThenElse(tx % 4 == IntImm(0, "int32"), For(r3, 0, 2, ForKind.UNROLLED, fold)))
        return seq(*steps)

    reads = (BufferRegion.full(m), BufferRegion.full(x))
    writes = (BufferRegion.full(m),)

    def root(body: Stmt, scratch: tuple[Buffer, ...] = ()) -> Stmt:
        block = Block(name="root", iter_vars=(), reads=reads, writes=writes, body=body, alloc_buffers=scratch)
        return BlockRealize((), block=block)

    desc = PrimFunc((x, m), root(desc_body), name=f"{name}_desc")
    impl = PrimFunc((x, m), root(_lanes(impl_lane), (red, other)), name=f"{name}_impl")
    return desc, impl


def _register_all() -> None:
    for reducer in _OPS:
        for dtype in _DTYPES:
            for n in range(16, 257, 16):
                for quad in (False, True):
                    name = row_reduce_intrin(reducer, dtype, n, quad)
                    _register_builtin(name, functools.partial(_row_reduce, name, reducer, dtype, n, quad))
                    FRAGMENT_INTRIN_NAMES.append(name)


_register_all()
