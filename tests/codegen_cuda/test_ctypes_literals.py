"""CUDA literals of every dtype (loopir/codegen_cuda/ctypes.py), as text.

Their values are checked by compiling them (tests/codegen_cuda/test_printer_host.py); this
pins the spelling of the special cases: NaN, infinities, fp16/bf16 conversions, int64 limits.
"""

from __future__ import annotations

import pytest

from loopir.codegen_cuda.ctypes import ctype, float_literal, int_literal, vector_carrier
from loopir.errors import CodegenError


@pytest.mark.parametrize("value, dtype, text", [
    (float("nan"), "float32", "__int_as_float(0x7fc00000)"),
    (float("inf"), "float32", "__int_as_float(0x7f800000)"),
    (float("-inf"), "float32", "__int_as_float(0xff800000)"),
    (2.0, "float32", "2.0f"),
    (0.1, "float32", "0.10000000149011612f"),
    (1e30, "float32", "1.0000000150474662e+30f"),
    (1.5, "float16", "__float2half(1.5f)"),
    (float("nan"), "float16", "__float2half(__int_as_float(0x7fc00000))"),
    (-2.0, "bfloat16", "__float2bfloat16(-2.0f)"),
    (float("-inf"), "bfloat16", "__float2bfloat16(__int_as_float(0xff800000))"),
    (0.1, "float64", "0.1"),
    (3.0, "float64", "3.0"),
    (float("nan"), "float64", "__longlong_as_double(0x7ff8000000000000LL)"),
    (float("inf"), "float64", "__longlong_as_double(0x7ff0000000000000LL)"),
    (float("-inf"), "float64", "__longlong_as_double(0xfff0000000000000ULL)"),
])  # fmt: skip
def test_float_literals(value: float, dtype: str, text: str) -> None:
    assert float_literal(value, dtype) == text


@pytest.mark.parametrize("value, dtype, text", [
    (True, "bool", "true"), (0, "bool", "false"),
    (-(2**63), "int64", "(-9223372036854775807LL - 1)"), (2**63 - 1, "int64", "9223372036854775807LL"),
    (2**64 - 1, "uint64", "18446744073709551615ULL"), (7, "uint32", "7u"),
    (-(2**31), "int32", "(-2147483647 - 1)"), (-5, "int32", "-5"),
    (-128, "int8", "((signed char)-128)"), (65535, "uint16", "((unsigned short)65535)"),
])  # fmt: skip
def test_int_literals(value: int, dtype: str, text: str) -> None:
    assert int_literal(value, dtype) == text


def test_types_and_carriers() -> None:
    assert ctype("float16") == "half" and ctype("bfloat16x2") == "nv_bfloat162"
    assert vector_carrier("float32", 4) == "float4" and vector_carrier("int8", 4) == "unsigned int"
    assert vector_carrier("float64", 2) == "uint4"  # double2 loads are split; moved as bytes
    assert vector_carrier("int8", 3) is None
    with pytest.raises(CodegenError, match="float32x3 has no CUDA C"):
        ctype("float32x3")
    with pytest.raises(CodegenError, match="no float literal for dtype int32"):
        float_literal(1.0, "int32")
