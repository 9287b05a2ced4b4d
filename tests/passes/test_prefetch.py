"""InjectSharedPrefetch: golden IR, executor equivalence (pass on vs off), refusals, errors."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from _passes_util import (
    assert_close,
    assert_lowered_form,
    inputs,
    nodes,
    run_cpu,
    run_simt,
    store_to,
)
from _prefetch_kernels import PREFETCH, tile_sum

import loopir
from loopir.errors import PassError
from loopir.ir import Allocate, BufferLoad, For, ForKind, IfThenElse, Var
from loopir.ir.functor import post_order_visit
from loopir.passes import InjectSharedPrefetch, PassContext, RecordIRInstrument
from loopir.passes.thread_sync import is_sync


def _lower(func: loopir.PrimFunc, pad: bool, prefetch: bool) -> loopir.PrimFunc:
    with PassContext(config={"tir.enable_local_pad": pad, "tir.prefetch_shared": prefetch}):
        return loopir.lower(func)


def _loop(func: loopir.PrimFunc, name: str) -> For:
    found: list[For] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, For) and n.loop_var.name == name else None)
    (loop,) = found
    return loop


def _syncs(s: object) -> int:
    out: list = []

    def f(n: object) -> None:
        if hasattr(n, "value") and is_sync(n):  # Evaluate nodes
            out.append(n)

    post_order_visit(s, f)
    return len(out)


# --- golden before / after -------------------------------------------------------------------
@pytest.mark.parametrize("pad", [False, True], ids=["pad_off", "pad_on"])
def test_golden_dense(pad: bool, golden) -> None:
    rec = RecordIRInstrument()
    with PassContext(config={"tir.enable_local_pad": pad, "tir.prefetch_shared": True}, instruments=[rec]):
        loopir.lower(loopir.examples.dense(60, 50, 70).func)
    assert rec.names()[-2:] == ["ThreadSync", "InjectSharedPrefetch"]
    tag = "pad" if pad else "nopad"
    golden(f"passes/prefetch_dense_60x50x70_{tag}_before", rec.after("ThreadSync").script())
    golden(f"passes/prefetch_dense_60x50x70_{tag}_after", rec.after("InjectSharedPrefetch").script())


def test_structure_dense() -> None:
    before = _lower(loopir.examples.dense(60, 50, 70).func, True, False)
    after = _lower(loopir.examples.dense(60, 50, 70).func, True, True)
    assert_lowered_form(after)
    regs = {a.buffer.name: a.buffer for a in nodes(after.body, Allocate) if a.buffer.scope == "local"}
    assert regs["A_shared_prefetch"].shape[0].value == 4  # vec = 4 lanes, one instance
    assert regs["B_shared_prefetch"].shape[0].value == 4
    k0_before, k0_after = _loop(before, "k_0"), _loop(after, "k_0")
    assert _syncs(k0_before) == _syncs(k0_after) == 2  # no new barrier
    body = k0_after.body.seq
    assert is_sync(body[0]) and is_sync(body[3])
    # shared stores now read the registers, with the original guards
    for name in ("A_shared", "B_shared"):
        (st,) = [s for s in store_to(after, name)]
        assert isinstance(st.value, BufferLoad) and st.value.buffer.name == f"{name}_prefetch"
    # the loads for k_0 + 1 come right after the second barrier; "k_0 < 12" (a next tile
    # exists) is the first conjunct of each chain's outermost guard
    for load in body[4:6]:
        assert isinstance(load, For) and isinstance(load.body, IfThenElse)
        assert loopir.ir.printer.expr_to_str(load.body.condition.a) == "k_0 < 12"
        (st,) = nodes(load, loopir.ir.BufferStore)
        assert st.buffer.name.endswith("_prefetch") and "k_0 * 4 + " in loopir.ir.printer.expr_to_str(st.value)
    # the compute is unchanged
    assert loopir.structural_equal(k0_before.body.seq[-1], body[-1])


# --- equivalence: pass on vs off --------------------------------------------------------------
SHAPES = [(60, 50, 70), (130, 35, 260), (128, 8, 128)]


@pytest.mark.parametrize("pad", [False, True], ids=["pad_off", "pad_on"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_dense_cpu_executor_equivalence(shape: tuple[int, int, int], pad: bool) -> None:
    sch = loopir.examples.dense(*shape)
    off, on = _lower(sch.func, pad, False), _lower(sch.func, pad, True)
    assert not loopir.structural_equal(off, on)  # the pass did something
    arrays = inputs(sch.func, seed=sum(shape))
    want = run_cpu(off, arrays)[2]
    got = run_cpu(on, arrays)[2]
    assert_close(got, want)
    A, B = (a.astype(np.float64) for a in arrays[:2])
    np.testing.assert_allclose(got, A @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("vec", [1, 2, 4])
@pytest.mark.parametrize("pad", [False, True], ids=["pad_off", "pad_on"])
def test_dense_simt_equivalence(vec: int, pad: bool) -> None:
    """Threads in random orders between barriers (the CPU executor's race-revealing mode),
    several store instances."""
    # at least one whole 128x128 tile: a shape smaller than one tile gets its tiles clipped
    sch = loopir.examples.dense(200, 50, 300, vec=vec)
    on = _lower(sch.func, pad, True)
    slots = {a.buffer.shape[0].value for a in nodes(on.body, Allocate) if a.buffer.name.endswith("_prefetch")}
    # a 128x4 (4x128) tile is 512 elements: 2 per thread at vec 1 (two store instances) and 2,
    # 4 at vec 4 (one vector instance; half the threads idle)
    assert slots == {{1: 2, 2: 2, 4: 4}[vec]}
    arrays = inputs(sch.func, seed=vec)
    assert_close(run_simt(on, arrays)[2], run_cpu(_lower(sch.func, pad, False), arrays)[2])


@pytest.mark.parametrize("n", [1, 5, 8, 9, 37])
def test_symbolic_extent(n: int) -> None:
    nv = Var("n")
    f = tile_sum(nv)
    p = InjectSharedPrefetch()
    g = p(f)
    assert p.report == [("k", "prefetched 1 registers")]
    # the prologue is guarded by "the loop runs at least once"
    assert "if (n + 7) // 8 >= 1:" in g.script()
    rng = np.random.default_rng(n)
    a = rng.uniform(0.5, 1.5, n).astype(np.float32)
    idx = np.ones(8, np.int32)
    res = []
    for fn in (f, g):
        out = np.full(8, np.nan, np.float32)
        loopir.build(fn, target="cpu")(a, idx, out)
        res.append(out)
    assert not np.isnan(res[1]).any()
    np.testing.assert_array_equal(res[0], res[1])


# --- which loops ------------------------------------------------------------------------------
def test_annotation_only_by_default() -> None:
    sch = loopir.examples.dense(60, 50, 70)
    plain = loopir.lower(sch.func)
    assert not [a for a in nodes(plain.body, Allocate) if a.buffer.name.endswith("_prefetch")]
    sch.annotate(sch.get_loops(sch.get_block("C"))[3], PREFETCH, True)
    lowered = loopir.lower(sch.func)
    assert len([a for a in nodes(lowered.body, Allocate) if a.buffer.name.endswith("_prefetch")]) == 2


def test_annotation_false_opts_out_under_config() -> None:
    sch = loopir.examples.dense(60, 50, 70)
    sch.annotate(sch.get_loops(sch.get_block("C"))[3], PREFETCH, False)
    lowered = _lower(sch.func, False, True)
    assert not [a for a in nodes(lowered.body, Allocate) if a.buffer.name.endswith("_prefetch")]


def test_annotation_bad_value() -> None:
    with pytest.raises(PassError, match=r"InjectSharedPrefetch: loop k: annotation 'loopir.prefetch_shared' must be a bool, got 'yes'"):
        InjectSharedPrefetch()(tile_sum(annotate="yes"))
    assert InjectSharedPrefetch()(tile_sum(annotate=1)) is not None


def test_config_errors() -> None:
    with pytest.raises(PassError, match="'tir.prefetch_shared' expects bool, got int 1"):
        PassContext(config={"tir.prefetch_shared": 1})
    with pytest.raises(PassError, match="max_registers must be a positive int, got 0"):
        InjectSharedPrefetch(max_registers=0)
    with pytest.raises(PassError, match="InjectSharedPrefetch needs lowered IR"):
        InjectSharedPrefetch()(loopir.examples.dense(60, 50, 70).func)
    assert "tir.prefetch_shared" in PassContext.list_configs()


# --- refusals: the function comes back unchanged, the reason is reported ----------------------
@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        (dict(write_source=True), "the value stored into S reads A, which the function writes"),
        (dict(index_from_load=True), "the store index of S reads buffer Idx"),
        (dict(guard_from_load=True), "a fetch guard reads buffer Idx"),
        (dict(second_sync=False), "the fetch is not followed by a barrier"),
        (dict(fetch_from_shared=True), "the value stored into S reads shared buffer S2"),
        (dict(else_branch=True), "a fetch guard has an else branch"),
    ],
)
def test_refusals(kwargs: dict, reason: str, caplog: pytest.LogCaptureFixture) -> None:
    f = tile_sum(**kwargs)
    p = InjectSharedPrefetch()
    with caplog.at_level(logging.WARNING, logger="loopir.passes.prefetch"):
        assert p(f) is f
    assert len(p.report) == 1 and p.report[0][0] == "k"
    assert reason in p.report[0][1]
    assert reason in caplog.text  # an annotated loop that is refused is a warning


@pytest.mark.parametrize("n", [1, 8, 37])
def test_next_iteration_test_comes_first(n: int) -> None:
    """Guards of iteration L + 1 are evaluated only when it exists (they could trap: here a
    run-time divisor), so "L + 1 < extent" is the first conjunct of the outermost guard."""
    f = tile_sum(Var("n"), divisor_guard=True)
    g = InjectSharedPrefetch()(f)
    k = _loop(g, "k")
    guard = k.body.seq[3]
    assert isinstance(guard, IfThenElse)
    assert loopir.ir.printer.expr_to_str(guard.condition.a) == "k < (n + 7) // 8 - 1"
    a = np.random.default_rng(n).uniform(0.5, 1.5, n).astype(np.float32)
    res = []
    for fn in (f, g):
        out = np.full(8, np.nan, np.float32)
        loopir.build(fn, target="cpu")(a, np.ones(8, np.int32), out)
        res.append(out)
    np.testing.assert_array_equal(res[0], res[1])


def test_refusal_not_serial(caplog: pytest.LogCaptureFixture) -> None:
    f = tile_sum(loop_kind=ForKind.UNROLLED)
    p = InjectSharedPrefetch()
    with caplog.at_level(logging.WARNING, logger="loopir.passes.prefetch"):
        assert p(f) is f
    assert p.report == [("k", "the loop is unrolled, not serial")]


def test_refusal_register_limit() -> None:
    p = InjectSharedPrefetch(max_registers=7)
    lowered = loopir.lower(loopir.examples.dense(60, 50, 70).func)
    with PassContext(config={"tir.prefetch_shared": True}):
        assert p(lowered) is lowered
    assert p.report == [("k_0", "not prefetched: it needs 8 registers per thread (limit 7)")]


def test_config_only_considers_loops_that_fill_shared_memory(caplog: pytest.LogCaptureFixture) -> None:
    """Under the config, loops without shared stores (init / write-back) are not candidates."""
    p = InjectSharedPrefetch()
    lowered = loopir.lower(loopir.examples.dense(60, 50, 70).func)
    with caplog.at_level(logging.WARNING, logger="loopir.passes.prefetch"):
        with PassContext(config={"tir.prefetch_shared": True}):
            out = p(lowered)
    assert out is not lowered
    assert "WARNING" not in caplog.text
    assert p.report == [("k_0", "prefetched 8 registers")]


def test_idempotent_under_config() -> None:
    """Running the pass twice does not prefetch the register copies again."""
    with PassContext(config={"tir.prefetch_shared": True}):
        once = loopir.lower(loopir.examples.dense(60, 50, 70).func)
        p = InjectSharedPrefetch()
        twice = p(once)
    assert p.report == [("k_0", "not prefetched: the value stored into A_shared reads local buffer A_shared_prefetch")]
    assert twice is once
