"""rfactor: golden before/after (the docstring example), equivalence, errors, trace, and the
TVM pattern rfactor + bind the write-back to threadIdx.x + compute_at (a cross-thread
reduction after an in-thread one)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir import te
from loopir.errors import ScheduleError
from loopir.schedule import Trace
from loopir.testing import check_equivalent
from tests.schedule.dm_util import golden_pair


def _func(op: str = "sum", m: int = 128, n: int = 128, dtype: str = "float32") -> loopir.PrimFunc:
    A = te.placeholder((m, n), dtype, name="A")
    k = te.reduce_axis(n, name="k")
    red = {"sum": te.sum, "max": te.max, "min": te.min}[op]
    B = te.compute((m,), lambda i: red(A[i, k], axis=k), name="B")
    return te.create_prim_func([A, B])


def _rfactored(op: str = "sum", m: int = 128, n: int = 128, inner: int = 32, axis: int = 0):
    sch = loopir.Schedule(_func(op, m, n))
    _, kk = sch.get_loops(sch.get_block("B"))
    _, ki = sch.split(kk, [None, inner])
    rf = sch.rfactor(ki, axis)
    return sch, rf


def test_golden_docstring_example(golden) -> None:
    sch, rf = _rfactored()
    assert sch.get(rf).name == "B_rf"
    golden_pair(golden, "rfactor", _func(), sch.func)


@settings(max_examples=20, deadline=None)
@given(
    op=st.sampled_from(["sum", "max", "min"]),
    m=st.integers(1, 6),
    parts=st.integers(1, 5),
    inner=st.integers(2, 9),  # a unit loop is simplified out of the bindings: nothing to factor
    axis=st.sampled_from([0, 1, -1]),
)
def test_rfactor_equals_the_unscheduled_function(op, m, parts, inner, axis) -> None:
    sch, _ = _rfactored(op, m, parts * inner, inner, axis)
    check_equivalent(_func(op, m, parts * inner), sch.func)


@pytest.mark.parametrize("threads", [8, 32, 64])
def test_in_thread_then_cross_thread_reduction(threads) -> None:
    sch, rf = _rfactored("sum", 16, 256, threads)
    i, ki = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    sch.bind(ki, "threadIdx.x")
    sch.set_scope(rf, 0, "local")
    sch.compute_at(rf, ki)
    low = loopir.lower(sch.func)
    assert "thread_allreduce" in loopir.script(low)
    check_equivalent(_func("sum", 16, 256), low)
    check_equivalent(_func("sum", 16, 256), low, thread_order="random")


def test_errors_name_the_primitive() -> None:
    sch = loopir.Schedule(_func(n=100))
    i, kk = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match=r"rfactor: loop i feeds no reduce iter var"):
        sch.rfactor(i, 0)
    _, ki = sch.split(kk, [None, 32])  # 100 = 4 * 32 - 28: an inexact split
    with pytest.raises(ScheduleError, match="inexact split"):
        sch.rfactor(ki, 0)
    sch2 = loopir.Schedule(_func())
    _, kk2 = sch2.get_loops(sch2.get_block("B"))
    with pytest.raises(ScheduleError, match="factor_axis 3 is out of range"):
        sch2.rfactor(kk2, 3)
    A = te.placeholder((8, 8), "float32", name="A")
    k = te.reduce_axis(8, name="k")
    P = te.compute((8,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="P")
    Q = te.compute((8,), lambda i: P[i] * 2.0, name="Q")
    sch3 = loopir.Schedule(te.create_prim_func([A, Q]))
    (iq,) = sch3.get_loops(sch3.get_block("Q"))
    with pytest.raises(ScheduleError, match="rfactor: block 'Q' is not a reduction block"):
        sch3.rfactor(iq, 0)


def test_trace_round_trip_and_replay() -> None:
    sch, _ = _rfactored("max", 8, 64, 16, 1)
    assert "sch.rfactor(" in str(sch.trace)
    start = loopir.Schedule(_func("max", 8, 64))
    Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(start)
    loopir.assert_structural_equal(sch.func, start.func)
    a = np.random.default_rng(0).random((8, 64)).astype("float32")
    y = np.zeros(8, "float32")
    loopir.build(start.func, target="cpu")(a, y)
    np.testing.assert_array_equal(y, a.max(1))
