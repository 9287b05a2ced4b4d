"""Expression nodes.

All nodes are immutable ``attrs`` classes compared by identity (``is``); use
[`loopir.structural_equal`][loopir.ir.equality.structural_equal] to compare structure. Python
operators build nodes: ``i * 32 + j`` is an [`Add`][loopir.ir.expr.Add], ``i < n`` an
[`LT`][loopir.ir.expr.LT]. Integer ``/`` is refused (use ``//`` for floor division, as in TIR);
``%`` is floor modulo.

``a == b`` builds an [`EQ`][loopir.ir.expr.EQ] node whose truth value is ``a is b`` (as in TVM), so
nodes still work as dict keys and in ``in`` tests.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, Union

import attrs

from loopir.ir import dtype as dt

if TYPE_CHECKING:
    from loopir.ir.buffer import Buffer

ExprLike = Union["PrimExpr", int, float, bool]
_B = TypeVar("_B", bound="BinaryOp")


def _is_expr(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, PrimExpr):
        raise TypeError(f"{attribute.name} must be a PrimExpr, got {type(value).__name__}: {value!r}")


def _expr_tuple(value: Any) -> tuple[PrimExpr, ...]:
    return tuple(convert(v) for v in value)


def _canonical_dtype(value: Any) -> str:
    return dt.canonical(value)


@functools.cache
def _scalar_int_or_bool(dtype: str) -> bool:
    return (dt.is_int(dtype) or dt.is_bool(dtype)) and dt.lanes(dtype) == 1


class PrimExpr:
    """Base class of every expression. Subclasses expose ``dtype``."""

    __slots__ = ()
    dtype: str

    # --- identity semantics -------------------------------------------------------------
    __hash__ = object.__hash__

    def __eq__(self, other: Any) -> EQ:  # type: ignore[override]
        return _binop(EQ, self, other)

    def __ne__(self, other: Any) -> NE:  # type: ignore[override]
        return _binop(NE, self, other)

    def same_as(self, other: Any) -> bool:
        return self is other

    # --- arithmetic -----------------------------------------------------------------------
    def __add__(self, o: ExprLike) -> PrimExpr:
        return _binop(Add, self, o)

    def __radd__(self, o: ExprLike) -> PrimExpr:
        return _binop(Add, o, self)

    def __sub__(self, o: ExprLike) -> PrimExpr:
        return _binop(Sub, self, o)

    def __rsub__(self, o: ExprLike) -> PrimExpr:
        return _binop(Sub, o, self)

    def __mul__(self, o: ExprLike) -> PrimExpr:
        return _binop(Mul, self, o)

    def __rmul__(self, o: ExprLike) -> PrimExpr:
        return _binop(Mul, o, self)

    def __truediv__(self, o: ExprLike) -> PrimExpr:
        return _div(self, o)

    def __rtruediv__(self, o: ExprLike) -> PrimExpr:
        return _div(o, self)

    def __floordiv__(self, o: ExprLike) -> PrimExpr:
        return _binop(FloorDiv, self, o)

    def __rfloordiv__(self, o: ExprLike) -> PrimExpr:
        return _binop(FloorDiv, o, self)

    def __mod__(self, o: ExprLike) -> PrimExpr:
        return _binop(FloorMod, self, o)

    def __rmod__(self, o: ExprLike) -> PrimExpr:
        return _binop(FloorMod, o, self)

    def __neg__(self) -> PrimExpr:
        return _binop(Sub, make_const(0, self.dtype), self)

    def __lt__(self, o: ExprLike) -> PrimExpr:
        return _binop(LT, self, o)

    def __le__(self, o: ExprLike) -> PrimExpr:
        return _binop(LE, self, o)

    def __gt__(self, o: ExprLike) -> PrimExpr:
        return _binop(GT, self, o)

    def __ge__(self, o: ExprLike) -> PrimExpr:
        return _binop(GE, self, o)

    # ``& | ~`` are logical on bool expressions and bitwise on integers (see _logic_or_bits);
    # ``^ << >>`` are bitwise (``^`` of two bools is their inequality)
    def __and__(self, o: ExprLike) -> PrimExpr:
        return _logic_or_bits("bitwise_and", self, o)

    def __rand__(self, o: ExprLike) -> PrimExpr:
        return _logic_or_bits("bitwise_and", o, self)

    def __or__(self, o: ExprLike) -> PrimExpr:
        return _logic_or_bits("bitwise_or", self, o)

    def __ror__(self, o: ExprLike) -> PrimExpr:
        return _logic_or_bits("bitwise_or", o, self)

    def __xor__(self, o: ExprLike) -> PrimExpr:
        return _logic_or_bits("bitwise_xor", self, o)

    def __rxor__(self, o: ExprLike) -> PrimExpr:
        return _logic_or_bits("bitwise_xor", o, self)

    def __lshift__(self, o: ExprLike) -> PrimExpr:
        return bitwise("shift_left", self, o)

    def __rlshift__(self, o: ExprLike) -> PrimExpr:
        return bitwise("shift_left", o, self)

    def __rshift__(self, o: ExprLike) -> PrimExpr:
        return bitwise("shift_right", self, o)

    def __rrshift__(self, o: ExprLike) -> PrimExpr:
        return bitwise("shift_right", o, self)

    def __invert__(self) -> PrimExpr:
        if dt.is_int(self.dtype):
            return Call(self.dtype, "bitwise_not", (self,))
        return Not(self)

    def __bool__(self) -> bool:
        raise TypeError(
            f"the truth value of a loopir expression is undefined ({self}); use "
            "loopir.ir.op.all_/any_ or te.if_then_else, not Python 'and'/'or'/'if'"
        )

    def astype(self, dtype: str) -> PrimExpr:
        """Cast to ``dtype`` (no node when the type already matches)."""
        d = dt.canonical(dtype)
        return self if d == self.dtype else Cast(d, self)

    def __repr__(self) -> str:
        try:
            from loopir.ir.printer import expr_to_str

            return expr_to_str(self)
        except Exception:  # pragma: no cover - repr must never raise
            return f"<{type(self).__name__}>"

    __str__ = __repr__


# --------------------------------------------------------------------------------------------
# Leaves
# --------------------------------------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class Var(PrimExpr):
    """A variable. Two Vars with the same name are different variables."""

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    dtype: str = attrs.field(default="int32", converter=_canonical_dtype)

    def copy_with_suffix(self, suffix: str) -> Var:
        return Var(self.name + suffix, self.dtype)


@attrs.frozen(eq=False, repr=False)
class IntImm(PrimExpr):
    """An integer (or bool) constant."""

    value: int = attrs.field(converter=int)
    dtype: str = attrs.field(default="int32", converter=_canonical_dtype)

    @dtype.validator
    def _check(self, _a: Any, value: str) -> None:
        if not _scalar_int_or_bool(value):
            raise TypeError(f"IntImm needs a scalar integer or bool dtype, got {value}")

    def __int__(self) -> int:
        # launch extents and shapes are IntImm: int(spec.grid[0]) should just work, as in TVM
        return self.value

    def __index__(self) -> int:
        return self.value


@attrs.frozen(eq=False, repr=False)
class FloatImm(PrimExpr):
    """A floating-point constant (may be +-inf)."""

    value: float = attrs.field(converter=float)
    dtype: str = attrs.field(default="float32", converter=_canonical_dtype)

    @dtype.validator
    def _check(self, _a: Any, value: str) -> None:
        if not dt.is_float(value) or dt.lanes(value) != 1:
            raise TypeError(f"FloatImm needs a scalar float dtype, got {value}")


@attrs.frozen(eq=False, repr=False)
class StringImm(PrimExpr):
    """A string argument of an intrinsic call (e.g. the scope of a storage sync)."""

    value: str = attrs.field(validator=attrs.validators.instance_of(str))
    dtype: str = attrs.field(default="handle", init=False)


# --------------------------------------------------------------------------------------------
# Binary operators
# --------------------------------------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class BinaryOp(PrimExpr):
    """``a <op> b`` with both operands of the same dtype."""

    a: PrimExpr = attrs.field(validator=_is_expr)
    b: PrimExpr = attrs.field(validator=_is_expr)
    # Cached operand dtype: recomputing it recursively made building long sums quadratic.
    _operand_dtype: str = attrs.field(init=False, repr=False, eq=False)
    symbol: ClassVar[str] = "?"

    def __attrs_post_init__(self) -> None:
        da, db = self.a.dtype, self.b.dtype
        if da != db:
            raise TypeError(f"{type(self).__name__} operands differ in dtype: {da} vs {db}")
        object.__setattr__(self, "_operand_dtype", da)

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self._operand_dtype


@attrs.frozen(eq=False, repr=False)
class Add(BinaryOp):
    """``a + b``."""

    symbol: ClassVar[str] = "+"


@attrs.frozen(eq=False, repr=False)
class Sub(BinaryOp):
    """``a - b``."""

    symbol: ClassVar[str] = "-"


@attrs.frozen(eq=False, repr=False)
class Mul(BinaryOp):
    """``a * b``."""

    symbol: ClassVar[str] = "*"


@attrs.frozen(eq=False, repr=False)
class Div(BinaryOp):
    """True division; floats only (integer division is FloorDiv)."""

    symbol: ClassVar[str] = "/"

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if not dt.is_float(self.a.dtype):
            raise TypeError(f"Div needs float operands, got {self.a.dtype}; use FloorDiv (//)")


@attrs.frozen(eq=False, repr=False)
class FloorDiv(BinaryOp):
    """Integer division rounding toward -inf (Python's ``//``)."""

    symbol: ClassVar[str] = "//"


@attrs.frozen(eq=False, repr=False)
class FloorMod(BinaryOp):
    """Remainder of FloorDiv; has the sign of the divisor (Python's ``%``)."""

    symbol: ClassVar[str] = "%"


@attrs.frozen(eq=False, repr=False)
class Min(BinaryOp):
    """``min(a, b)``."""

    symbol: ClassVar[str] = "min"


@attrs.frozen(eq=False, repr=False)
class Max(BinaryOp):
    """``max(a, b)``."""

    symbol: ClassVar[str] = "max"


@attrs.frozen(eq=False, repr=False)
class CmpOp(BinaryOp):
    """Comparison; the result is bool (with the operands' lanes)."""

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.with_lanes("bool", dt.lanes(self._operand_dtype))


@attrs.frozen(eq=False, repr=False)
class EQ(CmpOp):
    """``a == b``; its truth value is ``a is b`` (identity, as in TVM)."""

    symbol: ClassVar[str] = "=="

    def __bool__(self) -> bool:
        # Python calls bool() on == results in `in`, dict lookups and list.index: answer
        # identity, as TVM does, so expressions behave as hashable identity objects.
        return self.a is self.b


@attrs.frozen(eq=False, repr=False)
class NE(CmpOp):
    """``a != b``; its truth value is ``a is not b``."""

    symbol: ClassVar[str] = "!="

    def __bool__(self) -> bool:
        return self.a is not self.b


@attrs.frozen(eq=False, repr=False)
class LT(CmpOp):
    """``a < b``."""

    symbol: ClassVar[str] = "<"


@attrs.frozen(eq=False, repr=False)
class LE(CmpOp):
    """``a <= b``."""

    symbol: ClassVar[str] = "<="


@attrs.frozen(eq=False, repr=False)
class GT(CmpOp):
    """``a > b``."""

    symbol: ClassVar[str] = ">"


@attrs.frozen(eq=False, repr=False)
class GE(CmpOp):
    """``a >= b``."""

    symbol: ClassVar[str] = ">="


def _is_bool_expr(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    _is_expr(_inst, attribute, value)
    if not dt.is_bool(value.dtype):
        raise TypeError(f"{attribute.name} must be a bool expression, got dtype {value.dtype}: {value}")


@attrs.frozen(eq=False, repr=False)
class And(PrimExpr):
    """Logical and of two bool expressions."""

    a: PrimExpr = attrs.field(validator=_is_bool_expr)
    b: PrimExpr = attrs.field(validator=_is_bool_expr)
    symbol: ClassVar[str] = "and"

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.a.dtype


@attrs.frozen(eq=False, repr=False)
class Or(PrimExpr):
    """Logical or of two bool expressions."""

    a: PrimExpr = attrs.field(validator=_is_bool_expr)
    b: PrimExpr = attrs.field(validator=_is_bool_expr)
    symbol: ClassVar[str] = "or"

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.a.dtype


@attrs.frozen(eq=False, repr=False)
class Not(PrimExpr):
    """Logical negation."""

    a: PrimExpr = attrs.field(validator=_is_bool_expr)

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.a.dtype


# --------------------------------------------------------------------------------------------
# Other expressions
# --------------------------------------------------------------------------------------------


@attrs.frozen(eq=False, repr=False)
class Select(PrimExpr):
    """``true_value if condition else false_value``; both branches may be evaluated."""

    condition: PrimExpr = attrs.field(validator=_is_bool_expr)
    true_value: PrimExpr = attrs.field(validator=_is_expr)
    false_value: PrimExpr = attrs.field(validator=_is_expr)

    def __attrs_post_init__(self) -> None:
        if self.true_value.dtype != self.false_value.dtype:
            raise TypeError(
                f"Select branches differ in dtype: {self.true_value.dtype} vs {self.false_value.dtype}"
            )

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.true_value.dtype


@attrs.frozen(eq=False, repr=False)
class Cast(PrimExpr):
    """Convert ``value`` to ``dtype``."""

    dtype: str = attrs.field(converter=_canonical_dtype)
    value: PrimExpr = attrs.field(validator=_is_expr)


@attrs.frozen(eq=False, repr=False)
class BufferLoad(PrimExpr):
    """``buffer[indices]``. A [`Ramp`][loopir.ir.expr.Ramp] index loads a vector."""

    buffer: Buffer = attrs.field()
    indices: tuple[PrimExpr, ...] = attrs.field(converter=_expr_tuple)

    @buffer.validator
    def _check_buffer(self, _a: Any, value: Any) -> None:
        from loopir.ir.buffer import Buffer

        if not isinstance(value, Buffer):
            raise TypeError(f"BufferLoad.buffer must be a Buffer, got {type(value).__name__}")

    @property
    def dtype(self) -> str:  # type: ignore[override]
        n = max((dt.lanes(i.dtype) for i in self.indices), default=1)
        return dt.with_lanes(self.buffer.dtype, n)


@attrs.frozen(frozen=True)
class Intrinsic:
    """Description of a callable intrinsic: arity (None = variadic) and purity."""

    name: str
    arity: int | None
    pure: bool = True
    # "same": result has the dtype of the first argument; otherwise a fixed dtype string.
    result: str = "same"


INTRINSICS: dict[str, Intrinsic] = {}
"""The intrinsics a [`Call`][loopir.ir.expr.Call] may name, by name
([`register_intrinsic`][loopir.ir.expr.register_intrinsic] adds one)."""


def register_intrinsic(name: str, arity: int | None, pure: bool = True, result: str = "same") -> None:
    """Register an intrinsic so that [`Call`][loopir.ir.expr.Call] accepts it (backends must know it
    too)."""
    INTRINSICS[name] = Intrinsic(name, arity, pure, result)


for _n in (
    "exp", "exp2", "log", "log2", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid", "fabs",
    "floor", "ceil", "round", "trunc", "sin", "cos", "tan", "erf", "isnan",
):
    register_intrinsic(_n, 1, result="bool" if _n == "isnan" else "same")
register_intrinsic("pow", 2)
register_intrinsic("fma", 3)
# Fast-math forms of exp, log and float division (loopir.passes.fast_math): they mean the exact
# operation; the CUDA backend computes them with approximate instructions of documented error.
register_intrinsic("fast_exp", 1)
register_intrinsic("fast_log", 1)
register_intrinsic("fast_div", 2)
# Barrier among the threads sharing a storage scope ("shared" or "warp"): side effect.
register_intrinsic("tvm_storage_sync", 1, pure=False, result="int32")
# Cross-thread combine of a local accumulator (see loopir.ir.op.thread_allreduce).
register_intrinsic("loopir.thread_allreduce", 3, pure=False, result="int32")
# Asynchronous copies (loopir.passes.software_pipeline): close a group; wait for all but N.
register_intrinsic("loopir.cp_async_commit", 0, pure=False, result="int32")
register_intrinsic("loopir.cp_async_wait", 1, pure=False, result="int32")
# Tensor cores (sm_80+; builders and conventions in loopir.ir.op, layouts in
# loopir.tensor_intrin.layouts). Warp-collective: ptx_ldmatrix, ptx_mma. Per lane: mma_fill,
# mma_store.
register_intrinsic("ptx_ldmatrix", 4, pure=False, result="int32")
register_intrinsic("ptx_mma", 4, pure=False, result="int32")
# dst[lane] = src[lane ^ mask] across a warp (loopir.ir.op.ptx_shfl_xor). Warp-collective.
register_intrinsic("ptx_shfl_xor", 3, pure=False, result="int32")
# Warpgroup-collective (sm_90a): wgmma with shared operands, completed in the call.
register_intrinsic("ptx_wgmma", 4, pure=False, result="int32")
# Its asynchronous form (issue without the wait) and the wait that retires issued groups:
# ``ptx_wgmma_wait(pending, shape, a, b, c, ...)`` names what the groups it retires read.
register_intrinsic("ptx_wgmma_async", 4, pure=False, result="int32")
register_intrinsic("ptx_wgmma_wait", None, pure=False, result="int32")
# TMA and mbarriers (sm_90a; builders and conventions in loopir.ir.tma).
register_intrinsic("ptx_tma_load", None, pure=False, result="int32")
register_intrinsic("ptx_mbarrier_init", 2, pure=False, result="int32")
register_intrinsic("ptx_mbarrier_arrive_expect_tx", 2, pure=False, result="int32")
register_intrinsic("ptx_mbarrier_wait", 2, pure=False, result="int32")
register_intrinsic("ptx_mbarrier_arrive", 2, pure=False, result="int32")
# Warpgroup register reallocation (sm_90a, warp specialization): ``(count, increase)``.
register_intrinsic("ptx_setmaxnreg", 2, pure=False, result="int32")
register_intrinsic("mma_fill", 3, pure=False, result="int32")
register_intrinsic("mma_store", 4, pure=False, result="int32")


def _check_call_args(inst: Call, _a: Any, value: tuple[PrimExpr, ...]) -> None:
    spec = INTRINSICS.get(inst.op)
    if spec is None:
        raise ValueError(f"unknown intrinsic {inst.op!r}; known: {sorted(INTRINSICS)}")
    if spec.arity is not None and len(value) != spec.arity:
        raise TypeError(f"intrinsic {inst.op!r} takes {spec.arity} arguments, got {len(value)}")


@attrs.frozen(eq=False, repr=False)
class Call(PrimExpr):
    """A call of a registered intrinsic (see [`INTRINSICS`][loopir.ir.expr.INTRINSICS])."""

    dtype: str = attrs.field(converter=_canonical_dtype)
    op: str = attrs.field(validator=attrs.validators.instance_of(str))
    args: tuple[PrimExpr, ...] = attrs.field(converter=_expr_tuple, validator=_check_call_args)

    @property
    def pure(self) -> bool:
        return INTRINSICS[self.op].pure


@attrs.frozen(eq=False, repr=False)
class Ramp(PrimExpr):
    """The vector ``[base, base + stride, ..., base + (lanes-1)*stride]``."""

    base: PrimExpr = attrs.field(validator=_is_expr)
    stride: PrimExpr = attrs.field(validator=_is_expr)
    lanes: int = attrs.field(converter=int)

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.with_lanes(self.base.dtype, self.lanes)


@attrs.frozen(eq=False, repr=False)
class Broadcast(PrimExpr):
    """``value`` repeated ``lanes`` times."""

    value: PrimExpr = attrs.field(validator=_is_expr)
    lanes: int = attrs.field(converter=int)

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.with_lanes(self.value.dtype, self.lanes)


# --------------------------------------------------------------------------------------------
# Construction helpers used by the operators
# --------------------------------------------------------------------------------------------


def make_const(value: int | float | bool, dtype: str) -> PrimExpr:
    """A constant of ``dtype`` (float dtypes give FloatImm, others IntImm)."""
    d = dt.canonical(dtype)
    if dt.lanes(d) > 1:
        return Broadcast(make_const(value, dt.element(d)), dt.lanes(d))
    if dt.is_float(d):
        return FloatImm(float(value), d)
    return IntImm(int(value), d)


def _python_scalar(value: Any) -> Any:
    """A NumPy scalar (``np.int64(4)`` from an array's shape, ``np.float32(0.5)``) as the
    Python scalar it holds; anything else unchanged (NumPy is not imported for this)."""
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return value.item()
    return value


def convert(value: Any, dtype: str | None = None) -> PrimExpr:
    """Turn a Python (or NumPy) scalar into a constant (``dtype`` or int32/float32/bool by
    default)."""
    if isinstance(value, PrimExpr):
        return value
    value = _python_scalar(value)
    if isinstance(value, bool):
        return IntImm(int(value), dtype or "bool")
    if isinstance(value, int):
        return make_const(value, dtype or "int32")
    if isinstance(value, float):
        return make_const(value, dtype or "float32")
    raise TypeError(f"cannot convert {type(value).__name__} {value!r} to a loopir expression")


def _match(a: Any, b: Any) -> tuple[PrimExpr, PrimExpr]:
    """Convert operands, giving Python scalars the other side's type; promote mixed types."""
    if not isinstance(a, PrimExpr) and isinstance(b, PrimExpr):
        a = _scalar_like(a, b.dtype)
    elif not isinstance(b, PrimExpr) and isinstance(a, PrimExpr):
        b = _scalar_like(b, a.dtype)
    a, b = convert(a), convert(b)
    if a.dtype != b.dtype:
        target = dt.promote(a.dtype, b.dtype)
        a, b = a.astype(target), b.astype(target)
    return a, b


def _scalar_like(value: Any, dtype: str) -> PrimExpr:
    value = _python_scalar(value)
    if isinstance(value, float) and not dt.is_float(dtype):
        return convert(value)  # promotion will make both sides float
    return make_const(value, dtype)


def _binop(cls: type[_B], a: Any, b: Any) -> _B:
    x, y = _match(a, b)
    return cls(x, y)


def _div(a: Any, b: Any) -> PrimExpr:
    x, y = _match(a, b)
    if not dt.is_float(x.dtype):
        raise TypeError(
            f"'/' on integer expressions ({x} / {y}) is ambiguous; use '//' (floor division)"
        )
    return Div(x, y)


# --------------------------------------------------------------------------------------------
# Bitwise operations on integers: calls of TVM's names (``tir.bitwise_xor`` ...)
# --------------------------------------------------------------------------------------------

BITWISE_OPS: dict[str, str] = {
    "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "shift_left": "<<",
    "shift_right": ">>",
}  # fmt: skip
"""The binary bitwise intrinsics and their Python operators. Their operands are integers of one
dtype (lane-wise for vectors) and the result has that dtype; two's complement, as in C: ``>>`` of
a signed value is arithmetic (``a >> b == a // 2**b``), ``a << b == a * 2**b`` wrapped to the
dtype, and a shift amount must be in ``[0, bits)``. ``bitwise_not`` (``~``) is unary."""
for _n in BITWISE_OPS:
    register_intrinsic(_n, 2)
register_intrinsic("bitwise_not", 1)


def bitwise(op: str, a: Any, b: Any) -> Call:
    """The call ``op(a, b)`` of a [`BITWISE_OPS`][loopir.ir.expr.BITWISE_OPS] intrinsic, the operands
    matched as for arithmetic (a Python int takes the other side's dtype).

    Raises
    ------
    TypeError
        Unless both operands are integers.
    """
    x, y = _match(a, b)
    if not dt.is_int(x.dtype):
        raise TypeError(
            f"{op} ({BITWISE_OPS.get(op, op)}) needs integer operands, got {x.dtype}: {x}, {y}"
        )
    return Call(x.dtype, op, (x, y))


def _logic_or_bits(op: str, a: Any, b: Any) -> PrimExpr:
    """``a & b`` / ``a | b`` / ``a ^ b``: logical on two bool expressions (``^``: their
    inequality), bitwise on integers."""
    x, y = convert(a), convert(b)
    if dt.is_bool(x.dtype) and dt.is_bool(y.dtype):
        if op == "bitwise_and":
            return And(x, y)
        if op == "bitwise_or":
            return Or(x, y)
        return NE(x, y)
    return bitwise(op, a, b)
