"""The race checker and ThreadSync with XOR indices (issue 31): sound where the prover cannot
reason about a XOR (a barrier, a warning or a witness, never "race-free" by mistake), and precise
for the swizzles layouts use."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopir
from loopir.errors import CodegenError
from loopir.ir.buffer import Buffer
from loopir.ir.expr import PrimExpr, Var
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import Allocate, BufferStore, Evaluate, For, ForKind, PrimFunc, Stmt, seq
from loopir.passes import Sequential, ThreadSync
from loopir.passes.race_check import check_races, find_races, threads_may_share
from loopir.testing import run_cpu

T = 32  # threads


def _bind(v: Var, n: int, tag: str, body: Stmt) -> For:
    return For(v, 0, n, ForKind.THREAD_BINDING, body, thread_tag=tag)


def _syncs(s: object) -> int:
    n = 0

    def f(x: object) -> None:
        nonlocal n
        if isinstance(x, Evaluate) and getattr(x.value, "op", "") == "tvm_storage_sync":
            n += 1

    post_order_visit(s, f)
    return n


# index maps of a thread (t, u), t in [0, 32) and u in [0, 4); "+ 32 * u" gives each u its own row
MAPS = {
    "xor_const": lambda t, u: (t ^ 5) + 32 * u,
    "swizzle": lambda t, u: (t // 8 ^ t % 4) * 8 + t % 8 + 32 * u,  # t // 8 in [0, 4): permutes
    "drop_low_bit": lambda t, u: (t ^ (t % 2)) + 32 * u,  # 2k and 2k + 1 meet
    "self_cancel": lambda t, u: ((t ^ u) ^ u) + 32 * u,  # t, whatever u
    "with_u": lambda t, u: (t ^ u) + 32 * u,  # one-to-one in (t, u)
    "collide_u": lambda t, u: t ^ u,  # (t, u) and (t ^ 1, u ^ 1) meet
    "shift_mask": lambda t, u: (t >> 1 ^ (t & 1) << 4) + 32 * u,  # bits rotated: permutes
    "high_xor": lambda t, u: (t ^ (t // 4)) + 32 * u,  # permutes (Gray-code-like)
    "and": lambda t, u: (t & 28) + 32 * u,  # four threads per element
    "no_u": lambda t, u: t ^ 5,  # the four u of one t meet
}


def _scatter(name: str) -> PrimFunc:
    """``B[f(t, u)] = A[t, u]`` by threads (t, u): a race iff f is not one-to-one."""
    A = Buffer("A", (T, 4), "float32")
    B = Buffer("B", (4 * T,), "float32")
    t, u = Var("t"), Var("u")
    body = _bind(t, T, "threadIdx.x", _bind(u, 4, "threadIdx.y",
                                            BufferStore(B, A[t, u], (MAPS[name](t, u),))))
    return PrimFunc((A, B), _bind(Var("b"), 1, "blockIdx.x", body), name=name)


def _one_to_one(name: str) -> bool:
    seen = {MAPS[name](t, u) for t in range(T) for u in range(4)}
    return len(seen) == 4 * T


@pytest.mark.parametrize("name", sorted(MAPS))
def test_a_xor_scatter_is_race_free_exactly_when_one_to_one(name: str) -> None:
    report = find_races(_scatter(name))
    if _one_to_one(name):
        assert report.races == ()
    else:  # the witness search finds the two threads: never "race-free"
        assert report.races and "data race on global buffer B" in report.races[0]
        with pytest.raises(CodegenError, match="data race on global buffer B"):
            check_races(_scatter(name))


def test_the_prover_proves_the_swizzles_and_the_cancellation() -> None:
    for name in ("xor_const", "swizzle", "self_cancel", "with_u"):
        report = find_races(_scatter(name))
        assert report.races == () and report.unproven == (), name


@st.composite
def _xor_maps(draw: st.DrawFn):
    """``t ^ g`` and swizzles with random masks and divisors: one-to-one or not."""
    c = draw(st.sampled_from([1, 2, 4, 8, 16]))
    k = draw(st.integers(0, 31))
    kind = draw(st.sampled_from(["mod", "div", "const", "digit"]))

    def f(t: PrimExpr, u: PrimExpr) -> PrimExpr:
        if kind == "mod":
            e = t ^ (t % c)
        elif kind == "div":
            e = t ^ (t // c)
        elif kind == "const":
            e = (t ^ k) % c * (T // c) + t // c if c > 1 else t ^ k
        else:
            e = (t // c ^ (t + k) % c) * c + t % c
        return e + 32 * u

    return f


@given(_xor_maps())
def test_a_race_free_verdict_is_never_wrong(f) -> None:
    MAPS["drawn"] = f
    try:
        report = find_races(_scatter("drawn"))
        if not _one_to_one("drawn"):
            assert report.races, "a colliding XOR map was not refused"
    finally:
        del MAPS["drawn"]


def _exchange(write: PrimExpr, read: PrimExpr, t: Var) -> PrimFunc:
    """Threads fill ``S[write]`` then read ``S[read]`` (hand-lowered, no barrier yet)."""
    A = Buffer("A", (T,), "float32")
    B = Buffer("B", (T,), "float32")
    S = Buffer("S", (T,), "float32", scope="shared")
    body = _bind(t, T, "threadIdx.x", seq(BufferStore(S, A[t], (write,)), BufferStore(B, S[read], (t,))))
    return PrimFunc((A, B), _bind(Var("b"), 1, "blockIdx.x", Allocate(S, body)), name="exchange")


@pytest.mark.parametrize(("write", "read", "barrier"), [
    (lambda t: t ^ 1, lambda t: t, True),  # t reads what t ^ 1 wrote
    (lambda t: t ^ 1, lambda t: t ^ 1, False),  # each thread reads its own element
    (lambda t: (t // 8 ^ t % 4) * 8 + t % 8, lambda t: (t // 8 ^ t % 4) * 8 + t % 8, False),
    (lambda t: (t // 8 ^ t % 4) * 8 + t % 8, lambda t: t, True),
    (lambda t: t ^ (t % 2), lambda t: t ^ (t % 2), True),  # shared by two threads: a race
])  # fmt: skip
def test_thread_sync_inserts_the_barrier_a_xor_needs(write, read, barrier: bool) -> None:
    t = Var("t")
    f = _exchange(write(t), read(t), t)
    g = Sequential([ThreadSync()])(f)
    assert _syncs(g) == (1 if barrier else 0)
    a = np.random.default_rng(0).random(T, dtype=np.float32)
    w = np.array([int(loopir.arith.evaluate(write(t), {t: x})) for x in range(T)])
    r = np.array([int(loopir.arith.evaluate(read(t), {t: x})) for x in range(T)])
    if len(set(w)) < T:  # two threads store to one element: a race the checker refuses
        with pytest.raises(CodegenError, match="data race on shared buffer S"):
            check_races(g)
        return
    check_races(g)
    s = np.zeros(T, np.float32)
    s[w] = a
    for seed in range(4):
        out = run_cpu(g, [a, np.zeros(T, np.float32)], {"thread_order": "random", "seed": seed})
        np.testing.assert_array_equal(out[1], s[r])


@pytest.mark.parametrize(("index", "may_share"), [
    (lambda t: t & 28, True),  # four threads per element
    (lambda t: t | 32, False),  # disjoint bits: the simplifier makes it t + 32
    (lambda t: (t >> 2) ^ (t & 3) << 3, False),  # a permutation of [0, 32)
    (lambda t: (t >> 1) ^ (t & 1), True),  # t = 1 and t = 2 meet
])  # fmt: skip
def test_threads_may_share_on_bitwise_indices(index, may_share: bool) -> None:
    from loopir.passes.race_check import collect_accesses

    t = Var("t")
    f = _exchange(index(t), t, t)
    (store,) = [a for a in collect_accesses(f.body) if a.buffer.name == "S" and a.is_store]
    assert threads_may_share({"threadIdx.x": T}, store, store) is may_share
    values = [int(loopir.arith.evaluate(index(t), {t: x})) for x in range(T)]
    if not may_share:  # a "no" must be true
        assert len(set(values)) == T
