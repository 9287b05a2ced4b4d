"""Rewrite rules of floordiv and floormod on canonical sums.

All rules are identities of floor division (valid for negative values); the ones that need
ranges check them with sound bounds. Notation: ``c > 0`` a constant divisor, ``S`` a sum.

* divisible terms leave the division: ``(c*A + R) // c == A + R // c`` and
  ``(c*A + R) % c == R % c``;
* ``R // c == m`` and ``R % c == R - m*c`` when ``m*c <= R < (m+1)*c`` (so ``x // c -> 0`` and
  ``x % c -> x`` for ``0 <= x < c``);
* common factors: with ``g | c`` dividing the coefficients of the terms ``P`` and the rest
  ``0 <= Q - m*g < g``: ``(P + Q) // c == (P/g + m) // (c/g)`` and
  ``(P + Q) % c == g*((P/g + m) % (c/g)) + Q - m*g``;
* nesting: ``(u // c1 + k) // c2 == (u + k*c1) // (c1*c2)``, and inside ``% c`` any
  ``a * (u % c1)`` with ``c | a*c1`` is replaced by ``a*u``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from loopir.arith.bound import NEG_INF, POS_INF
from loopir.arith.canonical import Key, Sum, Term
from loopir.ir.expr import FloorDiv, FloorMod, IntImm, Mul

if TYPE_CHECKING:
    from loopir.arith.simplify import Simplifier


def _block(s: Simplifier, r: Sum, c: int) -> int | None:
    """``m`` with ``m*c <= r < (m+1)*c`` for all values of ``r``, if the bounds show one."""
    b = s.sum_bound(r)
    if b.min_value in (NEG_INF, POS_INF) or b.max_value in (NEG_INF, POS_INF):
        return None
    m = b.min_value // c
    return m if b.max_value // c == m else None


def _ratio(sa: Sum, sb: Sum) -> int | None:
    """``k`` with ``sa == k * sb`` exactly (``sb`` non-constant), else None."""
    if not sb.terms or sa.terms.keys() != sb.terms.keys():
        return None
    k0, (_a, c0) = next(iter(sb.terms.items()))
    ca = sa.terms[k0][1]
    if ca % c0:
        return None
    k = ca // c0
    if sa.const != k * sb.const:
        return None
    return k if all(sa.terms[key][1] == k * c for key, (_a, c) in sb.terms.items()) else None


def _factor_out(s: Simplifier, sa: Sum, sb: Sum) -> Sum | None:
    """``sa / b`` when ``b`` is one atom and every term of ``sa`` is a product having ``b`` as
    a factor (so ``(c*t*b) // b == c*t`` exactly for ``b != 0``); else None."""
    b = sb.single_atom()
    if b is None or sa.const != 0 or not sa.terms:
        return None
    kb = s.keys.key(b)
    out = Sum.constant(0, sa.dtype)
    for _k, (a, c) in sa.terms.items():
        if type(a) is not Mul:
            return None
        if s.keys.key(a.a) == kb:
            other = a.b
        elif s.keys.key(a.b) == kb:
            other = a.a
        else:
            return None
        out = out.add(s.canon(other), c)
    return out


def _symbolic_small(s: Simplifier, sa: Sum, sb: Sum) -> bool:
    """Whether ``0 <= a < b`` holds for all values (b positive, possibly symbolic)."""
    from loopir.ir.expr import GE, LT

    zero = Sum.constant(0, sa.dtype)
    return s.decide(GE, sa, zero) is True and s.decide(LT, sa, sb) is True


def floordiv(s: Simplifier, sa: Sum, sb: Sum) -> Sum:
    """Canonical ``floordiv(a, b)``."""
    if sb.is_const:
        c = sb.const
        if c > 0:
            return floordiv_const(s, sa, c)
        if c < 0:  # a // -c == (-a) // c
            return floordiv_const(s, sa.scale(-1), -c)
    else:
        k = _ratio(sa, sb)
        if k is not None:
            return Sum.constant(k, sa.dtype)
        q = _factor_out(s, sa, sb)
        if q is not None:
            return q
        if s.sum_bound(sb).min_value > 0 and _symbolic_small(s, sa, sb):
            return Sum.constant(0, sa.dtype)
    # division by a constant 0 is left for the program to fail on, never folded
    return s.make_atom(FloorDiv(s.to_expr(sa), s.to_expr(sb)))


def floormod(s: Simplifier, sa: Sum, sb: Sum) -> Sum:
    """Canonical ``floormod(a, b)``."""
    if sb.is_const:
        c = sb.const
        if c > 0:
            return floormod_const(s, sa, c)
        if c < 0:  # a % -c == -((-a) % c)
            return floormod_const(s, sa.scale(-1), -c).scale(-1)
    else:
        if _ratio(sa, sb) is not None or _factor_out(s, sa, sb) is not None:
            return Sum.constant(0, sa.dtype)
        if s.sum_bound(sb).min_value > 0 and _symbolic_small(s, sa, sb):
            return sa
    return s.make_atom(FloorMod(s.to_expr(sa), s.to_expr(sb)))


def _split_divisible(S: Sum, c: int) -> tuple[Sum, Sum]:
    """``S == c*Q + R`` where ``Q`` holds the terms whose coefficient ``c`` divides."""
    q: dict[Key, Term] = {}
    r: dict[Key, Term] = {}
    for k, (a, coef) in S.terms.items():
        if coef % c == 0:
            q[k] = (a, coef // c)
        else:
            r[k] = (a, coef)
    return Sum(q, 0, S.dtype), Sum(r, S.const, S.dtype)


def _gcd_prefixes(s: Simplifier, r: Sum, c: int) -> tuple[Sum, int, int, Sum] | None:
    """Find terms ``P`` of ``r`` (largest coefficients first) and ``g = gcd(c, coeffs(P)) > 1``
    such that the rest ``Q = r - P`` satisfies ``m*g <= Q < (m+1)*g``.

    Returns ``(P, g, m, Q)`` or None.
    """
    items = sorted(r.terms.items(), key=lambda kv: -abs(kv[1][1]))
    g = c
    for n in range(1, len(items) + 1):
        g = math.gcd(g, items[n - 1][1][1])
        if g == 1:
            return None
        p = Sum(dict(items[:n]), 0, r.dtype)
        q = Sum(dict(items[n:]), r.const, r.dtype)
        m = _block(s, q, g)
        if m is not None:
            return p, g, m, q
    return None


def floordiv_const(s: Simplifier, S: Sum, c: int) -> Sum:
    """Canonical ``floordiv(S, c)`` for a constant ``c > 0`` (memoized per simplifier)."""
    if c == 1:
        return S
    mk = ("//", S.key(), c)
    hit = s.divmod_memo.get(mk)
    if hit is None:
        hit = _floordiv_const(s, S, c)
        s.divmod_memo[mk] = hit
    return hit


def _floordiv_const(s: Simplifier, S: Sum, c: int) -> Sum:
    quot, r = _split_divisible(S, c)
    if r.const >= c:
        # (x + 40) // 32 -> (x + 8) // 32 + 1; negative constants stay inside (more readable)
        quot = quot.add_const(r.const // c)
        r = r.add_const(-(r.const // c) * c)
    m = _block(s, r, c)
    if m is not None:
        return quot.add_const(m)
    # nested division: (u // c1 + k) // c == (u + k*c1) // (c1*c)
    if len(r.terms) == 1:
        (atom, coef), = r.terms.values()
        if coef == 1 and type(atom) is FloorDiv and type(atom.b) is IntImm and atom.b.value > 0:
            c1 = atom.b.value
            inner = s.canon(atom.a).add_const(r.const * c1)
            return quot.add(floordiv_const(s, inner, c1 * c))
    found = _gcd_prefixes(s, r, c)
    if found is not None:
        p, g, m, _q = found
        return quot.add(floordiv_const(s, p.exact_div(g).add_const(m), c // g))
    return quot.add(s.make_atom(FloorDiv(s.to_expr(r), IntImm(c, S.dtype))))


def _reduce_const(k: int, c: int) -> int:
    """A constant congruent to ``k`` modulo ``c`` with the same sign and ``|k| < c``."""
    return k % c if k >= 0 else -((-k) % c)


def floormod_const(s: Simplifier, S: Sum, c: int) -> Sum:
    """Canonical ``floormod(S, c)`` for a constant ``c > 0`` (memoized per simplifier)."""
    if c == 1:
        return Sum.constant(0, S.dtype)
    mk = ("%", S.key(), c)
    hit = s.divmod_memo.get(mk)
    if hit is None:
        hit = _floormod_const(s, S, c)
        s.divmod_memo[mk] = hit
    return hit


def _floormod_const(s: Simplifier, S: Sum, c: int) -> Sum:
    acc = S
    for _ in range(32):  # ((u % 8) % 6) % 2: inner remainders may expose more of them
        nxt = Sum({}, acc.const, acc.dtype)
        changed = False
        for k, (a, coef) in acc.terms.items():
            if type(a) is FloorMod and type(a.b) is IntImm and a.b.value > 0 and (coef * a.b.value) % c == 0:
                # coef*(u % c1) == coef*u - coef*c1*(u // c1), and c divides coef*c1
                nxt = nxt.add(s.canon(a.a), coef)
                changed = True
            else:
                nxt = nxt.add(Sum.atom(k, a, coef))
        acc = nxt
        if not changed:
            break
    _q, rest = _split_divisible(acc, c)  # c*A never changes the remainder
    r = Sum(rest.terms, _reduce_const(rest.const, c), S.dtype)
    m = _block(s, r, c)
    if m is not None:
        return r.add_const(-m * c)
    found = _gcd_prefixes(s, r, c)
    if found is not None:
        p, g, m, q = found
        inner = floormod_const(s, p.exact_div(g).add_const(m), c // g)
        return inner.scale(g).add(q).add_const(-m * g)
    return s.make_atom(FloorMod(s.to_expr(r), IntImm(c, S.dtype)))


__all__ = ["floordiv", "floormod", "floordiv_const", "floormod_const"]
