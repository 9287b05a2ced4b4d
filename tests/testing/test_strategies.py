"""The hypothesis strategies of loopir.testing.strategies."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import find, given, reject, settings
from hypothesis import strategies as st

import loopir
from loopir.errors import PassError
from loopir.passes.race_check import find_races
from loopir.schedule import Schedule
from loopir.testing import check_equivalent, check_local_pad
from loopir.testing.gpu_fuzz import FAMILIES, GpuCase, random_gpu_schedule
from loopir.testing.strategies import (
    extents,
    gpu_schedules,
    schedules,
    shapes,
    split_factors,
    tile_factors,
    workloads,
)
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


# -- tile_factors ------------------------------------------------------------------------------


@given(extent=st.integers(1, 240), n=st.integers(1, 4), bound=st.none() | st.integers(1, 32),
       data=st.data())  # fmt: skip
def test_tile_factors_are_perfect_tilings(extent: int, n: int, bound: int | None,
                                          data: st.DataObject) -> None:  # fmt: skip
    if n == 1 and bound is not None and extent > bound:
        with pytest.raises(ValueError, match="no 1-way tiling"):
            tile_factors(extent, n, bound)
        return
    facs = data.draw(tile_factors(extent, n, bound))
    assert len(facs) == n and all(type(f) is int and f >= 1 for f in facs)
    assert math.prod(facs) == extent
    assert bound is None or facs[-1] <= bound
    # exactly what sample_perfect_tile accepts as a decision for such a loop
    w = matmul(extent, 2, 2)
    sch = Schedule(w.func)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    assert sch.sample_perfect_tile(i, n, -1 if bound is None else bound, decision=facs) == facs


@settings(max_examples=10)
@given(data=st.data())
def test_tile_factors_split_without_a_predicate(data: st.DataObject) -> None:
    w = matmul(24, 6, 36)
    sch = Schedule(w.func)
    i, j, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, data.draw(tile_factors(24, 3)))
    sch.split(j, data.draw(tile_factors(36, 2, max_innermost_factor=4)))
    assert "T.where" not in sch.func.script()
    check_equivalent(w.func, sch.func)


@pytest.mark.parametrize("target", [[1, 12], [12, 1], [2, 6], [3, 4], [4, 3], [6, 2]])
def test_tile_factors_reach_every_tiling(target: list[int]) -> None:
    assert find(tile_factors(12, 2), lambda f: f == target) == target


def test_tile_factors_reach_every_three_way_tiling() -> None:
    tilings = [[a, b, 12 // (a * b)] for a in range(1, 13) for b in range(1, 13)
               if 12 % (a * b) == 0]  # fmt: skip
    assert len(tilings) == 18
    for target in tilings:
        assert find(tile_factors(12, 3), lambda f, t=target: f == t) == target


@pytest.mark.parametrize(("args", "message"), [
    ((0, 2), "extent must be an int >= 1"), ((8, 0), "n must be an int >= 1"),
    ((8.0, 2), "extent must be an int"), ((8, 2, 0), "max_innermost_factor must be None or"),
    ((20, 1, 16), "no 1-way tiling of extent 20"),
])  # fmt: skip
def test_tile_factors_arguments(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tile_factors(*args)


# -- gpu_schedules -----------------------------------------------------------------------------


@settings(max_examples=6)
@given(case=gpu_schedules())
def test_gpu_schedules_keep_the_workload_meaning(case: GpuCase) -> None:
    assert case.func is not None and case.family in FAMILIES
    assert "threadIdx" in case.func.script()
    check_equivalent(case.base, case.func)
    # the repr says how to draw the case again
    again = random_gpu_schedule(case.seed, case.family)
    assert repr(again) == repr(case)
    loopir.assert_structural_equal(again.func, case.func)


@settings(max_examples=6)
@given(case=gpu_schedules(families=["transpose", "two_level", "matmul"]))
def test_gpu_schedules_local_padding(case: GpuCase) -> None:
    assert case.family in ("transpose", "two_level", "matmul")
    try:
        lowered = loopir.lower(case.func)
    except PassError:
        reject()  # a clear refusal (run_case's "refused"): nothing to compare
    if find_races(lowered).races:
        reject()  # the CUDA build refuses it (run_case's "race-refused")
    check_local_pad(case.func)


def test_gpu_schedules_families() -> None:
    drawn = {find(gpu_schedules(["row_reduce"]), lambda c: True).family}
    assert drawn == {"row_reduce"}
    with pytest.raises(ValueError, match="unknown or no families"):
        find(gpu_schedules(["gemm"]), lambda c: True)
    with pytest.raises(ValueError, match="unknown or no families"):
        find(gpu_schedules([]), lambda c: True)
