"""Small tensor intrinsics for tests of ``blockize``/``tensorize`` and for the schedule fuzzer.

Their implementations are plain loop nests (or vector accesses) computing what the
descriptions compute, so a tensorized function runs on the CPU executor and must compute
the same as the untensorized one:

- ``"test.mm4"``: ``C[4, 4] += A[4, 4] @ B[4, 4]`` (float32); the implementation runs ``k``
  outermost and the 16 outputs as one unrolled loop ``ij``.
- ``"test.dot4"``: ``C[0] += A[0:4] . B[0:4]`` (float32); the implementation is one
  unrolled expression.
- ``"test.copy4"``: ``dst[0:4] = src[0:4]`` from global to shared memory (float32); the
  implementation is one 4-lane vector access.
- ``"test.copy4_local"``: the same into local memory.
- ``"test.muladd4"``: ``T[0:4] = A[0:4] * B[0:4] + 1`` (the first stage of
  ``loopir.testing.workloads.elementwise_chain``); the implementation is 4-lane vector code.
- the copies and the multiply-add for the other extents up to 8 (``"test.copy3"``,
  ``"test.muladd8"``, ...), for the schedule fuzzer.

[`register_test_intrinsics`][loopir.testing.intrinsics.register_test_intrinsics] registers them
(idempotent); [`intrinsic_pair`][loopir.testing.intrinsics.intrinsic_pair] builds a
description/implementation pair from a compute for custom tests.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from loopir import tensor_intrin
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import IntImm, PrimExpr, Ramp, Var, make_const
from loopir.ir.stmt import (
    Block,
    BlockRealize,
    BufferStore,
    For,
    ForKind,
    IterKind,
    IterVar,
    PrimFunc,
    Stmt,
)

__all__ = ["TEST_INTRINSICS", "intrinsic_pair", "register_test_intrinsics", "root", "tile"]


def tile(buf: Buffer) -> BufferRegion:
    """The whole of ``buf`` as a region."""
    return BufferRegion.full(buf)


def root(body: Stmt, reads: Sequence[BufferRegion], writes: Sequence[BufferRegion]) -> Stmt:
    """An intrinsic's root block."""
    return BlockRealize((), True, Block("root", (), tuple(reads), tuple(writes), body))


def intrinsic_pair(
    params: Sequence[Buffer],
    reads: Sequence[int],
    writes: Sequence[int],
    axes: Sequence[tuple[str, int, str]],
    compute: Callable[[Sequence[Buffer], Sequence[Var]], tuple[Buffer, tuple[PrimExpr, ...], PrimExpr]],
    impl_body: Callable[[Sequence[Buffer]], Stmt],
    name: str = "intrin",
) -> tuple[PrimFunc, PrimFunc]:
    """A description (a loop per axis over one block ``update``) and an implementation.

    Parameters
    ----------
    params
        The operand buffers (the implementation gets copies of them).
    reads, writes
        Indices into ``params`` of what the root blocks read and write (whole buffers).
    axes
        ``(name, extent, "S" | "R")`` per loop / iter var of the description.
    compute
        ``(buffers, iter vars) -> (buffer, indices, value)``: the description's store.
    impl_body
        ``buffers -> body`` of the implementation's root block.
    """
    loops = [Var(n) for n, _, _ in axes]
    ivs = [
        IterVar(Var("v" + n), Range.from_extent(e), IterKind.SPATIAL if k == "S" else IterKind.REDUCE)
        for n, e, k in axes
    ]
    buf, idx, value = compute(params, [iv.var for iv in ivs])
    loads = _loads(value)
    blk_reads = tuple(BufferRegion(b, tuple(Range(i, IntImm(1, i.dtype)) for i in ix)) for b, ix in loads)
    blk_writes = (BufferRegion(buf, tuple(Range(i, IntImm(1, i.dtype)) for i in idx)),)
    body: Stmt = BlockRealize(tuple(loops), True, Block("update", ivs, blk_reads, blk_writes, BufferStore(buf, value, idx)))
    for v, (_, e, _) in reversed(list(zip(loops, axes))):
        body = For(v, 0, e, ForKind.SERIAL, body)
    r = [tile(params[k]) for k in reads]
    w = [tile(params[k]) for k in writes]
    desc = PrimFunc(tuple(params), root(body, r, w), name=f"{name}_desc")
    iparams = [Buffer(b.name, b.shape, b.dtype, b.scope) for b in params]
    impl = PrimFunc(
        tuple(iparams),
        root(impl_body(iparams), [tile(iparams[k]) for k in reads], [tile(iparams[k]) for k in writes]),
        name=f"{name}_impl",
    )
    return desc, impl


def _loads(value: PrimExpr) -> list[tuple[Buffer, tuple[PrimExpr, ...]]]:
    from loopir.ir.expr import BufferLoad
    from loopir.ir.functor import post_order_visit

    out: list[tuple[Buffer, tuple[PrimExpr, ...]]] = []

    def visit(n: object) -> None:
        if isinstance(n, BufferLoad):
            out.append((n.buffer, n.indices))

    post_order_visit(value, visit)
    return out


def mm4(dtype: str = "float32", n: int = 4) -> tuple[PrimFunc, PrimFunc]:
    """``C[n, n] += A[n, n] @ B[n, n]``; implementation: ``k`` outermost, one unrolled loop
    over the n*n outputs."""
    A, B, C = (Buffer(x, (n, n), dtype) for x in "ABC")

    def compute(p: Sequence[Buffer], v: Sequence[Var]) -> tuple[Buffer, tuple[PrimExpr, ...], PrimExpr]:
        a, b, c = p
        i, j, k = v
        return c, (i, j), c[i, j] + a[i, k] * b[k, j]

    def impl(p: Sequence[Buffer]) -> Stmt:
        a, b, c = p
        k, ij = Var("k"), Var("ij")
        i, j = ij // n, ij % n
        store = BufferStore(c, c[i, j] + a[i, k] * b[k, j], (i, j))
        return For(k, 0, n, ForKind.SERIAL, For(ij, 0, n * n, ForKind.UNROLLED, store))

    return intrinsic_pair([A, B, C], [2, 0, 1], [2], [("i", n, "S"), ("j", n, "S"), ("k", n, "R")],
                          compute, impl, "mm4")  # fmt: skip


def dot4(dtype: str = "float32") -> tuple[PrimFunc, PrimFunc]:
    """``C[0] += A[0:4] . B[0:4]``; implementation: one unrolled expression."""
    A, B = Buffer("A", (4,), dtype), Buffer("B", (4,), dtype)
    C = Buffer("C", (1,), dtype)

    def compute(p: Sequence[Buffer], v: Sequence[Var]) -> tuple[Buffer, tuple[PrimExpr, ...], PrimExpr]:
        a, b, c = p
        (k,) = v
        return c, (IntImm(0),), c[0] + a[k] * b[k]

    def impl(p: Sequence[Buffer]) -> Stmt:
        a, b, c = p
        total: PrimExpr = c[0]
        for k in range(4):
            total = total + a[k] * b[k]
        return BufferStore(c, total, (IntImm(0),))

    return intrinsic_pair([A, B, C], [2, 0, 1], [2], [("k", 4, "R")], compute, impl, "dot4")


def copy4(dst_scope: str = "shared", dtype: str = "float32", n: int = 4) -> tuple[PrimFunc, PrimFunc]:
    """``dst[0:n] = src[0:n]`` from global to ``dst_scope``; implementation: one ``n``-lane
    vector access."""
    src = Buffer("src", (n,), dtype)
    dst = Buffer("dst", (n,), dtype, dst_scope)

    def compute(p: Sequence[Buffer], v: Sequence[Var]) -> tuple[Buffer, tuple[PrimExpr, ...], PrimExpr]:
        s, d = p
        (i,) = v
        return d, (i,), s[i]

    def impl(p: Sequence[Buffer]) -> Stmt:
        s, d = p
        lanes = Ramp(IntImm(0), IntImm(1), n)
        return BufferStore(d, s[lanes], (lanes,))

    return intrinsic_pair([src, dst], [0], [1], [("v", n, "S")], compute, impl, f"copy{n}_{dst_scope}")


def muladd4(dtype: str = "float32", n: int = 4) -> tuple[PrimFunc, PrimFunc]:
    """``T[0:n] = A[0:n] * B[0:n] + 1``; implementation: ``n``-lane vector accesses."""
    A, B, T = (Buffer(x, (n,), dtype) for x in ("A", "B", "T"))

    def compute(p: Sequence[Buffer], v: Sequence[Var]) -> tuple[Buffer, tuple[PrimExpr, ...], PrimExpr]:
        a, b, t = p
        (i,) = v
        return t, (i,), a[i] * b[i] + make_const(1.0, dtype)

    def impl(p: Sequence[Buffer]) -> Stmt:
        a, b, t = p
        lanes = Ramp(IntImm(0), IntImm(1), n)
        return BufferStore(t, a[lanes] * b[lanes] + make_const(1.0, f"{dtype}x{n}"), (lanes,))

    return intrinsic_pair([A, B, T], [0, 1], [2], [("v", n, "S")], compute, impl, f"muladd{n}")


TEST_INTRINSICS: dict[str, Callable[[], tuple[PrimFunc, PrimFunc]]] = {
    "test.mm4": mm4,
    "test.dot4": dot4,
    "test.copy4": copy4,
    "test.copy4_local": lambda: copy4("local"),
    "test.muladd4": muladd4,
}
"""The test intrinsics by name, as builders of (description, implementation)."""

SIZED = (1, 2, 3, 5, 6, 7, 8)
"""Other extents of the vector intrinsics the fuzzer draws (``test.copy<n>``,
``test.copy<n>_local``, ``test.muladd<n>``): any innermost loop of up to 8 iterations over a
copy or the first stage of a chain can be tensorized."""

for _n in SIZED:
    TEST_INTRINSICS[f"test.copy{_n}"] = functools.partial(copy4, "shared", n=_n)
    TEST_INTRINSICS[f"test.copy{_n}_local"] = functools.partial(copy4, "local", n=_n)
    TEST_INTRINSICS[f"test.muladd{_n}"] = functools.partial(muladd4, n=_n)


def register_test_intrinsics() -> tuple[str, ...]:
    """Register every intrinsic of [`TEST_INTRINSICS`][loopir.testing.intrinsics.TEST_INTRINSICS]
    not registered yet; returns their names."""
    known = set(tensor_intrin.names())
    for name, make in TEST_INTRINSICS.items():
        if name not in known:
            tensor_intrin.register(name, *make())
    return tuple(TEST_INTRINSICS)
