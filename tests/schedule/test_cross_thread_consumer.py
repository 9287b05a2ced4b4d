"""A consumer of a cross-thread reduction placed among the reduction's loops (schedule fuzzer
seed 389): refused by ``reverse_compute_at`` and ``bind`` with a ScheduleError.

Sequentially ``S = R + 1`` under the reduction loop ``k`` recomputes S after each step and
the last one is right; bound to threads, the total of R exists only after the threads combine
their parts, outside their loops, so LowerCrossThreadReduction cannot lower it (TVM 0.27
accepts the schedule and fails there too: "the reduction block isn't the last block under
its first reduction-related loop"). The primitives refuse it up front.
"""

from __future__ import annotations

import pytest

import loopir
from loopir.errors import ScheduleError
from loopir.testing.workloads import make_workload


@pytest.mark.parametrize("tag", ["threadIdx.y", "threadIdx.x"])
def test_reverse_compute_at_under_a_thread_bound_reduction_loop_is_refused(tag) -> None:
    w = make_workload("reduce_max", M=3, K=8)
    sch = loopir.Schedule(w.func)
    i, k = sch.get_loops(sch.get_block("R"))
    sch.bind(i, "blockIdx.x")
    sch.bind(k, tag)
    before = sch.func
    with pytest.raises(ScheduleError, match=r"reverse_compute_at.*block 'S'.*reduction loops of block 'R'"):
        sch.reverse_compute_at(sch.get_block("S"), k)
    assert sch.func is before


def test_binding_the_reduction_loop_of_a_consumer_moved_under_it_is_refused() -> None:
    w = make_workload("reduce_max", M=3, K=8)
    sch = loopir.Schedule(w.func)
    i, k = sch.get_loops(sch.get_block("R"))
    sch.reverse_compute_at(sch.get_block("S"), k)
    sch.bind(i, "blockIdx.x")
    before = sch.func
    with pytest.raises(ScheduleError, match=r"bind.*block 'S'.*reduction loops of block 'R'"):
        sch.bind(k, "threadIdx.y")
    assert sch.func is before


def test_a_consumer_after_the_reduction_loop_is_lowered() -> None:
    """Under the spatial loop, outside the reduction loop: what the refusals point to."""
    w = make_workload("reduce_max", M=3, K=8)
    sch = loopir.Schedule(w.func)
    i, k = sch.get_loops(sch.get_block("R"))
    sch.bind(i, "blockIdx.x")
    sch.bind(k, "threadIdx.y")
    sch.reverse_compute_at(sch.get_block("S"), i)
    loopir.testing.check_equivalent(w.func, loopir.lower(sch.func), sizes=w.sizes, thread_order="random")
