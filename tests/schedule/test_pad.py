"""pad (pad_einsum): golden IR, padded shapes and identities, equivalence, refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopir import te
from loopir.errors import ScheduleError
from loopir.ir.stmt import IfThenElse
from loopir.schedule import pad as P
from loopir.schedule import reduction
from tests.schedule.dm_util import (
    assert_equivalent,
    block_of,
    block_order,
    chain,
    extents,
    golden_pair,
    loop_vars,
    matmul,
    matmul_bias_relu,
    matmul_max,
    tile,
)


def _shapes(func) -> dict[str, list[int]]:
    return {b.name: [int(s.value) for s in b.shape] for b in func.body.block.alloc_buffers}


def test_pad_matmul_golden(golden) -> None:
    f = matmul(127, 60, 50)
    g = P.pad(f, "C", [32, 32, 8])
    assert _shapes(g) == {"A_pad": [128, 64], "B_pad": [64, 64], "C_pad": [128, 64]}
    assert block_order(g) == ["A_pad", "B_pad", "C", "C_pad"]
    assert extents(g, "C") == [128, 64, 64]
    assert extents(g, "C_pad") == [127, 50]  # copied back at the real extent
    c = block_of(g, "C")
    assert [iv.dom.extent.value for iv in c.iter_vars] == [128, 64, 64]
    assert [r.buffer.name for r in c.reads] == ["A_pad", "B_pad"]
    assert [w.buffer.name for w in c.writes] == ["C_pad"]
    fill = block_of(g, "A_pad").body
    assert isinstance(fill, IfThenElse) and "0" in str(fill.else_case)
    golden_pair(golden, "pad_matmul", f, g)
    assert_equivalent(f, g)


def test_pad_only_grown_buffers() -> None:
    f = matmul(128, 60, 64)
    g = P.pad(f, "C", [32, 32, 8])
    # only k grows: A and B get padded copies, the output is untouched
    assert _shapes(g) == {"A_pad": [128, 64], "B_pad": [64, 64]}
    assert block_order(g) == ["A_pad", "B_pad", "C"]
    assert [w.buffer.name for w in block_of(g, "C").writes] == ["C"]
    assert_equivalent(f, g)
    h = P.pad(matmul(127, 64, 64), "C", [32, 32, 8])
    assert _shapes(h) == {"A_pad": [128, 64], "C_pad": [128, 64]}
    assert_equivalent(matmul(127, 64, 64), h)


def test_pad_noop_when_divisible() -> None:
    f = matmul(64, 16, 32)
    assert P.pad(f, "C", [32, 32, 8]) is f
    assert P.pad(f, "C", [1, 1, 1]) is f


def test_pad_max_uses_identity() -> None:
    f = matmul_max(13, 7)
    g = P.pad(f, "C", [4, 4])
    fill = block_of(g, "A_pad").body
    assert isinstance(fill, IfThenElse) and "inf" in str(fill.else_case)
    assert_equivalent(f, g)  # data has both signs: a 0 pad would be wrong for max


def test_pad_then_schedule() -> None:
    f = matmul(30, 13, 20)
    g = P.pad(f, "C", [8, 8, 4])
    g, (ii, jj, kk) = tile(g, "C", [[None, 8], [None, 8], [None, 4]])
    g, _ = reduction.decompose_reduction(g, "C", kk[0])
    assert_equivalent(f, g)


@given(
    m=st.integers(1, 20), k=st.integers(1, 12), n=st.integers(1, 20),
    fm=st.integers(1, 8), fk=st.integers(1, 8), fn=st.integers(1, 8),
)
def test_pad_equivalence(m, k, n, fm, fk, fn) -> None:
    f = matmul(m, k, n)
    g = P.pad(f, "C", [fm, fn, fk])
    for name, shape in _shapes(g).items():
        assert all(s % fac == 0 for s, fac in zip(shape, {"A_pad": [fm, fk], "B_pad": [fk, fn],
                                                           "C_pad": [fm, fn]}[name]))
    assert_equivalent(f, g)


# --- refusals -------------------------------------------------------------------------------


def test_pad_refuses_non_einsum() -> None:
    assert_equivalent(chain(4, 3), P.pad(chain(4, 3), "B", [2, 2]))  # spatial: padded since issue 20
    f = matmul(10, 6, 8)
    with pytest.raises(ScheduleError, match=r"block 'C' has 3 iter vars \(v_i, v_j, v_k\) but 2 "
                       r"factors were given"):
        P.pad(f, "C", [4, 4])
    with pytest.raises(ScheduleError, match=r"padding factor 0 is not a positive int"):
        P.pad(f, "C", [4, 0, 4])
    with pytest.raises(ScheduleError, match=r"factors must be a list of positive ints"):
        P.pad(f, "C", 4)  # type: ignore[arg-type]
    # summand that is not a product of loads
    A = te.placeholder((6, 5), "float32", name="A")
    B = te.placeholder((6, 5), "float32", name="B")
    r = te.reduce_axis(5, name="k")
    S = te.compute((6,), lambda i: te.sum(A[i, r] + B[i, r], axis=r), name="S")
    with pytest.raises(ScheduleError, match=r"the summand .* is not a product of loads"):
        P.pad(te.create_prim_func([A, B, S]), "S", [4, 4])
    # a shifted index is not an einsum access
    X = te.placeholder((8, 5), "float32", name="X")
    r2 = te.reduce_axis(5, name="k")
    T = te.compute((6,), lambda i: te.sum(X[i + 2, r2], axis=r2), name="T")
    with pytest.raises(ScheduleError, match=r"is not an einsum: X is indexed by"):
        P.pad(te.create_prim_func([X, T]), "T", [4, 4])
    # a reduction var that no load uses: padding it would add terms
    Y = te.placeholder((6,), "float32", name="Y")
    r3 = te.reduce_axis(5, name="k")
    U = te.compute((6,), lambda i: te.sum(Y[i] * 2.0, axis=r3), name="U")
    with pytest.raises(ScheduleError, match=r"reduction iter var v_k indexes none of the loads"):
        P.pad(te.create_prim_func([Y, U]), "U", [1, 4])


def test_pad_tiled_block_keeps_the_split_loops() -> None:
    """As TVM's pad_einsum (issue 29): the split loops of i (10 = 3 x 4, inexact) stay with
    their predicate, only i's domain grows; j and k, bound one to one, grow their loops."""
    f = matmul(10, 6, 7)
    g, _ = tile(f, "C", [[None, 4], None, None])
    h = P.pad(g, "C", [4, 4, 4])
    assert extents(h, "C") == [3, 4, 8, 8]
    assert [iv.dom.extent.value for iv in block_of(h, "C").iter_vars] == [12, 8, 8]
    assert _shapes(h) == {"A_pad": [12, 8], "B_pad": [8, 8], "C_pad": [12, 8]}
    assert_equivalent(f, h)
    i, j, k = loop_vars(f, "C")
    with pytest.raises(ScheduleError, match=r"no block named 'Q'"):
        P.pad(f, "Q", [4, 4, 4])


# --- spatial blocks (issue 20 item 4) ---------------------------------------------------------


def _cache_copy(m: int = 10, n: int = 6):
    import loopir

    func = matmul(m, 4, n)
    sch = loopir.Schedule(func)
    sch.cache_read(sch.get_block("C"), "A", "shared")
    return func, sch


def test_pad_spatial_cache_copy_golden(golden) -> None:
    """TVM pads a spatial block (a cache copy) too; it was refused as "not a reduction block".
    Real output points read only real input points; the padded ones are never written back."""
    import numpy as np

    import loopir

    func, sch = _cache_copy()
    before = sch.func
    sch.pad(sch.get_block("A_shared"), [4, 8])  # 10 x 4 -> 12 x 8
    shapes = _shapes(sch.func)
    assert shapes["A_shared_pad"] == [12, 8] and shapes["A_pad"] == [12, 8]
    assert_equivalent(func, sch.func)
    rng = np.random.default_rng(5)
    a = rng.uniform(-1.5, 1.5, (10, 4)).astype("float32")
    b = rng.uniform(-1.5, 1.5, (4, 6)).astype("float32")
    c = np.zeros((10, 6), "float32")
    loopir.build(sch.func, target="cpu")(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    golden_pair(golden, "pad_spatial_cache_copy", before, sch.func)


def test_pad_spatial_elementwise_any_expression_and_dtypes() -> None:
    A = te.placeholder((5, 3), "float32", name="A")
    N = te.placeholder((5, 3), "int32", name="N")
    B = te.compute((5, 3), lambda i, j: te.exp(A[i, j]) + N[i, j].astype("float32"), name="B")
    f = te.create_prim_func([A, N, B])
    g = P.pad(f, "B", [4, 2])
    assert _shapes(g)["N_pad"] == [8, 4]  # its zero fill is int32
    assert_equivalent(f, g)


def test_pad_spatial_refuses_integer_division_by_a_load() -> None:
    X = te.placeholder((5,), "int32", name="X")
    Y = te.placeholder((5,), "int32", name="Y")
    Z = te.compute((5,), lambda i: X[i] // Y[i], name="Z")
    with pytest.raises(ScheduleError, match=r"divides by the loaded value Y\[v_i\]; padding fills "
                       r"inputs with zeros, so a padded point would divide by zero"):
        P.pad(te.create_prim_func([X, Y, Z]), "Z", [4])


def test_pad_after_split_and_fuse() -> None:
    """Split i, fuse j and k: no loop is grown (each is split or fused), the domains and
    buffers are, and the result is right (the padded points are not visited)."""
    import loopir
    from loopir.testing import check_equivalent

    f = matmul(10, 5, 6)
    sch = loopir.Schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 4])
    sch.fuse(j, k)
    sch.pad(sch.get_block("C"), [8, 4, 4])
    assert extents(sch.func, "C") == [3, 4, 30]
    assert _shapes(sch.func) == {"A_pad": [16, 8], "B_pad": [8, 8], "C_pad": [16, 8]}
    check_equivalent(f, sch.func)


def test_pad_refuses_a_block_sharing_its_output() -> None:
    """C_init (decomposed at k) shares loops i and j with C's update: padded, its write-back
    would copy the whole of C_pad (zeros) over what the update accumulated in the rows
    before."""
    f = matmul(5, 3, 6)
    i, j, k = loop_vars(f, "C")
    g, _ = reduction.decompose_reduction(f, "C", k)
    with pytest.raises(ScheduleError, match=r"'C_init' is not the only writer of C \(block 'C'"):
        P.pad(g, "C_init", [4, 4])


def test_pad_refuses_a_padded_spatial_var_missing_from_the_output() -> None:
    """Regression (differential seeds 813, 1387): after reindex of C[0, j] (M = 1), C_reindex[v_j]
    no longer depends on the spatial v_i; padding v_i (1 -> 4) ran the update for four rows
    into one element, the padded rows re-running the init (6 of 7 outputs wrong)."""
    import loopir

    sch = loopir.Schedule(matmul_bias_relu(1, 7, 7))
    c = sch.get_block("C")
    sch.reindex(c, ("write", 0))
    with pytest.raises(ScheduleError, match=r"spatial iter var v_i does not index the output "
                       r"C_reindex"):
        sch.pad(c, [4, 3, 1])
    sch.pad(c, [1, 3, 1])  # v_i not padded: fine


def test_pad_of_a_mixed_precision_einsum_fills_inputs_in_their_own_dtype() -> None:
    """fp16 operands summed in fp32: the padded copies of A and B hold a float16 zero (the
    identity was the accumulator's float32 zero, which made the copy's store ill-typed and
    compute_inline of it fail on the Select of a float16 and a float32 branch)."""
    import loopir
    from loopir.ir.stmt import BufferStore
    from loopir.schedule import tree
    from tests.schedule.dm_util import check_schedule

    A = te.placeholder((6, 5), "float16", name="A")
    B = te.placeholder((5, 7), "float16", name="B")
    k = te.reduce_axis(5, name="k")
    C = te.compute((6, 7), lambda i, j: te.sum(A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k),
                   name="C")  # fmt: skip
    func = te.create_prim_func([A, B, C])
    sch = loopir.Schedule(func)
    sch.pad(sch.get_block("C"), [4, 4, 4])
    for s, _ in tree.walk(sch.func):
        if isinstance(s, BufferStore):
            assert s.value.dtype == s.buffer.dtype, s
    sch.compute_inline(sch.get_block("A_pad"))
    sch.compute_inline(sch.get_block("B_pad"))
    check_schedule(func, sch)
