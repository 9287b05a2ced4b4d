"""TVM parity and write-back predicates of compute_at / reverse_compute_at.

Issue 20 item 1: ``reverse_compute_at`` does not relax thread-bound loops (TVM 0.27: the
consumer under a thread loop covers that thread's tile). Issue 11 item 3: a write-back moved
under a thread loop must only copy what its thread's producers wrote, with their predicate.
Issue 20 item 2: a region relaxed past the buffer is cut back to the buffer's shape.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import loopir
from loopir.errors import ScheduleError
from loopir.examples.dense import dense_func
from loopir.ir.expr import IntImm, Var
from loopir.schedule import region as rg
from loopir.testing import check_equivalent
from loopir.testing.workloads import tiled_gemm
from tests.schedule.dm_util import (
    assert_equivalent,
    conv2d_nhwc,
    extents,
    golden_pair,
    is_true,
    matmul,
    matmul_bias_relu,
    realize_of,
)


def _lowered_equivalent(func: loopir.PrimFunc, scheduled: loopir.PrimFunc) -> None:
    """Lowered (local accumulators compacted per thread), with and without local padding."""
    for pad in (False, True):
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            check_equivalent(func, loopir.lower(scheduled))


# --- issue 20 item 1: reverse_compute_at keeps thread loops fixed ----------------------------


def test_reverse_compute_at_under_thread_loop_covers_the_thread_tile(golden) -> None:
    """TVM 0.27 gives D 8x16 per thread under the threadIdx-bound j0 (loopir had 40x48: every
    thread recomputed and wrote the whole block's D)."""
    f = matmul_bias_relu(37, 19, 45)
    sch = loopir.Schedule(f)
    c = sch.get_block("C")
    i, j, _ = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, i1, j1)
    sch.bind(i0, "blockIdx.x")
    sch.bind(j0, "threadIdx.x")
    cl = sch.cache_write(c, "C", "local")
    sch.reverse_compute_at(cl, j0)
    sch.reverse_compute_at(sch.get_block("D"), j0)
    g = sch.func
    assert extents(g, "C_local") == [5, 3, 8, 16]
    assert extents(g, "D") == [5, 3, 8, 16]
    # the inexact tiles (37 rows, 45 columns) are masked per element of the thread's tile
    assert str(realize_of(g, "D")[0].predicate) == "i_0 * 8 + ax0 < 37 and j_0 * 16 + ax1 < 45"
    golden_pair(golden, "reverse_compute_at_thread_tile", f, g)
    assert_equivalent(f, g)
    check_equivalent(f, loopir.lower(g))


def test_reverse_compute_at_shared_scope_not_relaxed() -> None:
    """A shared write cache copied back under the threadIdx.y loop: each thread copies its
    row ([64(ty), 64]), not the whole 64x64 tile per thread ([64(ty), 64, 64])."""
    f = matmul(64, 8, 64)
    sch = loopir.Schedule(f)
    c = sch.get_block("C")
    i, _, _ = sch.get_loops(c)
    sch.bind(i, "threadIdx.y")
    cs = sch.cache_write(c, "C", "shared")
    sch.reverse_compute_at(cs, i)
    assert extents(sch.func, "C_shared") == [64, 64]
    assert is_true(realize_of(sch.func, "C_shared")[0].predicate)
    assert_equivalent(f, sch.func)


def test_compute_at_still_relaxes_by_scope() -> None:
    """The other direction keeps the storage-scope rule: a shared copy under threadIdx.y
    covers what every thread of the block reads (all 64 rows)."""
    f = matmul(64, 8, 64)
    sch = loopir.Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.bind(i, "threadIdx.y")
    a = sch.cache_read(c, "A", "shared")
    sch.compute_at(a, j)
    assert extents(sch.func, "A_shared") == [64, 64, 64, 8]
    assert_equivalent(f, sch.func)


def test_reverse_compute_at_update_under_init_block_loop() -> None:
    """Fuzz finding F7 was refused because the update ``C = C + ...`` (no init) moved under
    the init's blockIdx loop had its region relaxed over that loop and would have run every
    row in every iteration. Without the relaxation each iteration updates its own row, the
    move is valid and TVM's result (tests/fuzz/test_findings.py still expects the refusal;
    see the report)."""
    f = matmul(3, 1, 1)
    sch = loopir.Schedule(f)
    c = sch.get_block("C")
    i, _, _ = sch.get_loops(c)
    sch.bind(i, "blockIdx.x")
    init = sch.decompose_reduction(c, i)
    i_init, _ = sch.get_loops(init)
    sch.reverse_compute_at(c, i_init, preserve_unit_loops=True)
    assert extents(sch.func, "C") == [3, 1, 1, 1]
    assert str(realize_of(sch.func, "C")[0].iter_values[0]) == "ax0 + i_init"
    assert_equivalent(f, sch.func)
    check_equivalent(f, loopir.lower(sch.func))


# --- issue 11 item 3: the write-back copies only what its thread computed ---------------------


def _tiled_gemm(M: int, K: int, N: int, ti: int, tj: int, ii: int, jj: int, bk: int,
                vec: int) -> loopir.Schedule:  # fmt: skip
    """tests/passes/test_prefetch_property.py's schedule (without the prefetch request)."""
    return tiled_gemm(M, K, N, ti, tj, ii, jj, bk, vec)


@pytest.mark.parametrize(
    "tiles",
    [
        # found by test_prefetch_property (seeds 2 and 5): thread j_1 = 1 of 2 computes nothing
        # (N = 1) but copied its never-written accumulator into C (NaN)
        dict(ti=1, tj=2, ii=1, jj=2, bk=1, vec=1),
        # same, with the producer predicate `j_1 < 1` over the position's loops only: it was
        # taken for the clip `ax0 < 1` (structural equality mapped j_1 to ax0) and dropped
        dict(ti=1, tj=2, ii=2, jj=1, bk=1, vec=1),
    ],
)
def test_write_back_guarded_for_idle_threads_1x1x1(tiles) -> None:
    f = dense_func(1, 1, 1)
    sch = _tiled_gemm(1, 1, 1, **tiles)
    pred = realize_of(sch.func, "C_local")[0].predicate
    assert "j_1 < 1" in [str(c) for c in rg.conjuncts(pred)]
    check_equivalent(f, sch.func)
    _lowered_equivalent(f, sch.func)


def test_write_back_guard_1x1x1_golden(golden) -> None:
    """Issue 11 item 3 as written: matmul 1x1x1, j split [None, 2, 2], j1 bound to
    threadIdx.x, C_local moved under j1. Here the clip `j_1 * 2 + ax0 < 1` already guarded the
    idle thread; the failing forms are the tiled GEMMs above (the golden pins the IR)."""
    f = matmul(1, 1, 1)
    sch = loopir.Schedule(f)
    c = sch.get_block("C")
    _, j, _ = sch.get_loops(c)
    _, j1, _ = sch.split(j, [None, 2, 2])
    sch.bind(j1, "threadIdx.x")
    sch.reverse_compute_at(sch.cache_write(c, "C", "local"), j1)
    golden_pair(golden, "reverse_compute_at_idle_thread", f, sch.func)
    check_equivalent(f, sch.func)
    _lowered_equivalent(f, sch.func)


@pytest.mark.parametrize("decompose_first", [False, True])
def test_write_back_2d_thread_block_33x9x1(decompose_first: bool) -> None:
    """Issue 11 item 3: 2-D thread block with N = 1; the threads j_1 > 0 compute no column
    and must not write one back (NaN with padding off and on). Decomposing the reduction
    before the move makes two producers (init and update) of C_local under the loop."""
    f = matmul(33, 9, 1)
    sch = loopir.Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1, i2 = sch.split(i, [None, 4, 2])
    j0, j1, j2 = sch.split(j, [None, 4, 2])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    sch.bind(i1, "threadIdx.y")
    sch.bind(j1, "threadIdx.x")
    wb = sch.cache_write(c, "C", "local")
    if decompose_first:
        sch.decompose_reduction(c, k0)
    sch.reverse_compute_at(wb, j1)
    for name in ("A", "B"):
        sh = sch.cache_read(c, name, "shared")
        sch.compute_at(sh, k0)
        fused = sch.fuse(*sch.get_loops(sh)[5:])
        _, ty, tx = sch.split(fused, [None, 4, 4])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
    if not decompose_first:
        sch.decompose_reduction(c, k0)
    pred = realize_of(sch.func, "C_local")[0].predicate
    assert str(pred) == "i_0 * 8 + i_1 * 2 + ax0 < 33 and j_1 < 1"
    check_equivalent(f, sch.func)
    _lowered_equivalent(f, sch.func)


def test_write_back_refused_when_threads_share_output_rows() -> None:
    """A fused-then-split tile writes a run of a flattened index: the hull under the thread
    loop spans elements of the neighbouring threads (thread 0 would copy C[0, 4], which
    thread 1 computes). TVM accepts it and races; loopir refuses."""
    f = matmul(3, 2, 5)
    sch = loopir.Schedule(f)
    c = sch.get_block("C")
    i, j, _ = sch.get_loops(c)
    f0, _ = sch.split(sch.fuse(i, j), [None, 4])
    sch.bind(f0, "threadIdx.x")
    cl = sch.cache_write(c, "C", "local")
    with pytest.raises(ScheduleError, match=r"reverse_compute_at: cannot tell which elements of "
                       r"'C_local' block 'C' writes in one iteration of loop 'i_j_fused_0' "
                       r"\(index .* is not linear in the inner loops\); under the thread-bound "
                       r"loop 'i_j_fused_0'"):
        sch.reverse_compute_at(cl, f0)
    # a serial position is fine: the iteration that produced an element copies it last
    g = loopir.Schedule(f)
    c = g.get_block("C")
    i, j, _ = g.get_loops(c)
    f0, _ = g.split(g.fuse(i, j), [None, 4])
    g.reverse_compute_at(g.cache_write(c, "C", "local"), f0)
    assert_equivalent(f, g.func)


# --- issue 20 item 2: regions clipped to the buffer -------------------------------------------


def _conv_vthread_shared() -> tuple[loopir.PrimFunc, loopir.Schedule]:
    f = conv2d_nhwc(1, 7, 5, 5, 8, 3, 3, 1)
    sch = loopir.Schedule(f)
    y = sch.get_block("Y")
    b, yy, xx, ff, ry, rx, rc = sch.get_loops(y)
    x0, x1 = sch.split(xx, [None, 3])  # 2 x 3 columns > 5: the vthread overhangs
    sch.bind(x0, "vthread.x")
    f0, f1 = sch.split(ff, [None, 4])
    sch.bind(f0, "blockIdx.x")
    sch.reorder(f0, x0, b, yy, x1, f1, ry, rx, rc)
    ps = sch.cache_read(y, "P", "shared")
    sch.compute_at(ps, b)
    return f, sch


def test_cache_region_clipped_to_buffer_shape(golden) -> None:
    """The shared copy of the padded input under the vthread covers columns [0, 7] (2
    vthreads x 3 + 2 halo), past P's 7: TVM's copy is 9x7x5, loopir's was 9x8x5 with a
    predicate masking the column that does not exist."""
    f, sch = _conv_vthread_shared()
    g = sch.func
    assert extents(g, "P_shared") == [2, 2, 1, 9, 7, 5]
    assert is_true(realize_of(g, "P_shared")[0].predicate)
    golden_pair(golden, "compute_at_clip_to_buffer", f, g)
    assert_equivalent(f, g)


def test_clip_interval_moves_only_provable_sides() -> None:
    x = Var("x")
    ana = rg.make_analyzer()
    ana.bind(x, loopir.ir.buffer.Range(IntImm(0), IntImm(4)))
    zero, seven = IntImm(0), IntImm(7)
    # both sides out: the whole domain
    iv = rg.clip_interval(rg.Interval(x - 4, x + 8), zero, seven, ana)
    assert (str(iv.lo), str(iv.hi)) == ("0", "7")
    # one side provably out, but moving it would make the extent symbolic: kept
    iv0 = rg.Interval(x, x + 7)
    assert rg.clip_interval(iv0, zero, seven, ana) is iv0
    # nothing out: unchanged
    iv1 = rg.Interval(x, x + 2)
    assert rg.clip_interval(iv1, zero, seven, ana) is iv1


def _gpu_20_runs(f: loopir.PrimFunc, sch_func: loopir.PrimFunc, tmp_path: Path) -> None:
    """Build for CUDA and compare 20 runs with a float64 reference on random data."""
    mod = loopir.build(sch_func, target="cuda", cache_dir=tmp_path)
    rng = np.random.default_rng(11)
    a, b = (rng.uniform(0.5, 1.5, tuple(int(d) for d in p.shape)).astype(np.float32)
            for p in f.params[:2])  # fmt: skip
    want = a.astype(np.float64) @ b.astype(np.float64)
    for _ in range(20):
        c = np.full(want.shape, np.nan, np.float32)
        mod(a, b, c)
        np.testing.assert_allclose(c, want, rtol=1e-5)


@pytest.mark.gpu
def test_write_back_on_the_gpu_20_runs(tmp_path: Path) -> None:
    """Issue 11 item 3 on the device: idle threads write nothing back (was NaN)."""
    for tiles in (dict(ti=1, tj=2, ii=1, jj=2, bk=1, vec=1),
                  dict(ti=1, tj=2, ii=2, jj=1, bk=1, vec=1)):  # fmt: skip
        _gpu_20_runs(dense_func(1, 1, 1), _tiled_gemm(1, 1, 1, **tiles).func, tmp_path)
    _gpu_20_runs(dense_func(33, 9, 17), _tiled_gemm(33, 9, 17, 4, 4, 2, 2, 4, 1).func, tmp_path)
