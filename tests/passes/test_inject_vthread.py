"""InjectVirtualThread: vthread loops folded into each real thread."""

from __future__ import annotations

from _passes_util import assert_close, inputs, nodes, run_cpu

from loopir.ir import (
    Allocate,
    Buffer,
    BufferStore,
    For,
    ForKind,
    PrimFunc,
    Var,
    op,
    seq,
)
from loopir.passes import InjectVirtualThread


def _vt(v: Var, n: object, body: object) -> For:
    return For(v, 0, n, ForKind.THREAD_BINDING, body, thread_tag="vthread.x")


def _tx(v: Var, n: int, body: object) -> For:
    return For(v, 0, n, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")


def _vloops(f: PrimFunc) -> list[For]:
    return [x for x in nodes(f.body, For) if (x.thread_tag or "").startswith("vthread")]


def test_copies_run_once_updates_per_virtual_thread_local_expanded() -> None:
    a = Buffer("A", (8,), "float32")
    out = Buffer("O", (2, 8), "float32")
    sh = Buffer("S", (8,), "float32", scope="shared")
    acc = Buffer("acc", (1,), "float32", scope="local")
    vx, tx, k = Var("vx"), Var("tx"), Var("k")
    body = _vt(vx, 2, _tx(tx, 8, Allocate(acc, seq(
        BufferStore(acc, 0.0, (0,)),
        For(k, 0, 3, ForKind.SERIAL, seq(
            BufferStore(sh, a[tx] * 2.0, (tx,)),  # a copy: the same for every virtual thread
            BufferStore(acc, acc[0] + sh[tx] * op.cast(vx + k + 1, "float32"), (0,)),
        )),
        BufferStore(out, acc[0], (vx, tx)),
    ))))  # fmt: skip
    f = PrimFunc((a, out), Allocate(sh, body))
    g = InjectVirtualThread()(f)
    assert not _vloops(g)
    (alloc,) = [x for x in nodes(g.body, Allocate) if x.buffer.name == "acc"]
    assert [int(s.value) for s in alloc.buffer.shape] == [2, 1]
    unrolled = [x for x in nodes(g.body, For) if x.kind is ForKind.UNROLLED]
    assert len(unrolled) == 3  # init, update, write-back; the copy runs once
    (copy,) = [s for s in nodes(g.body, BufferStore) if s.buffer.name == "S"]
    assert all(copy not in nodes(u.body, BufferStore) for u in unrolled)
    x = inputs(f)
    assert_close(run_cpu(g, x)[1], run_cpu(f, x)[1])


def test_read_modify_write_of_outer_buffer_runs_per_virtual_thread() -> None:
    g_buf = Buffer("G", (4,), "float32")
    x_buf = Buffer("X", (4,), "float32")
    vx, tx = Var("vx"), Var("tx")
    body = _vt(vx, 3, _tx(tx, 4, seq(
        BufferStore(x_buf, g_buf[tx], (tx,)),  # reads G, which a dependent statement writes
        BufferStore(g_buf, g_buf[tx] + 1.0, (tx,)),
    )))  # fmt: skip
    f = PrimFunc((g_buf, x_buf), body)
    out = InjectVirtualThread()(f)
    assert not _vloops(out)
    x = inputs(f)
    got = run_cpu(out, x)
    want = run_cpu(f, x)
    assert_close(got[0], want[0])  # G incremented three times
    assert_close(got[1], want[1])  # X saw the value before the last increment
    assert_close(got[0], x[0] + 3.0)


def test_symbolic_extent_is_left_alone() -> None:
    n = Var("n")
    a = Buffer("A", (n,), "float32")
    vx = Var("vx")
    f = PrimFunc((a,), _vt(vx, n, BufferStore(a, a[vx] + 1.0, (vx,))))
    assert InjectVirtualThread()(f) is not None
    assert len(_vloops(InjectVirtualThread()(f))) == 1


def test_one_statement_object_in_two_places_as_two_copies() -> None:
    """The pass memoizes per statement object (what it writes, touches, whether it depends on
    the virtual thread): the same object in two places gives what two copies give."""
    from loopir.ir.equality import structural_equal

    a = Buffer("A", (8,), "float32")
    out = Buffer("O", (2, 8), "float32")
    sh = Buffer("S", (8,), "float32", scope="shared")
    acc = Buffer("acc", (1,), "float32", scope="local")
    vx, tx = Var("vx"), Var("tx")
    copy = BufferStore(sh, a[tx] * 2.0, (tx,))
    upd = BufferStore(acc, acc[0] + sh[tx] * op.cast(vx + 1, "float32"), (0,))

    def build(shared: bool) -> PrimFunc:
        c2, u2 = (copy, upd) if shared else (
            BufferStore(sh, copy.value, copy.indices), BufferStore(acc, upd.value, upd.indices))
        body = _vt(vx, 2, _tx(tx, 8, Allocate(acc, seq(
            BufferStore(acc, 0.0, (0,)), copy, upd, c2, u2, BufferStore(out, acc[0], (vx, tx)),
        ))))  # fmt: skip
        return PrimFunc((a, out), Allocate(sh, body))

    f_shared, f_copies = build(True), build(False)
    g_shared, g_copies = InjectVirtualThread()(f_shared), InjectVirtualThread()(f_copies)
    assert structural_equal(g_shared, g_copies)
    x = inputs(f_shared)
    assert_close(run_cpu(g_shared, x)[1], run_cpu(f_shared, x)[1])
