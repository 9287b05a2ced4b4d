"""XOR swizzles through transform_layout (issue 31): the bijectivity proof against enumeration, the
inverse, errors, traces, goldens, and swizzled shared tiles (transpose, GEMM) on the CPU executor,
through nvcc and on the GPU."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopir
from loopir import te
from loopir.arith import vectorized as vec
from loopir.errors import ScheduleError
from loopir.examples import dense_func, pipelined_gemm, transpose
from loopir.examples.transpose import transpose_func
from loopir.ir.expr import Var
from loopir.schedule import Trace
from loopir.schedule.layout import inverse_index_map
from loopir.schedule.layout_map import prove_bijective
from loopir.testing import check_equivalent
from tests.schedule.dm_util import golden_pair

# the 64-column fp16 tile of an ldmatrix-friendly layout
LDMATRIX = "lambda i, j: (i, (j // 8 ^ i % 8) * 8 + j % 8)"


def _func(m: int = 16, n: int = 64, dtype: str = "float16") -> loopir.PrimFunc:
    A = te.placeholder((m, n), dtype, name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + 1.0, name="C")
    return te.create_prim_func([A, C])


def _swizzled(text: str = LDMATRIX, m: int = 16, n: int = 64) -> loopir.Schedule:
    sch = loopir.Schedule(_func(m, n))
    sch.transform_layout(sch.get_block("B"), "B", text)
    return sch


def test_golden_ldmatrix_swizzle(golden) -> None:
    sch = loopir.Schedule(_func())
    sch.transform_layout(sch.get_block("B"), "B", lambda i, j: (i, (j // 8 ^ i % 8) * 8 + j % 8))
    assert [int(s) for s in sch.func.body.block.alloc_buffers[0].shape] == [16, 64]
    golden_pair(golden, "transform_layout_swizzle", _func(), sch.func)
    check_equivalent(_func(), sch.func)
    check_equivalent(_func(), loopir.lower(sch.func))


# ---- the proof against enumeration -------------------------------------------------------------


def _enumerate(params, exprs, shape) -> tuple[bool, list[int]]:
    """(bijective onto the box of its image, that box) by looking at every element."""
    grids = np.meshgrid(*(np.arange(s) for s in shape), indexing="ij")
    env = dict(zip(params, (g.ravel() for g in grids)))
    size = int(np.prod(shape))
    cols = [np.broadcast_to(vec.evaluate(e, env, size), (size,)) for e in exprs]
    if any((c < 0).any() for c in cols):
        return False, []
    box = [int(c.max()) + 1 for c in cols]
    flat = np.ravel_multi_index(tuple(cols), box)
    return len(np.unique(flat)) == size == int(np.prod(box)), box


@st.composite
def _maps(draw: st.DrawFn):
    """Index maps over two indices of power-of-two (sometimes odd) extents: permutations, splits,
    fusions and XOR swizzles, well-formed or not."""
    pow2 = st.sampled_from([1, 2, 4, 8, 16, 32, 64])
    m = draw(st.one_of(pow2, st.sampled_from([3, 6, 12])))
    n = draw(st.one_of(pow2, st.sampled_from([3, 5, 24])))
    i, j = Var("i"), Var("j")
    c = draw(st.sampled_from([1, 2, 4, 8]))
    q = draw(st.sampled_from([1, 2, 4, 8, 16]))
    kind = draw(st.sampled_from(["swizzle", "swizzle", "swizzle_group", "rows", "perm", "split",
                                 "fuse", "shifted", "bad_xor", "chunk"]))  # fmt: skip
    if kind == "swizzle":  # columns in chunks of c, chunk index XOR the row mod q
        exprs = [i, (j // c ^ i % q) * c + j % c]
    elif kind == "swizzle_group":  # a swizzle within groups of 8 chunks of c
        exprs = [i, j // (8 * c) * (8 * c) + (j // c % 8 ^ i % q) * c + j % c]
    elif kind == "rows":  # the row index swizzled by the column
        exprs = [i ^ j % q, j]
    elif kind == "perm":
        exprs = [j, i]
    elif kind == "split":
        exprs = [i // c, j, i % c]
    elif kind == "fuse":
        exprs = [i * n + j]
    elif kind == "shifted":  # with shifts and masks, as a user may write it
        exprs = [i, ((j >> 3) ^ (i & 7)) << 3 | (j & 7)]
    elif kind == "chunk":
        exprs = [j // c, i, (j % c) ^ (i % q)]
    else:  # XOR of a digit with itself: never one-to-one
        exprs = [i, j ^ (j % c)]
    return [i, j], exprs, [m, n]


@given(_maps())
def test_a_proven_map_is_a_bijection_onto_its_shape(case) -> None:
    params, exprs, shape = case
    proof = prove_bijective(params, exprs, shape)
    if proof is None:
        return  # unproven: transform_layout enumerates (next test)
    ok, box = _enumerate(params, exprs, shape)
    assert ok and list(proof.new_shape) == box, (exprs, shape, proof.new_shape, box)
    ys, inv = proof.inverse()
    # both ways round, at every element
    size = int(np.prod(shape))
    grids = np.meshgrid(*(np.arange(s) for s in shape), indexing="ij")
    env = dict(zip(params, (g.ravel() for g in grids)))
    image = [np.broadcast_to(vec.evaluate(e, env, size), (size,)) for e in exprs]
    back = [np.broadcast_to(vec.evaluate(e, dict(zip(ys, image)), size), (size,)) for e in inv]
    for got, want in zip(back, env.values()):
        np.testing.assert_array_equal(got, want)


@given(_maps())
def test_transform_layout_takes_exactly_the_bijections(case) -> None:
    params, exprs, shape = case
    ok, box = _enumerate(params, exprs, shape)
    names = ", ".join(p.name for p in params)
    from loopir.schedule.layout import _text

    text = f"lambda {names}: ({', '.join(_text(e) for e in exprs)},)"
    sch = loopir.Schedule(_func(*shape, dtype="float32"))
    if not ok:
        with pytest.raises(ScheduleError, match=r"transform_layout: index map lambda i, j: .* on "
                           r"'B' \["):
            sch.transform_layout(sch.get_block("B"), "B", text)
        return
    sch.transform_layout(sch.get_block("B"), "B", text)
    assert [int(s) for s in sch.func.body.block.alloc_buffers[0].shape] == box
    check_equivalent(_func(*shape, dtype="float32"), sch.func)


@pytest.mark.parametrize(("text", "shape", "new"), [
    (LDMATRIX, (16, 64), (16, 64)),
    ("lambda i, j: (i, j // 64 * 64 + (j % 64 // 8 ^ i % 8) * 8 + j % 8)", (96, 256), (96, 256)),
    ("lambda i, j: (i, ((j >> 3) ^ (i & 7)) << 3 | (j & 7))", (8, 64), (8, 64)),
    ("lambda i, j: (i, j // 32 * 32 + (j % 32 ^ i % 32))", (4096, 4096), (4096, 4096)),  # 2**24
    ("lambda i, j: (j // 4, i, j % 4)", (8192, 4096), (1024, 8192, 4)),  # past what enumerates
])  # fmt: skip
def test_the_swizzles_layouts_need_are_proven(text: str, shape, new) -> None:
    from loopir.schedule.layout import _params_of, parse_index_map

    names, exprs = parse_index_map(text)
    proof = prove_bijective(_params_of(exprs, names), exprs, list(shape))
    assert proof is not None and proof.new_shape == new


def test_inverse_of_the_ldmatrix_swizzle_is_itself() -> None:
    ys, inv = inverse_index_map(LDMATRIX, (16, 64))
    assert [str(e) for e in inv] == [ys[0].name, "(y1 // 8 ^ y0 % 8) * 8 + y1 % 8"]
    ys, inv = inverse_index_map("lambda i, j: (j // 4, i, j % 4)", (8, 16))
    assert [str(e) for e in inv] == ["y1", "y0 * 4 + y2"]
    with pytest.raises(ScheduleError, match=r"transform_layout: index map .* no inverse"):
        inverse_index_map("lambda i, j: (i, j ^ i)", (16, 8))


def test_errors_name_the_primitive_and_the_map() -> None:
    sch = loopir.Schedule(_func())
    bad = "lambda i, j: (i, (j ^ (j % 2)))"
    with pytest.raises(ScheduleError, match=re.escape(f"transform_layout: index map {bad} on 'B' "
                                                      "[16, 64] is not one-to-one")):
        sch.transform_layout(sch.get_block("B"), "B", lambda i, j: (i, j ^ j % 2))
    wide = "lambda i, j: (i, ((((j // 8) ^ (i % 16)) * 8) + (j % 8)))"  # XOR beyond the digit
    with pytest.raises(ScheduleError, match=re.escape(
            f"transform_layout: index map {wide} on 'B' [16, 64] is one-to-one but not onto its "
            "image's shape [16, 128]: it would leave 1024 of 2048 places unused")):
        sch.transform_layout(sch.get_block("B"), "B", lambda i, j: (i, (j // 8 ^ i % 16) * 8 + j % 8))
    assert len(sch.trace) == 2  # the two get_block: the failed calls left nothing behind


def test_trace_round_trip_of_a_swizzle() -> None:
    sch = loopir.Schedule(_func())
    sch.transform_layout(sch.get_block("B"), "B", lambda i, j: (i, (j // 8 ^ i % 8) * 8 + j % 8))
    text = str(sch.trace)
    assert 'sch.transform_layout(b0, "B", "lambda i, j: (i, ((((j // 8) ^ (i % 8)) * 8) + (j % 8)))")' \
        in text
    start = loopir.Schedule(_func())
    Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(start)
    loopir.assert_structural_equal(sch.func, start.func)
    ns: dict = {}
    exec(text, ns)  # noqa: S102 - the trace's own Python text
    again = loopir.Schedule(_func())
    ns["apply_trace"](again)
    loopir.assert_structural_equal(sch.func, again.func)


# ---- swizzled shared tiles ---------------------------------------------------------------------

# a 32 x 32 float tile: column j of row i at j ^ i (the rows of a column fall in 32 banks)
TRANSPOSE_SWIZZLE = "lambda i, j: (i, j // 32 * 32 + (j % 32 ^ i % 32))"
# B's 16-byte chunks in groups of 8, the chunk index XOR the row
GEMM_B_SWIZZLE = "lambda k, j: (k, j // 32 * 32 + (j // 4 % 8 ^ k % 8) * 4 + j % 4)"


def _swizzled_transpose(m: int = 64, n: int = 96) -> loopir.Schedule:
    sch = transpose(m, n, pad=False)
    sch.transform_layout(sch.get_block("A_shared"), 0, TRANSPOSE_SWIZZLE)
    return sch


def _swizzled_gemm(shape=(128, 64, 256), stages: int = 2, fp16: bool = False) -> loopir.Schedule:
    if fp16:  # the ldmatrix swizzle on A's 64-column fp16 tile
        sch = pipelined_gemm(*shape, stages=stages, dtype="float16", ki=64, vec=8, pad_a=0)
        sch.transform_layout(sch.get_block("A_shared"), 0, LDMATRIX)
        return sch
    sch = pipelined_gemm(*shape, stages=stages)
    sch.transform_layout(sch.get_block("B_shared"), 0, GEMM_B_SWIZZLE)
    return sch


def _lower_quietly(func: loopir.PrimFunc) -> loopir.PrimFunc:
    from loopir.codegen_cuda import lower_for_cuda
    from loopir.passes.race_check import find_races

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RaceCheckWarning: the XORs are proven
        lowered = lower_for_cuda(func)
        report = find_races(lowered)
    assert report.races == () and report.unproven == ()
    return lowered


def _barriers(func: loopir.PrimFunc) -> int:
    return func.script().count("tvm_storage_sync")


def test_swizzled_transpose_golden_and_equal_to_the_unswizzled_one(golden) -> None:
    sch = _swizzled_transpose()
    lowered = _lower_quietly(sch.func)
    golden("schedule/transform_layout_swizzle_transpose_lowered", lowered.script())
    # the prover handles the XOR: no barrier more than without the swizzle
    assert _barriers(lowered) == _barriers(_lower_quietly(transpose(64, 96, pad=False).func))
    check_equivalent(transpose_func(64, 96), lowered, thread_order="random")
    a = np.random.default_rng(0).standard_normal((64, 96)).astype("float32")
    outs = []
    for s in (sch, transpose(64, 96, pad=False)):
        b = np.zeros((96, 64), "float32")
        loopir.build(loopir.lower(s.func), target="cpu")(a, b)
        outs.append(b)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], a.T)


@pytest.mark.parametrize("fp16", [False, True])
def test_swizzled_gemm_computes_what_the_unswizzled_one_does(fp16: bool) -> None:
    from loopir.codegen_cuda import emit_cuda

    shape = (64, 64, 128) if fp16 else (128, 64, 256)
    dtype = "float16" if fp16 else "float32"
    sch = _swizzled_gemm(shape, fp16=fp16)
    lowered = _lower_quietly(sch.func)
    check_equivalent(dense_func(*shape, dtype), loopir.lower(sch.func), thread_order="random")
    plain = pipelined_gemm(*shape, dtype=dtype, **({"ki": 64, "vec": 8, "pad_a": 0} if fp16 else {}))
    rng = np.random.default_rng(1)
    M, K, N = shape
    a = (rng.random((M, K)) - 0.5).astype(dtype)
    b = (rng.random((K, N)) - 0.5).astype(dtype)
    outs = []
    for s in (sch, plain):
        c = np.zeros((M, N), dtype)
        loopir.build(loopir.lower(s.func), target="cpu")(a, b, c)
        outs.append(c)
    np.testing.assert_array_equal(outs[0], outs[1])
    # the swizzle moves 16-byte chunks: the fetch stays 16-byte cp.async
    src = emit_cuda(lowered).source
    tile = "A_shared" if fp16 else "B_shared"
    assert f"loopir_cp_async<16>({tile} + " in src and "^" in src


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_swizzled_kernels_compile(tmp_path, arch: str) -> None:
    from loopir.codegen_cuda import emit_cuda
    from loopir.codegen_cuda.compile import compile_cuda

    for sch in (_swizzled_transpose(), _swizzled_gemm(), _swizzled_gemm((64, 64, 128), fp16=True)):
        src = emit_cuda(_lower_quietly(sch.func)).source
        assert "^" in src
        compile_cuda(src, arch=arch, cache_dir=tmp_path)


@pytest.mark.gpu
def test_swizzled_transpose_on_the_gpu() -> None:
    for m, n in ((64, 96), (1024, 2048)):
        mod = loopir.build(_swizzled_transpose(m, n).func, target="cuda")
        a = np.random.default_rng(0).standard_normal((m, n)).astype("float32")
        b = np.zeros((n, m), "float32")
        mod(a, b)
        np.testing.assert_array_equal(b, a.T)


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [2, 3])
def test_swizzled_gemm_on_the_gpu(stages: int) -> None:
    from loopir.testing import check_gemm

    for shape in ((128, 64, 256), (1024, 1024, 1024)):
        check_gemm(loopir.build(_swizzled_gemm(shape, stages).func, target="cuda"), *shape)
    shape = (256, 512, 256)
    M, K, N = shape
    swizzled = loopir.build(_swizzled_gemm(shape, stages, fp16=True).func, target="cuda")
    plain = pipelined_gemm(*shape, stages=stages, dtype="float16", ki=64, vec=8, pad_a=0)
    rng = np.random.default_rng(2)
    a = (rng.random((M, K)) - 0.5).astype("float16")
    b = (rng.random((K, N)) - 0.5).astype("float16")
    outs = []
    for mod in (swizzled, loopir.build(plain.func, target="cuda")):
        c = np.full((M, N), np.nan, "float16")
        mod(a, b, c)
        outs.append(c)
    # the swizzle moves where the tile's chunks live in shared memory, not the arithmetic: each
    # element is summed over k in the same order, so the outputs are bit-identical
    np.testing.assert_array_equal(outs[0], outs[1])
    # the accumulator is fp16 (unit roundoff u = 2**-11), summed over K = 512 in order: with
    # rounding errors of random sign the relative error grows like u * sqrt(K) (a numpy fp16
    # emulation of this order gives 3.3e-3 on these inputs, 0.3 u sqrt(K), and so did the H200);
    # the bound u * sqrt(K) = 1.1e-2 still fails a misplaced chunk, an O(1) error in its elements
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(outs[0] - want) / np.linalg.norm(want) < 2.0**-11 * np.sqrt(K)


@pytest.mark.gpu
def test_bitwise_expressions_on_the_gpu() -> None:
    from loopir.ir.buffer import Buffer
    from loopir.ir.stmt import BufferStore, PrimFunc
    from tests.codegen_cuda.builders import bind

    n = 1024
    A = Buffer("A", (n,), "int32")
    B = Buffer("B", (n,), "int32")
    bx, tx = Var("bx"), Var("tx")
    k = bx * 128 + tx
    x = A[k]
    value = ((x ^ k) & 0x5A | (x >> 2)) + (x << 1) + ~x
    body = bind(bx, n // 128, "blockIdx.x", bind(tx, 128, "threadIdx.x", BufferStore(B, value, (k,))))
    mod = loopir.build(PrimFunc((A, B), body), target="cuda")
    a = np.random.default_rng(3).integers(-2**20, 2**20, n).astype("int32")
    b = np.zeros(n, "int32")
    mod(a, b)
    kk = np.arange(n, dtype="int32")
    np.testing.assert_array_equal(b, ((a ^ kk) & 0x5A | (a >> 2)) + (a << 1) + ~a)


@pytest.mark.parametrize("which", ["transpose", "gemm_fp16"])
def test_swizzled_functions_read_back_from_their_script(which: str) -> None:
    # the XORs print as Python operators the script parser reads back (before and after lowering)
    from loopir.script import from_source

    sch = _swizzled_transpose() if which == "transpose" else _swizzled_gemm(fp16=True)
    for f in (sch.func, _lower_quietly(sch.func)):
        assert "^" in f.script()
        loopir.assert_structural_equal(from_source(f.script()), f)
