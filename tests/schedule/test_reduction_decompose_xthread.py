"""decompose_reduction of a cross-thread reduction is refused (fuzzer seed 50104: the
decomposed block was no reduction for LowerCrossThreadReduction, and lowering raised)."""

from __future__ import annotations

import pytest

import loopir
from loopir.errors import ScheduleError
from loopir.examples.reductions import row_sum_func


@pytest.mark.parametrize("tag", ["threadIdx.x", "threadIdx.y"])
def test_decompose_after_binding_a_reduction_loop_to_threads_is_refused(tag: str) -> None:
    sch = loopir.Schedule(row_sum_func(8, 64))
    blk = sch.get_block("S")
    i, k = sch.get_loops(blk)
    _, k1 = sch.split(k, [None, 16])
    sch.bind(k1, tag)
    with pytest.raises(ScheduleError, match=f"bound to {tag}: a cross-thread reduction keeps its init"):
        sch.decompose_reduction(blk, i)
    loopir.lower(sch.func)  # the undecomposed schedule lowers
