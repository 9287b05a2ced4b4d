"""Canonical forms of integer expressions: sums of atoms with constant coefficients.

A [`Sum`][loopir.arith.canonical.Sum] is ``const + sum(coeff_i * atom_i)`` where every atom is a
non-linear sub-expression (a Var, ``floordiv(sum, c)``, ``floormod(sum, c)``, a product of two
non-constant expressions, a min/max/select/cast, a load, a call). Atoms are identified by a
structural [`key`][loopir.arith.canonical.ExprKeys.key], so like terms collect regardless of how
they were built.

Everything here is exact integer algebra (no overflow is assumed, as in TVM).
"""

from __future__ import annotations

from typing import Any

import attrs

from loopir.ir.expr import (
    And,
    BinaryOp,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Not,
    Or,
    PrimExpr,
    Ramp,
    Select,
    StringImm,
    Var,
)

Key = tuple[Any, ...]
# one term of a sum: the atom expression and its (non-zero) coefficient
Term = tuple[PrimExpr, int]


class Sum:
    """``const + sum(coeff * atom)``; treat instances as immutable.

    Attributes
    ----------
    terms
        Map from atom key to ``(atom, coeff)``; coefficients are never 0.
    const
        The constant part.
    dtype
        The integer dtype of the expression.
    """

    __slots__ = ("terms", "const", "dtype")

    def __init__(self, terms: dict[Key, Term], const: int, dtype: str) -> None:
        self.terms = terms
        self.const = const
        self.dtype = dtype

    @classmethod
    def constant(cls, value: int, dtype: str) -> Sum:
        return cls({}, value, dtype)

    @classmethod
    def atom(cls, key: Key, expr: PrimExpr, coeff: int = 1) -> Sum:
        return cls({key: (expr, coeff)}, 0, expr.dtype)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def add(self, other: Sum, scale: int = 1) -> Sum:
        """``self + scale * other``."""
        if scale == 0:
            return self
        terms = dict(self.terms)
        for k, (a, c) in other.terms.items():
            old = terms.get(k)
            nc = (old[1] if old is not None else 0) + scale * c
            if nc == 0:
                terms.pop(k, None)
            else:
                terms[k] = (old[0] if old is not None else a, nc)
        return Sum(terms, self.const + scale * other.const, self.dtype)

    def add_const(self, value: int) -> Sum:
        return Sum(self.terms, self.const + value, self.dtype) if value else self

    def scale(self, c: int) -> Sum:
        if c == 0:
            return Sum({}, 0, self.dtype)
        if c == 1:
            return self
        return Sum({k: (a, v * c) for k, (a, v) in self.terms.items()}, self.const * c, self.dtype)

    def exact_div(self, c: int) -> Sum:
        """``self / c`` for a ``c`` dividing every coefficient and the constant."""
        return Sum({k: (a, v // c) for k, (a, v) in self.terms.items()}, self.const // c, self.dtype)

    def without_const(self) -> Sum:
        return Sum(self.terms, 0, self.dtype)

    def single_atom(self) -> PrimExpr | None:
        """The atom if ``self`` is exactly ``1 * atom + 0``."""
        if self.const == 0 and len(self.terms) == 1:
            (a, c), = self.terms.values()
            if c == 1:
                return a
        return None

    def contains(self, other: Sum, scale: int = 1) -> bool:
        """Whether every term of ``scale * other`` appears in ``self`` with that coefficient."""
        for k, (_a, c) in other.terms.items():
            mine = self.terms.get(k)
            if mine is None or mine[1] != c * scale:
                return False
        return True

    def key(self) -> Key:
        return ("sum", frozenset((k, c) for k, (_a, c) in self.terms.items()), self.const, self.dtype)

    def __repr__(self) -> str:
        parts = [f"{c}*{a}" for a, c in self.terms.values()]
        return f"Sum({' + '.join(parts) or '0'} + {self.const}: {self.dtype})"


class ExprKeys:
    """Memoized structural keys and sort names of expressions.

    Keys are hashable tuples equal exactly for structurally equal expressions (variables and
    buffers by identity). Sort names are short strings used to order terms deterministically.
    The object keeps every keyed variable alive so that ids inside keys are never reused.
    """

    def __init__(self) -> None:
        self._keys: dict[PrimExpr, Key] = {}
        self._names: dict[PrimExpr, str] = {}
        self._alive: dict[int, Any] = {}

    def clear(self) -> None:
        self._keys.clear()
        self._names.clear()
        self._alive.clear()

    def has_seen(self, obj: Any) -> bool:
        """Whether a key mentions ``obj`` (a variable or buffer)."""
        return id(obj) in self._alive

    def pinned(self) -> tuple[Any, ...]:
        """The variables and buffers whose ids the keys so far mention (keep them to keep a
        key valid after this object is gone)."""
        return tuple(self._alive.values())

    def _pin(self, obj: Any) -> int:
        self._alive[id(obj)] = obj
        return id(obj)

    def key(self, e: PrimExpr) -> Key:
        k = self._keys.get(e)
        if k is None:
            k = self._compute_key(e)
            if len(self._keys) > 200_000:
                self._keys.clear()
                self._names.clear()
            self._keys[e] = k
        return k

    def _compute_key(self, e: PrimExpr) -> Key:
        # isinstance so that the checker narrows: the classes tested are leaves (BinaryOp aside)
        t = type(e)
        if isinstance(e, Var):
            return ("var", self._pin(e))
        if isinstance(e, IntImm):
            return ("int", e.value, e.dtype)
        if isinstance(e, FloatImm):
            return ("float", repr(e.value), e.dtype)
        if isinstance(e, StringImm):
            return ("str", e.value)
        if isinstance(e, (BinaryOp, And, Or)):
            return (t.__name__, self.key(e.a), self.key(e.b))
        if isinstance(e, Not):
            return ("Not", self.key(e.a))
        if isinstance(e, Select):
            return ("Select", self.key(e.condition), self.key(e.true_value), self.key(e.false_value))
        if isinstance(e, Cast):
            return ("Cast", e.dtype, self.key(e.value))
        if isinstance(e, BufferLoad):
            return ("Load", self._pin(e.buffer), tuple(self.key(i) for i in e.indices))
        if isinstance(e, Call):
            return ("Call", e.op, e.dtype, tuple(self.key(a) for a in e.args))
        if isinstance(e, Ramp):
            return ("Ramp", self.key(e.base), self.key(e.stride), e.lanes)
        if isinstance(e, Broadcast):
            return ("Broadcast", self.key(e.value), e.lanes)
        # unknown node kinds compare by identity: never merged with anything else
        return ("node", self._pin(e))

    def name(self, e: PrimExpr) -> str:
        n = self._names.get(e)
        if n is None:
            n = self._compute_name(e)
            self._names[e] = n
        return n

    def _compute_name(self, e: PrimExpr) -> str:
        t = type(e)
        if isinstance(e, Var):
            return str(e.name)
        if isinstance(e, (IntImm, FloatImm)):
            return str(e.value)
        if isinstance(e, (BinaryOp, And, Or)):
            return f"{self.name(e.a)}{getattr(e, 'symbol', t.__name__)}{self.name(e.b)}"
        if isinstance(e, BufferLoad):
            return str(e.buffer.name) + "[" + ",".join(self.name(i) for i in e.indices) + "]"
        if isinstance(e, Call):
            return str(e.op) + "(" + ",".join(self.name(a) for a in e.args) + ")"
        if isinstance(e, Cast):
            return f"{e.dtype}({self.name(e.value)})"
        if isinstance(e, Select):
            return f"select({self.name(e.condition)},{self.name(e.true_value)},{self.name(e.false_value)})"
        if isinstance(e, Not):
            return f"!{self.name(e.a)}"
        node: Any = e  # every PrimExpr class is an attrs class
        fields = [getattr(e, f.name) for f in attrs.fields(type(node)) if f.init]
        inner = ",".join(self.name(v) for v in fields if isinstance(v, PrimExpr))
        return f"{t.__name__}({inner})"


@attrs.frozen(eq=False)
class StructuralKey:
    """A hashable key of an expression, equal exactly for structurally equal expressions
    (variables and buffers by identity). It holds the objects whose identities it records, so
    that no id in it can be reused by a new object while the key exists."""

    key: Key
    pinned: tuple[Any, ...] = attrs.field(repr=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StructuralKey) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)


def structural_key(e: PrimExpr) -> StructuralKey:
    """The structural key of ``e`` (``ExprKeys.key``, kept valid on its own).

    >>> from loopir.ir.expr import Var
    >>> n = Var("n")
    >>> structural_key(n * 2 + 1) == structural_key(n * 2 + 1)
    True
    >>> structural_key(n + 1) == structural_key(Var("n") + 1)
    False
    """
    keys = ExprKeys()
    key = keys.key(e)
    return StructuralKey(key, keys.pinned())


__all__ = ["Sum", "ExprKeys", "Key", "Term", "StructuralKey", "structural_key"]
