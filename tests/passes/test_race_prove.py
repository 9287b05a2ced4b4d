"""The symbolic race proof (loopir.passes.race_prove): sound against exact enumeration, strong
enough for the kernels loopir emits, and never enumerating on ThreadSync's path."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir import examples
from loopir.codegen_cuda import lower_for_cuda
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import And, Cast, FloorDiv, FloorMod, IntImm, PrimExpr, Var
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.passes import race_check
from loopir.passes.race_check import _conflict, _Kernel, _kernels, _pairs, _proven
from loopir.passes.race_prove import BLOCK_TAGS, GRID_TAGS, prove_exclusive


def _bind(v: Var, n: int, tag: str, body: Stmt) -> For:
    return For(v, 0, n, ForKind.THREAD_BINDING, body, thread_tag=tag)


def _c(v: int) -> IntImm:
    return IntImm(v, "int32")


# -- a grammar of small kernels: two accesses to one buffer under threads, loops and guards --


@st.composite
def _term(draw: Any, vs: list[Var]) -> PrimExpr:
    """``v``, ``v // d`` or ``v % d`` times a coefficient."""
    v = draw(st.sampled_from(vs))
    kind = draw(st.sampled_from(["v", "v", "div", "mod"]))
    d = draw(st.sampled_from([2, 3, 4]))
    e: PrimExpr = v if kind == "v" else FloorDiv(v, _c(d)) if kind == "div" else FloorMod(v, _c(d))
    return e * draw(st.sampled_from([1, 1, 2, 3, 4, 8]))


@st.composite
def _index(draw: Any, vs: list[Var]) -> PrimExpr:
    e: PrimExpr = _c(draw(st.integers(0, 3)))
    for _ in range(draw(st.integers(1, 3))):
        e = e + draw(_term(vs))
    return e


@st.composite
def _guard(draw: Any, vs: list[Var]) -> PrimExpr | None:
    if draw(st.booleans()):
        return None
    g: PrimExpr = draw(_index(vs)) < _c(draw(st.integers(1, 12)))
    if draw(st.booleans()):
        g = And(g, draw(st.sampled_from(vs)) == _c(draw(st.integers(0, 1))))
    return g


@st.composite
def _access(draw: Any, buf: Buffer, t: list[Var], store: bool, ndim: int) -> tuple[Stmt, Var]:
    i = Var("i")
    vs = [*t, i]
    idx = tuple(draw(_index(vs)) for _ in range(ndim))
    if store:
        value: PrimExpr = Cast("float32", t[0] * 7 + i)
        s: Stmt = BufferStore(buf, value, idx)
    else:
        out = Buffer("O", (64,), "float32")
        s = BufferStore(out, buf[idx], (_c(0),))
    g = draw(_guard(vs))
    if g is not None:
        s = IfThenElse(g, s)
    return For(i, 0, draw(st.integers(1, 3)), ForKind.SERIAL, s), i


@st.composite
def _kernel(draw: Any) -> PrimFunc:
    scope = draw(st.sampled_from(["shared", "global"]))
    ndim = draw(st.integers(1, 2))
    buf = Buffer("S", (64,) * ndim, "float32", scope=scope)
    b, tx, ty = Var("b"), Var("tx"), Var("ty")
    t = [tx, ty]
    first, _ = draw(_access(buf, t, True, ndim))
    second, _ = draw(_access(buf, t, draw(st.booleans()), ndim))
    parts = [first, second]
    if draw(st.booleans()):
        parts.insert(1, Evaluate(op.storage_sync("shared")))
    body: Stmt = seq(*parts)
    body = _bind(ty, draw(st.integers(1, 3)), "threadIdx.y", body)
    body = _bind(tx, draw(st.integers(1, 6)), "threadIdx.x", body)
    if scope == "shared":
        body = Allocate(buf, body)
    body = _bind(b, draw(st.integers(1, 3)), "blockIdx.x", body)
    params = (Buffer("O", (64,), "float32"),) + ((buf,) if scope == "global" else ())
    return PrimFunc(params, body, name="k")


@settings(max_examples=300, deadline=None)
@given(_kernel())
def test_what_the_proof_accepts_exact_enumeration_never_refutes(func: PrimFunc) -> None:
    # soundness of the race checker's proof (threads of a block after the same number of
    # barriers, and blocks) and of ThreadSync's question (threads of a block, any barriers)
    for root in _kernels(func.body):
        k = _Kernel(root, func)
        launch = {t: k.extent(t) for t in BLOCK_TAGS}
        for w, x in _pairs(k):
            pw = k.points(w, sample=False)
            px = pw if x is w else k.points(x, sample=False)
            shared = w.buffer.scope == "shared"
            if _proven(k, w, x):
                assert _conflict(pw, px, shared) is None, (w.indices, x.indices)
            if not race_check.threads_may_share(launch, w, x, k.written):
                # two threads of one block, whatever the barriers: only their element matters
                pw0 = race_check._Points(pw.elem, pw.block, pw.thread, pw.count * 0, pw.env,
                                         pw.approx, pw.value)  # fmt: skip
                px0 = pw0 if x is w else race_check._Points(
                    px.elem, px.block, px.thread, px.count * 0, px.env, px.approx, px.value)
                assert _conflict(pw0, px0, True) is None, (w.indices, x.indices)


# -- strength: the patterns loopir's schedules emit are proven ----------------------------


def _tile_kernel(store_idx: Any, load_idx: Any, guard: Any = None) -> PrimFunc:
    """A shared tile filled by 256 threads (``store_idx(tx, v)``, 4 lanes each), a barrier, and
    a read (``load_idx(tx, i)``) under a serial loop of 1024 iterations."""
    S = Buffer("S", (2, 128, 4), "float32", scope="shared")
    O = Buffer("O", (1 << 20,), "float32")
    b, tx, v, i, k = Var("b"), Var("tx"), Var("v"), Var("i"), Var("k")
    fill: Stmt = BufferStore(S, Cast("float32", tx), store_idx(tx, v, k))
    if guard is not None:
        fill = IfThenElse(guard(tx, v), fill)
    body = For(k, 0, 1024, ForKind.SERIAL, seq(
        For(v, 0, 4, ForKind.VECTORIZED, fill),
        Evaluate(op.storage_sync("shared")),
        For(i, 0, 8, ForKind.SERIAL, BufferStore(O, S[load_idx(tx, i, k)], (b * 256 + tx,))),
        Evaluate(op.storage_sync("shared")),
    ))  # fmt: skip
    body = _bind(b, 4096, "blockIdx.x", Allocate(S, _bind(tx, 256, "threadIdx.x", body)))
    return PrimFunc((O,), body, name="tile")


def _store_pairs(func: PrimFunc) -> list[tuple[Any, Any, _Kernel]]:
    k = _Kernel(next(_kernels(func.body)), func)
    return [(w, x, k) for w, x in _pairs(k)]


def test_versions_of_a_multi_buffered_tile_are_told_apart_by_the_thread_dimension() -> None:
    # regression: the store to version 0 and to version (k + 1) % 2 of one tile were proven
    # only by enumerating elements (the version index is not a function of the thread)
    def fill(t: Var, v: Var, k: Var) -> tuple[PrimExpr, ...]:
        return (FloorMod(k + 1, _c(2)), t, v)

    f = _tile_kernel(fill, lambda t, i, k: (FloorMod(k, _c(2)), t, _c(0)),
                     guard=lambda t, v: t * 4 + v < 512)  # fmt: skip
    launch = {"threadIdx.x": 256}
    stores = [a for a in race_check.collect_accesses(f.body) if a.is_store and a.buffer.name == "S"]
    assert not race_check.threads_may_share(launch, stores[0], stores[0])


def test_a_guard_bounds_the_threads_of_a_fill() -> None:
    # ``tx * 4 + v < 512`` keeps tx below 128, the tile's row count: each thread its own row
    S = Buffer("S", (128, 4), "float32", scope="shared")
    tx, v = Var("tx"), Var("v")
    st_ = BufferStore(S, Cast("float32", tx), (tx, v))
    root = _bind(tx, 256, "threadIdx.x", For(v, 0, 4, ForKind.SERIAL, IfThenElse(tx * 4 + v < 512, st_)))
    (acc,) = race_check.collect_accesses(root)
    assert prove_exclusive(lambda t: 256 if t == "threadIdx.x" else 1, acc, acc, BLOCK_TAGS, GRID_TAGS)


def test_a_fill_and_a_read_of_other_threads_rows_are_not_proven() -> None:
    f = _tile_kernel(lambda t, v, k: (_c(0), FloorDiv(t, _c(2)), v),
                     lambda t, i, k: (_c(0), FloorDiv(t, _c(32)) * 8 + i, _c(0)))  # fmt: skip
    launch = {"threadIdx.x": 256}
    accs = [a for a in race_check.collect_accesses(f.body) if a.buffer.name == "S"]
    store, load = accs[0], accs[1]
    assert race_check.threads_may_share(launch, store, load)


def test_barrier_counts_order_a_fill_and_a_read_at_any_loop_extent() -> None:
    # the read of other threads' elements after the barrier, and the next iteration's fill
    # after the second barrier: proven through the barrier counts, whatever the extents
    f = _tile_kernel(lambda t, v, k: (_c(0), t, v),
                     lambda t, i, k: (_c(0), FloorDiv(t, _c(32)) * 8 + i, _c(0)),
                     guard=lambda t, v: t * 4 + v < 512)  # fmt: skip
    report = race_check.find_races(f)
    assert not report.races and not report.unproven


def test_thread_sync_never_enumerates(monkeypatch: pytest.MonkeyPatch) -> None:
    # the cost of barrier planning must not grow with the tensor sizes: no element is listed
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("ThreadSync enumerated an iteration domain")

    monkeypatch.setattr(race_check, "_grid", refuse)
    with loopir.PassContext(config={"tir.enable_local_pad": True}):
        lower_for_cuda(examples.dense(960, 770, 2304).func)
    lower_for_cuda(examples.pipelined_gemm(4096, 4096, 4096).func)
    lower_for_cuda(examples.transpose(1024, 1024).func)
    lower_for_cuda(examples.softmax(4096, 4096).func)


@pytest.mark.parametrize("make", [
    lambda: examples.dense(960, 770, 2304).func,
    lambda: examples.pipelined_gemm(1024, 1024, 1024).func,
    lambda: examples.layernorm(4096, 1024, "float16").func,
    lambda: examples.transpose(1000, 1003).func,
])  # fmt: skip
def test_examples_are_proven_without_enumeration(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # every pair of every example kernel is proven symbolically (the witness search, which
    # enumerates, is never reached)
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the race checker fell back to enumeration")

    lowered = lower_for_cuda(make())
    monkeypatch.setattr(race_check, "_grid", refuse)
    report = race_check.find_races(lowered)
    assert not report.races and not report.unproven and report.pairs_checked
