"""Commutative reducers: recognize a reduction block's combiner and give its identity.

A reduction block (a block with ``init``) whose update is one of::

    C[idx] = C[idx] + v      (or v + C[idx])      "sum"
    C[idx] = max(C[idx], v)  (either order)       "max"
    C[idx] = min(C[idx], v)  (either order)       "min"

with ``init`` a store to the same ``C[idx]`` and ``v`` not reading ``C``, can be computed in
any order and in parts that are combined afterwards: what cross-thread reductions (a
reduction loop bound to ``threadIdx.x``) need. ``te.sum`` / ``te.max`` / ``te.min`` produce
exactly these blocks.
"""

from __future__ import annotations

import attrs

from loopir.ir import dtype as dt
from loopir.ir.equality import structural_equal
from loopir.ir.expr import Add, BinaryOp, BufferLoad, Max, Min, PrimExpr, make_const
from loopir.ir.functor import touches_buffer
from loopir.ir.stmt import Block, BufferStore

__all__ = ["REDUCERS", "Reducer", "combine", "identity", "is_identity", "match_reducer"]

REDUCERS = ("sum", "max", "min")
_OPS: dict[type[PrimExpr], str] = {Add: "sum", Max: "max", Min: "min"}


def identity(op: str, dtype: str) -> PrimExpr:
    """The identity of reducer ``op`` in ``dtype``: 0, the lowest value (-inf) or the highest
    (+inf)."""
    if op == "sum":
        return make_const(0, dtype)
    if op == "max":
        return make_const(dt.min_value(dtype), dtype)
    if op == "min":
        return make_const(dt.max_value(dtype), dtype)
    raise ValueError(f"unknown reducer {op!r}; expected one of {REDUCERS}")


def is_identity(op: str, e: PrimExpr) -> bool:
    """Whether ``e`` is the constant identity of ``op`` in its dtype."""
    value = getattr(e, "value", None)
    return value is not None and value == getattr(identity(op, e.dtype), "value", None)


def combine(op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a op b`` for reducer ``op``."""
    if op == "sum":
        return Add(a, b)
    if op == "max":
        return Max(a, b)
    if op == "min":
        return Min(a, b)
    raise ValueError(f"unknown reducer {op!r}; expected one of {REDUCERS}")


@attrs.frozen
class Reducer:
    """A recognized reduction: ``store`` is the update ``C[idx] = op(C[idx], value)``."""

    op: str
    store: BufferStore
    value: PrimExpr
    init_value: PrimExpr


def match_reducer(block: Block) -> Reducer | str:
    """The block's [`Reducer`][loopir.ir.reducer.Reducer], or the reason (a sentence) why it is
    none."""
    init, body = block.init, block.body
    if init is None:
        return f"block {block.name!r} is not a reduction block (it has no init)"
    if not isinstance(body, BufferStore):
        return f"the body of block {block.name!r} is not a single store"
    if not isinstance(init, BufferStore) or init.buffer is not body.buffer or not all(
        structural_equal(a, b) for a, b in zip(init.indices, body.indices)
    ):
        return f"the init of block {block.name!r} is not a store to the element its body updates"
    update = body.value
    op = _OPS.get(type(update))
    # The isinstance only narrows: every key of _OPS is a BinaryOp subclass.
    if op is None or not isinstance(update, BinaryOp):
        return (
            f"the update of block {block.name!r} is not a sum, max or min of the element it "
            f"stores ({body.value})"
        )
    a, b = update.a, update.b

    def is_self(e: PrimExpr) -> bool:
        return (
            isinstance(e, BufferLoad) and e.buffer is body.buffer
            and all(structural_equal(x, y) for x, y in zip(e.indices, body.indices))
        )  # fmt: skip

    if is_self(a) and not touches_buffer(b, body.buffer):
        value = b
    elif is_self(b) and not touches_buffer(a, body.buffer):
        value = a
    else:
        return (
            f"the update of block {block.name!r} must combine {body.buffer.name}[...] with a "
            f"value that does not read {body.buffer.name} ({body.value})"
        )
    return Reducer(op, body, value, init.value)
