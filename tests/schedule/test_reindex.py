"""reindex (issue 29 item 3), with TVM 0.27's semantics.

Golden before/after IR (the docstring example, the IR TVM 0.27 prints up to syntax), each
refusal naming the primitive and the offending value, the trace replaying through JSON and
Python, and the CPU executor against the unscheduled function over hypothesis-drawn shapes.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopir
from loopir import te
from loopir.errors import ScheduleError
from tests.schedule.dm_util import check_schedule, golden_pair, matmul


def transpose(m: int = 16, n: int = 8) -> loopir.PrimFunc:
    A = te.placeholder((n, m), "float32", name="A")
    B = te.compute((m, n), lambda i, j: A[j, i] * 2.0, name="B")
    return te.create_prim_func([A, B])


def test_golden_read(golden) -> None:
    func = transpose()
    sch = loopir.Schedule(func)
    copy = sch.reindex(sch.get_block("B"), ("read", 0))
    golden_pair(golden, "reindex_read", func, sch.func)
    # TVM 0.27: the copy block is named after the new buffer, the buffer after the old one
    assert sch.get(copy).name == "A_reindex_reindex"
    assert [int(s) for s in sch.get(copy).writes[0].buffer.shape] == [16, 8]
    assert 'sch.reindex(b0, ["read", 0])' in str(sch.trace)
    check_schedule(func, sch)


def test_golden_write_of_a_reduction(golden) -> None:
    func = matmul(16, 8, 12)
    sch = loopir.Schedule(func)
    copy = sch.reindex(sch.get_block("C"), ("write", 0))
    golden_pair(golden, "reindex_write", func, sch.func)
    assert sch.get(copy).name == "C_reindex"
    check_schedule(func, sch)


def test_buffer_by_name_and_by_buffer() -> None:
    """As TVM: a name or Buffer the block writes is a write, else a read (B -> ("read", 1)),
    and the trace records the specifier."""
    func = matmul(6, 4, 5)
    sch = loopir.Schedule(func)
    sch.reindex(sch.get_block("C"), "B")
    assert sch.get(sch.get_block("C")).reads[-1].buffer.name == "B_reindex"
    c = sch.get_block("C")
    sch.reindex(c, sch.get(c).writes[0].buffer)
    assert 'b1 = sch.reindex(b0, ["read", 1])' in str(sch.trace)
    assert 'sch.reindex(b3, ["write", 0])' in str(sch.trace)
    check_schedule(func, sch)


def test_only_the_iter_vars_in_the_indices_are_dimensions() -> None:
    """B_reindex of a matmul is [j, k]: the access B[vk, vj] uses vj and vk, in block order."""
    func = matmul(6, 4, 5)
    sch = loopir.Schedule(func)
    copy = sch.reindex(sch.get_block("C"), ("read", 1))
    assert [int(s) for s in sch.get(copy).writes[0].buffer.shape] == [5, 4]
    check_schedule(func, sch)


def padded_copy(n: int = 10) -> loopir.PrimFunc:
    X = te.placeholder((n,), "float32", name="X")
    P = te.compute((n + 2,), lambda i: te.if_then_else(te.all(i >= 1, i < n + 1), X[i - 1], 0.0), name="P")
    return te.create_prim_func([X, P])


def test_refusals() -> None:
    sch = loopir.Schedule(matmul(6, 4, 5))
    c = sch.get_block("C")
    sch.decompose_reduction(c, sch.get_loops(c)[0])  # the update now reads C: reads[0]
    with pytest.raises(ScheduleError, match="also writes 'C'; a read reindex would lose the write") as info:
        sch.reindex(c, ("read", 0))
    assert str(info.value).startswith("reindex: ")
    with pytest.raises(ScheduleError, match="reads 'C' before writing it and has no init"):
        sch.reindex(c, ("write", 0))
    with pytest.raises(ScheduleError, match="a buffer specifier is \\('read', index\\)"):
        sch.reindex(c, ("both", 0))
    with pytest.raises(ScheduleError, match="buffer index 5 is out of range"):
        sch.reindex(c, ("read", 5))
    # the copy would read X[-1] and X[n], which the block guards
    pad = loopir.Schedule(padded_copy())
    with pytest.raises(ScheduleError, match="index v_i - 1 of 'X' .* is not provably inside"):
        pad.reindex(pad.get_block("P"), ("read", 0))


def test_a_block_sharing_its_loops_is_refused() -> None:
    A = te.placeholder((8, 8), "float32", name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] * 2.0, name="C")
    func = te.create_prim_func([A, C])
    sch = loopir.Schedule(func)
    sch.compute_at(sch.get_block("B"), sch.get_loops(sch.get_block("C"))[0])
    with pytest.raises(ScheduleError, match="block 'C' is not alone in a loop nest"):
        sch.reindex(sch.get_block("C"), ("read", 0))


def test_a_write_the_loops_do_not_make_everywhere_is_refused() -> None:
    """A predicate that skips points of the domain: the copy back would write garbage there."""
    from loopir.ir.expr import IntImm
    from loopir.schedule import tree

    func = transpose(8, 8)
    hit = tree.find_block_realize(func, "B")
    assert hit is not None
    realize = hit[0]
    skewed = tree.replace(func, realize, type(realize)(
        realize.iter_values, realize.iter_values[0] >= IntImm(1, "int32"), realize.block))  # fmt: skip
    sch = loopir.Schedule(skewed)
    with pytest.raises(ScheduleError, match="writes 'B' only where"):
        sch.reindex(sch.get_block("B"), ("write", 0))
    sch.reindex(sch.get_block("B"), ("read", 0))  # a read copies every point: fine
    check_schedule(skewed, sch)


def test_a_partition_is_reindexed_over_its_own_domain() -> None:
    func = transpose(8, 8)
    sch = loopir.Schedule(func)
    sch.loop_partition(sch.get_loops(sch.get_block("B"))[0], [3])
    copy = sch.reindex(sch.get_block("B_i1"), ("write", 0))  # vi in [3, 8): buffer of 8 rows
    assert [int(s) for s in sch.get(copy).reads[0].buffer.shape] == [8, 8]
    check_schedule(func, sch)


def test_a_write_of_two_iter_vars_in_one_dimension_is_refused() -> None:
    A = te.placeholder((4, 4), "float32", name="A")
    B = te.compute((4, 4), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((4, 4), lambda i, j: B[i, j] + 1.0, name="C")
    func = te.create_prim_func([A, C])
    sch = loopir.Schedule(func)
    sch.transform_layout(sch.get_block("B"), ("write", 0), lambda i, j: (i * 4 + j,))
    with pytest.raises(ScheduleError, match=r"writes 'B'\[v_i \* 4 \+ v_j\]; a write reindex needs each dimension"):
        sch.reindex(sch.get_block("B"), ("write", 0))
    sch.reindex(sch.get_block("C"), ("read", 0))  # a read may use any indices
    check_schedule(func, sch)


@given(m=st.sampled_from([1, 5, 31, 33, 47]), k=st.sampled_from([3, 8, 32]), n=st.sampled_from([2, 7, 33]),
       spec=st.sampled_from([("read", 0), ("read", 1), ("write", 0)]), split=st.booleans())  # fmt: skip
def test_reindexed_matmuls_compute_the_same(m: int, k: int, n: int, spec: tuple[str, int], split: bool) -> None:
    func = matmul(m, k, n)
    sch = loopir.Schedule(func)
    c = sch.get_block("C")
    if split:  # an inexact split: the predicate keeps every point written once
        sch.split(sch.get_loops(c)[0], [None, 4])
    sch.reindex(c, spec)
    check_schedule(func, sch)
