"""The CPU executor's race-revealing mode (issue 11): ``thread_order="random"`` runs the threads
of every thread block of lowered IR as fibers in a seeded random order between barriers, so a
missing barrier changes the result on the CPU as it does on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from strategies import empty_like_param, random_nonzero

import loopir
from loopir.errors import CodegenError, LaunchError
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, Var
from loopir.ir.functor import Mutator, post_order_visit
from loopir.ir.op import storage_sync
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    seq,
)
from loopir.testing.workloads import shared_transpose

SEEDS = (0, 1, 2, 3, 4)


def loop(var: Var, extent, body, kind=ForKind.SERIAL, tag=None) -> For:
    return For(var, 0, extent, kind, body, thread_tag=tag)


def tloop(var: Var, extent, body, tag: str) -> For:
    return loop(var, extent, body, ForKind.THREAD_BINDING, tag)


def _is_sync(s: object) -> bool:
    return isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.op == "tvm_storage_sync"


class _StripBarriers(Mutator):
    def visit_SeqStmt(self, node: SeqStmt):  # noqa: ANN201
        kept = [self.visit(s) for s in node.seq if not _is_sync(s)]
        if len(kept) == len(node.seq) and all(a is b for a, b in zip(kept, node.seq)):
            return node
        return seq(*kept) if kept else Evaluate(0)


def strip_barriers(func: PrimFunc) -> PrimFunc:
    """``func`` without its ``tvm_storage_sync`` statements (the bug ThreadSync must not have)."""
    out = _StripBarriers().visit(func)
    assert count_barriers(out) == 0
    return out


def count_barriers(func: PrimFunc) -> int:
    n = 0

    def visit(x: object) -> None:
        nonlocal n
        n += _is_sync(x)

    post_order_visit(func.body, visit)
    return n


def transpose_through_shared_tile():  # noqa: ANN201
    """Issue 11 item 1: a 32x32 shared tile filled by one threadIdx nest and read transposed
    by a sibling nest under the same block loops (100x70)."""
    return shared_transpose(100, 70)


def run(func: PrimFunc, *arrays: np.ndarray, **options) -> list[np.ndarray]:
    out = [np.array(a, copy=True) for a in arrays]
    loopir.build(func, target="cpu", **options)(*out)
    return out


# --------------------------------------------------------------------------------------------
# (1) the reproducer of issue 11 item 1, through loopir.lower, barriers stripped by hand
# --------------------------------------------------------------------------------------------


def test_transpose_without_barriers_is_wrong_for_some_seed() -> None:
    low = loopir.lower(transpose_through_shared_tile().func)
    racy = strip_barriers(low)
    a = random_nonzero((100, 70), "float32", 1)
    b0 = empty_like_param((70, 100), "float32")
    # sequentially (the default) the stripped kernel still looks right: the bug is invisible
    np.testing.assert_array_equal(run(racy, a, b0)[1], a.T)
    mod = loopir.build(racy, target="cpu", thread_order="random")
    wrong = []
    for s in SEEDS:
        mod.seed = s
        b = b0.copy()
        mod(a, b)
        wrong.append(not np.array_equal(b, a.T))
    assert any(wrong), "no seed revealed the missing barrier"


class _BarrierBetweenThreadNests(Mutator):
    """Put a barrier between consecutive sibling threadIdx nests (what ThreadSync must do)."""

    def visit_SeqStmt(self, node: SeqStmt):  # noqa: ANN201
        out = []
        for s in node.seq:
            s = self.visit(s)
            if out and _is_thread_loop(out[-1]) and _is_thread_loop(s):
                out.append(Evaluate(storage_sync("shared")))
            out.append(s)
        return seq(*out)


def _is_thread_loop(s: object) -> bool:
    return isinstance(s, For) and (s.thread_tag or "").startswith("threadIdx")


@pytest.mark.parametrize("seed", SEEDS)
def test_transpose_with_barrier_is_right_for_every_seed(seed: int) -> None:
    # the barrier placed by hand, so that this test does not depend on ThreadSync
    fixed = _BarrierBetweenThreadNests().visit(strip_barriers(loopir.lower(transpose_through_shared_tile().func)))
    assert count_barriers(fixed) == 1
    a = random_nonzero((100, 70), "float32", 1)
    _, b = run(fixed, a, empty_like_param((70, 100), "float32"), thread_order="random", seed=seed)
    np.testing.assert_array_equal(b, a.T)


@pytest.mark.parametrize("seed", SEEDS)
def test_lowered_transpose_is_right_for_every_seed(seed: int) -> None:
    """Through the whole pipeline: ThreadSync must place the barrier (issue 11 item 1)."""
    low = loopir.lower(transpose_through_shared_tile().func)
    a = random_nonzero((100, 70), "float32", 1)
    _, b = run(low, a, empty_like_param((70, 100), "float32"), thread_order="random", seed=seed)
    np.testing.assert_array_equal(b, a.T)


# --------------------------------------------------------------------------------------------
# (2) hand-built lowered IR: sibling threadIdx nests share a tile with or without a barrier
# --------------------------------------------------------------------------------------------


def sibling_transpose(T: int = 8, nb: int = 2, barrier: bool = True) -> PrimFunc:
    """B[b, x, y] = A[b, y, x] + 1: nest one fills S[ty, tx], nest two reads S[tx, ty]."""
    A, B = Buffer("A", (nb, T, T), "float32"), Buffer("B", (nb, T, T), "float32")
    S = Buffer("S", (T, T), "float32", scope="shared")
    bx, ty, tx, ty2, tx2 = Var("bx"), Var("ty"), Var("tx"), Var("ty2"), Var("tx2")
    fill = tloop(ty, T, tloop(tx, T, BufferStore(S, BufferLoad(A, (bx, ty, tx)), (ty, tx)), "threadIdx.x"), "threadIdx.y")
    read = tloop(
        ty2, T,
        tloop(tx2, T, BufferStore(B, BufferLoad(S, (tx2, ty2)) + 1.0, (bx, ty2, tx2)), "threadIdx.x"),
        "threadIdx.y",
    )  # fmt: skip
    body = seq(fill, Evaluate(storage_sync("shared")), read) if barrier else seq(fill, read)
    return PrimFunc((A, B), tloop(bx, nb, Allocate(S, body), "blockIdx.x"))


def test_sibling_nests_without_barrier_differ_from_numpy() -> None:
    f = sibling_transpose(barrier=False)
    a = random_nonzero((2, 8, 8), "float32", 3)
    want = a.transpose(0, 2, 1) + 1
    # sequential: nest one runs to completion before nest two, so the race is invisible
    np.testing.assert_array_equal(run(f, a, empty_like_param(a.shape, "float32"))[1], want)
    got = [run(f, a, empty_like_param(a.shape, "float32"), thread_order="random", seed=s)[1] for s in SEEDS]
    assert all(not np.array_equal(g, want) for g in got)
    # a thread that reads before the fetching thread ran sees the poisoned (NaN) allocation
    assert any(np.isnan(g).any() for g in got)
    # and which threads ran first depends on the seed
    assert len({g.tobytes() for g in got}) > 1


def test_race_that_thread_id_order_hides_is_revealed() -> None:
    """B[t] = S[t - 1] right after S[t] = A[t], no barrier: resumed in thread-id order the
    writer always runs first; a random order does not."""
    T = 16
    A, B = Buffer("A", (T,), "float32"), Buffer("B", (T - 1,), "float32")
    S = Buffer("S", (T,), "float32", scope="shared")
    tx = Var("tx")
    body = seq(
        BufferStore(S, BufferLoad(A, (tx,)), (tx,)),
        IfThenElse(tx > 0, BufferStore(B, BufferLoad(S, (tx - 1,)), (tx - 1,))),
        Evaluate(storage_sync("shared")),  # a barrier, but after the read: too late
    )
    f = PrimFunc((A, B), Allocate(S, tloop(tx, T, body, "threadIdx.x")))
    a = random_nonzero((T,), "float32", 4)
    np.testing.assert_array_equal(run(f, a, empty_like_param((T - 1,), "float32"))[1], a[:-1])
    got = [run(f, a, empty_like_param((T - 1,), "float32"), thread_order="random", seed=s)[1] for s in SEEDS]
    assert any(not np.array_equal(g, a[:-1]) for g in got)


@pytest.mark.parametrize("seed", SEEDS)
def test_sibling_nests_with_barrier_equal_numpy(seed: int) -> None:
    f = sibling_transpose(barrier=True)
    a = random_nonzero((2, 8, 8), "float32", 3)
    _, b = run(f, a, empty_like_param(a.shape, "float32"), thread_order="random", seed=seed)
    np.testing.assert_array_equal(b, a.transpose(0, 2, 1) + 1)


def test_war_race_on_a_reused_tile_is_revealed() -> None:
    """The barrier after the reads is missing: a thread refills the tile for the next round
    while others still read the previous one (the WAR of a k-loop)."""
    T, R = 8, 3
    A, B = Buffer("A", (R, T), "float32"), Buffer("B", (R, T), "float32")
    S = Buffer("S", (T,), "float32", scope="shared")
    r, tx = Var("r"), Var("tx")
    body = loop(r, R, seq(
        BufferStore(S, BufferLoad(A, (r, tx)), (tx,)),
        Evaluate(storage_sync("shared")),
        BufferStore(B, BufferLoad(S, (T - 1 - tx,)), (r, tx)),
    ))  # fmt: skip
    f = PrimFunc((A, B), Allocate(S, tloop(tx, T, body, "threadIdx.x")))
    a = random_nonzero((R, T), "float32", 5)
    want = a[:, ::-1]
    got = [run(f, a, empty_like_param(a.shape, "float32"), thread_order="random", seed=s)[1] for s in SEEDS]
    assert any(not np.array_equal(g, want) for g in got)
    fixed = PrimFunc((A, B), Allocate(S, tloop(tx, T, loop(r, R, seq(body.body, Evaluate(storage_sync("shared")))), "threadIdx.x")))
    for s in SEEDS:
        np.testing.assert_array_equal(run(fixed, a, empty_like_param(a.shape, "float32"), thread_order="random", seed=s)[1], want)


def test_statements_outside_thread_loops_run_in_every_thread() -> None:
    """As in CUDA, a statement of the block outside any threadIdx loop runs once per thread:
    a global read-modify-write there is applied blockDim times."""
    A = Buffer("A", (4,), "float32")
    bx, tx = Var("bx"), Var("tx")
    body = tloop(bx, 1, seq(
        BufferStore(A, BufferLoad(A, (0,)) + 1.0, (0,)),
        tloop(tx, 4, BufferStore(A, BufferLoad(A, (tx,)) * 1.0, (tx,)), "threadIdx.x"),
    ), "blockIdx.x")  # fmt: skip
    f = PrimFunc((A,), body)
    a = np.zeros(4, "float32")
    assert run(f, a)[0][0] == 1.0
    assert run(f, a, thread_order="random")[0][0] == 4.0


def test_local_buffers_stay_per_thread_and_shared_ones_per_block() -> None:
    """A local buffer inside the block's region is private to each fiber; a shared one
    allocated there is one array for the block (allocated before the fibers start)."""
    T = 4
    A, B = Buffer("A", (T,), "float32"), Buffer("B", (T,), "float32")
    S = Buffer("S", (T,), "float32", scope="shared")
    L = Buffer("L", (1,), "float32", scope="local")
    bx, tx, tx2 = Var("bx"), Var("tx"), Var("tx2")
    region = Allocate(S, Allocate(L, seq(
        tloop(tx, T, seq(BufferStore(L, BufferLoad(A, (tx,)), (0,)), BufferStore(S, BufferLoad(L, (0,)), (tx,))), "threadIdx.x"),
        Evaluate(storage_sync("shared")),
        tloop(tx2, T, BufferStore(B, BufferLoad(S, (T - 1 - tx2,)) + BufferLoad(L, (0,)), (tx2,)), "threadIdx.x"),
    )))  # fmt: skip
    f = PrimFunc((A, B), tloop(bx, 1, region, "blockIdx.x"))
    a = random_nonzero((T,), "float32", 7)
    for s in SEEDS:
        _, b = run(f, a, empty_like_param((T,), "float32"), thread_order="random", seed=s)
        np.testing.assert_array_equal(b, a[::-1] + a)


def test_separate_kernels_are_separate_regions() -> None:
    """Two outermost thread loops are two kernel launches (ordered, as on a GPU): a global
    intermediate written by the first and read reversed by the second is no race."""
    T = 8
    A, B = Buffer("A", (T,), "float32"), Buffer("B", (T,), "float32")
    G = Buffer("G", (T,), "float32")  # a global temporary
    tx, tx2 = Var("tx"), Var("tx2")
    body = Allocate(G, seq(
        tloop(tx, T, BufferStore(G, BufferLoad(A, (tx,)) * 2.0, (tx,)), "threadIdx.x"),
        tloop(tx2, T, BufferStore(B, BufferLoad(G, (T - 1 - tx2,)), (tx2,)), "threadIdx.x"),
    ))  # fmt: skip
    f = PrimFunc((A, B), body)
    a = random_nonzero((T,), "float32", 9)
    for s in SEEDS:
        _, b = run(f, a, empty_like_param((T,), "float32"), thread_order="random", seed=s)
        np.testing.assert_array_equal(b, 2 * a[::-1])


def test_barrier_divergence_is_still_reported() -> None:
    T = 4
    A = Buffer("A", (T,), "float32")
    S = Buffer("S", (T,), "float32", scope="shared")
    tx = Var("tx")
    body = seq(BufferStore(S, BufferLoad(A, (tx,)), (tx,)), IfThenElse(tx > 0, Evaluate(storage_sync("shared"))))
    f = PrimFunc((A,), Allocate(S, tloop(tx, T, body, "threadIdx.x")))
    mod = loopir.build(f, target="cpu", thread_order="random", seed=3)
    with pytest.raises(LaunchError, match="barrier divergence in a thread region: 3 of 4 threads"):
        mod(random_nonzero((T,), "float32", 1))


def test_nested_loops_of_one_thread_tag_are_refused() -> None:
    A = Buffer("A", (4, 4), "float32")
    tx, tx2 = Var("tx"), Var("tx2")
    f = PrimFunc((A,), tloop(tx, 4, tloop(tx2, 4, BufferStore(A, 1.0, (tx, tx2)), "threadIdx.x"), "threadIdx.x"))
    with pytest.raises(CodegenError, match=r"thread_order='random'.*tx2 is bound to threadIdx.x inside another"):
        loopir.build(f, target="cpu", thread_order="random")


def test_same_seed_same_result_and_repr() -> None:
    f = sibling_transpose(barrier=False)
    a = random_nonzero((2, 8, 8), "float32", 3)
    mod = loopir.build(f, target="cpu", thread_order="random", seed=11)
    assert "thread_order='random', seed=11" in repr(mod)
    runs = []
    for _ in range(2):
        b = empty_like_param(a.shape, "float32")
        mod(a, b)
        runs.append(b)
    np.testing.assert_array_equal(runs[0], runs[1])  # NaNs compare equal here


# --------------------------------------------------------------------------------------------
# (3) existing lowered workloads: the random order changes nothing where barriers are right
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("local_pad", [False, True])
def test_lowered_dense_schedule_is_order_independent(local_pad: bool) -> None:
    M, K, N = 37, 13, 40
    with loopir.PassContext(config={"tir.enable_local_pad": local_pad}):
        low = loopir.lower(loopir.examples.dense(M, K, N).func)
    a, b = random_nonzero((M, K), "float32", 1), random_nonzero((K, N), "float32", 2)
    c0 = empty_like_param((M, N), "float32")
    want = run(low, a, b, c0)[2]
    np.testing.assert_allclose(want, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    mod = loopir.build(low, target="cpu", thread_order="random")
    assert "lir_run_fibers(" in mod.source
    for s in (0, 1, 2):
        mod.seed = s
        c = c0.copy()
        mod(a, b, c)
        np.testing.assert_array_equal(c, want)


def test_existing_fiber_tests_agree_in_random_order() -> None:
    """The 2-D transpose of test_cpu_ir (barriers where they belong) for several seeds."""
    f = sibling_transpose(T=4, nb=3)
    a = random_nonzero((3, 4, 4), "float32", 13)
    for s in SEEDS:
        np.testing.assert_array_equal(run(f, a, empty_like_param(a.shape, "float32"), thread_order="random", seed=s)[1],
                                      run(f, a, empty_like_param(a.shape, "float32"))[1])  # fmt: skip


def test_functions_with_blocks_keep_their_sequential_meaning() -> None:
    sch = transpose_through_shared_tile()  # thread-bound, not lowered: a sequential program
    a = random_nonzero((100, 70), "float32", 1)
    mod = loopir.build(sch.func, target="cpu", thread_order="random", seed=2)
    assert "lir_run_fibers(" not in mod.source
    b = empty_like_param((70, 100), "float32")
    mod(a, b)
    np.testing.assert_array_equal(b, a.T)


# --------------------------------------------------------------------------------------------
# (4) option validation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"thread_order": "rand"}, r"thread_order must be one of 'sequential', 'random', got 'rand'"),
        ({"thread_order": None}, r"thread_order must be one of .* got None"),
        ({"thread_order": "random", "thread_regions": False}, r"thread_order='random' .* needs thread_regions=True"),
        ({"thread_regions": "yes"}, r"thread_regions must be True or False, got 'yes'"),
        ({"seed": -1}, r"seed must be an integer in \[0, 2\*\*64\), got -1"),
        ({"seed": 2**64}, r"seed must be an integer .* got 18446744073709551616"),
        ({"seed": 1.5}, r"seed must be an integer .* got 1.5"),
        ({"seed": True}, r"seed must be an integer .* got True"),
        ({"thread_ordr": "random"}, r"unknown option\(s\) thread_ordr"),
    ],
)
def test_bad_thread_order_options(options, match) -> None:
    with pytest.raises(CodegenError, match=r"build\(target='cpu'\): " + match):
        loopir.build(sibling_transpose(), target="cpu", **options)


def test_bad_seed_on_the_module() -> None:
    mod = loopir.build(sibling_transpose(), target="cpu", thread_order="random")
    with pytest.raises(CodegenError, match=r"CPUModule.seed: seed must be an integer .* got 'x'"):
        mod.seed = "x"
    mod.seed = np.uint64(2**64 - 1)
    assert mod.seed == 2**64 - 1
