"""Regression tests for what the schedule fuzzer found (see docs/testing.md, "Findings").

Each test is the minimized reproducer of one finding, checked the way the fuzzer checks it.
"""

from __future__ import annotations

import numpy as np
import pytest

import loopir
from loopir.errors import ScheduleError
from loopir.ir.expr import IntImm
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import Allocate, PrimFunc
from loopir.testing import check_equivalent, random_inputs
from loopir.testing import workloads as W


def _lowered(func: PrimFunc, pad: bool) -> PrimFunc:
    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        return loopir.lower(func)


def _allocations(func: PrimFunc) -> dict[str, tuple[object, ...]]:
    out: dict[str, tuple[object, ...]] = {}

    def visit(n: object) -> None:
        if isinstance(n, Allocate):
            out[n.buffer.name] = n.buffer.shape

    post_order_visit(func.body, visit)
    return out


def test_compact_keeps_symbolic_extent_of_cache_buffer() -> None:
    """F1 (fixed in loopir/passes/compact.py): cache_read/cache_write into shared/local on a symbolic extent: compaction gave
    the cache buffer 2**31 - 1 rows (the int32 bound of ``n``), so running the lowered
    function tried to allocate tens of gigabytes."""
    w = W.symbolic_elementwise(6, 4)
    sch = loopir.Schedule(w.func)
    sch.cache_read(sch.get_block("C"), "A", "shared")
    sch.cache_write(sch.get_block("B"), "B", "local")
    for pad in (False, True):
        low = _lowered(sch.func, pad)
        for name, shape in _allocations(low).items():
            for d in shape:
                assert not (isinstance(d, IntImm) and d.value > 1 << 20), (name, shape)
        check_equivalent(w.func, low, sizes=w.sizes)
        # Other sizes of n run too (the shape is not specialised to the first one).
        check_equivalent(w.func, low, sizes={"n": 11})


def test_compact_does_not_scope_accumulator_inside_its_reduction_loop() -> None:
    """F2 (fixed in loopir/passes/compact.py): cache_write of a reduction + reverse_compute_at of the write-back under the reduce
    loop: compaction allocated the accumulator inside the reduce loop, so its value did not
    survive from one iteration to the next (NaN / wrong results after lowering)."""
    w = W.reduce_min(3, 6)
    sch = loopir.Schedule(w.func)
    r = sch.get_block("R")
    _, k = sch.get_loops(r)
    c = sch.cache_write(r, 0, "shared")
    sch.reverse_compute_at(c, k)
    check_equivalent(w.func, sch.func)  # the schedule itself is right
    for pad in (False, True):
        check_equivalent(w.func, _lowered(sch.func, pad))


def test_batch_matmul_local_accumulator_under_reduce_loop() -> None:
    """F2 again, through a local cache of a batched matmul."""
    w = W.batch_matmul(1, 4, 5, 1)
    sch = loopir.Schedule(w.func)
    c = sch.get_block("C")
    cl = sch.cache_write(c, "C", "local")
    loops = sch.get_loops(c)
    sch.reverse_compute_at(cl, loops[-1])
    for pad in (False, True):
        out = check_equivalent(w.func, _lowered(sch.func, pad))
        assert np.isfinite(out[-1]).all()
    a, b, _ = random_inputs(w.func)
    np.testing.assert_allclose(out[-1], np.matmul(a, b), rtol=1e-5)


def _copy_extents(func: PrimFunc, block: str) -> list[int]:
    """Extents of the loops directly around block ``block`` (up to its enclosing loop)."""
    sch = loopir.Schedule(func)
    return [sch.get(lp).extent.value for lp in sch.get_loops(sch.get_block(block))]


def test_cache_write_inside_a_shared_loop_copies_one_iteration() -> None:
    """F3 (fixed in loopir/schedule/cache.py): when producer and consumer share a loop,
    cache_write put a whole-buffer write-back inside that loop, which copied elements not
    produced yet; lowering (rightly) scoped the local cache to one iteration and the result
    was wrong. Now the write-back covers one iteration's region, as in TVM."""
    w = W.elementwise_chain(4, 2, stages=3)
    sch = loopir.Schedule(w.func)
    t1 = sch.get_block("T1")
    i, _ = sch.get_loops(t1)
    sch.reverse_compute_at(sch.get_block("T2"), i)
    wb = sch.cache_write(t1, 0, "local")
    assert _copy_extents(sch.func, "T1_local") == [4, 2]  # i, then one row of 2
    assert sch.get(wb).name == "T1_local"
    check_equivalent(w.func, sch.func)
    for pad in (False, True):
        check_equivalent(w.func, _lowered(sch.func, pad))
    # The original fuzzer reproducer (four stages, T2 inlined, T3 moved twice).
    w = W.elementwise_chain(4, 2, stages=4)
    sch = loopir.Schedule(w.func)
    t1 = sch.get_block("T1")
    sch.compute_inline(sch.get_block("T2"))
    i, _ = sch.get_loops(t1)
    sch.reverse_compute_at(sch.get_block("T3"), i)
    wb = sch.cache_write(t1, 0, "local")
    sch.reverse_compute_at(sch.get_block("T3"), sch.get_loops(wb)[-1])
    for pad in (False, True):
        check_equivalent(w.func, _lowered(sch.func, pad))


def test_cache_read_inside_a_shared_loop_copies_one_iteration() -> None:
    """F3, the cache_read side: the copy of T1 for T2 inside the shared loop i is one row."""
    w = W.elementwise_chain(5, 3, stages=3)
    sch = loopir.Schedule(w.func)
    t1, t2 = sch.get_block("T1"), sch.get_block("T2")
    i, _ = sch.get_loops(t1)
    sch.reverse_compute_at(t2, i)
    sch.cache_read(t2, "T1", "shared")
    assert _copy_extents(sch.func, "T1_shared") == [5, 3]
    check_equivalent(w.func, sch.func)
    for pad in (False, True):
        check_equivalent(w.func, _lowered(sch.func, pad))


def test_cache_write_with_its_consumer_in_the_same_loop() -> None:
    """The write-back of C goes between C and BiasAdd inside loop i, one row at a time."""
    w = W.matmul_bias_relu(4, 3, 5)
    sch = loopir.Schedule(w.func)
    c = sch.get_block("C")
    i, _, _ = sch.get_loops(c)
    sch.reverse_compute_at(sch.get_block("BiasAdd"), i)
    sch.cache_write(c, "C", "shared")
    assert _copy_extents(sch.func, "C_shared") == [4, 5]
    check_equivalent(w.func, sch.func)
    for pad in (False, True):
        check_equivalent(w.func, _lowered(sch.func, pad))


def test_cache_read_refuses_a_whole_buffer_copy_of_data_the_loop_produces() -> None:
    """F5 (fixed in loopir/schedule/cache.py): the copy must go inside a loop that produces
    its source, but a consumer outside the loop also reads it, so it cannot be shrunk to one
    iteration; the whole-buffer copy it used to make read elements not produced yet (and
    lowering returned NaN). It is now a ScheduleError and the schedule is unchanged."""
    w = W.symbolic_elementwise(2, 8)
    sch = loopir.Schedule(w.func)
    b = sch.get_block("B")
    sch.cache_read(b, "A", "shared")
    _, inner = sch.get_loops(sch.get_block("A_shared"))
    sch.reverse_compute_at(b, inner)
    before, n = sch.func, len(sch.trace)
    with pytest.raises(ScheduleError, match=r"cache_read: the copy 'A_shared_shared' must go "
                       r"inside loop 'ax1', where 'A_shared' is produced"):  # fmt: skip
        sch.cache_read(b, "A_shared", "shared")
    assert sch.func is before and len(sch.trace) == n
    for pad in (False, True):
        check_equivalent(w.func, _lowered(sch.func, pad), sizes=w.sizes)


def test_reverse_compute_at_refuses_a_loop_feeding_spatial_and_reduce_axes() -> None:
    """F4 (fixed in loopir/schedule/compute_at.py): reverse_compute_at of a reduction block
    under the fused copy loop of its cache_read bound its spatial iter var v_i and its reduce
    iter var v_k to the same loop; the result failed ``loopir.verify``. It is now a
    ScheduleError, and the schedule is unchanged."""
    w = W.matmul_bias_relu(2, 7, 1)
    sch = loopir.Schedule(w.func)
    c = sch.get_block("C")
    copy = sch.cache_read(c, "A", "global")
    fused = sch.fuse(*sch.get_loops(copy))
    before, n = sch.func, len(sch.trace)
    with pytest.raises(ScheduleError, match=r"reverse_compute_at: .*spatial iter var v_i and its "
                       r"reduce iter var v_k to loop ax0_ax1_fused"):  # fmt: skip
        sch.reverse_compute_at(c, fused)
    assert sch.func is before and len(sch.trace) == n
    # Unfused, the same move is fine: the consumer goes under the copy's row loop.
    sch = loopir.Schedule(w.func)
    c = sch.get_block("C")
    copy = sch.cache_read(c, "A", "global")
    row, _ = sch.get_loops(copy)
    sch.reverse_compute_at(c, row)
    loopir.verify(sch.func)
    check_equivalent(w.func, sch.func)


def test_decompose_reduction_refuses_to_hoist_init_above_a_repeating_loop() -> None:
    """F6 (fixed in loopir/schedule/reduction.py): after compute_at of C under a thread loop j
    that its scope relaxes (C is recomputed whole in every iteration of j), decomposing at the
    loop above j hoisted the init out of the repetition, so later repetitions added onto
    finished sums. It is now a ScheduleError; decomposing below j stays valid. (F6 was found
    with a global C under a blockIdx-bound j, which compute_at relaxed then; since issue 28 it
    relaxes no thread loop for global storage, as TVM 0.27, so there each j computes its own
    column and decomposing at i is valid: checked too.) A shared C under threadIdx-bound j is
    still relaxed."""
    w = W.matmul_bias_relu(1, 1, 8)
    sch = loopir.Schedule(w.func)
    c, b = sch.get_block("C"), sch.get_block("BiasAdd")
    i, j = sch.get_loops(b)
    sch.set_scope(c, 0, "shared")
    sch.bind(j, "threadIdx.x")
    sch.compute_at(c, j)
    before, n = sch.func, len(sch.trace)
    with pytest.raises(ScheduleError, match=r"decompose_reduction: loop 'j' at or below 'i' "
                       r"feeds no iter var of 'C'"):  # fmt: skip
        sch.decompose_reduction(c, i)
    assert sch.func is before and len(sch.trace) == n
    inner = sch.get_loops(c)[-1]
    sch.decompose_reduction(c, inner)
    check_equivalent(w.func, sch.func)
    # global C under blockIdx j: one column per iteration, nothing repeats
    sch = loopir.Schedule(w.func)
    c, b = sch.get_block("C"), sch.get_block("BiasAdd")
    i, j = sch.get_loops(b)
    sch.bind(j, "blockIdx.x")
    sch.compute_at(c, j)
    sch.decompose_reduction(c, i)
    check_equivalent(w.func, sch.func)
    check_equivalent(w.func, loopir.lower(sch.func))


def test_reverse_compute_at_of_a_decomposed_update_covers_its_own_row() -> None:
    """F7: after decompose_reduction, moving the update block (``C = C + ...``, no init) under
    the init's blockIdx loop relaxed its region over that loop, so every iteration added all
    the terms again (C = 3 * A @ B); it was refused. reverse_compute_at no longer relaxes
    (TVM semantics, issue 20): each iteration updates only its own row, which is correct."""
    w = W.matmul(3, 1, 1)
    sch = loopir.Schedule(w.func)
    c = sch.get_block("C")
    i, _, _ = sch.get_loops(c)
    sch.bind(i, "blockIdx.x")
    init = sch.decompose_reduction(c, i)
    i_init, _ = sch.get_loops(init)
    sch.reverse_compute_at(c, i_init, preserve_unit_loops=True)
    check_equivalent(w.func, sch.func)


def test_bind_refuses_nested_same_tag_over_dependent_work() -> None:
    """O2 (fixed in loopir/schedule/loops.py): two nested loops of one nest bound to the same
    blockIdx.x became one index when lowered, so only the diagonal of C was computed."""
    w = W.make_workload("matmul", M=4, K=7, N=4)
    sch = loopir.Schedule(w.func)
    i, j, _ = sch.get_loops(sch.get_block("C"))
    sch.bind(j, "blockIdx.x")
    before = sch.func
    with pytest.raises(ScheduleError, match="only the\\s+diagonal"):
        sch.bind(i, "blockIdx.x")
    assert sch.func is before
    # the cooperative fetch (same tag nested over work independent of the outer loop) stays legal
    dense = loopir.examples.dense(60, 50, 70)
    check_equivalent(loopir.examples.dense_func(60, 50, 70), loopir.lower(dense.func))


def test_pad_twice_matches_the_unpadded_function() -> None:
    """O1 (fixed in loopir/runtime/cache.py): padding an already padded block computed zeros
    on the CPU executor: gcc -O2's aggressive loop optimizations mis-derived loop bounds from
    the stack-allocated intermediates of the C the executor generates."""
    w = W.make_workload("batch_matmul", Bt=2, M=2, K=4, N=1)
    sch = loopir.Schedule(w.func)
    sch.pad(sch.get_block("C"), [2, 3, 4, 2])
    sch.pad(sch.get_block("C"), [2, 3, 1, 3])
    check_equivalent(w.func, sch.func)


def test_reverse_compute_at_refuses_a_consumer_that_writes_beyond_what_it_reads() -> None:
    """O3 (fixed in loopir/schedule/compute_at.py, found by the survey after O1/O2): a padding
    copy moved under its producer's loop only covered the rows the producer provides, so its
    pad rows were never written (NaN in C)."""
    w = W.make_workload("batch_matmul", Bt=2, M=3, K=3, N=4)
    sch = loopir.Schedule(w.func)
    c = sch.get_block("C")
    sch.pad(c, [4, 2, 2, 1])
    sch.pad(c, [1, 3, 2, 4])
    _, l17, _ = sch.get_loops(sch.get_block("B_pad"))
    before = sch.func
    with pytest.raises(ScheduleError, match="would never be written"):
        sch.reverse_compute_at(sch.get_block("B_pad_pad"), l17, preserve_unit_loops=True)
    assert sch.func is before
    check_equivalent(w.func, sch.func)


def test_cuda_refuses_a_local_buffer_shared_across_threads() -> None:
    """G1 (fixed in loopir/codegen_cuda/split.py; found by the GPU fuzz subset on the H200):
    a local cache_read whose copy loop is bound to threadIdx.x while its consumer runs outside
    the thread loop compiled, and on the GPU each thread read its own uninitialized copy."""
    w = W.make_workload("reduce_max", M=3, K=8)
    sch = loopir.Schedule(w.func)
    r, s = sch.get_block("R"), sch.get_block("S")
    (l_s,) = sch.get_loops(s)
    sch.compute_at(r, l_s, preserve_unit_loops=True)
    a_local = sch.cache_read(r, 0, "local")
    sch.reverse_compute_at(r, sch.get_loops(a_local)[0])
    i0, i1 = sch.split(sch.get_loops(s)[0], [None, 2])
    bx, tx = sch.get_loops(a_local)
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.x")
    check_equivalent(w.func, sch.func)  # sequentially the schedule is fine
    from loopir.errors import CodegenError

    with pytest.raises(CodegenError, match="private to each CUDA thread"):
        loopir.build(sch.func, target="cuda")
