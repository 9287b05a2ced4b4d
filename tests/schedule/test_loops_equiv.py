"""Loop primitives preserve semantics: CPU-executor equivalence on random non-zero data.

Hypothesis draws shapes and factors, including non-divisible ones (inexact splits with
predicates), and every scheduled function is also replayed from its trace (Python and JSON).
"""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

import loopir
from loopir.errors import ScheduleError
from loopir.testing import check_equivalent
from tests.schedule.workloads import elementwise, matmul


def _replays(sch: loopir.Schedule, func: loopir.PrimFunc) -> None:
    """The trace reproduces sch.func through both the Python and the JSON form."""
    ns: dict = {}
    exec(sch.trace.as_python(), ns)  # noqa: S102 - the trace is our own generated code
    s1 = loopir.Schedule(func)
    ns["apply_trace"](s1)
    loopir.assert_structural_equal(sch.func, s1.func)
    s2 = loopir.Schedule(func)
    loopir.Trace.from_json(json.loads(json.dumps(sch.trace.as_json()))).apply_to(s2)
    loopir.assert_structural_equal(sch.func, s2.func)


factor_lists = st.lists(st.integers(1, 7), min_size=1, max_size=3)


@given(m=st.integers(1, 40), n=st.integers(1, 6), factors=factor_lists,
       none_at=st.one_of(st.none(), st.integers(0, 3)))  # fmt: skip
def test_split_equivalent(m: int, n: int, factors: list[int], none_at: int | None) -> None:
    func = elementwise(m, n)
    fs: list[int | None] = list(factors)
    if none_at is not None:
        fs.insert(min(none_at, len(fs)), None)
    sch = loopir.Schedule(func)
    i, _ = sch.get_loops(sch.get_block("B"))
    if none_at is None and math.prod(factors) < m:
        try:
            sch.split(i, fs)
        except ScheduleError as e:
            assert "smaller than the extent" in str(e)
            return
        raise AssertionError(f"split {fs} of extent {m} must be refused")
    outs = sch.split(i, fs)
    assert len(outs) == len(fs)
    check_equivalent(func, sch.func)
    _replays(sch, func)


@given(m=st.integers(1, 12), k=st.integers(1, 6), n=st.integers(1, 12),
       fi=st.integers(1, 5), fj=st.integers(1, 5), fk=st.integers(1, 4),
       perm=st.permutations(range(6)), fuse_outer=st.booleans())  # fmt: skip
def test_split_reorder_fuse_matmul_equivalent(
    m: int, k: int, n: int, fi: int, fj: int, fk: int, perm: list[int], fuse_outer: bool
) -> None:
    func = matmul(m, k, n)
    sch = loopir.Schedule(func)
    blk = sch.get_block("C")
    i, j, kk = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, fi])
    j0, j1 = sch.split(j, [fj, None])
    k0, k1 = sch.split(kk, [None, fk])
    loops = [i0, i1, j0, j1, k0, k1]
    sch.reorder(*[loops[p] for p in perm])
    if fuse_outer:
        # Any two outer loops fuse, a spatial with a reduce loop too (as in TVM).
        order = sch.get_loops(blk)
        sch.fuse(order[0], order[1])
    check_equivalent(func, sch.func)
    _replays(sch, func)


@given(m=st.integers(1, 20), n=st.integers(1, 20), f=st.integers(1, 9))
def test_fuse_then_split_bind_equivalent(m: int, n: int, f: int) -> None:
    func = elementwise(m, n)
    sch = loopir.Schedule(func)
    i, j = sch.get_loops(sch.get_block("B"))
    fused = sch.fuse(i, j)
    bx, tx = sch.split(fused, [None, f])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    check_equivalent(func, sch.func)
    _replays(sch, func)


@given(m=st.integers(1, 30), f=st.integers(2, 8), v=st.integers(1, 4))
def test_annotations_equivalent(m: int, f: int, v: int) -> None:
    func = elementwise(m, 4)
    sch = loopir.Schedule(func)
    i, j = sch.get_loops(sch.get_block("B"))
    a, b = sch.split(i, [None, f])
    sch.parallel(a)
    sch.unroll(b)
    j0, j1 = sch.split(j, [None, v])
    sch.vectorize(j1)
    check_equivalent(func, sch.func)


@given(n=st.integers(1, 50), f=st.integers(1, 16))
def test_symbolic_split_equivalent(n: int, f: int) -> None:
    size = loopir.Var("n")
    func = elementwise(size, 3)
    sch = loopir.Schedule(func)
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.split(i, [None, f])
    check_equivalent(func, sch.func, sizes={"n": n})


@given(data=st.data())
def test_reorder_subset_semantics(data: st.DataObject) -> None:
    """Listed loops fill their own positions in the given order; the others stay put."""
    func = matmul(3, 4, 5)
    sch = loopir.Schedule(func)
    blk = sch.get_block("C")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, 2])
    k0, k1 = sch.split(k, [2, None])
    chain = sch.get_loops(blk)  # i0 i1 j k0 k1
    picked = data.draw(st.lists(st.sampled_from(range(5)), min_size=1, max_size=5, unique=True))
    order = data.draw(st.permutations(picked))
    names = [sch.get(lp).loop_var.name for lp in chain]
    sch.reorder(*[chain[p] for p in order])
    expected = list(names)
    for pos, p in zip(sorted(picked), order):
        expected[pos] = names[p]
    assert [sch.get(lp).loop_var.name for lp in sch.get_loops(blk)] == expected
    check_equivalent(func, sch.func)


_PRIMS = ["split", "fuse", "reorder", "bind", "vectorize", "unroll", "parallel"]
_TAGS = ["blockIdx.x", "threadIdx.x", "threadIdx.y", "vthread.x"]


@given(data=st.data(), m=st.integers(1, 9), k=st.integers(1, 5), n=st.integers(1, 9))
def test_random_primitive_sequences(data: st.DataObject, m: int, k: int, n: int) -> None:
    """Random loop-primitive programs: each step either applies or raises ScheduleError and
    leaves the schedule untouched; the result is equivalent and its trace replays."""
    func = matmul(m, k, n)
    sch = loopir.Schedule(func)
    blk = sch.get_block("C")
    for _ in range(data.draw(st.integers(1, 6))):
        loops = sch.get_loops(blk)
        prim = data.draw(st.sampled_from(_PRIMS))
        before, length = sch.func, len(sch.trace)
        try:
            if prim == "split":
                lp = data.draw(st.sampled_from(loops))
                fs: list[int | None] = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
                fs.insert(data.draw(st.integers(0, len(fs))), None)
                sch.split(lp, fs)
            elif prim == "fuse":
                start = data.draw(st.integers(0, len(loops) - 1))
                count = data.draw(st.integers(1, len(loops) - start))
                sch.fuse(*loops[start:start + count])
            elif prim == "reorder":
                picked = data.draw(st.lists(st.sampled_from(loops), min_size=1, unique=True))
                sch.reorder(*picked)
            elif prim == "bind":
                sch.bind(data.draw(st.sampled_from(loops)), data.draw(st.sampled_from(_TAGS)))
            else:
                getattr(sch, prim)(data.draw(st.sampled_from(loops)))
        except ScheduleError:
            assert sch.func is before and len(sch.trace) == length
    loopir.verify(sch.func)
    check_equivalent(func, sch.func)
    _replays(sch, func)
