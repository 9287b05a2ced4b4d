"""Tensors, operations and reductions of the te frontend.

A [`Tensor`][loopir.te.tensor.Tensor] is either a placeholder (a function input) or the result of
[`compute`][loopir.te.tensor.compute]. Indexing a tensor (``A[i, j]``) builds a
[`BufferLoad`][loopir.ir.expr.BufferLoad] on the tensor's buffer, so compute bodies are ordinary
loopir expressions; each compute records the tensors its body reads so that
[`loopir.te.create_prim_func`][loopir.te.create.create_prim_func] can walk the dataflow graph.
"""

from __future__ import annotations

import inspect
import numbers
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from loopir.errors import IRValidationError
from loopir.ir import dtype as dt
from loopir.ir import reducer
from loopir.ir.buffer import Buffer, Range
from loopir.ir.expr import BufferLoad, PrimExpr, Var, convert, make_const
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import IterKind, IterVar

__all__ = [
    "Tensor", "PlaceholderOp", "ComputeOp", "Reduce", "ReduceAxis", "placeholder", "compute", "reduce_axis",
    "sum", "max", "min", "comm_reducer_identity", "max_value", "min_value",
]  # fmt: skip

# Tensors whose buffers are indexed while a compute body is being built; a stack because a
# compute body may (unusually) call compute itself.
_collectors = threading.local()

# buffer -> tensor, for loads built outside the fcompute call (weak: a tensor nobody holds
# can only be reached through a consumer, which keeps it in its ``inputs``).
_TENSOR_OF_BUFFER: weakref.WeakKeyDictionary[Buffer, weakref.ReferenceType[Tensor]] = (
    weakref.WeakKeyDictionary()
)


def _shape_tuple(shape: Any, what: str) -> tuple[PrimExpr, ...]:
    if isinstance(shape, (int, PrimExpr)):
        shape = (shape,)
    try:
        items = tuple(shape)
    except TypeError:
        raise IRValidationError(
            f"te.{what}: shape must be a tuple of ints or integer expressions, got {shape!r}",
            check="te-shape",
        ) from None
    out = []
    for s in items:
        if isinstance(s, numbers.Integral) and not isinstance(s, (bool, np.bool_)):
            s = int(s)  # numpy integers (e.g. from array shapes) are fine extents
        if isinstance(s, bool) or not isinstance(s, (int, PrimExpr)):
            raise IRValidationError(
                f"te.{what}: shape entries must be ints or integer expressions (loopir.Var), "
                f"got {s!r} in {shape!r}",
                check="te-shape",
            )
        e = convert(s)
        if not dt.is_int(e.dtype) or dt.lanes(e.dtype) != 1:
            raise IRValidationError(
                f"te.{what}: shape entry {e} has dtype {e.dtype}; extents must be scalar integers",
                check="te-shape",
            )
        if isinstance(s, int) and s < 0:
            raise IRValidationError(f"te.{what}: negative extent {s} in shape {shape!r}", check="te-shape")
        out.append(e)
    return tuple(out)


class PlaceholderOp:
    """The operation of a placeholder tensor: an input of the function."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"PlaceholderOp({self.name})"


class ComputeOp:
    """The operation of a computed tensor.

    Attributes
    ----------
    axis
        One spatial [`IterVar`][loopir.ir.stmt.IterVar] per output dimension (the lambda's
        variables).
    body
        The element expression, or a [`Reduce`][loopir.te.tensor.Reduce] for reductions.
    inputs
        The tensors ``body`` reads, in first-use order.
    """

    def __init__(
        self, name: str, axis: tuple[IterVar, ...], body: PrimExpr, inputs: tuple[Tensor, ...]
    ) -> None:
        self.name = name
        self.axis = axis
        self.body = body
        self.inputs = inputs

    @property
    def reduce_axis(self) -> tuple[ReduceAxis | IterVar, ...]:
        return self.body.axis if isinstance(self.body, Reduce) else ()

    def __repr__(self) -> str:
        return f"ComputeOp({self.name})"


class Tensor:
    """A te tensor: a buffer plus the operation producing it.

    Index it with one expression per dimension (``A[i, j]``) to read an element.
    """

    def __init__(self, buffer: Buffer, op: PlaceholderOp | ComputeOp) -> None:
        self.buffer = buffer
        self.op = op
        _TENSOR_OF_BUFFER[buffer] = weakref.ref(self)

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def shape(self) -> tuple[PrimExpr, ...]:
        return self.buffer.shape

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    @property
    def ndim(self) -> int:
        return len(self.buffer.shape)

    def __getitem__(self, index: Any) -> BufferLoad:
        if not isinstance(index, tuple):
            index = (index,)
        if len(index) != self.ndim:
            raise IRValidationError(
                f"tensor {self.name} has {self.ndim} dimensions but was indexed with "
                f"{len(index)} indices {index!r}",
                check="te-index-arity",
            )
        idx = []
        for x in index:
            if isinstance(x, IterVar):  # allow A[k] with k = te.reduce_axis(...)
                x = x.var
            if isinstance(x, (slice, type(Ellipsis))):
                raise IRValidationError(
                    f"tensor {self.name}: slices are not supported in te indexing, got {index!r}",
                    check="te-index",
                )
            if isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_)):
                x = int(x)
            try:
                e = convert(x)
            except TypeError:
                raise IRValidationError(
                    f"tensor {self.name}: cannot index with {type(x).__name__} {x!r}",
                    check="te-index",
                ) from None
            if not dt.is_int(e.dtype):
                raise IRValidationError(
                    f"tensor {self.name}: index {e} has dtype {e.dtype}; indices must be integers",
                    check="te-index",
                )
            idx.append(e)
        for stack in getattr(_collectors, "stacks", []):
            stack.append(self)
        return BufferLoad(self.buffer, tuple(idx))

    def __repr__(self) -> str:
        shape = ", ".join(str(s) for s in self.shape)
        return f"Tensor({self.name}, ({shape}), {self.dtype})"

    # Tensors are used as dict keys / in sets (identity), never compared elementwise.
    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other


def placeholder(shape: Any, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor.

    Parameters
    ----------
    shape
        Extents: ints or integer expressions (``loopir.Var("n")`` for symbolic sizes).
    dtype
        Element type, e.g. ``"float32"``.
    name
        Buffer name (and parameter name of the generated function).
    """
    try:
        d = dt.canonical(dtype)
    except ValueError as exc:
        raise IRValidationError(f"te.placeholder {name!r}: {exc}", check="te-dtype") from None
    buf = Buffer(name, _shape_tuple(shape, "placeholder"), d)
    return Tensor(buf, PlaceholderOp(name))


@attrs.frozen(eq=False, repr=False)
class ReduceAxis(Var):
    """A reduction axis: a Var (usable in index arithmetic, like TVM's IterVar) with a domain.

    Exposes ``var`` (itself), ``dom`` and ``kind`` like an [`IterVar`][loopir.ir.stmt.IterVar].
    """

    dom: Range = attrs.field(kw_only=True, validator=attrs.validators.instance_of(Range))

    @property
    def var(self) -> Var:
        return self

    @property
    def kind(self) -> IterKind:
        return IterKind.REDUCE


def reduce_axis(dom: Any, name: str = "rv") -> ReduceAxis:
    """A reduction axis over ``range(extent)`` or ``range(lo, hi)``.

    Parameters
    ----------
    dom
        An extent (int or integer expression) or a pair ``(lo, hi)`` (hi exclusive).
    name
        Name of the axis variable (and of its loop in the generated function).
    """
    if isinstance(dom, Range):
        rng = dom
    elif isinstance(dom, (tuple, list)):
        if len(dom) != 2:
            raise IRValidationError(
                f"te.reduce_axis {name!r}: expected an extent or a (lo, hi) pair, got {dom!r}",
                check="te-reduce-axis",
            )
        lo, hi = (convert(x) for x in dom)
        rng = Range(lo, _sub(hi, lo))
    else:
        rng = Range.from_extent(dom)
    for x in (rng.min, rng.extent):
        if not dt.is_int(x.dtype):
            raise IRValidationError(
                f"te.reduce_axis {name!r}: bounds must be integers, got {dom!r}",
                check="te-reduce-axis",
            )
    ext = rng.extent
    if hasattr(ext, "value") and isinstance(ext.value, int) and ext.value <= 0:
        raise IRValidationError(
            f"te.reduce_axis {name!r}: empty domain {dom!r} (extent {ext.value})",
            check="te-reduce-axis",
        )
    return ReduceAxis(name, rng.min.dtype, dom=rng)


def _sub(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a - b``, folded when both are constants (keeps printed extents clean)."""
    av, bv = getattr(a, "value", None), getattr(b, "value", None)
    if isinstance(av, int) and isinstance(bv, int) and not isinstance(a, Var):
        return make_const(av - bv, a.dtype)
    return a - b


@attrs.frozen(eq=False, repr=False)
class Reduce(PrimExpr):
    """A reduction ``combiner(source for axis in axes if where)``; only valid as a compute body.

    ``combiner`` is ``"sum"``, ``"max"`` or ``"min"``.
    """

    combiner: str = attrs.field(validator=attrs.validators.in_(("sum", "max", "min")))
    source: PrimExpr = attrs.field()
    axis: tuple[ReduceAxis | IterVar, ...] = attrs.field(converter=tuple)
    where: PrimExpr | None = attrs.field(default=None)

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.source.dtype

    def __repr__(self) -> str:
        axes = ", ".join(a.var.name for a in self.axis)
        return f"te.{self.combiner}({self.source}, axis=[{axes}])"

    __str__ = __repr__


def comm_reducer_identity(combiner: str, dtype: str) -> PrimExpr:
    """The identity of ``combiner`` in ``dtype``: 0, lowest (-inf) or highest (+inf)."""
    return reducer.identity(combiner, dtype)


def _make_reduce(combiner: str, expr: Any, axis: Any, where: Any) -> Reduce:
    src = convert(expr)
    if isinstance(src, Reduce):
        raise IRValidationError(
            f"te.{combiner}: nested reductions are not supported; reduce over all axes at "
            f"once with axis=[...] ({src})",
            check="te-reduce",
        )
    if axis is None:
        raise IRValidationError(f"te.{combiner}: axis= is required", check="te-reduce")
    axes = (axis,) if isinstance(axis, (IterVar, ReduceAxis)) else tuple(axis)
    if not axes:
        raise IRValidationError(f"te.{combiner}: axis= must name at least one axis", check="te-reduce")
    for a in axes:
        if not isinstance(a, (IterVar, ReduceAxis)) or a.kind is not IterKind.REDUCE:
            raise IRValidationError(
                f"te.{combiner}: axis entries must come from te.reduce_axis, got {a!r}",
                check="te-reduce",
            )
    if len({id(a) for a in axes}) != len(axes):
        raise IRValidationError(f"te.{combiner}: an axis is listed twice in {axes!r}", check="te-reduce")
    if dt.lanes(src.dtype) != 1 or dt.is_bool(src.dtype):
        raise IRValidationError(
            f"te.{combiner}: cannot reduce values of dtype {src.dtype}", check="te-reduce"
        )
    cond = None if where is None else convert(where)
    if cond is not None and not dt.is_bool(cond.dtype):
        raise IRValidationError(
            f"te.{combiner}: where= must be a bool expression, got {cond} ({cond.dtype})",
            check="te-reduce",
        )
    return Reduce(combiner, src, axes, cond)


def _is_axis_arg(axis: Any) -> bool:
    return axis is None or isinstance(axis, (IterVar, ReduceAxis, list, tuple))


def sum(expr: Any, axis: Any = None, where: Any = None) -> PrimExpr:  # noqa: A001
    """Sum of ``expr`` over the reduce axes ``axis`` (one IterVar or a list); identity 0.

    As in TVM, ``te.sum(a, b)`` with an expression ``b`` instead of axes is ``a + b``.
    """
    if not _is_axis_arg(axis):
        total: PrimExpr = convert(expr) + axis
        return total
    return _make_reduce("sum", expr, axis, where)


def max(expr: Any, axis: Any = None, where: Any = None) -> PrimExpr:  # noqa: A001
    """Maximum over ``axis``; identity -inf (floats) or the dtype's lowest value.

    ``te.max(a, b)`` with an expression ``b`` is the elementwise maximum.
    """
    if not _is_axis_arg(axis):
        from loopir.ir.op import max_

        return max_(expr, axis)
    return _make_reduce("max", expr, axis, where)


def min(expr: Any, axis: Any = None, where: Any = None) -> PrimExpr:  # noqa: A001
    """Minimum over ``axis``; identity +inf (floats) or the dtype's highest value.

    ``te.min(a, b)`` with an expression ``b`` is the elementwise minimum.
    """
    if not _is_axis_arg(axis):
        from loopir.ir.op import min_

        return min_(expr, axis)
    return _make_reduce("min", expr, axis, where)


def max_value(dtype: str) -> PrimExpr:
    """The largest value of ``dtype`` (+inf for floats), as a constant."""
    d = dt.canonical(dtype)
    return make_const(dt.max_value(d), d)


def min_value(dtype: str) -> PrimExpr:
    """The lowest value of ``dtype`` (-inf for floats), as a constant."""
    d = dt.canonical(dtype)
    return make_const(dt.min_value(d), d)


def _param_names(fcompute: Callable[..., Any], ndim: int, name: str) -> list[str]:
    """Names of ``fcompute``'s parameters (TVM names the axes after them)."""
    try:
        sig = inspect.signature(fcompute)
    except (TypeError, ValueError):
        return [f"i{d}" for d in range(ndim)]
    params = list(sig.parameters.values())
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        named = [p.name for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL]
        return named[:ndim] + [f"i{d}" for d in range(len(named[:ndim]), ndim)]
    positional = [
        p for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        and p.default is inspect.Parameter.empty
    ]  # fmt: skip
    if len(positional) != ndim:
        raise IRValidationError(
            f"te.compute {name!r}: fcompute takes {len(positional)} index arguments but the "
            f"shape has {ndim} dimensions",
            check="te-compute-arity",
        )
    return [p.name for p in positional]


def _check_body(body: PrimExpr, name: str) -> None:
    """Reductions may only appear at the top of a compute body (as in TVM)."""

    def visit(node: Any) -> None:
        if isinstance(node, Reduce) and node is not body:
            raise IRValidationError(
                f"te.compute {name!r}: a reduction must be the outermost operation of the "
                f"body (got it nested in {body}); apply casts and arithmetic inside, e.g. "
                "te.sum(x.astype('float32'), axis=k), or use a separate compute stage",
                check="te-reduce-position",
            )

    # Reduce is an attrs node, so the generic walk also enters its source and where.
    post_order_visit(body, visit)


def compute(
    shape: Any,
    fcompute: Callable[..., Any],
    name: str = "compute",
    tag: str = "",
    attrs: dict[str, Any] | None = None,
) -> Tensor:
    """A tensor whose element at ``(i, j, ...)`` is ``fcompute(i, j, ...)``.

    Parameters
    ----------
    shape
        Output extents (ints or integer expressions).
    fcompute
        Called once with one ``Var`` per dimension, named after its parameters; returns an
        expression, or a ``te.sum``/``te.max``/``te.min`` reduction at the top.
    name
        Tensor, buffer and block name.
    tag, attrs
        Accepted for TVM compatibility; ignored.
    """
    del tag, attrs
    shp = _shape_tuple(shape, "compute")
    names = _param_names(fcompute, len(shp), name)
    axis = tuple(
        IterVar(Var(n, s.dtype), Range(make_const(0, s.dtype), s), IterKind.SPATIAL)
        for n, s in zip(names, shp)
    )
    stacks = getattr(_collectors, "stacks", None)
    if stacks is None:
        stacks = _collectors.stacks = []
    used: list[Tensor] = []
    stacks.append(used)
    try:
        raw = fcompute(*(iv.var for iv in axis))
    finally:
        stacks.pop()
    if isinstance(raw, (list, tuple)):
        raise IRValidationError(
            f"te.compute {name!r}: multi-output computes are not supported (fcompute "
            f"returned {len(raw)} values)",
            check="te-compute",
        )
    try:
        body = convert(raw)
    except TypeError:
        raise IRValidationError(
            f"te.compute {name!r}: fcompute must return an expression, got {raw!r}",
            check="te-compute",
        ) from None
    _check_body(body, name)
    if dt.lanes(body.dtype) != 1 or body.dtype == "handle":
        raise IRValidationError(
            f"te.compute {name!r}: element expressions must be scalars, got dtype {body.dtype}",
            check="te-compute",
        )
    inputs = _inputs_of(body, used, name)
    buf = Buffer(name, shp, body.dtype)
    return Tensor(buf, ComputeOp(name, axis, body, inputs))


def _inputs_of(body: PrimExpr, used: Sequence[Tensor], name: str) -> tuple[Tensor, ...]:
    by_buffer: dict[Buffer, Tensor] = {}
    for t in used:
        by_buffer.setdefault(t.buffer, t)
    order: dict[Tensor, None] = {}

    def visit(node: Any) -> None:
        if isinstance(node, BufferLoad):
            t = by_buffer.get(node.buffer)
            if t is None:
                ref = _TENSOR_OF_BUFFER.get(node.buffer)
                t = ref() if ref is not None else None
            if t is None:
                raise IRValidationError(
                    f"te.compute {name!r}: the body loads buffer {node.buffer.name}, which is "
                    "not a te tensor",
                    check="te-compute",
                )
            order.setdefault(t, None)

    # Reduce is an attrs node, so the generic walk also enters its source and where.
    post_order_visit(body, visit)
    return tuple(order)
