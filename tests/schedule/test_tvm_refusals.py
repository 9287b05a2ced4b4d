"""Refusals TVM 0.27 does not make (issue 29, item 2), against the IR TVM produces.

The schedules are in tests/schedule/tvm_refusal_cases.py; TVM's IR for them is in
tests/golden/schedule/tvm/ (written by tests/schedule/_tvm_refusals_reference.py). For each
case TVM computes right, loopir accepts it with TVM's loops, blocks, bindings and predicates
(the skeleton of the printed IR), its IR is a golden, and the CPU executor computes what the
unscheduled function does (unlowered, and lowered with local padding off and on). Where TVM
computes a wrong result, loopir refuses with a message that says why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import loopir
from loopir.errors import ScheduleError
from loopir.testing.workloads import make_workload
from tests.schedule.dm_util import check_schedule, golden_pair
from tests.schedule.tvm_refusal_cases import CASES, TVM_WRONG
from tests.schedule.tvm_skeleton import skeleton

TVM_DIR = Path(__file__).parent.parent / "golden" / "schedule" / "tvm"


def _tvm_text(name: str) -> str:
    path = TVM_DIR / f"{name}.txt"
    assert path.exists(), f"TVM's IR {path} is missing (tests/schedule/_tvm_refusals_reference.py)"
    return path.read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_accepted_with_tvms_structure(name: str, golden) -> None:
    workload, args, schedule = CASES[name]
    w = make_workload(workload, **args)
    sch = loopir.Schedule(w.func)
    schedule(sch)
    golden_pair(golden, f"tvm_{name}", w.func, sch.func)
    assert skeleton(sch.func.script(), True) == skeleton(_tvm_text(name), True)
    check_schedule(w.func, sch, dict(w.sizes))


WRONG_OUTCOMES: dict[str, str | None] = {
    "rca_no_producer_after_consumer": "block 'C' would run after 'BiasAdd', which consumes",
    # accepted with other loops than TVM's (None): right, and unlike TVM's
    "pad_under_shared_loop": None,
}


@pytest.mark.parametrize("name", sorted(TVM_WRONG))
def test_refused_or_different_where_tvm_is_wrong(name: str, golden) -> None:
    workload, args, schedule = TVM_WRONG[name]
    tvm = _tvm_text(name)
    assert "differs from the unscheduled function" in tvm
    func = make_workload(workload, **args).func
    sch = loopir.Schedule(func)
    message = WRONG_OUTCOMES[name]
    if message is None:
        schedule(sch)
        golden_pair(golden, f"tvm_{name}", func, sch.func)
        assert skeleton(sch.func.script(), True) != skeleton(tvm, True)
        check_schedule(func, sch)
        return
    with pytest.raises(ScheduleError, match=message):
        schedule(sch)
    assert sch.func is func


def test_skeleton_sees_loops_bindings_and_predicates() -> None:
    """The comparison can fail: a different split, binding or predicate changes it."""
    tvm = skeleton(_tvm_text("rca_no_producer_split"))
    assert tvm == [
        "for i_0 3 serial", "  for ax0 7 serial", "    for ax1 2 serial", "      block R",
        "        bind ax0, ax1", "  for i_1 3 serial", "    block S", "      bind i_0 * 3 + i_1",
        "      where i_0 * 3 + i_1 < 7",
    ]  # fmt: skip
    sch = loopir.Schedule(make_workload("reduce_min", M=7, K=2).func)
    (i,) = sch.get_loops(sch.get_block("S"))
    sch.split(i, [None, 3])
    assert skeleton(sch.func.script()) != tvm


def test_reverse_compute_at_without_producers_refuses_a_shared_output() -> None:
    """Regression (differential seed 1467): R_init has no producer, so under R's loop k it
    would rewrite the whole of R in every iteration, wiping the rows R already reduced. TVM
    refuses it too (R_init is not the only writer of R: not a complete block)."""
    sch = loopir.Schedule(make_workload("reduce_max", M=6, K=2).func)
    r = sch.get_block("R")
    init = sch.decompose_reduction(r, sch.get_loops(r)[0])
    _, k = sch.get_loops(r)
    with pytest.raises(ScheduleError, match="block 'R' also writes R"):
        sch.reverse_compute_at(init, k)


def test_reverse_compute_at_without_producers_under_a_matmul_init() -> None:
    """Regression (differential seed 764): C_init moved under D's loop would run after C and
    BiasAdd, and reset C in every iteration of it."""
    sch = loopir.Schedule(make_workload("matmul_bias_relu", M=2, K=7, N=7).func)
    c = sch.get_block("C")
    i, _ = sch.get_loops(sch.get_block("BiasAdd"))
    sch.compute_at(c, i)
    init = sch.decompose_reduction(c, sch.get_loops(c)[1])
    _, j = sch.get_loops(sch.get_block("D"))
    with pytest.raises(ScheduleError, match="reverse_compute_at"):
        sch.reverse_compute_at(init, j)


@pytest.mark.parametrize("scope", ["global", "local"])
def test_reverse_compute_at_without_producers_under_a_thread_loop(scope: str) -> None:
    """Under a threadIdx loop every thread computes the whole block (as in TVM): right for a
    per-thread (local) buffer; for a global one the threads race on it, which the CUDA
    build's race check refuses (the CPU executor, one thread after the other, cannot see
    it)."""
    from loopir.passes.race_check import find_races
    from loopir.testing import check_equivalent

    func = make_workload("reduce_max", M=8, K=3).func
    sch = loopir.Schedule(func)
    (i,) = sch.get_loops(sch.get_block("S"))
    sch.bind(i, "threadIdx.x")
    if scope == "local":
        sch.set_scope(sch.get_block("R"), "R", "local")
    sch.reverse_compute_at(sch.get_block("R"), i)
    lowered = loopir.lower(sch.func)
    check_equivalent(func, lowered, thread_order="random")
    assert bool(find_races(lowered).races) == (scope == "global")


def test_pad_under_a_shared_thread_loop_is_a_race_for_the_cuda_build() -> None:
    """pad's copies under a blockIdx loop the block shares run in every thread block: right on
    the CPU executor, and the race check (which the CUDA build runs) refuses the copies into
    the shared global pad buffers."""
    from loopir.passes.race_check import find_races
    from loopir.testing import check_equivalent

    func = make_workload("elementwise_chain", M=5, N=2, stages=2).func
    sch = loopir.Schedule(func)
    i, _ = sch.get_loops(sch.get_block("T2"))
    sch.compute_at(sch.get_block("T1"), i)
    sch.bind(i, "blockIdx.x")
    sch.pad(sch.get_block("T2"), [4, 1])
    lowered = loopir.lower(sch.func)
    check_equivalent(func, lowered, thread_order="random")
    assert find_races(lowered).races
