"""The fragment layouts and the ldmatrix routing against the PTX ISA's tables, written out here
independently (groupID / threadID_in_group and bit tests, as the ISA states them)."""

from __future__ import annotations

import pytest

from loopir.arith.evaluate import evaluate
from loopir.ir.expr import Var
from loopir.tensor_intrin.layouts import (
    MMA_A,
    MMA_B,
    MMA_C,
    ROW_STATS,
    WARP_SIZE,
    FragmentLayout,
    MMA_B_16x8,
    MMA_C_16x8,
    accumulator_layout,
    ldmatrix_source,
)


def ptx_a(lane: int, i: int) -> tuple[int, int]:
    """PTX ISA, mma.m16n8k16 .f16/.bf16, fragment A: a0..a7."""
    group, tig = lane >> 2, lane % 4
    row = group if (i < 2 or 4 <= i < 6) else group + 8
    col = tig * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def ptx_b(lane: int, i: int) -> tuple[int, int]:
    """Fragment B: b0..b3 as (row = k, col = n)."""
    group, tig = lane >> 2, lane % 4
    return tig * 2 + (i & 1) + (8 if i >= 2 else 0), group


def ptx_c(lane: int, i: int) -> tuple[int, int]:
    """Fragment C/D (f32 or f16 accumulators): c0..c3."""
    group, tig = lane >> 2, lane % 4
    return group + (8 if i >= 2 else 0), tig * 2 + (i & 1)


def two_halves(single, lane: int, v: int) -> tuple[int, int]:
    """A 16x16 tile as two 16x8 fragments: locals 0-3 columns 0-7, 4-7 columns 8-15."""
    r, c = single(lane, v % 4)
    return r, c + 8 * (v // 4)


ORACLES = [
    (MMA_A, ptx_a),
    (MMA_B_16x8, ptx_b),
    (MMA_C_16x8, ptx_c),
    (MMA_B, lambda lane, v: (lambda rc: (rc[0], rc[1] + 8 * (v // 4)))(ptx_b(lane, v % 4))),
    (MMA_C, lambda lane, v: two_halves(ptx_c, lane, v)),
    # the statistics' copies: row groupID (+ 8), copy threadID_in_group
    (ROW_STATS, lambda lane, v: ((lane >> 2) + 8 * v, lane % 4)),
]


@pytest.mark.parametrize("layout,oracle", ORACLES, ids=lambda x: getattr(x, "name", ""))
def test_layout_is_the_ptx_fragment_and_a_bijection(layout: FragmentLayout, oracle) -> None:
    seen = set()
    for lane in range(WARP_SIZE):
        for v in range(layout.locals):
            rc = layout.to_row_col(lane, v)
            assert rc == oracle(lane, v), (layout.name, lane, v)
            assert layout.to_lane_local(*rc) == (lane, v)
            seen.add(rc)
    assert seen == {(r, c) for r in range(layout.rows) for c in range(layout.cols)}


@pytest.mark.parametrize("layout", [o[0] for o in ORACLES], ids=lambda x: x.name)
def test_layout_maps_build_expressions_with_the_same_values(layout: FragmentLayout) -> None:
    i, j = Var("i"), Var("j")
    lane_e, local_e = layout.to_lane_local(i, j)
    row_e, col_e = layout.to_row_col(i, j)
    for r in range(layout.rows):
        for c in range(layout.cols):
            env = {i: r, j: c}
            assert (evaluate(lane_e, env), evaluate(local_e, env)) == layout.to_lane_local(r, c)
    for lane in range(WARP_SIZE):
        for v in range(layout.locals):
            env = {i: lane, j: v}
            assert (evaluate(row_e, env), evaluate(col_e, env)) == layout.to_row_col(lane, v)


def test_accumulator_layout_by_width() -> None:
    assert accumulator_layout(8) is MMA_C_16x8 and accumulator_layout(16) is MMA_C
    with pytest.raises(ValueError, match="16 x 32"):
        accumulator_layout(32)


@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_routing_is_ptx(trans: bool) -> None:
    # PTX: lanes 8q..8q+7 give the row addresses of matrix q; without .trans lane l holds
    # row l/4, columns 2(l%4) and 2(l%4)+1 of each matrix; with .trans the transpose.
    for lane in range(WARP_SIZE):
        for q in range(4):
            for h in range(2):
                provider, col = ldmatrix_source(lane, q, h, trans)
                row = provider - 8 * q
                assert 0 <= row < 8 and 0 <= col < 8
                if trans:
                    assert (col, row) == (lane // 4, 2 * (lane % 4) + h)
                else:
                    assert (row, col) == (lane // 4, 2 * (lane % 4) + h)


def test_row_stats_are_where_the_rows_accumulator_elements_are() -> None:
    """Each lane holds a copy of the statistics of exactly the rows of its C elements, and the
    copy a block at column j reads, j % 8 // 2, is the copy of the lane holding (i, j)."""
    for lane in range(WARP_SIZE):
        rows = {MMA_C.to_row_col(lane, v)[0] for v in range(MMA_C.locals)}
        assert rows == {ROW_STATS.to_row_col(lane, v)[0] for v in range(ROW_STATS.locals)}
    for i in range(16):
        for j in range(16):
            lane, _ = MMA_C.to_lane_local(i, j)
            assert ROW_STATS.to_lane_local(i, j % 8 // 2)[0] == lane
