"""Printing loopir expressions as CUDA C++: the CUDA dialect of
[`loopir.ir.c_printer.CPrinter`][loopir.ir.c_printer.CPrinter] (its literals, loads, casts, math
intrinsics, ``min``/``max`` and floor division)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from loopir.arith.bitwise import BITWISE
from loopir.codegen_cuda import analysis as an
from loopir.codegen_cuda.ctypes import MATH_F32, MATH_F64, SCALAR_CTYPES, float_literal, int_literal
from loopir.errors import CodegenError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.c_printer import P_ADD, P_ATOM, P_MUL, P_REL, P_UNARY, CPrinter, Printed
from loopir.ir.expr import (
    And,
    BinaryOp,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    Not,
    Or,
    PrimExpr,
    Ramp,
    Select,
    StringImm,
    Sub,
    Var,
)


class Scope(Protocol):
    """What the printer asks of the code around it (a kernel's emitter, the host program's)."""

    @property
    def env(self) -> Mapping[Var, an.Bound]:
        """Variable bounds: where both operands are provably >= 0, floor division is C's."""

    def var_name(self, v: Var) -> str: ...
    def buffer_name(self, b: Buffer) -> str: ...
    def flat_index(self, buffer: Buffer, indices: tuple[PrimExpr, ...]) -> PrimExpr: ...
    def note_dtype(self, dtype: str) -> None: ...


#: The fast-math intrinsics (loopir.passes.fast_math) as CUDA's approximate float32 functions.
FAST_F32 = {"fast_exp": "__expf", "fast_log": "__logf"}
#: log2(e): ``exp(x) = exp2(x * LOG2E)``
LOG2E = 1.4426950408889634
#: ``2^x`` as ``ex2.approx.ftz.f32`` (one ``MUFU.EX2``), the folded ``fast_exp``'s function in
#: kernels: CUDA's ``exp2f`` is the non-``ftz`` ``ex2.approx.f32``, which ptxas wraps in a range
#: fix-up for subnormal results (a compare and two predicated multiplies around the MUFU), as
#: ``__expf`` is not; a softmax's exponentials are where an attention kernel issues most
EX2_FTZ = "loopir_ex2"
FAST_MATH_HELPERS = f"""\
// 2^x, results under 2^-126 flushed to 0 (loopir.passes.fast_math: the folded fast_exp)
__device__ __forceinline__ float {EX2_FTZ}(float x) {{
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}}"""


def _is_lowp(dtype: str) -> bool:
    return dt.element(dtype) in ("float16", "bfloat16")


class ExprPrinter(CPrinter):
    """Prints expressions for one kernel (names and bounds come from the emitter)."""

    language = "CUDA codegen"

    def __init__(self, emitter: Scope) -> None:
        self.em = emitter
        self.uses_floor_helpers = False
        self.uses_ex2 = False  # the translation unit then defines EX2_FTZ
        self.device_code = True  # False: the host program's printer (no device helpers there)

    def _exp2_fold(self, x: PrimExpr) -> str | None:
        """``fast_exp(a * c - b)`` (``c`` a constant, or absent) as ``loopir_ex2(fmaf(a, c *
        LOG2E, -b * LOG2E))``: one FFMA and one ``ex2.approx.ftz`` where ``__expf`` takes a
        subtraction, a multiply and the same ``ex2.approx.ftz`` (``b``, a row maximum, is
        loop-invariant: its product is hoisted), as FlashAttention and Triton fold the softmax
        scale. The folded argument differs from ``(a * c - b) * LOG2E`` by rounding: at most
        ``2^-24 * LOG2E * (|b| + |a * c - b|)`` (see loopir.passes.fast_math). In host code
        ``exp2f``. None if ``x`` is not a difference."""
        if not isinstance(x, Sub) or x.dtype != "float32":
            return None
        a, scale = x.a, 1.0
        if isinstance(x.a, Mul) and isinstance(x.a.b, FloatImm):
            a, scale = x.a.a, x.a.b.value
        fn = EX2_FTZ if self.device_code else "exp2f"
        self.uses_ex2 |= self.device_code
        log2e = self.print(FloatImm(LOG2E, "float32"))
        if isinstance(a, FloatImm) and a.value == 0.0:  # exp(-b) (a SiLU's): one multiply
            return f"{fn}(-({self.print(x.b)}) * {log2e})"
        factor = self.print(FloatImm(scale * LOG2E, "float32"))
        return f"{fn}(fmaf({self.print(a)}, {factor}, -({self.print(x.b)}) * {log2e}))"

    def print_prec(self, e: PrimExpr) -> Printed:
        if dt.lanes(e.dtype) > 1 and not isinstance(e, (Ramp, Broadcast)):
            raise CodegenError(
                f"CUDA codegen: vector expression {e} ({e.dtype}) outside a vector store; "
                "only stores of Ramp-indexed values are vectorized"
            )
        self.em.note_dtype(e.dtype)
        return super().print_prec(e)

    def visit_Var(self, e: Var) -> Printed:
        return self.em.var_name(e), P_ATOM

    def visit_IntImm(self, e: IntImm) -> Printed:
        return self.literal(int_literal(e.value, e.dtype))

    def visit_FloatImm(self, e: FloatImm) -> Printed:
        return self.literal(float_literal(e.value, e.dtype))

    def visit_BufferLoad(self, e: BufferLoad) -> Printed:
        if any(dt.lanes(i.dtype) > 1 for i in e.indices):
            raise CodegenError(f"CUDA codegen: vector load {e} outside a vector store is not supported")
        idx = self.print(self.em.flat_index(e.buffer, e.indices))
        return f"{self.em.buffer_name(e.buffer)}[{idx}]", P_ATOM

    def visit_Min(self, e: Min) -> Printed:
        return self._minmax(e)

    def visit_Max(self, e: Max) -> Printed:
        return self._minmax(e)

    def visit_Cast(self, e: Cast) -> Printed:
        return self._cast(e), P_ATOM

    def visit_Call(self, e: Call) -> Printed:
        return self._call(e), P_ATOM

    def visit_StringImm(self, e: StringImm) -> Printed:
        raise CodegenError(f"CUDA codegen: string {e.value!r} outside an intrinsic call")

    # -- pieces ---------------------------------------------------------------------------
    def floor_op(self, e: FloorDiv | FloorMod, mod: bool) -> Printed:
        is_div = not mod
        if dt.is_float(e.dtype):
            fn = "floorf" if e.dtype == "float32" else "floor"
            a, b = self.wrap(e.a, P_MUL), self.wrap(e.b, P_MUL + 1)
            if _is_lowp(e.dtype):
                raise CodegenError(f"CUDA codegen: floor division on {e.dtype} is not supported")
            if is_div:
                return f"{fn}({a} / {b})", P_ATOM
            return f"{a} - {fn}({a} / {b}) * {b}", P_ADD
        if an.is_nonnegative(e.a, self.em.env) and an.is_positive(e.b, self.em.env):
            sym = "/" if is_div else "%"
            return f"{self.wrap(e.a, P_MUL)} {sym} {self.wrap(e.b, P_MUL + 1)}", P_MUL
        self.uses_floor_helpers = True
        fn = "loopir_floordiv" if is_div else "loopir_floormod"
        return f"{fn}({self.print(e.a)}, {self.print(e.b)})", P_ATOM

    def _minmax(self, e: Min | Max) -> Printed:
        is_min = isinstance(e, Min)
        d = dt.element(e.dtype)
        if d == "float32":
            fn = "fminf" if is_min else "fmaxf"
        elif d == "float64":
            fn = "fmin" if is_min else "fmax"
        elif _is_lowp(d):
            fn = "__hmin" if is_min else "__hmax"
        else:
            fn = "min" if is_min else "max"
        return f"{fn}({self.print(e.a)}, {self.print(e.b)})", P_ATOM

    def _cast(self, e: Cast) -> str:
        src, dst = e.value.dtype, e.dtype
        inner = self.print(e.value)
        if src == dst:
            return inner
        tname = SCALAR_CTYPES.get(dt.element(dst))
        if tname is None or dt.lanes(dst) != 1:
            raise CodegenError(f"CUDA codegen: cannot cast to {dst}")
        if dt.is_bool(dst):
            if _is_lowp(src):
                return f"((float){self.wrap(e.value, P_UNARY)} != 0.0f)"
            return f"({self.wrap(e.value, P_REL)} != 0)"
        if _is_lowp(src) or _is_lowp(dst):
            # conversions between half/bfloat16 and other types go through float, which
            # every one of them converts to and from without ambiguity
            if _is_lowp(src):
                inner = f"(float){self.wrap(e.value, P_UNARY)}"
                if dt.element(dst) == "float32":
                    return f"({inner})"
                return f"(({tname})({inner}))"
            if dt.element(src) != "float32":
                inner = f"(float){self.wrap(e.value, P_UNARY)}"
            return f"(({tname})({inner}))"
        return f"(({tname}){self.wrap(e.value, P_UNARY)})"

    def _call(self, e: Call) -> str:
        op = e.op
        if op == "tvm_storage_sync":
            raise CodegenError("CUDA codegen: storage_sync used as a value; use Evaluate")
        if op in BITWISE:
            return self._bitwise(e)
        d = dt.element(e.dtype) if op != "isnan" else dt.element(e.args[0].dtype)
        args = [self.print(a) for a in e.args]
        if op == "isnan":
            if _is_lowp(d):
                return f"isnan((float)({args[0]}))"
            if dt.is_float(d):
                return f"isnan({args[0]})"
            return "false"
        if not dt.is_float(d):
            if op == "fabs" and dt.is_int(d):
                return f"abs({args[0]})"
            raise CodegenError(f"CUDA codegen: intrinsic {op} on {d} is not supported")
        lowp = _is_lowp(d)
        table = MATH_F64 if d == "float64" else MATH_F32
        if lowp:
            args = [f"(float)({a})" for a in args]
        if op == "fast_div":  # loopir.passes.fast_math; exact in float64
            res = f"({args[0]} / {args[1]})" if d == "float64" else f"__fdividef({args[0]}, {args[1]})"
        elif op == "fast_exp" and d == "float32" and (folded := self._exp2_fold(e.args[0])) is not None:
            res = folded
        elif op in FAST_F32:
            res = f"{MATH_F64[op[5:]] if d == 'float64' else FAST_F32[op]}({args[0]})"
        elif op == "sigmoid":
            one = "1.0" if d == "float64" else "1.0f"
            res = f"({one} / ({one} + {table['exp']}(-({args[0]}))))"
        elif op in table:
            res = f"{table[op]}({', '.join(args)})"
        else:
            raise CodegenError(f"CUDA codegen: intrinsic {op!r} has no CUDA mapping")
        if lowp:
            conv = "__float2half" if d == "float16" else "__float2bfloat16"
            return f"{conv}({res})"
        return res

    def _bitwise(self, e: Call) -> str:
        """``& | ^ ~ >>`` as C++'s operators on the dtype's type; ``<<`` of a signed value
        through its unsigned type (no undefined behaviour for a negative one)."""
        d = dt.element(e.dtype)
        if not dt.is_int(d):
            raise CodegenError(f"CUDA codegen: bitwise intrinsic {e.op!r} on {e.dtype}: {e}")
        t = SCALAR_CTYPES[d]
        if e.op == "shift_left" and not dt.is_uint(d):
            a, b = self.print(e.args[0]), self.wrap(e.args[1], P_MUL)
            return f"(({t})(({SCALAR_CTYPES['u' + d]})({a}) << {b}))"
        text = self.bitwise_infix(e)[0]
        # C++ computes narrow integers as int: convert back; 32 and 64 bits keep their type
        return f"(({t})({text}))" if dt.bits(d) < 32 else f"({text})"


def lane_of(e: PrimExpr, i: int) -> PrimExpr:
    """Lane ``i`` of vector expression ``e`` as a scalar expression (scalars unchanged)."""
    if dt.lanes(e.dtype) == 1:
        return e
    if isinstance(e, Ramp):
        if isinstance(e.stride, IntImm):
            off = e.stride.value * i
            return e.base if off == 0 else e.base + off
        return e.base + e.stride * i
    if isinstance(e, Broadcast):
        return e.value
    if isinstance(e, BufferLoad):
        return BufferLoad(e.buffer, tuple(lane_of(x, i) for x in e.indices))
    if isinstance(e, BinaryOp):
        return type(e)(lane_of(e.a, i), lane_of(e.b, i))
    if isinstance(e, (And, Or)):
        return type(e)(lane_of(e.a, i), lane_of(e.b, i))
    if isinstance(e, Not):
        return Not(lane_of(e.a, i))
    if isinstance(e, Select):
        return Select(lane_of(e.condition, i), lane_of(e.true_value, i), lane_of(e.false_value, i))
    if isinstance(e, Cast):
        return Cast(dt.element(e.dtype), lane_of(e.value, i))
    if isinstance(e, Call):
        return Call(dt.element(e.dtype), e.op, tuple(lane_of(a, i) for a in e.args))
    raise CodegenError(f"CUDA codegen: cannot split vector expression {type(e).__name__} {e}")
