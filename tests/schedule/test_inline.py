"""compute_inline / reverse_compute_inline: golden IR, equivalence and preconditions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopir import te
from loopir.errors import ScheduleError
from loopir.schedule import compute_at as CA
from loopir.schedule import inline
from tests.schedule.dm_util import (
    assert_equivalent,
    block_of,
    block_order,
    chain,
    conv2d_nhwc,
    golden_pair,
    loop_vars,
    matmul,
    matmul_bias_relu,
    tile,
)


def _allocs(func) -> list[str]:
    return [b.name for b in func.body.block.alloc_buffers]


def test_compute_inline_golden(golden) -> None:
    f = chain(8, 6)
    g = inline.compute_inline(f, "B")
    assert block_order(g) == ["C", "D"]
    assert _allocs(g) == ["C"]
    c = block_of(g, "C")
    assert [r.buffer.name for r in c.reads] == ["A"]
    golden_pair(golden, "compute_inline", f, g)
    assert_equivalent(f, g)
    # D reads C twice at the same point: both loads are replaced
    h = inline.compute_inline(g, "C")
    assert block_order(h) == ["D"]
    assert "C[" not in str(block_of(h, "D").body)
    assert [r.buffer.name for r in block_of(h, "D").reads] == ["A"]
    assert_equivalent(f, h)


def test_reverse_compute_inline_golden(golden) -> None:
    f = chain(8, 6)
    g = inline.reverse_compute_inline(f, "D")
    assert block_order(g) == ["B", "C"]
    c = block_of(g, "C")
    assert [w.buffer.name for w in c.writes] == ["D"]
    assert _allocs(g) == ["B"]
    golden_pair(golden, "reverse_compute_inline", f, g)
    assert_equivalent(f, g)
    h = inline.reverse_compute_inline(g, "C")
    assert block_order(h) == ["B"] and [w.buffer.name for w in block_of(h, "B").writes] == ["D"]
    assert_equivalent(f, h)


def test_epilogue_inline_matmul_bias_relu() -> None:
    f = matmul_bias_relu(8, 5, 6)
    # relu into the bias add; the matmul (a reduction) keeps its own block
    g = inline.reverse_compute_inline(f, "E")
    assert block_order(g) == ["C", "D"]
    d = block_of(g, "D")
    assert {r.buffer.name for r in d.reads} == {"C", "bias"}
    assert_equivalent(f, g)
    # or: bias add inlined into the relu
    h = inline.compute_inline(f, "D")
    assert block_order(h) == ["C", "E"]
    assert {r.buffer.name for r in block_of(h, "E").reads} == {"C", "bias"}
    assert_equivalent(f, h)


def test_compute_inline_conv_padding() -> None:
    f = conv2d_nhwc()
    g = inline.compute_inline(f, "P")
    assert block_order(g) == ["Y"]
    y = block_of(g, "Y")
    assert [r.buffer.name for r in y.reads] == ["X", "W"]
    assert_equivalent(f, g)


def test_compute_inline_broadcast_consumer_region() -> None:
    """A consumer reading a row vector through a broadcast: the region follows the index."""
    A = te.placeholder((6,), "float32", name="A")
    B = te.compute((6,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((4, 6), lambda i, j: B[j] + 1.0, name="C")
    f = te.create_prim_func([A, C])
    g = inline.compute_inline(f, "B")
    reg = block_of(g, "C").reads[0]
    assert reg.buffer.name == "A" and "v_j" in str(reg.region[0].min)
    assert_equivalent(f, g)


def test_inline_after_compute_at() -> None:
    f = chain(8, 6)
    i, _ = loop_vars(f, "C")
    g = CA.compute_at(f, "B", i)
    g = inline.compute_inline(g, "B")
    assert block_order(g) == ["C", "D"]
    assert_equivalent(f, g)


@given(
    m=st.integers(1, 12), n=st.integers(1, 12), fi=st.integers(1, 5),
    which=st.sampled_from(["inline_B", "inline_C", "reverse_D", "reverse_C", "all"]),
)
def test_inline_equivalence(m: int, n: int, fi: int, which: str) -> None:
    f = chain(m, n)
    g, _ = tile(f, "C", [[None, fi], None])  # tiling with an inexact split keeps predicates
    if which == "inline_B":
        g = inline.compute_inline(g, "B")
    elif which == "inline_C":
        g = inline.compute_inline(g, "C")
    elif which == "reverse_D":
        g = inline.reverse_compute_inline(g, "D")
    elif which == "reverse_C":
        g = inline.reverse_compute_inline(g, "C")
    else:
        g = inline.compute_inline(inline.compute_inline(g, "B"), "C")
    assert_equivalent(f, g)


# --- errors ---------------------------------------------------------------------------------


def test_compute_inline_errors() -> None:
    f = matmul_bias_relu(4, 3, 5)
    with pytest.raises(ScheduleError, match=r"compute_inline: producer block 'C' is a reduction"):
        inline.compute_inline(f, "C")
    with pytest.raises(ScheduleError, match=r"writes the function output 'E'"):
        inline.compute_inline(f, "E")
    with pytest.raises(ScheduleError, match=r"no block named 'Z'"):
        inline.compute_inline(f, "Z")
    # a store index that is not an iter var
    import attrs

    from loopir.ir.stmt import BufferStore
    from loopir.schedule import tree

    g = chain(4, 3)
    blk = block_of(g, "B")
    body = blk.body
    assert isinstance(body, BufferStore)
    bad = attrs.evolve(blk, body=BufferStore(body.buffer, body.value, (body.indices[0], 0)))
    g = tree.replace(g, blk, bad)
    with pytest.raises(ScheduleError, match=r"the store index 0 \(dimension 1\) of block 'B' is "
                       r"not a distinct block iter var"):
        inline.compute_inline(g, "B")


def test_reverse_compute_inline_errors() -> None:
    f = matmul_bias_relu(4, 3, 5)
    with pytest.raises(ScheduleError, match=r"reverse_compute_inline: producer block 'C' is a "
                       r"reduction"):
        inline.reverse_compute_inline(f, "D")
    with pytest.raises(ScheduleError, match=r"consumer block 'C' is a reduction"):
        inline.reverse_compute_inline(f, "C")
    # D reads C[i, j] and bias[j] - fine; a consumer with two produced inputs is refused
    A = te.placeholder((4, 4), "float32", name="A")
    B1 = te.compute((4, 4), lambda i, j: A[i, j] + 1.0, name="B1")
    B2 = te.compute((4, 4), lambda i, j: A[i, j] * 2.0, name="B2")
    C = te.compute((4, 4), lambda i, j: B1[i, j] + B2[i, j], name="C")
    g = te.create_prim_func([A, C])
    with pytest.raises(ScheduleError, match=r"must read exactly one buffer produced by another "
                       r"block, it reads 2 \(B1, B2\)"):
        inline.reverse_compute_inline(g, "C")
    # a transposed read: the consumer's point is not its iter vars in order... still
    # invertible; a broadcast read (one index) is not
    X = te.placeholder((4,), "float32", name="X")
    Y = te.compute((4,), lambda i: X[i] + 1.0, name="Y")
    Z = te.compute((3, 4), lambda i, j: Y[j] * 2.0, name="Z")
    h = te.create_prim_func([X, Z])
    with pytest.raises(ScheduleError, match=r"must load 'Y' at exactly its iter vars|must load Y "
                       r"at exactly its iter vars"):
        inline.reverse_compute_inline(h, "Z")
    # a consumer reading only part of the buffer
    P = te.placeholder((8,), "float32", name="P")
    Q = te.compute((8,), lambda i: P[i] + 1.0, name="Q")
    R = te.compute((4,), lambda i: Q[i] * 2.0, name="R")
    k = te.create_prim_func([P, R])
    with pytest.raises(ScheduleError, match=r"does not cover dimension 0 of 'Q'|does not cover "
                       r"dimension 0 of Q"):
        inline.reverse_compute_inline(k, "R")


def test_reverse_compute_inline_other_reader() -> None:
    A = te.placeholder((4,), "float32", name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((4,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((4,), lambda i: B[i] + C[i], name="D")
    f = te.create_prim_func([A, D])
    with pytest.raises(ScheduleError, match=r"reverse_compute_inline: buffer 'B' must have one "
                       r"writer and 'C' as its only reader"):
        inline.reverse_compute_inline(f, "C")
    g = inline.compute_inline(f, "B")  # B inlined into both readers
    assert block_order(g) == ["C", "D"]
    assert_equivalent(f, g)


def test_matmul_inline_refused_message_shows_ir() -> None:
    f = matmul(4, 3, 5)
    with pytest.raises(ScheduleError) as info:
        inline.compute_inline(f, "C")
    assert "T.block(\"C\")" in str(info.value)


# --- pad producers with an if-then-else store (issue 20 item 4) -----------------------------------


def _padded_matmul():
    import loopir

    func = matmul(13, 6, 8)
    sch = loopir.Schedule(func)
    sch.pad(sch.get_block("C"), [8, 8, 4])  # 13 -> 16 rows, 6 -> 8 reduce: A_pad is a guarded copy
    return func, sch


def test_compute_inline_pad_producer_as_select_golden(golden) -> None:
    """The pad copy ``if v0 < 13 and v1 < 6: A_pad = A else: A_pad = 0`` was refused ("must
    have a single BufferStore"); TVM inlines it, here as a Select (lazy: the out-of-bounds load
    of the other branch is never performed)."""
    import numpy as np

    import loopir
    from loopir.ir.expr import Select
    from loopir.ir.stmt import IfThenElse

    func, sch = _padded_matmul()
    assert isinstance(block_of(sch.func, "A_pad").body, IfThenElse)
    before = sch.func
    sch.compute_inline(sch.get_block("A_pad"))
    assert "A_pad" not in block_order(sch.func)
    value = block_of(sch.func, "C").body.value
    assert any(isinstance(n, Select) for n in _walk_exprs(value))
    loopir.verify(sch.func)
    assert_equivalent(func, sch.func)
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 1.5, (13, 6)).astype("float32")
    b = rng.uniform(0.5, 1.5, (6, 8)).astype("float32")
    c = np.zeros((13, 8), "float32")
    loopir.build(sch.func, target="cpu")(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    golden_pair(golden, "compute_inline_pad_select", before, sch.func)


def test_compute_inline_if_without_else_refused() -> None:
    """An ``if`` without ``else`` leaves elements unwritten: there is no value to inline."""
    from loopir.ir.stmt import IfThenElse

    func, sch = _padded_matmul()
    blk = block_of(sch.func, "A_pad")
    body = blk.body
    assert isinstance(body, IfThenElse)
    import attrs

    from loopir.schedule import tree

    f2 = tree.replace(sch.func, blk, attrs.evolve(blk, body=IfThenElse(body.condition, body.then_case)))
    with pytest.raises(ScheduleError, match="must have a single BufferStore as its body, got IfThenElse"):
        inline.compute_inline(f2, "A_pad")


def _walk_exprs(e):
    from loopir.ir.functor import post_order_visit

    out = []
    post_order_visit(e, out.append)
    return out
