"""Padded strides for buffers with a ``storage_align`` requirement (TVM's ``buffer_dim_align``).

``Schedule.storage_align(block, buffer, axis, factor, offset)`` annotates the block writing the
buffer with ``"buffer_dim_align"``: ``((buffer name, axis, factor, offset), ...)``. ``LowerBlocks``
gathers those annotations into the function's ``"loopir.buffer_dim_align"`` attribute
(``{buffer name: ((axis, factor, offset), ...)}``), and ``CompactBufferAllocation`` gives every
allocation of such a buffer the strides
[`aligned_strides`][loopir.passes.storage_align.aligned_strides] computes for its final (compacted)
shape: the stride of ``axis`` is the smallest value at least the compact one with
``stride % factor == offset`` -- e.g. a 32 x 32 shared tile aligned with factor 32 and offset 1 on
axis 0 gets row stride 33, so a column walked by 32 threads touches 32 banks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loopir.ir.expr import IntImm, PrimExpr
from loopir.ir.stmt import Block, FrozenDict, PrimFunc

ANNOTATION = "buffer_dim_align"
FUNC_ATTR = "loopir.buffer_dim_align"

Aligns = tuple[tuple[int, int, int], ...]


def aligned_strides(shape: Sequence[PrimExpr], aligns: Aligns) -> tuple[PrimExpr, ...]:
    """Row-major strides of ``shape`` with each ``(axis, factor, offset)`` applied, innermost
    first (constants folded; symbolic extents give stride expressions)."""
    from loopir.ir import op

    want = {axis: (factor, offset) for axis, factor, offset in aligns}
    out: list[PrimExpr] = []
    stride: PrimExpr = IntImm(1, "int32")
    for d in range(len(shape) - 1, -1, -1):
        if d in want:
            factor, offset = want[d]
            if isinstance(stride, IntImm):
                v = stride.value
                stride = IntImm(v + (factor + offset - v % factor) % factor, "int32")
            else:
                stride = stride + op.floormod(factor + offset - op.floormod(stride, factor), factor)
        out.append(stride)
        extent = shape[d]
        if isinstance(stride, IntImm) and isinstance(extent, IntImm):
            stride = IntImm(stride.value * extent.value, "int32")
        elif isinstance(stride, IntImm) and stride.value == 1:
            stride = extent
        else:
            stride = stride * extent
    return tuple(reversed(out))


def allocation_size(shape: Sequence[int], strides: Sequence[int] | None) -> int:
    """Elements an allocation of ``shape`` with ``strides`` spans (row-major when None)."""
    if strides is None:
        n = 1
        for s in shape:
            n *= s
        return n
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((e - 1) * st for e, st in zip(shape, strides))


def allocation_size_c(extents: Sequence[str], strides: Sequence[str]) -> str:
    """[`allocation_size`][loopir.passes.storage_align.allocation_size] with ``strides`` as a C
    expression over C expressions of the extents and strides (the caller's integer casts):
    ``1 + sum((extent - 1) * stride)``, 0 when an extent is not positive. The CPU C backend and
    the CUDA host code size padded allocations with it."""
    empty = " || ".join(f"{e} <= 0" for e in extents)
    span = " + ".join(f"({e} - 1) * {st}" for e, st in zip(extents, strides))
    return f"(({empty}) ? 0 : 1 + {span})"


def collect(block: Block, into: dict[str, Aligns]) -> None:
    """Add ``block``'s ``buffer_dim_align`` annotation to ``into`` (by buffer name)."""
    for name, axis, factor, offset in block.annotations.get(ANNOTATION, ()):
        have = tuple(a for a in into.get(name, ()) if a[0] != axis)
        into[name] = (*have, (int(axis), int(factor), int(offset)))


def with_aligns(func: PrimFunc, aligns: Mapping[str, Aligns]) -> PrimFunc:
    if not aligns:
        return func
    import attrs

    merged = {**dict(func.attrs.get(FUNC_ATTR, {})), **aligns}
    return attrs.evolve(func, attrs=FrozenDict({**func.attrs, FUNC_ATTR: FrozenDict(merged)}))


def aligns_of(func: PrimFunc) -> Mapping[str, Aligns]:
    out: Mapping[str, Aligns] = func.attrs.get(FUNC_ATTR, {})  # as with_aligns stores it
    return out


__all__ = ["ANNOTATION", "FUNC_ATTR", "aligned_strides", "aligns_of", "allocation_size", "collect",
           "with_aligns"]  # fmt: skip
