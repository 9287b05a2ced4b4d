"""The CPU executor against numpy on te workloads, with hypothesis-drawn shapes and data."""

from __future__ import annotations

import functools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import (
    bf16_bits_to_float,
    dims,
    empty_like_param,
    float_to_bf16_bits,
    random_nonzero,
    run_te,
    seeds,
    shapes,
    te_conv2d_nhwc,
    te_elementwise_chain,
    te_matmul,
    te_matmul_bias_relu,
)

import loopir
from loopir import te
from loopir.ir.expr import Var

# Each distinct constant shape is a new C compile (~0.3 s); keep those tests' example counts
# small. Symbolic-shape modules compile once and are reused for every example.
COMPILE_HEAVY = settings(max_examples=6)


def test_matmul_64x48x32_matches_numpy() -> None:
    tensors, ref = te_matmul(64, 48, 32)
    a = random_nonzero((64, 48), "float32", 1)
    b = random_nonzero((48, 32), "float32", 2)
    (c,) = run_te(tensors, [a, b])
    expect = ref(a, b)
    np.testing.assert_allclose(c, expect, rtol=1e-5, atol=1e-5 * np.abs(expect).max())


@COMPILE_HEAVY
@given(m=dims(1, 12), k=dims(1, 12), n=dims(1, 12), seed=seeds())
def test_matmul_shapes(m: int, k: int, n: int, seed: int) -> None:
    tensors, ref = te_matmul(m, k, n)
    rng = np.random.default_rng(seed)
    a, b = random_nonzero((m, k), "float32", rng), random_nonzero((k, n), "float32", rng)
    (c,) = run_te(tensors, [a, b])
    np.testing.assert_allclose(c, ref(a, b), rtol=1e-5, atol=1e-5)


@functools.cache
def _symbolic_matmul_bias_relu() -> loopir.runtime.CPUModule:
    M, K, N = Var("M"), Var("K"), Var("N")
    tensors, _ = te_matmul_bias_relu(M, K, N)
    return loopir.build(te.create_prim_func(tensors), target="cpu")


@given(m=dims(1, 20), k=dims(1, 20), n=dims(1, 20), seed=seeds())
def test_matmul_bias_relu_symbolic(m: int, k: int, n: int, seed: int) -> None:
    mod = _symbolic_matmul_bias_relu()
    _, ref = te_matmul_bias_relu(m, k, n)
    rng = np.random.default_rng(seed)
    a, b = random_nonzero((m, k), "float32", rng), random_nonzero((k, n), "float32", rng)
    bias = random_nonzero((n,), "float32", rng)
    d = empty_like_param((m, n), "float32")
    mod(a, b, bias, d)
    expect = ref(a, b, bias)
    np.testing.assert_allclose(d, expect, rtol=1e-5, atol=1e-5)
    assert (d == 0).any() == (expect == 0).any()  # relu really clipped


@COMPILE_HEAVY
@given(shape=shapes(1, 3, 1, 9), seed=seeds())
def test_elementwise_chain(shape: tuple[int, ...], seed: int) -> None:
    tensors, ref = te_elementwise_chain(shape)
    rng = np.random.default_rng(seed)
    a, b = random_nonzero(shape, "float32", rng), random_nonzero(shape, "float32", rng)
    (e,) = run_te(tensors, [a, b])
    np.testing.assert_allclose(e, ref(a, b), rtol=1e-5, atol=1e-6)


@functools.cache
def _symbolic_elementwise() -> loopir.runtime.CPUModule:
    n = Var("n")
    A = te.placeholder((n, 3), "float32", name="A")
    B = te.compute((n, 3), lambda i, j: te.sigmoid(A[i, j]) * A[i, (j + 1) % 3], name="B")
    return loopir.build(te.create_prim_func([A, B]), target="cpu")


@given(n=dims(0, 40), seed=seeds())
def test_symbolic_extent_elementwise(n: int, seed: int) -> None:
    mod = _symbolic_elementwise()
    a = random_nonzero((n, 3), "float32", seed)
    b = empty_like_param((n, 3), "float32")
    mod(a, b)
    expect = (1 / (1 + np.exp(-a.astype(np.float64)))) * np.roll(a, -1, axis=1)
    np.testing.assert_allclose(b, expect, rtol=1e-6, atol=1e-7)


@functools.cache
def _reductions(dtype: str) -> loopir.runtime.CPUModule:
    n, m = Var("n"), Var("m")
    A = te.placeholder((n, m), dtype, name="A")
    k = te.reduce_axis(m, name="k")
    r = te.reduce_axis(m, name="r")
    mx = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="mx")
    mn = te.compute((n,), lambda i: te.min(A[i, r], axis=r), name="mn")
    return loopir.build(te.create_prim_func([A, mx, mn]), target="cpu")


@given(n=dims(1, 10), m=dims(1, 10), dtype=st.sampled_from(["float32", "int32", "int8"]), seed=seeds())
def test_max_min_reductions(n: int, m: int, dtype: str, seed: int) -> None:
    mod = _reductions(dtype)
    a = random_nonzero((n, m), dtype, seed)
    mx, mn = empty_like_param((n,), dtype), empty_like_param((n,), dtype)
    mod(a, mx, mn)
    np.testing.assert_array_equal(mx, a.max(axis=1))
    np.testing.assert_array_equal(mn, a.min(axis=1))


def test_reduction_over_all_negative_values_uses_true_identity() -> None:
    # a max reduction initialised with 0 instead of -inf would return 0 here
    mod = _reductions("float32")
    a = -np.abs(random_nonzero((3, 5), "float32", 7))
    mx, mn = np.zeros(3, np.float32), np.zeros(3, np.float32)
    mod(a, mx, mn)
    np.testing.assert_array_equal(mx, a.max(axis=1))
    assert (mx < 0).all()


@COMPILE_HEAVY
@given(
    n=dims(1, 2), hw=dims(3, 7), ci=dims(1, 3), co=dims(1, 3), ks=st.sampled_from([1, 3]),
    pad=st.integers(0, 1), stride=st.integers(1, 2), seed=seeds(),
)  # fmt: skip
def test_conv2d_nhwc(n: int, hw: int, ci: int, co: int, ks: int, pad: int, stride: int, seed: int) -> None:
    tensors, ref = te_conv2d_nhwc(n, hw, hw, ci, co, ks, ks, pad, stride)
    rng = np.random.default_rng(seed)
    x = random_nonzero((n, hw, hw, ci), "float32", rng)
    w = random_nonzero((ks, ks, ci, co), "float32", rng)
    (y,) = run_te(tensors, [x, w])
    np.testing.assert_allclose(y, ref(x, w), rtol=1e-5, atol=1e-5)


def test_reduce_axis_with_lo_hi() -> None:
    A = te.placeholder((6, 12), "float32", name="A")
    k = te.reduce_axis((3, 10), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="B")
    a = random_nonzero((6, 12), "float32", 3)
    (b,) = run_te([A, B], [a])
    np.testing.assert_allclose(b, 2 * a[:, 3:10].astype(np.float64).sum(axis=1), rtol=1e-6)


def test_sum_with_where() -> None:
    A = te.placeholder((4, 9), "float32", name="A")
    k = te.reduce_axis(9, name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k, where=k % 3 != 1), name="B")
    a = random_nonzero((4, 9), "float32", 4)
    (b,) = run_te([A, B], [a])
    keep = np.arange(9) % 3 != 1
    np.testing.assert_allclose(b, a[:, keep].astype(np.float64).sum(axis=1), rtol=1e-6)


@functools.cache
def _int_div(dtype: str) -> loopir.runtime.CPUModule:
    n = Var("n")
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    Q = te.compute((n,), lambda i: A[i] // B[i], name="Q")
    R = te.compute((n,), lambda i: A[i] % B[i], name="R")
    S = te.compute((n,), lambda i: te.floordiv(A[i] * 3, 4) + te.floormod(A[i], 5), name="S")
    return loopir.build(te.create_prim_func([A, B, Q, R, S]), target="cpu")


@given(n=dims(1, 30), dtype=st.sampled_from(["int8", "int16", "int32", "int64"]), seed=seeds())
def test_integer_floordiv_floormod_negative(n: int, dtype: str, seed: int) -> None:
    mod = _int_div(dtype)
    rng = np.random.default_rng(seed)
    a = rng.integers(-40, 40, size=n).astype(dtype)
    b = random_nonzero((n,), dtype, rng)  # never zero, both signs
    q, r, s = (empty_like_param((n,), dtype) for _ in range(3))
    mod(a, b, q, r, s)
    np.testing.assert_array_equal(q, np.floor_divide(a, b))
    np.testing.assert_array_equal(r, np.mod(a, b))
    np.testing.assert_array_equal(s, (a * np.array(3, dtype)) // np.array(4, dtype) + a % np.array(5, dtype))


def test_int8_arithmetic_wraps() -> None:
    A = te.placeholder((4,), "int8", name="A")
    B = te.compute((4,), lambda i: A[i] * A[i] + A[i], name="B")
    a = np.array([100, -100, 12, 127], np.int8)
    (b,) = run_te([A, B], [a])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(b, a * a + a)


def test_float16_rounds_per_operation() -> None:
    A = te.placeholder((64,), "float16", name="A")
    B = te.placeholder((64,), "float16", name="B")
    C = te.compute((64,), lambda i: (A[i] * B[i] + A[i]) / B[i], name="C")
    D = te.compute((64,), lambda i: (A[i] * B[i]).astype("float32"), name="D")
    rng = np.random.default_rng(5)
    a = random_nonzero((64,), "float16", rng, scale=3.0)
    b = random_nonzero((64,), "float16", rng, scale=3.0)
    c, d = run_te([A, B, C, D], [a, b])
    np.testing.assert_array_equal(c, (a * b + a) / b)  # numpy float16 rounds per op too
    np.testing.assert_array_equal(d, (a * b).astype(np.float32))


def test_bfloat16_round_to_nearest_even() -> None:
    A = te.placeholder((32,), "bfloat16", name="A")
    F = te.placeholder((32,), "float32", name="F")
    B = te.compute((32,), lambda i: A[i] * A[i] + 1.0, name="B")
    G = te.compute((32,), lambda i: F[i].astype("bfloat16"), name="G")
    rng = np.random.default_rng(6)
    fa = random_nonzero((32,), "float32", rng, scale=4.0)
    a = float_to_bf16_bits(fa)
    f = random_nonzero((32,), "float32", rng)
    b, g = run_te([A, F, B, G], [a, f])
    av = bf16_bits_to_float(a)
    sq = bf16_bits_to_float(float_to_bf16_bits(av * av))
    expect = bf16_bits_to_float(float_to_bf16_bits(sq + np.float32(1.0)))
    np.testing.assert_array_equal(bf16_bits_to_float(b), expect)
    np.testing.assert_array_equal(g, float_to_bf16_bits(f))


def test_casts_truncate_like_c() -> None:
    A = te.placeholder((6,), "float32", name="A")
    B = te.compute((6,), lambda i: A[i].astype("int32"), name="B")
    a = np.array([1.9, -1.9, 2.5, -0.5, 7.0, -3.99], np.float32)
    (b,) = run_te([A, B], [a])
    np.testing.assert_array_equal(b, np.trunc(a).astype(np.int32))


def test_zero_dimensional_output() -> None:
    A = te.placeholder((7,), "float64", name="A")
    k = te.reduce_axis(7, name="k")
    S = te.compute((), lambda: te.sum(A[k] * A[k], axis=k), name="S")
    a = random_nonzero((7,), "float64", 8)
    s = np.array(np.nan)
    loopir.build(te.create_prim_func([A, S]), target="cpu")(a, s)
    np.testing.assert_allclose(s, (a * a).sum(), rtol=1e-12)
