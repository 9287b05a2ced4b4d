"""Printing loopir expressions as CUDA C++ (precedence-aware, minimal parentheses)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopir.codegen_cuda import analysis as an
from loopir.codegen_cuda.ctypes import MATH_F32, MATH_F64, SCALAR_CTYPES, float_literal, int_literal
from loopir.errors import CodegenError
from loopir.ir import dtype as dt
from loopir.ir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    BinaryOp,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    Div,
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

if TYPE_CHECKING:
    from loopir.codegen_cuda.emitter import KernelEmitter

# C operator precedence (higher binds tighter).
P_ATOM = 100
P_UNARY = 90
P_MUL = 80
P_ADD = 70
P_REL = 60
P_EQ = 55
P_AND = 40
P_OR = 30
P_COND = 20

_BINARY = {
    Add: ("+", P_ADD),
    Sub: ("-", P_ADD),
    Mul: ("*", P_MUL),
    Div: ("/", P_MUL),
    LT: ("<", P_REL),
    LE: ("<=", P_REL),
    GT: (">", P_REL),
    GE: (">=", P_REL),
    EQ: ("==", P_EQ),
    NE: ("!=", P_EQ),
}


def _is_lowp(dtype: str) -> bool:
    return dt.element(dtype) in ("float16", "bfloat16")


class ExprPrinter:
    """Prints expressions for one kernel (names and bounds come from the emitter)."""

    def __init__(self, emitter: KernelEmitter) -> None:
        self.em = emitter
        self.uses_floor_helpers = False

    def print(self, e: PrimExpr) -> str:
        return self._p(e)[0]

    def _wrap(self, e: PrimExpr, min_prec: int) -> str:
        text, prec = self._p(e)
        return f"({text})" if prec < min_prec else text

    def _p(self, e: PrimExpr) -> tuple[str, int]:
        if dt.lanes(e.dtype) > 1 and not isinstance(e, (Ramp, Broadcast)):
            raise CodegenError(
                f"CUDA codegen: vector expression {e} ({e.dtype}) outside a vector store; "
                "only stores of Ramp-indexed values are vectorized"
            )
        self.em.note_dtype(e.dtype)
        if isinstance(e, Var):
            return self.em.var_name(e), P_ATOM
        if isinstance(e, IntImm):
            text = int_literal(e.value, e.dtype)
            return text, (P_UNARY if text.startswith("-") else P_ATOM)
        if isinstance(e, FloatImm):
            text = float_literal(e.value, e.dtype)
            return text, (P_UNARY if text.startswith("-") else P_ATOM)
        if isinstance(e, BufferLoad):
            if any(dt.lanes(i.dtype) > 1 for i in e.indices):
                raise CodegenError(
                    f"CUDA codegen: vector load {e} outside a vector store is not supported"
                )
            idx = self.print(self.em.flat_index(e.buffer, e.indices))
            return f"{self.em.buffer_name(e.buffer)}[{idx}]", P_ATOM
        if isinstance(e, (FloorDiv, FloorMod)):
            return self._floor(e)
        if isinstance(e, (Min, Max)):
            return self._minmax(e)
        op = _BINARY.get(type(e))
        if op is not None:
            assert isinstance(e, BinaryOp)
            sym, prec = op
            left = self._wrap(e.a, prec)
            right = self._wrap(e.b, prec + 1)  # keep the IR's association (float rounding)
            return f"{left} {sym} {right}", prec
        if isinstance(e, And):
            return f"{self._wrap(e.a, P_AND)} && {self._wrap(e.b, P_AND + 1)}", P_AND
        if isinstance(e, Or):
            return f"{self._wrap(e.a, P_OR)} || {self._wrap(e.b, P_OR + 1)}", P_OR
        if isinstance(e, Not):
            return f"!{self._wrap(e.a, P_UNARY)}", P_UNARY
        if isinstance(e, Select):
            c = self._wrap(e.condition, P_UNARY)  # parenthesised unless atomic, for reading
            t = self._wrap(e.true_value, P_OR)
            f = self._wrap(e.false_value, P_COND)
            return f"{c} ? {t} : {f}", P_COND
        if isinstance(e, Cast):
            return self._cast(e), P_ATOM
        if isinstance(e, Call):
            return self._call(e), P_ATOM
        if isinstance(e, StringImm):
            raise CodegenError(f"CUDA codegen: string {e.value!r} outside an intrinsic call")
        raise CodegenError(f"CUDA codegen: cannot print {type(e).__name__} {e}")

    # -- pieces ---------------------------------------------------------------------------
    def _floor(self, e: FloorDiv | FloorMod) -> tuple[str, int]:
        is_div = isinstance(e, FloorDiv)
        if dt.is_float(e.dtype):
            fn = "floorf" if e.dtype == "float32" else "floor"
            a, b = self._wrap(e.a, P_MUL), self._wrap(e.b, P_MUL + 1)
            if _is_lowp(e.dtype):
                raise CodegenError(f"CUDA codegen: floor division on {e.dtype} is not supported")
            if is_div:
                return f"{fn}({a} / {b})", P_ATOM
            return f"{a} - {fn}({a} / {b}) * {b}", P_ADD
        if an.is_nonnegative(e.a, self.em.env) and an.is_positive(e.b, self.em.env):
            sym = "/" if is_div else "%"
            return f"{self._wrap(e.a, P_MUL)} {sym} {self._wrap(e.b, P_MUL + 1)}", P_MUL
        self.uses_floor_helpers = True
        fn = "loopir_floordiv" if is_div else "loopir_floormod"
        return f"{fn}({self.print(e.a)}, {self.print(e.b)})", P_ATOM

    def _minmax(self, e: Min | Max) -> tuple[str, int]:
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
                return f"((float){self._wrap(e.value, P_UNARY)} != 0.0f)"
            return f"({self._wrap(e.value, P_REL)} != 0)"
        if _is_lowp(src) or _is_lowp(dst):
            # conversions between half/bfloat16 and other types go through float, which
            # every one of them converts to and from without ambiguity
            if _is_lowp(src):
                inner = f"(float){self._wrap(e.value, P_UNARY)}"
                if dt.element(dst) == "float32":
                    return f"({inner})"
                return f"(({tname})({inner}))"
            if dt.element(src) != "float32":
                inner = f"(float){self._wrap(e.value, P_UNARY)}"
            return f"(({tname})({inner}))"
        return f"(({tname}){self._wrap(e.value, P_UNARY)})"

    def _call(self, e: Call) -> str:
        op = e.op
        if op == "tvm_storage_sync":
            raise CodegenError("CUDA codegen: storage_sync used as a value; use Evaluate")
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
        if op == "sigmoid":
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
