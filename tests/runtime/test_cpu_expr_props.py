"""Property test of the C translation of integer expressions against a Python evaluator.

Random expression trees over a loop variable and two loaded values, with + - * // % min max,
the bitwise ^ & | << >> and comparisons feeding Selects, are compiled together (one function, many outputs) and
compared element by element with exact Python integer arithmetic wrapped to the dtype after
every operation (the IR's semantics: two's-complement wrap-around, floor division).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import empty_like_param, random_nonzero

import loopir
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, IntImm, PrimExpr, Var
from loopir.ir.op import floordiv, floormod, if_then_else, max_, min_
from loopir.ir.stmt import BufferStore, For, ForKind, PrimFunc, seq

N = 16


def wrap(x: int, dtype: str) -> int:
    bits = np.dtype(dtype).itemsize * 8
    return ((x + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))


def expr_trees(dtype: str) -> st.SearchStrategy[Any]:
    """Nested tuples describing an expression; leaves: "i", "a", "b" or a small constant."""
    leaves = st.one_of(st.sampled_from(["i", "a", "b"]), st.integers(-20, 20).map(lambda c: ("c", c)))

    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        binary = st.tuples(st.sampled_from(["+", "-", "*", "min", "max"]), children, children)
        # divisors: loaded data (never zero) or a non-zero constant
        div = st.tuples(
            st.sampled_from(["//", "%"]),
            children,
            st.one_of(st.just("b"), st.integers(-7, 7).filter(bool).map(lambda c: ("c", c))),
        )
        sel = st.tuples(st.just("sel"), st.sampled_from(["<", "<=", "==", "!="]), children, children, children, children)
        # the bitwise intrinsics (issue 31): shifts by constant amounts in [0, 8)
        bits = st.tuples(st.sampled_from(["^", "&", "|"]), children, children)
        shift = st.tuples(st.sampled_from(["<<", ">>"]), children, st.integers(0, 7).map(lambda c: ("c", c)))
        return st.one_of(binary, div, sel, bits, shift)

    return st.recursive(leaves, extend, max_leaves=10)


def build(tree: Any, env: dict[str, PrimExpr], dtype: str) -> PrimExpr:
    if isinstance(tree, str):
        return env[tree]
    if tree[0] == "c":
        return IntImm(tree[1], dtype)
    op = tree[0]
    if op == "sel":
        _, cmp, x, y, t, f = tree
        bx, by = build(x, env, dtype), build(y, env, dtype)
        cond = {"<": bx < by, "<=": bx <= by, "==": bx == by, "!=": bx != by}[cmp]
        return if_then_else(cond, build(t, env, dtype), build(f, env, dtype))
    a, b = build(tree[1], env, dtype), build(tree[2], env, dtype)
    return {
        "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "min": lambda: min_(a, b),
        "max": lambda: max_(a, b), "//": lambda: floordiv(a, b), "%": lambda: floormod(a, b),
        "^": lambda: a ^ b, "&": lambda: a & b, "|": lambda: a | b, "<<": lambda: a << b,
        ">>": lambda: a >> b,
    }[op]()  # fmt: skip


def evaluate(tree: Any, env: dict[str, int], dtype: str) -> int:
    if isinstance(tree, str):
        return env[tree]
    if tree[0] == "c":
        return tree[1]
    op = tree[0]
    if op == "sel":
        _, cmp, x, y, t, f = tree
        vx, vy = evaluate(x, env, dtype), evaluate(y, env, dtype)
        ok = {"<": vx < vy, "<=": vx <= vy, "==": vx == vy, "!=": vx != vy}[cmp]
        return evaluate(t if ok else f, env, dtype)
    a, b = evaluate(tree[1], env, dtype), evaluate(tree[2], env, dtype)
    if op in ("//", "%") and b == 0:
        raise ZeroDivisionError
    res = {
        "+": a + b, "-": a - b, "*": a * b, "min": min(a, b), "max": max(a, b),
        "//": a // b if b else 0, "%": a % b if b else 0, "^": a ^ b, "&": a & b, "|": a | b,
        "<<": a << b if 0 <= b < 64 else 0, ">>": a >> b if 0 <= b < 64 else 0,
    }[op]  # fmt: skip
    return wrap(res, dtype)


@settings(max_examples=8)
@given(
    dtype=st.sampled_from(["int8", "int16", "int32", "int64"]),
    trees=st.data(),
    seed=st.integers(0, 2**32 - 1),
)
def test_integer_expressions_match_python(dtype: str, trees: st.DataObject, seed: int) -> None:
    exprs = trees.draw(st.lists(expr_trees(dtype), min_size=1, max_size=6), label="exprs")
    A, B = Buffer("A", (N,), dtype), Buffer("B", (N,), dtype)
    outs = [Buffer(f"O{k}", (N,), dtype) for k in range(len(exprs))]
    i = Var("i", dtype if dtype in ("int32", "int64") else "int32")
    idx = i
    iv = i if i.dtype == dtype else i.astype(dtype)
    env = {"i": iv, "a": BufferLoad(A, (idx,)), "b": BufferLoad(B, (idx,))}
    body = seq(*[BufferStore(o, build(t, env, dtype), (idx,)) for o, t in zip(outs, exprs)])
    func = PrimFunc((A, B, *outs), For(i, 0, N, ForKind.SERIAL, body))
    mod = loopir.build(func, target="cpu")
    rng = np.random.default_rng(seed)
    a = random_nonzero((N,), dtype, rng)
    b = random_nonzero((N,), dtype, rng)
    results = [empty_like_param((N,), dtype) for _ in outs]
    mod(a, b, *results)
    for k, tree in enumerate(exprs):
        for n in range(N):
            env_v = {"i": n, "a": int(a[n]), "b": int(b[n])}
            assert int(results[k][n]) == evaluate(tree, env_v, dtype), (tree, n, env_v)


def float_trees() -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.sampled_from(["a", "b"]),
        st.sampled_from([0.5, -1.25, 3.0, 0.1, -7.5]).map(lambda c: ("c", c)),
    )

    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        binary = st.tuples(st.sampled_from(["+", "-", "*", "/", "min", "max", "//", "%"]), children, children)
        sel = st.tuples(st.just("sel"), st.sampled_from(["<", "<=", "==", "!="]), children, children, children, children)
        return st.one_of(binary, sel)

    return st.recursive(leaves, extend, max_leaves=8)


def build_f(tree: Any, env: dict[str, PrimExpr], dtype: str) -> PrimExpr:
    from loopir.ir.expr import make_const

    if isinstance(tree, str):
        return env[tree]
    if tree[0] == "c":
        return make_const(tree[1], dtype)
    if tree[0] == "sel":
        _, cmp, x, y, t, f = tree
        bx, by = build_f(x, env, dtype), build_f(y, env, dtype)
        cond = {"<": bx < by, "<=": bx <= by, "==": bx == by, "!=": bx != by}[cmp]
        return if_then_else(cond, build_f(t, env, dtype), build_f(f, env, dtype))
    a, b = build_f(tree[1], env, dtype), build_f(tree[2], env, dtype)
    return {
        "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
        "min": lambda: min_(a, b), "max": lambda: max_(a, b), "//": lambda: floordiv(a, b),
        "%": lambda: floormod(a, b),
    }[tree[0]]()  # fmt: skip


def evaluate_f(tree: Any, env: dict[str, Any], t: type) -> Any:
    """Reference with numpy scalars of the dtype: IEEE rounding after every operation."""
    if isinstance(tree, str):
        return env[tree]
    if tree[0] == "c":
        return t(tree[1])
    if tree[0] == "sel":
        _, cmp, x, y, tv, fv = tree
        vx, vy = evaluate_f(x, env, t), evaluate_f(y, env, t)
        ok = {"<": vx < vy, "<=": vx <= vy, "==": vx == vy, "!=": vx != vy}[cmp]
        return evaluate_f(tv if ok else fv, env, t)
    a, b = evaluate_f(tree[1], env, t), evaluate_f(tree[2], env, t)
    op = tree[0]
    if op in ("//", "%"):  # the IR's float floordiv is floor(a / b) (as in TVM)
        q = t(np.floor(t(a / b)))
        return q if op == "//" else t(a - t(q * b))
    return {
        "+": lambda: t(a + b), "-": lambda: t(a - b), "*": lambda: t(a * b),
        "/": lambda: t(a / b), "min": lambda: t(np.fmin(a, b)), "max": lambda: t(np.fmax(a, b)),
    }[op]()  # fmt: skip


@settings(max_examples=6)
@given(dtype=st.sampled_from(["float16", "float32", "float64"]), trees=st.data(), seed=st.integers(0, 2**32 - 1))
def test_float_expressions_round_per_operation(dtype: str, trees: st.DataObject, seed: int) -> None:
    exprs = trees.draw(st.lists(float_trees(), min_size=1, max_size=6), label="exprs")
    A, B = Buffer("A", (N,), dtype), Buffer("B", (N,), dtype)
    outs = [Buffer(f"O{k}", (N,), dtype) for k in range(len(exprs))]
    i = Var("i")
    env = {"a": BufferLoad(A, (i,)), "b": BufferLoad(B, (i,))}
    body = seq(*[BufferStore(o, build_f(t, env, dtype), (i,)) for o, t in zip(outs, exprs)])
    mod = loopir.build(PrimFunc((A, B, *outs), For(i, 0, N, ForKind.SERIAL, body)), target="cpu")
    rng = np.random.default_rng(seed)
    a, b = random_nonzero((N,), dtype, rng, 4.0), random_nonzero((N,), dtype, rng, 4.0)
    results = [empty_like_param((N,), dtype) for _ in outs]
    mod(a, b, *results)
    t = np.dtype(dtype).type
    with np.errstate(all="ignore"):
        for k, tree in enumerate(exprs):
            expect = np.array([evaluate_f(tree, {"a": a[n], "b": b[n]}, t) for n in range(N)], dtype)
            np.testing.assert_array_equal(results[k], expect, err_msg=str(tree))
