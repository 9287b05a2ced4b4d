"""The hypothesis strategies of loopir.testing.strategies."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.schedule import Schedule
from loopir.testing import check_equivalent
from loopir.testing.strategies import extents, schedules, shapes, split_factors, workloads
from loopir.testing.workloads import WORKLOADS, Workload, matmul


@given(extent=extents(16), data=st.data())
def test_split_factors_are_valid(extent: int, data: st.DataObject) -> None:
    facs = data.draw(split_factors(extent))
    assert 2 <= len(facs) <= 3
    nones = [f for f in facs if f is None]
    assert len(nones) <= 1
    assert all(f is None or f >= 1 for f in facs)
    if not nones:
        assert math.prod(facs) >= extent  # type: ignore[arg-type]
    # ... and split accepts them.
    w = matmul(extent, 2, 2)
    sch = Schedule(w.func)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    parts = sch.split(i, facs)
    assert len(parts) == len(facs)
    check_equivalent(w.func, sch.func)


@given(shape=shapes(max_ndim=3, max_side=5))
def test_shapes(shape: tuple[int, ...]) -> None:
    assert 1 <= len(shape) <= 3 and all(1 <= s <= 5 for s in shape)


@settings(max_examples=10)
@given(w=workloads())
def test_workloads_strategy(w: Workload) -> None:
    assert w.name in WORKLOADS
    loopir.verify(w.func)


@settings(max_examples=8)
@given(w=workloads(["matmul", "elementwise_chain"]), data=st.data())
def test_schedules_strategy_is_equivalent(w: Workload, data: st.DataObject) -> None:
    sch = data.draw(schedules(w, max_steps=6))
    assert isinstance(sch, Schedule)
    loopir.verify(sch.func)
    check_equivalent(w.func, sch.func, sizes=w.sizes)
    # The drawn schedule's trace replays on the workload.
    sch2 = Schedule(w.func)
    sch.trace.apply_to(sch2)
    loopir.assert_structural_equal(sch.func, sch2.func)
