"""Expression part of the IR -> C translation used by the CPU reference executor.

Vector expressions (``Ramp``, ``Broadcast``, loads with a ``Ramp`` index, lane-wise arithmetic)
are scalarized: :meth:`ExprEmitter.expr` takes the lane to produce, and scalar children ignore
it. Every subexpression appears once in the output (helpers such as ``lir_min_int32_t`` take
their operands as arguments), so nested expressions never blow up exponentially.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from loopir.errors import CodegenError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
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
from loopir.runtime.c_types import const_c, expr_ctype, op_result, round_to, storage_ctype

__all__ = ["ExprEmitter", "BufferInfo", "c_ident"]

_CMP = {EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}
_ARITH = {Add: "+", Sub: "-", Mul: "*"}

# Unary math intrinsics: (float32 name, float64 name).
_MATH1 = {
    name: (name + "f", name)
    for name in (
        "exp", "exp2", "log", "log2", "log1p", "sqrt", "tanh", "fabs", "floor", "ceil",
        "round", "trunc", "sin", "cos", "tan", "erf",
    )
}  # fmt: skip


def c_ident(name: str) -> str:
    """``name`` made into a C identifier fragment."""
    s = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return s or "x"


def _balanced_outer(code: str) -> bool:
    """Whether the parenthesis opening ``code`` closes at its very end."""
    depth = 0
    for k, ch in enumerate(code):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return k == len(code) - 1
    return False


class BufferInfo:
    """How generated code reaches one buffer: its C pointer name, id (for error messages) and
    the C expressions of its extents and strides."""

    def __init__(self, buffer: Buffer, cname: str, bid: int, extents: list[str], strides: list[str]):
        self.buffer = buffer
        self.cname = cname
        self.id = bid
        self.extents = extents
        self.strides = strides


class ExprEmitter:
    """Translate expressions to C, given the variables and buffers in scope.

    Parameters
    ----------
    check_bounds
        Wrap every buffer index in a bounds check (``lir_ck``).
    """

    def __init__(self, check_bounds: bool) -> None:
        self.check_bounds = check_bounds
        self.vars: dict[Var, str] = {}
        self.buffers: dict[Buffer, BufferInfo] = {}

    # --- scopes ---------------------------------------------------------------------------
    def var_name(self, v: Var) -> str:
        try:
            return self.vars[v]
        except KeyError:
            raise CodegenError(
                f"cpu codegen: variable {v.name!r} is used outside the scope that defines it "
                "(not a loop var, block iter var, or symbolic size of a parameter shape)"
            ) from None

    def buffer_info(self, b: Buffer) -> BufferInfo:
        try:
            return self.buffers[b]
        except KeyError:
            raise CodegenError(
                f"cpu codegen: buffer {b.name!r} is accessed but is neither a parameter nor "
                "allocated (Allocate / block alloc_buffers) where it is used"
            ) from None

    # --- expressions ----------------------------------------------------------------------
    def expr(self, e: PrimExpr, lane: int = 0) -> str:
        """C code for lane ``lane`` of ``e`` (scalars ignore ``lane``)."""
        method = getattr(self, "_e_" + type(e).__name__, None)
        if method is None:
            for cls, op in _CMP.items():
                if isinstance(e, cls):
                    return f"({self._operand(e.a, lane)} {op} {self._operand(e.b, lane)})"
            raise CodegenError(
                f"cpu codegen: cannot translate expression node {type(e).__name__}: {e}"
            )
        return method(e, lane)

    def index64(self, e: PrimExpr, lane: int = 0) -> str:
        if isinstance(e, IntImm):
            return str(e.value)
        if isinstance(e, Var) and dt.lanes(e.dtype) == 1:
            return f"(int64_t){self.var_name(e)}"
        return f"((int64_t)({self.expr(e, lane)}))"

    def _e_Var(self, e: Var, lane: int) -> str:
        return self.var_name(e)

    def _e_IntImm(self, e: IntImm, lane: int) -> str:
        return const_c(e.value, e.dtype)

    def _e_FloatImm(self, e: FloatImm, lane: int) -> str:
        return const_c(e.value, e.dtype)

    def _e_StringImm(self, e: StringImm, lane: int) -> str:
        raise CodegenError(f"cpu codegen: string {e.value!r} used as a value")

    def _arith(self, e: Any, lane: int) -> str:
        op = _ARITH[type(e)]
        return op_result(e.dtype, f"{self._operand(e.a, lane)} {op} {self._operand(e.b, lane)}")

    def _operand(self, e: PrimExpr, lane: int) -> str:
        """An operand: leaves and already-parenthesized code need no extra parentheses."""
        code = self.expr(e, lane)
        if isinstance(e, (Var, IntImm)) and not code.startswith("-"):
            return code
        return code if code.startswith("(") and _balanced_outer(code) else f"({code})"

    _e_Add = _e_Sub = _e_Mul = _arith

    def _e_Div(self, e: Div, lane: int) -> str:
        return op_result(e.dtype, f"{self._operand(e.a, lane)} / {self._operand(e.b, lane)}")

    def _floor_op(self, e: Any, lane: int, mod: bool) -> str:
        a, b = self.expr(e.a, lane), self.expr(e.b, lane)
        d = dt.element(e.dtype)
        if dt.is_float(d):
            f = "floor" if d == "float64" else "floorf"
            q = round_to(d, f"({a}) / ({b})")
            if d not in ("float32", "float64"):
                q = f"((float)({q}))"
            fl = round_to(d, f"{f}({q})")
            if not mod:
                return fl
            return round_to(d, f"({a}) - {round_to(d, f'({fl}) * ({b})')}")
        if dt.is_bool(d):
            raise CodegenError(f"cpu codegen: floor division of bool values: {e}")
        if dt.is_uint(d):
            fn = "lir_fmod_u" if mod else "lir_fdiv_u"
            return round_to(d, f"{fn}(err, (uint64_t)({a}), (uint64_t)({b}))")
        fn = "lir_fmod_s" if mod else "lir_fdiv_s"
        return round_to(d, f"{fn}(err, (int64_t)({a}), (int64_t)({b}))")

    def _e_FloorDiv(self, e: FloorDiv, lane: int) -> str:
        return self._floor_op(e, lane, mod=False)

    def _e_FloorMod(self, e: FloorMod, lane: int) -> str:
        return self._floor_op(e, lane, mod=True)

    def _minmax(self, e: Any, lane: int) -> str:
        is_min = isinstance(e, Min)
        a, b = self.expr(e.a, lane), self.expr(e.b, lane)
        d = dt.element(e.dtype)
        if d == "float64":
            return f"{'fmin' if is_min else 'fmax'}({a}, {b})"
        if dt.is_float(d):
            return round_to(d, f"{'fminf' if is_min else 'fmaxf'}((float)({a}), (float)({b}))")
        fn = "lir_min" if is_min else "lir_max"
        if d == "bool":
            return f"((int){fn}_uint8_t((uint8_t)({a}), (uint8_t)({b})))"
        return f"{fn}_{expr_ctype(d)}({a}, {b})"

    _e_Min = _e_Max = _minmax

    def _e_And(self, e: And, lane: int) -> str:
        return f"(({self.expr(e.a, lane)}) && ({self.expr(e.b, lane)}))"

    def _e_Or(self, e: Or, lane: int) -> str:
        return f"(({self.expr(e.a, lane)}) || ({self.expr(e.b, lane)}))"

    def _e_Not(self, e: Not, lane: int) -> str:
        return f"(!({self.expr(e.a, lane)}))"

    def _e_Select(self, e: Select, lane: int) -> str:
        # C's ?: evaluates only the chosen branch, so a guarded out-of-bounds load in the other
        # branch (padding) is never performed, let alone reported.
        c = self.expr(e.condition, lane)
        return f"(({c}) ? ({self.expr(e.true_value, lane)}) : ({self.expr(e.false_value, lane)}))"

    def _e_Cast(self, e: Cast, lane: int) -> str:
        src = dt.element(e.value.dtype)
        dst = dt.element(e.dtype)
        v = self.expr(e.value, lane)
        if src == dst:
            return v
        if dst == "bfloat16":
            return f"lir_bf16r((float)({v}))"
        return round_to(dst, v)

    def _e_Ramp(self, e: Ramp, lane: int) -> str:
        t = expr_ctype(e.base.dtype)
        base, stride = self.expr(e.base), self.expr(e.stride)
        return round_to(e.base.dtype, f"({t})({base}) + ({t})({lane}) * ({stride})")

    def _e_Broadcast(self, e: Broadcast, lane: int) -> str:
        return self.expr(e.value, lane)

    def _e_BufferLoad(self, e: BufferLoad, lane: int) -> str:
        info = self.buffer_info(e.buffer)
        ref = f"{info.cname}[{self.flat_index(info, e.indices, lane, store=False)}]"
        d = dt.element(e.buffer.dtype)
        if d == "bfloat16":
            return f"lir_bf16_to_f32({ref})"
        if d == "bool":
            return f"((int)({ref}))"
        return ref

    def _e_Call(self, e: Call, lane: int) -> str:
        op = e.op
        if op == "tvm_storage_sync":  # a barrier: sequential execution needs none
            return "0"
        if op not in _MATH1 and op not in ("isnan", "rsqrt", "sigmoid", "pow", "fma"):
            raise CodegenError(f"cpu codegen: no C translation for intrinsic {op!r} in {e}")
        args = [self.expr(a, lane) for a in e.args]
        d = dt.element(e.dtype)
        adt = dt.element(e.args[0].dtype) if e.args else d
        if op == "isnan":
            if not dt.is_float(adt):
                return "0"
            return f"isnan({args[0] if adt == 'float64' else f'(float)({args[0]})'})"
        if not dt.is_float(d):
            if op == "fabs" and dt.is_int(d):
                return round_to(d, f"lir_abs_{expr_ctype(d)}({args[0]})")
            raise CodegenError(
                f"cpu codegen: intrinsic {op!r} on non-float dtype {e.dtype} is not supported: {e}"
            )
        dbl = d == "float64"
        wide = args if dbl else [f"(float)({a})" for a in args]
        sfx = "" if dbl else "f"
        if op in _MATH1:
            code = f"{_MATH1[op][1 if dbl else 0]}({wide[0]})"
        elif op == "rsqrt":
            code = f"(1.0{sfx} / sqrt{sfx}({wide[0]}))"
        elif op == "sigmoid":
            code = f"(1.0{sfx} / (1.0{sfx} + exp{sfx}(-({wide[0]}))))"
        elif op == "pow":
            code = f"pow{sfx}({wide[0]}, {wide[1]})"
        elif op == "fma":
            code = f"fma{sfx}({wide[0]}, {wide[1]}, {wide[2]})"
        else:  # pragma: no cover - excluded by the check at the top
            raise CodegenError(f"cpu codegen: no C translation for intrinsic {op!r} in {e}")
        return code if d in ("float32", "float64") else round_to(d, code)

    # --- buffer addressing ------------------------------------------------------------------
    def flat_index(
        self, info: BufferInfo, indices: Sequence[PrimExpr], lane: int, store: bool
    ) -> str:
        """Row-major (or strided) element offset, with per-dimension checks if enabled."""
        if len(indices) != len(info.extents):
            raise CodegenError(
                f"cpu codegen: buffer {info.buffer.name} has {len(info.extents)} dimensions but "
                f"is indexed with {len(indices)} indices"
            )
        if not indices:
            return "0"
        parts = []
        for d, idx in enumerate(indices):
            code = self.index64(idx, lane)
            if self.check_bounds:
                code = f"lir_ck(err, {code}, {info.extents[d]}, {info.id}, {d}, {int(store)})"
            parts.append(code)
        terms = [p if s == "1" else f"{p} * {s}" for p, s in zip(parts, info.strides)]
        return " + ".join(terms)

    def storage_value(self, buffer: Buffer, code: str) -> str:
        """``code`` (an expression value) converted to the buffer's storage type."""
        d = dt.element(buffer.dtype)
        if d == "bfloat16":
            return f"lir_f32_to_bf16({code})"
        return f"(({storage_ctype(d)})({code}))"
