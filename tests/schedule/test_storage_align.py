"""storage_align (issue 14): the primitive, its lowering to padded strides, and parity.

Golden before/after IR (the docstring example), errors naming the primitive, trace round
trip, the padded allocation after lowering (shared memory size and flat indices in the CUDA
source), and the CPU executor (random thread order) against the unscheduled transpose over
hypothesis-drawn shapes, with local padding on and off.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopir
from loopir.errors import ScheduleError
from loopir.ir.expr import IntImm
from loopir.passes.storage_align import aligned_strides, allocation_size, allocation_size_c
from loopir.schedule import Trace
from loopir.testing import check_equivalent
from loopir.testing.workloads import shared_transpose
from tests.schedule.dm_util import golden_pair

# the transpose schedule binds 32 x 8 threads: extents from one warp up, not all multiples of 32
SIZES = st.sampled_from([32, 33, 47, 64, 70, 100])


def _aligned(m: int = 100, n: int = 70, factor: int = 32, offset: int = 1) -> loopir.Schedule:
    sch = shared_transpose(m, n)
    sch.storage_align(sch.get_block("A_shared"), 0, 0, factor, offset)
    return sch


def _alloc(func: loopir.PrimFunc, name: str):
    from loopir.ir.functor import post_order_visit
    from loopir.ir.stmt import Allocate

    found = []
    post_order_visit(func.body, lambda n: found.append(n.buffer) if isinstance(n, Allocate) and n.buffer.name == name else None)
    (buf,) = found
    return buf


def test_golden_annotation_and_lowered_strides(golden) -> None:
    sch = _aligned()
    golden_pair(golden, "storage_align", shared_transpose(100, 70).func, sch.func)
    golden("schedule/storage_align_lowered", loopir.script(loopir.lower(sch.func)))
    buf = _alloc(loopir.lower(sch.func), "A_shared")
    assert [int(s) for s in buf.shape] == [32, 32] and [int(s) for s in buf.strides] == [33, 1]


def test_aligned_strides_rule() -> None:
    shape = [IntImm(4, "int32"), IntImm(8, "int32"), IntImm(30, "int32")]
    assert [int(s) for s in aligned_strides(shape, ((1, 32, 0),))] == [256, 32, 1]
    assert [int(s) for s in aligned_strides(shape, ((1, 32, 1), (0, 16, 3)))] == [275, 33, 1]
    assert [int(s) for s in aligned_strides(shape, ())] == [240, 30, 1]
    assert allocation_size([4, 8, 30], [275, 33, 1]) == 3 * 275 + 7 * 33 + 29 + 1
    from loopir.arith.evaluate import evaluate
    from loopir.ir.expr import Var

    n = Var("n")
    row, col = aligned_strides([IntImm(4, "int32"), n], ((0, 32, 1),))  # a symbolic row
    assert int(col) == 1 and [evaluate(row, {n: v}) for v in (70, 64, 1)] == [97, 65, 1]
    assert allocation_size([0, 8], [9, 1]) == 0 and allocation_size([3, 4], None) == 12


def test_cuda_source_uses_the_padded_tile() -> None:
    from loopir.codegen_cuda import emit_cuda

    src = emit_cuda(loopir.lower(_aligned().func)).source
    assert "float A_shared[1055];" in src  # 31 * 33 + 31 + 1
    assert "A_shared[i_1 * 33 + (j_1_0 * 8 + j_1_1)]" in src


@pytest.mark.nvcc
def test_padded_kernel_compiles(tmp_path) -> None:
    from loopir.codegen_cuda import compile_cuda, emit_cuda

    binary = compile_cuda(emit_cuda(loopir.lower(_aligned().func)).source, arch="sm_90a", cache_dir=tmp_path)
    (r,) = binary.resources.values()
    assert r.shared_bytes == 1055 * 4


def test_trace_round_trip_and_replay() -> None:
    sch = _aligned(64, 33, factor=16, offset=4)
    assert "sch.storage_align(b16, 0, 0, 16, 4)" in str(sch.trace)
    start = loopir.Schedule(_unscheduled(64, 33))
    Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(start)
    loopir.assert_structural_equal(sch.func, start.func)
    ns: dict = {}
    exec(str(sch.trace), ns)  # noqa: S102 - the trace's own Python text
    again = loopir.Schedule(_unscheduled(64, 33))
    ns["apply_trace"](again)
    loopir.assert_structural_equal(sch.func, again.func)


def _unscheduled(m: int, n: int) -> loopir.PrimFunc:
    from loopir import te

    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((n, m), lambda j, i: A[i, j], name="B")
    return te.create_prim_func([A, B])


def test_a_second_requirement_for_the_same_axis_replaces_the_first() -> None:
    sch = _aligned()
    sch.storage_align(sch.get_block("A_shared"), "A_shared", -2, 16, 3)
    block = sch.get(sch.get_block("A_shared"))
    assert block.annotations["buffer_dim_align"] == (("A_shared", 0, 16, 3),)
    sch.storage_align(sch.get_block("A_shared"), 0, 1, 8, 0)
    block = sch.get(sch.get_block("A_shared"))
    assert block.annotations["buffer_dim_align"] == (("A_shared", 0, 16, 3), ("A_shared", 1, 8, 0))
    buf = _alloc(loopir.lower(sch.func), "A_shared")
    # innermost: 1 -> 8 (factor 8, offset 0); then 8 * 32 = 256 -> 259 (factor 16, offset 3)
    assert [int(s) for s in buf.strides] == [259, 8]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("A_shared", 2, 32, 1), "axis 2 is out of range for buffer 'A_shared' of 2 dimensions"),
        (("A_shared", 0, 0, 0), "need factor >= 1 and 0 <= offset < factor, got factor=0"),
        (("A_shared", 0, 8, 8), "got factor=8, offset=8"),
        (("A_shared", 0, 8, -1), "got factor=8, offset=-1"),
        (("A_shared", True, 8, 1), "axis must be an int, got True"),
        (("A_shared", 0, 8.0, 1), "factor must be an int, got 8.0"),
        (("nope", 0, 8, 1), "nope"),
    ],
)
def test_errors_name_the_primitive(args, match) -> None:
    sch = shared_transpose(64, 64)
    with pytest.raises(ScheduleError, match=match) as info:
        sch.storage_align(sch.get_block("A_shared"), *args)
    assert str(info.value).startswith("storage_align: ")


def test_a_parameter_is_refused() -> None:
    sch = shared_transpose(64, 64)
    with pytest.raises(ScheduleError, match="buffer 'B' is a parameter of 'main'"):
        sch.storage_align(sch.get_block("B"), "B", 0, 32, 1)


@given(m=SIZES, n=SIZES, factor=st.sampled_from([1, 2, 16, 32]), offset=st.integers(0, 31))
def test_padded_transpose_equals_the_unscheduled_one(m: int, n: int, factor: int, offset: int) -> None:
    offset %= factor
    sch = _aligned(m, n, factor, offset)
    func = _unscheduled(m, n)
    check_equivalent(func, sch.func)
    for pad in (False, True):
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            low = loopir.lower(sch.func)
        buf = _alloc(low, "A_shared")
        assert int(buf.strides[0]) % factor == offset and int(buf.strides[0]) >= int(buf.shape[1])
        check_equivalent(func, low)  # lowered IR: random thread order


@pytest.mark.gpu
def test_padded_transpose_on_the_gpu(tmp_path) -> None:
    import numpy as np

    for m, n in ((100, 70), (8192 // 64, 96)):
        mod = loopir.build(_aligned(m, n).func, target="cuda", cache_dir=tmp_path)
        a = np.random.default_rng(m).standard_normal((m, n)).astype(np.float32)
        b = np.full((n, m), np.nan, np.float32)
        mod(a, b)
        np.testing.assert_array_equal(b, a.T)


def test_virtual_thread_expansion_keeps_the_padding() -> None:
    """A padded local tile expanded per virtual thread (the DietCode dense schedule's C_local,
    two vthreads): the new leading dimension strides over one whole padded copy."""
    from loopir.examples.dense import dense, dense_func

    sch = dense(70, 20, 90)
    sch.storage_align(sch.get_block("C"), "C_local", 0, 3, 1)
    low = loopir.lower(sch.func)
    buf = _alloc(low, "C_local")
    # (16, 2): innermost 1, then 2 -> 4 (4 % 3 == 1); two copies of 15 * 4 + 1 + 1 = 62
    assert [int(s) for s in buf.shape] == [2, 16, 2] and [int(s) for s in buf.strides] == [62, 4, 1]
    check_equivalent(dense_func(70, 20, 90), low)


def test_the_transpose_example_is_the_padded_schedule() -> None:
    ex = loopir.examples.transpose(100, 70)
    loopir.assert_structural_equal(ex.func, _aligned(100, 70).func)
    plain = loopir.examples.transpose(100, 70, pad=False)
    loopir.assert_structural_equal(plain.func, shared_transpose(100, 70).func)
    direct = loopir.examples.transpose(47, 33, shared=False)
    check_equivalent(loopir.examples.transpose_func(47, 33), loopir.lower(direct.func))


@given(shape=st.lists(st.integers(0, 9), min_size=1, max_size=3), pad=st.lists(st.integers(0, 4), min_size=3, max_size=3))
def test_the_c_span_is_the_allocation_size(shape: list[int], pad: list[int]) -> None:
    # padded row-major strides: each at least the span of the axes inside it
    strides, inner = [0] * len(shape), 1
    for ax in reversed(range(len(shape))):
        strides[ax] = inner + pad[ax]
        inner = strides[ax] * max(shape[ax], 1)
    code = allocation_size_c([str(e) for e in shape], [str(s) for s in strides])
    # the C form is "((empty) ? 0 : span)": evaluate its two parts as Python
    assert code.startswith("((") and code.endswith(")")
    empty, span = code[2:-1].split(") ? 0 : ", 1)
    got = 0 if eval(empty.replace("||", " or ")) else eval(span)
    assert got == allocation_size(shape, strides)
