"""transform_layout: golden before/after (the docstring example), equivalence over drawn maps,
errors, the restricted index-map parser, trace round trip, and a relaid-out shared tile."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir import te
from loopir.errors import ScheduleError
from loopir.schedule import Trace
from loopir.schedule.layout import parse_index_map
from loopir.testing import check_equivalent
from tests.schedule.dm_util import golden_pair


def _func(m: int = 16, n: int = 8) -> loopir.PrimFunc:
    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + 1.0, name="C")
    return te.create_prim_func([A, C])


def test_golden_docstring_example(golden) -> None:
    sch = loopir.Schedule(_func())
    sch.transform_layout(sch.get_block("B"), "B", lambda i, j: (j // 4, i, j % 4))
    assert [int(s) for s in sch.func.body.block.alloc_buffers[0].shape] == [2, 16, 4]
    golden_pair(golden, "transform_layout", _func(), sch.func)


MAPS = [
    lambda i, j: (j, i),
    lambda i, j: (i // 4, j, i % 4),
    lambda i, j: (i * 8 + j,),
    lambda i, j: (j // 2, i // 2, j % 2, i % 2),
    lambda i, j: (i, j),
]


@settings(max_examples=20, deadline=None)
@given(m=st.sampled_from([4, 8, 12, 16]), n=st.sampled_from([2, 4, 8]), k=st.integers(0, len(MAPS) - 1))
def test_equivalent_for_one_to_one_maps(m, n, k) -> None:
    fmap = MAPS[k]
    if k == 2:
        fmap = lambda i, j: (i * n + j,)  # noqa: E731 - the flattening of this shape
    sch = loopir.Schedule(_func(m, n))
    sch.transform_layout(sch.get_block("B"), 0, fmap)
    check_equivalent(_func(m, n), sch.func)
    check_equivalent(_func(m, n), loopir.lower(sch.func))


def test_errors_name_the_primitive() -> None:
    sch = loopir.Schedule(_func())
    b = sch.get_block("B")
    with pytest.raises(ScheduleError, match="transform_layout: index map .* is not one-to-one"):
        sch.transform_layout(b, 0, lambda i, j: (i // 2, j))
    with pytest.raises(ScheduleError, match="takes 1 indices but the buffer has 2 dimensions"):
        sch.transform_layout(b, 0, lambda i: (i,))
    with pytest.raises(ScheduleError, match="negative indices"):
        sch.transform_layout(b, 0, lambda i, j: (i - 1, j))
    with pytest.raises(ScheduleError, match="is a parameter"):
        sch.transform_layout(sch.get_block("C"), "C", lambda i, j: (j, i))
    with pytest.raises(ScheduleError, match=r"\+ - \* // % \^ & \| << >> of the indices"):
        sch.transform_layout(b, 0, lambda i, j: (te.max(i, j), j))
    assert len(sch.trace) == 2  # the failed calls left nothing behind


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')", "lambda i, j: (i.real, j)", "lambda i, j: (f(i), j)",
    "lambda i, j=1: (i, j)", "lambda i, j: (i ** 2, j)", "lambda *a: a", "(lambda i: i)(1)",
])  # fmt: skip
def test_parser_evaluates_nothing(text) -> None:
    with pytest.raises(ScheduleError, match="transform_layout: index map"):
        parse_index_map(text)


def test_trace_round_trip_and_replay() -> None:
    sch = loopir.Schedule(_func())
    sch.transform_layout(sch.get_block("B"), sch.get(sch.get_block("B")).writes[0].buffer, lambda i, j: (j, i))
    text = str(sch.trace)
    assert 'sch.transform_layout(b0, 0, "lambda i, j: (j, i)")' in text
    start = loopir.Schedule(_func())
    Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(start)
    loopir.assert_structural_equal(sch.func, start.func)
    ns: dict = {}
    exec(text, ns)  # noqa: S102 - the trace's own Python text
    again = loopir.Schedule(_func())
    ns["apply_trace"](again)
    loopir.assert_structural_equal(sch.func, again.func)


@pytest.mark.nvcc
def test_relaid_out_shared_tile_compiles_and_matches(tmp_path) -> None:
    from loopir.codegen_cuda import emit_cuda
    from loopir.codegen_cuda.compile import compile_cuda
    from loopir.examples import transpose

    sch = transpose(64, 96, pad=False)
    sch.transform_layout(sch.get_block("A_shared"), 0, lambda i, j: (j, i))
    lowered = loopir.lower(sch.func)
    check_equivalent(sch.func, lowered, thread_order="random")
    compile_cuda(emit_cuda(lowered).source, arch="sm_90a", cache_dir=tmp_path)
