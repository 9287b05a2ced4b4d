"""Buffers, ranges and buffer regions."""

from __future__ import annotations

from typing import Any

import attrs

from loopir.ir import dtype as dt
from loopir.ir.expr import BufferLoad, PrimExpr, convert

SCOPES = ("global", "shared", "local", "warp")
"""Storage scopes. ``warp`` holds tensor-core fragments: one array per warp of a thread block,
shaped ``[..., 32, L]`` with the lane (``threadIdx.x % 32``) as its second-to-last index and a
lane's ``L`` register elements as its last (see
[`loopir.tensor_intrin.layouts`][loopir.tensor_intrin.layouts]); CUDA lowering makes each lane's
row its own registers (``LowerWarpMemory``)."""


def _shape(value: Any) -> tuple[PrimExpr, ...]:
    if isinstance(value, (int, PrimExpr)):
        value = (value,)
    out = tuple(convert(v) for v in value)
    for v in out:
        if not (dt.is_int(v.dtype) and dt.lanes(v.dtype) == 1):
            raise TypeError(f"buffer extents must be scalar integers, got {v} ({v.dtype})")
    return out


def _opt_shape(value: Any) -> tuple[PrimExpr, ...] | None:
    return None if value is None else _shape(value)


@attrs.frozen(eq=False, repr=False)
class Buffer:
    """A multi-dimensional array with a storage scope.

    Parameters
    ----------
    name
        Name used by the printer and codegen.
    shape
        Extents: ints or integer expressions (``loopir.Var`` for symbolic sizes).
    dtype
        Element type.
    scope
        ``"global"``, ``"shared"``, ``"local"`` or ``"warp"`` (see ``SCOPES``).
    strides
        Element strides per dimension, or None for a compact row-major layout.
    """

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    shape: tuple[PrimExpr, ...] = attrs.field(converter=_shape)
    dtype: str = attrs.field(default="float32", converter=dt.canonical)
    scope: str = attrs.field(default="global", validator=attrs.validators.in_(SCOPES))
    strides: tuple[PrimExpr, ...] | None = attrs.field(default=None, converter=_opt_shape)

    @strides.validator
    def _check_strides(self, _a: Any, value: Any) -> None:
        if value is not None and len(value) != len(self.shape):
            raise ValueError(
                f"buffer {self.name}: {len(value)} strides for {len(self.shape)} dimensions"
            )

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, index: Any) -> BufferLoad:
        if not isinstance(index, tuple):
            index = (index,)
        if len(index) != len(self.shape):
            raise IndexError(
                f"buffer {self.name} has {len(self.shape)} dimensions, indexed with {len(index)}"
            )
        return BufferLoad(self, index)

    def __repr__(self) -> str:
        shape = ", ".join(str(s) for s in self.shape)
        return f"Buffer({self.name}, ({shape}), {self.dtype}, scope={self.scope})"

    __str__ = __repr__


def _int_expr(value: Any) -> PrimExpr:
    out = convert(value)
    if not dt.is_int(out.dtype):
        raise TypeError(f"range bounds must be integers, got {out} ({out.dtype})")
    return out


@attrs.frozen(eq=False, repr=False)
class Range:
    """The half-open interval ``[min, min + extent)``."""

    min: PrimExpr = attrs.field(converter=_int_expr)
    extent: PrimExpr = attrs.field(converter=_int_expr)

    @classmethod
    def from_extent(cls, extent: Any) -> Range:
        e = _int_expr(extent)
        return cls(convert(0, e.dtype), e)

    def __repr__(self) -> str:
        return f"Range({self.min}, {self.extent})"


def _ranges(value: Any) -> tuple[Range, ...]:
    out = tuple(value)
    for r in out:
        if not isinstance(r, Range):
            raise TypeError(f"region entries must be Range, got {type(r).__name__}")
    return out


@attrs.frozen(eq=False, repr=False)
class BufferRegion:
    """A rectangular region of a buffer: one Range per dimension."""

    buffer: Buffer = attrs.field(validator=attrs.validators.instance_of(Buffer))
    region: tuple[Range, ...] = attrs.field(converter=_ranges)

    def __attrs_post_init__(self) -> None:
        if len(self.region) != len(self.buffer.shape):
            raise ValueError(
                f"region of {self.buffer.name} has {len(self.region)} ranges for "
                f"{len(self.buffer.shape)} dimensions"
            )

    @classmethod
    def full(cls, buffer: Buffer) -> BufferRegion:
        return cls(buffer, tuple(Range.from_extent(s) for s in buffer.shape))

    def __repr__(self) -> str:
        parts = ", ".join(f"{r.min}:{r.min + r.extent}" for r in self.region)
        return f"{self.buffer.name}[{parts}]"
