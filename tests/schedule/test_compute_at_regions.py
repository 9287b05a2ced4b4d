"""Region analysis (loopir.schedule.region): regions under a loop, relaxation by scope."""

from __future__ import annotations

import pytest

from loopir.errors import ScheduleError
from loopir.ir.expr import IntImm
from loopir.ir.stmt import For, ForKind
from loopir.schedule import cache
from loopir.schedule import loops as L
from loopir.schedule import region as rg
from tests.schedule.dm_util import loop_vars, matmul, tile


def _extents(regions) -> list[list[int]]:
    out = []
    for reg in regions:
        row = []
        for r in reg.region:
            assert isinstance(r.extent, IntImm), f"non-constant extent {r.extent}"
            row.append(r.extent.value)
        out.append(row)
    return out


def _dense_func(m: int = 130, k: int = 35, n: int = 260):
    f = matmul(m, k, n)
    g, (ii, jj, kk) = tile(f, "C", [[None, 1, 8, 8, 2], [None, 2, 32, 1, 2], [None, 1, 4]])
    i0, i1, i2, i3, i4 = ii
    j0, j1, j2, j3, j4 = jj
    k0, k1, k2 = kk
    g = L.reorder(g, [i0, j0, i1, j1, i2, j2, k0, k1, i3, j3, k2, i4, j4])
    g, bx = L.fuse(g, [i0, j0])
    g = L.bind(g, bx, "blockIdx.x")
    g, vx = L.fuse(g, [i1, j1])
    g = L.bind(g, vx, "vthread.x")
    g, tx = L.fuse(g, [i2, j2])
    g = L.bind(g, tx, "threadIdx.x")
    return g, bx, vx, tx, k0


def test_region_under_loop_by_scope() -> None:
    g, bx, vx, tx, k0 = _dense_func()
    # global buffers A, B: no thread-bound loop is relaxed (issue 28, TVM 0.27), nor the
    # serial k0: the 16 rows x 2 columns of one virtual thread, k0's 4 reduction columns
    regs = rg.region_under_loop(g, "C", k0, "reads")
    assert [r.buffer.name for r in regs] == ["A", "B"]
    assert _extents(regs) == [[16, 4], [4, 2]]
    # shared copies: blockIdx stays fixed -> the 128x4 and 4x128 block tiles
    g2, _ = cache.cache_read(g, "C", "A", "shared")
    g2, _ = cache.cache_read(g2, "C", "B", "shared")
    regs = rg.region_under_loop(g2, "C", k0, "reads")
    assert _extents(regs) == [[128, 4], [4, 128]]
    assert "4" in str(regs[0].region[1].min) and "k_0" in str(regs[0].region[1].min)
    # local: nothing outside relaxed -> 16 x 2 per (virtual) thread
    g3, _ = cache.cache_write(g, "C", "C", "local")
    regs = rg.region_under_loop(g3, "C", tx, "writes")
    assert _extents(regs) == [[16, 2]]
    regs = rg.region_under_loop(g3, "C", vx, "writes")
    assert _extents(regs) == [[128, 64]]


def test_relaxed_by_scope_table() -> None:
    from loopir.ir.expr import Var
    from loopir.ir.stmt import Evaluate

    body = Evaluate(IntImm(0))

    def lp(kind: ForKind, tag: str | None = None) -> For:
        return For(Var("x"), 0, 4, kind, body, tag)

    # (global, shared, local): global relaxes no thread loop (issue 28, TVM 0.27)
    table = {
        "blockIdx.x": (False, False, False),
        "threadIdx.y": (False, True, False),
        "vthread.x": (False, True, False),
    }
    for tag, expect in table.items():
        loop = lp(ForKind.THREAD_BINDING, tag)
        assert tuple(rg.relaxed_by_scope(loop, s) for s in ("global", "shared", "local")) == expect
    for kind in (ForKind.SERIAL, ForKind.PARALLEL, ForKind.UNROLLED):
        assert not any(rg.relaxed_by_scope(lp(kind), s) for s in ("global", "shared", "local"))


def test_union_and_merge_regions() -> None:
    f = matmul(8, 4, 6)
    i, j, k = loop_vars(f, "C")
    ana = rg.make_analyzer()
    a = [rg.Interval(i, i + 2)]
    b = [rg.Interval(i + 1, i + 5)]
    u = rg.union_intervals(a, b, ana)
    assert str(u[0].lo) == "i" and "5" in str(u[0].hi)
    buf = f.params[0]
    merged = rg.merge_regions(
        [rg.point_region(buf, [i, k]), rg.point_region(buf, [i + 1, k])], ana
    )
    assert len(merged) == 1
    assert merged[0].region[0].extent.value == 2 and merged[0].region[1].extent.value == 1


def test_region_under_loop_errors() -> None:
    f = matmul(8, 4, 6)
    g, wb = cache.cache_write(f, "C", "C", "local")
    with pytest.raises(ScheduleError, match=r"loop 'ax0' does not enclose block 'C'"):
        rg.region_under_loop(g, "C", loop_vars(g, wb)[0])
    with pytest.raises(ScheduleError, match=r"which must be 'reads' or 'writes'"):
        rg.region_under_loop(g, "C", loop_vars(g, "C")[0], "both")
