"""The ``T`` namespace of scripts: ``from loopir.script import T``.

The parser reads a script's text and never runs it, so most members of ``T`` only name a
construct: calling one from Python raises. What Python does evaluate -- the decorator and the
parameter annotations (``A: T.Buffer((128, 128), "float32")``, evaluated when ``def`` runs)
-- works at run time. ``T.<dtype>`` (``T.float32(0)``, ``T.int64(n)``) and ``T.<intrinsic>``
are looked up by name, so dtypes and intrinsics registered later (``register_intrinsic``) are
covered too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loopir.errors import ScriptError
from loopir.ir import dtype as dt
from loopir.ir.expr import INTRINSICS, PrimExpr, Var, make_const

__all__ = ["T", "I", "TNamespace", "CONSTRUCTS", "BufferType"]

CONSTRUCTS: dict[str, str] = {
    # buffers and parameters
    "Buffer": "a parameter's type: ``A: T.Buffer((M, K), \"float32\")`` (also ``strides=``, ``scope=``)",
    "handle": "a parameter bound by ``T.match_buffer``",
    "match_buffer": "``A = T.match_buffer(a, shape, dtype)``: the buffer of handle parameter ``a``",
    "alloc_buffer": "``X = T.alloc_buffer(shape, dtype, scope=...)``: a block's (or the root's) buffer",
    "sblock_alloc_buffer": "TVM 0.27's name of ``T.alloc_buffer``",
    "allocate": "``X = T.allocate(shape, dtype, scope)``: lowered IR's allocation (the rest of the "
    "body is its scope; ``with T.allocate(...) as X:`` scopes it to the indented body)",
    # loops
    "grid": "``for i, j in T.grid(M, N)``: nested serial loops",
    "serial": "``T.serial(extent)`` / ``T.serial(begin, end)``: a loop (``annotations=`` allowed)",
    "parallel": "a parallel loop (CPU threads)",
    "vectorized": "a vectorized loop",
    "unroll": "an unrolled loop",
    "thread_binding": "``T.thread_binding(extent, thread=\"threadIdx.x\")``: a loop bound to a GPU thread axis",
    # blocks
    "block": "``with T.block(\"name\"):`` a block",
    "sblock": "TVM 0.27's name of ``T.block``",
    "init": "``with T.init():`` a reduction block's initialization",
    "axis": "``v = T.axis.spatial(dom, value)`` / ``T.axis.reduce`` / ``T.axis.remap(\"SSR\", [i, j, k])``",
    "reads": "``T.reads(A[vi, 0:4], ...)``: a block's read regions (inferred when absent)",
    "writes": "``T.writes(C[vi, vj])``: a block's write regions (inferred when absent)",
    "where": "``T.where(cond)``: a block's predicate",
    "block_attr": "``T.block_attr({...})``: a block's annotations",
    "func_attr": "``T.func_attr({...})``: the function's attributes",
    # statements and expressions
    "evaluate": "``T.evaluate(expr)``: evaluate an expression for its side effect",
    "if_then_else": "``T.if_then_else(cond, a, b)``: a select (both sides may be evaluated)",
    "Select": "``T.Select(cond, a, b)``: the same as ``T.if_then_else``",
    "Cast": "``T.Cast(\"float16\", x)``: a conversion",
    "cast": "``T.cast(x, \"float16\")``: a conversion (no node when ``x`` has that type)",
    "min": "``T.min(a, b)``",
    "max": "``T.max(a, b)``",
    "Ramp": "``T.Ramp(base, stride, lanes)``: a vector of indices",
    "Broadcast": "``T.Broadcast(value, lanes)``: a vector of one value",
    "floordiv": "``T.floordiv(a, b)``: the same as ``a // b``",
    "floormod": "``T.floormod(a, b)``: the same as ``a % b``",
    "ceildiv": "``T.ceildiv(a, b)``: ``(a + b - 1) // b``",
    "abs": "``T.abs(x)``: the ``fabs`` intrinsic",
    "min_value": "``T.min_value(\"float32\")``: the lowest value (-inf for floats)",
    "max_value": "``T.max_value(\"float32\")``: the highest value (+inf for floats)",
    "call_intrin": "``T.call_intrin(dtype, \"name\", *args)``: an intrinsic call with an explicit result type",
    "Range": "``T.Range(begin, end)``: a domain (``T.axis.spatial(T.Range(2, 8), v)``)",
}
"""Every construct of ``T`` besides dtypes and intrinsics, with what it writes."""

AXIS_KINDS = {"spatial": "spatial", "S": "spatial", "reduce": "reduce", "R": "reduce"}
"""``T.axis.<kind>`` names and the iteration kinds they declare."""


class BufferType:
    """What ``T.Buffer(shape, dtype)`` evaluates to in a parameter annotation at run time
    (the parser reads the annotation's text; this object only keeps ``def`` from failing)."""

    def __init__(self, shape: Any, dtype: str = "float32", **kwargs: Any) -> None:
        self.shape = shape
        self.dtype = dtype
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"T.Buffer({self.shape!r}, {self.dtype!r})"


class _Construct:
    """A construct that only means something inside a parsed function."""

    def __init__(self, name: str, doc: str) -> None:
        self._name = name
        self.__doc__ = doc

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ScriptError(
            f"T.{self._name} is only meaningful inside a @T.prim_func function: the parser reads "
            "the function's text, it never runs it"
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Construct(f"{self._name}.{name}", f"T.{self._name}.{name}")

    def __repr__(self) -> str:
        return f"<T.{self._name}>"


class _DType:
    """``T.float32`` and friends: a parameter annotation, a constant ``T.float32(0.5)``, a cast
    ``T.float16(x)``, or (no argument, assigned in the script) a symbolic size."""

    def __init__(self, name: str) -> None:
        self.dtype = name

    def __call__(self, value: Any = None) -> PrimExpr:
        if value is None:
            return Var("v", self.dtype)
        if isinstance(value, str):
            return make_const(float(value), self.dtype)
        if isinstance(value, PrimExpr):
            return value.astype(self.dtype)
        return make_const(value, self.dtype)

    def __repr__(self) -> str:
        return f"T.{self.dtype}"


class _Handle:
    def __repr__(self) -> str:
        return "T.handle"


def _is_dtype(name: str) -> bool:
    try:
        return dt.canonical(name) == name
    except ValueError:
        return False


class _BufferCtor:
    """``T.Buffer(shape, dtype)`` (or the older ``T.Buffer[shape, dtype]``) at run time."""

    __doc__ = CONSTRUCTS["Buffer"]

    def __call__(self, shape: Any, dtype: str = "float32", **kwargs: Any) -> BufferType:
        return BufferType(shape, dtype, **kwargs)

    def __getitem__(self, key: Any) -> BufferType:
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], str):
            return BufferType(key[0], key[1])
        return BufferType(key)

    def __repr__(self) -> str:
        return "T.Buffer"


class TNamespace:
    """The ``T`` of scripts. See [`loopir.script`][loopir.script] for the language."""

    handle = _Handle()
    Buffer = _BufferCtor()

    def prim_func(self, func: Callable[..., Any] | None = None, **options: Any) -> Any:
        """Parse the decorated function's source into a [`PrimFunc`][loopir.ir.stmt.PrimFunc].

        Also usable with options: ``@T.prim_func(check_well_formed=False)``; see
        [`loopir.script.prim_func`][loopir.script.parser.prim_func].
        """
        from loopir.script.parser import prim_func

        return prim_func(func, **options)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in CONSTRUCTS:
            return _Construct(name, CONSTRUCTS[name])
        if _is_dtype(name):
            return _DType(name)
        if name in INTRINSICS or any(k.startswith(name + ".") for k in INTRINSICS):
            return _Construct(name, f"the intrinsic {name!r}")
        raise AttributeError(f"T has no member {name!r} (not a construct, dtype or registered intrinsic)")

    def __dir__(self) -> list[str]:
        names = set(CONSTRUCTS) | {"prim_func", "handle", "Buffer"}
        names |= {d for d in dt.SCALAR_BITS}
        names |= {k.split(".")[0] for k in INTRINSICS}
        return sorted(names)

    def __repr__(self) -> str:
        return "<loopir.script.T>"


class _INamespace:
    """``I`` of TVM's ``from tvm.script import ir as I``: ``@I.ir_module`` on a class whose
    methods are ``@T.prim_func`` functions gives an [`IRModule`][loopir.ir.module.IRModule]."""

    def ir_module(self, cls: type) -> Any:
        """The IRModule of the PrimFuncs defined in class ``cls`` (keyed by attribute name)."""
        from loopir.ir.module import IRModule
        from loopir.ir.stmt import PrimFunc

        funcs = {k: v for k, v in vars(cls).items() if isinstance(v, PrimFunc)}
        if not funcs:
            raise ScriptError(f"@I.ir_module: class {cls.__name__} defines no @T.prim_func function")
        return IRModule(funcs)


T = TNamespace()
"""The script namespace; ``from loopir.script import T``."""

I = _INamespace()  # noqa: E741 - TVM's name
"""``from loopir.script import I``: ``@I.ir_module``."""
