"""Handles and schedule state: lookup, stale and foreign handles, copy, atomic failures."""

from __future__ import annotations

import pytest

import loopir
from loopir.errors import ScheduleError
from loopir.ir.stmt import Block, For
from loopir.schedule import BlockRV, LoopRV
from tests.schedule.workloads import elementwise, matmul, two_stage


def test_schedule_holds_the_function() -> None:
    f = matmul()
    sch = loopir.Schedule(f)
    assert sch.func is f  # immutable IR: holding it is a copy
    blk = sch.get_block("C")
    node = sch.get(blk)
    assert isinstance(node, Block) and node.name == "C"
    i, j, k = sch.get_loops(blk)
    assert [sch.get(x).loop_var.name for x in (i, j, k)] == ["i", "j", "k"]
    assert all(isinstance(sch.get(x), For) for x in (i, j, k))
    sch.split(i, [None, 4])
    assert f.body is not sch.func.body and loopir.structural_equal(f, matmul())


def test_get_block_unknown_name() -> None:
    sch = loopir.Schedule(two_stage())
    with pytest.raises(ScheduleError, match=r"get_block: no block named 'D'; blocks: \['root', 'B', 'C'\]"):
        sch.get_block("D")
    with pytest.raises(ScheduleError, match="block name must be a str"):
        sch.get_block(3)


def test_get_child_blocks() -> None:
    sch = loopir.Schedule(two_stage())
    root = sch.get_block("root")
    kids = sch.get_child_blocks(root)
    assert [sch.get(b).name for b in kids] == ["B", "C"]
    (b,) = sch.get_child_blocks(sch.get_loops(sch.get_block("C"))[0])
    assert sch.get(b).name == "C"
    assert sch.get_child_blocks(sch.get_block("C")) == []


def test_get_loops_stops_at_enclosing_block() -> None:
    sch = loopir.Schedule(two_stage())
    assert sch.get_loops(sch.get_block("root")) == []
    assert len(sch.get_loops(sch.get_block("B"))) == 2


def test_stale_loop_after_fuse_and_split() -> None:
    sch = loopir.Schedule(matmul())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.fuse(i, j)
    with pytest.raises(ScheduleError, match=r"handle LoopRV\(i\) is stale: its loop was removed by instruction 2 \(fuse\)"):
        sch.get(i)
    with pytest.raises(ScheduleError, match=r"split: handle LoopRV\(j\) is stale"):
        sch.split(j, [None, 2])
    k0, _ = sch.split(k, [None, 2])
    with pytest.raises(ScheduleError, match=r"instruction 3 \(split\)"):
        sch.unroll(k)
    assert sch.get(k0).extent.value == 4


def test_foreign_handle() -> None:
    a = loopir.Schedule(matmul())
    b = loopir.Schedule(matmul())
    blk = a.get_block("C")
    with pytest.raises(ScheduleError, match=r"get_loops: handle BlockRV\(C\) does not belong to this schedule"):
        b.get_loops(blk)
    with pytest.raises(ScheduleError, match="does not belong to this schedule"):
        b.get(LoopRV())


def test_wrong_handle_type() -> None:
    sch = loopir.Schedule(matmul())
    blk = sch.get_block("C")
    with pytest.raises(ScheduleError, match="split: argument loop must be a LoopRV, got BlockRV"):
        sch.split(blk, [None, 2])
    i = sch.get_loops(blk)[0]
    with pytest.raises(ScheduleError, match="get_loops: argument block must be a BlockRV, got LoopRV"):
        sch.get_loops(i)
    with pytest.raises(ScheduleError, match="fuse: argument loops must be a LoopRV, got str"):
        sch.fuse(i, "j")
    with pytest.raises(ScheduleError, match="get: expected a BlockRV or LoopRV, got int"):
        sch.get(3)
    with pytest.raises(ScheduleError, match="split: argument loop must be a LoopRV, got NoneType"):
        sch.split(None, [None, 2])
    with pytest.raises(ScheduleError, match="split: bad arguments"):
        sch.split(i)
    with pytest.raises(ScheduleError, match="argument factors=.* must be None, a bool"):
        sch.split(i, [None, object()])


def test_failed_primitive_leaves_schedule_unchanged() -> None:
    sch = loopir.Schedule(matmul())
    i, j, k = sch.get_loops(sch.get_block("C"))
    func, n = sch.func, len(sch.trace)
    for bad in (lambda: sch.split(i, [2, 2]), lambda: sch.fuse(i, k),
                lambda: sch.bind(k, "blockIdx.y"), lambda: sch.reorder(i, i)):  # fmt: skip
        with pytest.raises(ScheduleError):
            bad()
        assert sch.func is func and len(sch.trace) == n
    # Handles are still usable afterwards.
    sch.split(i, [None, 2])


def test_copy_forks_with_trace() -> None:
    sch = loopir.Schedule(elementwise(16, 8))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.split(i, [None, 4])
    fork = sch.copy()
    assert str(fork.trace) == str(sch.trace) and fork.func is sch.func
    fork.vectorize(j)  # handles of the original work in the fork
    assert len(fork.trace) == len(sch.trace) + 1
    assert sch.get(j).kind.value == "serial" and fork.get(j).kind.value == "vectorized"
    sch.fuse(*sch.get_loops(sch.get_block("B"))[1:])
    with pytest.raises(ScheduleError, match="stale"):
        sch.get(j)
    assert fork.get(j).loop_var.name == "j"  # the fork is unaffected


def test_schedule_needs_a_primfunc() -> None:
    with pytest.raises(ScheduleError, match="Schedule needs a loopir.PrimFunc or a loopir.IRModule, got str"):
        loopir.Schedule("main")


def test_handles_repr_and_exports() -> None:
    assert loopir.BlockRV is BlockRV and loopir.LoopRV is LoopRV
    assert loopir.Schedule is loopir.schedule.Schedule
    assert loopir.Trace is loopir.schedule.Trace
    sch = loopir.Schedule(matmul())
    assert repr(sch.get_block("C")) == "BlockRV(C)"
    assert repr(sch) == "<Schedule of main: 1 instructions>"


def test_schedule_needs_unique_block_names_and_loop_vars() -> None:
    import attrs

    from loopir.ir.functor import substitute
    from loopir.schedule import tree

    f = two_stage()
    c_real, c_anc = tree.find_block_realize(f, "C")
    renamed = attrs.evolve(c_real, block=attrs.evolve(c_real.block, name="B"))
    with pytest.raises(ScheduleError, match="block names must be unique, but 'B' names two blocks"):
        loopir.Schedule(tree.replace(f, c_real, renamed))
    # The same loop Var defining two sibling loops.
    b_loop = [a for a in tree.find_block_realize(f, "B")[1] if isinstance(a, For)][0]
    c_loop = [a for a in c_anc if isinstance(a, For)][0]
    dup = attrs.evolve(
        c_loop,
        loop_var=b_loop.loop_var,
        body=substitute(c_loop.body, {c_loop.loop_var: b_loop.loop_var}),
    )
    with pytest.raises(ScheduleError, match="loop var i defines two loops"):
        loopir.Schedule(tree.replace(f, c_loop, dup))
