"""Issue 14 (CPU part): get_producers/get_consumers, split(disable_predication=),
compute_at/reverse_compute_at(index=), cache_write(consumer_blocks=) and set_scope.

Each primitive: golden before/after IR (the docstring example), errors naming the primitive,
trace round trip (Python text, JSON, replay), and the CPU executor against the unscheduled
function over hypothesis-drawn shapes (non-multiples of 32 included), before and after
lowering with local padding on and off.
"""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopir
from loopir import te
from loopir.errors import ScheduleError
from loopir.ir.stmt import seq
from loopir.schedule import Trace, deps, scope
from loopir.schedule import compute_at as CA
from loopir.schedule import loops as L
from loopir.testing import check_equivalent
from tests.schedule.dm_util import (
    block_order,
    chain,
    golden_pair,
    is_true,
    loop_vars,
    matmul,
    realize_of,
)

# extents around and past a warp, never all multiples of 32
SIZES = st.sampled_from([1, 5, 31, 32, 33, 47, 64, 70])


def _checked(func: loopir.PrimFunc, sch: loopir.Schedule) -> None:
    """sch.func equals func on the CPU, unlowered and lowered with local padding on / off, and
    its trace replays (through JSON) to the same function."""
    check_equivalent(func, sch.func)
    for pad in (False, True):
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            check_equivalent(func, loopir.lower(sch.func))
    replay = loopir.Schedule(func)
    Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(replay)
    loopir.assert_structural_equal(sch.func, replay.func)
    ns: dict = {}
    exec(str(sch.trace), ns)  # noqa: S102 - the trace's own Python text
    again = loopir.Schedule(func)
    ns["apply_trace"](again)
    loopir.assert_structural_equal(sch.func, again.func)


def fork(m: int = 16, n: int = 8) -> loopir.PrimFunc:
    """``B = A * 2; C = A + 1; D = B + C``: two independent producers of one consumer."""
    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="C")
    D = te.compute((m, n), lambda i, j: B[i, j] + C[i, j], name="D")
    return te.create_prim_func([A, D])


def two_readers(m: int = 16, n: int = 8) -> loopir.PrimFunc:
    """``B = A * 2; E = B * 3; F = B + 1``: two consumers of one producer."""
    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    E = te.compute((m, n), lambda i, j: B[i, j] * 3.0, name="E")
    F = te.compute((m, n), lambda i, j: B[i, j] + 1.0, name="F")
    return te.create_prim_func([A, E, F])


def row_normalize(m: int = 16, n: int = 8) -> loopir.PrimFunc:
    """``S[i] = sum_k A[i, k]; B[i, j] = A[i, j] / S[i]``: a per-row scalar (issue 14)."""
    A = te.placeholder((m, n), "float32", name="A")
    k = te.reduce_axis(n, name="k")
    S = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="S")
    B = te.compute((m, n), lambda i, j: A[i, j] / S[i], name="B")
    return te.create_prim_func([A, B])


# --- get_producers / get_consumers ----------------------------------------------------------


def test_producers_and_consumers_of_a_chain() -> None:
    f = chain(8, 4)
    assert deps.get_producers(f, "B") == [] and deps.get_consumers(f, "B") == ["C"]
    assert deps.get_producers(f, "C") == ["B"] and deps.get_consumers(f, "C") == ["D"]
    assert deps.get_producers(f, "D") == ["C"] and deps.get_consumers(f, "D") == []
    g = fork(8, 4)
    assert deps.get_producers(g, "D") == ["B", "C"]
    assert deps.get_consumers(two_readers(8, 4), "B") == ["E", "F"]


def test_producers_include_write_after_write() -> None:
    """After decompose_reduction the init writes what the update writes (TVM: kWAW)."""
    sch = loopir.Schedule(matmul(8, 4, 6))
    c = sch.get_block("C")
    _, _, k = sch.get_loops(c)
    init = sch.decompose_reduction(c, k)
    assert [sch.get(b).name for b in sch.get_producers(c)] == ["C_init"]
    assert [sch.get(b).name for b in sch.get_consumers(init)] == ["C"]
    assert sch.get_producers(init) == []


def test_producers_are_blocks_of_the_same_scope() -> None:
    """A producer moved under the consumer's loop is still its producer (same scope)."""
    f = chain(8, 4)
    i = loop_vars(f, "D")[0]
    g = CA.compute_at(f, "C", i)
    assert deps.get_producers(g, "D") == ["C"]
    assert deps.get_consumers(g, "B") == ["C"]


def test_producers_trace_round_trip() -> None:
    f = fork(8, 4)
    sch = loopir.Schedule(f)
    d = sch.get_block("D")
    b, c = sch.get_producers(d)
    (d2,) = sch.get_consumers(b)
    assert sch.get(d2) is sch.get(d)
    assert "b1, b2 = sch.get_producers(b0)" in str(sch.trace)
    sch.compute_at(b, sch.get_loops(d)[0])
    _checked(f, sch)


def test_producers_errors() -> None:
    f = chain(8, 4)
    with pytest.raises(ScheduleError, match="get_producers: .*root block"):
        deps.get_producers(f, "root")
    with pytest.raises(ScheduleError, match="get_consumers: no block named 'X'"):
        deps.get_consumers(f, "X")


# --- split(disable_predication=) ---------------------------------------------------------------


def test_split_disable_predication_golden(golden) -> None:
    n = loopir.Var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    f = te.create_prim_func([A, B])
    (i,) = loop_vars(f, "B")
    g, _ = L.split(f, i, [None, 32], disable_predication=True)
    assert is_true(realize_of(g, "B")[0].predicate)
    predicated, _ = L.split(f, i, [None, 32])
    assert not is_true(realize_of(predicated, "B")[0].predicate)
    golden_pair(golden, "split_disable_predication", f, g)
    # n a multiple of 32, as the flag asserts: the same result as with the predicate
    check_equivalent(f, g, sizes={"n": 96})


def test_split_disable_predication_refuses_a_provably_inexact_split() -> None:
    sch = loopir.Schedule(chain(70, 3))
    i, _ = sch.get_loops(sch.get_block("B"))
    before = sch.func
    with pytest.raises(ScheduleError, match=r"split: disable_predication=True, but the factors "
                       r"\[3, 32\] \(product 96\) do not split the extent 70") as e:
        sch.split(i, [None, 32], disable_predication=True)
    assert "    for i in T.serial(70):\n    ^^^" in str(e.value)  # the loop is marked
    assert sch.func is before and len(sch.trace) == 2
    with pytest.raises(ScheduleError, match="disable_predication must be a bool"):
        L.split(before, loop_vars(before, "B")[0], [None, 2], disable_predication=1)  # type: ignore[arg-type]


@given(m=SIZES, n=SIZES, inner=st.sampled_from([1, 2, 3, 5, 7]))
def test_split_disable_predication_exact_equivalent(m: int, n: int, inner: int) -> None:
    f = chain(m, n)
    sch = loopir.Schedule(f)
    i, j = sch.get_loops(sch.get_block("C"))
    if m % inner:
        with pytest.raises(ScheduleError):
            sch.split(i, [None, inner], disable_predication=True)
        return
    i0, i1 = sch.split(i, [None, inner], disable_predication=True)
    assert is_true(realize_of(sch.func, "C")[0].predicate)
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.x")
    _checked(f, sch)


# --- compute_at / reverse_compute_at (index=) -------------------------------------------------


def test_compute_at_index_positions(golden) -> None:
    f = fork(16, 8)
    i = loop_vars(f, "D")[0]
    g = CA.compute_at(f, "B", i)
    assert block_order(g) == ["C", "B", "D"]  # C still at the root, before the loop
    last = CA.compute_at(g, "C", i, index=-1)  # just before the consumer D
    first = CA.compute_at(g, "C", i, index=-2)  # just after the last producer (none)
    assert block_order(last) == ["B", "C", "D"]
    assert block_order(first) == ["C", "B", "D"]
    loopir.assert_structural_equal(CA.compute_at(g, "C", i, index=0), first)
    loopir.assert_structural_equal(CA.compute_at(g, "C", i, index=1), last)
    golden_pair(golden, "compute_at_index", g, first)
    with pytest.raises(ScheduleError, match=r"compute_at: index 2 is not a valid position .*"
                       r"valid are -1, -2 or 0\.\.1"):
        CA.compute_at(g, "C", i, index=2)
    for bad in (-3, 1.0, True, "0"):
        with pytest.raises(ScheduleError, match="compute_at: index must be -1"):
            CA.compute_at(g, "C", i, index=bad)  # type: ignore[arg-type]


def test_reverse_compute_at_index_positions(golden) -> None:
    f = two_readers(16, 8)
    i = loop_vars(f, "B")[0]
    g = CA.reverse_compute_at(f, "E", i)
    assert block_order(g) == ["B", "E", "F"]
    first = CA.reverse_compute_at(g, "F", i, index=-2)  # right after the producer B
    last = CA.reverse_compute_at(g, "F", i, index=-1)  # at the end (F has no consumer)
    assert block_order(first) == ["B", "F", "E"]
    assert block_order(last) == ["B", "E", "F"]
    golden_pair(golden, "reverse_compute_at_index", g, first)
    with pytest.raises(ScheduleError, match="reverse_compute_at: index 0 is not a valid"):
        CA.reverse_compute_at(g, "F", i, index=0)  # before its producer B


@given(m=SIZES, n=SIZES, which=st.sampled_from([-1, -2, 0, 1]))
def test_compute_at_index_equivalent(m: int, n: int, which: int) -> None:
    f = fork(m, n)
    sch = loopir.Schedule(f)
    d = sch.get_block("D")
    i, j = sch.get_loops(d)
    i0, i1 = sch.split(i, [None, 32])
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.x")
    b = sch.get_block("B")
    sch.set_scope(b, 0, "local")
    sch.compute_at(b, i1)
    c = sch.get_block("C")
    sch.set_scope(c, "C", "local")
    sch.compute_at(c, i1, index=which)
    order = block_order(sch.func)
    assert order == (["C", "B", "D"] if which in (-2, 0) else ["B", "C", "D"])
    _checked(f, sch)


@given(m=SIZES, n=SIZES, which=st.sampled_from([-1, -2]))
def test_reverse_compute_at_index_equivalent(m: int, n: int, which: int) -> None:
    f = two_readers(m, n)
    sch = loopir.Schedule(f)
    b = sch.get_block("B")
    i, j = sch.get_loops(b)
    i0, i1 = sch.split(i, [None, 32])
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.x")
    sch.reverse_compute_at(sch.get_block("E"), i1)
    sch.reverse_compute_at(sch.get_block("F"), i1, index=which)
    assert block_order(sch.func) == (["B", "F", "E"] if which == -2 else ["B", "E", "F"])
    _checked(f, sch)


# --- cache_write(consumer_blocks=) -------------------------------------------------------------


def test_cache_write_consumer_blocks_golden(golden) -> None:
    from loopir.schedule import cache

    f = two_readers(16, 8)
    g, name = cache.cache_write(f, "B", "B", "shared", consumer_blocks=["E"])
    assert name == "B_shared"
    # E reads the cache directly; F still reads B, written back right after the writer
    assert [r.buffer.name for r in realize_of(g, "E")[0].block.reads] == ["B_shared"]
    assert [r.buffer.name for r in realize_of(g, "F")[0].block.reads] == ["B"]
    assert block_order(g) == ["B", "B_shared", "E", "F"]
    golden_pair(golden, "cache_write_consumer_blocks", f, g)
    check_equivalent(f, g)


def test_cache_write_consumer_blocks_errors() -> None:
    sch = loopir.Schedule(two_readers(8, 4))
    b, e, fb = sch.get_block("B"), sch.get_block("E"), sch.get_block("F")
    before = sch.func
    with pytest.raises(ScheduleError, match="cache_write: consumer block 'B' of buffer 'B' is "
                       "the block writing it"):
        sch.cache_write(b, "B", "local", consumer_blocks=[b])
    with pytest.raises(ScheduleError, match="cache_write: consumer block 'F' of buffer 'E' "
                       "does not read it"):
        sch.cache_write(e, "E", "local", consumer_blocks=[fb])
    with pytest.raises(ScheduleError, match="consumer_blocks must be a list of handles"):
        sch.cache_write(b, "B", "local", consumer_blocks="E")  # type: ignore[arg-type]
    assert sch.func is before and len(sch.trace) == 3


@given(m=SIZES, n=SIZES, scope_=st.sampled_from(["global", "shared", "local"]))
def test_cache_write_consumer_blocks_equivalent(m: int, n: int, scope_: str) -> None:
    f = two_readers(m, n)
    sch = loopir.Schedule(f)
    b, e, fb = sch.get_block("B"), sch.get_block("E"), sch.get_block("F")
    sch.cache_write(b, "B", scope_, consumer_blocks=[e, fb])
    assert "consumer_blocks=[b1, b2]" in str(sch.trace)
    for blk in (e, fb):
        i, _ = sch.get_loops(blk)
        i0, i1 = sch.split(i, [None, 32])
        sch.bind(i0, "blockIdx.x")
        sch.bind(i1, "threadIdx.x")
    _checked(f, sch)


# --- set_scope ---------------------------------------------------------------------------------


def test_set_scope_golden(golden) -> None:
    f = chain(16, 8)
    g = scope.set_scope(f, "B", 0, "shared")
    assert [(b.name, b.scope) for b in g.body.block.alloc_buffers] == [
        ("B", "shared"), ("C", "global")
    ]
    assert realize_of(g, "C")[0].block.reads[0].buffer.scope == "shared"
    golden_pair(golden, "set_scope", f, g)
    assert scope.set_scope(g, "B", "B", "shared") is g  # already there: unchanged
    check_equivalent(f, g)


def test_set_scope_errors_and_trace() -> None:
    f = chain(8, 4)
    sch = loopir.Schedule(f)
    d, b = sch.get_block("D"), sch.get_block("B")
    with pytest.raises(ScheduleError, match="set_scope: buffer 'D' is a parameter of 'main'"):
        sch.set_scope(d, 0, "local")
    with pytest.raises(ScheduleError, match="set_scope: invalid storage scope 'texture'"):
        sch.set_scope(b, 0, "texture")
    with pytest.raises(ScheduleError, match="set_scope: buffer index 3 is out of range"):
        sch.set_scope(b, 3, "local")
    assert len(sch.trace) == 2
    buf = realize_of(sch.func, "B")[0].block.writes[0].buffer
    sch.set_scope(b, buf, "local")  # a Buffer is recorded as its index
    assert 'sch.set_scope(b1, 0, "local")' in str(sch.trace)
    _checked(f, sch)


@given(m=SIZES, n=SIZES)
def test_set_scope_row_scalar_in_registers(m: int, n: int) -> None:
    """The issue's case: a per-row sum kept per thread, set_scope before compute_at."""
    f = row_normalize(m, n)
    sch = loopir.Schedule(f)
    s, b = sch.get_block("S"), sch.get_block("B")
    sch.set_scope(s, 0, "local")
    i, j = sch.get_loops(b)
    i0, i1 = sch.split(i, [None, 32])
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.x")
    sch.compute_at(s, i1)
    # one row's scalar per thread: below the thread loop, S iterates the reduction only
    assert len(_loops(sch.func, "S")) == 2 + (n > 1)
    assert realize_of(sch.func, "S")[0].block.writes[0].buffer.scope == "local"
    _checked(f, sch)


def _loops(func: loopir.PrimFunc, name: str) -> list:
    from loopir.schedule import tree

    return tree.enclosing_loops(realize_of(func, name)[1])


def test_json_written_before_the_new_keywords_still_replays() -> None:
    """A version-1 trace without disable_predication / index / consumer_blocks takes the
    defaults (the behaviour it was recorded with)."""
    f = two_readers(40, 6)
    sch = loopir.Schedule(f)
    b = sch.get_block("B")
    i, _ = sch.get_loops(b)
    i0, _ = sch.split(i, [None, 32])
    sch.reverse_compute_at(sch.cache_write(b, "B", "local"), i0)
    sch.reverse_compute_at(sch.get_block("E"), i0)
    old = sch.trace.as_json()
    for inst in old["instructions"]:
        for key in ("disable_predication", "index"):
            inst["attrs"].pop(key, None)
        inst["inputs"].pop("consumer_blocks", None)
    replay = loopir.Schedule(f)
    Trace.from_json(old).apply_to(replay)
    loopir.assert_structural_equal(sch.func, replay.func)
    assert replay.trace.as_json() == sch.trace.as_json()


def test_cache_write_consumer_blocks_refuses_a_reader_before_the_writer() -> None:
    """A block reading the buffer before its writer ran would read the empty cache."""
    from loopir.schedule import cache

    f = two_readers(8, 4)
    root = f.body.block
    b_nest, e_nest, f_nest = root.body.seq
    swapped = f.with_body(
        attrs.evolve(f.body, block=attrs.evolve(root, body=seq(e_nest, b_nest, f_nest)))
    )
    with pytest.raises(ScheduleError, match="cache_write: consumer block 'E' reads 'B' before "
                       "'B' writes it"):
        cache.cache_write(swapped, "B", "B", "local", consumer_blocks=["E"])
