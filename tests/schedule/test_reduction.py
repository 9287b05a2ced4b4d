"""decompose_reduction: golden IR, init placement and predicates, equivalence, errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopir.errors import ScheduleError
from loopir.ir.stmt import SeqStmt
from loopir.schedule import cache, reduction
from loopir.schedule import loops as L
from tests.schedule.dm_util import (
    assert_equivalent,
    block_of,
    block_order,
    conv2d_nhwc,
    extents,
    golden_pair,
    is_true,
    loop_vars,
    loops_of,
    matmul,
    matmul_max,
    realize_of,
    tile,
)


def test_decompose_at_k_golden(golden) -> None:
    f = matmul(16, 8, 12)
    i, j, k = loop_vars(f, "C")
    g, name = reduction.decompose_reduction(f, "C", k)
    assert name == "C_init"
    assert block_order(g) == ["C_init", "C"]
    init = block_of(g, name)
    assert len(init.iter_vars) == 2 and init.reads == ()
    assert [w.buffer.name for w in init.writes] == ["C"]
    upd = block_of(g, "C")
    assert upd.init is None
    assert [r.buffer.name for r in upd.reads] == ["C", "A", "B"]
    # the init sits under i, j directly, before the k loop
    assert loop_vars(g, name) == [i, j]
    golden_pair(golden, "decompose_reduction_k", f, g)
    assert_equivalent(f, g)


def test_decompose_at_outer_loop_copies_spatial_loops(golden) -> None:
    f = matmul(16, 8, 12)
    i, j, k = loop_vars(f, "C")
    g, name = reduction.decompose_reduction(f, "C", i)
    assert extents(g, name) == [16, 12]
    assert [lp.loop_var.name for lp in loops_of(g, name)] == ["i_init", "j_init"]
    assert block_order(g) == ["C_init", "C"]
    golden_pair(golden, "decompose_reduction_i", f, g)
    assert_equivalent(f, g)


def test_decompose_inexact_tiles_keep_spatial_predicate() -> None:
    f = matmul(60, 50, 70)
    g, (ii, jj, kk) = tile(f, "C", [[None, 8], [None, 8], [None, 4]])
    g = L.reorder(g, [ii[0], jj[0], kk[0], ii[1], jj[1], kk[1]])
    g, name = reduction.decompose_reduction(g, "C", kk[0])
    pred = str(realize_of(g, name)[0].predicate)
    # the row/column guards stay, the reduction guard (k < 50) goes
    assert "60" in pred and "70" in pred and "50" not in pred
    assert "i_1_init" in pred
    assert extents(g, name) == [8, 9, 8, 8]
    assert_equivalent(f, g)


def test_decompose_exact_has_no_predicate() -> None:
    f = matmul(16, 8, 16)
    g, (ii, jj, kk) = tile(f, "C", [[None, 8], [None, 8], [None, 4]])
    g = L.reorder(g, [ii[0], jj[0], kk[0], ii[1], jj[1], kk[1]])
    g, name = reduction.decompose_reduction(g, "C", kk[0])
    assert is_true(realize_of(g, name)[0].predicate)
    assert_equivalent(f, g)


def test_decompose_max_and_conv() -> None:
    f = matmul_max(7, 5)
    i, k = loop_vars(f, "C")
    g, name = reduction.decompose_reduction(f, "C", k)
    assert "inf" in str(block_of(g, name).body)
    assert_equivalent(f, g)
    c = conv2d_nhwc()
    b, y, x, co, ry, rx, rc = loop_vars(c, "Y")
    h, name = reduction.decompose_reduction(c, "Y", ry)
    assert extents(h, name) == [1, 6, 5, 4]
    assert_equivalent(c, h)
    h2, _ = reduction.decompose_reduction(c, "Y", y)
    assert_equivalent(c, h2)


def test_decompose_name_is_unique() -> None:
    f = matmul(4, 3, 5)
    i, j, k = loop_vars(f, "C")
    g, _ = cache.cache_write(f, "C", "C", "local")
    g, n1 = reduction.decompose_reduction(g, "C", k)
    assert n1 == "C_init"
    # a second reduction whose natural init name is taken
    h = matmul(4, 3, 5)
    import attrs

    from loopir.schedule import tree

    blk = block_of(h, "C")
    h = tree.replace(h, blk, attrs.evolve(blk, name="C_init_x"))
    h, n2 = reduction.decompose_reduction(h, "C_init_x", loop_vars(h, "C_init_x")[2])
    assert n2 == "C_init_x_init"


@given(
    m=st.integers(1, 14), k=st.integers(1, 10), n=st.integers(1, 14),
    fi=st.integers(1, 6), fk=st.integers(1, 6), at=st.integers(0, 4),
)
def test_decompose_equivalence(m, k, n, fi, fk, at) -> None:
    f = matmul(m, k, n)
    g, (ii, jj, kk) = tile(f, "C", [[None, fi], None, [None, fk]])
    order = [ii[0], jj[0], kk[0], ii[1], kk[1]]
    g = L.reorder(g, order)
    g, name = reduction.decompose_reduction(g, "C", order[at] if at <= 2 else order[2])
    assert block_order(g) == ["C_init", "C"]
    assert_equivalent(f, g)


# --- errors ---------------------------------------------------------------------------------


def test_decompose_errors() -> None:
    f = matmul(8, 4, 6)
    i, j, k = loop_vars(f, "C")
    g, wb = cache.cache_write(f, "C", "C", "local")
    with pytest.raises(ScheduleError, match=r"decompose_reduction: block 'C_local' is not a "
                       r"reduction block \(it has no init\)"):
        reduction.decompose_reduction(g, wb, loop_vars(g, wb)[0])
    with pytest.raises(ScheduleError, match=r"loop 'ax0' does not enclose block 'C'"):
        reduction.decompose_reduction(g, "C", loop_vars(g, wb)[0])
    # a reduction loop above the position: the init would re-run per k
    h = L.reorder(f, [k, i, j])
    with pytest.raises(ScheduleError, match=r"loop 'k' above 'i' feeds a reduction iter var"):
        reduction.decompose_reduction(h, "C", i)
    reduction.decompose_reduction(h, "C", k)  # at (or above) the reduction loop is fine
    with pytest.raises(ScheduleError, match=r"no block named 'D'"):
        reduction.decompose_reduction(f, "D", k)


def test_decompose_init_placed_in_seq() -> None:
    f = matmul(8, 4, 6)
    i, j, k = loop_vars(f, "C")
    g, name = reduction.decompose_reduction(f, "C", k)
    j_loop = loops_of(g, "C")[1]
    assert isinstance(j_loop.body, SeqStmt) and len(j_loop.body.seq) == 2
