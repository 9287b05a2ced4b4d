"""The CPU executor's meaning of the tensor-core calls.

* Property: every registered intrinsic's implementation (the calls) and its description (a
  sequential loop nest) give bit-identical results on random inputs, in sequential and random
  thread order.
* The warp-collective semantics against numpy through the PTX layouts written out in
  ``test_layouts`` (an oracle independent of ``loopir.tensor_intrin.layouts``).
* Whole GEMMs through the implementations, equal to an exact numpy emulation of the
  description's arithmetic (and close to float64).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import loopir
from loopir import tensor_intrin
from loopir.errors import LaunchError
from loopir.ir import dtype as dt
from loopir.ir.stmt import PrimFunc
from loopir.passes import ThreadSync
from loopir.tensor_intrin.cuda import INTRIN_NAMES, WGMMA_INTRIN_NAMES

from .kernels import Gemm, from_storage, gemm_one_nest, tile_16x8, to_storage
from .test_layouts import ptx_a, ptx_b, ptx_c


@functools.cache
def _module(func: PrimFunc, order: str) -> loopir.runtime.CPUModule:
    return loopir.build(func, target="cpu", thread_order=order)


def _values(shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    # small magnitudes: float16 accumulators stay finite
    return hnp.arrays(np.float32, shape, elements=st.floats(-4, 4, width=32))


@st.composite
def _params(draw: st.DrawFn, func: PrimFunc) -> list[np.ndarray]:
    out = []
    for b in func.params:
        shape = tuple(int(x) for x in b.shape)
        out.append(to_storage(draw(_values(shape)), b.dtype))
    return out


def _run(func: PrimFunc, arrays: list[np.ndarray], order: str = "sequential", seed: int = 0) -> list[np.ndarray]:
    mod = _module(func, order)
    if order == "random":
        mod.seed = seed
    copies = [a.copy() for a in arrays]
    mod(*copies)
    return copies


# wgmma's implementation reads its tiles swizzled: tests/tensor_intrin/test_wgmma.py
@pytest.mark.parametrize("name", [n for n in INTRIN_NAMES if n not in WGMMA_INTRIN_NAMES])
@given(data=st.data())
def test_impl_is_bit_identical_to_desc(name: str, data: st.DataObject) -> None:
    intrin = tensor_intrin.get(name)
    arrays = data.draw(_params(intrin.desc))
    order = data.draw(st.sampled_from(["sequential", "random"]))
    seed = data.draw(st.integers(0, 2**32 - 1))
    want = _run(intrin.desc, arrays)
    got = _run(intrin.impl, arrays, order, seed)
    for b, w, g in zip(intrin.desc.params, want, got):
        assert np.array_equal(w, g, equal_nan=True), (name, b.name, order, seed)


def _logical(frag: np.ndarray, oracle, rows: int, cols: int, locals_: int) -> np.ndarray:
    """A fragment ``[32, locals_]`` as its ``rows x cols`` tile, by the PTX oracle."""
    out = np.full((rows, cols), np.nan)
    for lane in range(32):
        for v in range(locals_):
            out[oracle(lane, v)] = frag[lane, v]
    return out


@given(a=_values((16, 16)), b=_values((16, 8)), order=st.sampled_from(["sequential", "random"]),
       dtype=st.sampled_from(["float16", "bfloat16"]))  # fmt: skip
def test_one_tile_against_numpy_through_ptx_layouts(a, b, order, dtype) -> None:
    func = tile_16x8(dtype=dtype)
    a_s, b_s = to_storage(a, dtype), to_storage(b, dtype)
    c = np.full((16, 8), np.nan, np.float32)
    [_, _, c] = _run(func, [a_s, b_s, c], order)
    want = from_storage(a_s, dtype) @ from_storage(b_s, dtype)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    # the same numbers as the exact emulation of the description's sequence of f32 operations
    assert np.array_equal(c, _emulate(a_s, b_s, dtype, "float32"))


def test_ldmatrix_and_mma_fragments_follow_ptx() -> None:
    """ldmatrix.x4 of A, ldmatrix.x2.trans of B: the fragments are PTX's, read back by the
    oracle; the mma of those fragments is A @ B."""
    from loopir.ir import op
    from loopir.ir.buffer import Buffer
    from loopir.ir.expr import Var
    from loopir.ir.stmt import Evaluate, For, ForKind, seq

    rng = np.random.default_rng(7)
    A, B = Buffer("A", (16, 16), "float16", scope="shared"), Buffer("B", (16, 8), "float16", scope="shared")
    Aw = Buffer("Aw", (32, 8), "float16", scope="warp")
    Bw = Buffer("Bw", (32, 4), "float16", scope="warp")
    Cw = Buffer("Cw", (32, 4), "float32", scope="warp")
    tx = Var("tx")
    body = For(tx, 0, 32, ForKind.THREAD_BINDING, seq(
        Evaluate(op.ptx_ldmatrix(Aw[tx, 0], A[tx % 16, 8 * (tx // 16)])),
        Evaluate(op.ptx_ldmatrix(Bw[tx, 0], B[tx % 16, 0], num=2, trans=True)),
        Evaluate(op.ptx_mma(Aw[tx, 0], Bw[tx, 0], Cw[tx, 0])),
    ), thread_tag="threadIdx.x")  # fmt: skip
    func = PrimFunc((A, B, Aw, Bw, Cw), body)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    c = rng.standard_normal((32, 4)).astype(np.float32)
    aw, bw = np.zeros((32, 8), np.float16), np.zeros((32, 4), np.float16)
    c0 = c.copy()
    loopir.build(func, target="cpu")(a, b, aw, bw, c)
    assert np.array_equal(_logical(aw, ptx_a, 16, 16, 8), a)
    assert np.array_equal(_logical(bw, ptx_b, 16, 8, 4), b)
    want = _logical(c0, ptx_c, 16, 8, 4) + a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(_logical(c, ptx_c, 16, 8, 4), want, rtol=1e-5, atol=1e-5)


def _emulate(a: np.ndarray, b: np.ndarray, dtype: str, acc: str, b_trans: bool = False,
             a_trans: bool = False) -> np.ndarray:  # fmt: skip
    """``A @ B`` as the description computes it: from 0, for k in order, ``c + cast(a) * cast(b)``
    with every operation rounded to ``acc`` (numpy does float32 / float16 elementwise in those
    types; float16 through float32 and back, as the executor's C does)."""
    af = from_storage(a, dtype).astype(np.float32)
    bf = from_storage(b, dtype).astype(np.float32)
    if a_trans:
        af = af.T
    if b_trans:
        bf = bf.T
    out = np.zeros((af.shape[0], bf.shape[1]), dt.to_numpy(acc))
    for k in range(af.shape[1]):
        if acc == "float32":
            out = out + af[:, k : k + 1] * bf[k : k + 1, :]
        else:
            prod = (af[:, k : k + 1].astype(np.float16) * bf[k : k + 1, :].astype(np.float16))
            out = (out.astype(np.float32) + prod.astype(np.float32)).astype(np.float16)
    return out


GEMMS = [
    Gemm(),
    Gemm(M=64, N=32, K=48, warps_m=2, warps_n=1),
    Gemm(dtype="bfloat16", b_trans=True),
    Gemm(a_trans=True, warps_m=2, warps_n=1, M=64),
    Gemm(dtype="bfloat16", a_trans=True, b_trans=True),
    Gemm(acc="float16", store="shared"),
    Gemm(dtype="bfloat16", warps_m=2, warps_n=2, M=32, N=64, K=16, store="shared"),
]


@pytest.mark.parametrize("gemm", GEMMS, ids=str)
@pytest.mark.parametrize("order", ["sequential", "random"])
def test_gemm_through_the_implementations(gemm: Gemm, order: str) -> None:
    func = ThreadSync()(gemm.func())
    rng = np.random.default_rng(1)
    mod = loopir.build(func, target="cpu", thread_order=order)
    for seed in (0, 1):
        a, b, c = gemm.inputs(rng)
        mod.seed = seed
        mod(a, b, c)
        assert np.array_equal(c, _emulate(a, b, gemm.dtype, gemm.acc, gemm.b_trans, gemm.a_trans))
        tol = 5e-2 if gemm.acc == "float16" else 1e-5
        np.testing.assert_allclose(from_storage(c, gemm.acc), gemm.reference(a, b), rtol=tol, atol=tol)


def test_missing_barrier_shows_in_random_order() -> None:
    """Without ThreadSync's barriers, a random thread order reads shared tiles too early."""
    gemm = Gemm()
    mod = loopir.build(gemm.func(), target="cpu", thread_order="random")
    rng = np.random.default_rng(2)
    a, b, c = gemm.inputs(rng)
    wrong = 0
    for seed in range(4):
        mod.seed = seed
        mod(a, b, c)
        wrong += not np.array_equal(c, _emulate(a, b, gemm.dtype, gemm.acc))
    assert wrong


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_one_nest_gemm_reference_needs_threadsync(dtype: str) -> None:
    """The CPU reference of the GPU test of ``gemm_one_nest`` (its size and inputs).

    The kernel is written without barriers: its warps copy their shares of the shared tiles and
    ``ldmatrix`` reads all of them (``loopir.lower``'s ThreadSync inserts the barriers, and a
    CUDA build lowers). The executor runs the ``threadIdx`` nest, which holds warp-collective
    calls, as a thread region whose warps interleave at those calls, so as written warp 0 loads
    ``A_shared`` before warps 1-3 stored their rows: C keeps NaN rows even in sequential order
    (on the H200, the GPU result was compared to that and failed). With ThreadSync's barriers
    the result is the description's arithmetic exactly, in either order."""
    func = gemm_one_nest(M=128, N=64, K=64, dtype=dtype)
    rng = np.random.default_rng(8)
    a = to_storage(rng.standard_normal((128, 64)), dtype)
    b = to_storage(rng.standard_normal((64, 64)), dtype)
    racy = np.full((128, 64), np.nan, np.float32)
    loopir.build(func, target="cpu")(a, b, racy)
    assert np.isnan(racy).any()
    synced = ThreadSync()(func)
    for order in ("sequential", "random"):
        for seed in (0, 1):
            c = np.full((128, 64), np.nan, np.float32)
            mod = loopir.build(synced, target="cpu", thread_order=order)
            mod.seed = seed
            mod(a, b, c)
            assert np.array_equal(c, _emulate(a, b, dtype, "float32"))


def _two_warps_one_fragment() -> PrimFunc:
    """Two warps (threadIdx.y), each ``C[16 ty : 16 ty + 16, :] = A[16 ty : ..., :] @ B``, with
    the fragments allocated at the root and not indexed by the warp: a ``warp`` buffer is one
    per warp (on a GPU, registers), whatever the loops around its allocation."""
    from loopir.ir import op
    from loopir.ir.buffer import Buffer
    from loopir.ir.expr import Var
    from loopir.ir.stmt import Allocate, BufferStore, Evaluate, seq

    from .kernels import bind, serial

    A, B, C = Buffer("A", (32, 16), "float16"), Buffer("B", (16, 8), "float16"), Buffer("C", (32, 8), "float32")
    As = Buffer("A_shared", (32, 16), "float16", scope="shared")
    Bs = Buffer("B_shared", (16, 8), "float16", scope="shared")
    Aw = Buffer("A_warp", (32, 8), "float16", scope="warp")
    Bw = Buffer("B_warp", (32, 4), "float16", scope="warp")
    Cw = Buffer("C_warp", (32, 4), "float32", scope="warp")
    bx, ty, tx, i, j = (Var(n) for n in ("bx", "ty", "tx", "i", "j"))
    fa, fb = i * 32 + tx, j * 32 + tx
    body = seq(
        serial(i, 8, BufferStore(As, A[16 * ty + fa // 16, fa % 16], (16 * ty + fa // 16, fa % 16))),
        serial(j, 4, BufferStore(Bs, B[fb // 8, fb % 8], (fb // 8, fb % 8))),
        Evaluate(op.storage_sync("shared")),
        Evaluate(op.mma_fill(Cw[tx, 0], 4, 0.0)),
        Evaluate(op.ptx_ldmatrix(Aw[tx, 0], As[16 * ty + tx % 16, 8 * (tx // 16)])),
        Evaluate(op.ptx_ldmatrix(Bw[tx, 0], Bs[tx % 16, 0], num=2, trans=True)),
        Evaluate(op.ptx_mma(Aw[tx, 0], Bw[tx, 0], Cw[tx, 0])),
        Evaluate(op.mma_store(C[16 * ty, 0], Cw[tx, 0], 16, 8)),
    )  # fmt: skip
    grid = bind(bx, 1, "blockIdx.x", bind(ty, 2, "threadIdx.y", bind(tx, 32, "threadIdx.x", body)))
    return PrimFunc((A, B, C), Allocate(As, Allocate(Bs, Allocate(Aw, Allocate(Bw, Allocate(Cw, grid))))))


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_a_root_allocated_fragment_is_one_per_warp(order: str) -> None:
    """Warps meet only at their own collective calls, so in a region warp 1's ldmatrix came
    between warp 0's ldmatrix and mma: with one instance of the root-allocated ``A_warp`` for
    both, warp 0 multiplied warp 1's rows (lowering, which moves the allocation into the
    nest, hid it)."""
    func = _two_warps_one_fragment()
    rng = np.random.default_rng(4)
    a = rng.standard_normal((32, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    for g in (func, loopir.lower(func)):
        c = np.full((32, 8), np.nan, np.float32)
        loopir.build(g, target="cpu", thread_order=order)(a, b, c)
        assert np.array_equal(c, _emulate(a, b, "float16", "float32"))


@pytest.mark.parametrize("x_steps,b_x1", [(1, False), (2, True), (3, False)])
def test_tile_16x8_with_x1_and_x2_loads(x_steps: int, b_x1: bool) -> None:
    func = tile_16x8(x_steps, b_x1)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 16 * x_steps)).astype(np.float16)
    b = rng.standard_normal((16 * x_steps, 8)).astype(np.float16)
    for order in ("sequential", "random"):
        c = np.full((16, 8), np.nan, np.float32)
        loopir.build(func, target="cpu", thread_order=order)(a, b, c)
        assert np.array_equal(c, _emulate(a, b, "float16", "float32"))


def test_collective_reached_by_half_a_warp_is_an_error() -> None:
    from loopir.ir import op
    from loopir.ir.buffer import Buffer
    from loopir.ir.expr import Var
    from loopir.ir.stmt import Evaluate, For, ForKind

    A = Buffer("A", (16, 16), "float16", scope="shared")
    W = Buffer("W", (32, 8), "float16", scope="warp")
    tx = Var("tx")
    call = Evaluate(op.ptx_ldmatrix(W[tx, 0], A[tx % 16, 8 * (tx // 16)]))
    body = For(tx, 0, 16, ForKind.THREAD_BINDING, call, thread_tag="threadIdx.x")
    func = PrimFunc((A, W), body)
    a, w = np.zeros((16, 16), np.float16), np.zeros((32, 8), np.float16)
    with pytest.raises(LaunchError, match="not a multiple of 32"):
        loopir.build(func, target="cpu")(a, w)
    ty = Var("ty")
    func2 = PrimFunc((A, W), For(ty, 0, 2, ForKind.THREAD_BINDING,
                                 For(tx, 0, 32, ForKind.THREAD_BINDING,
                                     loopir.ir.IfThenElse(tx < 16, call), thread_tag="threadIdx.x"),
                                 thread_tag="threadIdx.y"))  # fmt: skip
    with pytest.raises(LaunchError, match="only 16 of the 32 lanes of warp 0"):
        loopir.build(func2, target="cpu")(a, w)
