"""Loop primitives: golden before/after IR, structure and error cases with message checks."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import loopir
from loopir.errors import ScheduleError
from loopir.ir.stmt import BlockRealize, For, ForKind
from loopir.schedule import tree
from loopir.script import T
from tests.schedule.dm_util import assert_equivalent
from tests.schedule.workloads import elementwise, matmul, two_stage


def _golden_pair(golden, name: str, before: loopir.PrimFunc, after: loopir.PrimFunc) -> None:
    golden(f"schedule/{name}", f"# before\n{before.script()}\n\n# after\n{after.script()}")


def _expect(got: loopir.PrimFunc, want: loopir.PrimFunc) -> None:
    """``got`` is the expected script ``want`` (up to the function's name)."""
    loopir.assert_structural_equal(attrs.evolve(want, name=got.name), got)


# The workloads and the expected results as scripts, as TVM's schedule tests write them.


@T.prim_func
def elementwise_96x24(A: T.Buffer((96, 24), "float32"), B: T.Buffer((96, 24), "float32")):
    for i, j in T.grid(96, 24):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2) + T.float32(1)


@T.prim_func
def elementwise_96x24_split(A: T.Buffer((96, 24), "float32"), B: T.Buffer((96, 24), "float32")):
    for i_0, i_1, i_2, j in T.grid(3, 4, 8, 24):
        with T.block("B"):
            vi = T.axis.spatial(96, i_0 * 32 + i_1 * 8 + i_2)
            vj = T.axis.spatial(24, j)
            B[vi, vj] = A[vi, vj] * T.float32(2) + T.float32(1)


@T.prim_func
def elementwise_12x10_fused(A: T.Buffer((12, 10), "float32"), B: T.Buffer((12, 10), "float32")):
    for i_j_fused in T.serial(120):
        with T.block("B"):
            vi = T.axis.spatial(12, i_j_fused // 10)
            vj = T.axis.spatial(10, i_j_fused % 10)
            B[vi, vj] = A[vi, vj] * T.float32(2) + T.float32(1)


@T.prim_func
def matmul_kji(A: T.Buffer((4, 3), "float32"), B: T.Buffer((3, 5), "float32"), C: T.Buffer((4, 5), "float32")):
    for k, j, i in T.grid(3, 5, 4):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def _realize(func: loopir.PrimFunc, name: str) -> BlockRealize:
    hit = tree.find_block_realize(func, name)
    assert hit is not None
    return hit[0]


# --- split ------------------------------------------------------------------------------------


def test_split_exact() -> None:
    f = elementwise(96, 24)
    _expect(f, elementwise_96x24)
    sch = loopir.Schedule(f)
    i, _ = sch.get_loops(sch.get_block("B"))
    outs = sch.split(i, [None, 4, 8])
    assert [sch.get(o).extent.value for o in outs] == [3, 4, 8]
    # Exact: no predicate is added.
    assert tree.is_true(_realize(sch.func, "B").predicate)
    _expect(sch.func, elementwise_96x24_split)


def test_split_inexact_adds_predicate_golden(golden) -> None:
    f = elementwise(100, 24)
    sch = loopir.Schedule(f)
    i, _ = sch.get_loops(sch.get_block("B"))
    i0, i1 = sch.split(i, [None, 32])
    assert sch.get(i0).extent.value == 4 and sch.get(i1).extent.value == 32
    assert not tree.is_true(_realize(sch.func, "B").predicate)
    _golden_pair(golden, "split_inexact", f, sch.func)


def test_split_inner_none_and_conjoined_predicates(golden) -> None:
    f = elementwise(10, 7)
    sch = loopir.Schedule(f)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.split(i, [3, None])  # 3 * 4 = 12 > 10: guarded
    sch.split(j, [2, 4])  # 8 > 7: guarded, conjoined with the first predicate
    pred = _realize(sch.func, "B").predicate
    assert "and" in loopir.script(pred) or "&&" in loopir.script(pred)
    _golden_pair(golden, "split_two_predicates", f, sch.func)


def test_split_factor_equal_extent_and_unit() -> None:
    sch = loopir.Schedule(elementwise(8, 4))
    i, _ = sch.get_loops(sch.get_block("B"))
    a, b, c = sch.split(i, [1, 8, 1])
    assert [sch.get(x).extent.value for x in (a, b, c)] == [1, 8, 1]


def test_split_symbolic_extent() -> None:
    n = loopir.Var("n")
    sch = loopir.Schedule(elementwise(n, 4))
    i, _ = sch.get_loops(sch.get_block("B"))
    i0, i1 = sch.split(i, [None, 16])
    assert n in loopir.ir.collect_vars(sch.get(i0).extent)
    assert not tree.is_true(_realize(sch.func, "B").predicate)
    with pytest.raises(ScheduleError, match="smaller than the extent"):
        sch.split(i1, [2, 4])  # 8 < 16
    sch2 = loopir.Schedule(elementwise(n, 4))
    with pytest.raises(ScheduleError, match="is 16, not provably at least the extent n of loop i"):
        # A constant product cannot be proven to cover a symbolic extent.
        sch2.split(sch2.get_loops(sch2.get_block("B"))[0], [4, 4])


@pytest.mark.parametrize(
    ("factors", "message"),
    [
        ([None, None, 4], "at most one factor may be None"),
        ([2, 8], "product of factors \\[2, 8\\] is 16, smaller than the extent 100"),
        ([0, None], "positive ints or None, got 0"),
        ([-4, None], "positive ints or None, got -4"),
        ([2.5, None], "positive ints or None, got 2.5"),
        ([], "non-empty list"),
    ],
)
def test_split_errors(factors, message) -> None:
    sch = loopir.Schedule(elementwise(100, 24))
    i, _ = sch.get_loops(sch.get_block("B"))
    before = sch.func
    with pytest.raises(ScheduleError, match=message) as info:
        sch.split(i, factors)
    assert info.value.primitive == "split"
    assert sch.func is before and len(sch.trace) == 2  # unchanged, not recorded


def test_split_error_shows_marked_ir() -> None:
    sch = loopir.Schedule(elementwise(100, 24))
    i, _ = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError) as info:
        sch.split(i, [2, 8])
    text = str(info.value)
    assert text.startswith("split: the product of factors")
    assert "def main" in text and "^^^" in text


def test_split_bound_loop_refused() -> None:
    sch = loopir.Schedule(elementwise(64, 8))
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    # TVM refuses it too (HasAnnotationOrThreadBindingError): the binding fixes the launch shape.
    with pytest.raises(ScheduleError, match=r"bound to blockIdx.x; split needs an unbound loop \(as in TVM"):
        sch.split(i, [None, 8])


# --- fuse ---------------------------------------------------------------------------------------


def test_fuse() -> None:
    f = elementwise(12, 10)
    sch = loopir.Schedule(f)
    i, j = sch.get_loops(sch.get_block("B"))
    fused = sch.fuse(i, j)
    assert sch.get(fused).extent.value == 120
    assert sch.get(fused).loop_var.name == "i_j_fused"
    _expect(sch.func, elementwise_12x10_fused)


def test_fuse_three_and_single() -> None:
    from loopir import te

    A = te.placeholder((4, 3, 5), "float32", name="A")
    B = te.compute((4, 3, 5), lambda i, j, k: A[i, j, k] - 1.0, name="B")
    sch = loopir.Schedule(te.create_prim_func([A, B]))
    i, j, k = sch.get_loops(sch.get_block("B"))
    f = sch.fuse(i, j, k)
    assert sch.get(f).extent.value == 60
    bindings = [loopir.script(v) for v in _realize(sch.func, "B").iter_values]
    assert bindings == ["i_j_k_fused // 15", "i_j_k_fused // 5 % 3", "i_j_k_fused % 5"]
    sch2 = loopir.Schedule(elementwise(4, 4))
    (f1,) = [sch2.fuse(sch2.get_loops(sch2.get_block("B"))[1])]
    assert sch2.get(f1).extent.value == 4


def test_fuse_errors() -> None:
    sch = loopir.Schedule(matmul(4, 3, 5))
    i, j, k = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="loops i and k are not adjacent"):
        sch.fuse(i, k)
    with pytest.raises(ScheduleError, match="loops j and i are not adjacent"):
        sch.fuse(j, i)
    with pytest.raises(ScheduleError, match="loop i is given twice"):
        sch.fuse(i, i)
    sch.bind(j, "threadIdx.x")
    with pytest.raises(ScheduleError, match="loop j is bound to threadIdx.x; fuse needs an unbound loop"):
        sch.fuse(j, k)
    sch3 = loopir.Schedule(two_stage())
    b_i = sch3.get_loops(sch3.get_block("B"))[0]
    c_j = sch3.get_loops(sch3.get_block("C"))[1]
    with pytest.raises(ScheduleError, match="not adjacent"):
        sch3.fuse(b_i, c_j)


# --- reorder ------------------------------------------------------------------------------------


def test_reorder() -> None:
    f = matmul(4, 3, 5)
    sch = loopir.Schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(k, i)  # positions 0 and 2 swap; j stays in the middle
    loops = [sch.get(x).loop_var.name for x in sch.get_loops(sch.get_block("C"))]
    assert loops == ["k", "j", "i"]
    _expect(sch.func, matmul_kji)


def test_reorder_full_permutation_keeps_kinds() -> None:
    sch = loopir.Schedule(matmul(4, 3, 5))
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.unroll(k)
    sch.reorder(j, k, i)
    loops = [sch.get(x) for x in sch.get_loops(sch.get_block("C"))]
    assert [lp.loop_var.name for lp in loops] == ["j", "k", "i"]
    assert loops[1].kind is ForKind.UNROLLED


def test_reorder_errors() -> None:
    sch = loopir.Schedule(two_stage())
    b_i, b_j = sch.get_loops(sch.get_block("B"))
    c_i, _ = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="not in one chain") as info:
        sch.reorder(b_j, c_i)
    assert info.value.primitive == "reorder"
    with pytest.raises(ScheduleError, match="given twice"):
        sch.reorder(b_i, b_i)
    # A loop with two children cannot be crossed.
    sch2 = loopir.Schedule(_shared_outer_loop())
    i = sch2.get_loops(sch2.get_block("B"))[0]
    j = sch2.get_loops(sch2.get_block("B"))[1]
    with pytest.raises(ScheduleError, match="loop i reaches loop j through a SeqStmt.*single-branch chain"):
        sch2.reorder(j, i)


def _shared_outer_loop() -> loopir.PrimFunc:
    """``for i: (for j: B) ; (for j: C)``: loop i has two children."""
    import attrs

    from loopir.ir.functor import substitute
    from loopir.ir.stmt import seq

    f = two_stage(4, 3)
    b_i = tree.find_block_realize(f, "B")[1]
    c_i = tree.find_block_realize(f, "C")[1]
    b_loop = [a for a in b_i if isinstance(a, For)][0]
    c_loop = [a for a in c_i if isinstance(a, For)][0]
    c_inner = substitute(c_loop.body, {c_loop.loop_var: b_loop.loop_var})
    fused = attrs.evolve(b_loop, body=seq(b_loop.body, c_inner))
    g = tree.replace(f, b_loop, fused)
    return tree.replace(g, c_loop, None)  # c_loop is untouched by the first replace


# --- bind / annotate ----------------------------------------------------------------------------


def test_bind_golden(golden) -> None:
    f = elementwise(64, 32)
    sch = loopir.Schedule(f)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    assert sch.get(j).thread_tag == "threadIdx.x" and sch.get(j).kind is ForKind.THREAD_BINDING
    _golden_pair(golden, "bind", f, sch.func)


def test_annotate_golden(golden) -> None:
    f = elementwise(8, 4)
    sch = loopir.Schedule(f)
    i, j = sch.get_loops(sch.get_block("B"))
    i0, i1 = sch.split(i, [None, 2])
    sch.parallel(i0)
    sch.unroll(i1)
    sch.vectorize(j)
    kinds = [sch.get(x).kind for x in (i0, i1, j)]
    assert kinds == [ForKind.PARALLEL, ForKind.UNROLLED, ForKind.VECTORIZED]
    _golden_pair(golden, "annotate", f, sch.func)


@pytest.mark.parametrize("tag", ["threadIdx.w", "blockIdx", "warp.x", "", 3])
def test_bind_invalid_tag(tag) -> None:
    sch = loopir.Schedule(elementwise(8, 4))
    i, _ = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="invalid thread tag|must be None, a bool"):
        sch.bind(i, tag)


def test_bind_non_constant_extent() -> None:
    n = loopir.Var("n")
    sch = loopir.Schedule(elementwise(n, 4))
    i, _ = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="non-constant extent n to threadIdx.x"):
        sch.bind(i, "threadIdx.x")
    with pytest.raises(ScheduleError, match="non-constant extent n to vthread.y"):
        sch.bind(i, "vthread.y")
    # The grid may be symbolic.
    sch.bind(i, "blockIdx.x")
    assert sch.get(i).thread_tag == "blockIdx.x"


def test_bind_conflicting_extents_in_one_kernel() -> None:
    sch = loopir.Schedule(elementwise(64, 32))
    i, j = sch.get_loops(sch.get_block("B"))
    j0, j1 = sch.split(j, [None, 8])
    sch.bind(i, "blockIdx.x")
    sch.bind(j1, "threadIdx.x")
    with pytest.raises(ScheduleError, match="threadIdx.x is already bound with extent 8 .* extent 4"):
        sch.bind(j0, "threadIdx.x")
    sch.bind(j0, "threadIdx.y")
    # Same tag with the same extent elsewhere in the kernel is fine (cooperative fetch).


def test_bind_same_tag_different_kernels_ok() -> None:
    sch = loopir.Schedule(two_stage(16, 8))
    b_i, b_j = sch.get_loops(sch.get_block("B"))
    c_i, c_j = sch.get_loops(sch.get_block("C"))
    sch.bind(b_j, "threadIdx.x")
    c_j0, _ = sch.split(c_j, [None, 2])
    sch.bind(c_j0, "threadIdx.x")  # extent 4 vs 8, but in another kernel
    before = sch.func
    sch.bind(b_j, "threadIdx.x")  # already so: a no-op, as in TVM
    assert sch.func is before


def test_reduction_loops_cannot_run_in_parallel() -> None:
    sch = loopir.Schedule(matmul(4, 3, 5))
    i, j, k = sch.get_loops(sch.get_block("C"))
    for prim, args in (("bind", ("blockIdx.x",)), ("bind", ("vthread.x",)), ("vectorize", ()),
                       ("parallel", ())):  # fmt: skip
        with pytest.raises(ScheduleError, match="reduce iter var v_k") as info:
            getattr(sch, prim)(k, *args)
        assert info.value.primitive == prim
    sch.unroll(k)  # unrolling a reduction is fine
    sch.vectorize(j)
    # threadIdx.x/y/z combine a sum across threads (LowerCrossThreadReduction), as in TVM
    sch.bind(k, "threadIdx.y")
    sch.bind(k, "threadIdx.x")


def test_vectorize_non_constant_refused() -> None:
    n = loopir.Var("n")
    sch = loopir.Schedule(elementwise(4, n))
    _, j = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="cannot vectorize loop j with non-constant extent n"):
        sch.vectorize(j)


def test_annotate_again_replaces_the_kind() -> None:
    """Issue 20 item 4: as in TVM, vectorize/unroll/parallel/bind of an annotated or bound loop
    replaces its kind (they were refused); every kind runs the same sequential iterations."""
    func = elementwise(8, 4)
    sch = loopir.Schedule(func)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.parallel(i)
    sch.vectorize(i)
    assert sch.get(i).kind is ForKind.VECTORIZED
    sch.bind(i, "threadIdx.x")
    sch.bind(i, "threadIdx.y")  # rebinding replaces the tag
    assert (sch.get(i).kind, sch.get(i).thread_tag) == (ForKind.THREAD_BINDING, "threadIdx.y")
    sch.unroll(j)
    sch.bind(j, "threadIdx.x")
    sch.unroll(i)  # unroll drops the binding (TVM's Unroll clears thread_binding)
    assert (sch.get(i).kind, sch.get(i).thread_tag) == (ForKind.UNROLLED, None)
    assert_equivalent(func, sch.func)
    # The new kind's own checks still apply.
    sch2 = loopir.Schedule(matmul(4, 3, 5))
    k = sch2.get_loops(sch2.get_block("C"))[2]
    sch2.unroll(k)
    with pytest.raises(ScheduleError, match="reduce iter var v_k"):
        sch2.vectorize(k)
    sch3 = loopir.Schedule(elementwise(2048, 2))
    i3 = sch3.get_loops(sch3.get_block("B"))[0]
    sch3.bind(i3, "blockIdx.x")
    with pytest.raises(ScheduleError, match="limit of 1024 for threadIdx.x"):
        sch3.bind(i3, "threadIdx.x")


def test_split_and_fuse_annotated_loops_golden(golden) -> None:
    """Issue 20 item 4: split/fuse of vectorized, unrolled or parallel loops, as in TVM: the new
    loops are serial (re-annotate them as wanted)."""
    func = elementwise(12, 8)
    sch = loopir.Schedule(func)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.parallel(i)
    sch.vectorize(j)
    i0, i1 = sch.split(i, [None, 5])  # inexact: the predicate keeps it right
    sch.unroll(i1)
    f = sch.fuse(i1, j)
    assert [sch.get(x).kind for x in (i0, f)] == [ForKind.SERIAL, ForKind.SERIAL]
    assert_equivalent(func, sch.func)
    _golden_pair(golden, "split_fuse_annotated", func, sch.func)


def test_fuse_spatial_with_reduce_golden(golden) -> None:
    """Issue 20 item 4: TVM fuses a spatial loop with a reduction loop; the fused loop runs the
    same iterations in the same order, so each point's init still comes first."""
    func = matmul(6, 5, 4)
    sch = loopir.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    f = sch.fuse(j, k)
    assert sch.get(f).extent.value == 20
    bindings = [loopir.script(v) for v in _realize(sch.func, "C").iter_values]
    assert bindings == ["i", "j_k_fused // 5", "j_k_fused % 5"]
    f0, f1 = sch.split(f, [None, 3])  # order-preserving: fine
    sch.unroll(f1)
    _check_matmul(sch.func, 6, 5, 4)
    loopir.verify(loopir.lower(sch.func))
    _check_matmul(loopir.lower(sch.func), 6, 5, 4)
    _golden_pair(golden, "fuse_spatial_reduce", func, sch.func)
    # The fused loop is a reduction loop for the parallel kinds.
    with pytest.raises(ScheduleError, match="reduce iter var v_k"):
        sch.bind(f0, "threadIdx.x")
    # decompose_reduction below the fused loop re-initializes redundantly but correctly.
    sch.decompose_reduction(sch.get_block("C"), f0)
    _check_matmul(sch.func, 6, 5, 4)


def test_reorder_of_fused_spatial_reduce_loop_refused() -> None:
    """Reordering the parts of a fused spatial+reduce loop ran reduction steps before their
    point's init (12 of 24 outputs wrong when allowed); it is refused, and allowed again after
    decompose_reduction, where the order no longer matters."""
    func = matmul(6, 5, 4)
    sch = loopir.Schedule(func)
    _, j, k = sch.get_loops(sch.get_block("C"))
    f0, f1 = sch.split(sch.fuse(j, k), [None, 2])
    with pytest.raises(ScheduleError) as info:
        sch.reorder(f1, f0)
    assert "loop j_k_fused_0 feeds both spatial iter var v_j and reduce iter var v_k of block " \
        "'C'; reordering its chain could run a reduction step of a point before that point's " \
        "init" in str(info.value)
    assert info.value.primitive == "reorder" and info.value.node is sch.get(f0)
    sch.decompose_reduction(sch.get_block("C"), f0)
    sch.reorder(f1, f0)
    _check_matmul(sch.func, 6, 5, 4)


def _check_matmul(func: loopir.PrimFunc, m: int, k: int, n: int) -> None:
    """Run ``func`` (C = A @ B) on the CPU executor and compare with numpy."""
    rng = np.random.default_rng(7)
    a = rng.uniform(0.5, 1.5, (m, k)).astype("float32")
    b = rng.uniform(-1.5, 1.5, (k, n)).astype("float32")
    c = np.full((m, n), np.nan, "float32")
    loopir.build(func, target="cpu")(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_loop_function_api_is_pure() -> None:
    from loopir.schedule import loops

    f = elementwise(10, 4)
    i_loop = tree.find(f, lambda s: isinstance(s, For))
    assert i_loop is not None
    var = i_loop[0].loop_var
    g, (a, b) = loops.split(f, var, [None, 3])
    assert tree.find_loop(f, var) is not None  # f untouched
    assert tree.find_loop(g, var) is None and tree.find_loop(g, a) is not None


def test_bind_outer_joins_conflicting_kernels() -> None:
    """Binding blockIdx above two thread loops of different extents makes one bad kernel."""
    f = _shared_outer_loop()  # for i: (for j: B), (for j: C)
    sch = loopir.Schedule(f)
    b_j = sch.get_loops(sch.get_block("B"))[1]
    c_j = sch.get_loops(sch.get_block("C"))[1]
    sch.bind(b_j, "threadIdx.x")
    c_j0, _ = sch.split(c_j, [None, 2])
    sch.bind(c_j0, "threadIdx.x")  # separate kernels so far (no common bound ancestor)
    i = sch.get_loops(sch.get_block("B"))[0]
    with pytest.raises(ScheduleError, match="threadIdx.x is already bound with extent 3 .* puts both in one kernel"):
        sch.bind(i, "blockIdx.x")


def _offset_loop_func() -> loopir.PrimFunc:
    """``for i in range(3, 13): B[v] = A[v] + 1`` with a loop that does not start at 0."""
    from loopir.ir.buffer import Buffer, BufferRegion, Range
    from loopir.ir.expr import Var
    from loopir.ir.stmt import Block, BufferStore, IterKind, IterVar, PrimFunc

    a = Buffer("A", (13,), "float32")
    b = Buffer("B", (13,), "float32")
    i, v = Var("i"), Var("v")
    blk = Block(
        "B", [IterVar(v, Range(3, 10), IterKind.SPATIAL)],
        [BufferRegion(a, [Range(v, 1)])], [BufferRegion(b, [Range(v, 1)])],
        BufferStore(b, a[v] + 1.0, [v]),
    )  # fmt: skip
    loop = For(i, 3, 10, ForKind.SERIAL, BlockRealize([i], block=blk))
    root = Block("root", [], [], [], loop)
    return PrimFunc([a, b], BlockRealize([], block=root))


@pytest.mark.parametrize("factors", [[None, 4], [3, 4], [None, 10], [2, None, 3]])
def test_split_loop_with_nonzero_min(factors) -> None:
    from loopir.testing import check_equivalent

    f = _offset_loop_func()
    loopir.verify(f)
    sch = loopir.Schedule(f)
    (i,) = sch.get_loops(sch.get_block("B"))
    outs = sch.split(i, factors)
    assert all(int(sch.get(o).min.value) == 0 for o in outs)
    loopir.verify(sch.func)
    check_equivalent(f, sch.func)


def _offset_2d_func() -> loopir.PrimFunc:
    """``for i in range(2, 7): for j in range(1, 5): B[vi, vj] = A[vi, vj] * 3``."""
    from loopir.ir.buffer import Buffer, BufferRegion, Range
    from loopir.ir.expr import Var
    from loopir.ir.stmt import Block, BufferStore, IterKind, IterVar, PrimFunc

    a = Buffer("A", (7, 5), "float32")
    b = Buffer("B", (7, 5), "float32")
    i, j, vi, vj = Var("i"), Var("j"), Var("vi"), Var("vj")
    blk = Block(
        "B",
        [IterVar(vi, Range(2, 5), IterKind.SPATIAL), IterVar(vj, Range(1, 4), IterKind.SPATIAL)],
        [BufferRegion(a, [Range(vi, 1), Range(vj, 1)])],
        [BufferRegion(b, [Range(vi, 1), Range(vj, 1)])],
        BufferStore(b, a[vi, vj] * 3.0, [vi, vj]),
    )
    inner = For(j, 1, 4, ForKind.SERIAL, BlockRealize([i, j], block=blk))
    root = Block("root", [], [], [], For(i, 2, 5, ForKind.SERIAL, inner))
    return PrimFunc([a, b], BlockRealize([], block=root))


def test_fuse_and_reorder_loops_with_nonzero_min() -> None:
    from loopir.testing import check_equivalent

    f = _offset_2d_func()
    loopir.verify(f)
    sch = loopir.Schedule(f)
    i, j = sch.get_loops(sch.get_block("B"))
    fused = sch.fuse(i, j)
    assert int(sch.get(fused).extent.value) == 20 and int(sch.get(fused).min.value) == 0
    loopir.verify(sch.func)
    check_equivalent(f, sch.func)
    sch2 = loopir.Schedule(f)
    i, j = sch2.get_loops(sch2.get_block("B"))
    sch2.reorder(j, i)
    assert [int(sch2.get(x).min.value) for x in sch2.get_loops(sch2.get_block("B"))] == [1, 2]
    check_equivalent(f, sch2.func)


# --- CUDA launch limits at bind (issue 11 item 4) ----------------------------------------------


def test_bind_refuses_extent_over_thread_dimension_limit() -> None:
    """An extent-2048 loop bound to threadIdx.x used to pass bind, emit and nvcc."""
    sch = loopir.Schedule(elementwise(2048, 4))
    i, j = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError) as info:
        sch.bind(i, "threadIdx.x")
    text = str(info.value)
    assert info.value.primitive == "bind"
    assert text.startswith(
        "bind: cannot bind loop i to threadIdx.x: extent 2048 exceeds the CUDA thread block "
        "dimension limit of 1024 for threadIdx.x"
    )
    assert "^^^" in text and info.value.node is sch.get(i)
    sch.bind(i, "blockIdx.x")  # the grid takes it
    with pytest.raises(ScheduleError, match="limit of 64 for threadIdx.z"):
        sch2 = loopir.Schedule(elementwise(65, 4))
        sch2.bind(sch2.get_loops(sch2.get_block("B"))[0], "threadIdx.z")
    sch3 = loopir.Schedule(elementwise(70000, 2))
    with pytest.raises(ScheduleError, match="grid dimension limit of 65535 for blockIdx.y"):
        sch3.bind(sch3.get_loops(sch3.get_block("B"))[0], "blockIdx.y")


def test_bind_refuses_too_many_threads_per_block() -> None:
    sch = loopir.Schedule(elementwise(64, 32))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(j, "threadIdx.x")
    with pytest.raises(ScheduleError) as info:
        sch.bind(i, "threadIdx.y")  # 64 x 32 = 2048 threads in one block
    assert "the kernel would have 2048 threads per block (threadIdx.x=32 x threadIdx.y=64), " \
        "more than the CUDA limit of 1024" in str(info.value)
    assert info.value.node is sch.get(i)
    i0, i1 = sch.split(i, [None, 32])
    sch.bind(i1, "threadIdx.y")  # 32 x 32 = 1024: fine
    sch.bind(i0, "blockIdx.x")
    loopir.verify(sch.func)


def test_bind_symbolic_grid_extent_accepted() -> None:
    n = loopir.Var("n")
    sch = loopir.Schedule(elementwise(n, 4))
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.y")  # n is unknown until the launch
    loopir.verify(sch.func)
