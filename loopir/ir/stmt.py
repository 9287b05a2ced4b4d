"""Statement nodes, TensorIR blocks and the PrimFunc."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import attrs

from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import IntImm, PrimExpr, Var, _expr_tuple, _is_bool_expr, _is_expr, convert

_T = TypeVar("_T")

THREAD_TAGS = (
    "blockIdx.x", "blockIdx.y", "blockIdx.z",
    "threadIdx.x", "threadIdx.y", "threadIdx.z",
    "vthread.x", "vthread.y", "vthread.z",
)  # fmt: skip


class FrozenDict(Mapping[str, Any]):
    """A read-only, hashable-by-identity mapping for node annotations and attributes."""

    __slots__ = ("_d",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._d = dict(data or {})

    def __getitem__(self, key: str) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return repr(self._d)

    def set(self, key: str, value: Any) -> FrozenDict:
        """A copy with ``key`` set."""
        d = dict(self._d)
        d[key] = value
        return FrozenDict(d)

    def remove(self, key: str) -> FrozenDict:
        d = dict(self._d)
        d.pop(key, None)
        return FrozenDict(d)


def _frozen_dict(value: Any) -> FrozenDict:
    return value if isinstance(value, FrozenDict) else FrozenDict(value)


class Stmt:
    """Base class of statements."""

    __slots__ = ()

    def __repr__(self) -> str:
        try:
            from loopir.ir.printer import stmt_to_str

            return stmt_to_str(self)
        except Exception:  # pragma: no cover - repr must never raise
            return f"<{type(self).__name__}>"

    __str__ = __repr__


def _is_stmt(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, Stmt):
        raise TypeError(f"{attribute.name} must be a Stmt, got {type(value).__name__}: {value!r}")


def _opt_stmt(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        _is_stmt(_inst, attribute, value)


@attrs.frozen(eq=False, repr=False)
class BufferStore(Stmt):
    """``buffer[indices] = value``."""

    buffer: Buffer = attrs.field(validator=attrs.validators.instance_of(Buffer))
    value: PrimExpr = attrs.field(converter=convert, validator=_is_expr)
    indices: tuple[PrimExpr, ...] = attrs.field(converter=_expr_tuple)

    def __attrs_post_init__(self) -> None:
        if len(self.indices) != len(self.buffer.shape):
            raise ValueError(
                f"store to {self.buffer.name} with {len(self.indices)} indices for "
                f"{len(self.buffer.shape)} dimensions"
            )


@attrs.frozen(eq=False, repr=False)
class Evaluate(Stmt):
    """Evaluate an expression for its side effect (e.g. a barrier call)."""

    value: PrimExpr = attrs.field(converter=convert, validator=_is_expr)


def _stmt_tuple(value: Any) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    for s in value:
        if not isinstance(s, Stmt):
            raise TypeError(f"SeqStmt entries must be Stmt, got {type(s).__name__}")
        # a sequence in a sequence is the same as its statements, in place (as TVM's SeqStmt
        # flattens): a mutator replacing one entry by a sequence keeps the list flat
        if isinstance(s, SeqStmt) and s.seq:
            out.extend(s.seq)
        else:
            out.append(s)
    return tuple(out)


@attrs.frozen(eq=False, repr=False)
class SeqStmt(Stmt):
    """Statements run in order. Entries that are sequences themselves are flattened into it
    (an empty one stays: it is a statement that does nothing). Use [`seq`][loopir.ir.stmt.seq]
    to build one (it also drops empty ones and unwraps a single statement)."""

    seq: tuple[Stmt, ...] = attrs.field(converter=_stmt_tuple)


def seq(*stmts: Stmt | None) -> Stmt:
    """Sequence ``stmts``: nested SeqStmts flattened, Nones dropped, one statement unwrapped."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.seq)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))


@attrs.frozen(eq=False, repr=False)
class IfThenElse(Stmt):
    """``if condition: then_case else: else_case``."""

    condition: PrimExpr = attrs.field(validator=_is_bool_expr)
    then_case: Stmt = attrs.field(validator=_is_stmt)
    else_case: Stmt | None = attrs.field(default=None, validator=_opt_stmt)


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


def _int_expr(value: Any) -> PrimExpr:
    out = convert(value)
    if not dt.is_int(out.dtype) or dt.lanes(out.dtype) != 1:
        raise TypeError(f"loop bounds must be scalar integers, got {out} ({out.dtype})")
    return out


@attrs.frozen(eq=False, repr=False)
class For(Stmt):
    """``for loop_var in range(min, min + extent): body``.

    A ``THREAD_BINDING`` loop carries its ``thread_tag``; its meaning is still a sequential
    loop (see docs/semantics). Other kinds have ``thread_tag=None``.
    """

    loop_var: Var = attrs.field(validator=attrs.validators.instance_of(Var))
    min: PrimExpr = attrs.field(converter=_int_expr)
    extent: PrimExpr = attrs.field(converter=_int_expr)
    kind: ForKind = attrs.field(converter=ForKind)
    body: Stmt = attrs.field(validator=_is_stmt)
    thread_tag: str | None = attrs.field(default=None)
    annotations: FrozenDict = attrs.field(factory=FrozenDict, converter=_frozen_dict)

    @thread_tag.validator
    def _check_tag(self, _a: Any, value: str | None) -> None:
        if self.kind is ForKind.THREAD_BINDING:
            if value not in THREAD_TAGS:
                raise ValueError(f"thread tag must be one of {THREAD_TAGS}, got {value!r}")
        elif value is not None:
            raise ValueError(f"a {self.kind.value} loop cannot carry thread tag {value!r}")


@attrs.frozen(eq=False, repr=False)
class Allocate(Stmt):
    """Allocate ``buffer`` (in its scope) for the duration of ``body`` (lowered IR)."""

    buffer: Buffer = attrs.field(validator=attrs.validators.instance_of(Buffer))
    body: Stmt = attrs.field(validator=_is_stmt)


class IterKind(enum.Enum):
    SPATIAL = "spatial"
    REDUCE = "reduce"


@attrs.frozen(eq=False, repr=False)
class IterVar:
    """A block iteration variable with its domain and kind (spatial or reduce)."""

    var: Var = attrs.field(validator=attrs.validators.instance_of(Var))
    dom: Range = attrs.field(validator=attrs.validators.instance_of(Range))
    kind: IterKind = attrs.field(converter=IterKind)

    def __repr__(self) -> str:
        return f"IterVar({self.var.name}, {self.dom}, {self.kind.value})"


def _tuple_of(cls: type[_T], value: Any) -> tuple[_T, ...]:
    out = tuple(value)
    for v in out:
        if not isinstance(v, cls):
            raise TypeError(f"expected {cls.__name__}, got {type(v).__name__}: {v!r}")
    return out


# Named converters (the mypy attrs plugin only understands named functions as converters).
def _iter_var_tuple(value: Any) -> tuple[IterVar, ...]:
    return _tuple_of(IterVar, value)


def _buffer_region_tuple(value: Any) -> tuple[BufferRegion, ...]:
    return _tuple_of(BufferRegion, value)


def _buffer_tuple(value: Any) -> tuple[Buffer, ...]:
    return _tuple_of(Buffer, value)


@attrs.frozen(eq=False, repr=False)
class Block(Stmt):
    """A TensorIR block: a named computation over its iteration domain.

    ``init`` runs for a spatial point when all reduce iter vars are at their minimum, before
    ``body``. ``alloc_buffers`` live for the block's duration. ``reads``/``writes`` are the
    regions the block accesses, in terms of its iter vars.
    """

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    iter_vars: tuple[IterVar, ...] = attrs.field(converter=_iter_var_tuple)
    reads: tuple[BufferRegion, ...] = attrs.field(converter=_buffer_region_tuple)
    writes: tuple[BufferRegion, ...] = attrs.field(converter=_buffer_region_tuple)
    body: Stmt = attrs.field(validator=_is_stmt)
    init: Stmt | None = attrs.field(default=None, validator=_opt_stmt)
    alloc_buffers: tuple[Buffer, ...] = attrs.field(default=(), converter=_buffer_tuple)
    annotations: FrozenDict = attrs.field(factory=FrozenDict, converter=_frozen_dict)


def _true() -> PrimExpr:
    return IntImm(1, "bool")


@attrs.frozen(eq=False, repr=False)
class BlockRealize(Stmt):
    """Executes ``block`` with its iter vars bound to ``iter_values``, when ``predicate``."""

    iter_values: tuple[PrimExpr, ...] = attrs.field(converter=_expr_tuple)
    predicate: PrimExpr = attrs.field(factory=_true, converter=convert, validator=_is_bool_expr)
    block: Block = attrs.field(default=None, validator=attrs.validators.instance_of(Block))

    def __attrs_post_init__(self) -> None:
        if len(self.iter_values) != len(self.block.iter_vars):
            raise ValueError(
                f"block {self.block.name}: {len(self.iter_values)} bindings for "
                f"{len(self.block.iter_vars)} iter vars"
            )


@attrs.frozen(eq=False, repr=False)
class PrimFunc:
    """A function over buffers.

    ``params`` are the argument buffers in call order; Vars in their shapes are symbolic sizes
    bound from the arguments at call time. ``body`` is usually a root BlockRealize whose block
    allocates the intermediate buffers.
    """

    params: tuple[Buffer, ...] = attrs.field(converter=_buffer_tuple)
    body: Stmt = attrs.field(validator=_is_stmt)
    name: str = attrs.field(default="main", validator=attrs.validators.instance_of(str))
    attrs: FrozenDict = attrs.field(factory=FrozenDict, converter=_frozen_dict)

    def script(self) -> str:
        """TVMScript-like text of the function."""
        from loopir.ir.printer import script

        return script(self)

    def with_body(self, body: Stmt) -> PrimFunc:
        return self if body is self.body else attrs.evolve(self, body=body)

    def __repr__(self) -> str:
        try:
            return self.script()
        except Exception:  # pragma: no cover - repr must never raise
            return f"<PrimFunc {self.name}>"

    __str__ = __repr__
