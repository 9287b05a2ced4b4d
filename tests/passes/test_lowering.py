"""LowerBlocks, UnifyThreadLoops, CompactBufferAllocation, Simplify, ThreadSync.

Each pass preserves the meaning of the function: checked on the CPU executor for the passes
that keep the sequential meaning, and with the CPU executor's ``thread_order='random'`` mode
(threads in random orders between barriers) for the full pipeline, whose unified cooperative
fetches only mean something for parallel threads.
"""

from __future__ import annotations

import numpy as np
import pytest
from _passes_util import (
    assert_close,
    assert_lowered_form,
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
from loopir import te
from loopir.errors import PassError
from loopir.ir import (
    Allocate,
    Buffer,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Var,
    op,
    seq,
)
from loopir.passes import (
    CompactBufferAllocation,
    LowerBlocks,
    PassContext,
    RecordIRInstrument,
    Simplify,
    ThreadSync,
    UnifyThreadLoops,
)
from loopir.passes.thread_sync import is_sync


def _matmul_split(M: int, K: int, N: int, k_lo: int = 0) -> loopir.Schedule:
    A = te.placeholder((M, K + k_lo), "float32", name="A")
    B = te.placeholder((K + k_lo, N), "float32", name="B")
    k = te.reduce_axis((k_lo, K + k_lo), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((M, N), lambda i, j: C[i, j] + 1.0, name="D")
    sch = loopir.Schedule(te.create_prim_func([A, B, D]))
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 3])
    return sch


def test_lower_blocks_structure_and_equivalence() -> None:
    sch = _matmul_split(8, 5, 5, k_lo=1)
    f = LowerBlocks()(sch.func)
    assert_lowered_form(f)
    ifs = nodes(f.body, IfThenElse)
    conds = sorted(text(i.condition) for i in ifs)
    assert conds == ["i_0 * 3 + i_1 < 8", "k + 1 == 1"]
    # the init guard sits inside the predicate guard, before the update
    outer = next(i for i in ifs if text(i.condition) == "i_0 * 3 + i_1 < 8")
    first = outer.then_case.seq[0]
    assert isinstance(first, IfThenElse) and text(first.condition) == "k + 1 == 1"
    assert [a.buffer.name for a in nodes(f.body, Allocate)] == ["C"]
    x = inputs(sch.func)
    assert_close(run_cpu(f, x)[2], run_cpu(sch.func, x)[2])
    a, b = x[0].astype(np.float64), x[1].astype(np.float64)
    assert_close(run_cpu(f, x)[2], a[:, 1:] @ b[1:, :] + 1.0)


def test_lower_blocks_decomposed_init_has_no_extra_guard() -> None:
    sch = loopir.examples.dense(20, 9, 30)
    f = LowerBlocks()(sch.func)
    (init,) = [s for s in store_to(f, "C_local") if not nodes(s.value, loopir.ir.BufferLoad)]
    x = inputs(sch.func)
    assert_close(run_cpu(f, x)[2], run_cpu(sch.func, x)[2])
    assert init is not None


@pytest.mark.parametrize("shape", [(20, 9, 30), (130, 35, 260)])
def test_each_sequential_pass_preserves_meaning(shape: tuple[int, int, int]) -> None:
    sch = loopir.examples.dense(*shape)
    x = inputs(sch.func, seed=1)
    want = run_cpu(sch.func, x)[2]
    rec = RecordIRInstrument()
    with PassContext(instruments=[rec]):
        sequential_pipeline(pad=False)(sch.func)
    assert rec.names() == [
        "LowerBlocks", "CompactBufferAllocation", "Simplify", "InjectVirtualThread", "ThreadSync",
    ]  # fmt: skip
    for name, f in rec.history:
        assert_close(run_cpu(f, x)[2], want)
        assert name  # every intermediate IR runs and agrees


def test_dense_lowered_form_compaction_and_sync() -> None:
    sch = loopir.examples.dense(960, 770, 2304)
    f = loopir.lower(sch.func)
    assert_lowered_form(f)
    allocs = {a.buffer.name: a for a in nodes(f.body, Allocate)}
    assert {n: tuple(int(s.value) for s in a.buffer.shape) for n, a in allocs.items()} == {
        "A_shared": (128, 4), "B_shared": (4, 128), "C_local": (2, 16, 2),
    }  # fmt: skip
    # the vthread loop is folded into the thread: 2 x 32 accumulators per real thread
    assert not [x for x in nodes(f.body, For) if (x.thread_tag or "").startswith("vthread")]
    # shared tiles live above the thread loops (under blockIdx), the local tile per thread
    (bx,) = [x for x in nodes(f.body, For) if x.thread_tag == "blockIdx.x"]
    assert isinstance(bx.body, Allocate) and bx.body.buffer.name == "A_shared"
    (tx,) = [x for x in nodes(f.body, For) if x.thread_tag == "threadIdx.x"]
    assert isinstance(tx.body, Allocate) and tx.body.buffer.name == "C_local"
    # one threadIdx.x loop: the cooperative fetch uses the outer thread variable
    for s in store_to(f, "A_shared") + store_to(f, "B_shared"):
        assert tx.loop_var in loopir.ir.collect_vars(s)
    # k0 body: barrier, fetch A, fetch B, barrier, compute
    (k0,) = [x for x in nodes(f.body, For) if x.loop_var.name == "k_0"]
    kinds = ["sync" if is_sync(s) else "stmt" for s in k0.body.seq]
    assert kinds == ["sync", "stmt", "stmt", "sync", "stmt"]
    assert len([s for s in nodes(f.body, Evaluate) if is_sync(s)]) == 2


@pytest.mark.parametrize("shape", [(20, 9, 30), (60, 50, 70)])
def test_full_lowering_matches_numpy_on_simt(shape: tuple[int, int, int]) -> None:
    sch = loopir.examples.dense(*shape)
    x = inputs(sch.func, seed=2)
    want = x[0].astype(np.float64) @ x[1].astype(np.float64)
    f = lower_with(sch.func, pad=False)
    assert_close(run_simt(f, x)[2], want)


def test_simt_detects_a_missing_barrier() -> None:
    """The random-order executor is a real check: without ThreadSync the result is wrong."""
    sch = loopir.examples.dense(20, 9, 30)
    x = inputs(sch.func)
    from loopir.passes import Sequential

    f = Sequential([LowerBlocks(), UnifyThreadLoops(), CompactBufferAllocation(), Simplify()])(sch.func)
    want = x[0].astype(np.float64) @ x[1].astype(np.float64)
    for seed in range(3):
        got = run_cpu_random(f, x, seed)[2]
        assert np.isnan(got).any() or not np.allclose(got, want, rtol=1e-4)


def run_cpu_random(f: PrimFunc, arrays: list[np.ndarray], seed: int) -> list[np.ndarray]:
    args = [a.copy() for a in arrays]
    loopir.build(f, target="cpu", thread_order="random", seed=seed)(*args)
    return args


def _tx(var: Var, extent: int, body: object) -> For:
    return For(var, 0, extent, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")


def test_unify_rejects_different_extents() -> None:
    a = Buffer("A", (64,), "float32")
    t0, t1 = Var("t0"), Var("t1")
    body = _tx(t0, 32, _tx(t1, 16, BufferStore(a, 1.0, (t1,))))
    with pytest.raises(PassError, match=r"UnifyThreadLoops.*t1.*threadIdx\.x.*t0"):
        UnifyThreadLoops()(PrimFunc((a,), body))


def test_unify_substitutes_outer_var() -> None:
    a = Buffer("A", (64,), "float32")
    t0, t1 = Var("t0"), Var("t1")
    f = UnifyThreadLoops()(PrimFunc((a,), _tx(t0, 32, _tx(t1, 32, BufferStore(a, 1.0, (t1 * 2,))))))
    (loop,) = nodes(f.body, For)
    assert loop.loop_var is t0
    (st,) = nodes(f.body, BufferStore)
    assert loopir.ir.collect_vars(st.indices[0]) == [t0]


def test_thread_sync_refuses_barrier_under_thread_condition() -> None:
    a = Buffer("A", (32,), "float32")
    s = Buffer("S", (32,), "float32", scope="shared")
    t = Var("t")
    inner = seq(BufferStore(s, a[t], (t,)), BufferStore(a, s[31 - t], (t,)))
    # threads 0..15 read what threads 0..15 wrote: a barrier is needed under the condition
    guarded = seq(BufferStore(s, a[t], (t,)), BufferStore(a, s[15 - t], (t,)))
    body = Allocate(s, _tx(t, 32, IfThenElse(t < 16, guarded)))
    with pytest.raises(PassError, match="ThreadSync.*not every thread reaches"):
        ThreadSync()(PrimFunc((a,), body))
    # under `t < 16` the threads that write s[0:16] read s[16:32]: no exchange, no barrier
    disjoint = ThreadSync()(PrimFunc((a,), Allocate(s, _tx(t, 32, IfThenElse(t < 16, inner)))))
    assert not any(is_sync(x) for x in nodes(disjoint.body, Evaluate))
    # with a uniform structure the barrier goes between the write and the read
    ok = ThreadSync()(PrimFunc((a,), Allocate(s, _tx(t, 32, inner))))
    stmts = nodes(ok.body, For)[0].body.seq
    assert [is_sync(x) for x in stmts] == [False, True, False]


def test_thread_sync_loop_carried_write_after_read() -> None:
    a = Buffer("A", (8, 32), "float32")
    s = Buffer("S", (32,), "float32", scope="shared")
    t, k = Var("t"), Var("k")
    body = seq(BufferStore(s, a[k, t], (t,)), BufferStore(a, s[31 - t] + 1.0, (k, t)))
    f = ThreadSync()(PrimFunc((a,), Allocate(s, _tx(t, 32, For(k, 0, 8, ForKind.SERIAL, body)))))
    (loop,) = [x for x in nodes(f.body, For) if x.loop_var is k]
    assert [is_sync(x) for x in loop.body.seq] == [True, False, True, False]
    x = inputs(f)
    want = x[0].copy()
    for kk in range(8):
        want[kk] = x[0][kk][::-1] + 1.0
    assert_close(run_simt(f, x)[0], want)


def test_compact_drops_unused_and_keeps_global() -> None:
    a = Buffer("A", (16,), "float32")
    tmp = Buffer("T", (16,), "float32", scope="local")
    unused = Buffer("U", (16,), "float32", scope="shared")
    g = Buffer("G", (16,), "float32")
    i, j = Var("i"), Var("j")
    body = Allocate(unused, Allocate(g, Allocate(tmp, For(i, 0, 4, ForKind.SERIAL, seq(
        For(j, 0, 4, ForKind.SERIAL, BufferStore(tmp, a[i * 4 + j] * 2.0, (i * 4 + j,))),
        For(j, 0, 4, ForKind.SERIAL, BufferStore(a, tmp[i * 4 + j] + 1.0, (i * 4 + j,))),
    )))))  # fmt: skip
    f = PrimFunc((a,), body)
    out = CompactBufferAllocation()(f)
    names = {x.buffer.name: x for x in nodes(out.body, Allocate)}
    assert set(names) == {"G", "T"}
    assert [int(s.value) for s in names["T"].buffer.shape] == [4]
    (loop_i,) = [x for x in nodes(out.body, For) if x.loop_var is i]
    assert isinstance(loop_i.body, Allocate)  # moved to the LCA: inside the i loop
    x = inputs(f)
    assert_close(run_cpu(out, x)[0], run_cpu(f, x)[0])


def test_simplify_removes_provably_true_guards() -> None:
    a = Buffer("A", (12,), "float32")
    i, j = Var("i"), Var("j")
    body = For(i, 0, 3, ForKind.SERIAL, For(j, 0, 4, ForKind.SERIAL,
               IfThenElse(op.all_(i * 4 + j < 12, j < 100), BufferStore(a, a[i * 4 + j] + 1.0, (i * 4 + j,)))))  # fmt: skip
    out = Simplify()(PrimFunc((a,), body))
    assert not nodes(out.body, IfThenElse)


def test_simplify_knows_a_loop_of_extent_max_e_0_runs_below_e() -> None:
    """A pipeline's steady loop ``for j in range(max(n - 2, 0))`` runs only while ``j < n - 2``:
    the guard ``j + 1 < n - 1`` (its tile before the last) is proven true; ``j + 2 < n - 1`` is not."""
    from loopir.ir.expr import IntImm, Max

    a = Buffer("A", (12,), "float32")
    n, j = Var("n"), Var("j")
    for bound, folds in ((j + 1 < n - 1, True), (j + 2 < n - 1, False)):
        body = For(j, 0, Max(n - 2, IntImm(0, "int32")), ForKind.SERIAL, IfThenElse(bound, BufferStore(a, a[j] + 1.0, (j,))))
        out = Simplify()(PrimFunc((a,), body))
        assert (not nodes(out.body, IfThenElse)) is folds
        assert "T.max(n - 2, 0)" in out.script()  # the extent itself is kept


def test_lower_unscheduled_te_workloads_match_numpy() -> None:
    n = Var("n")
    A = te.placeholder((n, 6), "float32", name="A")
    B = te.placeholder((6, 5), "float32", name="B")
    k = te.reduce_axis(6, name="k")
    C = te.compute((n, 5), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    r = te.reduce_axis(5, name="r")
    M = te.compute((n,), lambda i: te.max(C[i, r], axis=r), name="M")
    f = te.create_prim_func([A, B, M])
    for pad in (False, True):
        g = lower_with(f, pad=pad)
        assert_lowered_form(g)
        x = inputs(f, seed=4, sizes={"n": 7})
        want = (x[0].astype(np.float64) @ x[1].astype(np.float64)).max(axis=1)
        assert_close(run_cpu(g, x)[2], want)


def test_lowered_only_passes_refuse_blocks() -> None:
    from loopir.passes import InjectVirtualThread, LocalPadding

    func = loopir.examples.dense(20, 9, 30).func
    for p in (CompactBufferAllocation(), LocalPadding(), ThreadSync(), InjectVirtualThread()):
        with pytest.raises(PassError, match=rf"{p.name} needs lowered IR.*block '\w+'.*LowerBlocks"):
            p(func)


@pytest.mark.parametrize("pad", [False, True])
def test_lower_is_idempotent(pad: bool) -> None:
    f = lower_with(loopir.examples.dense(130, 35, 260).func, pad=pad)
    loopir.assert_structural_equal(lower_with(f, pad=pad), f)


def test_lower_at_opt_level_0_skips_simplify_and_stays_correct() -> None:
    sch = loopir.examples.dense(20, 9, 30)
    rec = RecordIRInstrument()
    with PassContext(opt_level=0, config={"tir.enable_local_pad": True}, instruments=[rec]):
        f = loopir.lower(sch.func)
    assert "Simplify" not in rec.names() and "LocalPadding" in rec.names()
    assert_lowered_form(f)
    x = inputs(sch.func, seed=9)
    assert_close(run_simt(f, x)[2], x[0].astype(np.float64) @ x[1].astype(np.float64))
