"""ThreadSync: barriers planned over a whole kernel (issue 11 item 1 and its class)."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import loopir
from loopir.errors import PassError
from loopir.examples.dense import dense
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.passes import Sequential, ThreadSync
from loopir.passes.race_check import find_races
from loopir.testing import run_cpu
from loopir.testing.workloads import shared_transpose


def _bind(v: Var, n: int, tag: str, body: Stmt) -> For:
    return For(v, 0, n, ForKind.THREAD_BINDING, body, thread_tag=tag)


def _loop(v: Var, n: int, body: Stmt) -> For:
    return For(v, 0, n, ForKind.SERIAL, body)


def _syncs(s: object) -> int:
    n = 0

    def f(x: object) -> None:
        nonlocal n
        if isinstance(x, Evaluate) and getattr(x.value, "op", "") == "tvm_storage_sync":
            n += 1

    post_order_visit(s, f)
    return n


def transpose_schedule() -> loopir.Schedule:
    """The issue's reproducer: a transpose through a 32x32 shared tile whose fill and read are
    sibling threadIdx nests under one block loop."""
    return shared_transpose(100, 70)


def test_barrier_between_sibling_thread_nests(golden) -> None:
    lowered = loopir.lower(transpose_schedule().func)
    golden("passes/thread_sync_transpose", str(lowered))
    assert _syncs(lowered) == 1
    report = find_races(lowered)
    assert not report.races and not report.unproven
    a = np.random.default_rng(1).standard_normal((100, 70)).astype(np.float32)
    for seed in range(5):
        out = run_cpu(lowered, [a, np.zeros((70, 100), np.float32)],
                      {"thread_order": "random", "seed": seed})
        np.testing.assert_array_equal(out[1], a.T)


def test_dense_keeps_two_barriers_per_k_iteration() -> None:
    for pad in (False, True):
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            f = loopir.lower(dense(960, 770, 2304).func)
        k0: list[For] = []

        def find(n: object, found: list[For] = k0) -> None:
            if isinstance(n, For) and n.loop_var.name == "k_0":
                found.append(n)

        post_order_visit(f.body, find)
        assert len(k0) == 1 and _syncs(k0[0].body) == 2 and _syncs(f.body) == 2
        assert not find_races(f).races and not find_races(f).unproven


def two_stage_row_sum(n_rows: int = 3, width: int = 32, per: int = 4) -> PrimFunc:
    """A hand-written rfactor: 32 threads write partial sums to shared, thread 0 adds them."""
    A = Buffer("A", (n_rows, width * per), "float32")
    R = Buffer("R", (n_rows,), "float32")
    S = Buffer("S", (width,), "float32", scope="shared")
    b, t, j, t2, k = Var("b"), Var("t"), Var("j"), Var("t2"), Var("k")
    stage1 = _bind(t, width, "threadIdx.x", seq(
        BufferStore(S, op.const(0.0, "float32"), (t,)),
        _loop(j, per, BufferStore(S, S[t] + A[b, t * per + j], (t,))),
    ))
    stage2 = _bind(t2, 1, "threadIdx.x", seq(
        BufferStore(R, op.const(0.0, "float32"), (b,)),
        _loop(k, width, BufferStore(R, R[b] + S[k], (b,))),
    ))
    return PrimFunc((A, R), _bind(b, n_rows, "blockIdx.x", Allocate(S, seq(stage1, stage2))),
                    name="row_sum")


def test_two_stage_reduction_gets_a_barrier_before_the_combine() -> None:
    f = two_stage_row_sum()
    assert _syncs(f) == 0
    g = Sequential([ThreadSync()])(f)
    assert _syncs(g) == 1
    assert not find_races(g).races
    assert find_races(f).races  # without the barrier thread 0 reads unfinished partials
    a = np.random.default_rng(2).random((3, 128), dtype=np.float32)
    for seed in range(5):
        out = run_cpu(g, [a, np.zeros(3, np.float32)], {"thread_order": "random", "seed": seed})
        np.testing.assert_allclose(out[1], a.sum(axis=1), rtol=1e-5)


def test_refill_in_a_loop_waits_for_the_readers() -> None:
    # each round fills S then reads a neighbour's element: a barrier after the fill (RAW) and
    # one before the next round's fill (WAR)
    A = Buffer("A", (4, 32), "float32")
    B = Buffer("B", (4, 32), "float32")
    S = Buffer("S", (32,), "float32", scope="shared")
    t, r = Var("t"), Var("r")
    body = _bind(Var("b"), 1, "blockIdx.x", Allocate(S, _bind(t, 32, "threadIdx.x", _loop(r, 4, seq(
        BufferStore(S, A[r, t], (t,)),
        BufferStore(B, S[31 - t], (r, t)),
    )))))
    g = Sequential([ThreadSync()])(PrimFunc((A, B), body, name="refill"))
    assert _syncs(g) == 2
    assert not find_races(g).races and not find_races(g).unproven
    a = np.random.default_rng(3).random((4, 32), dtype=np.float32)
    for seed in range(5):
        out = run_cpu(g, [a, np.zeros((4, 32), np.float32)], {"thread_order": "random", "seed": seed})
        np.testing.assert_array_equal(out[1], a[:, ::-1])


def test_barrier_under_a_thread_dependent_condition_is_refused() -> None:
    A = Buffer("A", (32,), "float32")
    S = Buffer("S", (32,), "float32", scope="shared")
    t = Var("t")
    inner = IfThenElse(t < 16, seq(BufferStore(S, A[t], (t,)), BufferStore(A, S[15 - t], (t,))))
    f = PrimFunc((A,), _bind(Var("b"), 1, "blockIdx.x", Allocate(S, _bind(t, 32, "threadIdx.x", inner))))
    with pytest.raises(PassError, match="ThreadSync: a shared-memory barrier is needed inside a "
                       "region that not every thread reaches"):
        Sequential([ThreadSync()])(f)


def test_barrier_inside_a_partial_thread_loop_is_refused() -> None:
    # a threadIdx loop narrower than the block runs under `if (threadIdx.x < 16)`
    A = Buffer("A", (64,), "float32")
    S = Buffer("S", (16,), "float32", scope="shared")
    t1, t2 = Var("t1"), Var("t2")
    body = Allocate(S, seq(
        _bind(t1, 64, "threadIdx.x", BufferStore(A, A[t1] * 2.0, (t1,))),
        _bind(t2, 16, "threadIdx.x", seq(BufferStore(S, A[t2], (t2,)),
                                         BufferStore(A, S[15 - t2], (t2,)))),
    ))
    f = PrimFunc((A,), _bind(Var("b"), 1, "blockIdx.x", body))
    with pytest.raises(PassError, match="not every thread reaches"):
        Sequential([ThreadSync()])(f)


def test_thread_sync_is_idempotent() -> None:
    lowered = loopir.lower(transpose_schedule().func)
    again = Sequential([ThreadSync()])(lowered)
    assert _syncs(again) == _syncs(lowered)
    loopir.assert_structural_equal(again, lowered)


@pytest.mark.gpu
def test_transpose_on_the_gpu_is_right_20_times(tmp_path) -> None:
    mod = loopir.build(transpose_schedule().func, target="cuda", cache_dir=tmp_path)
    assert mod.source.count("__syncthreads();") == 1
    a = np.random.default_rng(4).standard_normal((100, 70)).astype(np.float32)
    for _ in range(20):
        b = np.zeros((70, 100), np.float32)
        mod(a, b)
        np.testing.assert_array_equal(b, a.T)


def test_accumulation_guarded_to_one_thread_needs_no_barrier() -> None:
    # GPU fuzz finding: the guard `t < 1` was left out of the conflict check, so the one
    # thread's read-modify-write of R looked shared and ThreadSync refused the kernel
    A = Buffer("A", (2, 4), "float32")
    R = Buffer("R", (2,), "float32")
    b, t, k = Var("b"), Var("t"), Var("k")
    body = _bind(b, 2, "blockIdx.x", _bind(t, 8, "threadIdx.x", _loop(k, 4, IfThenElse(
        t < 1, BufferStore(R, R[b] + A[b, k], (b,))))))
    g = Sequential([ThreadSync()])(PrimFunc((A, R), body, name="guarded_sum"))
    assert _syncs(g) == 0
    assert not find_races(g).races and not find_races(g).unproven
    a = np.random.default_rng(5).random((2, 4), dtype=np.float32)
    out = run_cpu(g, [a, np.zeros(2, np.float32)], {"thread_order": "random", "seed": 0})
    np.testing.assert_allclose(out[1], a.sum(axis=1), rtol=1e-6)


@pytest.mark.gpu
def test_hand_lowered_kernels_on_the_gpu_20_runs(tmp_path) -> None:
    """The two-stage row sum and the vthread read-modify-write (issue 11 items 1 and 2) built
    by build_cuda, which plans their barriers and folds the virtual threads itself."""
    rng = np.random.default_rng(6)
    a = rng.random((3, 128), dtype=np.float32)
    mod = loopir.build(two_stage_row_sum(), target="cuda", cache_dir=tmp_path)
    for _ in range(20):
        r = np.zeros(3, np.float32)
        mod(a, r)
        np.testing.assert_allclose(r, a.astype(np.float64).sum(axis=1), rtol=1e-5)
    B = Buffer("B", (1,), "float32")
    vx, t = Var("vx"), Var("t")
    inc = PrimFunc((B,), _bind(Var("b"), 1, "blockIdx.x", _bind(vx, 2, "vthread.x", _bind(
        t, 1, "threadIdx.x", BufferStore(B, B[0] + 1.0, (0,))))), name="inc")
    mod = loopir.build(inc, target="cuda", cache_dir=tmp_path)
    for _ in range(20):
        b = np.zeros(1, np.float32)
        mod(b)
        assert b[0] == 2.0


def _versioned(shift: int, with_barrier: bool = True) -> PrimFunc:
    """Rounds ``r`` of a 4-version ring: (barrier,) fill version ``(r + shift) % 4`` from A, read
    a neighbour's element of version ``r % 4`` (filled ``shift`` rounds before; the first
    rounds read the zeros the prologue stored)."""
    A = Buffer("A", (8, 32), "float32")
    B = Buffer("B", (8, 32), "float32")
    S = Buffer("S", (4, 32), "float32", scope="shared")
    t, r, v = Var("t"), Var("r"), Var("v")
    steps = [BufferStore(S, A[r, t], ((r + shift) % 4, t)), BufferStore(B, S[r % 4, 31 - t], (r, t))]
    if with_barrier:
        steps.insert(0, Evaluate(op.storage_sync("shared")))
    body = _bind(Var("b"), 1, "blockIdx.x", Allocate(S, _bind(t, 32, "threadIdx.x", seq(
        _loop(v, 4, BufferStore(S, 0.0, (v, t))),
        _loop(r, 8, seq(*steps)),
    ))))
    return PrimFunc((A, B), body, name=f"ring{shift}")


@pytest.mark.parametrize("shift", [1, 2, 3])
def test_a_barrier_every_iteration_makes_two_versions_of_one_iteration_disjoint(shift: int) -> None:
    """After the barrier at the top of each round, the threads run one round: the fill of
    version ``(r + shift) % 4`` and the reads of version ``r % 4`` never meet (ThreadSync and the
    race checker both know it), and the one barrier orders the fill after the last round's
    reads of that version (pipelines: ``loopir.pipeline_wait_first``)."""
    g = Sequential([ThreadSync()])(_versioned(shift))
    assert _syncs(g) == 2  # the one after the prologue's zeros, and the round's own
    report = find_races(g)
    assert not report.races and not report.unproven
    a = np.random.default_rng(shift).random((8, 32), dtype=np.float32)
    want = np.zeros((8, 32), np.float32)
    for r in range(shift, 8):
        want[r] = a[r - shift, ::-1]
    for seed in range(3):
        out = run_cpu(g, [a, np.zeros((8, 32), np.float32)], {"thread_order": "random", "seed": seed})
        np.testing.assert_array_equal(out[1], want)


@pytest.mark.parametrize("shift", [0, 4])
def test_one_version_in_one_iteration_still_gets_a_barrier(shift: int) -> None:
    """The same ring where the fill and the reads hit one version (``shift`` 0 or 4): ThreadSync
    adds a barrier between them, and the race checker proves the result."""
    g = Sequential([ThreadSync()])(_versioned(shift))
    assert _syncs(g) == 3
    report = find_races(g)
    assert not report.races and not report.unproven


def test_a_barrier_thread_sync_inserts_every_iteration_counts_too() -> None:
    """Without the round's barrier, the fill of a round must wait for the reads of earlier
    rounds: ThreadSync puts a barrier at the top of the round, and after it the fill and the
    reads of the round are of one iteration again (2 barriers, race-free)."""
    g = Sequential([ThreadSync()])(_versioned(1, with_barrier=False))
    assert _syncs(g) == 2
    loop = g.body.body.body.body.seq[-1]  # block, allocate, thread loop, seq: the rounds
    assert isinstance(loop, For) and _syncs(loop) == 1
    report = find_races(g)
    assert not report.races and not report.unproven


@pytest.mark.parametrize("shift, racy", [(1, False), (3, False), (4, True), (0, True)])
def test_the_race_checker_tells_two_versions_from_one(shift: int, racy: bool) -> None:
    """The ring as written, no ThreadSync (a barrier at the top of each round only): the race
    checker proves versions ``(r + shift) % 4`` and ``r % 4`` of one round disjoint for shift 1
    and 3, and finds the race when they are one version (shift 0, 4)."""
    g = _versioned(shift)
    body = g.body.body.body.body  # block, allocate, thread loop: the prologue's zeros, the rounds
    g = g.with_body(attrs.evolve(g.body, body=attrs.evolve(g.body.body, body=attrs.evolve(
        g.body.body.body, body=seq(body.seq[0], Evaluate(op.storage_sync("shared")), body.seq[1])))))
    report = find_races(g)
    assert bool(report.races) == racy, report
    assert not report.unproven


def _warp_rounds(width: int) -> PrimFunc:
    """Rounds of: fill S[t], a ``width``-thread allreduce (in a local accumulator), read
    S[31 - t]. Only a reduction over more than a warp is a barrier between the fill and the
    read (a warp's is shuffles)."""
    A = Buffer("A", (4, 64), "float32")
    B = Buffer("B", (4, 64), "float32")
    S = Buffer("S", (64,), "float32", scope="shared")
    acc = Buffer("acc", (1,), "float32", scope="local")
    t, r = Var("t"), Var("r")
    round_ = seq(BufferStore(S, A[r, t], (t,)), BufferStore(acc, A[r, t], (0,)),
                 Evaluate(op.thread_allreduce("sum", acc[0], width)),
                 BufferStore(B, S[width - 1 - t] + acc[0], (r, t)))  # fmt: skip
    body = Allocate(S, Allocate(acc, _bind(t, width, "threadIdx.x", _loop(r, 4, round_))))
    return PrimFunc((A, B), _bind(Var("b"), 1, "blockIdx.x", body), name=f"warp_rounds_{width}")


@pytest.mark.parametrize("width", [32, 64])
def test_a_warp_reduction_is_no_barrier_but_a_wider_one_is(width: int) -> None:
    """A reduction over one warp emits no __syncthreads (it is shuffles): ThreadSync plans the
    barriers the shared fill and read need around it (a RAW after the fill, a WAR before the
    next round's); over two warps the reduction is the RAW's barrier itself."""
    f = _warp_rounds(width)
    assert find_races(f).races  # the next round's fill against this round's read, at least
    g = Sequential([ThreadSync()])(f)
    assert _syncs(g) == (2 if width == 32 else 1)
    assert not find_races(g).races and not find_races(g).unproven
    a = np.random.default_rng(4).random((4, 64), dtype=np.float32)
    want = a[:, :width][:, ::-1] + a[:, :width].sum(axis=1, keepdims=True)
    for seed in range(5):
        out = run_cpu(g, [a, np.zeros((4, 64), np.float32)], {"thread_order": "random", "seed": seed})
        np.testing.assert_allclose(out[1][:, :width], want, rtol=1e-5)


def test_a_warp_allreduce_emits_shuffles_without_a_barrier() -> None:
    from loopir.codegen_cuda.allreduce import ALLREDUCE_HELPERS

    warp_path = ALLREDUCE_HELPERS.split("if (NT <= 32) {")[1].split("}")[0]
    assert "__shfl_sync" in warp_path and "__syncthreads" not in warp_path
    assert op.is_block_barrier(op.storage_sync("shared"))
    assert not op.is_block_barrier(Evaluate(op.storage_sync("shared")))  # the call, not the statement


def test_a_loop_whose_tail_is_an_else_branch_is_planned_once() -> None:
    # the round's last statement is an if / else on the round (not on the thread): its else
    # branch's accesses are the tail the next round meets. They keep their identity from one
    # plan of the body to the next (a new Not(condition) per plan made them new accesses every
    # time, and the planning never settled: a CI run grew to 13 GB); the plan then orders the
    # next round's fill after this round's reads
    A = Buffer("A", (4, 32), "float32")
    B = Buffer("B", (4, 32), "float32")
    S = Buffer("S", (32,), "float32", scope="shared")
    t, r = Var("t"), Var("r")
    body = _bind(Var("b"), 1, "blockIdx.x", Allocate(S, _bind(t, 32, "threadIdx.x", _loop(r, 4, seq(
        BufferStore(S, A[r, t], (t,)),
        IfThenElse(r < 2, BufferStore(B, S[31 - t], (r, t)), BufferStore(B, S[t] + S[31 - t], (r, t))),
    )))))
    g = ThreadSync()(PrimFunc((A, B), body, name="tail_else"))
    assert _syncs(g) == 2
    assert not find_races(g).races and not find_races(g).unproven
    a = np.random.default_rng(4).random((4, 32), dtype=np.float32)
    want = np.concatenate([a[:2, ::-1], a[2:] + a[2:, ::-1]])
    for seed in range(3):
        out = run_cpu(g, [a, np.zeros((4, 32), np.float32)], {"thread_order": "random", "seed": seed})
        np.testing.assert_allclose(out[1], want, rtol=1e-6)
