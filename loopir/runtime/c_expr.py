"""Expression part of the IR -> C translation used by the CPU reference executor.

Vector expressions (``Ramp``, ``Broadcast``, loads with a ``Ramp`` index, lane-wise arithmetic)
are scalarized: :meth:`ExprEmitter.expr` takes the lane to produce, and scalar children ignore
it. Every subexpression appears once in the output (helpers such as ``lir_min_int32_t`` take
their operands as arguments), so nested expressions never blow up exponentially.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from loopir.arith.bitwise import BITWISE
from loopir.errors import CodegenError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.c_printer import P_ATOM, CPrinter, Printed
from loopir.ir.expr import (
    Add,
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
    PrimExpr,
    Ramp,
    Sub,
    Var,
)
from loopir.runtime.c_types import const_c, expr_ctype, op_result, round_to, storage_ctype

__all__ = ["ExprEmitter", "BufferInfo", "c_ident"]

# Unary math intrinsics: (float32 name, float64 name).
_MATH1 = {
    name: (name + "f", name)
    for name in (
        "exp", "exp2", "log", "log2", "log1p", "sqrt", "tanh", "fabs", "floor", "ceil",
        "round", "trunc", "sin", "cos", "tan", "erf",
    )
}  # fmt: skip


# Fast-math intrinsics (loopir.passes.fast_math) and the exact operation each one means.
_EXACT = {"fast_exp": "exp", "fast_log": "log"}


def c_ident(name: str) -> str:
    """``name`` made into a C identifier fragment."""
    s = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return s or "x"


class BufferInfo:
    """How generated code reaches one buffer: its C pointer name, id (for error messages) and
    the C expressions of its extents and strides."""

    def __init__(self, buffer: Buffer, cname: str, bid: int, extents: list[str], strides: list[str]):
        self.buffer = buffer
        self.cname = cname
        self.id = bid
        self.extents = extents
        self.strides = strides


class ExprEmitter(CPrinter):
    """Translate expressions to C, given the variables and buffers in scope: the CPU
    executor's dialect of :class:`loopir.ir.c_printer.CPrinter`.

    Arithmetic of the types C promotes (8- and 16-bit integers, float16, bfloat16) is
    rounded or wrapped back to its type after each operation; vector expressions are printed
    one lane at a time (``lane``, set by :meth:`expr`).

    Parameters
    ----------
    check_bounds
        Wrap every buffer index in a bounds check (``lir_ck``).
    """

    language = "cpu codegen"

    def __init__(self, check_bounds: bool) -> None:
        self.check_bounds = check_bounds
        self.vars: dict[Var, str] = {}
        self.buffers: dict[Buffer, BufferInfo] = {}
        self.lane = 0  # the vector lane being printed; scalar nodes ignore it

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
        if lane == self.lane:
            return self.print(e)
        outer, self.lane = self.lane, lane
        try:
            return self.print(e)
        finally:
            self.lane = outer

    def index64(self, e: PrimExpr, lane: int = 0) -> str:
        if isinstance(e, IntImm):
            return str(e.value)
        if isinstance(e, Var) and dt.lanes(e.dtype) == 1:
            return f"(int64_t){self.var_name(e)}"
        return f"((int64_t)({self.expr(e, lane)}))"

    def visit_Var(self, e: Var) -> Printed:
        return self.var_name(e), P_ATOM

    def visit_IntImm(self, e: IntImm) -> Printed:
        return self.literal(const_c(e.value, e.dtype))

    def visit_FloatImm(self, e: FloatImm) -> Printed:
        return self.literal(const_c(e.value, e.dtype))

    def _arith(self, e: Add | Sub | Mul | Div) -> Printed:
        return op_result(e.dtype, self.infix(e)[0]), P_ATOM

    visit_Add = visit_Sub = visit_Mul = visit_Div = _arith

    def floor_op(self, e: FloorDiv | FloorMod, mod: bool) -> Printed:
        a, b = self.print(e.a), self.print(e.b)
        d = dt.element(e.dtype)
        if dt.is_float(d):
            f = "floor" if d == "float64" else "floorf"
            q = round_to(d, f"({a}) / ({b})")
            if d not in ("float32", "float64"):
                q = f"((float)({q}))"
            fl = round_to(d, f"{f}({q})")
            if not mod:
                return fl, P_ATOM
            return round_to(d, f"({a}) - {round_to(d, f'({fl}) * ({b})')}"), P_ATOM
        if dt.is_bool(d):
            raise CodegenError(f"cpu codegen: floor division of bool values: {e}")
        if dt.is_uint(d):
            fn = "lir_fmod_u" if mod else "lir_fdiv_u"
            return round_to(d, f"{fn}(err, (uint64_t)({a}), (uint64_t)({b}))"), P_ATOM
        fn = "lir_fmod_s" if mod else "lir_fdiv_s"
        return round_to(d, f"{fn}(err, (int64_t)({a}), (int64_t)({b}))"), P_ATOM

    def _minmax(self, e: Min | Max) -> Printed:
        is_min = isinstance(e, Min)
        a, b = self.print(e.a), self.print(e.b)
        d = dt.element(e.dtype)
        if d == "float64":
            return f"{'fmin' if is_min else 'fmax'}({a}, {b})", P_ATOM
        if dt.is_float(d):
            return round_to(d, f"{'fminf' if is_min else 'fmaxf'}((float)({a}), (float)({b}))"), P_ATOM
        fn = "lir_min" if is_min else "lir_max"
        if d == "bool":
            return f"((int){fn}_uint8_t((uint8_t)({a}), (uint8_t)({b})))", P_ATOM
        return f"{fn}_{expr_ctype(d)}({a}, {b})", P_ATOM

    visit_Min = visit_Max = _minmax

    def visit_Cast(self, e: Cast) -> Printed:
        src = dt.element(e.value.dtype)
        dst = dt.element(e.dtype)
        if src == dst:
            return self.print_prec(e.value)
        v = self.print(e.value)
        if dst == "bfloat16":
            return f"lir_bf16r((float)({v}))", P_ATOM
        return round_to(dst, v), P_ATOM

    def visit_Ramp(self, e: Ramp) -> Printed:
        t = expr_ctype(e.base.dtype)
        base, stride = self.print(e.base), self.print(e.stride)
        return round_to(e.base.dtype, f"({t})({base}) + ({t})({self.lane}) * ({stride})"), P_ATOM

    def visit_Broadcast(self, e: Broadcast) -> Printed:
        return self.print_prec(e.value)

    def visit_BufferLoad(self, e: BufferLoad) -> Printed:
        info = self.buffer_info(e.buffer)
        ref = f"{info.cname}[{self.flat_index(info, e.indices, self.lane, store=False)}]"
        d = dt.element(e.buffer.dtype)
        if d == "bfloat16":
            return f"lir_bf16_to_f32({ref})", P_ATOM
        if d == "bool":
            return f"((int)({ref}))", P_ATOM
        return ref, P_ATOM

    def visit_Call(self, e: Call) -> Printed:
        return self._call(e), P_ATOM

    def _call(self, e: Call) -> str:
        op = e.op
        if op == "tvm_storage_sync":  # a barrier: sequential execution needs none
            return "0"
        if op in BITWISE:
            return self._bitwise(e)
        op = _EXACT.get(op, op)  # a fast-math form means the exact operation
        if op not in _MATH1 and op not in ("isnan", "rsqrt", "sigmoid", "pow", "fma", "fast_div"):
            raise CodegenError(f"cpu codegen: no C translation for intrinsic {op!r} in {e}")
        args = [self.print(a) for a in e.args]
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
        elif op == "fast_div":
            code = f"(({wide[0]}) / ({wide[1]}))"
        else:  # pragma: no cover - excluded by the check at the top
            raise CodegenError(f"cpu codegen: no C translation for intrinsic {op!r} in {e}")
        return code if d in ("float32", "float64") else round_to(d, code)

    def _bitwise(self, e: Call) -> str:
        """``& | ^ ~`` as C's operators, wrapped back to narrow types; shifts on 64-bit values
        (a left shift through unsigned: no undefined behaviour for negative values, the result
        wrapped to the dtype; a right shift of a signed value is arithmetic)."""
        d = dt.element(e.dtype)
        if not dt.is_int(d):
            raise CodegenError(f"cpu codegen: bitwise intrinsic {e.op!r} on {e.dtype}: {e}")
        if e.op not in ("shift_left", "shift_right"):
            return op_result(d, self.bitwise_infix(e)[0])
        a, b = self.print(e.args[0]), self.print(e.args[1])
        wide = "uint64_t" if dt.is_uint(d) else "int64_t"
        if e.op == "shift_left":
            return round_to(d, f"({wide})((uint64_t)({wide})({a}) << ({b}))")
        return round_to(d, f"({wide})({a}) >> ({b})")

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
