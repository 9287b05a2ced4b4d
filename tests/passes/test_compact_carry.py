"""CompactBufferAllocation never narrows an allocation into a loop whose iterations carry the
buffer's value (issue 28 B): a value written in iteration i and read in iteration i + 1, or
accumulated across the iterations, must survive them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from test_compact_global import _allocs

import loopir
from loopir.ir.buffer import Buffer
from loopir.ir.expr import EQ, And, BufferLoad, FloatImm, IntImm, PrimExpr, Var
from loopir.ir.op import floormod
from loopir.ir.stmt import Allocate, BufferStore, For, ForKind, IfThenElse, PrimFunc, Stmt, seq
from loopir.passes import CompactBufferAllocation
from loopir.testing.strategies import carried_values

M, N = 4, 6
SERIAL = ForKind.SERIAL


def _loop(v: Var, extent: int, body: Stmt, kind: ForKind = SERIAL, tag: str | None = None) -> For:
    return For(v, 0, extent, kind, body, thread_tag=tag)


def _zero() -> PrimExpr:
    return FloatImm(0.0, "float32")


def _int(v: int) -> PrimExpr:
    return IntImm(v, "int32")


def _io() -> tuple[Buffer, Buffer]:
    return Buffer("A", (M, N), "float32"), Buffer("B", (M, N), "float32")


def previous_element(scope: str) -> PrimFunc:
    """``B[j, i] = A[j, i - 1]`` (0 at i == 0) through ``L``: written in iteration i of the
    inner loop, read in iteration i + 1."""
    A, B = _io()
    L = Buffer("L", (M, N), "float32", scope=scope)
    j, i = Var("j"), Var("i")
    body = seq(
        IfThenElse(i > 0, BufferStore(B, BufferLoad(L, (j, i - 1)), (j, i)), BufferStore(B, _zero(), (j, i))),
        BufferStore(L, BufferLoad(A, (j, i)), (j, i)),
    )
    return PrimFunc((A, B), Allocate(L, _loop(j, M, _loop(i, N, body))))


def previous_scalar(scope: str) -> PrimFunc:
    """As :func:`previous_element` through one element ``L[0]``."""
    A, B = _io()
    L = Buffer("L", (1,), "float32", scope=scope)
    j, i = Var("j"), Var("i")
    body = seq(
        IfThenElse(i > 0, BufferStore(B, BufferLoad(L, (0,)), (j, i)), BufferStore(B, _zero(), (j, i))),
        BufferStore(L, BufferLoad(A, (j, i)), (0,)),
    )
    return PrimFunc((A, B), Allocate(L, _loop(j, M, _loop(i, N, body))))


def running_sum(scope: str, init: str) -> PrimFunc:
    """``B[j, i] = A[j, 0] + ... + A[j, i]`` accumulated in ``S[j]`` across the iterations of
    ``i``; ``init`` says how the first iteration resets it: ``"eq"`` (``if i == 0``, what
    LowerBlocks writes for a block's init), ``"lt"`` (``if i < 1``), ``"none"`` (a store of
    ``A[j, 0]`` before the loop, the sum then starting at ``i = 1``)."""
    A, B = _io()
    S = Buffer("S", (M,), "float32", scope=scope)
    j, i = Var("j"), Var("i")
    acc = seq(
        BufferStore(S, BufferLoad(S, (j,)) + BufferLoad(A, (j, i)), (j,)),
        BufferStore(B, BufferLoad(S, (j,)), (j, i)),
    )
    if init == "none":
        inner = seq(BufferStore(S, BufferLoad(A, (j, 0)), (j,)), BufferStore(B, BufferLoad(A, (j, 0)), (j, 0)),
                    For(i, 1, N - 1, SERIAL, acc))  # fmt: skip
    else:
        first = EQ(i, _int(0)) if init == "eq" else i < 1
        inner = _loop(i, N, seq(IfThenElse(first, BufferStore(S, _zero(), (j,))), acc))
    return PrimFunc((A, B), Allocate(S, _loop(j, M, inner)))


def two_loop_sum(guard: str) -> PrimFunc:
    """``B[j, 0] = sum(A[j, :])`` over a split reduction ``k0 * 2 + k1`` (3 x 2), the init under
    ``k0 == 0 and k1 == 0`` (``guard="both"``) or only ``k1 == 0`` (``"inner"``: it resets the
    sum at every ``k0``, so ``B`` gets the last two elements)."""
    A, B = _io()
    S = Buffer("S", (M,), "float32", scope="local")
    j, k0, k1 = Var("j"), Var("k0"), Var("k1")
    cond: PrimExpr = EQ(k1, _int(0)) if guard == "inner" else And(EQ(k0, _int(0)), EQ(k1, _int(0)))
    body = seq(
        IfThenElse(cond, BufferStore(S, _zero(), (j,))),
        BufferStore(S, BufferLoad(S, (j,)) + BufferLoad(A, (j, k0 * 2 + k1)), (j,)),
    )
    nest = seq(_loop(k0, 3, _loop(k1, 2, body)), BufferStore(B, BufferLoad(S, (j,)), (j, 0)))
    return PrimFunc((A, B), Allocate(S, _loop(j, M, nest)))


def shared_window(window: bool) -> PrimFunc:
    """A kernel of 4 threads; thread ``tx`` keeps ``A[k, tx]`` in shared ``L[tx, k]`` and reads
    it back in iteration ``k + 1`` (``window``) or in the same iteration (not carried)."""
    A, B = _io()
    L = Buffer("L", (M, N), "float32", scope="shared")
    tx, k = Var("tx"), Var("k")
    if window:
        use: Stmt = IfThenElse(k > 0, BufferStore(B, BufferLoad(L, (tx, k - 1)), (tx, k)), BufferStore(B, _zero(), (tx, k)))
        body = seq(use, BufferStore(L, BufferLoad(A, (tx, k)), (tx, k)))
    else:
        body = seq(BufferStore(L, BufferLoad(A, (tx, k)), (tx, k)), BufferStore(B, BufferLoad(L, (tx, k)) * 2.0, (tx, k)))
    kernel = _loop(tx, M, _loop(k, N, body), ForKind.THREAD_BINDING, "threadIdx.x")
    return PrimFunc((A, B), Allocate(L, kernel))


def sometimes_written(how: str) -> PrimFunc:
    """``L[0]`` is written only in some iterations of ``i`` and read in all, so a read gets
    the last value written, often in an earlier iteration (NaN before the first): under a guard
    that reads memory (``A[j, i] > 1.5``, ``how="data"``), in a loop that runs ``i % 2``
    times (``"loop"``), in one branch of ``i < 3`` whose other branch writes another element
    (``"branch"``)."""
    A, B = _io()
    L = Buffer("L", (2,), "float32", scope="local")
    j, i, t = Var("j"), Var("i"), Var("t")
    write = BufferStore(L, BufferLoad(A, (j, i)), (0,))
    if how == "data":
        update: Stmt = IfThenElse(BufferLoad(A, (j, i)) > 1.5, write)
    elif how == "loop":
        update = For(t, 0, floormod(i, _int(2)), SERIAL, write)
    else:
        update = IfThenElse(i < 3, write, BufferStore(L, _zero(), (1,)))
    body = seq(update, BufferStore(B, BufferLoad(L, (0,)), (j, i)))
    return PrimFunc((A, B), Allocate(L, _loop(j, M, _loop(i, N, body))))


allocations = _allocs  # allocated buffer name -> (shape, loops around its Allocate)


def run_io(func: PrimFunc) -> np.ndarray:
    """``B`` after running ``func(A, B)`` (``A`` random in [1, 2), ``B`` all -1)."""
    shape = tuple(int(e.value) for e in func.params[0].shape)
    a = np.random.default_rng(3).random(shape).astype("float32") + 1.0
    b = np.full(shape, -1.0, "float32")
    loopir.build(func, target="cpu")(a, b)
    return b


run = run_io


def assert_same_results(func: PrimFunc) -> PrimFunc:
    """The compacted function, after checking it computes what ``func`` does (no NaN read)."""
    out = CompactBufferAllocation()(func)
    before, after = run(func), run(out)
    assert not np.isnan(before).any()
    np.testing.assert_array_equal(after, before)
    return out


def test_window_golden(golden) -> None:
    """The value read in iteration i + 1: ``L`` is compacted to one row, allocated inside ``j``
    (no value crosses j's iterations) and around ``i`` (whose iterations carry it)."""
    out = assert_same_results(previous_element("local"))
    golden("passes/compact_carry_window", loopir.script(out))


@pytest.mark.parametrize("scope", ["local", "shared", "global"])
def test_value_read_in_the_next_iteration(scope: str) -> None:
    for make, shape in ((previous_element, [1, N]), (previous_scalar, [1])):
        out = assert_same_results(make(scope))
        assert allocations(out)["L"] == (shape, ["j"])


@pytest.mark.parametrize("scope", ["local", "shared", "global"])
@pytest.mark.parametrize("init", ["eq", "lt", "none"])
def test_running_sum_keeps_its_accumulator_across_the_loop(scope: str, init: str) -> None:
    out = assert_same_results(running_sum(scope, init))
    assert allocations(out)["S"] == ([1], ["j"])


@pytest.mark.parametrize("guard", ["both", "inner"])
def test_split_reduction_accumulator_moves_into_the_spatial_loop(guard: str) -> None:
    """The init under ``k0 == 0 and k1 == 0`` resets the sum once per ``j``: nothing crosses
    j's iterations, the accumulator goes inside ``j`` (outside ``k0``) as before."""
    out = assert_same_results(two_loop_sum(guard))
    assert allocations(out)["S"] == ([1], ["j"])


@pytest.mark.parametrize("window", [True, False])
def test_shared_buffer_under_a_thread_loop(window: bool) -> None:
    """Allocated around the thread loop either way; per iteration of ``k`` (one column) only
    when no value crosses k's iterations."""
    out = assert_same_results(shared_window(window))
    assert allocations(out)["L"] == ([M, N] if window else [M, 1], [])


@pytest.mark.parametrize("how", ["data", "loop", "branch"])
def test_a_store_that_may_not_run_covers_no_read(how: str) -> None:
    func = sometimes_written(how)
    out = CompactBufferAllocation()(func)
    # kept around i; around j as well where the first read of a row can see the last row's value
    assert allocations(out)["L"] == (([2], ["j"]) if how == "branch" else ([1], []))
    before, after = run(func), run(out)
    defined = ~np.isnan(before)
    assert defined.sum() > M
    np.testing.assert_array_equal(after[defined], before[defined])


def test_stores_in_both_branches_cover_the_read() -> None:
    """``if i < 3: L[0] = A[j, i] else: L[0] = 0``: one of the two runs in every iteration."""
    A, B = _io()
    L = Buffer("L", (1,), "float32", scope="local")
    j, i = Var("j"), Var("i")
    both = IfThenElse(i < 3, BufferStore(L, BufferLoad(A, (j, i)), (0,)), BufferStore(L, _zero(), (0,)))
    f = PrimFunc((A, B), Allocate(L, _loop(j, M, _loop(i, N, seq(both, BufferStore(B, BufferLoad(L, (0,)), (j, i)))))))
    out = assert_same_results(f)
    assert allocations(out)["L"] == ([1], ["j", "i"])


@settings(max_examples=30, deadline=None)
@given(carried_values())
def test_compaction_keeps_every_defined_value(func: PrimFunc) -> None:
    """Where the function computes a number (it read no uninitialized element), the compacted
    one computes the same; what the buffer became is recorded as a hypothesis event."""
    out = CompactBufferAllocation()(func)
    shape, around = allocations(out)["L"]
    event(f"L {'narrowed' if shape != allocations(func)['L'][0] or around else 'kept whole at the root'}")
    before, after = run_io(func), run_io(out)
    defined = ~np.isnan(before)
    event(f"defined outputs: {'all' if defined.all() else 'some' if defined.any() else 'none'}")
    np.testing.assert_array_equal(after[defined], before[defined])
