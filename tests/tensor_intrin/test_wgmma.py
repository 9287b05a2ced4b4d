"""``ptx_wgmma`` (sm_90a) and the ``wgmma_*`` intrinsics: their meaning on the CPU executor
against oracles written out here from the PTX ISA, independently of ``loopir.tensor_intrin``.

* The 128-byte swizzle is PTX's address-bit XOR (bits [4:6] ^ [7:9] of a 1024-byte aligned
  byte address), equals the ``transform_layout`` map the schedule stores tiles with, and is its
  own inverse.
* The accumulator: wgmma's ``d`` registers per lane (PTX "Register Fragments: Matrix D" of
  ``m64nNk16``) for a warp's 16 rows.
* Property: every intrinsic's implementation, run on tiles stored swizzled, is bit-identical to
  its description run on the same tiles unswizzled, in sequential and random thread order.
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
from loopir.ir.expr import Var
from loopir.ir.stmt import PrimFunc
from loopir.schedule.tensor_core_gemm import ldmatrix_swizzle
from loopir.tensor_intrin.cuda import INTRIN_NAMES, WGMMA_INTRIN_NAMES, wgmma_intrin
from loopir.tensor_intrin.layouts import MMA_C, sw128

from .kernels import from_storage, to_storage


def ptx_sw128_byte(addr: int) -> int:
    """PTX ``SWIZZLE_128B``: the 16-byte chunk (bits 4-6) XOR the 128-byte row in its
    1024-byte atom (bits 7-9)."""
    return addr ^ (((addr >> 7) & 7) << 4)


def ptx_wgmma_d(lane: int, reg: int) -> tuple[int, int]:
    """PTX ISA, wgmma m64nNk16 f32 accumulator, a warp's rows: register ``reg`` of ``lane``."""
    group, tig = lane >> 2, lane % 4
    return group + 8 * (reg % 4 // 2), 8 * (reg // 4) + tig * 2 + (reg & 1)


def test_sw128_is_the_ptx_address_swizzle_and_the_schedule_map() -> None:
    sched = eval(ldmatrix_swizzle(64))  # noqa: S307 - the schedule's own lambda text
    for row in range(24):
        for col in range(128):
            byte = (row * 64 + col % 64) * 2
            swz = ptx_sw128_byte(byte) // 2
            assert (row, col // 64 * 64 + swz % 64) == (row, sw128(row, col)) == sched(row, col)
            assert sw128(row, sw128(row, col)) == col


def test_accumulator_is_wgmma_d() -> None:
    """wgmma's d registers of a warp are the 16 x 16 C tiles one after the other (MMA_C)."""
    for lane in range(32):
        for reg in range(64):
            r, c = MMA_C.to_row_col(lane, reg % 8)
            assert (r, c + 16 * (reg // 8)) == ptx_wgmma_d(lane, reg)


def test_names_registered() -> None:
    assert set(WGMMA_INTRIN_NAMES) <= set(INTRIN_NAMES)
    # dtypes x (N x K (16, 64, 128, 192, 256) + the register-A, MN-major B forms' N (64 .. 256) x
    # K (16 .. 256))
    assert len(WGMMA_INTRIN_NAMES) == 2 * (16 * 5 + 4 * 16)
    assert wgmma_intrin("bfloat16", 256) in tensor_intrin.names()
    intrin = tensor_intrin.get(wgmma_intrin("float16", 48))
    loopir.verify(intrin.desc)
    loopir.verify(intrin.impl)


def _swizzled(tile: np.ndarray) -> np.ndarray:
    """A [rows, 64] tile stored as the 128-byte swizzle puts it (row by row)."""
    out = np.empty_like(tile)
    for r in range(tile.shape[0]):
        for c in range(tile.shape[1]):
            out[r, sw128(r, c)] = tile[r, c]
    return out


@functools.cache
def _module(func: PrimFunc, order: str) -> loopir.runtime.CPUModule:
    return loopir.build(func, target="cpu", thread_order=order)


@settings(max_examples=12, deadline=None)
@given(data=st.data(), n=st.sampled_from([16, 48, 128, 256]), k=st.sampled_from([16, 64]),
       dtype=st.sampled_from(["float16", "bfloat16"]), order=st.sampled_from(["sequential", "random"]))  # fmt: skip
def test_impl_on_swizzled_tiles_is_bit_identical_to_desc(data: st.DataObject, n: int, k: int, dtype: str,
                                                         order: str) -> None:  # fmt: skip
    intrin = tensor_intrin.get(wgmma_intrin(dtype, n, k))
    vals = functools.partial(hnp.arrays, np.float32, elements=st.floats(-4, 4, width=32))
    a = to_storage(data.draw(vals((16, 64))), dtype)
    b = to_storage(data.draw(vals((n, 64))), dtype)
    c = data.draw(vals((n // 16, 32, 8)))
    want = c.copy()
    _module(intrin.desc, "sequential")(a, b, want)
    got = c.copy()
    _module(intrin.impl, order)(_swizzled(a), _swizzled(b), got)
    assert np.array_equal(want, got)
    # and against numpy through PTX's own accumulator layout
    am, bm = from_storage(a, dtype)[:, :k], from_storage(b, dtype)[:, :k]
    full = am @ bm.T
    for lane in range(32):
        for reg in range(n // 2):
            r, col = ptx_wgmma_d(lane, reg)
            assert abs(got[reg // 8, lane, reg % 8] - c[reg // 8, lane, reg % 8] - full[r, col]) < 1e-3


tx = Var("tx")
S = Buffer("S", (64, 64), "float16", scope="shared")
SB = Buffer("SB", (64, 64), "bfloat16", scope="shared")
S48 = Buffer("S48", (64, 48), "float16", scope="shared")
G = Buffer("G", (64, 64), "float16")
C = Buffer("C", (4, 32, 8), "float32", scope="warp")
C16 = Buffer("C16", (4, 32, 8), "float16", scope="warp")


@pytest.mark.parametrize("build, match", [
    (lambda: op.ptx_wgmma(S[0, 0], S[0, 0], C[0, tx, 0], 24), "N a multiple of 16 up to 256"),
    (lambda: op.ptx_wgmma(S[0, 0], S[0, 0], C[0, tx, 0], 64, 80), "K 16, 32, 48 or 64"),
    (lambda: op.ptx_wgmma(S[0, 0], S[0, 0], C[0, tx, 0], 272), "N a multiple of 16 up to 256"),
    (lambda: op.ptx_wgmma(G[0, 0], S[0, 0], C[0, tx, 0], 64), "ptx_wgmma a must be a load of a shared buffer"),
    (lambda: op.ptx_wgmma(S48[0, 0], S[0, 0], C[0, tx, 0], 64), "rows of a multiple of 64"),
    (lambda: op.ptx_wgmma(S[0, 0], SB[0, 0], C[0, tx, 0], 64), "both alike"),
    (lambda: op.ptx_wgmma(S[0, 0], S[0, 0], C16[0, tx, 0], 64), "accumulator float32"),
    (lambda: op.ptx_wgmma(S[0, 0], S[0, 0], S[0, 0], 64), "ptx_wgmma c must be a load of a warp"),
])  # fmt: skip
def test_builder_refuses_malformed_calls(build, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        build()


# --- the asynchronous form ----------------------------------------------------------------------


def test_async_issue_means_the_synchronous_one_and_the_wait_nothing() -> None:
    """``ptx_wgmma_async`` followed by ``ptx_wgmma_wait(0)`` computes on the CPU executor what
    ``ptx_wgmma`` does (the MMA happens at the issue in the sequential meaning); the wait reads
    the retired tiles (``touches``) and writes nothing."""
    from loopir.ir.stmt import Evaluate, For, ForKind, seq
    from loopir.tensor_intrin.calls import touches

    rng = np.random.default_rng(0)
    a = to_storage(rng.standard_normal((128, 64)), "float16")
    outs = []
    for asynchronous in (False, True):
        Cl = Buffer("C", (4, 32, 8), "float32", scope="warp")
        Sl = Buffer("S", (128, 64), "float16", scope="shared")
        lane = Var("tx")
        issue = (op.ptx_wgmma_async if asynchronous else op.ptx_wgmma)(Sl[0, 0], Sl[64, 0], Cl[0, lane, 0], 64, 64)
        body = seq(Evaluate(issue), *([Evaluate(op.ptx_wgmma_wait(0, issue))] if asynchronous else []))
        func = PrimFunc((Sl, Cl), For(lane, 0, 32, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x"))
        c = np.zeros((4, 32, 8), np.float32)
        loopir.build(func, target="cpu")(a.copy(), c)
        outs.append(c)
        if asynchronous:
            wait = op.ptx_wgmma_wait(0, issue)
            assert [(t.buffer.name, t.is_store) for t in touches(wait)] == [("S", False), ("S", False)]
            assert [t.iters[0][1] for t in touches(wait)] == [16, 64]  # A's 16 rows, B's 64
    assert np.array_equal(outs[0], outs[1]) and np.abs(outs[0]).max() > 0


@pytest.mark.parametrize("build, match", [
    (lambda: op.ptx_wgmma_wait(-1), "pending must be a non-negative int32 constant"),
    (lambda: op.ptx_wgmma_wait(1, S[0, 0]), "retired must be ptx_wgmma_async calls"),
    (lambda: op.ptx_wgmma_async(G[0, 0], S[0, 0], C[0, tx, 0], 64), "ptx_wgmma a must be a load of a shared buffer"),
])  # fmt: skip
def test_async_builders_refuse_malformed_calls(build, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        build()
