"""LocalPadding stays sound on hand-built lowered IR (issue 11 item 5 a-d) and its report says
why for every conjunct (issue 18).

Each case compares the padded kernel with the unpadded one and with numpy on the CPU executor,
and checks that the pass either keeps the guard (with the reason in its report) or is correct.
"""

from __future__ import annotations

import numpy as np
import pytest
from _passes_util import assert_close, guard_of, lower_with, run_cpu, store_to, text

from loopir.ir import (
    Allocate,
    Buffer,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Select,
    Var,
    op,
    seq,
)
from loopir.passes import LocalPadding, Simplify

S = ForKind.SERIAL


def pad(f: PrimFunc) -> tuple[PrimFunc, LocalPadding]:
    lp = LocalPadding(explain=True)
    return Simplify()(lp(f)), lp


def check(f: PrimFunc, g: PrimFunc, args: list[np.ndarray], want: np.ndarray) -> None:
    """Pad off, pad on and numpy agree (on the last param, the output)."""
    assert_close(run_cpu(f, args)[-1], want)
    assert_close(run_cpu(g, args)[-1], want)


def one(lp: LocalPadding, kind: str, buf: str):  # noqa: ANN201
    (rep,) = [c for c in lp.report.by_buffer(buf) if c.kind == kind]
    return rep


# --- (a) an element last written as a pad in an earlier round ----------------------------------


def _two_round_loops() -> PrimFunc:
    """``L`` lives across the rounds ``(a, b)``; the fetch writes ``L[0]`` at (0,0), (0,1),
    (1,0) (its kept ``||`` guard), really only where ``a < 2 * b`` (at (0,1)). The reader at
    (1,1) is guarded by ``a < 2 * b`` too, but the fetch did not write L[0] in that round: it
    reads X[0] from round (0,1), which padding would replace by the pad of round (1,0)."""
    x = Buffer("X", (1,), "float32")
    out = Buffer("O", (1,), "float32")
    tile = Buffer("L", (1,), "float32", scope="local")
    acc = Buffer("acc", (1,), "float32", scope="local")
    a, b = Var("a"), Var("b")
    body = Allocate(tile, Allocate(acc, seq(
        BufferStore(acc, 0.0, (0,)),
        For(a, 0, 2, S, For(b, 0, 2, S, seq(
            IfThenElse(op.all_(op.any_(b == 0, a == 0), a < b * 2), BufferStore(tile, x[0], (0,))),
            IfThenElse(a < b * 2, BufferStore(acc, acc[0] + tile[0], (0,))),
        ))),
        BufferStore(out, acc[0], (0,)),
    )))  # fmt: skip
    return PrimFunc((x, out), body)


def test_a_pad_written_in_an_earlier_round_is_not_read_as_real() -> None:
    f = _two_round_loops()
    g, lp = pad(f)
    rep = one(lp, "fetch", "L")
    assert rep.outcome == "refused" and "in its round" in rep.reason
    (st,) = store_to(g, "L")
    assert not isinstance(st.value, Select)
    args = [np.array([3.0], "float32"), np.zeros(1, "float32")]
    check(f, g, args, np.array([6.0]))  # read at (0,1) and (1,1)


def _shared_inner_loop(second_reader: bool = True) -> PrimFunc:
    """The compute shares the loop ``q`` with the fetch: at q = 0 it may only read what the
    fetch wrote at q <= 0, although the fetch covers both elements over the whole loop."""
    x = Buffer("X", (2,), "float32")
    out = Buffer("O", (1,), "float32")
    tile = Buffer("L", (2,), "float32", scope="local")
    acc = Buffer("acc", (1,), "float32", scope="local")
    q, i, j = Var("q"), Var("i"), Var("j")
    tail = [BufferStore(acc, acc[0] + tile[0], (0,))] if second_reader else []
    body = Allocate(tile, Allocate(acc, seq(
        BufferStore(acc, 0.0, (0,)),
        For(q, 0, 2, S, seq(
            For(i, 0, 1, S, IfThenElse(q < 1, BufferStore(tile, x[q], (q,)))),
            For(j, 0, 2, S, IfThenElse(j < 1, BufferStore(acc, acc[0] + tile[j] * 2.0, (0,)))),
        )),
        *tail,
        BufferStore(out, acc[0], (0,)),
    )))  # fmt: skip
    return PrimFunc((x, out), body)


def test_compute_guard_kept_when_the_fetch_writes_its_element_only_later() -> None:
    f = _shared_inner_loop()
    g, lp = pad(f)
    assert one(lp, "fetch", "L").outcome == "padded"
    comp = one(lp, "compute", "acc")
    assert comp.outcome == "unchanged" and comp.pad_value is None
    assert "does not cover" in comp.conjuncts[0].reason
    (upd,) = [s for s in store_to(g, "acc") if "L[j]" in text(s.value)]
    assert [text(c) for c in guard_of(g, upd)] == ["j < 1"]
    args = [np.array([3.0, 5.0], "float32"), np.zeros(1, "float32")]
    check(f, g, args, np.array([3.0 * 2 * 2 + 3.0]))


# --- (b) a guarded re-init after the reduction wrote the accumulator ---------------------------


def _reinit(kind: str) -> PrimFunc:
    """``acc[i] = id; acc[i] op= X[i]; if i < 1: acc[i] = id``: the original keeps X[1]."""
    x = Buffer("X", (2,), "float32")
    out = Buffer("O", (2,), "float32")
    acc = Buffer("acc", (2,), "float32", scope="local")
    i, j = Var("i"), Var("j")
    init = 0.0 if kind == "sum" else float("-inf")
    upd = acc[i] + x[i] if kind == "sum" else op.max_(acc[i], x[i])
    body = Allocate(acc, seq(
        For(i, 0, 2, S, seq(
            BufferStore(acc, init, (i,)),
            BufferStore(acc, upd, (i,)),
            IfThenElse(i < 1, BufferStore(acc, init, (i,))),
        )),
        For(j, 0, 2, S, BufferStore(out, acc[j], (j,))),
    ))  # fmt: skip
    return PrimFunc((x, out), body)


@pytest.mark.parametrize("kind,first", [("sum", 0.0), ("max", float("-inf"))])
def test_b_guarded_reinit_after_the_reduction_keeps_its_guard(kind: str, first: float) -> None:
    f = _reinit(kind)
    g, lp = pad(f)
    (rep,) = [c for c in lp.report.by_buffer("acc") if c.kind == "init" and c.conjuncts]
    assert rep.outcome == "refused" and "before this init" in rep.reason
    assert [(c.text, c.inlined) for c in rep.conjuncts] == [("i < 1", False)]
    args = [np.array([3.0, 4.0], "float32"), np.zeros(2, "float32")]
    want = np.array([first, 4.0])
    np.testing.assert_array_equal(run_cpu(f, args)[-1], want)
    np.testing.assert_array_equal(run_cpu(g, args)[-1], want)
    # the whole pipeline on the hand-lowered function, padding on
    np.testing.assert_array_equal(run_cpu(lower_with(f, pad=True), args)[-1], want)


def test_init_in_the_reduction_loop_is_padded_when_it_writes_no_reduced_element() -> None:
    """The te shape of an undecomposed reduction: ``if k == 0: acc[i] = 0`` inside the k loop.
    The padded init writes rows >= M, which the reduction never writes: still padded."""
    x = Buffer("X", (3, 4), "float32")
    out = Buffer("O", (3,), "float32")
    acc = Buffer("acc", (2,), "float32", scope="local")
    b, k, i, j = Var("b"), Var("k"), Var("i"), Var("j")
    row = b * 2 + i
    body = For(b, 0, 2, S, Allocate(acc, seq(
        For(k, 0, 4, S, For(i, 0, 2, S, IfThenElse(row < 3, seq(
            IfThenElse(k == 0, BufferStore(acc, 0.0, (i,))),
            BufferStore(acc, acc[i] + x[row, k], (i,)),
        )))),
        For(j, 0, 2, S, IfThenElse(b * 2 + j < 3, BufferStore(out, acc[j], (b * 2 + j,)))),
    )))  # fmt: skip
    f = PrimFunc((x, out), body)
    g, lp = pad(f)
    rep = one(lp, "init", "acc")
    assert rep.outcome == "padded", str(lp.report)
    assert [(c.text, c.inlined) for c in rep.conjuncts] == [("b * 2 + i < 3", True), ("k == 0", False)]
    args = [np.arange(1, 13, dtype="float32").reshape(3, 4), np.zeros(3, "float32")]
    check(f, g, args, args[0].astype(np.float64).sum(axis=1))


# --- (c) the other operand is an allocated intermediate, not a parameter ------------------------


def _intermediate_operand(param: bool) -> PrimFunc:
    """``acc += T[j] * G[j]`` under ``j < 3``: ``G`` (global) is written only at 0..2."""
    x = Buffer("X", (4,), "float32")
    out = Buffer("O", (1,), "float32")
    g_buf = Buffer("G", (4,), "float32", scope="global")
    tile = Buffer("Tl", (4,), "float32", scope="local")
    acc = Buffer("acc", (1,), "float32", scope="local")
    i, j, k = Var("i"), Var("j"), Var("k")
    other = x if param else g_buf
    kernel = Allocate(tile, Allocate(acc, seq(
        For(i, 0, 4, S, IfThenElse(i < 3, BufferStore(tile, x[i], (i,)))),
        BufferStore(acc, 0.0, (0,)),
        For(j, 0, 4, S, IfThenElse(j < 3, BufferStore(acc, acc[0] + tile[j] * other[j], (0,)))),
        BufferStore(out, acc[0], (0,)),
    )))  # fmt: skip
    if param:
        return PrimFunc((x, out), kernel)
    return PrimFunc((x, out), Allocate(g_buf, seq(
        For(k, 0, 3, S, BufferStore(g_buf, x[k], (k,))), kernel)))  # fmt: skip


@pytest.mark.parametrize("param", [False, True], ids=["intermediate", "parameter"])
def test_c_compute_guard_kept_for_an_unwritten_intermediate_operand(param: bool) -> None:
    f = _intermediate_operand(param)
    g, lp = pad(f)
    assert one(lp, "fetch", "Tl").outcome == "padded"
    comp = one(lp, "compute", "acc")
    (upd,) = [s for s in store_to(g, "acc") if "Tl" in text(s.value)]
    if param:  # a parameter is defined everywhere in bounds: the guard goes
        assert comp.outcome == "guard reduced" and guard_of(g, upd) == []
    else:
        assert comp.outcome == "unchanged" and "not a parameter" in comp.conjuncts[0].reason
        assert [text(c) for c in guard_of(g, upd)] == ["j < 3"]
    xv = np.array([1.0, 2.0, 3.0, 4.0], "float32")
    check(f, g, [xv, np.zeros(1, "float32")], np.array([(xv[:3] ** 2).sum()]))


# --- (d) a tile read as an index ---------------------------------------------------------------


def test_d_scatter_through_a_padded_tile_is_refused_clearly() -> None:
    """``acc[T[j + 1]] += T[j]``: a pad read as an index would change which element is
    updated, so the fetch is refused (it used to fail with StopIteration)."""
    x = Buffer("X", (4,), "int32")
    out = Buffer("O", (4,), "int32")
    tile = Buffer("Ti", (4,), "int32", scope="local")
    acc = Buffer("acc", (4,), "int32", scope="local")
    i, j, k, m = Var("i"), Var("j"), Var("k"), Var("m")
    body = Allocate(tile, Allocate(acc, seq(
        For(i, 0, 4, S, IfThenElse(i < 3, BufferStore(tile, x[i], (i,)))),
        For(k, 0, 4, S, BufferStore(acc, 0, (k,))),
        For(j, 0, 3, S, IfThenElse(j < 2, BufferStore(acc, acc[tile[j + 1]] + tile[j], (tile[j + 1],)))),
        For(m, 0, 4, S, BufferStore(out, acc[m], (m,))),
    )))  # fmt: skip
    f = PrimFunc((x, out), body)
    g, lp = pad(f)
    rep = one(lp, "fetch", "Ti")
    assert rep.outcome == "refused" and "store index" in rep.reason
    assert rep.pad_value is None
    assert [(c.text, c.inlined, c.reason) for c in rep.conjuncts] == [
        ("i < 3", False, "the candidate is refused")
    ]
    comp = one(lp, "compute", "acc")
    assert comp.outcome == "unchanged" and not comp.conjuncts[0].inlined
    xv = np.array([1, 2, 3, 0], "int32")
    want = np.zeros(4, np.int64)
    for jj in range(2):
        want[xv[jj + 1]] += xv[jj]
    check(f, g, [xv, np.zeros(4, "int32")], want.astype(np.int32))


# --- report (issue 18) -------------------------------------------------------------------------


def test_report_gives_a_reason_for_every_conjunct_and_no_pad_unless_padded() -> None:
    f = _two_round_loops()
    _, lp = pad(f)
    rep = one(lp, "fetch", "L")
    assert rep.outcome == "refused" and rep.pad_value is None
    decided = {c.text: c for c in rep.conjuncts}
    assert not any(c.inlined for c in rep.conjuncts) and all(c.reason for c in rep.conjuncts)
    assert "never split" in decided["b == 0 or a == 0"].reason
    assert decided["a < b * 2"].reason.startswith("the candidate is refused; alone it would be inlined")
    comp = one(lp, "compute", "acc")
    assert comp.outcome == "unchanged" and comp.pad_value is None
    printed = str(lp.report).splitlines()
    heads = [line for line in printed if line.startswith("[")]
    assert heads == [
        "[fetch] L: refused -- " + rep.reason,
        "[compute] acc: unchanged -- no conjunct can be dropped",
    ]
    assert all("  (" in line for line in printed if line.lstrip().startswith("kept"))
