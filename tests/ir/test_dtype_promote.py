"""Automatic dtype promotion of mixed-dtype operators, and the dtype helpers of loopir.ir.dtype.

Promotion follows TVM's BinaryOpMatchTypes: a float beats an int or bool, the wider type
wins, a signed and an unsigned int of one width give the unsigned one (as in C). float16 and
bfloat16 have no common 16-bit type; both fit exactly in float32.
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

import loopir
from loopir import te
from loopir.ir import dtype as dt
from loopir.ir.expr import Cast, FloatImm, IntImm, Var, convert, make_const

SCALARS = sorted(dt.SCALAR_BITS)
_MIXED = ["int32", "int64", "float16", "float32", "bool"]  # the dtypes of the issue


@pytest.mark.parametrize(
    "a, b, want",
    [
        ("int32", "int64", "int64"),
        ("int8", "int16", "int16"),
        ("uint8", "uint32", "uint32"),
        ("int32", "float16", "float16"),  # TVM: the int side is cast to the float type
        ("int64", "float16", "float16"),
        ("float16", "float32", "float32"),
        ("float32", "float64", "float64"),
        ("bool", "int32", "int32"),
        ("bool", "int64", "int64"),
        ("bool", "float16", "float16"),
        ("bool", "float32", "float32"),
        ("int32", "uint32", "uint32"),
        ("int8", "uint8", "uint8"),
        ("uint8", "int16", "int16"),
        ("int8", "uint16", "uint16"),
        ("float16", "bfloat16", "float32"),
        ("bfloat16", "float32", "float32"),
        ("int32x4", "float32x4", "float32x4"),
        ("boolx2", "int64x2", "int64x2"),
        ("float16", "float16", "float16"),
    ],
)
def test_promote_table(a: str, b: str, want: str) -> None:
    assert dt.promote(a, b) == want
    assert dt.promote(b, a) == want


@pytest.mark.parametrize("a, b", list(itertools.combinations(SCALARS, 2)))
def test_promote_is_commutative_and_absorbs_both(a: str, b: str) -> None:
    # Regression: int32/uint32, int8/uint8 and float16/bfloat16 used to give the left operand's
    # type, so ``x + y`` and ``y + x`` had different dtypes.
    res = dt.promote(a, b)
    assert res == dt.promote(b, a)
    assert dt.promote(res, a) == res and dt.promote(res, b) == res
    if dt.is_float(a) != dt.is_float(b):
        assert res == (a if dt.is_float(a) else b)  # TVM: the float side's type, any width
    else:
        assert dt.bits(res) >= max(dt.bits(a), dt.bits(b))


def test_promote_refuses_mismatched_lanes() -> None:
    with pytest.raises(TypeError, match="float32x4 and float32x2"):
        dt.promote("float32x4", "float32x2")
    with pytest.raises(TypeError, match="int32x4 and float32"):
        dt.promote("int32x4", "float32")


# --- operators on expressions ---------------------------------------------------------------


def _var(dtype: str) -> Var:
    return Var(f"v_{dtype}", dtype)


@pytest.mark.parametrize("a, b", list(itertools.permutations(_MIXED, 2)))
def test_binary_operators_cast_both_sides_to_the_common_type(a: str, b: str) -> None:
    x, y = _var(a), _var(b)
    want = dt.promote(a, b)
    for e in (x + y, x - y, x * y, loopir.ir.op.max_(x, y), loopir.ir.op.min_(x, y)):
        assert e.dtype == want
        assert e.a.dtype == want and e.b.dtype == want
        # the side that had the common type already is not wrapped in a Cast
        assert isinstance(e.a, Cast) == (a != want)
        assert isinstance(e.b, Cast) == (b != want)
    for e in (x < y, x <= y, x > y, x >= y, x == y, x != y):
        assert e.dtype == "bool"
        assert e.a.dtype == want and e.b.dtype == want


def test_python_scalars_take_the_expression_type() -> None:
    h = _var("float16")
    i64 = _var("int64")
    assert (h + 1).dtype == "float16" and isinstance((h + 1).b, FloatImm)
    assert (1 + h).dtype == "float16"
    assert (i64 * 3).dtype == "int64" and (i64 * 3).b.dtype == "int64"
    # a Python float on an int expression makes both sides float32 (not a truncated int)
    e = _var("int32") + 1.5
    assert e.dtype == "float32" and isinstance(e.b, FloatImm) and e.b.value == 1.5
    assert (i64 < 2.5).a.dtype == "float32"
    sel = loopir.ir.op.if_then_else(_var("bool"), _var("int32"), _var("float16"))
    assert sel.dtype == "float16"


def test_vector_operands_with_different_lanes_are_refused() -> None:
    v4 = Var("v4", "float32x4")
    v2 = Var("v2", "float32x2")
    with pytest.raises(TypeError, match="vector types"):
        _ = v4 + v2


# --- values through the CPU executor -----------------------------------------------------------



def _sample(dtype: str, rng: np.random.Generator, n: int) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dt.is_float(dtype):
        # halves: exact in float16, so a sum or product of two is exact up to rounding once
        return (rng.integers(-64, 64, n) / 2).astype(dtype)
    return rng.integers(-100, 100, n).astype(dtype)


_OPS = {
    "add": (lambda x, y: x + y, np.add),
    "mul": (lambda x, y: x * y, np.multiply),
    "max": (loopir.ir.op.max_, np.maximum),
    "lt": (lambda x, y: x < y, np.less),
    "eq": (lambda x, y: x == y, np.equal),
}


@pytest.mark.parametrize("op", sorted(_OPS))
@pytest.mark.parametrize("a, b", list(itertools.permutations(_MIXED, 2)))
def test_mixed_dtype_compute_matches_numpy(a: str, b: str, op: str) -> None:
    n = 16
    make, ref = _OPS[op]
    A = te.placeholder((n,), a, name="A")
    B = te.placeholder((n,), b, name="B")
    C = te.compute((n,), lambda i: make(A[i], B[i]), name="C")
    common = dt.promote(a, b)
    want_dtype = "bool" if op in ("lt", "eq") else common
    assert C.dtype == want_dtype
    func = te.create_prim_func([A, B, C])
    rng = np.random.default_rng(zlib.crc32(f"{a}{b}{op}".encode()))
    x, y = _sample(a, rng, n), _sample(b, rng, n)
    out = np.zeros(n, dtype=dt.to_numpy(want_dtype))
    loopir.build(func, target="cpu")(x, y, out)
    # numpy on both operands cast to the common type first (numpy's own promotion differs:
    # int32 + float16 is float64 there)
    want = ref(x.astype(common), y.astype(common)).astype(out.dtype)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("a, b", [("int32", "uint32"), ("uint8", "int8"), ("int16", "uint8")])
def test_signed_unsigned_compute_matches_numpy(a: str, b: str) -> None:
    # C's rule for one width: the signed side converts to unsigned (-1 + 0u is UINT_MAX)
    n = 8
    A = te.placeholder((n,), a, name="A")
    B = te.placeholder((n,), b, name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    common = dt.promote(a, b)
    assert C.dtype == common
    x = np.array([-1, -2, 0, 1, 5, -7, 3, 100]).astype(a)  # wraps for an unsigned a
    y = np.array([0, 1, 2, 3, 4, 5, 6, 7]).astype(b)
    out = np.zeros(n, dtype=common)
    loopir.build(te.create_prim_func([A, B, C]), target="cpu")(x, y, out)
    np.testing.assert_array_equal(out, x.astype(common) + y.astype(common))


def test_mixed_python_scalar_compute_matches_numpy() -> None:
    n = 8
    A = te.placeholder((n,), "int32", name="A")
    H = te.placeholder((n,), "float16", name="H")
    C = te.compute((n,), lambda i: A[i] + 1.5, name="C")
    D = te.compute((n,), lambda i: H[i] * 3 + A[i], name="D")
    assert C.dtype == "float32" and D.dtype == "float16"
    func = te.create_prim_func([A, H, C, D])
    a = np.arange(-4, 4, dtype="int32")
    h = (np.arange(n) / 4).astype("float16")
    c, d = np.zeros(n, "float32"), np.zeros(n, "float16")
    loopir.build(func, target="cpu")(a, h, c, d)
    np.testing.assert_array_equal(c, a.astype("float32") + np.float32(1.5))
    np.testing.assert_array_equal(d, h * np.float16(3) + a.astype("float16"))


# --- the other helpers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, want",
    [
        ("float", "float32"), ("int", "int32"), ("half", "float16"), ("double", "float64"),
        ("float32x1", "float32"), ("int8x16", "int8x16"), (np.float16, "float16"),
        (np.dtype("int64"), "int64"), (bool, "bool"), ("bfloat16", "bfloat16"),
    ],
)  # fmt: skip
def test_canonical(given: object, want: str) -> None:
    assert dt.canonical(given) == want


@pytest.mark.parametrize(
    "bad", ["float8", "float32x0", "float32xa", "x4", "complex64", object, "int32x", 3.5]
)
def test_canonical_refuses(bad: object) -> None:
    with pytest.raises(ValueError, match="unsupported dtype"):
        dt.canonical(bad)


def test_canonical_refuses_none() -> None:
    # numpy reads None as float64; a missing dtype must not silently become float64
    with pytest.raises(ValueError, match="None"):
        dt.canonical(None)


def test_queries() -> None:
    assert dt.element("float32x4") == "float32" and dt.lanes("float32x4") == 4
    assert dt.lanes("int8") == 1
    assert dt.with_lanes("float16x8", 1) == "float16" and dt.with_lanes("int32", 4) == "int32x4"
    assert dt.bits("bfloat16x2") == 16 and dt.bits("bool") == 1
    assert dt.is_float("bfloat16") and not dt.is_float("int32")
    assert dt.is_int("uint8") and dt.is_int("int64x2") and not dt.is_int("bool")
    assert dt.is_uint("uint16") and not dt.is_uint("int16")
    assert dt.is_bool("boolx4") and not dt.is_bool("int8")
    assert dt.to_numpy("bfloat16") == np.uint16  # stored as raw bits
    assert dt.to_numpy("float16x4") == np.float16


@pytest.mark.parametrize("dtype", SCALARS)
def test_reduction_identities(dtype: str) -> None:
    hi, lo = dt.max_value(dtype), dt.min_value(dtype)
    if dtype == "bool":
        assert (hi, lo) == (True, False)
    elif dt.is_float(dtype):
        assert hi == float("inf") and lo == float("-inf")
    else:
        info = np.iinfo(dtype)
        assert (hi, lo) == (int(info.max), int(info.min))
        assert isinstance(hi, int) and isinstance(lo, int)


def test_constants_of_every_kind() -> None:
    assert isinstance(make_const(2, "float16"), FloatImm)
    assert isinstance(make_const(2.0, "int64"), IntImm) and make_const(2.9, "int64").value == 2
    assert make_const(1, "float32x4").dtype == "float32x4"
    assert convert(True).dtype == "bool" and convert(3).dtype == "int32"
    assert convert(0.5).dtype == "float32"
