"""decompose_padding and can_decompose_padding (issue 29 item 3), with TVM 0.27's semantics.

Golden before/after IR (TVM's docstring example; TVM 0.27 prints the same IR up to syntax),
each refusal naming the primitive, the trace replaying through JSON and Python, and the CPU
executor against the unscheduled function over hypothesis-drawn shapes and positions.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopir
from loopir import te
from loopir.errors import ScheduleError
from loopir.testing.workloads import make_workload
from tests.schedule.dm_util import check_schedule, golden_pair


def tvm_example() -> loopir.PrimFunc:
    x = te.placeholder((128,), "int32", name="x")
    y = te.compute((140,), lambda i: te.if_then_else(te.all(i >= 6, i < 134), x[i - 6], 0), name="block")
    return te.create_prim_func([x, y])


def pad2d(m: int = 4, n: int = 5, top: int = 1, left: int = 2) -> loopir.PrimFunc:
    X = te.placeholder((m, n), "float32", name="X")
    Y = te.compute(
        (m + top + 1, n + left),
        lambda i, j: te.if_then_else(te.all(i >= top, i < m + top, j >= left), X[i - top, j - left], 0.0),
        name="P",
    )
    return te.create_prim_func([X, Y])


def test_golden_tvm_example(golden) -> None:
    func = tvm_example()
    sch = loopir.Schedule(func)
    b = sch.get_block("block")
    fill = sch.decompose_padding(b, sch.get_loops(b)[0])
    golden_pair(golden, "decompose_padding", func, sch.func)
    assert sch.get(fill).name == "block_pad_const"
    (loop,) = sch.get_loops(b)  # the handle now refers to the in-bound block, as in TVM
    assert int(sch.get(loop).extent) == 128
    assert "b2 = sch.decompose_padding(b0, l1)" in str(sch.trace)
    check_schedule(func, sch)


def test_an_inner_position_trims_by_predicate_outside_it() -> None:
    """TVM 0.27 on pad2d at j: the fill covers one row per i, the in-bound block keeps the i
    loop and selects its rows with ``T.where(1 <= i and i < 5)``, j runs over 5."""
    func = pad2d()
    sch = loopir.Schedule(func)
    b = sch.get_block("P")
    i, j = sch.get_loops(b)
    sch.decompose_padding(b, j)
    realize = sch.get(b)
    assert [int(iv.dom.extent) for iv in realize.iter_vars] == [4, 5]
    assert int(sch.get(j).extent) == 5 and int(sch.get(i).extent) == 6
    assert "T.where(i >= 1 and i < 5)" in sch.func.script()
    check_schedule(func, sch)


def test_after_split_and_on_a_conv_pad() -> None:
    func = pad2d(5, 3)
    sch = loopir.Schedule(func)
    b = sch.get_block("P")
    i, _ = sch.get_loops(b)
    i0, _ = sch.split(i, [None, 4])
    sch.decompose_padding(b, i0)
    check_schedule(func, sch)
    w = make_workload("conv2d_nhwc", N=1, H=5, W=4, CI=2, CO=3, KH=3, KW=3, pad=1, stride=1)
    sch = loopir.Schedule(w.func)
    x = sch.get_block("Xpad")
    sch.decompose_padding(x, sch.get_loops(x)[2])
    check_schedule(w.func, sch)


def test_refusals() -> None:
    sch = loopir.Schedule(pad2d())
    b = sch.get_block("P")
    i, _ = sch.get_loops(b)
    assert sch.can_decompose_padding(b, i)
    other = loopir.Schedule(tvm_example())
    (foreign,) = other.get_loops(other.get_block("block"))
    with pytest.raises(ScheduleError, match="does not belong to this schedule"):
        sch.decompose_padding(b, foreign)
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda v: A[v] * 2.0, name="B")
    plain = loopir.Schedule(te.create_prim_func([A, B]))
    pb = plain.get_block("B")
    with pytest.raises(ScheduleError, match="not a padding T.if_then_else") as info:
        plain.decompose_padding(pb, plain.get_loops(pb)[0])
    assert str(info.value).startswith("decompose_padding: ")
    assert not plain.can_decompose_padding(pb, plain.get_loops(pb)[0])
    assert [i.kind for i in plain.trace] == ["get_block", "get_loops", "get_loops"]  # no can_*
    diag = te.compute((8, 8), lambda p, q: te.if_then_else(p < q, A[p], 0.0), name="D")
    d = loopir.Schedule(te.create_prim_func([A, diag]))
    db = d.get_block("D")
    with pytest.raises(ScheduleError, match="does not bound one iter var"):
        d.decompose_padding(db, d.get_loops(db)[0])
    full = te.compute((8,), lambda v: te.if_then_else(v < 8, A[v], 0.0), name="F")
    f = loopir.Schedule(te.create_prim_func([A, full]))
    fb = f.get_block("F")
    with pytest.raises(ScheduleError, match="holds at every point"):
        f.decompose_padding(fb, f.get_loops(fb)[0])


def test_a_loop_not_above_the_block_is_refused() -> None:
    A = te.placeholder((8,), "float32", name="A")
    P = te.compute((10,), lambda v: te.if_then_else(v < 8, A[v], 0.0), name="P")
    C = te.compute((10,), lambda v: P[v] + 1.0, name="C")
    sch = loopir.Schedule(te.create_prim_func([A, C]))
    with pytest.raises(ScheduleError, match="loop v is not above block .P. in its scope"):
        sch.decompose_padding(sch.get_block("P"), sch.get_loops(sch.get_block("C"))[0])


@given(m=st.sampled_from([1, 3, 31, 33]), n=st.sampled_from([2, 5, 32]), top=st.integers(0, 3),
       left=st.integers(1, 3), inner=st.booleans(), split=st.booleans())  # fmt: skip
def test_decomposed_pads_compute_the_same(m: int, n: int, top: int, left: int, inner: bool, split: bool) -> None:
    func = pad2d(m, n, top, left)
    sch = loopir.Schedule(func)
    b = sch.get_block("P")
    i, j = sch.get_loops(b)
    if split:
        i, _ = sch.split(i, [None, 4])
    sch.decompose_padding(b, j if inner else i)
    check_schedule(func, sch)


def test_the_fill_cannot_move_past_the_in_bound_block() -> None:
    """Regression (fuzz seed 221): compute_at of the fill under its consumer's loop put it after
    the in-bound block, so the constant overwrote the copied values; two writers of a buffer
    must keep their order."""
    X = te.placeholder((4, 5), "float32", name="X")
    P = te.compute((5, 5), lambda i, j: te.if_then_else(i >= 1, X[i - 1, j], 0.0), name="P")
    Q = te.compute((5, 5), lambda i, j: P[i, j] + 1.0, name="Q")
    func = te.create_prim_func([X, Q])
    sch = loopir.Schedule(func)
    p = sch.get_block("P")
    fill = sch.decompose_padding(p, sch.get_loops(p)[0])
    q_i = sch.get_loops(sch.get_block("Q"))[0]
    with pytest.raises(ScheduleError, match="would run after 'P', which also writes 'P'"):
        sch.compute_at(fill, q_i)
    check_schedule(func, sch)


def test_every_comparison_form_bounds_its_iter_var() -> None:
    """``>``, ``<=`` and constants on the left give the same in-bound box as ``>=`` / ``<``."""
    X = te.placeholder((4, 5), "float32", name="X")
    P = te.compute((6, 7), lambda i, j: te.if_then_else(
        te.all(i > 0, i <= 4, 2 <= j), X[i - 1, j - 2], -1.0), name="P")  # fmt: skip
    func = te.create_prim_func([X, P])
    sch = loopir.Schedule(func)
    b = sch.get_block("P")
    sch.decompose_padding(b, sch.get_loops(b)[0])
    assert [(int(iv.dom.min), int(iv.dom.extent)) for iv in sch.get(b).iter_vars] == [(0, 4), (0, 5)]
    check_schedule(func, sch)
