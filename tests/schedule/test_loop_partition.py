"""loop_partition and add_unit_loop (issue 29 item 3), with TVM 0.27's semantics.

Golden before/after IR (the docstring examples), each refusal naming the primitive and the
offending value, the trace (Python text and JSON) replaying to the same function, and the CPU
executor against the unscheduled function over hypothesis-drawn shapes and factors, unlowered
and lowered with local padding off and on.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopir
from loopir import te
from loopir.errors import ScheduleError
from tests.schedule.dm_util import check_schedule, golden_pair, matmul


def elementwise(m: int = 10, n: int = 8) -> loopir.PrimFunc:
    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    return te.create_prim_func([A, B])


def test_golden_loop_partition(golden) -> None:
    func = elementwise()
    sch = loopir.Schedule(func)
    i, _ = sch.get_loops(sch.get_block("B"))
    parts = sch.loop_partition(i, [3, None])
    golden_pair(golden, "loop_partition", func, sch.func)
    # as TVM 0.27: i0 over [0, 3), i1 over [3, 10) (here from 0, bound to i1 + 3), the blocks
    # renamed B_i0 / B_i1 and each iter var bound to the partition's loop taking its slice as
    # its domain
    assert [str(sch.get(lp).loop_var) for lp in parts] == ["i0", "i1"]
    assert [(int(sch.get(lp).min), int(sch.get(lp).extent)) for lp in parts] == [(0, 3), (0, 7)]
    b1 = sch.get(sch.get_block("B_i1"))
    assert (int(b1.iter_vars[0].dom.min), int(b1.iter_vars[0].dom.extent)) == (3, 7)
    check_schedule(func, sch)


def test_factors_without_none_add_the_remainder() -> None:
    """TVM: [3, 4] on an extent of 10 gives three partitions, [0,3), [3,7), [7,10)."""
    sch = loopir.Schedule(elementwise())
    i, _ = sch.get_loops(sch.get_block("B"))
    parts = sch.loop_partition(i, [3, np.int64(4)])
    assert [int(sch.get(lp).extent) for lp in parts] == [3, 4, 3]
    assert [str(sch.get(b).iter_vars[0].dom) for b in sch.get_child_blocks(sch.get_block("root"))] == [
        str(loopir.Range(0, 3)), str(loopir.Range(3, 4)), str(loopir.Range(7, 3))]  # fmt: skip
    assert "sch.loop_partition(l1, [3, 4])" in str(sch.trace)
    check_schedule(elementwise(), sch)


def test_an_inner_loop_keeps_the_outer_loops() -> None:
    sch = loopir.Schedule(elementwise())
    i, j = sch.get_loops(sch.get_block("B"))
    j0, j1, j2 = sch.loop_partition(j, [2, 3, None])
    loops = sch.get_loops(sch.get_block("B_j2"))
    assert [str(sch.get(lp).loop_var) for lp in loops] == ["i", "j2"]
    check_schedule(elementwise(), sch)


def test_a_reduction_loop_and_the_handles_of_the_old_block() -> None:
    """TVM 0.27 narrows the reduce iter var's domain in each partition, so every partition
    starts the sum again (its matmul computes the last partition's sum only); loopir keeps
    the reduce domain, and only the first partition runs the init."""
    func = matmul(6, 9, 5)
    sch = loopir.Schedule(func)
    c = sch.get_block("C")
    _, _, k = sch.get_loops(c)
    sch.loop_partition(k, [None, 4], preserve_unit_iters=False)
    with pytest.raises(ScheduleError, match="stale: its block was removed by instruction 2 \\(loop_partition\\)"):
        sch.get_loops(c)
    k1 = sch.get(sch.get_block("C_k1")).iter_vars[2]
    assert (int(k1.dom.min), int(k1.dom.extent)) == (0, 9)
    check_schedule(func, sch)


@pytest.mark.parametrize(
    ("factors", "match"),
    [
        ([4, 6], "sum to 10, not less than the extent 10"),
        ([None, None], "at most one factor may be None"),
        ([0, None], "positive ints or None, got 0"),
        ([2.5], "positive ints or None, got 2.5"),
        ([], "non-empty list"),
    ],
)
def test_bad_factors_are_refused(factors, match) -> None:
    sch = loopir.Schedule(elementwise())
    i, _ = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match=match) as info:
        sch.loop_partition(i, factors)
    assert str(info.value).startswith("loop_partition: ")
    assert len(sch.trace) == 2


def test_bound_symbolic_and_annotated_loops_are_refused() -> None:
    sch = loopir.Schedule(elementwise())
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    with pytest.raises(ScheduleError, match="loop i is bound to blockIdx.x"):
        sch.loop_partition(i, [2])
    sch.annotate(j, "pragma", 1)
    with pytest.raises(ScheduleError, match="loop j is annotated"):
        sch.loop_partition(j, [2])
    n = loopir.Var("n")
    sym = loopir.Schedule(elementwise(n, 4))
    (i, _) = sym.get_loops(sym.get_block("B"))
    with pytest.raises(ScheduleError, match="symbolic range"):
        sym.loop_partition(i, [2])


@given(
    m=st.sampled_from([2, 5, 31, 33, 47]),
    n=st.sampled_from([3, 7, 32]),
    cut=st.floats(0.05, 0.95),
    inner=st.booleans(),
)
def test_partitioned_functions_compute_the_same(m: int, n: int, cut: float, inner: bool) -> None:
    func = elementwise(m, n)
    sch = loopir.Schedule(func)
    i, j = sch.get_loops(sch.get_block("B"))
    loop, extent = (j, n) if inner else (i, m)
    first = max(1, min(extent - 1, int(cut * extent)))
    sch.loop_partition(loop, [first, None])
    check_schedule(func, sch)


# --- add_unit_loop -----------------------------------------------------------------------------


def scalar_add() -> loopir.PrimFunc:
    A = te.placeholder((), "int32", name="A")
    B = te.placeholder((), "int32", name="B")
    C = te.compute((), lambda: A[()] + B[()], name="C")
    return te.create_prim_func([A, B, C])


def test_golden_add_unit_loop(golden) -> None:
    func = scalar_add()
    sch = loopir.Schedule(func)
    u = sch.add_unit_loop(sch.get_block("C"))
    golden_pair(golden, "add_unit_loop", func, sch.func)
    assert sch.get(u).loop_var.name == "u" and int(sch.get(u).extent) == 1
    assert "l1 = sch.add_unit_loop(b0)" in str(sch.trace)
    check_schedule(func, sch)


def test_add_unit_loop_above_a_loop() -> None:
    func = elementwise()
    sch = loopir.Schedule(func)
    _, j = sch.get_loops(sch.get_block("B"))
    u = sch.add_unit_loop(j)
    assert [str(sch.get(lp).loop_var) for lp in sch.get_loops(sch.get_block("B"))] == ["i", "u", "j"]
    assert sch.get(u).body is sch.get(j)
    check_schedule(func, sch)


def test_add_unit_loop_refuses_the_root_block() -> None:
    sch = loopir.Schedule(scalar_add())
    with pytest.raises(ScheduleError, match="block 'root' is the root block"):
        sch.add_unit_loop(sch.get_block("root"))
