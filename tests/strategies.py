"""Shared hypothesis strategies and workload builders for the loopir tests.

Import as ``from strategies import ...`` (``tests/`` is on ``sys.path`` through conftest).

Data is never zero: a zero hides wrong indexing (0 * anything), so every generator draws
magnitudes away from 0. Arrays are produced from a drawn seed with numpy, which keeps
hypothesis fast for large arrays while staying reproducible and shrinkable (by seed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

import loopir
from loopir import te

FLOAT_DTYPES = ("float32", "float64", "float16")
INT_DTYPES = ("int8", "int16", "int32", "int64")
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES

# --------------------------------------------------------------------------------------------
# shapes and dtypes
# --------------------------------------------------------------------------------------------


def dims(min_value: int = 1, max_value: int = 16) -> st.SearchStrategy[int]:
    """One extent."""
    return st.integers(min_value, max_value)


def shapes(
    min_ndim: int = 1, max_ndim: int = 3, min_side: int = 1, max_side: int = 8
) -> st.SearchStrategy[tuple[int, ...]]:
    """Array shapes with ``min_ndim..max_ndim`` dimensions of ``min_side..max_side``."""
    return st.integers(min_ndim, max_ndim).flatmap(
        lambda n: st.tuples(*[dims(min_side, max_side) for _ in range(n)])
    )


def dtypes(choices: Sequence[str] = ALL_DTYPES) -> st.SearchStrategy[str]:
    return st.sampled_from(tuple(choices))


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**32 - 1)


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------


def random_nonzero(
    shape: Sequence[int], dtype: str, rng: np.random.Generator | int = 0, scale: float = 1.0
) -> np.ndarray:
    """A C-contiguous array of ``dtype`` whose entries are never zero.

    Floats are uniform in ``±[0.5, 1.5] * scale``; signed ints in ``±[1, 9]``; unsigned ints
    in ``[1, 9]``; bools all True; bfloat16 is returned as uint16 bit patterns.
    """
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    shape = tuple(int(s) for s in shape)
    if dtype == "bfloat16":
        f = random_nonzero(shape, "float32", rng, scale)
        return float_to_bf16_bits(f)
    if dtype == "bool":
        return np.ones(shape, dtype=bool)
    d = np.dtype(dtype)
    if d.kind == "f":
        mag = rng.uniform(0.5, 1.5, size=shape) * scale
        sign = rng.choice(np.array([-1.0, 1.0]), size=shape)
        return np.ascontiguousarray((mag * sign).astype(d))
    mag = rng.integers(1, 10, size=shape)
    if d.kind == "u":
        return np.ascontiguousarray(mag.astype(d))
    sign = rng.choice(np.array([-1, 1]), size=shape)
    return np.ascontiguousarray((mag * sign).astype(d))


def nonzero_arrays(
    shape: Sequence[int], dtype: str = "float32", scale: float = 1.0
) -> st.SearchStrategy[np.ndarray]:
    """Strategy: a random non-zero array of the given shape and dtype."""
    return seeds().map(lambda s: random_nonzero(shape, dtype, s, scale))


def float_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values -> bfloat16 bit patterns (uint16), rounding to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_bits_to_float(b: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32."""
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def empty_like_param(shape: Sequence[int], dtype: str) -> np.ndarray:
    """An output array pre-filled with a value no correct kernel leaves behind (NaN / 77)."""
    if dtype == "bfloat16":
        return np.full(shape, 0x7FC0, dtype=np.uint16)
    d = np.dtype(dtype)
    return np.full(shape, np.nan if d.kind == "f" else 77, dtype=d)


# --------------------------------------------------------------------------------------------
# te workloads: each returns (tensors in parameter order, numpy reference of the outputs)
# --------------------------------------------------------------------------------------------

Workload = tuple[list[te.Tensor], Callable[..., Any]]


def te_matmul(M: Any, K: Any, N: Any, dtype: str = "float32") -> Workload:
    """C[i, j] = sum_k A[i, k] * B[k, j]."""
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C], lambda a, b: a.astype(np.float64) @ b.astype(np.float64)


def te_matmul_bias_relu(M: Any, K: Any, N: Any, dtype: str = "float32") -> Workload:
    """D = relu(A @ B + bias) with an intermediate matmul stage."""
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    bias = te.placeholder((N,), dtype, name="bias")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    Bi = te.compute((M, N), lambda i, j: C[i, j] + bias[j], name="BiasAdd")
    D = te.compute((M, N), lambda i, j: te.max(Bi[i, j], te.const(0, dtype)), name="D")

    def ref(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        return np.maximum(a.astype(np.float64) @ b.astype(np.float64) + c, 0.0)

    return [A, B, bias, D], ref


def te_elementwise_chain(shape: Sequence[Any], dtype: str = "float32") -> Workload:
    """E = exp(-(A * B + 1)^2 / 4) - sqrt(|A|) + tanh(B), in four stages."""
    A = te.placeholder(tuple(shape), dtype, name="A")
    B = te.placeholder(tuple(shape), dtype, name="B")
    n = len(shape)

    def idx(f: Callable[..., Any]) -> Callable[..., Any]:
        return {1: lambda i: f(i), 2: lambda i, j: f(i, j), 3: lambda i, j, k: f(i, j, k)}[n]

    C = te.compute(tuple(shape), idx(lambda *ix: A[ix] * B[ix] + 1.0), name="C")
    D = te.compute(tuple(shape), idx(lambda *ix: te.exp(-(C[ix] * C[ix]) / 4.0)), name="D")
    E = te.compute(
        tuple(shape), idx(lambda *ix: D[ix] - te.sqrt(te.fabs(A[ix])) + te.tanh(B[ix])), name="E"
    )

    def ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        c = a64 * b64 + 1.0
        return np.exp(-(c * c) / 4.0) - np.sqrt(np.abs(a64)) + np.tanh(b64)

    return [A, B, E], ref


def te_conv2d_nhwc(
    N: int, H: int, W: int, CI: int, CO: int, KH: int, KW: int, pad: int, stride: int = 1,
    dtype: str = "float32",
) -> Workload:  # fmt: skip
    """NHWC conv2d with zero padding expressed through te.if_then_else, HWIO weights."""
    X = te.placeholder((N, H, W, CI), dtype, name="X")
    Wt = te.placeholder((KH, KW, CI, CO), dtype, name="W")
    HP, WP = H + 2 * pad, W + 2 * pad
    Xp = te.compute(
        (N, HP, WP, CI),
        lambda n, h, w, c: te.if_then_else(
            te.all(h >= pad, h < H + pad, w >= pad, w < W + pad),
            X[n, h - pad, w - pad, c],
            te.const(0, dtype),
        ),
        name="Xpad",
    )
    OH, OW = (HP - KH) // stride + 1, (WP - KW) // stride + 1
    rh = te.reduce_axis(KH, name="rh")
    rw = te.reduce_axis(KW, name="rw")
    rc = te.reduce_axis(CI, name="rc")
    Y = te.compute(
        (N, OH, OW, CO),
        lambda n, h, w, o: te.sum(
            Xp[n, h * stride + rh, w * stride + rw, rc] * Wt[rh, rw, rc, o], axis=[rh, rw, rc]
        ),
        name="Y",
    )

    def ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        out = np.zeros((N, OH, OW, CO))
        for kh in range(KH):
            for kw in range(KW):
                patch = xp[:, kh : kh + stride * OH : stride, kw : kw + stride * OW : stride, :]
                out += np.einsum("nhwc,co->nhwo", patch, w[kh, kw].astype(np.float64))
        return out

    return [X, Wt, Y], ref


def run_te(
    tensors: Sequence[te.Tensor],
    inputs: Sequence[np.ndarray],
    out_shapes: Sequence[Sequence[int]] | None = None,
    **build_options: Any,
) -> list[np.ndarray]:
    """Build ``tensors`` for the CPU and run them on ``inputs``; returns the output arrays.

    The outputs are the parameters after the inputs; their shapes default to the tensors'
    (constant) shapes.
    """
    func = te.create_prim_func(list(tensors))
    mod = loopir.build(func, target="cpu", **build_options)
    outs_t = list(tensors)[len(inputs) :]
    if out_shapes is None:
        out_shapes = [tuple(int(s.value) for s in t.shape) for t in outs_t]
    outs = [empty_like_param(s, t.dtype) for s, t in zip(out_shapes, outs_t)]
    mod(*inputs, *outs)
    return outs



# --------------------------------------------------------------------------------------------
# schedule fuzzing (loopir.testing.strategies; issue 7): re-exported for the tests
# --------------------------------------------------------------------------------------------

from loopir.testing.strategies import (  # noqa: E402, F401 - appended section, re-exports
    schedule_state_machine,
    schedules,
    split_factors,
)
from loopir.testing.strategies import workloads as te_workloads  # noqa: E402, F401
