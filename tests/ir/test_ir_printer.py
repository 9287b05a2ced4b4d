"""Printer: golden scripts of hand-built IR, exact expression text, marks, properties."""

from __future__ import annotations

import math

import ir_samples as S
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ir_strategies import int_exprs, interpret

import loopir
from loopir.ir import (
    Buffer,
    BufferRegion,
    FloatImm,
    ForKind,
    IntImm,
    Range,
    SeqStmt,
    Var,
    op,
)
from loopir.ir.expr import Broadcast, Call, Cast, Div, Ramp, Select, StringImm
from loopir.ir.printer import expr_to_str, script, stmt_to_str

x, y, z = Var("x"), Var("y"), Var("z")


# --- golden scripts ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["matmul", "scheduled", "lowered", "clashing_names"])
def test_golden_functions(golden, name):
    func = getattr(S, name)()
    golden(f"ir/printer_{name}", script(func))


def test_golden_marks(golden):
    f = S.scheduled()
    gemm = f.body.block.body.seq[0]
    k0_loop = gemm.body
    fetch_loop = k0_loop.body.seq[0]
    fetch_realize = fetch_loop.body.body
    compute_block = k0_loop.body.seq[1].body.body.body.block
    parts = {
        "loop": script(f, mark=k0_loop),
        "block_realize": script(f, mark=fetch_realize),
        "block": script(f, mark=compute_block),
        "store_value_expr": script(f, mark=compute_block.body.value.b),
        "predicate": script(f, mark=fetch_realize.predicate),
        "iter_var": script(f, mark=compute_block.iter_vars[2]),
        "alloc_buffer": script(f, mark=f.body.block.alloc_buffers[1]),
        "loop_var": script(f, mark=k0_loop.loop_var),
        "param_buffer": script(f, mark=f.params[1]),
    }
    text = "\n\n".join(f"## mark={k}\n{v}" for k, v in parts.items())
    golden("ir/printer_marks", text)


# --- exact expression text --------------------------------------------------------------------


@pytest.mark.parametrize(
    "build, text",
    [
        (lambda: x + y * z, "x + y * z"),
        (lambda: (x + y) * z, "(x + y) * z"),
        (lambda: x - (y - z), "x - (y - z)"),
        (lambda: (x - y) - z, "x - y - z"),
        (lambda: x - (y + z), "x - (y + z)"),
        (lambda: x // (y * z), "x // (y * z)"),
        (lambda: (x // y) % z, "x // y % z"),
        (lambda: x * -3, "x * -3"),
        (lambda: IntImm(-3) * x, "-3 * x"),
        (lambda: (x < y) == (y < z), "(x < y) == (y < z)"),
        (lambda: op.not_(x < y), "not x < y"),
        (lambda: op.not_(op.all_(x < y, y < z)), "not (x < y and y < z)"),
        (lambda: op.all_(op.any_(x < 1, y < 2), z < 3), "(x < 1 or y < 2) and z < 3"),
        (lambda: op.any_(x < 1, op.all_(y < 2, z < 3)), "x < 1 or y < 2 and z < 3"),
        (lambda: op.min_(x, y + 1), "T.min(x, y + 1)"),
        (lambda: op.max_(x, 0) * 2, "T.max(x, 0) * 2"),
        (lambda: Select(x < y, x, y), "T.Select(x < y, x, y)"),
        (lambda: Cast("float16", x), 'T.Cast("float16", x)'),
        (lambda: IntImm(7, "int64"), "T.int64(7)"),
        (lambda: IntImm(1, "bool"), "True"),
        (lambda: IntImm(0, "bool"), "False"),
        (lambda: FloatImm(0.0), "T.float32(0)"),
        (lambda: FloatImm(0.5, "float16"), "T.float16(0.5)"),
        (lambda: FloatImm(-math.inf), 'T.float32("-inf")'),
        (lambda: FloatImm(math.nan, "float64"), 'T.float64("nan")'),
        (
            lambda: Div(FloatImm(1.0), FloatImm(3.0) + FloatImm(1.5)),
            "T.float32(1) / (T.float32(3) + T.float32(1.5))",
        ),
        (lambda: op.exp(Cast("float32", x)), 'T.exp(T.Cast("float32", x))'),
        (lambda: op.storage_sync("shared"), 'T.tvm_storage_sync("shared")'),
        (lambda: StringImm('a"b'), '"a\\"b"'),
        (lambda: Ramp(x * 4, IntImm(1), 4), "T.Ramp(x * 4, 1, 4)"),
        (lambda: Broadcast(FloatImm(2.0), 8), "T.Broadcast(T.float32(2), 8)"),
        (
            lambda: Call("float32", "fma", (FloatImm(1.0), FloatImm(2.0), FloatImm(3.0))),
            "T.fma(T.float32(1), T.float32(2), T.float32(3))",
        ),
        (lambda: x + Var("x"), "x + x_1"),
        (lambda: Var("T") + 1, "T_1 + 1"),
        (lambda: Var("a b") + 1, "a_b + 1"),
        (lambda: Var("in") + Var("3d"), "in_ + v_3d"),
    ],
)
def test_expr_text(build, text):
    e = build()
    assert expr_to_str(e) == text
    assert repr(e) == text and str(e) == text


def test_buffer_load_and_store_text():
    A = Buffer("A", (4, 8))
    Z = Buffer("Z", ())
    i = Var("i")
    assert expr_to_str(A[i, i + 1]) == "A[i, i + 1]"
    assert expr_to_str(Z[()]) == "Z[()]"
    from loopir.ir import BufferStore, Evaluate

    assert stmt_to_str(BufferStore(A, FloatImm(1.0), (i, 0))) == "A[i, 0] = T.float32(1)"
    assert stmt_to_str(Evaluate(IntImm(0))) == "T.evaluate(0)"
    # an empty sequence is not T.evaluate(0): a script parser must tell them apart
    assert stmt_to_str(SeqStmt(())) == "pass"


def test_other_node_kinds():
    A = Buffer("A", (16, 16), "float16", scope="shared", strides=(32, 1))
    i = Var("i")
    assert script(A) == 'A = T.Buffer((16, 16), "float16", strides=(32, 1), scope="shared")'
    assert script(BufferRegion(A, [Range(i * 4, 4), Range(0, 16)])) == "A[i * 4:i * 4 + 4, 0:16]"
    assert script(BufferRegion(A, [Range(i, 1), Range(2, 3)])) == "A[i, 2:5]"
    assert script(Range(1, 8)) == "T.Range(1, 9)"
    f = S.scheduled()
    iv = f.body.block.body.seq[1].body.body.block.iter_vars[1]
    assert script(iv) == "v_j = T.axis.spatial((2, 64))"


def test_loop_kinds_and_bounds():
    i = Var("i")
    A = Buffer("A", (64,))
    from loopir.ir import BufferStore, For

    body = BufferStore(A, FloatImm(0.0), (i,))
    cases = {
        ForKind.SERIAL: "T.serial(64)",
        ForKind.PARALLEL: "T.parallel(64)",
        ForKind.VECTORIZED: "T.vectorized(64)",
        ForKind.UNROLLED: "T.unroll(64)",
    }
    for kind, text in cases.items():
        assert stmt_to_str(For(i, 0, 64, kind, body)).splitlines()[0] == f"for i in {text}:"
    assert (
        stmt_to_str(For(i, 4, 60, ForKind.SERIAL, body)).splitlines()[0]
        == "for i in T.serial(4, 64):"
    )
    n = Var("n")
    assert (
        stmt_to_str(For(i, n, 8, ForKind.SERIAL, body)).splitlines()[0]
        == "for i in T.serial(n, n + 8):"
    )
    tb = For(i, 0, 64, ForKind.THREAD_BINDING, body, "threadIdx.y")
    assert stmt_to_str(tb).splitlines()[0] == 'for i in T.thread_binding(64, thread="threadIdx.y"):'


def test_str_of_func_is_script():
    f = S.lowered()
    assert str(f) == script(f) == f.script() == repr(f)


def test_deterministic_across_builds():
    # Two independent builds have fresh objects but must print identically.
    for name in ("matmul", "scheduled", "lowered", "clashing_names"):
        a, b = getattr(S, name)(), getattr(S, name)()
        assert script(a) == script(b)


def test_mark_absent_node_adds_note():
    f = S.matmul()
    text = script(f, mark=Var("elsewhere"))
    assert text.endswith("# note: the marked Var does not occur in the printed IR")


def test_mark_underlines_exactly_the_marked_line():
    f = S.matmul()
    k_loop = f.body.block.body.body.body
    lines = script(f, mark=k_loop).splitlines()
    at = lines.index("            for k in T.serial(770):")
    assert lines[at + 1] == "            " + "^" * len("for k in T.serial(770):")
    assert sum(1 for line in lines if set(line.strip()) == {"^"}) == 1


def test_mark_in_standalone_stmt():
    f = S.matmul()
    blk = f.body.block.body.body.body.body.block
    text = script(blk.body, mark=blk.body.value.a)
    assert text.splitlines()[1].strip().startswith("^^^")


# --- properties -------------------------------------------------------------------------------


@given(int_exprs([x, y, z]), st.integers(-9, 9), st.integers(-9, 9), st.integers(-9, 9))
def test_printed_expression_evaluates_like_the_ir(e, xv, yv, zv):
    """Python evaluating the printed text agrees with the IR semantics: the parentheses
    are right (precedence and associativity) and nothing is lost."""
    env = {x: xv, y: yv, z: zv}
    try:
        want = interpret(e, env)
    except ZeroDivisionError:
        return
    text = expr_to_str(e)

    class _T:
        min = staticmethod(min)
        max = staticmethod(max)
        int32 = staticmethod(int)  # an operand next to another bare number: T.int32(2) + 3
        bool = staticmethod(bool)

        @staticmethod
        def Select(c, t, f):  # noqa: N802 - mirrors the printed name
            return t if c else f

    got = eval(text, {"T": _T, "x": xv, "y": yv, "z": zv})  # noqa: S307 - test oracle
    assert got == want, text


@given(int_exprs([x, y, z]))
def test_printing_is_deterministic_and_total(e):
    assert expr_to_str(e) == expr_to_str(e)
    assert script(e, mark=e).splitlines()[1].startswith("^")


def test_script_of_other_objects_never_raises():
    assert script(42) == "42"
    assert "T.float32(0)" in script(S.matmul().body)
    # loopir.script is the parser's package, and calling it prints
    assert loopir.script(S.matmul()) == script(S.matmul())
    assert loopir.script(S.matmul().body, mark=S.matmul().body) == script(S.matmul().body, mark=S.matmul().body)
