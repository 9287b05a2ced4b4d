"""The CPU executor on hand-built IR: lowered form (Allocate, IfThenElse, thread-bound loops,
Ramp/Broadcast) and TensorIR blocks with predicates, plus its error reporting."""

from __future__ import annotations

import os

import numpy as np
import pytest
from strategies import empty_like_param, random_nonzero

import loopir
from loopir.errors import CodegenError, LaunchError
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import Broadcast, BufferLoad, IntImm, Ramp, Var
from loopir.ir.op import all_, floordiv, if_then_else, storage_sync, thread_allreduce
from loopir.ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    IterKind,
    IterVar,
    PrimFunc,
    seq,
)


def loop(var: Var, extent, body, kind=ForKind.SERIAL, tag=None, lo=0) -> For:
    return For(var, lo, extent, kind, body, thread_tag=tag)


def lowered_add_scale(n: int) -> PrimFunc:
    """C[i] = 2 * A[i] + B[i] via a shared staging buffer, guarded blockIdx/threadIdx loops,
    a vthread loop, and a vectorized tail written with Ramp/Broadcast."""
    A = Buffer("A", (n,), "float32")
    B = Buffer("B", (n,), "float32")
    C = Buffer("C", (n,), "float32")
    V = Buffer("V", (n,), "float32")
    S = Buffer("S", (32,), "float32", scope="shared")
    L = Buffer("L", (2,), "float32", scope="local")
    bx, tx, vt = Var("bx"), Var("tx"), Var("vt")
    nblocks = (n + 31) // 32
    idx = bx * 32 + tx
    fetch = IfThenElse(idx < n, BufferStore(S, BufferLoad(A, (idx,)), (tx,)))
    compute = IfThenElse(
        idx < n,
        seq(
            loop(vt, 2, BufferStore(L, BufferLoad(S, (tx,)) * 1.0, (vt,)), ForKind.THREAD_BINDING, "vthread.x"),
            BufferStore(C, BufferLoad(L, (0,)) + BufferLoad(L, (1,)) + BufferLoad(B, (idx,)), (idx,)),
        ),
        BufferStore(S, BufferLoad(S, (tx,)), (tx,)),  # else branch: harmless self-copy
    )
    body = Allocate(
        S,
        seq(
            loop(tx, 32, fetch, ForKind.THREAD_BINDING, "threadIdx.x"),
            Evaluate(storage_sync("shared")),
            loop(tx, 32, Allocate(L, compute), ForKind.THREAD_BINDING, "threadIdx.x"),
        ),
    )
    gpu_part = loop(bx, nblocks, body, ForKind.THREAD_BINDING, "blockIdx.x")
    v = Var("v")
    lanes = 4
    vec = loop(
        v,
        n // lanes,
        BufferStore(
            V,
            BufferLoad(A, (Ramp(v * lanes, IntImm(1), lanes),)) + Broadcast(loopir.ir.FloatImm(1.0), lanes),
            (Ramp(v * lanes, IntImm(1), lanes),),
        ),
        ForKind.VECTORIZED,
    )
    return PrimFunc((A, B, C, V), seq(gpu_part, vec))


def test_lowered_ir_runs() -> None:
    n = 100
    mod = loopir.build(lowered_add_scale(n), target="cpu")
    a, b = random_nonzero((n,), "float32", 1), random_nonzero((n,), "float32", 2)
    c, v = empty_like_param((n,), "float32"), empty_like_param((n,), "float32")
    mod(a, b, c, v)
    np.testing.assert_allclose(c, 2 * a + b, rtol=1e-6)
    np.testing.assert_allclose(v, a + 1, rtol=1e-6)


def split_guarded(n: int, factor: int, predicate: bool) -> PrimFunc:
    """B[v] = A[v] + 1 over an inexact split i0 * factor + i1, optionally predicated."""
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    i0, i1, vv = Var("i0"), Var("i1"), Var("v_i")
    blk = Block(
        "B",
        (IterVar(vv, Range(0, n), IterKind.SPATIAL),),
        (BufferRegion(A, (Range(vv, 1),)),),
        (BufferRegion(B, (Range(vv, 1),)),),
        BufferStore(B, BufferLoad(A, (vv,)) + 1.0, (vv,)),
    )
    binding = i0 * factor + i1
    realize = BlockRealize((binding,), binding < n if predicate else IntImm(1, "bool"), blk)
    outer = -(-n // factor)
    nest = loop(i0, outer, loop(i1, factor, realize))
    root = Block("root", (), (), (), nest)
    return PrimFunc((A, B), BlockRealize((), block=root))


def test_block_predicate_guards_inexact_split() -> None:
    mod = loopir.build(split_guarded(10, 4, predicate=True), target="cpu")
    a = random_nonzero((10,), "float32", 3)
    b = empty_like_param((10,), "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a + 1)


def test_block_binding_outside_domain_is_reported() -> None:
    mod = loopir.build(split_guarded(10, 4, predicate=False), target="cpu")
    with pytest.raises(LaunchError, match=r"block B: iter var v_i is bound to 10, outside its domain \[0, 10\)"):
        mod(random_nonzero((10,), "float32", 3), empty_like_param((10,), "float32"))


def reduction_with_alloc(n: int, k: int) -> PrimFunc:
    """Row sums through a block-local scratch buffer and an init that needs reduce var == min."""
    A, out = Buffer("A", (n, k), "float32"), Buffer("out", (n,), "float32")
    T = Buffer("T", (n,), "float32")
    i, r, vi, vr = Var("i"), Var("r"), Var("v_i"), Var("v_r")
    red = Block(
        "T",
        (IterVar(vi, Range(0, n), IterKind.SPATIAL), IterVar(vr, Range(2, k - 2), IterKind.REDUCE)),
        (BufferRegion(A, (Range(vi, 1), Range(vr, 1))),),
        (BufferRegion(T, (Range(vi, 1),)),),
        BufferStore(T, BufferLoad(T, (vi,)) + BufferLoad(A, (vi, vr)), (vi,)),
        init=BufferStore(T, 0.5, (vi,)),
    )
    stage1 = loop(i, n, loop(r, k - 2, BlockRealize((i, r + 2), block=red)))
    j, vj = Var("j"), Var("v_j")
    cp = Block(
        "out",
        (IterVar(vj, Range(0, n), IterKind.SPATIAL),),
        (BufferRegion(T, (Range(vj, 1),)),),
        (BufferRegion(out, (Range(vj, 1),)),),
        BufferStore(out, BufferLoad(T, (vj,)), (vj,)),
    )
    stage2 = loop(j, n, BlockRealize((j,), block=cp))
    root = Block("root", (), (), (), seq(stage1, stage2), alloc_buffers=(T,))
    return PrimFunc((A, out), BlockRealize((), block=root))


def test_block_init_runs_at_reduce_domain_min() -> None:
    mod = loopir.build(reduction_with_alloc(5, 7), target="cpu")
    a = random_nonzero((5, 7), "float32", 4)
    out = empty_like_param((5,), "float32")
    mod(a, out)
    np.testing.assert_allclose(out, 0.5 + a[:, 2:7].astype(np.float64).sum(axis=1), rtol=1e-6, atol=1e-6)


def test_uninitialized_allocation_reads_nan() -> None:
    A = Buffer("A", (4,), "float32")
    L = Buffer("L", (4,), "float32", scope="local")
    i = Var("i")
    f = PrimFunc((A,), Allocate(L, loop(i, 4, BufferStore(A, BufferLoad(L, (i,)), (i,)))))
    a = np.ones(4, np.float32)
    loopir.build(f, target="cpu")(a)
    assert np.isnan(a).all()


def shifted_load(n: int, guard: bool) -> PrimFunc:
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    i = Var("i")
    val = BufferLoad(A, (i + 1,))
    if guard:
        val = if_then_else(i + 1 < n, val, 0.0)
    return PrimFunc((A, B), loop(i, n, BufferStore(B, val, (i,))))


def test_out_of_bounds_load_is_reported() -> None:
    mod = loopir.build(shifted_load(8, guard=False), target="cpu")
    with pytest.raises(LaunchError, match=r"out-of-bounds load from buffer A\(8\): index 8 in dimension 0 is outside \[0, 8\)"):
        mod(random_nonzero((8,), "float32", 1), np.zeros(8, np.float32))


def test_guarded_load_in_unselected_branch_is_fine() -> None:
    mod = loopir.build(shifted_load(8, guard=True), target="cpu")
    a, b = random_nonzero((8,), "float32", 1), empty_like_param((8,), "float32")
    mod(a, b)
    np.testing.assert_array_equal(b, np.append(a[1:], 0.0))


def test_out_of_bounds_store_is_reported_and_not_performed() -> None:
    A = Buffer("A", (2, 3), "float32")
    i, j = Var("i"), Var("j")
    f = PrimFunc((A,), loop(i, 2, loop(j, 4, BufferStore(A, 1.0, (i, j)))))
    big = np.zeros(16, np.float32)
    a = big[:6].reshape(2, 3)  # contiguous view: an unchecked A[0, 3] would hit A[1, 0]
    with pytest.raises(LaunchError, match=r"out-of-bounds store to buffer A\(2, 3\): index 3 in dimension 1"):
        loopir.build(f, target="cpu")(a)
    assert a[0].tolist() == [1.0, 1.0, 1.0]
    assert (a[1] == 0).all() and (big[6:] == 0).all()  # nothing written past the error


def test_division_by_zero_is_reported() -> None:
    A, B = Buffer("A", (3,), "int32"), Buffer("B", (3,), "int32")
    i = Var("i")
    f = PrimFunc((A, B), loop(i, 3, BufferStore(B, floordiv(BufferLoad(A, (i,)), i), (i,))))
    with pytest.raises(LaunchError, match="division by zero"):
        loopir.build(f, target="cpu", check_bounds=False)(np.ones(3, np.int32), np.zeros(3, np.int32))


def test_thread_loops_and_nested_guards_with_all() -> None:
    # a 2-D guard built with all_, a Select and a vthread loop: checks boolean lowering
    A, B = Buffer("A", (6, 5), "float32"), Buffer("B", (6, 5), "float32")
    ty, tx = Var("ty"), Var("tx")
    cond = all_(ty < 6, tx < 5)
    body = IfThenElse(cond, BufferStore(B, if_then_else(tx > 0, BufferLoad(A, (ty, tx - 1)), -1.0), (ty, tx)))
    f = PrimFunc((A, B), loop(ty, 8, loop(tx, 8, body, ForKind.THREAD_BINDING, "threadIdx.x"), ForKind.THREAD_BINDING, "threadIdx.y"))
    a, b = random_nonzero((6, 5), "float32", 9), empty_like_param((6, 5), "float32")
    loopir.build(f, target="cpu")(a, b)
    expect = np.concatenate([-np.ones((6, 1), np.float32), a[:, :-1]], axis=1)
    np.testing.assert_array_equal(b, expect)


# --------------------------------------------------------------------------------------------
# argument checking
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sym_mod() -> loopir.runtime.CPUModule:
    n = Var("n")
    A, B = Buffer("A", (n, 2), "float32"), Buffer("B", (n * 2,), "float32")
    i = Var("i")
    f = PrimFunc((A, B), loop(i, n * 2, BufferStore(B, BufferLoad(A, (floordiv(i, 2), i % 2)), (i,))))
    return loopir.build(f, target="cpu")


def test_symbolic_shapes_bind_and_run(sym_mod) -> None:
    a = random_nonzero((5, 2), "float32", 1)
    b = empty_like_param((10,), "float32")
    sym_mod(a, b)
    np.testing.assert_array_equal(b, a.reshape(-1))


@pytest.mark.parametrize(
    "args, pattern",
    [
        ((np.zeros((3, 2), np.float32),), r"expected 2 arrays \(A, B\), got 1"),
        (([[0.0, 0.0]], np.zeros(2, np.float32)), r"argument 0 \(A\): expected a numpy.ndarray, got list"),
        ((np.zeros((3, 2), np.float64), np.zeros(6, np.float32)), r"argument 0 \(A\): dtype float64 does not match float32"),
        ((np.zeros((3, 2, 1), np.float32), np.zeros(6, np.float32)), r"argument 0 \(A\): array has 3 dimensions"),
        ((np.zeros((3, 3), np.float32), np.zeros(6, np.float32)), r"argument 0 \(A\): shape \(3, 3\) does not match .* dimension 1 should be 2"),
        ((np.zeros((3, 2), np.float32), np.zeros(7, np.float32)), r"argument 1 \(B\): shape \(7,\) .* dimension 0 should be 6 \(with n=3\)"),
        ((np.zeros((2, 6), np.float32)[:, ::3], np.zeros(4, np.float32)), r"argument 0 \(A\): array is not C-contiguous"),
    ],
)  # fmt: skip
def test_bad_arguments_raise_launch_error(sym_mod, args, pattern) -> None:
    with pytest.raises(LaunchError, match=pattern):
        sym_mod(*args)


def test_read_only_output_rejected(sym_mod) -> None:
    b = np.zeros(6, np.float32)
    b.flags.writeable = False
    with pytest.raises(LaunchError, match=r"argument 1 \(B\): the function writes this buffer"):
        sym_mod(np.zeros((3, 2), np.float32), b)


# --------------------------------------------------------------------------------------------
# build errors, options and the cache
# --------------------------------------------------------------------------------------------


def test_unknown_target_and_option() -> None:
    f = shifted_load(4, guard=True)
    with pytest.raises(CodegenError, match="unknown target 'metal'"):
        loopir.build(f, target="metal")
    with pytest.raises(CodegenError, match="unknown option.*check_bound"):
        loopir.build(f, target="cpu", check_bound=False)
    with pytest.raises(CodegenError, match="expected a PrimFunc"):
        loopir.build("not a func", target="cpu")


def test_undefined_variable_and_buffer() -> None:
    A = Buffer("A", (4,), "float32")
    i, stray = Var("i"), Var("stray")
    f = PrimFunc((A,), loop(i, 4, BufferStore(A, 1.0, (stray,))))
    with pytest.raises(CodegenError, match="variable 'stray' is used outside the scope"):
        loopir.build(f, target="cpu")
    G = Buffer("G", (4,), "float32")
    g = PrimFunc((A,), loop(i, 4, BufferStore(A, BufferLoad(G, (i,)), (i,))))
    with pytest.raises(CodegenError, match="buffer 'G' is accessed but is neither a parameter"):
        loopir.build(g, target="cpu")


def test_cache_hit_and_cache_dir_setting(tmp_path) -> None:
    f = shifted_load(6, guard=True)
    m1 = loopir.build(f, target="cpu", cache_dir=tmp_path)
    assert not m1.cache_hit and m1.compile_seconds > 0
    m2 = loopir.build(f, target="cpu", cache_dir=tmp_path)
    assert m2.cache_hit and m2.library_path == m1.library_path
    assert str(tmp_path) in m1.library_path
    other = tmp_path / "other"
    loopir.runtime.set_cache_dir(other)
    try:
        m3 = loopir.build(f, target="cpu")
        assert m3.library_path.startswith(str(other))
    finally:
        loopir.runtime.set_cache_dir(None)
    # unchecked builds are different code, hence a different library
    m4 = loopir.build(f, target="cpu", cache_dir=tmp_path, check_bounds=False)
    assert m4.library_path != m1.library_path and "lir_ck(err" not in m4.source


def test_compiler_failure_reports_log_and_source(tmp_path) -> None:
    f = shifted_load(6, guard=True)
    with pytest.raises(CodegenError, match=r"(?s)C compiler failed.*saved at .*\.c.*unrecognized"):
        loopir.build(f, target="cpu", cache_dir=tmp_path, extra_flags=["-fno-such-flag-xyz"])


# --------------------------------------------------------------------------------------------
# thread regions: threadIdx loops with barriers run with GPU block semantics
# --------------------------------------------------------------------------------------------


def cooperative_reverse(n_threads: int, per_thread: int, barrier: bool = True, diverge: bool = False) -> PrimFunc:
    """Each thread copies its slice of A into a shared tile, syncs, then writes the tile
    reversed: every output depends on another thread's copy."""
    n = n_threads * per_thread
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    S = Buffer("S", (n,), "float32", scope="shared")
    L = Buffer("L", (per_thread,), "float32", scope="local")
    tx, j, j2 = Var("tx"), Var("j"), Var("j2")
    fetch = loop(j, per_thread, BufferStore(S, BufferLoad(A, (tx * per_thread + j,)), (tx * per_thread + j,)))
    sync = Evaluate(storage_sync("shared"))
    if diverge:
        sync = IfThenElse(tx > 0, sync)
    # stage through a per-thread local buffer: threads must not share it
    stage = loop(j2, per_thread, BufferStore(L, BufferLoad(S, (n - 1 - (tx * per_thread + j2),)), (j2,)))
    write = loop(j, per_thread, BufferStore(B, BufferLoad(L, (j,)) * 2.0, (tx * per_thread + j,)))
    body = seq(fetch, sync, Allocate(L, seq(stage, write))) if barrier else seq(fetch, Allocate(L, seq(stage, write)))
    return PrimFunc((A, B), Allocate(S, loop(tx, n_threads, body, ForKind.THREAD_BINDING, "threadIdx.x")))


def test_thread_region_barrier_makes_cooperative_copy_visible() -> None:
    mod = loopir.build(cooperative_reverse(32, 3), target="cpu")
    assert "lir_run_fibers(" in mod.source
    a, b = random_nonzero((96,), "float32", 11), empty_like_param((96,), "float32")
    mod(a, b)
    np.testing.assert_array_equal(b, 2 * a[::-1])


def test_without_barrier_threads_run_serially() -> None:
    # no storage_sync: the sequential meaning, where early threads read uninitialized shared
    # memory (NaN) -- exactly the bug a missing barrier is
    mod = loopir.build(cooperative_reverse(4, 2, barrier=False), target="cpu")
    assert "lir_run_fibers(" not in mod.source
    a, b = random_nonzero((8,), "float32", 12), empty_like_param((8,), "float32")
    mod(a, b)
    assert np.isnan(b[:4]).all()
    np.testing.assert_array_equal(b[4:], 2 * a[::-1][4:])


def test_thread_regions_can_be_turned_off() -> None:
    mod = loopir.build(cooperative_reverse(4, 2), target="cpu", thread_regions=False)
    assert "lir_run_fibers(" not in mod.source
    a, b = random_nonzero((8,), "float32", 12), empty_like_param((8,), "float32")
    mod(a, b)  # serial meaning: the first threads read shared memory nobody wrote yet
    assert np.isnan(b[:4]).all()


def test_barrier_divergence_is_reported() -> None:
    mod = loopir.build(cooperative_reverse(4, 2, diverge=True), target="cpu")
    with pytest.raises(LaunchError, match="barrier divergence in a thread region: 3 of 4 threads"):
        mod(random_nonzero((8,), "float32", 1), empty_like_param((8,), "float32"))


def test_two_dimensional_thread_region_inside_block_loop() -> None:
    # blockIdx.x (serial) > threadIdx.y > threadIdx.x with a transpose through shared memory
    T = 4
    nb = 3
    A, B = Buffer("A", (nb, T, T), "float32"), Buffer("B", (nb, T, T), "float32")
    S = Buffer("S", (T, T), "float32", scope="shared")
    bx, ty, tx = Var("bx"), Var("ty"), Var("tx")
    inner = seq(
        BufferStore(S, BufferLoad(A, (bx, ty, tx)), (ty, tx)),
        Evaluate(storage_sync("shared")),
        BufferStore(B, BufferLoad(S, (tx, ty)) + 1.0, (bx, ty, tx)),
        Evaluate(storage_sync("shared")),  # before the next block iteration overwrites S
    )
    region = loop(ty, T, loop(tx, T, inner, ForKind.THREAD_BINDING, "threadIdx.x"), ForKind.THREAD_BINDING, "threadIdx.y")
    f = PrimFunc((A, B), loop(bx, nb, Allocate(S, region), ForKind.THREAD_BINDING, "blockIdx.x"))
    a, b = random_nonzero((nb, T, T), "float32", 13), empty_like_param((nb, T, T), "float32")
    loopir.build(f, target="cpu")(a, b)
    np.testing.assert_array_equal(b, a.transpose(0, 2, 1) + 1)


@pytest.mark.parametrize("check_bounds", [True, False])
def test_thread_allreduce_writes_the_accumulator_element_it_names(check_bounds: bool) -> None:
    """Issue 28: the total goes to ``L[1]`` (the element the call loads), not to ``L[0]``."""
    n = 8
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (2,), "float32")
    L = Buffer("L", (2,), "float32", scope="local")
    tx = Var("tx")
    body = seq(
        BufferStore(L, BufferLoad(A, (tx,)) * 0.0 - 1.0, (0,)),  # L[0] = -1: must stay
        BufferStore(L, BufferLoad(A, (tx,)), (1,)),
        Evaluate(thread_allreduce("sum", BufferLoad(L, (1,)), n)),
        IfThenElse(tx == 0, seq(BufferStore(B, BufferLoad(L, (0,)), (0,)), BufferStore(B, BufferLoad(L, (1,)), (1,)))),
    )
    f = PrimFunc((A, B), loop(tx, n, Allocate(L, body), ForKind.THREAD_BINDING, "threadIdx.x"))
    a, b = random_nonzero((n,), "float32", 14), empty_like_param((2,), "float32")
    loopir.build(f, target="cpu", check_bounds=check_bounds)(a, b)
    np.testing.assert_allclose(b, [-1.0, a.sum()], rtol=1e-6)


@pytest.mark.parametrize("local_pad", [False, True])
def test_lowered_dense_schedule_matches_numpy(local_pad: bool) -> None:
    # the real pipeline: the DietCode dense schedule, lowered with cooperative fetch unified
    M, K, N = 100, 37, 130
    sch = loopir.examples.dense(M, K, N)
    with loopir.PassContext(config={"tir.enable_local_pad": local_pad}):
        low = loopir.lower(sch.func)
    mod = loopir.build(low, target="cpu")
    a, b = random_nonzero((M, K), "float32", 1), random_nonzero((K, N), "float32", 2)
    c = empty_like_param((M, N), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_corrupt_cached_library_is_rebuilt(tmp_path) -> None:
    f = shifted_load(5, guard=True)
    m1 = loopir.build(f, target="cpu", cache_dir=tmp_path / "good")
    # Never rewrite a loaded library in place (that crashes the process); plant a corrupt
    # file under the same name in another cache directory instead. It fails its checksum
    # (issue 7: corrupted cache entries are detected and rebuilt, never loaded).
    bad_dir = tmp_path / "bad" / "cpu"
    bad_dir.mkdir(parents=True)
    (bad_dir / os.path.basename(m1.library_path)).write_bytes(b"not a shared library")
    m2 = loopir.build(f, target="cpu", cache_dir=tmp_path / "bad")
    assert not m2.cache_hit
    a, b = random_nonzero((5,), "float32", 1), empty_like_param((5,), "float32")
    m2(a, b)
    np.testing.assert_array_equal(b, np.append(a[1:], 0.0))


def test_benchmark_returns_median_ms() -> None:
    mod = loopir.build(shifted_load(64, guard=True), target="cpu")
    a, b = random_nonzero((64,), "float32", 1), empty_like_param((64,), "float32")
    ms = mod.benchmark(a, b, repeat=3)
    assert 0.0 < ms < 1000.0
    np.testing.assert_array_equal(b, np.append(a[1:], 0.0))
    with pytest.raises(LaunchError, match="need repeat >= 1"):
        mod.benchmark(a, b, repeat=0)


def test_unknown_intrinsic_is_a_codegen_error(monkeypatch) -> None:
    from loopir.ir.expr import INTRINSICS, Call, Intrinsic

    monkeypatch.setitem(INTRINSICS, "my_op", Intrinsic("my_op", 1))
    A = Buffer("A", (4,), "int8")
    i = Var("i")
    f = PrimFunc((A,), loop(i, 4, BufferStore(A, Call("int8", "my_op", (BufferLoad(A, (i,)),)), (i,))))
    with pytest.raises(CodegenError, match="no C translation for intrinsic 'my_op'"):
        loopir.build(f, target="cpu")


def test_integer_abs_wraps_like_cuda() -> None:
    from loopir.ir.op import fabs

    A = Buffer("A", (4,), "int8")
    i = Var("i")
    f = PrimFunc((A,), loop(i, 4, BufferStore(A, fabs(fabs(BufferLoad(A, (i,))) - IntImm(5, "int8")), (i,))))
    a = np.array([-128, -3, 7, 0], np.int8)
    loopir.build(f, target="cpu")(a)
    assert a.tolist() == [123, 2, 2, 5]  # |-128| wraps to -128 in int8; -133 wraps to 123


def test_strided_parameter_buffer() -> None:
    A = Buffer("A", (2, 3), "float32", strides=(4, 1))  # rows padded to 4 elements
    B = Buffer("B", (2, 3), "float32")
    i, j = Var("i"), Var("j")
    f = PrimFunc((A, B), loop(i, 2, loop(j, 3, BufferStore(B, BufferLoad(A, (i, j)) * 3.0, (i, j)))))
    mod = loopir.build(f, target="cpu")
    base = random_nonzero((2, 4), "float32", 5)
    b = empty_like_param((2, 3), "float32")
    mod(base[:, :3], b)
    np.testing.assert_array_equal(b, base[:, :3] * 3)
    with pytest.raises(LaunchError, match=r"argument 0 \(A\): byte strides \(12, 4\) do not match \[16, 4\]"):
        mod(np.ascontiguousarray(base[:, :3]), b)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_padded_temporary_of_a_symbolic_size(n: int) -> None:
    # a storage_align-padded temporary (rows of 3 in a stride of 5) whose size is symbolic: the
    # C backend allocates its span at run time (1 + (n - 1) * 5 + 2 elements, none at n = 0;
    # the formula's own test is test_storage_align's test_the_c_span_is_the_allocation_size)
    N = Var("n")
    A, B = Buffer("A", (N, 3), "float32"), Buffer("B", (N, 3), "float32")
    T = Buffer("T", (N, 3), "float32", strides=(5, 1))
    i, j, i2, j2 = Var("i"), Var("j"), Var("i2"), Var("j2")
    fill = loop(i, N, loop(j, 3, BufferStore(T, BufferLoad(A, (i, j)) + 1.0, (i, j))))
    use = loop(i2, N, loop(j2, 3, BufferStore(B, BufferLoad(T, (i2, j2)) * 2.0, (i2, j2))))
    f = PrimFunc((A, B), Allocate(T, seq(fill, use)))
    a = random_nonzero((n, 3), "float32", 7)
    b = empty_like_param((n, 3), "float32")
    loopir.build(f, target="cpu")(a, b)
    np.testing.assert_array_equal(b, (a + 1) * 2)
