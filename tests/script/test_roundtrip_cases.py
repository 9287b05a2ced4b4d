"""Round trip of hand-built IR whose printed form used to be ambiguous or not parseable.

Each case is IR that loopir can hold; ``from_source(f.script())`` must give it back exactly
(structurally equal), so the printer has to say everything the parser cannot guess.
"""

from __future__ import annotations

import loopir
from loopir.ir import (
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferRegion,
    BufferStore,
    Call,
    Evaluate,
    FloatImm,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    IterKind,
    IterVar,
    PrimFunc,
    Range,
    SeqStmt,
    Var,
)
from loopir.ir.expr import EQ, LT, Add, FloorDiv, Mul, Not, Sub
from loopir.script import from_source

A = Buffer("A", (8,), "float32")
B = Buffer("B", (8,), "float32")


def roundtrip(f: PrimFunc) -> PrimFunc:
    text = f.script()
    g = from_source(text)
    loopir.assert_structural_equal(f, g)
    # and the text is a fixed point of printing
    assert g.script() == text
    return g


def store(buf: Buffer = B, value: float = 1.0, index: int = 0) -> BufferStore:
    return BufferStore(buf, FloatImm(value), (IntImm(index),))


def test_empty_sequence_is_not_evaluate_zero() -> None:
    i = Var("i")
    empty = PrimFunc((A, B), For(i, 0, 4, ForKind.SERIAL, SeqStmt(())))
    roundtrip(empty)
    zero = PrimFunc((A, B), For(i, 0, 4, ForKind.SERIAL, Evaluate(IntImm(0))))
    roundtrip(zero)
    assert empty.script() != zero.script()


def test_allocate_followed_by_siblings() -> None:
    L = Buffer("L", (1,), "float32", scope="local")
    inner = SeqStmt((Allocate(L, BufferStore(L, FloatImm(2.0), (IntImm(0),))), store()))
    roundtrip(PrimFunc((A, B), inner))
    # the allocation's scope covering the rest prints the short way
    tail = Allocate(L, SeqStmt((BufferStore(L, FloatImm(2.0), (IntImm(0),)), store())))
    g = roundtrip(PrimFunc((A, B), tail))
    assert "L = T.allocate(" in g.script()


def test_int64_symbolic_size() -> None:
    n = Var("n", "int64")
    X = Buffer("X", (n,), "float32")
    i = Var("i", "int64")
    body = For(i, IntImm(0, "int64"), n, ForKind.SERIAL, BufferStore(X, FloatImm(0.0), (i,)))
    roundtrip(PrimFunc((X,), body))


def test_block_without_iter_vars_or_regions() -> None:
    # reads/writes left empty on purpose: inference would find A and B
    blk = Block("opaque", (), (), (), BufferStore(B, A[0], (IntImm(0),)))
    root = Block("root", (), (), (), BlockRealize((), block=blk))
    roundtrip(PrimFunc((A, B), BlockRealize((), block=root)))


def test_operations_on_two_constants_are_not_folded() -> None:
    c = [IntImm(v) for v in (2, 3, 4)]
    values = [Add(c[0], c[1]), Mul(Sub(c[0], c[1]), c[2]), FloorDiv(c[2], c[0])]
    conds = [LT(c[0], c[1]), Not(IntImm(1, "bool")), EQ(c[0], c[0])]
    body = SeqStmt(
        tuple(BufferStore(B, FloatImm(1.0), (v,)) for v in values)
        + tuple(IfThenElse(cond, store()) for cond in conds)
    )
    roundtrip(PrimFunc((A, B), body))


def test_call_with_a_result_type_of_its_own() -> None:
    x = Call("float16", "exp", (FloatImm(1.0),))
    y = Call("int32", "tvm_storage_sync", (loopir.ir.StringImm("shared"),))
    body = SeqStmt((BufferStore(Buffer("H", (1,), "float16"), x, (IntImm(0),)), Evaluate(y)))
    H = body.seq[0].buffer
    roundtrip(PrimFunc((H,), body))


def test_explicit_root_and_no_root() -> None:
    i = Var("i")
    vi = Var("vi")
    inner = Block(
        "B", (IterVar(vi, Range(0, 8), IterKind.SPATIAL),),
        (BufferRegion(A, (Range(vi, 1),)),), (BufferRegion(B, (Range(vi, 1),)),),
        BufferStore(B, A[vi], (vi,)),
    )  # fmt: skip
    nest = For(i, 0, 8, ForKind.SERIAL, BlockRealize((i,), block=inner))
    # a root with regions of its own cannot be the implicit one
    root = Block("root", (), (BufferRegion.full(A),), (BufferRegion.full(B),), nest)
    roundtrip(PrimFunc((A, B), BlockRealize((), block=root)))
    # a root with annotations
    root2 = Block("root", (), (), (), nest, annotations={"k": 1})
    roundtrip(PrimFunc((A, B), BlockRealize((), block=root2)))


def test_annotation_values_keep_their_types() -> None:
    i = Var("i")
    anns = {"py": 1, "ir": IntImm(1), "flag": True, "irflag": IntImm(1, "bool"), "f": 0.5,
            "s": "x", "l": [1, 2], "t": (1, (2, 3)), "inf": float("inf")}  # fmt: skip
    roundtrip(PrimFunc((A, B), For(i, 0, 4, ForKind.SERIAL, store(), annotations=anns)))


def test_nested_sequences() -> None:
    # lowering a reduction block inside a sequence once nested its init and update in the
    # sequence (the printer shows one flat list: the parse was flat)
    i = Var("i")
    inner = SeqStmt((SeqStmt((store(value=1.0), store(value=2.0))), store(value=3.0)))
    roundtrip(PrimFunc((A, B), For(i, 0, 4, ForKind.SERIAL, inner)))
    assert len(inner.seq) == 3


def test_names_a_script_reads_specially() -> None:
    # a loop var named range, a buffer named float, a var named T, keywords
    r, t, kw = Var("range"), Var("T"), Var("lambda")
    F = Buffer("float", (4,), "float32")
    body = For(r, 0, 4, ForKind.SERIAL, For(t, 0, 1, ForKind.SERIAL, For(
        kw, 0, 1, ForKind.SERIAL, BufferStore(F, FloatImm(1.0), (r + t + kw,)),
        annotations={"inf": float("-inf")})))  # fmt: skip
    roundtrip(PrimFunc((F,), body))
