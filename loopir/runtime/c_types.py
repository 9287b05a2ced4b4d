"""C types, constants and the runtime prelude of the CPU reference executor.

Every loopir scalar dtype has an *expression* C type (what values have while computed) and a
*storage* C type (what buffers hold):

==========  ===============  ==============  =============================================
dtype       expression type  storage type    notes
==========  ===============  ==============  =============================================
bool        int              uint8_t         numpy bools are one byte
int*/uint*  <stdint type>    <stdint type>   compiled with -fwrapv: overflow wraps
float16     _Float16         _Float16        every result cast back: rounded per operation
bfloat16    float            uint16_t        values kept bf16-exact by rounding (RNE) after
                                             every operation; stored as the top 16 bits
float32     float            float
float64     double           double
==========  ===============  ==============  =============================================
"""

from __future__ import annotations

import math
import struct

import numpy as np

from loopir.errors import CodegenError
from loopir.ir import dtype as dt

__all__ = ["expr_ctype", "storage_ctype", "round_to", "op_result", "storage_bytes", "const_c", "PRELUDE", "ERR_FIELDS"]

_INT_CTYPES = {
    "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
}  # fmt: skip

# Layout of the int64 error record the generated code fills (first error wins).
ERR_FIELDS = ("code", "id", "dim", "value", "extent", "is_store", "lo")
ERR_OOB, ERR_DIV_ZERO, ERR_ITER_DOMAIN, ERR_ALLOC = 1, 2, 3, 4


def _scalar(dtype: str, what: str) -> str:
    e = dt.element(dtype)
    if e not in dt.SCALAR_BITS:
        raise CodegenError(f"cpu codegen: unsupported dtype {dtype!r} in {what}")
    return e


def expr_ctype(dtype: str) -> str:
    """C type of a computed value of (the element type of) ``dtype``."""
    e = _scalar(dtype, "an expression")
    if e == "bool":
        return "int"
    if e in _INT_CTYPES:
        return _INT_CTYPES[e]
    return {"float16": "_Float16", "bfloat16": "float", "float32": "float", "float64": "double"}[e]


def storage_ctype(dtype: str) -> str:
    """C type of one buffer element of ``dtype``."""
    e = _scalar(dtype, "a buffer")
    if e == "bool":
        return "uint8_t"
    if e == "bfloat16":
        return "uint16_t"
    return expr_ctype(e)


def storage_bytes(dtype: str) -> int:
    """Bytes of one stored element of ``dtype``."""
    return 1 if dt.element(dtype) == "bool" else dt.bits(dtype) // 8


# C evaluates these types in themselves (no promotion to int or float), so an arithmetic
# result already has the right type and, with -fwrapv, the right wrap-around.
_NATIVE_ARITH = ("int32", "int64", "uint32", "uint64", "float32", "float64")


def op_result(dtype: str, code: str) -> str:
    """The result of an arithmetic operation of ``dtype``, rounded/wrapped when C promoted it."""
    if dt.element(dtype) in _NATIVE_ARITH:
        return f"({code})"
    return round_to(dtype, code)


def round_to(dtype: str, code: str) -> str:
    """``code`` (a C expression of a wider or equal type) rounded/wrapped to ``dtype``."""
    e = dt.element(dtype)
    if e == "bfloat16":
        return f"lir_bf16r({code})"
    if e == "bool":
        return f"(({code}) != 0)"
    return f"(({expr_ctype(e)})({code}))"


def _bf16_round(value: float) -> float:
    """``value`` rounded to bfloat16 (through float32, as the C side does)."""
    if math.isnan(value) or math.isinf(value):
        return value
    bits = struct.unpack("<I", struct.pack("<f", float(np.float32(value))))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    rounded: float = struct.unpack("<f", struct.pack("<I", bits))[0]
    return rounded


def const_c(value: float | int, dtype: str) -> str:
    """A C expression of type :func:`expr_ctype` (``dtype``) holding ``value`` exactly."""
    e = dt.element(dtype)
    if e == "bool":
        return "1" if value else "0"
    if e in _INT_CTYPES:
        iv = int(value)
        if e == "uint64":
            return f"UINT64_C({iv})"
        if iv == -(2**63):
            return "(-INT64_C(9223372036854775807) - 1)"
        if e == "int64":
            return f"INT64_C({iv})"
        if e == "int32":  # a plain literal is an int, which is int32_t on every target here
            return str(iv) if iv != -(2**31) else "(-2147483647 - 1)"
        return f"(({_INT_CTYPES[e]}){iv})"
    v = float(value)
    if e == "bfloat16":
        v = _bf16_round(v)
    if math.isnan(v):
        lit = "((double)NAN)"
    elif math.isinf(v):
        lit = "((double)INFINITY)" if v > 0 else "(-(double)INFINITY)"
    else:
        lit = v.hex()  # C99 hexadecimal literal: exact, no decimal round trip
    return f"(({expr_ctype(e)})({lit}))"


def _int_helpers() -> str:
    out = []
    for t in _INT_CTYPES.values():
        out.append(f"static inline {t} lir_min_{t}({t} a, {t} b) {{ return a < b ? a : b; }}")
        out.append(f"static inline {t} lir_max_{t}({t} a, {t} b) {{ return a > b ? a : b; }}")
        # unsigned: the identity; signed: wraps for the minimum value, like CUDA's abs
        neg = "a" if t.startswith("u") else f"({t})(a < 0 ? 0 - (uint64_t)a : (uint64_t)a)"
        out.append(f"static inline {t} lir_abs_{t}({t} a) {{ return {neg}; }}")
    return "\n".join(out)


PRELUDE = r"""/* Generated by loopir's CPU reference executor. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* ---- bfloat16: the top 16 bits of a float32, rounded to nearest even ---- */
static inline float lir_bf16_to_f32(uint16_t b) {
  uint32_t u = ((uint32_t)b) << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline uint16_t lir_f32_to_bf16(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float lir_bf16r(float f) { return lir_bf16_to_f32(lir_f32_to_bf16(f)); }

/* ---- error record: code, id, dim, value, extent, is_store, lo (first error wins) ---- */
static inline void lir_fail(int64_t* err, int64_t code, int64_t id, int64_t dim, int64_t value,
                            int64_t extent, int64_t st, int64_t lo) {
  if (err[0]) return;
  err[0] = code; err[1] = id; err[2] = dim; err[3] = value; err[4] = extent; err[5] = st;
  err[6] = lo;
}
/* Bounds check of one index: returns it, or records the error and returns 0 (a safe
   element) so execution can wind down without touching memory outside the buffer. */
static inline int64_t lir_ck(int64_t* err, int64_t i, int64_t n, int64_t id, int64_t dim,
                             int64_t st) {
  if (__builtin_expect(i >= 0 && i < n, 1)) return i;
  lir_fail(err, 1, id, dim, i, n, st, 0);
  return 0;
}
static inline void lir_dom(int64_t* err, int64_t v, int64_t lo, int64_t ext, int64_t id,
                           int64_t k) {
  if (__builtin_expect(v >= lo && v < lo + ext, 1)) return;
  lir_fail(err, 3, id, k, v, ext, 0, lo);
}
/* Fresh allocations are filled with 0xFF bytes (NaN for every float type) so that reading
   memory nobody wrote shows up in results instead of passing by luck. */
static inline void* lir_alloc(int64_t* err, int64_t nbytes, int64_t id) {
  void* p = malloc(nbytes > 0 ? (size_t)nbytes : 1);
  if (!p) { lir_fail(err, 4, id, 0, nbytes, 0, 0, 0); return NULL; }
  memset(p, 0xFF, nbytes > 0 ? (size_t)nbytes : 1);
  return p;
}

/* ---- floor division / modulo (round toward -inf); division by zero is reported ---- */
static inline int64_t lir_fdiv_s(int64_t* err, int64_t a, int64_t b) {
  if (__builtin_expect(b == 0, 0)) { lir_fail(err, 2, 0, 0, a, 0, 0, 0); return 0; }
  if (b == -1) return (int64_t)(0ULL - (uint64_t)a); /* INT64_MIN / -1 traps on x86 */
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}
static inline int64_t lir_fmod_s(int64_t* err, int64_t a, int64_t b) {
  if (__builtin_expect(b == 0, 0)) { lir_fail(err, 2, 0, 0, a, 0, 0, 0); return 0; }
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
static inline uint64_t lir_fdiv_u(int64_t* err, uint64_t a, uint64_t b) {
  if (__builtin_expect(b == 0, 0)) { lir_fail(err, 2, 0, 0, (int64_t)a, 0, 0, 0); return 0; }
  return a / b;
}
static inline uint64_t lir_fmod_u(int64_t* err, uint64_t a, uint64_t b) {
  if (__builtin_expect(b == 0, 0)) { lir_fail(err, 2, 0, 0, (int64_t)a, 0, 0, 0); return 0; }
  return a % b;
}
""" + _int_helpers() + "\n"
