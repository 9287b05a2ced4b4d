"""``transform_layout``: store a buffer in another layout, given as an index map (TVM semantics).

The index map is a Python lambda from the old indices to the new ones, e.g.
``lambda i, j: (j // 4, i, j % 4)`` or the XOR swizzle ``lambda i, j: (i, (j // 8 ^ i % 8) * 8 +
j % 8)``. Traces record it as the text of such a lambda, printed from the expressions the lambda
builds, and read it back with a restricted parser (integer constants, the lambda's parameters,
``+ - * // %``, the bitwise ``^ & | << >>`` and unary minus only; nothing is evaluated), so that
a stored trace can never run code.

The map must be a bijection of the buffer's index space onto the new shape (the box of its
image): proven symbolically for permutations, splits, fusions and XOR swizzles
(``loopir.schedule.layout_map``), else checked by enumerating the elements (up to 2**24).
"""

from __future__ import annotations

import ast
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from loopir import arith
from loopir.arith import vectorized as vec
from loopir.errors import ScheduleError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import (
    BITWISE_OPS,
    Add,
    BinaryOp,
    BufferLoad,
    Call,
    FloorDiv,
    FloorMod,
    IntImm,
    Mul,
    PrimExpr,
    Sub,
    Var,
)
from loopir.ir.functor import Mutator, substitute
from loopir.ir.stmt import Block, BufferStore, PrimFunc
from loopir.schedule import cache
from loopir.schedule.layout_map import prove_bijective
from loopir.schedule.scope import allocated_written

__all__ = ["index_map_text", "inverse_index_map", "parse_index_map", "transform_layout"]

logger = logging.getLogger(__name__)

_P = "transform_layout"
_MAX_CHECK = 1 << 24  # elements enumerated to check that the map is one-to-one
_BINOPS: dict[type, Callable[[PrimExpr, PrimExpr], PrimExpr]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.BitXor: lambda a, b: a ^ b,
    ast.BitAnd: lambda a, b: a & b,
    ast.BitOr: lambda a, b: a | b,
    ast.LShift: lambda a, b: a << b,
    ast.RShift: lambda a, b: a >> b,
}
_SYMBOLS: dict[type[PrimExpr], str] = {Add: "+", Sub: "-", Mul: "*", FloorDiv: "//", FloorMod: "%"}


def _text(e: PrimExpr) -> str:
    if isinstance(e, IntImm):
        return str(e.value) if e.value >= 0 else f"({e.value})"
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Call) and e.op in BITWISE_OPS and dt.is_int(e.dtype):
        return f"({_text(e.args[0])} {BITWISE_OPS[e.op]} {_text(e.args[1])})"
    sym = _SYMBOLS.get(type(e))
    # The isinstance only narrows: every key of _SYMBOLS is a BinaryOp subclass.
    if sym is None or not isinstance(e, BinaryOp):
        raise ScheduleError(
            f"the index map may use + - * // % ^ & | << >> of the indices and integer constants "
            f"only; got {type(e).__name__} in {e}",
            primitive=_P,
        )
    return f"({_text(e.a)} {sym} {_text(e.b)})"


def index_map_text(index_map: Callable[..., Any] | str, ndim: int) -> str:
    """The canonical text of ``index_map`` (a lambda over ``ndim`` indices, or its text)."""
    if isinstance(index_map, str):
        names, exprs = parse_index_map(index_map)
    elif callable(index_map):
        try:
            names = list(inspect.signature(index_map).parameters)
        except (TypeError, ValueError):
            names = [f"i{k}" for k in range(ndim)]
        if len(names) != ndim:
            raise ScheduleError(
                f"the index map takes {len(names)} indices but the buffer has {ndim} dimensions",
                primitive=_P,
            )
        params = [Var(n, "int32") for n in names]
        out = index_map(*params)
        exprs = [_as_expr(x) for x in (out if isinstance(out, (tuple, list)) else (out,))]
        names = [p.name for p in params]
    else:
        raise ScheduleError(f"index_map must be a lambda or its text, got {type(index_map).__name__}", primitive=_P)
    if len(names) != ndim:
        raise ScheduleError(
            f"the index map takes {len(names)} indices but the buffer has {ndim} dimensions", primitive=_P
        )
    body = ", ".join(_text(e) for e in exprs)
    return f"lambda {', '.join(names)}: ({body}{',' if len(exprs) == 1 else ''})"


def _as_expr(x: Any) -> PrimExpr:
    if isinstance(x, PrimExpr):
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return IntImm(x, "int32")
    raise ScheduleError(f"the index map returned {x!r}, not an index expression", primitive=_P)


def parse_index_map(text: str) -> tuple[list[str], list[PrimExpr]]:
    """``(parameter names, result expressions)`` of an index map's text, without evaluating
    anything (see the module doc)."""
    try:
        tree_ = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ScheduleError(f"index map {text!r} is not a lambda: {exc.msg}", primitive=_P) from None
    lam = tree_.body
    if not isinstance(lam, ast.Lambda) or lam.args.defaults or lam.args.vararg or lam.args.kwarg:
        raise ScheduleError(f"index map {text!r} must be a plain lambda of the indices", primitive=_P)
    names = [a.arg for a in lam.args.args]
    params = {n: Var(n, "int32") for n in names}

    def conv(node: ast.AST) -> PrimExpr:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return IntImm(node.value, "int32")
        if isinstance(node, ast.Name) and node.id in params:
            return params[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](conv(node.left), conv(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return IntImm(0, "int32") - conv(node.operand)
        raise ScheduleError(
            f"index map {text!r}: {ast.dump(node)[:60]} is not allowed (integer constants, the "
            "parameters, + - * // % ^ & | << >> only)",
            primitive=_P,
        )

    items = lam.body.elts if isinstance(lam.body, (ast.Tuple, ast.List)) else [lam.body]
    return names, [conv(e) for e in items]


class _Relayout(Mutator):
    """Every access of ``old`` becomes an access of ``new`` at the mapped indices."""

    def __init__(self, old: Buffer, new: Buffer, params: list[Var], exprs: list[PrimExpr]) -> None:
        self.old, self.new, self.params, self.exprs = old, new, params, exprs

    def mapped(self, indices: tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
        vmap = dict(zip(self.params, indices))
        return tuple(arith.simplify(substitute(e, vmap)) for e in self.exprs)

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        if node.buffer is not self.old:
            load: PrimExpr = self.generic_visit(node)
            return load
        return BufferLoad(self.new, self.mapped(tuple(self.visit(i) for i in node.indices)))

    def visit_BufferStore(self, node: BufferStore) -> BufferStore:
        if node.buffer is not self.old:
            store: BufferStore = self.generic_visit(node)
            return store
        indices = self.mapped(tuple(self.visit(i) for i in node.indices))
        return BufferStore(self.new, self.visit(node.value), indices)

    def visit_Buffer(self, node: Buffer) -> Buffer:
        return self.new if node is self.old else node

    def visit_BufferRegion(self, node: BufferRegion) -> BufferRegion:
        if node.buffer is not self.old:
            same: BufferRegion = self.generic_visit(node)
            return same
        one = all(isinstance(r.extent, IntImm) and r.extent.value == 1 for r in node.region)
        if one:  # a point: exactly its image
            region = tuple(Range(i, IntImm(1, i.dtype)) for i in self.mapped(tuple(r.min for r in node.region)))
        else:  # a box: its image is not a box in general; the whole buffer covers it
            region = tuple(Range.from_extent(e) for e in self.new.shape)
        return BufferRegion(self.new, region)


def transform_layout(func: PrimFunc, block: str, buffer: cache.BufferArg, index_map: str) -> PrimFunc:
    """Store a buffer ``block`` writes in the layout ``index_map`` gives (TVM semantics).

    Every load, store and region of the buffer is rewritten through the map, and the buffer
    gets the shape that holds the image of its old index space. The map must be a bijection
    of that space onto the new shape: proven symbolically for permutations, splits, fusions and
    XOR swizzles (``loopir.schedule.layout_map``), else checked by enumerating the elements (up
    to 2**24).

    Parameters
    ----------
    func
        The function.
    block
        A block writing the buffer.
    buffer
        The buffer's name, index into the block's writes, or the Buffer; allocated in the
        function (a parameter's layout is the caller's), with a constant shape.
    index_map
        The map's text (``Schedule.transform_layout`` takes the lambda itself), e.g.
        ``"lambda i, j: (j // 4, i, j % 4)"``.

    Raises
    ------
    ScheduleError
        A parameter, a symbolic shape, a map with the wrong number of indices, using other
        operations, with negative results, not one-to-one, or leaving places of the new shape
        unused (the message names the primitive and the map).

    Examples
    --------
    Before::

        B = alloc_buffer((16, 8))
        with block("B"): B[vi, vj] = A[vi, vj] * 2
        with block("C"): C[vi, vj] = B[vi, vj] + 1

    After ``transform_layout(func, "B", 0, "lambda i, j: (j // 4, i, j % 4)")``::

        B = alloc_buffer((2, 16, 4))
        with block("B"): B[vj // 4, vi, vj % 4] = A[vi, vj] * 2
        with block("C"): C[vi, vj] = B[vj // 4, vi, vj % 4] + 1
    """
    blk, buf = allocated_written(
        func, block, buffer, _P,
        "transform_layout changes buffers allocated in the function only (cache_read / "
        "cache_write first)",
    )  # fmt: skip
    shape = [s.value if isinstance(s, IntImm) else None for s in buf.shape]
    if any(s is None for s in shape):
        raise ScheduleError(
            f"buffer {buf.name!r} has a symbolic shape {list(buf.shape)}; transform_layout needs "
            "a constant one", primitive=_P, func=func, node=blk,
        )  # fmt: skip
    names, exprs = parse_index_map(index_map)
    if len(names) != len(shape):
        raise ScheduleError(
            f"the index map takes {len(names)} indices but {buf.name!r} has {len(shape)} dimensions",
            primitive=_P, func=func, node=blk,
        )  # fmt: skip
    new_shape = _image_shape(func, blk, buf, names, exprs, shape)  # type: ignore[arg-type]
    params = [Var(n, "int32") for n in names]
    # parse_index_map made its own Vars: rebind the expressions to ours
    old_params = _params_of(exprs, names)
    exprs = [substitute(e, dict(zip(old_params, params))) for e in exprs]
    new = attrs.evolve(buf, shape=tuple(IntImm(s, "int32") for s in new_shape), strides=None)
    out = func.with_body(_Relayout(buf, new, params, exprs).visit(func.body))
    logger.debug("transform_layout %s: %s -> %s", buf.name, shape, new_shape)
    return out


def _params_of(exprs: list[PrimExpr], names: list[str]) -> list[Var]:
    from loopir.ir.functor import collect_vars

    found = {v.name: v for e in exprs for v in collect_vars(e)}
    return [found.get(n, Var(n, "int32")) for n in names]


def _image_shape(func: PrimFunc, blk: Block, buf: Buffer, names: list[str], exprs: list[PrimExpr],
                 shape: list[int]) -> list[int]:  # fmt: skip
    """The new shape: the box the map sends ``shape`` onto, after proving (``layout_map``) or
    checking by enumeration that the map is a bijection onto it."""
    params = _params_of(exprs, names)
    proof = prove_bijective(params, exprs, shape)
    if proof is not None:
        return list(proof.new_shape)
    size = int(np.prod(shape))
    where = f"index map {_fmt(names, exprs)} on {buf.name!r} {shape}"
    if size > _MAX_CHECK:
        raise ScheduleError(
            f"{where}: the map is not of a form proven one-to-one (permutations, splits, fusions, "
            f"XOR swizzles), and {size} elements are too many to check by enumeration (at most "
            f"{_MAX_CHECK})", primitive=_P, func=func, node=blk,
        )  # fmt: skip
    grids = np.meshgrid(*(np.arange(s, dtype=np.int64) for s in shape), indexing="ij")
    env = dict(zip(params, (g.ravel() for g in grids)))
    try:
        cols = [np.broadcast_to(np.asarray(vec.evaluate(e, env, size), dtype=np.int64), (size,)) for e in exprs]
    except vec.NotEnumerable as exc:
        raise ScheduleError(f"index map {_fmt(names, exprs)}: {exc}", primitive=_P, func=func, node=blk) from None
    if any((c < 0).any() for c in cols):
        raise ScheduleError(f"{where} gives negative indices", primitive=_P, func=func, node=blk)
    new_shape = [int(c.max()) + 1 if size else 1 for c in cols]
    flat = np.ravel_multi_index(tuple(cols), new_shape) if cols else np.zeros(size, np.int64)
    if len(np.unique(flat)) != size:
        raise ScheduleError(
            f"{where} is not one-to-one: two elements would share a place",
            primitive=_P, func=func, node=blk,
        )  # fmt: skip
    places = int(np.prod(new_shape))
    if places != size:
        raise ScheduleError(
            f"{where} is one-to-one but not onto its image's shape {new_shape}: it would leave "
            f"{places - size} of {places} places unused (maps must be bijective; pad the block "
            "first, or use a map whose image fills the new shape)",
            primitive=_P, func=func, node=blk,
        )  # fmt: skip
    return new_shape


def inverse_index_map(index_map: Callable[..., Any] | str, shape: Sequence[int]
                      ) -> tuple[list[Var], list[PrimExpr]]:  # fmt: skip
    """The inverse of a bijective index map on ``shape``: variables of the new indices and the
    old indices as expressions of them (an XOR-swizzled digit is its own inverse given the rest).

    Raises
    ------
    ScheduleError
        When the map is not proven bijective symbolically (``loopir.schedule.layout_map``).
    """
    names, exprs = parse_index_map(index_map_text(index_map, len(shape)))
    params = _params_of(exprs, names)
    proof = prove_bijective(params, exprs, list(shape))
    if proof is None:
        raise ScheduleError(
            f"index map {_fmt(names, exprs)} on {list(shape)}: no inverse (not proven a bijection: "
            "permutations, splits, fusions and XOR swizzles are)", primitive=_P,
        )  # fmt: skip
    ys, inv = proof.inverse()
    return list(ys), list(inv)


def _fmt(names: list[str], exprs: list[PrimExpr]) -> str:
    return f"lambda {', '.join(names)}: ({', '.join(_text(e) for e in exprs)})"
