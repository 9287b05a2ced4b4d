"""TMA copies and mbarriers as IR calls (issue 32): builders and their refusals, the verifier,
printing and parsing back, structural equality, and the exact sequential meaning the CPU
executor gives ``tma_load`` (the box, zeros out of bounds, the swizzled placement)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.examples.tma import tma_copy
from loopir.ir import op
from loopir.ir import tma as T
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Call, IntImm, Var
from loopir.ir.stmt import Allocate, BufferStore, Evaluate, For, ForKind, IfThenElse, PrimFunc, seq
from loopir.script import from_source
from loopir.tensor_intrin.layouts import sw128
from loopir.tensor_intrin.tma import tma_touches

A = Buffer("A", (100, 72), "float16")
S = Buffer("S", (2, 16, 64), "float16", scope="shared")
BAR = Buffer("bar", (2,), "uint64", scope="shared")


def test_the_calls_print_parse_back_and_compare_structurally() -> None:
    f = tma_copy(100, 72, (16, 64), swizzle=128)
    text = f.script()
    assert "T.ptx_tma_load(A_s[0, 0], A[by * 16, bx * 64], bar[0], 128, 16, 64)" in text
    assert "T.ptx_mbarrier_wait(bar[0], 0)" in text
    loopir.assert_structural_equal(from_source(text), f)
    assert loopir.structural_equal(tma_copy(100, 72, (16, 64)), f)
    assert not loopir.structural_equal(tma_copy(100, 72, (16, 64), swizzle=0), f)  # the swizzle is part of it
    loopir.verify(f)


@pytest.mark.parametrize(("build", "match"), [
    (lambda: T.tma_load(S[1, 0, 0], A[0, 0], BAR[0], (16, 64), 64),
     r"swizzle must be one of .* got swizzle 64 with 128 bytes"),
    (lambda: T.tma_load(S[1, 0, 0], A[0, 0], BAR[0], (16, 32)),
     r"shared buffer S must be compact with its last 2 dimensions equal to the box \(16, 32\)"),
    (lambda: T.tma_load(S[1, 0, 1], A[0, 0], BAR[0], (16, 64)), r"dst must be the tile's first element"),
    (lambda: T.tma_load(Buffer("S4", (4, 4), "float16", scope="shared")[0, 0], A[0, 0], BAR[0], (4, 4)),
     r"the box's inner dimension is 8 bytes \(4 x float16\) of global buffer A; TMA needs a multiple of 16"),
    (lambda: T.tma_load(S[0, 0, 0], S[1, 0, 0], BAR[0], (16, 64)), r"src must be a load of a global buffer of rank 2"),
    (lambda: T.tma_load(S[0, 0, 0], Buffer("F", (8, 8), "float32")[0, 0], BAR[0], (16, 64)),
     r"src and dst must have one dtype"),
    (lambda: T.tma_load(S[0, 0, 0], A[0, 0], A[0, 0], (16, 64)), r"the barrier must be a scalar load of a shared uint64"),
    (lambda: T.tma_load(S[0, 0, 0], A[0, 0], BAR[0], (16, 300)), r"1 to 256 elements"),
    (lambda: T.mbarrier_init(Buffer("b", (1,), "int32", scope="shared")[0], 1), r"ptx_mbarrier_init: the barrier"),
    (lambda: T.mbarrier_wait(BAR[0], 0.5), r"ptx_mbarrier_wait: the phase must be a scalar integer"),
    (lambda: T.mbarrier_wait(BAR[0], 2), r"ptx_mbarrier_wait: the phase must be 0 to 1, got 2"),
    (lambda: T.mbarrier_init(BAR[0], 0), r"ptx_mbarrier_init: the count must be 1 to 1048575, got 0"),
    (lambda: T.mbarrier_arrive_expect_tx(BAR[0], 1 << 20), r"the bytes must be 0 to 1048575, got 1048576"),
])  # fmt: skip
def test_builders_refuse_malformed_calls(build, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        build()


def test_the_verifier_refuses_a_malformed_call_built_directly() -> None:
    bad = Call("int32", "ptx_tma_load", (S[0, 0, 0], A[0, 0], BAR[0], IntImm(0, "int32"), IntImm(16, "int32"), IntImm(4, "int32")))
    f = PrimFunc((A,), Allocate(S, Allocate(BAR, Evaluate(bad))), name="bad")
    with pytest.raises(loopir.IRValidationError, match=r"tma-call|ptx_tma_load"):
        loopir.verify(f)


def test_touches_are_the_box_reads_the_tile_write_and_the_barrier() -> None:
    read, write, bar = tma_touches(T.tma_load(S[1, 0, 0], A[3, 5], BAR[1], (16, 64), 128))
    assert (read.buffer, read.is_store, [n for _, n in read.iters]) == (A, False, [16, 64])
    assert read.cond is not None  # only the in-bounds elements are read
    assert (write.buffer, write.is_store, write.indices[0].value) == (S, True, 1)  # type: ignore[attr-defined]
    assert (bar.buffer, bar.is_store) == (BAR, False)
    assert tma_touches(T.mbarrier_init(BAR[0], 1))[0].is_store
    assert not tma_touches(T.mbarrier_arrive_expect_tx(BAR[0], 64))[0].is_store


def test_swizzle_128_is_sw128_and_the_address_rule() -> None:
    for e in range(0, 4096, 7):
        r, c = divmod(e, 64)
        assert T.tma_swizzle(e, 2, 128) == r * 64 + sw128(r, c)
        o = e * 4  # 32-bit elements, 64-byte swizzle: address bits [4:5] ^= bits [7:8]
        assert T.tma_swizzle(e, 4, 64) * 4 == o ^ (((o >> 7) & 3) << 4)


def _raw_tile(shape: tuple[int, int], box: tuple[int, int], origin: tuple[int, int], dtype: str,
              swizzle: int) -> PrimFunc:  # fmt: skip
    """One block: tma_load of the box at ``origin`` into a tile, the tile stored as it lies
    (no unswizzling) into ``R``."""
    G = Buffer("G", shape, dtype)
    R = Buffer("R", box, dtype)
    tile = Buffer("tile", box, dtype, scope="shared")
    bar = Buffer("bar", (1,), "uint64", scope="shared")
    tx, i, j = Var("tx"), Var("i"), Var("j")
    load = T.tma_load(tile[0, 0], G[origin[0], origin[1]], bar[0], box, swizzle)
    copy = For(i, 0, box[0], ForKind.SERIAL, For(j, 0, box[1], ForKind.SERIAL, BufferStore(R, tile[i, j], (i, j))))
    body = seq(IfThenElse(tx == 0, seq(Evaluate(T.mbarrier_init(bar[0], 1)), Evaluate(load),
                                       Evaluate(T.mbarrier_wait(bar[0], 0)), copy)))  # fmt: skip
    k = For(tx, 0, 32, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
    return PrimFunc((G, R), Allocate(tile, Allocate(bar, k)), name="raw_tile")


def _expected_raw(g: np.ndarray, box: tuple[int, int], origin: tuple[int, int], swizzle: int) -> np.ndarray:
    """The tile as TMA leaves it, from the PTX rule on byte addresses (not loopir's maps)."""
    padded = np.zeros(box, g.dtype)
    for r in range(box[0]):
        for c in range(box[1]):
            y, x = origin[0] + r, origin[1] + c
            if 0 <= y < g.shape[0] and 0 <= x < g.shape[1]:
                padded[r, c] = g[y, x]
    flat, out = padded.reshape(-1), np.zeros(padded.size, g.dtype)
    for e in range(flat.size):
        o = e * g.itemsize
        if swizzle:
            o ^= ((o >> 7) & (swizzle // 16 - 1)) << 4
        out[o // g.itemsize] = flat[e]
    return out.reshape(box)


@settings(max_examples=12, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(["float16", "float32"]), swizzle=st.sampled_from([0, 32, 64, 128]))
def test_the_executor_places_the_box_as_tma_does(data: st.DataObject, dtype: str, swizzle: int) -> None:
    esize = 2 if dtype == "float16" else 4
    inner = swizzle // esize if swizzle else data.draw(st.sampled_from([16 // esize, 32 // esize, 64 // esize]))
    box = (data.draw(st.integers(1, 12)), inner)
    shape = (data.draw(st.integers(1, 30)), data.draw(st.integers(1, 40)))
    origin = (data.draw(st.integers(-box[0], shape[0])), data.draw(st.integers(-inner, shape[1])))
    g = (np.arange(np.prod(shape)).reshape(shape) % 251 + 1).astype(dtype)
    r = np.full(box, -1, dtype)
    loopir.build(_raw_tile(shape, box, origin, dtype, swizzle), target="cpu")(g, r)
    np.testing.assert_array_equal(r, _expected_raw(g, box, origin, swizzle))


@settings(max_examples=10, deadline=None)
@given(tiles=st.integers(1, 3), M=st.integers(1, 150), N=st.sampled_from([8, 16, 24, 64, 72, 136]),
       case=st.sampled_from([((16, 64), "float16", 128), ((32, 32), "float16", 64), ((8, 16), "float32", 64),
                             ((64, 16), "float16", 32), ((16, 32), "float32", 0), ((4, 8), "float16", 0)]))  # fmt: skip
def test_tma_copy_on_the_executor_equals_numpy(tiles: int, M: int, N: int, case: tuple[tuple[int, int], str, int]) -> None:
    block, dtype, swizzle = case
    a = np.random.default_rng(M * N).standard_normal((M, N)).astype(dtype)
    b = np.zeros_like(a)
    threads = 128 if (block[0] * block[1]) % 128 == 0 and (128 % block[1] == 0 or block[1] % 128 == 0) else 32
    loopir.build(tma_copy(M, N, block, dtype, swizzle, threads=threads, tiles=tiles), target="cpu")(a, b)
    np.testing.assert_array_equal(b, a)


def test_tma_copy_refuses_threads_that_do_not_tile_it() -> None:
    with pytest.raises(ValueError, match=r"threads=96 must divide the 16 x 64 tile"):
        tma_copy(64, 64, (16, 64), threads=96)
    assert op.is_block_barrier(op.storage_sync())


def test_a_3d_box_is_copied_with_zeros_out_of_bounds() -> None:
    G = Buffer("G", (3, 10, 8), "float32")
    R = Buffer("R", (2, 4, 8), "float32")
    tile = Buffer("tile", (2, 4, 8), "float32", scope="shared")
    bar = Buffer("bar", (1,), "uint64", scope="shared")
    tx, i, j, c = Var("tx"), Var("i"), Var("j"), Var("c")
    load = T.tma_load(tile[0, 0, 0], G[2, 8, -4], bar[0], (2, 4, 8))
    copy = For(i, 0, 2, ForKind.SERIAL, For(j, 0, 4, ForKind.SERIAL, For(c, 0, 8, ForKind.SERIAL,
               BufferStore(R, tile[i, j, c], (i, j, c)))))  # fmt: skip
    body = IfThenElse(tx == 0, seq(Evaluate(T.mbarrier_init(bar[0], 1)), Evaluate(load),
                                   Evaluate(T.mbarrier_wait(bar[0], 0)), copy))  # fmt: skip
    f = PrimFunc((G, R), Allocate(tile, Allocate(bar, For(tx, 0, 32, ForKind.THREAD_BINDING, body,
                                                              thread_tag="threadIdx.x"))), name="box3")  # fmt: skip
    g = np.arange(240, dtype=np.float32).reshape(3, 10, 8) + 1
    r = np.full((2, 4, 8), -1, np.float32)
    loopir.build(f, target="cpu")(g, r)
    want = np.zeros((2, 4, 8), np.float32)
    want[0, :2, 4:] = g[2, 8:10, :4]  # rows 8, 9 of plane 2, columns 0-3 (the box starts at -4)
    np.testing.assert_array_equal(r, want)
