"""ThreadSync, the race checker and the pass access walk see what tensor-core calls touch."""

from __future__ import annotations

import pytest

from loopir.errors import CodegenError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import Allocate, BufferStore, Evaluate, For, ForKind, PrimFunc, Stmt, seq
from loopir.passes import ThreadSync
from loopir.passes._walk import collect_accesses as walk_accesses
from loopir.passes.race_check import check_races, collect_accesses

from .kernels import Gemm


def _lanes(tx: Var, body: Stmt) -> For:
    return For(tx, 0, 32, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")


def _kernel(body: Stmt) -> Stmt:
    return For(Var("bx"), 0, 1, ForKind.THREAD_BINDING, body, thread_tag="blockIdx.x")


def _syncs(s: object) -> int:
    n = 0

    def f(x: object) -> None:
        nonlocal n
        if isinstance(x, Evaluate) and getattr(x.value, "op", "") == "tvm_storage_sync":
            n += 1

    post_order_visit(s, f)
    return n


S = Buffer("S", (16, 16), "float16", scope="shared")
SC = Buffer("SC", (16, 16), "float32", scope="shared")
W = Buffer("W", (32, 8), "float16", scope="warp")
CW = Buffer("CW", (32, 8), "float32", scope="warp")
G = Buffer("G", (16, 16), "float32")
GH = Buffer("GH", (16, 16), "float16")


def _store_then_read() -> PrimFunc:
    """mma_store into shared, then each thread copies shared elements out: the copy reads
    elements other lanes stored."""
    tx, t2, i = Var("tx"), Var("t2"), Var("i")
    store = _lanes(tx, seq(Evaluate(op.mma_fill(CW[tx, 0], 8, 1.0)),
                           Evaluate(op.mma_store(SC[0, 0], CW[tx, 0]))))  # fmt: skip
    copy = _lanes(t2, For(i, 0, 8, ForKind.SERIAL,
                          BufferStore(G, SC[t2 // 2, (t2 % 2) * 8 + i], (t2 // 2, (t2 % 2) * 8 + i))))  # fmt: skip
    return PrimFunc((G,), _kernel(Allocate(SC, Allocate(CW, seq(store, copy)))))


def _fill_then_ldmatrix() -> PrimFunc:
    """Each thread writes shared row elements, then ldmatrix reads the rows (other lanes')."""
    tx, t2, j = Var("tx"), Var("t2"), Var("j")
    fill = _lanes(tx, For(j, 0, 8, ForKind.SERIAL,
                          BufferStore(S, GH[tx // 2, (tx % 2) * 8 + j], (tx // 2, (tx % 2) * 8 + j))))  # fmt: skip
    load = _lanes(t2, Evaluate(op.ptx_ldmatrix(W[t2, 0], S[t2 % 16, 8 * (t2 // 16)])))
    return PrimFunc((GH,), _kernel(Allocate(S, Allocate(W, seq(fill, load)))))


@pytest.mark.parametrize("make", [_store_then_read, _fill_then_ldmatrix])
def test_thread_sync_puts_a_barrier_between_lanes_and_the_call(make) -> None:
    func = make()
    assert _syncs(ThreadSync()(func)) == 1


def test_thread_sync_needs_no_barrier_between_fragment_calls() -> None:
    """ldmatrix then mma then mma_store to global: fragments are warp registers, and no shared
    element written by one thread is read by another: no barrier."""
    tx = Var("tx")
    A = Buffer("A", (32, 8), "float16", scope="warp")
    body = _lanes(tx, seq(
        Evaluate(op.ptx_ldmatrix(A[tx, 0], S[tx % 16, 8 * (tx // 16)])),
        Evaluate(op.ptx_ldmatrix(W[tx, 0], S[tx % 16, 8 * (tx // 16)], trans=True)),
        Evaluate(op.mma_fill(CW[tx, 0], 8, 0.0)),
        Evaluate(op.ptx_mma(A[tx, 0], W[tx, 0], CW[tx, 0])),
        Evaluate(op.mma_store(G[0, 0], CW[tx, 0])),
    ))  # fmt: skip
    func = PrimFunc((G,), _kernel(Allocate(S, Allocate(A, Allocate(W, Allocate(CW, body))))))
    assert _syncs(ThreadSync()(func)) == 0


def test_race_checker_refuses_a_missing_barrier_before_ldmatrix() -> None:
    with pytest.raises(CodegenError, match="data race on shared buffer S"):
        check_races(_fill_then_ldmatrix())
    check_races(ThreadSync()(_fill_then_ldmatrix()))


def test_race_checker_proves_the_gemm_kernels() -> None:
    """Every lane writes its own elements of the output tile (the C layout is a bijection):
    proven, not merely unrefuted; nothing the calls touch is left unproven."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_races(ThreadSync()(Gemm().func()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_races(ThreadSync()(Gemm(M=64, warps_m=2, warps_n=1, store="shared", b_trans=True).func()))
    # (the plain copy-out of C_shared by the test kernel is beyond the prover)
    assert not [w for w in caught if "T.ptx" in str(w.message) or "T.mma" in str(w.message)]


def test_accesses_cover_the_whole_footprint() -> None:
    """The ldmatrix row is 8 elements wide: the walk of the passes (compaction) sees them."""
    func = _fill_then_ldmatrix()
    reads = [a for a in walk_accesses(func.body)[0] if a.buffer is S and not a.is_store]
    assert len(reads) == 1 and len(reads[0].loops) == 3  # bx, t2 and the row's 8 elements
    race = [a for a in collect_accesses(func.body) if a.buffer is S and not a.is_store]
    assert len(race) == 1 and race[0].loops[-1].extent.value == 8


def _vthread_tiles(inside: bool) -> PrimFunc:
    """Two virtual threads, each a 16x16 tile of C = A @ B through one warp fragment A_warp
    (allocated above the vthread loop, or ``inside`` it: then expanded per virtual thread):
    the ldmatrix into A_warp and the mma reading it must stay together per virtual thread."""
    from loopir.ir.stmt import IfThenElse

    A = Buffer("A", (32, 16), "float16")
    B = Buffer("B", (16, 16), "float16")
    C = Buffer("C", (32, 16), "float32")
    As = Buffer("As", (32, 16), "float16", scope="shared")
    Bs = Buffer("Bs", (16, 16), "float16", scope="shared")
    Aw = Buffer("A_warp", (32, 8), "float16", scope="warp")
    Bw = Buffer("B_warp", (32, 8), "float16", scope="warp")
    Cw = Buffer("C_warp", (2, 32, 8), "float32", scope="warp")
    tx, t0, v, i = Var("tx"), Var("t0"), Var("v"), Var("i")
    copy = _lanes(t0, For(i, 0, 16, ForKind.SERIAL, seq(
        BufferStore(As, A[t0, i], (t0, i)),
        IfThenElse(t0 < 16, BufferStore(Bs, B[t0, i], (t0, i))),
    )))  # fmt: skip
    lanes = _lanes(tx, seq(
        Evaluate(op.mma_fill(Cw[v, tx, 0], 8, 0.0)),
        Evaluate(op.ptx_ldmatrix(Aw[tx, 0], As[16 * v + tx % 16, 8 * (tx // 16)])),
        Evaluate(op.ptx_ldmatrix(Bw[tx, 0], Bs[tx % 16, 8 * (tx // 16)], trans=True)),
        Evaluate(op.ptx_mma(Aw[tx, 0], Bw[tx, 0], Cw[v, tx, 0])),
        Evaluate(op.ptx_mma(Aw[tx, 0], Bw[tx, 4], Cw[v, tx, 4])),
        Evaluate(op.mma_store(C[16 * v, 0], Cw[v, tx, 0])),
    ))  # fmt: skip
    compute = For(v, 0, 2, ForKind.THREAD_BINDING, Allocate(Aw, lanes) if inside else lanes,
                  thread_tag="vthread.x")  # fmt: skip
    rest = seq(copy, Evaluate(op.storage_sync("shared")), compute)
    body = Allocate(As, Allocate(Bs, Allocate(Bw, Allocate(Cw, rest if inside else Allocate(Aw, rest)))))
    return PrimFunc((A, B, C), _kernel(body))


@pytest.mark.parametrize("inside", [False, True])
def test_inject_virtual_thread_keeps_fragment_writes_with_their_reads(inside: bool) -> None:
    import numpy as np

    import loopir
    from loopir.passes import InjectVirtualThread

    func = _vthread_tiles(inside)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    want = a.astype(np.float64) @ b.astype(np.float64)
    injected = InjectVirtualThread()(func)
    for f in (func, injected):
        c = np.full((32, 16), np.nan, np.float32)
        loopir.build(f, target="cpu")(a, b, c)
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    if inside:  # one fragment per virtual thread
        shapes = []
        post_order_visit(injected.body, lambda n: shapes.append(tuple(int(x) for x in n.buffer.shape))
                         if isinstance(n, Allocate) and n.buffer.name == "A_warp" else None)  # fmt: skip
        assert shapes == [(2, 32, 8)]


def _pipelined_fragments() -> PrimFunc:
    """C = sum over k of A[16k:16k+16, :] @ B, the ldmatrix of A_warp in stage 0 and the mma
    reading it in stage 1: A_warp passes between stages and needs two versions."""
    from loopir.ir.stmt import IfThenElse

    A = Buffer("A", (64, 16), "float16")
    B = Buffer("B", (16, 16), "float16")
    C = Buffer("C", (16, 16), "float32")
    As = Buffer("As", (64, 16), "float16", scope="shared")
    Bs = Buffer("Bs", (16, 16), "float16", scope="shared")
    Aw = Buffer("A_warp", (32, 8), "float16", scope="warp")
    Bw = Buffer("B_warp", (32, 8), "float16", scope="warp")
    Cw = Buffer("C_warp", (32, 8), "float32", scope="warp")
    t = [Var(f"t{n}") for n in range(6)]
    i, k = Var("i"), Var("k")
    copy = _lanes(t[0], For(i, 0, 32, ForKind.SERIAL, seq(
        BufferStore(As, A[t[0] * 2 + i // 16, i % 16], (t[0] * 2 + i // 16, i % 16)),
        IfThenElse(t[0] < 16, IfThenElse(i < 16, BufferStore(Bs, B[t[0], i], (t[0], i)))),
    )))  # fmt: skip
    init = _lanes(t[1], seq(Evaluate(op.mma_fill(Cw[t[1], 0], 8, 0.0)),
                            Evaluate(op.ptx_ldmatrix(Bw[t[1], 0], Bs[t[1] % 16, 8 * (t[1] // 16)], trans=True))))  # fmt: skip
    load = _lanes(t[2], Evaluate(op.ptx_ldmatrix(Aw[t[2], 0], As[16 * k + t[2] % 16, 8 * (t[2] // 16)])))
    mma = _lanes(t[3], seq(Evaluate(op.ptx_mma(Aw[t[3], 0], Bw[t[3], 0], Cw[t[3], 0])),
                           Evaluate(op.ptx_mma(Aw[t[3], 0], Bw[t[3], 4], Cw[t[3], 4]))))  # fmt: skip
    kloop = For(k, 0, 4, ForKind.SERIAL, seq(load, mma),
                annotations={"software_pipeline_stage": [0, 1], "software_pipeline_order": [0, 1]})
    store = _lanes(t[4], Evaluate(op.mma_store(C[0, 0], Cw[t[4], 0])))
    body = Allocate(As, Allocate(Bs, Allocate(Aw, Allocate(Bw, Allocate(Cw, seq(
        copy, Evaluate(op.storage_sync("shared")), init, kloop, store))))))  # fmt: skip
    return PrimFunc((A, B, C), _kernel(body))


def test_software_pipeline_versions_a_fragment_passed_between_stages() -> None:
    import numpy as np

    import loopir
    from loopir.passes import InjectSoftwarePipeline

    func = _pipelined_fragments()
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    a64 = a.astype(np.float64)
    want = sum(a64[16 * k : 16 * k + 16] for k in range(4)) @ b.astype(np.float64)
    piped = InjectSoftwarePipeline()(func)
    for f in (func, piped):
        c = np.full((16, 16), np.nan, np.float32)
        loopir.build(f, target="cpu")(a, b, c)
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    shapes = []
    post_order_visit(piped.body, lambda n: shapes.append(tuple(int(x) for x in n.buffer.shape))
                     if isinstance(n, Allocate) and n.buffer.name == "A_warp" else None)  # fmt: skip
    assert shapes == [(2, 32, 8)]


def test_compaction_carry_paths_see_the_call_stores() -> None:
    """The carry prover of compaction sees mma_store's writes of the shared tile (and its read
    of the fragment before them), not only the plain loads that follow."""
    from loopir.passes.compact_carry import collect_paths

    paths = collect_paths(_store_then_read().body)
    stores = [a for a in paths[SC] if a.is_store]
    assert len(stores) == 1 and stores[0].path[-1].extent.value == 8
    fragment = [a.is_store for a in paths[CW]]
    assert fragment == [True, False]  # mma_fill writes it, mma_store reads it
