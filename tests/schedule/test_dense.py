"""The DietCode dense schedule (``loopir.examples.dense``): structure, validity, numerics."""

from __future__ import annotations

import json

import numpy as np
import pytest

import loopir
from loopir.errors import ScheduleError
from loopir.examples import dense, dense_func
from loopir.ir.stmt import For, ForKind
from loopir.schedule import tree
from loopir.testing import check_equivalent


def _loops_of(func: loopir.PrimFunc, block: str) -> list[For]:
    hit = tree.find_block_realize(func, block)
    assert hit is not None, block
    return [a for a in hit[1] if isinstance(a, For)]


@pytest.mark.parametrize(("M", "K", "N"), [(60, 50, 70), (130, 35, 260)])
def test_dense_matches_numpy(M: int, K: int, N: int) -> None:
    sch = dense(M, K, N)
    loopir.verify(sch.func)
    rng = np.random.default_rng(7)
    a = (rng.uniform(0.5, 1.5, (M, K)) * rng.choice([-1, 1], (M, K))).astype("float32")
    b = (rng.uniform(0.5, 1.5, (K, N)) * rng.choice([-1, 1], (K, N))).astype("float32")
    c = np.full((M, N), 123.0, dtype="float32")  # init must overwrite whatever is there
    loopir.build(sch.func, target="cpu")(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_dense_structure() -> None:
    sch = dense(256, 64, 512, vec=4)
    f = sch.func
    c_loops = _loops_of(f, "C")
    tags = [(lp.thread_tag, int(lp.extent.value)) for lp in c_loops if lp.thread_tag]
    # 2 x 4 tiles of 128 x 128 on blockIdx.x, 2-way vthread, 256 threads.
    assert tags == [("blockIdx.x", 8), ("vthread.x", 2), ("threadIdx.x", 256)]
    names = tree.block_names(f)
    assert sorted(names) == sorted(["root", "A_shared", "B_shared", "C_init", "C", "C_local"])
    for b in ("A_shared", "B_shared"):
        loops = _loops_of(f, b)
        # bx, vthread, tx, k0, then the cooperative fetch: [None, 256, vec].
        fetch = loops[4:]
        assert [lp.kind for lp in fetch] == [ForKind.SERIAL, ForKind.THREAD_BINDING, ForKind.VECTORIZED]
        assert fetch[1].thread_tag == "threadIdx.x" and int(fetch[1].extent.value) == 256
        assert int(fetch[2].extent.value) == 4
        # The shared tile is 128 x 4 (A) / 4 x 128 (B): 512 elements, ceil(512 / 1024) = 1.
        assert int(fetch[0].extent.value) == 1
    # C_local is written back under the thread loop (32 elements per virtual thread).
    wb = _loops_of(f, "C_local")
    assert wb[2].thread_tag == "threadIdx.x" and len(wb) > 3


@pytest.mark.parametrize("vec", [1, 2, 8])
def test_dense_other_vector_widths(vec: int) -> None:
    sch = dense(70, 20, 90, vec=vec)
    loopir.verify(sch.func)
    check_equivalent(dense_func(70, 20, 90), sch.func)


@pytest.mark.parametrize(
    ("M", "K", "N"),
    # N = 1 (and 1x1x1) regress a decompose_reduction bug: an extent-1 binding simplified
    # to 0 left its loop only in the predicate.
    [(3, 5, 7), (1, 300, 2), (2, 1, 3), (129, 4, 2), (1, 1, 1), (60, 50, 1), (1, 7, 3)],
)
def test_dense_tiny_shapes(M: int, K: int, N: int) -> None:
    """Tiles far larger than the problem: every iteration is guarded, none is lost."""
    sch = dense(M, K, N)
    loopir.verify(sch.func)
    # The copy keeps its two (possibly unit) loops, so the trace is the same for every shape.
    assert len(sch.get_loops(sch.get_block("A_shared"))) == 4 + 3
    check_equivalent(dense_func(M, K, N), sch.func)


def test_dense_symbolic_rows() -> None:
    M = loopir.Var("M")
    sch = dense(M, 64, 128, vec=2)
    loopir.verify(sch.func)
    check_equivalent(dense_func(M, 64, 128), sch.func, sizes={"M": 77})


def test_dense_trace_round_trips() -> None:
    sch = dense(60, 50, 70)
    text = str(sch.trace)
    assert text.startswith("def apply_trace(sch):\n    b0 = sch.get_block(\"C\")")
    assert 'sch.split(l1, [None, 1, 8, 8, 2], disable_predication=False)' in text
    ns: dict = {}
    exec(text, ns)  # noqa: S102 - our own generated code
    fresh = loopir.Schedule(dense_func(60, 50, 70))
    ns["apply_trace"](fresh)
    loopir.assert_structural_equal(sch.func, fresh.func)
    again = loopir.Schedule(dense_func(60, 50, 70))
    loopir.Trace.from_json(json.loads(json.dumps(sch.trace.as_json()))).apply_to(again)
    loopir.assert_structural_equal(sch.func, again.func)
    # The same trace replays onto other shapes (it is shape-generic)...
    other = loopir.Schedule(dense_func(130, 35, 260))
    sch.trace.apply_to(other)
    loopir.assert_structural_equal(other.func, dense(130, 35, 260).func)


def test_dense_bad_vec() -> None:
    with pytest.raises(ScheduleError, match="vec must be a positive int, got 0"):
        dense(64, 64, 64, vec=0)


def test_dense_symbolic_rows_and_depth() -> None:
    """Regression: with a symbolic K the update predicate ``k_0*4 + k_2 < K`` names the size
    var K, which decompose_reduction must not mistake for a spatial loop."""
    M, K = loopir.Var("M"), loopir.Var("K")
    sch = dense(M, K, 70)
    loopir.verify(sch.func)
    check_equivalent(dense_func(M, K, 70), sch.func, sizes={"M": 61, "K": 37})
