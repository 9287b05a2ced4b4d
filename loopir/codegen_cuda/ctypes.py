"""Mapping of loopir dtypes, constants and intrinsics to CUDA C++."""

from __future__ import annotations

import math

import numpy as np

from loopir.errors import CodegenError
from loopir.ir import dtype as dt

SCALAR_CTYPES: dict[str, str] = {
    "bool": "bool",
    "int8": "signed char",
    "int16": "short",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "uint16": "unsigned short",
    "uint32": "unsigned int",
    "uint64": "unsigned long long",
    "float16": "half",
    "bfloat16": "nv_bfloat16",
    "float32": "float",
    "float64": "double",
}

# Vector types with arithmetic meaning in CUDA; other widths are moved as raw bytes.
VECTOR_CTYPES: dict[str, str] = {
    "float32x2": "float2",
    "float32x4": "float4",
    "float64x2": "double2",
    "int32x2": "int2",
    "int32x4": "int4",
    "float16x2": "half2",
    "bfloat16x2": "nv_bfloat162",
}

# Carriers for moving ``n`` bytes in one access, by total size.
RAW_VECTOR_CTYPES: dict[int, str] = {4: "unsigned int", 8: "uint2", 16: "uint4"}

# Reserved words and CUDA built-ins that IR names must not shadow.
RESERVED = frozenset(
    """
    auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while bool true false class delete new template this
    operator private public protected namespace using virtual friend typename half half2
    nv_bfloat16 nv_bfloat162 threadIdx blockIdx blockDim gridDim warpSize min max abs
    float2 float4 int2 int4 uint2 uint4 double2 main
    """.split()
)


def ctype(dtype: str) -> str:
    """The CUDA C++ type of a scalar dtype (raises CodegenError for unknown ones)."""
    d = dt.canonical(dtype)
    if dt.lanes(d) == 1:
        try:
            return SCALAR_CTYPES[d]
        except KeyError:
            raise CodegenError(f"CUDA codegen: dtype {d} has no CUDA C++ type") from None
    if d in VECTOR_CTYPES:
        return VECTOR_CTYPES[d]
    raise CodegenError(f"CUDA codegen: vector dtype {d} has no CUDA C++ value type")


def vector_carrier(dtype: str, lanes: int) -> str | None:
    """A type that moves ``lanes`` elements of ``dtype`` in one aligned access, or None."""
    vec = dt.with_lanes(dtype, lanes)
    if vec in VECTOR_CTYPES and vec != "float64x2":
        return VECTOR_CTYPES[vec]
    nbytes = dt.bits(dtype) * lanes // 8
    if dt.bits(dtype) < 8:
        return None
    return RAW_VECTOR_CTYPES.get(nbytes)


def float_literal(value: float, dtype: str) -> str:
    """A CUDA literal of ``value`` in float dtype ``dtype``."""
    e = dt.element(dtype)
    if e in ("float32", "float16", "bfloat16"):
        if math.isnan(value):
            lit = "__int_as_float(0x7fc00000)"
        elif math.isinf(value):
            lit = "__int_as_float(0x7f800000)" if value > 0 else "__int_as_float(0xff800000)"
        else:
            text = repr(float(np.float32(value)))
            if "e" not in text and "." not in text:
                text += ".0"
            lit = text + "f"
        if e == "float16":
            return f"__float2half({lit})"
        if e == "bfloat16":
            return f"__float2bfloat16({lit})"
        return lit
    if e == "float64":
        if math.isnan(value):
            return "__longlong_as_double(0x7ff8000000000000LL)"
        if math.isinf(value):
            bits = "0x7ff0000000000000LL" if value > 0 else "0xfff0000000000000ULL"
            return f"__longlong_as_double({bits})"
        text = repr(float(value))
        if "e" not in text and "." not in text:
            text += ".0"
        return text
    raise CodegenError(f"CUDA codegen: no float literal for dtype {dtype}")


def int_literal(value: int, dtype: str) -> str:
    """A CUDA literal of integer ``value`` in dtype ``dtype``."""
    e = dt.element(dtype)
    if e == "bool":
        return "true" if value else "false"
    if e == "int64":
        if value == -(2**63):
            return "(-9223372036854775807LL - 1)"
        return f"{value}LL"
    if e == "uint64":
        return f"{value}ULL"
    if e == "uint32":
        return f"{value}u"
    if e == "int32" and value == -(2**31):
        return "(-2147483647 - 1)"
    if e in ("int32",):
        return str(value)
    return f"(({SCALAR_CTYPES[e]}){value})"


# Unary/binary math intrinsics for float32 and float64. float16/bfloat16 arguments are
# computed in float32 and converted back (precise, and defined for every function).
# ``round`` rounds halfway cases away from zero (roundf), as the CPU executor and TVM do;
# rintf (to even) disagreed with the executor on every x.5 (found by the host printer check).
MATH_F32 = {
    "exp": "expf", "exp2": "exp2f", "log": "logf", "log2": "log2f", "log1p": "log1pf",
    "sqrt": "sqrtf", "rsqrt": "rsqrtf", "tanh": "tanhf", "fabs": "fabsf", "floor": "floorf",
    "ceil": "ceilf", "round": "roundf", "trunc": "truncf", "sin": "sinf", "cos": "cosf",
    "tan": "tanf", "erf": "erff", "pow": "powf", "fma": "fmaf",
}  # fmt: skip
MATH_F64 = {
    "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log1p": "log1p",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh", "fabs": "fabs", "floor": "floor",
    "ceil": "ceil", "round": "round", "trunc": "trunc", "sin": "sin", "cos": "cos",
    "tan": "tan", "erf": "erf", "pow": "pow", "fma": "fma",
}  # fmt: skip
