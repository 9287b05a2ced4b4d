"""blockize (issue 31): the docstring example as a golden, the list-of-blocks form, the
refusals naming the primitive, the trace (Python, JSON, replay), and the CPU executor against
the unscheduled function over hypothesis-drawn tilings (inexact ones included), before and after
lowering. TVM's IR for the same schedules: test_blockize_tvm.py.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopir
from loopir import te
from loopir.errors import ScheduleError
from loopir.schedule import BlockRV
from tests.schedule.dm_util import chain, check_schedule, golden_pair, matmul
from tests.schedule.test_blockize_tvm import ew, mm


def docstring_code(doc: str) -> list[str]:
    """The lines of the literal block after ``::`` in a docstring (dedented, stripped)."""
    block = doc.split("::", 1)[1].split("\n\n", 2)[1]
    return [line.strip() for line in block.splitlines() if line.strip()]


def assert_docstring_shows(doc: str, text: str) -> None:
    """Every line of the docstring's example is a line of ``text`` (a line ending in ``...``
    a prefix of one): the documented IR is the IR the primitive makes."""
    lines = [line.strip() for line in text.splitlines()]
    for want in docstring_code(doc):
        if want.endswith("..."):
            prefix = want[:-3].rstrip()
            assert any(line.startswith(prefix) for line in lines), want
        elif "..." in want:
            pattern = re.escape(want).replace(re.escape("..."), ".*")
            assert any(re.fullmatch(pattern, line) for line in lines), want
        else:
            assert want in lines, want


def tiled_ew(sch: loopir.Schedule) -> loopir.schedule.LoopRV:
    i, j = sch.get_loops(sch.get_block("B"))
    i0, i1 = sch.split(i, [None, 16])
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(i0, j0, i1, j1)
    return i1


def test_golden_docstring_example(golden) -> None:
    func = ew()
    sch = loopir.Schedule(func)
    i1 = tiled_ew(sch)
    before = sch.func
    block = sch.blockize(i1)
    golden_pair(golden, "blockize_spatial", before, sch.func)
    assert_docstring_shows(loopir.Schedule.blockize.__doc__ or "", sch.func.script())
    assert sch.get(block).name == "B_o"
    assert "b7 = sch.blockize(l4, preserve_unit_iters=True)" in str(sch.trace)
    check_schedule(func, sch)


def test_reduction_golden(golden) -> None:
    """The init moves to the outer block (a loop nest over C_init), the inner block reads C."""
    func = matmul(16, 8, 12)
    sch = loopir.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 4])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i0, j, k0, i1, k1)
    before = sch.func
    outer = sch.blockize(i1)
    golden_pair(golden, "blockize_reduction", before, sch.func)
    blk = sch.get(outer)
    assert blk.init is not None and "C_init" in loopir.script(blk.init)
    inner = sch.get(sch.get_block("C"))
    assert inner.init is None and [r.buffer.name for r in inner.reads] == ["C", "A", "B"]
    check_schedule(func, sch)


def test_list_of_blocks_form(golden) -> None:
    func = chain(16, 8)
    sch = loopir.Schedule(func)
    i, _ = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    before = sch.func
    outer = sch.blockize([sch.get_block("B"), sch.get_block("C")])
    golden_pair(golden, "blockize_blocks", before, sch.func)
    assert sch.get(outer).name == "outer_B_C_"
    assert "sch.blockize([b" in str(sch.trace)
    check_schedule(func, sch)


@pytest.mark.parametrize("pui", [True, False])
def test_preserve_unit_iters_is_recorded_and_replayed(pui: bool) -> None:
    func = mm(1, 32, 8)
    sch = loopir.Schedule(func)
    _, j, _ = sch.get_loops(sch.get_block("C"))
    sch.blockize(j, preserve_unit_iters=pui)
    assert f"preserve_unit_iters={pui}" in str(sch.trace)
    binding = sch.get(sch.get_block("C_o"))
    assert ("A[0, 0:8]" in loopir.script(binding)) is not pui
    check_schedule(func, sch)


def test_blockize_twice_nests_blocks() -> None:
    func = ew()
    sch = loopir.Schedule(func)
    i1 = tiled_ew(sch)
    i0, j0, _, _ = sch.get_loops(sch.get_block("B"))
    sch.blockize(i1)
    top = sch.blockize(j0)
    assert sch.get(top).name == "B_o_o"
    loopir.verify(sch.func)
    check_schedule(func, sch)


def _refuses(sch: loopir.Schedule, match: str, *args: object) -> ScheduleError:
    before, steps = sch.func, len(sch.trace)
    with pytest.raises(ScheduleError, match=match) as info:
        sch.blockize(*args)  # type: ignore[arg-type]
    assert info.value.primitive == "blockize"
    assert sch.func is before and len(sch.trace) == steps
    str(info.value)  # renders the IR
    return info.value


def test_refusals() -> None:
    sch = loopir.Schedule(chain(16, 8))
    i, _ = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    _refuses(sch, "holds 2 blocks", i)
    _refuses(sch, "LoopRV or a list of BlockRVs", sch.get_block("B"))
    _refuses(sch, "listed twice", [sch.get_block("B"), sch.get_block("B")])
    _refuses(sch, "root block", [sch.get_block("root")])
    _refuses(sch, "must be a bool", i, "yes")


def test_refuses_blocks_that_are_not_siblings() -> None:
    sch = loopir.Schedule(chain(16, 8))
    _refuses(sch, "cannot wrap the root block|consecutive|whole statements",
             [sch.get_block("B"), sch.get_block("root")])  # fmt: skip


def test_refuses_an_inexact_tile_naming_the_predicate() -> None:
    sch = loopir.Schedule(ew(18, 8))
    i, _ = sch.get_loops(sch.get_block("B"))
    _, i1 = sch.split(i, [None, 4])
    e = _refuses(sch, "predicate i_0 \\* 4 \\+ i_1 < 18 mixes loops", i1)
    assert "with T.block(\"B\"):\n" in str(e)


def test_refuses_an_inner_loop_depending_on_an_outer_one() -> None:
    """A triangular nest: the inner loop's extent uses the outer loop, which the new block
    could not see."""
    from loopir.ir import (
        Block,
        BlockRealize,
        Buffer,
        BufferRegion,
        BufferStore,
        For,
        IterVar,
        PrimFunc,
        Range,
        Var,
    )
    from loopir.testing.intrinsics import root

    A = Buffer("A", (8, 8))
    i, j, vi, vj = Var("i"), Var("j"), Var("vi"), Var("vj")
    blk = Block("B", [IterVar(vi, Range.from_extent(8), "spatial"), IterVar(vj, Range.from_extent(8), "spatial")],
                [], [BufferRegion(A, [Range(vi, 1), Range(vj, 1)])], BufferStore(A, 1.0, (vi, vj)))  # fmt: skip
    body = For(i, 0, 8, "serial", For(j, 0, i + 1, "serial", BlockRealize((i, j), True, blk)))
    func = PrimFunc((A,), root(body, [], [BufferRegion.full(A)]))
    sch = loopir.Schedule(func)
    _, jl = sch.get_loops(sch.get_block("B"))
    _refuses(sch, "range of loop j uses a loop outside", jl)


def _row_stage(reduce: bool) -> loopir.PrimFunc:
    """``B = A * 2`` then ``D[i] = B[i, 0] + 1`` (or ``D[i] = sum_j B[i, j]``), B computed at
    D's row loop: two sibling blocks under one loop."""
    A = te.placeholder((8, 4), "float32", name="A")
    B = te.compute((8, 4), lambda i, j: A[i, j] * 2.0, name="B")
    if reduce:
        r = te.reduce_axis(4, name="r")
        D = te.compute((8,), lambda i: te.sum(B[i, r], axis=r), name="D")
    else:
        D = te.compute((8,), lambda i: B[i, 0] + 1.0, name="D")
    sch = loopir.Schedule(te.create_prim_func([A, D]))
    sch.compute_at(sch.get_block("B"), sch.get_loops(sch.get_block("D"))[0])
    return sch.func


def test_blocks_with_different_outer_iterations_are_refused() -> None:
    sch = loopir.Schedule(_row_stage(reduce=False))
    _refuses(sch, "different outer iterations", [sch.get_block("B"), sch.get_block("D")])


def test_blocks_with_an_outer_reduction_are_refused() -> None:
    """TVM refuses (an ICHECK) a reduction whose reduce iter var lands in the outer block,
    and drops the init otherwise (a sum never initialized)."""
    sch = loopir.Schedule(_row_stage(reduce=True))
    _refuses(sch, "no outer reduction and moves no init", [sch.get_block("B"), sch.get_block("D")])


@given(
    m=st.integers(1, 12), n=st.integers(1, 12), k=st.integers(1, 12),
    ti=st.integers(1, 6), tk=st.integers(1, 6), at=st.integers(0, 4),
    pui=st.booleans(),
)  # fmt: skip
def test_blockize_any_tiling_computes_the_same(m, n, k, ti, tk, at, pui) -> None:
    """Any tiling (exact or not) of a matmul, blockized at any loop: refused with a
    ScheduleError naming a binding or the predicate, or the same outputs, lowered too."""
    func = mm(m, n, k)
    sch = loopir.Schedule(func)
    i, j, kk = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, ti])
    k0, k1 = sch.split(kk, [None, tk])
    sch.reorder(i0, j, k0, i1, k1)
    loops = sch.get_loops(sch.get_block("C"))
    exact = m % ti == 0 and k % tk == 0
    try:
        sch.blockize(loops[at], preserve_unit_iters=pui)
    except ScheduleError as e:
        # only an inexact tile (a predicate split by the blockized loop) is refused
        assert not exact, e
        assert "predicate" in e.message
        return
    loopir.verify(sch.func)
    check_schedule(func, sch)


@given(m=st.integers(1, 10), n=st.integers(1, 10), t=st.integers(1, 5), at=st.integers(0, 3))
def test_blockize_list_form_any_tiling(m, n, t, at) -> None:
    func = chain(m, n)
    sch = loopir.Schedule(func)
    i, j = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [None, t])
    loops = [i, j0, j1]
    anchor = loops[min(at, 2)]
    sch.compute_at(sch.get_block("B"), anchor)
    try:
        sch.blockize([sch.get_block("B"), sch.get_block("C")])
    except ScheduleError as e:
        assert n % t != 0 and "predicate" in e.message, e
        return
    check_schedule(func, sch)


def test_handles_survive() -> None:
    """The inner block keeps its name: its handle stays valid; the loops moved inside are
    the inner block's loops now (get_loops stops at the enclosing block)."""
    sch = loopir.Schedule(ew())
    b = sch.get_block("B")
    i1 = tiled_ew(sch)
    sch.blockize(i1)
    assert sch.get(b).name == "B"
    assert [sch.get(lp).loop_var.name for lp in sch.get_loops(b)] == ["i_1", "j_1"]
    assert isinstance(sch.get_block("B_o"), BlockRV)


def test_init_keeps_only_the_spatial_part_of_the_predicate() -> None:
    """Regression (hypothesis, m=n=k=1, tk=2, blockize at the top): the inner predicate
    ``k_1 < 1`` is over a reduce loop that the init's loop nest does not copy; the init block
    had it anyway (undefined k_1, as TVM's GenerateOuterInit would)."""
    func = mm(1, 1, 1)
    sch = loopir.Schedule(func)
    i, j, kk = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 1])
    k0, k1 = sch.split(kk, [None, 2])
    sch.reorder(i0, j, k0, i1, k1)
    sch.blockize(sch.get_loops(sch.get_block("C"))[0])
    loopir.verify(sch.func)
    check_schedule(func, sch)


def test_init_refuses_a_loop_that_repeats_the_reduction() -> None:
    """A loop of the subtree that feeds no binding repeats the whole reduction; the original
    initializes at every repetition, an init hoisted to the outer block only once."""
    from loopir.ir import For, ForKind, Var

    func = mm(4, 4, 4)
    realize, _ = loopir.schedule.tree.find_block_realize(func, "C")
    looped = loopir.schedule.tree.replace(func, realize, For(Var("r"), 0, 2, ForKind.SERIAL, realize))
    sch = loopir.Schedule(looped)
    _refuses(sch, "repeats the reduction", sch.get_loops(sch.get_block("C"))[0])


def test_init_refuses_a_reduction_tile_that_does_not_start_the_reduction() -> None:
    """After loop_partition of the reduce loop, the second partition never initializes (its
    reduce iter var is never at the domain's minimum); blockized, its init would."""
    func = mm(4, 4, 10)
    sch = loopir.Schedule(func)
    _, _, k = sch.get_loops(sch.get_block("C"))
    sch.loop_partition(k, [3, None])
    second = sch.get_loops(sch.get_block("C_k1"))[-1]
    _refuses(sch, "does not start at the minimum", second)
    first = sch.get_loops(sch.get_block("C_k0"))[-1]
    sch.blockize(first)
    check_schedule(func, sch)


# --------------------------------------------------------------------------------------------
# Other primitives on blockized functions (schedule fuzzer findings)
# --------------------------------------------------------------------------------------------


def test_bind_refuses_a_loop_inside_the_block_under_the_same_tag() -> None:
    """Fuzzer seed 190: the outer block is bound to a blockIdx.x loop ``i``; binding a loop
    inside it to blockIdx.x too makes one index of both, and the inner block depends on ``i``
    through the outer block's binding (the check looked at the inner block's bindings only,
    and lowering then computed the diagonal)."""
    func = mm(3, 3, 3)
    sch = loopir.Schedule(func)
    i, j, _ = sch.get_loops(sch.get_block("C"))
    sch.blockize(j)
    sch.bind(i, "blockIdx.x")
    with pytest.raises(ScheduleError, match="depends on the outer one") as info:
        sch.bind(sch.get_loops(sch.get_block("C"))[0], "blockIdx.x")
    assert info.value.primitive == "bind"
    check_schedule(func, sch)


def test_dependences_of_a_block_that_is_the_whole_root_body() -> None:
    """Fuzzer seed 178: blockize at the outermost loop makes the new block the root block's
    whole body; get_consumers / get_producers looked for it among the blocks *below* it."""
    sch = loopir.Schedule(chain(4, 4))
    sch.blockize([sch.get_block("B"), sch.get_block("C")])
    i, _ = sch.get_loops(sch.get_block("D"))
    top = sch.blockize(i)
    assert [sch.get(b).name for b in sch.get_producers(top)] == ["outer_B_C_"]
    assert [sch.get(b).name for b in sch.get_consumers(sch.get_block("outer_B_C_"))] == ["D_o"]
    only = loopir.Schedule(ew(4, 4))
    whole = only.blockize(only.get_loops(only.get_block("B"))[0])
    assert only.get_consumers(whole) == [] and only.get_producers(whole) == []


def test_compute_inline_into_a_consumer_inside_a_blockized_block() -> None:
    """Fuzzer seeds 147 / 228: the consumer of the inlined block is the inner block of a
    blockized one; the outer block (which lists the buffer in its reads) was rewritten with
    the inner one inside, then the old inner block was not found to be replaced."""
    from tests.schedule.dm_util import matmul_bias_relu

    func = matmul_bias_relu(7, 8, 8)
    sch = loopir.Schedule(func)
    i, j = sch.get_loops(sch.get_block("E"))
    sch.blockize(sch.fuse(i, j))
    sch.compute_inline(sch.get_block("D"))
    text = sch.func.script()
    assert "D[" not in text
    assert "T.reads(C[0:7, 0:8], bias[0:8])" in text  # the outer block's regions follow
    check_schedule(func, sch)


def test_loop_partition_copies_buffers_allocated_in_a_nested_block() -> None:
    """Fuzzer seed 686: reindex of a blockized inner block allocates the copy in the outer
    block; loop_partition of a loop around the outer block copied the allocation itself
    (one buffer defined twice)."""
    func = chain(6, 5)
    sch = loopir.Schedule(func)
    i, _ = sch.get_loops(sch.get_block("B"))
    outer = sch.blockize(i)
    ci, cj = sch.get_loops(sch.get_block("C"))
    sch.compute_at(outer, ci)
    sch.reindex(sch.get_block("B"), ("read", 0))
    assert "A_reindex = T.alloc_buffer" in loopir.script(sch.get(outer))
    sch.loop_partition(ci, [2, None])
    loopir.verify(sch.func)
    check_schedule(func, sch)


@pytest.mark.parametrize("at", [1, 2])
def test_refuses_to_move_the_init_of_a_cross_thread_reduction(at: int) -> None:
    """Fuzzer seed 740: a reduction bound to threadIdx keeps its init (LowerCrossThreadReduction
    writes it per thread, as for decompose_reduction); moved to the outer block, lowering
    failed (a thread-bound reduction block without init)."""
    func = mm(5, 3, 4)
    sch = loopir.Schedule(func)
    _, _, k = sch.get_loops(sch.get_block("C"))
    sch.bind(k, "threadIdx.y")
    _refuses(sch, "cross-thread reduction", sch.get_loops(sch.get_block("C"))[at])
    check_schedule(func, sch)
