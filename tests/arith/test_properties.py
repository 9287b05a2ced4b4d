"""Soundness of the analyzer against brute-force evaluation on random expressions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loopir.arith import Analyzer, evaluate
from loopir.ir.buffer import Range
from loopir.ir.expr import IntImm, Var
from tests.arith.exprgen import bool_case, index_case, int_case, int_expr, points, value


def _values(e, ranges):
    return [(env, value(e, env)) for env in points(ranges)]


@given(int_case())
def test_simplify_preserves_integer_values(case):
    e, ranges = case
    s = Analyzer(ranges).simplify(e)
    for env, want in _values(e, ranges):
        if want is None:
            continue  # undefined in the original: anything goes
        got = value(s, env)
        assert got == want, f"simplify({e}) = {s}: {got} != {want} at { {v.name: x for v, x in env.items()} }"


@given(int_case())
def test_simplify_is_idempotent_in_value_and_stable(case):
    e, ranges = case
    ana = Analyzer(ranges)
    s1 = ana.simplify(e)
    s2 = ana.simplify(s1)
    for env, want in _values(e, ranges):
        if want is not None:
            assert value(s2, env) == want


@given(int_case())
def test_const_int_bound_contains_every_value(case):
    e, ranges = case
    b = Analyzer(ranges).const_int_bound(e)
    for _env, v in _values(e, ranges):
        if v is not None:
            assert b.contains(v), f"{b} misses {v} of {e}"


@given(int_case())
def test_const_int_bound_of_simplified_contains_every_value(case):
    e, ranges = case
    ana = Analyzer(ranges)
    b = ana.const_int_bound(ana.simplify(e))
    for _env, v in _values(e, ranges):
        if v is not None:
            assert b.contains(v)


@given(bool_case())
def test_simplify_preserves_conditions(case):
    c, ranges = case
    s = Analyzer(ranges).simplify(c)
    for env, want in _values(c, ranges):
        if want is None:
            continue
        assert value(s, env) == want, f"simplify({c}) = {s} differs at {env}"


@given(bool_case())
def test_can_prove_never_proves_a_false_condition(case):
    c, ranges = case
    ana = Analyzer(ranges)
    vals = [v for _env, v in _values(c, ranges)]
    if ana.can_prove(c):
        assert all(v is None or v for v in vals), f"proved {c} which is false somewhere"
    # and the negation: proving "not c" means c is false everywhere
    if ana.can_prove(~c):
        assert all(v is None or not v for v in vals)


@given(bool_case(max_vars=2, depth=2))
def test_can_prove_decides_constant_conditions_it_can(case):
    # A condition true everywhere whose simplification folds must be provable: can_prove
    # is at least as strong as the simplifier.
    c, ranges = case
    ana = Analyzer(ranges)
    if type(ana.simplify(c)) is IntImm and ana.simplify(c).value == 1:
        assert ana.can_prove(c)


@st.composite
def _interval_case(draw):
    e, ranges = draw(int_case(max_vars=3, depth=3))
    vs = list(ranges)
    relaxed = [v for v in vs if draw(st.booleans())]
    return e, ranges, relaxed


@given(_interval_case())
def test_int_set_contains_every_value_and_exact_bounds_are_attained(case):
    e, ranges, relaxed = case
    fixed = {v: r for v, r in ranges.items() if v not in relaxed}
    relax = {v: ranges[v] for v in relaxed}
    ana = Analyzer(fixed)
    iset = ana.int_set(e, relax)
    outer = list(points(fixed)) if fixed else [{}]
    for env0 in outer:
        lo, hi = value(iset.min, env0), value(iset.max, env0)
        if lo is None or hi is None:
            continue  # the bound keeps a division by zero of the original (undefined there)
        assert value(iset.extent, env0) == hi - lo + 1
        seen = []
        for env1 in points(relax) if relax else [{}]:
            env = {**env0, **env1}
            v = value(e, env)
            if v is None:
                continue
            seen.append(v)
            assert lo <= v <= hi, f"int_set({e}) = [{iset.min}, {iset.max}] misses {v} at {env}"
        if iset.exact and seen and len(seen) == len(list(points(relax)) if relax else [0]):
            assert min(seen) == lo and max(seen) == hi, f"int_set({e}) claims exact {iset}"


@given(int_case(max_vars=2, depth=3), int_case(max_vars=2, depth=3))
def test_can_prove_equal_is_sound(c1, c2):
    a, ranges = c1
    vs = list(ranges)
    # a second expression over the same variables
    b = c2[0]
    from loopir.ir.functor import substitute

    other = list(c2[1])
    b = substitute(b, {o: vs[i % len(vs)] for i, o in enumerate(other)})
    ana = Analyzer(ranges)
    if ana.can_prove_equal(a, b):
        for env in points(ranges):
            va, vb = value(a, env), value(b, env)
            if va is not None and vb is not None:
                assert va == vb
    # completeness on the easy case: an expression equals its own simplification
    assert ana.can_prove_equal(a, ana.simplify(a))


@given(int_case(max_vars=3, depth=3))
def test_detect_linear_reconstructs_the_expression(case):
    e, ranges = case
    vs = list(ranges)
    from loopir.arith import detect_linear

    res = detect_linear(e, vs)
    if res is None:
        return
    *coeffs, base = res
    for env in points(ranges):
        want = value(e, env)
        if want is None:
            continue
        got = evaluate(base, env) + sum(evaluate(c, env) * env[v] for c, v in zip(coeffs, vs))
        assert got == want


@st.composite
def _symbolic_case(draw):
    # x in [lo, lo + n) with n itself a variable in [1, 5]: symbolic extents
    n = Var("n")
    x = Var("x")
    y = Var("y")
    lo = draw(st.integers(-3, 3))
    ranges = {n: Range(1, 5), x: Range(lo, n), y: Range(0, 3)}
    e = int_expr(draw, [x, n, y], 3)
    return e, ranges, lo


def _symbolic_points(lo):
    for nv in range(1, 6):
        for xv in range(lo, lo + nv):
            for yv in range(0, 3):
                yield nv, xv, yv


@given(_symbolic_case(), st.sampled_from(["lt", "le", "ge", "eq"]))
def test_symbolic_ranges_are_sound(case, cmp):
    e, ranges, lo = case
    n, x, y = list(ranges)
    ana = Analyzer(ranges)
    s = ana.simplify(e)
    b = ana.const_int_bound(e)
    other = {"lt": e < n, "le": e <= x, "ge": e >= lo, "eq": e == x}[cmp]
    proved = ana.can_prove(other)
    for nv, xv, yv in _symbolic_points(lo):
        env = {n: nv, x: xv, y: yv}
        want = value(e, env)
        if want is None:
            continue
        assert value(s, env) == want
        assert b.contains(want)
        if proved:
            assert value(other, env)


@given(int_case())
def test_simplified_form_is_a_fixpoint(case):
    # a second simplification (even by a fresh analyzer) changes nothing structurally
    e, ranges = case
    s1 = Analyzer(ranges).simplify(e)
    s2 = Analyzer(ranges).simplify(s1)
    from loopir.arith.canonical import ExprKeys

    keys = ExprKeys()
    assert keys.key(s1) == keys.key(s2), f"{e}: {s1} -> {s2}"


@given(bool_case())
def test_simplified_condition_is_a_fixpoint(case):
    c, ranges = case
    s1 = Analyzer(ranges).simplify(c)
    s2 = Analyzer(ranges).simplify(s1)
    from loopir.arith.canonical import ExprKeys

    keys = ExprKeys()
    assert keys.key(s1) == keys.key(s2), f"{c}: {s1} -> {s2}"


@given(index_case())
def test_index_arithmetic_simplification_is_exact(case):
    e, ranges = case
    ana = Analyzer(ranges)
    s = ana.simplify(e)
    b = ana.const_int_bound(e)
    for env, want in _values(e, ranges):
        assert value(s, env) == want, f"simplify({e}) = {s} differs at {env}"
        assert b.contains(want)


@given(index_case(), st.integers(0, 7))
def test_index_arithmetic_int_set_is_sound(case, mask):
    e, ranges = case
    vs = list(ranges)
    relax = {v: ranges[v] for i, v in enumerate(vs) if mask >> i & 1}
    fixed = {v: r for v, r in ranges.items() if v not in relax}
    iset = Analyzer(fixed).int_set(e, relax)
    for env0 in points(fixed) if fixed else [{}]:
        lo, hi = evaluate(iset.min, env0), evaluate(iset.max, env0)
        seen = [value(e, {**env0, **env1}) for env1 in (points(relax) if relax else [{}])]
        assert all(lo <= v <= hi for v in seen), f"int_set({e}) = {iset} misses values"
        if iset.exact:
            assert min(seen) == lo and max(seen) == hi, f"int_set({e}) = {iset} is not exact"


@st.composite
def _same_form_conditions(draw):
    # chains of comparisons of one linear form (and its negation) against constants
    v0, v1 = Var("v0"), Var("v1")
    ranges = {v0: Range(draw(st.integers(-6, 0)), 8), v1: Range(0, draw(st.integers(1, 4)))}
    form = v0 * draw(st.sampled_from([1, 2, -1])) + v1 * draw(st.sampled_from([0, 1, 3]))
    from tests.arith.exprgen import CMPS

    def atom():
        cmp = draw(st.sampled_from(CMPS))
        c = IntImm(draw(st.integers(-12, 12)))
        return cmp(form, c) if draw(st.booleans()) else cmp(c, form)

    e = atom()
    for _ in range(draw(st.integers(1, 4))):
        from loopir.ir.expr import And, Or

        e = (And if draw(st.booleans()) else Or)(e, atom())
    return e, ranges


@given(_same_form_conditions())
def test_combined_comparisons_keep_their_value(case):
    c, ranges = case
    ana = Analyzer(ranges)
    s = ana.simplify(c)
    proved = ana.can_prove(c)
    for env, want in _values(c, ranges):
        assert value(s, env) == want, f"simplify({c}) = {s} differs at {env}"
        if proved:
            assert want
    # also without ranges (pure logic)
    s2 = Analyzer().simplify(c)
    for env, want in _values(c, ranges):
        assert value(s2, env) == want, f"simplify({c}) = {s2} differs at {env}"
