"""TVM's API forms on loopir (issue 29 item 3): each is accepted, or refused with a message
that says what to write instead.

Schedule(IRModule), sch.mod, work_on, get_block(func_name=) / get_sblock,
preserve_unit_iters, show, Trace.show / apply_json_to_schedule, lower(IRModule),
PassContext(disabled_pass=), NumPy integers, ("write", i) buffer specifiers, pad_einsum,
get_output_blocks / get_child_blocks, and a trace as TVM 0.27 prints it running unchanged.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import loopir
from loopir import te
from loopir.errors import PassError, ScheduleError
from tests.schedule.dm_util import check_schedule, matmul, matmul_bias_relu


def double(n: int = 8, name: str = "B") -> loopir.PrimFunc:
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name=name)
    return te.create_prim_func([A, B])


# --- Schedule(IRModule), mod, work_on, get_block(func_name=) -------------------------------------


def test_a_module_of_one_function() -> None:
    mod = loopir.IRModule({"double": double()})
    sch = loopir.Schedule(mod)
    assert sch.func_working_on == "double"
    i = sch.get_loops(sch.get_sblock("B", func_name="double"))[0]
    sch.split(i, [None, 4])
    assert isinstance(sch.mod, loopir.IRModule) and sch.mod.names == ("double",)
    assert loopir.structural_equal(sch.mod["double"], sch.func)
    assert sch.func.name == "double"
    assert 'b0 = sch.get_block("B")' in str(sch.trace)  # get_sblock is recorded as get_block


def test_a_primfunc_schedule_has_a_module_too() -> None:
    sch = loopir.Schedule(double())
    assert sch.mod.names == ("main",) and sch.func_working_on == "main"
    sch.work_on("main")  # naming the function worked on is fine
    with pytest.raises(ScheduleError, match="no function named 'other'; the module has main"):
        sch.work_on("other")
    with pytest.raises(ScheduleError, match="no function named 'other'"):
        sch.get_block("B", func_name="other")


def test_a_module_of_several_functions_with_main() -> None:
    mod = loopir.IRModule({"main": double(), "other": double(4, "C")})
    sch = loopir.Schedule(mod)
    assert sch.func_working_on == "main"
    sch.get_block("B")
    with pytest.raises(ScheduleError, match="schedule 'other' with s = loopir.Schedule\\(sch.mod\\); "
                                            "s.work_on\\('other'\\)") as info:  # fmt: skip
        sch.work_on("other")
    assert str(info.value).startswith("work_on: ")
    s = loopir.Schedule(sch.mod)
    s.work_on("other")
    s.split(s.get_loops(s.get_block("C"))[0], [2, 2])
    assert s.mod.names == ("main", "other") and s.mod["main"] is mod["main"]
    assert loopir.structural_equal(s.mod["other"], s.func)


def test_a_module_without_main_waits_for_work_on() -> None:
    mod = loopir.IRModule({"f": double(), "g": double(4, "C")})
    sch = loopir.Schedule(mod)
    assert sch.func_working_on is None
    with pytest.raises(ScheduleError, match="none is 'main': choose the one to schedule with "
                                            "sch.work_on\\(name\\)"):  # fmt: skip
        sch.get_block("B")
    with pytest.raises(ScheduleError, match="none is 'main'"):
        _ = sch.func
    sch.get_block("C", func_name="g")  # picks g, as work_on would
    assert sch.func_working_on == "g"
    other = loopir.Schedule(mod)
    other.work_on("f")
    assert other.get(other.get_block("B")).name == "B"


def test_tvm_schedule_options_are_accepted() -> None:
    sch = loopir.Schedule(double(), debug_mask="all", error_render_level="fast", enable_check=True)
    assert sch.func_working_on == "main"
    with pytest.raises(ScheduleError, match="debug_mask must be 'none', 'all' or an int"):
        loopir.Schedule(double(), debug_mask="some")


# --- preserve_unit_iters, pad_einsum, numpy ints ----------------------------------------------


def test_preserve_unit_iters_is_accepted_and_not_recorded() -> None:
    func = double(12)
    sch = loopir.Schedule(func)
    (i,) = sch.get_loops(sch.get_block("B"))
    a, b = sch.split(i, [1, None], preserve_unit_iters=True)
    f = sch.fuse(a, b, preserve_unit_iters=np.False_)
    sch.loop_partition(f, [5], preserve_unit_iters=False)
    text = str(sch.trace)
    assert "preserve_unit_iters" not in text
    assert "sch.split(l1, [1, None], disable_predication=False)" in text
    with pytest.raises(ScheduleError, match="preserve_unit_iters must be a bool, got 'yes'"):
        sch.split(sch.get_loops(sch.get_block("B_i_0_i_1_fused0"))[0], [None, 2], preserve_unit_iters="yes")
    check_schedule(func, sch)


def test_numpy_integers_wherever_ints_are_taken() -> None:
    n = np.int64(12)
    A = te.placeholder((n, np.int32(8)), "float32", name="A")
    k = te.reduce_axis(np.int64(8), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k] * np.float32(0.5), axis=k), name="B")
    func = te.create_prim_func([A, B])
    sch = loopir.Schedule(func, seed=np.int64(3))
    b = sch.get_block("B")
    i, kk = sch.get_loops(b)
    sch.split(i, list(np.array([3, 4])))  # np.int64 elements
    tiles = sch.sample_perfect_tile(kk, n=np.int64(2))
    sch.split(kk, tiles)
    sch.storage_align(sch.cache_read(b, np.int64(0), "shared"), 0, np.int64(0), np.int64(8), np.int64(1))
    assert "sch.split(l1, [3, 4], disable_predication=False)" in str(sch.trace)
    json.dumps(sch.trace.as_json())  # only Python ints were recorded
    check_schedule(func, sch)


def test_a_numpy_float_in_an_int_expression_is_not_truncated() -> None:
    """Regression: ``np.float32(2.5)`` added to an int32 load was converted to the int 2."""
    A = te.placeholder((4,), "int32", name="A")
    B = te.compute((4,), lambda i: A[i] + np.float32(2.5), name="B")
    func = te.create_prim_func([A, B])
    assert B.dtype == "float32"
    a = np.arange(4, dtype="int32")
    b = np.zeros(4, "float32")
    loopir.build(func, target="cpu")(a, b)
    assert np.array_equal(b, a + 2.5)


def test_pad_einsum_is_pad() -> None:
    func = matmul(15, 7, 9)
    sch = loopir.Schedule(func)
    sch.pad_einsum(sch.get_block("C"), [4, 4, 4])
    assert "sch.pad(b0, [4, 4, 4])" in str(sch.trace)
    check_schedule(func, sch)


# --- transform_layout buffer specifiers ----------------------------------------------------------


def test_transform_layout_takes_a_write_specifier() -> None:
    func = matmul_bias_relu(8, 4, 6)
    by_index = loopir.Schedule(func)
    by_index.transform_layout(by_index.get_block("C"), 0, lambda i, j: (j, i))
    sch = loopir.Schedule(func)
    sch.transform_layout(sch.get_block("C"), ("write", 0), lambda i, j: (j, i),
                         assume_injective_transform=True)  # fmt: skip
    loopir.assert_structural_equal(by_index.func, sch.func)
    assert str(sch.trace) == str(by_index.trace)
    check_schedule(func, sch)


def test_transform_layout_read_specifier_and_pad_value_say_what_to_write() -> None:
    sch = loopir.Schedule(matmul_bias_relu(8, 4, 6))
    d = sch.get_block("D")
    with pytest.raises(ScheduleError, match="\\('read', 0\\) of block 'D' is 'C', which the block does not write; "
                                            ".* write transform_layout\\(sch.get_block\\('C'\\), 'C', ...\\)"):  # fmt: skip
        sch.transform_layout(d, ("read", 0), lambda i, j: (j, i))
    with pytest.raises(ScheduleError, match="pad_value=0.0: loopir's transform_layout takes one-to-one maps"):
        sch.transform_layout(sch.get_block("C"), ("write", 0), lambda i, j: (j, i), pad_value=0.0)
    with pytest.raises(ScheduleError, match="a buffer specifier is \\('read', index\\) or \\('write', index\\)"):
        sch.transform_layout(sch.get_block("C"), ("write", 0, 1), lambda i, j: (j, i))


# --- queries -------------------------------------------------------------------------------------


def test_get_output_blocks_and_get_child_blocks() -> None:
    """As TVM 0.27: E is the only block of matmul_bias_relu writing a buffer the root does not
    allocate; the root's children are its three blocks."""
    sch = loopir.Schedule(matmul_bias_relu())
    root = sch.get_block("root")
    assert [sch.get(b).name for b in sch.get_output_blocks(root)] == ["E"]
    assert [sch.get(b).name for b in sch.get_child_blocks(root)] == ["C", "D", "E"]
    c = sch.get_block("C")
    assert sch.get_output_blocks(c) == []
    i = sch.get_loops(c)[0]
    assert [sch.get(b).name for b in sch.get_child_blocks(i)] == ["C"]
    assert "(b1,) = sch.get_output_blocks(b0)" in str(sch.trace)


# --- show, traces -------------------------------------------------------------------------------


def test_show_prints_the_module_and_the_trace(capsys: pytest.CaptureFixture[str]) -> None:
    sch = loopir.Schedule(double())
    sch.get_block("B")
    assert sch.show(style="light", black_format=True) is None
    out = capsys.readouterr().out
    assert out.startswith("# IRModule: main\n") and 'b0 = sch.get_block("B")' in out
    sch.trace.show()
    assert capsys.readouterr().out == sch.trace.as_python() + "\n"


def test_trace_apply_json_to_schedule_and_apply_to_schedule() -> None:
    func = matmul(9, 5, 7)
    sch = loopir.Schedule(func)
    sch.split(sch.get_loops(sch.get_block("C"))[0], [None, 4])
    for data in (sch.trace.as_json(), json.dumps(sch.trace.as_json())):
        again = loopir.Schedule(func)
        loopir.Trace.apply_json_to_schedule(data, again)
        loopir.assert_structural_equal(sch.func, again.func)
    third = loopir.Schedule(func)
    sch.trace.apply_to_schedule(third, remove_postproc=True)
    loopir.assert_structural_equal(sch.func, third.func)


# Printed by TVM 0.27 (``print(sch.trace)``) for this schedule of the same matmul.
TVM_TRACE = '''# from tvm import s_tir
def apply_trace(sch: s_tir.Schedule) -> None:
  b0 = sch.get_sblock(name="C", func_name="main")
  l1, l2, l3 = sch.get_loops(block=b0)
  l4, l5 = sch.split(loop=l1, factors=[None, 4], preserve_unit_iters=True, disable_predication=False)
  sch.reorder(l4, l2, l5)
  l6 = sch.fuse(l4, l2, preserve_unit_iters=True)
  b7 = sch.cache_read(block=b0, read_buffer_index=0, storage_scope="shared")
  sch.compute_at(block=b7, loop=l6, preserve_unit_loops=True, index=-1)
  b8 = sch.decompose_reduction(block=b0, loop=l5)
  sch.annotate(block_or_loop=l3, ann_key="pragma_unroll", ann_val=1)
  l9 = sch.add_unit_loop(block_or_loop=b0)
  sch.enter_postproc()
'''


def test_a_trace_as_tvm_prints_it_runs() -> None:
    """The Python TVM 0.27 prints for a trace runs on a loopir Schedule once ``from tvm import
    s_tir`` reads ``import loopir as s_tir``."""
    func = matmul(9, 5, 7)
    ns: dict = {}
    exec("import loopir as s_tir\n" + TVM_TRACE, ns)  # noqa: S102 - a fixed text
    sch = loopir.Schedule(func)
    ns["apply_trace"](sch)
    kinds = [i.kind for i in sch.trace]
    assert kinds[:3] == ["get_block", "get_loops", "split"] and "enter_postproc" not in kinds
    assert [sch.get(b).name for b in sch.get_child_blocks(sch.get_block("root"))] == ["A_shared", "C_init", "C"]
    check_schedule(func, sch)


def test_seed_and_fork_seed() -> None:
    a, b = loopir.Schedule(double()), loopir.Schedule(double())
    a.seed(7)
    b.seed(np.int64(7))
    assert a.fork_seed() == b.fork_seed()
    with pytest.raises(ScheduleError, match="seed must be an int"):
        a.seed("7")


# --- lower(IRModule), PassContext(disabled_pass=) ---------------------------------------------


def test_lower_an_irmodule() -> None:
    mod = loopir.IRModule({"f": double(), "g": matmul(4, 3, 5)})
    low = loopir.lower(mod)
    assert isinstance(low, loopir.IRModule) and low.names == ("f", "g")
    for name in low.names:
        loopir.assert_structural_equal(low[name], loopir.lower(mod[name]))
    with pytest.raises(PassError, match="lower: expected a PrimFunc or an IRModule, got str"):
        loopir.lower("f")  # type: ignore[call-overload]


def test_pass_context_takes_tvm_s_disabled_pass() -> None:
    with loopir.PassContext(disabled_pass=["Simplify"], opt_level=np.int64(3)) as ctx:
        assert ctx.disabled_passes == frozenset({"Simplify"})
        assert ctx.opt_level == 3 and type(ctx.opt_level) is int
    with pytest.raises(PassError, match="give disabled_passes or its TVM name disabled_pass, not both"):
        loopir.PassContext(disabled_passes=["Simplify"], disabled_pass=["Simplify"])
    with pytest.raises(PassError, match="unknown pass 'Simplfy'; did you mean 'Simplify'"):
        loopir.PassContext(disabled_pass=["Simplfy"])
