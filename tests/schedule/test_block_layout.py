"""``transform_block_layout``: a spatial block iterated through a bijective index map.

* The docstring's before/after is a golden test; traces replay (Python text and JSON).
* Blocks over ``mma`` accumulator fragments (a ``warp`` buffer in the ``MMA_C`` /
  ``MMA_C_16x8`` layout) iterated ``(tile, lane, local)``: drawn tile shapes and elementwise
  bodies compute exactly what the unscheduled program does on the CPU executor (sequentially
  and, lowered, in random thread order); the CUDA lowering keeps each warp's fragment in the
  thread's registers (``LowerWarpMemory`` drops the lane and the warp's ``threadIdx.y``),
  passes the race checker with no warning and compiles with nvcc for sm_80 and sm_90a.
* Bad input is refused with a ScheduleError naming the primitive and the offending value.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.errors import ScheduleError
from loopir.script import from_source
from loopir.tensor_intrin.layouts import FragmentLayout, accumulator_layout

_BEFORE = '''
def f(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
    for i, j in T.grid(4, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(2)
'''

_AFTER = '''
def f(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
    for ax0, ax1, ax2 in T.grid(4, 4, 2):
        with T.block("B"):
            v_ax0, v_ax1, v_ax2 = T.axis.remap("SSS", [ax0, ax1, ax2])
            B[v_ax1, v_ax0 * 2 + v_ax2] = A[v_ax1, v_ax0 * 2 + v_ax2] * T.float32(2)
'''


def test_docstring_example_is_golden() -> None:
    sch = loopir.Schedule(from_source(_BEFORE))
    loops = sch.transform_block_layout(sch.get_block("B"), lambda i, j: (j // 2, i, j % 2))
    assert len(loops) == 3
    loopir.assert_structural_equal(sch.func, from_source(_AFTER))
    assert 'transform_block_layout(b0, "lambda i, j: ((j // 2), i, (j % 2))")' in sch.trace.as_python()


def test_trace_replays() -> None:
    sch = loopir.Schedule(from_source(_BEFORE))
    a, b, c = sch.transform_block_layout(sch.get_block("B"), "lambda i, j: (i % 2, j, i // 2)")
    sch.unroll(c)
    for trace in (sch.trace, loopir.Trace.from_json(sch.trace.as_json())):
        again = loopir.Schedule(from_source(_BEFORE))
        trace.apply_to(again)
        loopir.assert_structural_equal(sch.func, again.func)


_FRAGMENTS = '''
def frag(A: T.Buffer((3, {R}, {C}), "float32"), O: T.Buffer((3, {R}, {C}), "float32")):
    for b in range(3):
        with T.block("tile"):
            vb = T.axis.spatial(3, b)
            W = T.alloc_buffer(({R}, {C}), "float32")
            for i, j in T.grid({R}, {C}):
                with T.block("W"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    W[vi, vj] = A[vb, vi, vj] * T.float32(0.5) + T.Cast("float32", vi - vj)
            for i, j in T.grid({R}, {C}):
                with T.block("E"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    W[vi, vj] = T.if_then_else(vj <= vi + {SHIFT}, T.exp(W[vi, vj]), T.float32(0))
            for i, j in T.grid({R}, {C}):
                with T.block("O"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    O[vb, vi, vj] = W[vi, vj] + A[vb, vi, vj]
'''


def _fragment_map(layout: FragmentLayout):  # type: ignore[no-untyped-def]
    return lambda i, j: (i // 16, j // layout.cols, *layout.to_lane_local(i % 16, j % layout.cols))


def _fragments(rows: int, cols: int, tile_cols: int, shift: int) -> tuple[loopir.PrimFunc, loopir.Schedule]:
    """W, a warp buffer in the accumulator layout, written, updated in place and read by
    blocks iterated (tile row on threadIdx.y, tile column, lane on threadIdx.x, local)."""
    func = from_source(_FRAGMENTS.format(R=rows, C=cols, SHIFT=shift))
    layout = accumulator_layout(tile_cols)
    fmap = _fragment_map(layout)
    sch = loopir.Schedule(func)
    sch.bind(sch.get_loops(sch.get_block("tile"))[0], "blockIdx.x")
    w = sch.get_block("W")
    sch.set_scope(w, "W", "warp")
    sch.transform_layout(w, "W", fmap)
    for name in ("W", "E", "O"):
        t, c, lane, v = sch.transform_block_layout(sch.get_block(name), fmap)
        sch.bind(t, "threadIdx.y")
        sch.bind(lane, "threadIdx.x")
        sch.unroll(c)
        sch.unroll(v)
    return func, sch


def _run(func: loopir.PrimFunc, a: np.ndarray, **options: object) -> np.ndarray:
    out = np.full_like(a, np.nan)
    loopir.build(func, target="cpu", **options)(a, out)
    return out


@settings(max_examples=6, deadline=None)
@given(tiles_r=st.integers(1, 3), tiles_c=st.integers(1, 3), tile_cols=st.sampled_from([8, 16]),
       shift=st.integers(-20, 20), seed=st.integers(0, 2**16))  # fmt: skip
def test_fragment_blocks_compute_the_unscheduled_program(tiles_r: int, tiles_c: int, tile_cols: int, shift: int,
                                                         seed: int) -> None:  # fmt: skip
    rows, cols = 16 * tiles_r, tile_cols * tiles_c
    func, sch = _fragments(rows, cols, tile_cols, shift)
    a = np.random.default_rng(seed).standard_normal((3, rows, cols)).astype(np.float32)
    want = _run(func, a)
    assert np.array_equal(_run(sch.func, a), want)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RaceCheckWarning
        lowered = loopir.lower(sch.func)
    assert np.array_equal(_run(lowered, a, thread_order="random", seed=seed), want)


def _source(sch: loopir.Schedule) -> str:
    from loopir.codegen_cuda import prepare_function

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return prepare_function(sch.func).emitted.source


def test_fragments_stay_in_registers() -> None:
    """Each thread holds its lane's elements of its own warp's tiles: ``float W[16]`` for two
    16 x 16 tiles per warp (not the block's 4 x 32 x 8), indexed by unrolled constants."""
    _, sch = _fragments(32, 32, 16, 0)
    src = _source(sch)
    assert "float W[16];" in src
    assert "threadIdx.y) * " not in src.split("float W[16];")[1].split("\n")[0]


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_fragment_blocks_compile_with_nvcc(arch: str, tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    _, sch = _fragments(32, 64, 16, 3)
    binary = compile_cuda(_source(sch), arch=arch, cache_dir=tmp_path)
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_frame_bytes == 0, binary.log


_REDUCE = '''
def r(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
    for i, j in T.grid(4, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] + A[vi, vj]
'''

_TWO = '''
def two(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
    for i in range(4):
        for j in range(8):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj]
        for j in range(8):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = B[vi, vj] + T.float32(1)
'''


@pytest.mark.parametrize("text, block, prep, index_map, what", [
    (_REDUCE, "B", None, "lambda i, j: (j, i)", "iter var vj is a reduce iter var"),
    (_BEFORE, "B", "bind", "lambda i, j: (j, i)", "loop i is thread_binding"),
    (_BEFORE, "B", None, "lambda i, j: (i // 2, j)", "not proven a bijection"),
    (_BEFORE, "B", None, "lambda i: (i,)", "takes 1 indices, but the block has 2 loop-bound iter vars"),
    (_BEFORE, "B", "split", "lambda i, j: (j, i)", "is bound to"),
    (_TWO, "C", None, "lambda i, j: (j, i)", "takes 2 indices, but the block has 1 loop-bound iter vars"),
])  # fmt: skip
def test_bad_input_is_refused(text: str, block: str, prep: str | None, index_map: str, what: str) -> None:
    sch = loopir.Schedule(from_source(text))
    if prep == "bind":
        sch.bind(sch.get_loops(sch.get_block("B"))[0], "threadIdx.x")
    elif prep == "split":
        sch.split(sch.get_loops(sch.get_block("B"))[1], [2, 4])
    before = sch.func
    with pytest.raises(ScheduleError, match=what) as info:
        sch.transform_block_layout(sch.get_block(block), index_map)
    assert info.value.primitive == "transform_block_layout"
    assert sch.func is before
