"""Expressions of scripts: Python's expression syntax read as IR, never evaluated by Python.

Literals stay Python values ("weak" constants) until they meet an IR expression, whose dtype
they then take (``x + 1`` with an int64 ``x`` adds ``T.int64(1)``), as the IR's own operators
do; two Python values combine in Python (``M // 4`` with ``M = 128`` from the enclosing module is
``32``). Names resolve to what the script defines (loop and iter vars, buffers, symbolic sizes),
then to the Python module and closure of a decorated function (constants, or IR objects built
in Python).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NoReturn

from loopir.ir import dtype as dt
from loopir.ir import op
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.equality import structural_equal
from loopir.ir.expr import (
    EQ,
    GE,
    GT,
    INTRINSICS,
    LE,
    LT,
    NE,
    Add,
    And,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    CmpOp,
    IntImm,
    Max,
    Min,
    Not,
    Or,
    PrimExpr,
    Ramp,
    Select,
    StringImm,
    _match,
    make_const,
)
from loopir.script.namespace import CONSTRUCTS, TNamespace, _Construct, _DType
from loopir.script.source import Source

__all__ = ["NS", "Evaluator", "is_weak"]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class NS:
    """A path into the ``T`` namespace (``T.axis.spatial`` is ``NS(("axis", "spatial"))``)."""

    __slots__ = ("path",)

    def __init__(self, path: tuple[str, ...]) -> None:
        self.path = path

    @property
    def name(self) -> str:
        return ".".join(self.path)


def is_weak(v: Any) -> bool:
    """A Python number (a literal, or a constant from the enclosing module)."""
    return isinstance(v, (bool, int, float)) and not isinstance(v, PrimExpr)


def _is_dtype(name: str) -> bool:
    try:
        return dt.canonical(name) == name
    except ValueError:
        return False


_ARITH: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.Pow: operator.pow,
}  # fmt: skip

_CMP: dict[type[ast.cmpop], tuple[Callable[[Any, Any], Any], type[CmpOp]]] = {
    ast.Lt: (operator.lt, LT), ast.LtE: (operator.le, LE), ast.Gt: (operator.gt, GT),
    ast.GtE: (operator.ge, GE), ast.Eq: (operator.eq, EQ), ast.NotEq: (operator.ne, NE),
}  # fmt: skip

_SYMBOL = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
    ast.Pow: "**", ast.MatMult: "@",
}  # fmt: skip

# Constructs that are statements or declarations, never values (a clearer error than "unknown").
_NOT_EXPRESSIONS = {
    "grid": "a for loop's iterator", "serial": "a for loop's iterator",
    "parallel": "a for loop's iterator", "vectorized": "a for loop's iterator",
    "unroll": "a for loop's iterator", "thread_binding": "a for loop's iterator",
    "block": "a with statement", "sblock": "a with statement", "init": "a with statement",
    "axis": "an assignment in a block", "reads": "a statement in a block",
    "writes": "a statement in a block", "where": "a statement in a block",
    "block_attr": "a statement in a block", "func_attr": "a statement of the function",
    "alloc_buffer": "an assignment", "sblock_alloc_buffer": "an assignment", "allocate": "an assignment or a with statement",
    "match_buffer": "an assignment of the function", "Buffer": "a parameter annotation",
    "handle": "a parameter annotation", "evaluate": "a statement", "Range": "an axis domain",
}  # fmt: skip


class Evaluator:
    """Evaluates script expressions to IR (or Python values) in nested name scopes.

    Parameters
    ----------
    src
        The source (for errors).
    env
        Python names visible to a decorated function (its module's globals and closure), or
        None for text without a module: then only ``T`` is known.
    """

    def __init__(self, src: Source, env: Mapping[str, Any] | None) -> None:
        self.src = src
        self.env = env
        self.frames: list[dict[str, Any]] = [{}]
        # called for a name found nowhere (the parser declares symbolic sizes this way)
        self.on_undefined: Callable[[str, ast.Name], Any] | None = None

    # --- scopes -----------------------------------------------------------------------------
    @contextmanager
    def scope(self) -> Iterator[dict[str, Any]]:
        self.frames.append({})
        try:
            yield self.frames[-1]
        finally:
            self.frames.pop()

    def define(self, name: str, value: Any) -> None:
        self.frames[-1][name] = value

    def lookup(self, name: str) -> tuple[bool, Any]:
        for frame in reversed(self.frames):
            if name in frame:
                return True, frame[name]
        if self.env is not None and name in self.env:
            return True, self.from_python(self.env[name])
        if name == "T":
            return True, NS(())
        return False, None

    def from_python(self, v: Any) -> Any:
        """A value of the enclosing Python module as the parser sees it."""
        if isinstance(v, TNamespace):
            return NS(())
        if isinstance(v, _DType):
            return NS((v.dtype,))
        if isinstance(v, _Construct):
            return NS(tuple(v._name.split(".")))
        if type(v).__module__ == "numpy" and getattr(v, "ndim", None) == 0:
            return v.item()
        return v

    # --- conversions ------------------------------------------------------------------------
    def fail(self, message: str, node: ast.AST | None) -> NoReturn:
        self.src.error(message, node)

    def to_expr(self, v: Any, node: ast.AST, dtype: str | None = None, what: str = "an expression") -> PrimExpr:
        """``v`` as an IR expression (a Python number becomes a constant of ``dtype``, or of
        int32 / float32 / bool)."""
        if isinstance(v, PrimExpr):
            return v
        if is_weak(v):
            if dtype is not None:
                return make_const(v, dtype)
            if isinstance(v, bool):
                return IntImm(int(v), "bool")
            if isinstance(v, int):
                return IntImm(v, "int32" if _INT32_MIN <= v <= _INT32_MAX else "int64")
            return make_const(v, "float32")
        return self.fail(f"expected {what}, got {_describe(v)}", node)

    def to_bool(self, v: Any, node: ast.AST) -> PrimExpr:
        e = self.to_expr(v, node, what="a condition")
        if not dt.is_bool(e.dtype):
            self.fail(f"expected a bool condition, got {e} of dtype {e.dtype}", node)
        return e

    def python_int(self, v: Any, node: ast.AST, what: str) -> int:
        if isinstance(v, IntImm) and not dt.is_bool(v.dtype):
            return v.value
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        return int(self.fail(f"{what} must be an integer constant, got {_describe(v)}", node))

    def string(self, v: Any, node: ast.AST, what: str) -> str:
        if isinstance(v, str):
            return v
        if isinstance(v, StringImm):
            return v.value
        return str(self.fail(f"{what} must be a string, got {_describe(v)}", node))

    def dtype(self, v: Any, node: ast.AST, what: str) -> str:
        if isinstance(v, NS) and len(v.path) == 1 and _is_dtype(v.path[0]):
            return v.path[0]
        name = self.string(v, node, what)
        try:
            return dt.canonical(name)
        except ValueError as e:
            return str(self.fail(f"{what}: {e}", node))

    # --- evaluation -------------------------------------------------------------------------
    def eval(self, node: ast.expr) -> Any:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            return self.fail(
                f"{type(node).__name__} expressions are not part of the script language", node
            )
        return method(node)

    def _Constant(self, node: ast.Constant) -> Any:
        if node.value is None or isinstance(node.value, (bool, int, float, str)):
            return node.value
        return self.fail(f"unsupported constant {node.value!r}", node)

    def _Name(self, node: ast.Name) -> Any:
        found, value = self.lookup(node.id)
        if found:
            return value
        if self.on_undefined is not None:
            return self.on_undefined(node.id, node)
        return self.fail(f"name {node.id!r} is not defined", node)

    def _Attribute(self, node: ast.Attribute) -> Any:
        base = self.eval(node.value)
        if isinstance(base, NS):
            return NS((*base.path, node.attr))
        if isinstance(base, Buffer) and node.attr in ("shape", "dtype", "scope", "strides", "ndim"):
            return getattr(base, node.attr)
        if isinstance(base, PrimExpr):
            if node.attr == "dtype":
                return base.dtype
            return self.fail(f"an expression has no attribute {node.attr!r} in a script", node)
        if isinstance(base, (Buffer, BufferRegion)):
            return self.fail(f"a buffer has no attribute {node.attr!r} in a script", node)
        try:
            return self.from_python(getattr(base, node.attr))
        except AttributeError:
            return self.fail(f"{_describe(base)} has no attribute {node.attr!r}", node)

    def _Tuple(self, node: ast.Tuple) -> tuple[Any, ...]:
        return tuple(self.eval(e) for e in node.elts)

    def _List(self, node: ast.List) -> list[Any]:
        return [self.eval(e) for e in node.elts]

    def _Dict(self, node: ast.Dict) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                self.fail("** in a dict is not part of the script language", v)
            key = self.eval(k)
            if not isinstance(key, (str, int, float, bool)):
                self.fail(f"dict keys must be constants, got {_describe(key)}", k)
            out[key] = self.eval(v)
        return out

    def _Subscript(self, node: ast.Subscript) -> Any:
        base = self.eval(node.value)
        if isinstance(base, Buffer):
            idx = self.indices(node.slice)
            for i, n in idx:
                if isinstance(i, slice):
                    self.fail("a load takes indices, not slices (slices belong in T.reads/T.writes)", n)
            if len(idx) != base.ndim:
                self.fail(f"buffer {base.name} has {base.ndim} dimensions, indexed with {len(idx)}", node)
            return BufferLoad(base, tuple(self.to_expr(i, n, what="an index") for i, n in idx))
        if isinstance(base, (tuple, list, str)):
            key = self.eval(node.slice)
            if not isinstance(key, int):
                self.fail(f"a Python sequence is indexed by an int, got {_describe(key)}", node.slice)
            try:
                return base[key]
            except IndexError:
                return self.fail(f"index {key} out of range", node.slice)
        return self.fail(f"{_describe(base)} cannot be indexed", node)

    def indices(self, node: ast.expr) -> list[tuple[Any, ast.AST]]:
        """Subscript entries with their AST nodes (slices stay ``slice`` objects of values)."""
        elts = node.elts if isinstance(node, ast.Tuple) else [node]
        out: list[tuple[Any, ast.AST]] = []
        for e in elts:
            if isinstance(e, ast.Slice):
                if e.step is not None:
                    self.fail("slices with a step are not supported", e)
                lo = None if e.lower is None else self.eval(e.lower)
                hi = None if e.upper is None else self.eval(e.upper)
                out.append((slice(lo, hi), e))
            else:
                out.append((self.eval(e), e))
        return out

    def _BinOp(self, node: ast.BinOp) -> Any:
        a, b = self.eval(node.left), self.eval(node.right)
        fn = _ARITH.get(type(node.op))
        sym = _SYMBOL.get(type(node.op), "?")
        if fn is None:
            return self.fail(f"operator {sym} is not part of the script language", node)
        if is_weak(a) and is_weak(b):
            try:
                return fn(a, b)
            except (ArithmeticError, TypeError, ValueError) as e:
                return self.fail(f"{a!r} {sym} {b!r}: {e}", node)
        x, y = self.operands(a, b, node, f"operator {sym}")
        if isinstance(node.op, ast.Pow):
            return self.fail("** is not an IR operator; use T.pow(x, y)", node)
        try:
            return fn(x, y)
        except (TypeError, ValueError) as e:
            return self.fail(f"operator {sym}: {e}", node)

    def operands(self, a: Any, b: Any, node: ast.AST, what: str) -> tuple[PrimExpr, PrimExpr]:
        """Two operands as expressions of one dtype (a Python number takes the other's)."""
        for v in (a, b):
            if not (isinstance(v, PrimExpr) or is_weak(v)):
                self.fail(f"{what}: expected an expression, got {_describe(v)}", node)
        try:
            return _match(a, b)
        except (TypeError, ValueError) as e:
            return self.fail(f"{what}: {e}", node)

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        v = self.eval(node.operand)
        if isinstance(node.op, ast.Not):
            return (not v) if is_weak(v) else Not(self.to_bool(v, node.operand))
        if not (is_weak(v) or isinstance(v, PrimExpr)):
            return self.fail(f"expected an expression, got {_describe(v)}", node.operand)
        try:
            if isinstance(node.op, ast.USub):
                return -v
            if isinstance(node.op, ast.UAdd):
                return v
            return ~v
        except TypeError as e:
            return self.fail(str(e), node)

    def _BoolOp(self, node: ast.BoolOp) -> Any:
        cls = And if isinstance(node.op, ast.And) else Or
        acc = self.eval(node.values[0])
        for n in node.values[1:]:
            v = self.eval(n)
            if is_weak(acc) and is_weak(v):
                acc = (acc and v) if cls is And else (acc or v)
            else:
                acc = cls(self.to_bool(acc, node.values[0]), self.to_bool(v, n))
        return acc

    def _Compare(self, node: ast.Compare) -> Any:
        left = self.eval(node.left)
        result: Any = None
        for cmp, right_node in zip(node.ops, node.comparators):
            right = self.eval(right_node)
            pair = _CMP.get(type(cmp))
            if pair is None:
                return self.fail(f"comparison {type(cmp).__name__} is not part of the script language", node)
            fn, cls = pair
            if is_weak(left) and is_weak(right):
                one: Any = fn(left, right)
            else:
                x, y = self.operands(left, right, node, "comparison")
                one = cls(x, y)
            if result is None:
                result = one
            elif is_weak(result) and is_weak(one):
                result = result and one
            else:
                result = And(self.to_bool(result, node), self.to_bool(one, node))
            left = right
        return result

    def _IfExp(self, node: ast.IfExp) -> Any:
        c = self.to_bool(self.eval(node.test), node.test)
        t, f = self.operands(self.eval(node.body), self.eval(node.orelse), node, "a ... if ... else ...")
        return Select(c, t, f)

    def _Call(self, node: ast.Call) -> Any:
        if (
            isinstance(node.func, ast.Name) and node.func.id == "float"
            and not self.lookup("float")[0] and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
        ):  # fmt: skip
            # float("inf"): how the printer writes a non-finite Python float (annotations)
            try:
                return float(node.args[0].value)
            except ValueError:
                return self.fail(f"float({node.args[0].value!r}) is not a number", node)
        fn = self.eval(node.func)
        if not isinstance(fn, NS):
            return self.fail(
                f"{ast.unparse(node.func)} is not a T construct: a script never calls Python "
                "functions (it is parsed, not run)", node.func
            )
        for a in node.args:
            if isinstance(a, ast.Starred):
                self.fail("*args is not part of the script language", a)
        return self.call(fn, node)

    # --- T calls ----------------------------------------------------------------------------
    def args(self, node: ast.Call) -> tuple[list[Any], dict[str, Any]]:
        args = [self.eval(a) for a in node.args]
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None:
                self.fail("**kwargs is not part of the script language", kw.value)
            kwargs[kw.arg] = self.eval(kw.value)
        return args, kwargs

    def call(self, fn: NS, node: ast.Call) -> Any:
        name = fn.name
        handler = _EXPR_CALLS.get(name)
        if handler is not None:
            return handler(self, node)
        if len(fn.path) == 1 and _is_dtype(name):
            return self.dtype_ctor(name, node)
        if name in INTRINSICS:
            args, kwargs = self.args(node)
            if kwargs:
                self.fail(f"T.{name} takes no keyword arguments", node)
            return self.intrinsic(name, None, args, node)
        head = fn.path[0] if fn.path else ""
        if head in _NOT_EXPRESSIONS:
            return self.fail(f"T.{name} is not an expression: it is {_NOT_EXPRESSIONS[head]}", node)
        return self.fail(
            f"T.{name} is not a construct, a dtype or a registered intrinsic "
            "(loopir.ir.register_intrinsic adds intrinsics)", node.func
        )

    def expect(self, node: ast.Call, n_min: int, n_max: int, kw: tuple[str, ...] = ()) -> tuple[list[Any], dict[str, Any]]:
        args, kwargs = self.args(node)
        name = ast.unparse(node.func)
        if not n_min <= len(args) <= n_max:
            want = str(n_min) if n_min == n_max else f"{n_min} to {n_max}"
            self.fail(f"{name} takes {want} positional arguments, got {len(args)}", node)
        for k in kwargs:
            if k not in kw:
                allowed = ", ".join(kw) or "none"
                self.fail(f"{name}: unexpected keyword argument {k!r} (allowed: {allowed})", node)
        return args, kwargs

    def dtype_ctor(self, name: str, node: ast.Call) -> PrimExpr:
        args, _ = self.expect(node, 0, 1)
        if not args:
            return self.fail(
                f"T.{name}() declares a symbolic size: write it as an assignment at the "
                f"function's top level (n = T.{name}())", node
            )
        v = args[0]
        if isinstance(v, str):
            try:
                return make_const(float(v), name)
            except ValueError:
                return self.fail(f"T.{name}({v!r}): not a number", node)
        if is_weak(v):
            if dt.is_bool(name) or dt.is_int(name):
                if isinstance(v, float) and not v.is_integer():
                    return self.fail(f"T.{name}({v!r}): not an integer", node)
                return make_const(int(v), name)
            return make_const(float(v), name)
        e = self.to_expr(v, node.args[0])
        return e.astype(name)

    def intrinsic(self, name: str, dtype: str | None, args: list[Any], node: ast.Call) -> PrimExpr:
        """A [`Call`][loopir.ir.expr.Call] of registered intrinsic ``name``."""
        float_dt = next((a.dtype for a in args if isinstance(a, PrimExpr) and dt.is_float(a.dtype)), None)
        conv: list[PrimExpr] = []
        for a, n in zip(args, node.args[len(node.args) - len(args):]):
            if isinstance(a, str):
                conv.append(StringImm(a))
            elif isinstance(a, float):
                conv.append(make_const(a, float_dt or "float32"))
            else:
                conv.append(self.to_expr(a, n, what=f"an argument of T.{name}"))
        spec = INTRINSICS[name]
        if dtype is None:
            dtype = spec.result if spec.result != "same" else (conv[0].dtype if conv else "int32")
        try:
            return Call(dtype, name, tuple(conv))
        except (TypeError, ValueError) as e:
            return self.fail(f"T.{name}: {e}", node)

    def bounds(self, lo: Any, hi: Any, node: ast.AST, hi_node: ast.AST | None) -> Range:
        """The Range printed as ``lo, hi`` (loops, axis domains) or ``lo:hi`` (regions).

        The inverse of the printer's ``range_end``: an end equal to ``lo + extent`` gives that
        extent; constant bounds give their difference; otherwise ``hi - lo``.
        """
        if is_weak(lo) and is_weak(hi):
            a = self.to_expr(lo, node)
            return Range(a, make_const(self.python_int(hi, node, "a bound") - self.python_int(lo, node, "a bound"), a.dtype))
        if is_weak(lo):
            lo = make_const(lo, self.to_expr(hi, hi_node or node).dtype)
        if is_weak(hi):
            hi = make_const(hi, self.to_expr(lo, node).dtype)
        lo_e, hi_e = self.to_expr(lo, node), self.to_expr(hi, hi_node or node)
        for e in (lo_e, hi_e):
            if not dt.is_int(e.dtype):
                self.fail(f"bounds must be integers, got {e} ({e.dtype})", node)
        if isinstance(lo_e, IntImm) and lo_e.value == 0:
            return Range(lo_e if lo_e.dtype == hi_e.dtype else make_const(0, hi_e.dtype), hi_e)
        if isinstance(lo_e, IntImm) and isinstance(hi_e, IntImm):
            return Range(lo_e, IntImm(hi_e.value - lo_e.value, hi_e.dtype))
        if isinstance(hi_e, Add) and structural_equal(hi_e.a, lo_e, map_free_vars=False):
            return Range(lo_e, hi_e.b)
        x, y = self.operands(hi_e, lo_e, node, "a range")
        return Range(lo_e, x - y)


def _describe(v: Any) -> str:
    if isinstance(v, NS):
        return f"T.{v.name}" if v.path else "T"
    if isinstance(v, Buffer):
        return f"buffer {v.name}"
    if isinstance(v, PrimExpr):
        return f"expression {v} ({v.dtype})"
    if isinstance(v, str):
        return f"string {v!r}"
    return f"{type(v).__name__} {v!r}" if not callable(v) else type(v).__name__


# --- handlers of the expression constructs --------------------------------------------------


def _cast_upper(ev: Evaluator, node: ast.Call) -> PrimExpr:
    args, _ = ev.expect(node, 2, 2)
    d = ev.dtype(args[0], node.args[0], "T.Cast's dtype")
    return Cast(d, ev.to_expr(args[1], node.args[1]))


def _cast_lower(ev: Evaluator, node: ast.Call) -> PrimExpr:
    args, kwargs = ev.expect(node, 1, 2, ("dtype",))
    d = ev.dtype(args[1] if len(args) > 1 else kwargs.get("dtype"), node, "T.cast's dtype")
    return ev.to_expr(args[0], node.args[0]).astype(d)


def _select(ev: Evaluator, node: ast.Call) -> PrimExpr:
    args, _ = ev.expect(node, 3, 3)
    c = ev.to_bool(args[0], node.args[0])
    t, f = ev.operands(args[1], args[2], node, ast.unparse(node.func))
    return Select(c, t, f)


def _minmax(cls: type[Min] | type[Max]) -> Callable[[Evaluator, ast.Call], PrimExpr]:
    def handler(ev: Evaluator, node: ast.Call) -> PrimExpr:
        args, _ = ev.expect(node, 2, 2)
        return cls(*ev.operands(args[0], args[1], node, ast.unparse(node.func)))

    return handler


def _ramp(ev: Evaluator, node: ast.Call) -> PrimExpr:
    args, _ = ev.expect(node, 3, 3)
    base, stride = ev.operands(args[0], args[1], node, "T.Ramp")
    return Ramp(base, stride, ev.python_int(args[2], node.args[2], "T.Ramp's lanes"))


def _broadcast(ev: Evaluator, node: ast.Call) -> PrimExpr:
    args, _ = ev.expect(node, 2, 2)
    value = ev.to_expr(args[0], node.args[0])
    return Broadcast(value, ev.python_int(args[1], node.args[1], "T.Broadcast's lanes"))


def _binary_fn(fn: Callable[[Any, Any], PrimExpr]) -> Callable[[Evaluator, ast.Call], PrimExpr]:
    def handler(ev: Evaluator, node: ast.Call) -> PrimExpr:
        args, _ = ev.expect(node, 2, 2)
        return fn(*ev.operands(args[0], args[1], node, ast.unparse(node.func)))

    return handler


def _abs(ev: Evaluator, node: ast.Call) -> PrimExpr:
    args, _ = ev.expect(node, 1, 1)
    return ev.intrinsic("fabs", None, args, node)


def _limit(fn: Callable[[str], Any]) -> Callable[[Evaluator, ast.Call], PrimExpr]:
    def handler(ev: Evaluator, node: ast.Call) -> PrimExpr:
        args, _ = ev.expect(node, 1, 1)
        d = ev.dtype(args[0], node.args[0], ast.unparse(node.func))
        return make_const(fn(d), d)

    return handler


def _call_intrin(ev: Evaluator, node: ast.Call) -> PrimExpr:
    args, _ = ev.expect(node, 2, 64)
    d = ev.dtype(args[0], node.args[0], "T.call_intrin's dtype")
    name = ev.string(args[1], node.args[1], "T.call_intrin's intrinsic name")
    if name not in INTRINSICS:
        ev.fail(f"T.call_intrin: {name!r} is not a registered intrinsic", node.args[1])
    return ev.intrinsic(name, d, args[2:], node)


_EXPR_CALLS: dict[str, Callable[[Evaluator, ast.Call], PrimExpr]] = {
    "Cast": _cast_upper, "cast": _cast_lower, "Select": _select, "if_then_else": _select,
    "min": _minmax(Min), "max": _minmax(Max), "Ramp": _ramp, "Broadcast": _broadcast,
    "floordiv": _binary_fn(op.floordiv), "floormod": _binary_fn(op.floormod),
    "ceildiv": _binary_fn(op.ceildiv), "abs": _abs,
    "min_value": _limit(dt.min_value), "max_value": _limit(dt.max_value),
    "call_intrin": _call_intrin,
}  # fmt: skip

assert set(_EXPR_CALLS) <= set(CONSTRUCTS)
assert set(_NOT_EXPRESSIONS) <= set(CONSTRUCTS)
