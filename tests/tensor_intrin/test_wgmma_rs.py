"""``ptx_wgmma`` with A from registers and B MN-major (``trans_b``), and the ``wgmma_rs_*``
intrinsics (FlashAttention 3's ``O += P V``), and K-major tiles of K past 64 (whole 64-column
blocks: ``S = Q K^T`` at head_dim 128 in one call): their meaning on the CPU executor against
oracles written out here from the PTX ISA and CuTe, independently of ``loopir.tensor_intrin``.

* A from registers: lane ``l``'s register ``v`` of K step ``s`` is CuTe's ``ALayout_64x16``
  (the ``mma.m16n8k16`` A fragment per warp) element; B MN-major in the 128-byte swizzle: the
  byte address of ``(k, n)`` is ``block * LBO + k // 8 * SBO + k % 8 * 128 + n % 64 * 2``,
  ``block = n // 64``, SBO = 1024, swizzled by PTX's address-bit XOR (CuTe's
  ``Layout_MN_SW128_Atom``, ``make_gmma_desc<Major::MN>``).
* Property: a ``ptx_wgmma(..., trans_b=True)`` call with A in a warp buffer, on a B stored by
  that oracle, equals numpy's ``A @ B`` through PTX's accumulator layout, and is bit-identical
  to the registered intrinsic's description on the unswizzled B, in sequential and random
  thread order.
* K-major past 64 columns: block ``kk // 64`` of a tile a further index before the rows, each
  stored as the one-row swizzle (the descriptor stepping to it every 4 instructions); equal
  to numpy and bit-identical to the description on the unblocked tiles.
* What the race checker sees: A's tiles of all 32 lanes, B's K rows of each 64-column block.
* The builder refuses malformed calls naming the operand.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import loopir
from loopir import tensor_intrin
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import IntImm, Var
from loopir.ir.stmt import Evaluate, For, ForKind, PrimFunc
from loopir.tensor_intrin.calls import touches
from loopir.tensor_intrin.cuda import WGMMA_INTRIN_NAMES, wgmma_rs_intrin

from .kernels import from_storage, to_storage
from .test_wgmma import ptx_sw128_byte, ptx_wgmma_d


def cute_a_register(lane: int, v: int, step: int) -> tuple[int, int]:
    """CuTe ``ALayout_64x16`` (16-bit A from registers, m64nNk16), a warp's 16 rows: value ``v``
    (0..7, the halves of ``a0..a3``) of ``lane`` at K step ``step`` is ``(row, k)``."""
    g, t = lane // 4, lane % 4
    return g + 8 * (v // 2 % 2), 16 * step + 2 * t + v % 2 + 8 * (v // 4)


def mn_major_storage(b: np.ndarray, lbo_bytes: int) -> np.ndarray:
    """B ``[K, N]`` (storage values) laid out MN-major in the 128-byte swizzle: the flat
    16-bit array a descriptor with leading byte offset ``lbo_bytes`` and SBO 1024 reads."""
    k, n = b.shape
    out = np.zeros(n // 64 * lbo_bytes // 2, b.dtype)
    for kk in range(k):
        for j in range(n):
            byte = j // 64 * lbo_bytes + kk // 8 * 1024 + kk % 8 * 128 + j % 64 * 2
            out[ptx_sw128_byte(byte) // 2] = b[kk, j]
    return out


def _call_func(n: int, k: int, dtype: str) -> PrimFunc:
    """One warp's ``ptx_wgmma(A regs, B MN-major, C, n, k, trans_b=True)``, B ``[n / 64, k,
    64]`` (``[k, 64]`` at n = 64)."""
    a = Buffer("A", (k // 16, 32, 8), dtype, scope="warp")
    b = Buffer("B", (n // 64, k, 64) if n > 64 else (k, 64), dtype, scope="shared")
    c = Buffer("C", (n // 16, 32, 8), "float32", scope="warp")
    tx, zero = Var("tx"), IntImm(0, "int32")
    first = (zero,) * len(b.shape)
    call = op.ptx_wgmma(a[zero, tx, zero], b[first], c[zero, tx, zero], n, k, trans_b=True)
    return PrimFunc((a, b, c), For(tx, 0, 32, ForKind.THREAD_BINDING, Evaluate(call), thread_tag="threadIdx.x"))


@functools.cache
def _module(func: PrimFunc, order: str) -> loopir.runtime.CPUModule:
    return loopir.build(func, target="cpu", thread_order=order)


@settings(max_examples=10, deadline=None)
@given(data=st.data(), n=st.sampled_from([64, 128, 256]), k=st.sampled_from([16, 48, 64, 128]),
       dtype=st.sampled_from(["float16", "bfloat16"]), order=st.sampled_from(["sequential", "random"]))  # fmt: skip
def test_register_a_mn_major_b_is_ptx_and_the_description(data: st.DataObject, n: int, k: int, dtype: str,
                                                          order: str) -> None:  # fmt: skip
    nonzero = st.one_of(st.floats(-4, -0.0625, width=32), st.floats(0.0625, 4, width=32))
    vals = functools.partial(hnp.arrays, np.float32, elements=nonzero)
    a_dense = to_storage(data.draw(vals((16, k))), dtype)
    b_dense = to_storage(data.draw(vals((k, n))), dtype)
    c = data.draw(vals((n // 16, 32, 8)))
    a_regs = np.empty((k // 16, 32, 8), a_dense.dtype)
    for s in range(k // 16):
        for lane in range(32):
            for v in range(8):
                a_regs[s, lane, v] = a_dense[cute_a_register(lane, v, s)]
    lbo = k * 128  # the 64-column blocks one after the other
    b_store = mn_major_storage(b_dense, lbo).reshape((n // 64, k, 64) if n > 64 else (k, 64))
    got = c.copy()
    _module(_call_func(n, k, dtype), order)(a_regs, b_store, got)
    full = from_storage(a_dense, dtype).astype(np.float64) @ from_storage(b_dense, dtype).astype(np.float64)
    for lane in range(32):
        for reg in range(n // 2):
            r, col = ptx_wgmma_d(lane, reg)
            want = c[reg // 8, lane, reg % 8] + full[r, col]
            assert abs(got[reg // 8, lane, reg % 8] - want) <= 1e-4 * (1 + abs(want))
    intrin = tensor_intrin.get(wgmma_rs_intrin(dtype, n, k))
    want_bits = c.copy()
    _module(intrin.desc, "sequential")(a_regs, b_dense, want_bits)
    assert np.array_equal(want_bits, got)


def _blocked(tile: np.ndarray) -> np.ndarray:
    """A K-major ``[rows, k]`` tile as ``[k / 64, rows, 64]`` blocks, each stored by PTX's
    128-byte swizzle (rows of 128 bytes from a 1024-byte aligned address)."""
    rows, k = tile.shape
    out = np.zeros(k * rows, tile.dtype)
    for r in range(rows):
        for c in range(k):
            out[(c // 64 * rows * 128 + ptx_sw128_byte(r * 128 + c % 64 * 2)) // 2] = tile[r, c]
    return out.reshape(k // 64, rows, 64)


@settings(max_examples=6, deadline=None)
@given(data=st.data(), n=st.sampled_from([16, 64, 128]), k=st.sampled_from([128, 192, 256]),
       dtype=st.sampled_from(["float16", "bfloat16"]), order=st.sampled_from(["sequential", "random"]))  # fmt: skip
def test_k_major_blocks_past_64_columns_are_ptx_and_the_description(data: st.DataObject, n: int, k: int,
                                                                   dtype: str, order: str) -> None:  # fmt: skip
    from loopir.tensor_intrin.cuda import wgmma_intrin

    nonzero = st.one_of(st.floats(-4, -0.0625, width=32), st.floats(0.0625, 4, width=32))
    vals = functools.partial(hnp.arrays, np.float32, elements=nonzero)
    a = to_storage(data.draw(vals((16, k))), dtype)
    b = to_storage(data.draw(vals((n, k))), dtype)
    c = data.draw(vals((n // 16, 32, 8)))
    ab = Buffer("A", (k // 64, 16, 64), dtype, scope="shared")
    bb = Buffer("B", (k // 64, n, 64), dtype, scope="shared")
    cb = Buffer("C", (n // 16, 32, 8), "float32", scope="warp")
    lane, zero = Var("tx"), IntImm(0, "int32")
    call = op.ptx_wgmma(ab[zero, zero, zero], bb[zero, zero, zero], cb[zero, lane, zero], n, k)
    func = PrimFunc((ab, bb, cb), For(lane, 0, 32, ForKind.THREAD_BINDING, Evaluate(call), thread_tag="threadIdx.x"))
    got = c.copy()
    _module(func, order)(_blocked(a), _blocked(b), got)
    full = from_storage(a, dtype).astype(np.float64) @ from_storage(b, dtype).astype(np.float64).T
    for ln in range(32):
        for reg in range(n // 2):
            r, col = ptx_wgmma_d(ln, reg)
            want = c[reg // 8, ln, reg % 8] + full[r, col]
            assert abs(got[reg // 8, ln, reg % 8] - want) <= 1e-4 * (1 + abs(want))
    want_bits = c.copy()
    _module(tensor_intrin.get(wgmma_intrin(dtype, n, k)).desc, "sequential")(a, b, want_bits)
    assert np.array_equal(want_bits, got)
    blocks = {t.buffer.name: tuple(m for _, m in t.iters) for t in touches(call) if not t.is_store}
    assert blocks["A"] == (k // 64, 16, 64) and blocks["B"] == (k // 64, n, 64)


def test_names_and_intrinsics_verify() -> None:
    assert wgmma_rs_intrin("float16", 128, 64) in WGMMA_INTRIN_NAMES
    for name in (wgmma_rs_intrin("bfloat16", 256, 256), wgmma_rs_intrin("float16", 64, 16)):
        intrin = tensor_intrin.get(name)
        loopir.verify(intrin.desc)
        loopir.verify(intrin.impl)


def test_touches_are_all_lanes_of_a_and_the_rows_of_each_block_of_b() -> None:
    func = _call_func(128, 48, "float16")
    call = func.body.body.value  # type: ignore[attr-defined]
    found = {(t.buffer.name, t.is_store): tuple(n for _, n in t.iters) for t in touches(call)}
    assert found[("A", False)] == (3, 32, 8)  # k / 16 tiles of every lane of the warp
    assert found[("B", False)] == (2, 48, 64)  # n / 64 blocks x k rows x 64 columns
    assert found[("C", False)] == found[("C", True)] == (8, 8)  # the lane's own accumulators


tx = Var("tx")
S = Buffer("S", (64, 64), "float16", scope="shared")
A = Buffer("A", (4, 32, 8), "float16", scope="warp")
AB = Buffer("AB", (4, 32, 8), "bfloat16", scope="warp")
C = Buffer("C", (8, 32, 8), "float32", scope="warp")


@pytest.mark.parametrize("build, match", [
    (lambda: op.ptx_wgmma(A[0, tx, 0], S[0, 0], C[0, tx, 0], 96, 64, trans_b=True),
     r"m64nNkK.trans_b with N a multiple of 64"),
    (lambda: op.ptx_wgmma(A[0, tx, 0], S[0, 0], C[0, tx, 0], 128, 272, trans_b=True), "K a multiple of 16 up to 256"),
    (lambda: op.ptx_wgmma(S[0, 0], S[0, 0], C[0, tx, 0], 128, 80, trans_b=True),
     "K = 80 is not whole 64-column blocks of a K-major operand"),
    (lambda: op.ptx_wgmma(A[0, tx, 0], S[0, 0], C[0, tx, 0], 128, 96), "K 16, 32, 48 or 64"),
    (lambda: op.ptx_wgmma(AB[0, tx, 0], S[0, 0], C[0, tx, 0], 64, 64, trans_b=True), "both alike"),
    (lambda: op.ptx_wgmma(A[0, tx, 0], A[0, tx, 0], C[0, tx, 0], 64, 64, trans_b=True),
     "ptx_wgmma b must be a load of a shared buffer"),
])  # fmt: skip
def test_builder_refuses_malformed_calls(build, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        build()
