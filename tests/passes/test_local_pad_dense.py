"""LocalPadding on the DietCode dense schedule (loopir.examples.dense)."""

from __future__ import annotations

import numpy as np
import pytest
from _passes_util import (
    assert_close,
    assert_lowered_form,
    guard_of,
    inputs,
    lower_with,
    nodes,
    run_cpu,
    run_simt,
    sequential_pipeline,
    store_to,
    text,
)

import loopir
from loopir.arith import vectorized as _enum
from loopir.ir import BufferLoad, Select, Var
from loopir.ir.functor import collect_vars
from loopir.passes import (
    CompactBufferAllocation,
    InjectVirtualThread,
    LocalPadding,
    LowerBlocks,
    PassContext,
    Sequential,
    Simplify,
    ThreadSync,
    UnifyThreadLoops,
)
from loopir.passes._walk import conjuncts


def _conj(e: object) -> list[str]:
    return [text(c) for c in conjuncts(e)]


def _compute(f: loopir.PrimFunc):  # noqa: ANN202
    return [s for s in store_to(f, "C_local") if nodes(s.value, BufferLoad)]


def _init(f: loopir.PrimFunc):  # noqa: ANN202
    return [s for s in store_to(f, "C_local") if not nodes(s.value, BufferLoad)]


@pytest.fixture(scope="module")
def dense960() -> loopir.PrimFunc:
    return lower_with(loopir.examples.dense(960, 770, 2304).func, pad=True)


def test_dense_960_fetch_guards_reduce_to_store_protection(dense960: loopir.PrimFunc) -> None:
    f = dense960
    assert_lowered_form(f)
    (a,) = store_to(f, "A_shared")
    # the coverage guard (256 threads x 4 lanes = 1024 > 512 tile elements) protects the store
    assert [_conj(c) for c in guard_of(f, a)] == [["i_2_j_2_fused * 4 + ax0_ax1_fused_2 < 512"]]
    assert isinstance(a.value, Select)
    assert _conj(a.value.condition) == [
        "i_0_j_0_fused // 18 * 128 + i_2_j_2_fused < 960", "k_0 * 4 + ax0_ax1_fused_2 < 770",
    ]  # fmt: skip
    assert isinstance(a.value.true_value, BufferLoad) and a.value.true_value.buffer.name == "A"
    assert a.value.false_value.value == 0.0
    (b,) = store_to(f, "B_shared")
    assert [_conj(c) for c in guard_of(f, b)] == [["i_2_j_2_fused * 4 + ax0_ax1_fused_2 < 512"]]
    assert isinstance(b.value, Select)
    assert _conj(b.value.condition) == ["k_0 * 4 + i_2_j_2_fused // 32 < 770"]


def test_dense_960_init_and_compute_unguarded_writeback_guarded(dense960: loopir.PrimFunc) -> None:
    f = dense960
    (init,) = _init(f)
    assert guard_of(f, init) == [] and init.value.value == 0.0
    (comp,) = _compute(f)
    assert guard_of(f, comp) == []
    (wb,) = store_to(f, "C")
    assert [_conj(c) for c in guard_of(f, wb)] == [
        ["i_0_j_0_fused // 18 * 128 + i_2_j_2_fused // 32 * 16 + ax0 < 960"]
    ]


def test_dense_960_without_padding_keeps_all_guards() -> None:
    f = lower_with(loopir.examples.dense(960, 770, 2304).func, pad=False)
    (a,) = store_to(f, "A_shared")
    assert len(_conj(guard_of(f, a)[0])) == 3 and not isinstance(a.value, Select)
    (comp,) = _compute(f)
    assert len(_conj(guard_of(f, comp)[0])) == 2
    (init,) = _init(f)
    assert len(guard_of(f, init)) == 1


def test_dense_100_tile_larger_than_extent() -> None:
    """M = 100 < 128: the schedule clips A_shared to 100 rows, so the row guard protects the
    A store and the compute keeps it; the k guard still goes."""
    f = lower_with(loopir.examples.dense(100, 770, 2304).func, pad=True)
    (a,) = store_to(f, "A_shared")
    # one conjunct stays, and it is the row guard: true exactly for the 100 rows of the tile
    # (``tx < 100``, or ``tx * 4 + lane < 400`` when the copy's coverage guard is clipped)
    (guard,) = guard_of(f, a)
    (kept,) = conjuncts(guard)
    by_name = {v.name: v for v in collect_vars(kept)}
    assert set(by_name) <= {"i_2_j_2_fused", "ax0_ax1_fused_2"}, text(kept)
    env = _enum.domain([(by_name.get("i_2_j_2_fused", Var("tx")), 0, 256),
                        (by_name.get("ax0_ax1_fused_2", Var("lane")), 0, 4)])  # fmt: skip
    rows = next(iter(env.values()))
    np.testing.assert_array_equal(_enum.evaluate(kept, env, rows.size) != 0, rows < 100)
    assert "k_0 * 4 + ax0_ax1_fused_2 < 770" in _conj(a.value.condition)
    (comp,) = _compute(f)
    assert [_conj(c) for c in guard_of(f, comp)] == [["i_2_j_2_fused // 32 * 16 + i_3 * 2 + i_4 < 100"]]
    (init,) = _init(f)
    assert guard_of(f, init) == []
    (wb,) = store_to(f, "C")
    assert len(guard_of(f, wb)) == 1


def test_explain_report_and_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    sch = loopir.examples.dense(960, 770, 2304)
    mid = Sequential([LowerBlocks(), UnifyThreadLoops(), CompactBufferAllocation()])(sch.func)
    caplog.set_level(logging.DEBUG, logger="loopir.passes.local_pad")
    lp = LocalPadding(explain=True)
    lp(mid)
    rep = lp.report
    assert [c.kind for c in rep.candidates] == ["init", "fetch", "fetch", "compute"]
    (a,) = rep.by_buffer("A_shared")
    assert [(c.inlined, c.reason.split(" ")[0]) for c in a.conjuncts] == [
        (True, "only"), (True, "only"), (False, "without"),
    ]  # fmt: skip
    assert "could leave [0, 128)" in a.conjuncts[2].reason
    comp = rep.candidates[-1]
    assert comp.outcome == "guard reduced" and all(c.inlined for c in comp.conjuncts)
    assert str(rep) in caplog.text
    assert "kept" in str(rep) and "inlined" in str(rep) and "dropped" in str(rep)


def test_key_off_is_structurally_identical_to_pipeline_without_pass() -> None:
    sch = loopir.examples.dense(130, 35, 260)
    without = Sequential([
        LowerBlocks(), UnifyThreadLoops(), CompactBufferAllocation(), Simplify(),
        InjectVirtualThread(), ThreadSync(),
    ])  # fmt: skip
    ref = without(sch.func)
    loopir.assert_structural_equal(loopir.lower(sch.func), ref)
    with PassContext(config={"tir.enable_local_pad": False}):
        loopir.assert_structural_equal(loopir.lower(sch.func), ref)
    with PassContext(config={"tir.enable_local_pad": True}):
        assert not loopir.structural_equal(loopir.lower(sch.func), ref)


@pytest.mark.parametrize("shape,vec", [((20, 9, 30), 4), ((60, 50, 70), 4), ((130, 7, 140), 2), ((33, 5, 17), 1)])
def test_dense_padded_matches_numpy_on_simt(shape: tuple[int, int, int], vec: int) -> None:
    sch = loopir.examples.dense(*shape, vec=vec)
    x = inputs(sch.func, seed=5)
    want = x[0].astype(np.float64) @ x[1].astype(np.float64)
    assert_close(run_simt(lower_with(sch.func, pad=True), x)[2], want)


@pytest.mark.parametrize("shape", [(130, 35, 260), (960, 7, 130), (3, 2, 5)])
def test_dense_padded_sequential_pipeline_on_cpu(shape: tuple[int, int, int]) -> None:
    sch = loopir.examples.dense(*shape)
    x = inputs(sch.func, seed=6)
    want = x[0].astype(np.float64) @ x[1].astype(np.float64)
    f_pad = sequential_pipeline(pad=True)(sch.func)
    f_off = sequential_pipeline(pad=False)(sch.func)
    assert_close(run_cpu(f_pad, x)[2], want)
    assert_close(run_cpu(f_off, x)[2], run_cpu(f_pad, x)[2])


def test_dense_symbolic_m() -> None:
    M = Var("M")
    sch = loopir.examples.dense(M, 50, 70)
    f = lower_with(sch.func, pad=True)
    (a,) = store_to(f, "A_shared")
    assert "i_0_j_0_fused * 128 + i_2_j_2_fused < M" in _conj(a.value.condition)
    x = inputs(sch.func, seed=7, sizes={"M": 37})
    want = x[0].astype(np.float64) @ x[1].astype(np.float64)
    assert_close(run_simt(f, x)[2], want)
