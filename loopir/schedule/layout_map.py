"""The symbolic proof that an index map is a bijection of one box onto another, and its inverse.

``transform_layout`` (``loopir.schedule.layout``) takes maps that are one-to-one *and* onto the
new shape. This module proves it without enumerating the elements, for the maps layouts are made
of: permutations, splits and fusions of the indices by constants, and XOR swizzles such as
``lambda i, j: (i, (j // 8 ^ i % 8) * 8 + j % 8)`` (a 64-column fp16 tile free of bank conflicts
for ``ldmatrix``). A map it cannot prove is checked by enumeration instead.

Each input index ``v`` of extent ``E`` is written as *digits* ``(v // lower) % extent``. Each
output must simplify to a mixed-radix number of *atoms* (``sum(a_m * s_m)`` with ``s_0 = 1`` and
``s_{m+1} = s_m * extent(a_m)``, no constant), an atom being a digit, or a digit ``d`` of extent
``2**p`` XORed with an expression ``g`` in ``[0, 2**p)`` (a *swizzled* digit). The map is then a
bijection onto the box of the outputs' ranges when:

* the digits of every input, swizzled or not, tile it exactly (lowers ``1, e_0, e_0 e_1, ...``,
  product ``E``), each once;
* every ``g`` depends only on inputs none of whose digits is swizzled.

Why: the plain digits go to the output unchanged, so they, and the inputs made of them, are known
from the output; each swizzled digit is then ``atom ^ g``, ``x -> x ^ g`` being a permutation of
``[0, 2**p)`` for a fixed ``g`` (and its own inverse). That is also how
[`BijectiveMap.inverse`][loopir.schedule.layout_map.BijectiveMap.inverse] computes the inverse.
Shifts and masks by constants need no rule of their own: the simplifier makes them ``*``, ``//``
and ``%`` first.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import attrs

from loopir import arith
from loopir.ir.expr import Add, Call, FloorDiv, FloorMod, IntImm, Mul, PrimExpr, Sub, Var
from loopir.ir.functor import collect_vars, post_order_visit, substitute

__all__ = ["BijectiveMap", "prove_bijective"]

#: Most XORs whose operand order is searched (``2**n`` orders).
_MAX_XORS = 6


@attrs.frozen
class _Digit:
    """``(params[var] // lower) % extent``."""

    var: int
    lower: int
    extent: int


@attrs.frozen(eq=False)
class _Atom:
    """A digit, or (``xor`` set) the digit XORed with ``xor``."""

    digit: _Digit
    xor: PrimExpr | None = None

    @property
    def extent(self) -> int:
        return self.digit.extent


_Lin = tuple[list[tuple[_Atom, int]], int]  # (atom, coefficient) terms and a constant


class _Fail(Exception):
    """The map is not of the form the proof knows."""


@attrs.frozen(eq=False)
class BijectiveMap:
    """A proven bijection of ``shape`` onto ``new_shape``: its outputs' atoms, by output."""

    params: tuple[Var, ...]
    shape: tuple[int, ...]
    new_shape: tuple[int, ...]
    outputs: tuple[tuple[tuple[_Atom, int], ...], ...]  # per output: (atom, coefficient), by coefficient

    def inverse(self, new_params: Sequence[Var] | None = None) -> tuple[tuple[Var, ...], tuple[PrimExpr, ...]]:
        """The inverse map: variables of the new indices and, for each old index, its
        expression of them (simplified over the new shape)."""
        ys = tuple(new_params) if new_params is not None else tuple(
            Var(f"y{k}", "int32") for k in range(len(self.new_shape))
        )
        plain: dict[_Digit, PrimExpr] = {}
        swizzled: list[tuple[_Atom, PrimExpr]] = []
        for y, terms in zip(ys, self.outputs):
            for atom, coef in terms:
                value: PrimExpr = y if coef == 1 else y // coef
                if coef * atom.extent != _extent(terms):
                    value = value % atom.extent
                if atom.xor is None:
                    plain[atom.digit] = value
                else:
                    swizzled.append((atom, value))
        known = {self.params[v]: _compose(plain, v) for v in range(len(self.params))
                 if all(d in plain for d in _digits_of(self.outputs, v))}  # fmt: skip
        for atom, value in swizzled:
            assert atom.xor is not None
            plain[atom.digit] = value ^ substitute(atom.xor, known)
        ana = arith.Analyzer({y: (0, n) for y, n in zip(ys, self.new_shape)})
        exprs = tuple(ana.simplify(_compose(plain, v)) for v in range(len(self.params)))
        return ys, exprs


def _extent(terms: Sequence[tuple[_Atom, int]]) -> int:
    return terms[-1][1] * terms[-1][0].extent if terms else 1


def _digits_of(outputs: Sequence[Sequence[tuple[_Atom, int]]], v: int) -> list[_Digit]:
    return [a.digit for terms in outputs for a, _ in terms if a.digit.var == v]


def _compose(values: dict[_Digit, PrimExpr], v: int) -> PrimExpr:
    out: PrimExpr = IntImm(0, "int32")
    for d, e in sorted(((d, e) for d, e in values.items() if d.var == v), key=lambda x: x[0].lower):
        out = out + (e if d.lower == 1 else e * d.lower)
    return out


class _Parser:
    """Outputs as mixed-radix sums of atoms; ``order`` says, XOR by XOR, which operand is the
    swizzled digit (0: the left one)."""

    def __init__(self, params: Sequence[Var], shape: Sequence[int], ana: arith.Analyzer,
                 order: Sequence[int]) -> None:  # fmt: skip
        self.params, self.shape, self.ana = list(params), list(shape), ana
        self.order = list(order)
        self.xors = 0

    def lin(self, e: PrimExpr) -> _Lin:
        if isinstance(e, IntImm):
            return [], e.value
        if isinstance(e, Var):
            k = next((i for i, p in enumerate(self.params) if p is e), None)
            if k is None:
                raise _Fail
            return ([(_Atom(_Digit(k, 1, self.shape[k])), 1)] if self.shape[k] > 1 else []), 0
        if isinstance(e, (Add, Sub)):
            (ta, ca), (tb, cb) = self.lin(e.a), self.lin(e.b)
            sign = 1 if isinstance(e, Add) else -1
            return ta + [(a, sign * c) for a, c in tb], ca + sign * cb
        if isinstance(e, Mul):
            for x, c in ((e.a, e.b), (e.b, e.a)):
                if isinstance(c, IntImm):
                    t, k = self.lin(x)
                    return [(a, m * c.value) for a, m in t], k * c.value
        if isinstance(e, (FloorDiv, FloorMod)) and isinstance(e.b, IntImm) and e.b.value > 0:
            return self.divmod(self.lin(e.a), e.b.value, isinstance(e, FloorDiv))
        if isinstance(e, Call) and e.op == "bitwise_xor":
            return self.xor(e)
        raise _Fail

    def divmod(self, x: _Lin, c: int, div: bool) -> _Lin:
        terms, const = x
        if c == 1:
            return x if div else ([], 0)
        if len(terms) == 1 and terms[0][1] == 1 and const == 0 and terms[0][0].xor is None:
            d = terms[0][0].digit  # splitting one digit
            if c >= d.extent:
                return ([], 0) if div else x
            if d.extent % c:
                raise _Fail
            if div:
                return [(_Atom(_Digit(d.var, d.lower * c, d.extent // c)), 1)], 0
            return [(_Atom(_Digit(d.var, d.lower, c)), 1)], 0
        # a mixed-radix sum: the terms below c drop out of // and are what % keeps
        if const or any(m <= 0 for _, m in terms):
            raise _Fail
        high = [(a, m) for a, m in terms if m % c == 0]
        low = [(a, m) for a, m in terms if m % c]
        if sum(m * (a.extent - 1) for a, m in low) >= c:
            raise _Fail
        return ([(a, m // c) for a, m in high], 0) if div else (low, 0)

    def xor(self, e: Call) -> _Lin:
        k = self.xors
        self.xors += 1
        if k >= len(self.order):
            raise _Fail
        first = self.order[k]
        d_expr, g = e.args[first], e.args[1 - first]
        terms, const = self.lin(d_expr)
        if len(terms) != 1 or terms[0][1] != 1 or const or terms[0][0].xor is not None:
            raise _Fail
        digit = terms[0][0].digit
        n = digit.extent
        b = self.ana.const_int_bound(g)
        if n & (n - 1) or b.min_value < 0 or b.max_value >= n:
            raise _Fail
        return [(_Atom(digit, g), 1)], 0


def _output(lin: _Lin) -> tuple[tuple[_Atom, int], ...]:
    """The terms of one output by coefficient, checked to be a mixed-radix number."""
    terms, const = lin
    if const:
        raise _Fail
    out = sorted(terms, key=lambda t: t[1])
    stride = 1
    for atom, coef in out:
        if coef != stride:
            raise _Fail
        stride *= atom.extent
    return tuple(out)


def _check_digits(outputs: Sequence[Sequence[tuple[_Atom, int]]], params: Sequence[Var],
                  shape: Sequence[int]) -> None:  # fmt: skip
    swizzled_vars = {a.digit.var for terms in outputs for a, _ in terms if a.xor is not None}
    for v, extent in enumerate(shape):
        lower = 1
        for d in sorted(_digits_of(outputs, v), key=lambda d: d.lower):
            if d.lower != lower:
                raise _Fail  # a gap, or a digit used twice
            lower *= d.extent
        if lower != max(extent, 1):
            raise _Fail
    index = {p: k for k, p in enumerate(params)}
    for terms in outputs:
        for a, _ in terms:
            if a.xor is None:
                continue
            used = {index.get(u) for u in collect_vars(a.xor)}
            if None in used or used & swizzled_vars:
                raise _Fail  # g must be known from the plain digits


def prove_bijective(params: Sequence[Var], exprs: Sequence[PrimExpr],
                    shape: Sequence[int]) -> BijectiveMap | None:  # fmt: skip
    """A proof that ``params -> exprs`` maps the box ``shape`` one-to-one onto the box of its
    outputs' ranges (see the module doc), or None when the map is not of the forms the proof
    knows (which says nothing about it)."""
    if any(s < 1 for s in shape):
        return None
    ana = arith.Analyzer({p: (0, s) for p, s in zip(params, shape)})
    simplified = [ana.simplify(e) for e in exprs]
    n_xor = sum(1 for e in simplified for _ in _xor_calls(e))
    if n_xor > _MAX_XORS:
        return None
    for order in itertools.product((0, 1), repeat=n_xor):
        parser = _Parser(params, shape, ana, order)
        try:
            outputs = tuple(_output(parser.lin(e)) for e in simplified)
            _check_digits(outputs, params, shape)
        except _Fail:
            continue
        new_shape = tuple(_extent(t) for t in outputs)
        return BijectiveMap(tuple(params), tuple(shape), new_shape, outputs)
    return None


def _xor_calls(e: PrimExpr) -> list[Call]:
    found: list[Call] = []
    post_order_visit(e, lambda n: found.append(n) if isinstance(n, Call) and n.op == "bitwise_xor" else None)
    return found
