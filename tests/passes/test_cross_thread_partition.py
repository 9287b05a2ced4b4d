"""LowerCrossThreadReduction on the partitions of a reduction loop (schedule fuzzer seed 306).

``loop_partition(k, [4, None])`` copies the reduction block once per partition; every copy
keeps the init, which runs only where the reduce iter vars are at their minimum, i.e. in the
first partition. A later partition's copy accumulates onto what the earlier ones left: bound
to threads, its write-back must combine the threads' total with the stored value instead of
overwriting it with the total.
"""

from __future__ import annotations

import pytest

import loopir
from loopir import te
from loopir.errors import PassError
from loopir.script import from_source
from loopir.testing import check_equivalent


def _reduction(op: str, rows: int, n: int):
    A = te.placeholder((rows, n), "float32", name="A")
    k = te.reduce_axis(n, name="k")
    red = {"sum": te.sum, "max": te.max, "min": te.min}[op]
    S = te.compute((rows,), lambda i: red(A[i, k], axis=k), name="S")
    return te.create_prim_func([A, S])


def _partitioned(base, factors: list[int | None]) -> loopir.Schedule:
    """``k`` cut into partitions, ``i`` bound to blockIdx.x and each partition to threadIdx.x."""
    sch = loopir.Schedule(base)
    i, k = sch.get_loops(sch.get_block("S"))
    parts = sch.loop_partition(k, factors)
    sch.bind(i, "blockIdx.x")
    for p in parts:
        sch.bind(p, "threadIdx.x")
    return sch


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("factors", [[4, None], [2, 2, None]])
def test_later_partitions_accumulate_onto_the_earlier_ones(op, factors, pad) -> None:
    n = 8 if factors == [4, None] else 6
    base = _reduction(op, 3, n)
    sch = _partitioned(base, factors)
    check_equivalent(base, sch.func)
    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        low = loopir.lower(sch.func)
    check_equivalent(base, low, thread_order="sequential")
    check_equivalent(base, low, thread_order="random")


def test_an_init_that_runs_at_the_last_thread_is_refused() -> None:
    """Bound to ``7 - k``, the reduce iter var is at its minimum in the last iteration:
    sequentially the sum restarts there, which no cross-thread combine computes."""
    base = _reduction("sum", 3, 8)
    sch = loopir.Schedule(base)
    i, k = sch.get_loops(sch.get_block("S"))
    sch.bind(i, "blockIdx.x")
    sch.bind(k, "threadIdx.x")
    text = sch.func.script().replace("T.axis.reduce(8, k)", "T.axis.reduce(8, 7 - k)")
    assert "7 - k" in text
    with pytest.raises(PassError, match=r"LowerCrossThreadReduction: reduce iter var v_k of block 'S'"):
        loopir.lower(from_source(text))
