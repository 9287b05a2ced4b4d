"""The script language construct by construct: what each parses to."""

from __future__ import annotations

import attrs
import pytest

import loopir
from loopir.ir import (
    Allocate,
    BlockRealize,
    BufferStore,
    Call,
    Cast,
    Evaluate,
    FloatImm,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    IterKind,
    Select,
    SeqStmt,
    Var,
    register_intrinsic,
)
from loopir.ir.expr import INTRINSICS, FloorDiv
from loopir.script import T, from_source

TILE = 4  # a module constant scripts may use


def body_of(f: loopir.PrimFunc) -> object:
    """The function's body below the implicit root block, if any."""
    b = f.body
    return b.block.body if isinstance(b, BlockRealize) and b.block.name == "root" else b


def region_text(regions: tuple) -> list[str]:
    return [loopir.script(r) for r in regions]


# --- parameters and sizes -------------------------------------------------------------------


def test_buffer_parameters_in_every_spelling() -> None:
    f = from_source('''
def f(A: T.Buffer((4, 8), "float16"), B: T.Buffer[(8,), "int8"], c: T.handle,
      D: T.Buffer((2, 3), "float32", strides=(4, 1)), E: T.Buffer(5)):
    C = T.match_buffer(c, [3], dtype="float64")
    pass
''')
    names = [(b.name, tuple(int(s) for s in b.shape), b.dtype) for b in f.params]
    assert names == [("A", (4, 8), "float16"), ("B", (8,), "int8"), ("C", (3,), "float64"),
                     ("D", (2, 3), "float32"), ("E", (5,), "float32")]  # fmt: skip
    assert [int(s) for s in f.params[3].strides] == [4, 1]
    assert isinstance(f.body, SeqStmt) and f.body.seq == ()


def test_symbolic_sizes() -> None:
    f = from_source('''
def f(A: T.Buffer((n, m * 2), "float32"), B: T.Buffer((k,), "float32"), k: T.int32):
    m = T.int64()
    pass
''')
    n, m2 = f.params[0].shape
    assert isinstance(n, Var) and n.dtype == "int32" and n.name == "n"
    assert m2.dtype == "int64" and loopir.script(m2) == "m * T.int64(2)"
    assert f.params[1].shape[0].name == "k"
    with pytest.raises(loopir.errors.ScriptError, match="symbolic size 'q' does not size any parameter"):
        from_source("def f(A: T.Buffer((4,), 'float32')):\n    q = T.int32()\n    pass\n")


def test_python_constants_from_the_module_and_closure() -> None:
    def make(width: int) -> loopir.PrimFunc:
        @T.prim_func
        def f(A: T.Buffer((width * TILE,), "float32")):
            for i in T.serial(width * TILE // 2):
                A[i * 2] = T.float32(0)

        return f  # type: ignore[no-any-return]

    f = make(3)
    assert int(f.params[0].shape[0]) == 12
    loop = f.body
    assert isinstance(loop, For) and isinstance(loop.extent, IntImm) and loop.extent.value == 6


# --- expressions ----------------------------------------------------------------------------


def test_literals_take_the_type_of_the_other_operand() -> None:
    f = from_source('''
def f(A: T.Buffer((4,), "float16"), I: T.Buffer((4,), "int64")):
    for i in T.serial(T.int64(4)):
        A[i] = A[i] * 2 + 0.5
        I[i] = i + 1
        A[i] = 3
''')
    st = body_of(f).body.seq  # type: ignore[attr-defined]
    assert st[0].value.dtype == "float16" and loopir.script(st[0].value) == \
        "A[i] * T.float16(2) + T.float16(0.5)"  # fmt: skip
    assert loopir.script(st[1].value) == "i + T.int64(1)"
    assert isinstance(st[2].value, FloatImm) and st[2].value.dtype == "float16"


def test_python_values_compute_but_literals_next_to_ir_do_not() -> None:
    f = from_source('''
def f(A: T.Buffer((8,), "int32")):
    A[7 // 2] = T.int32(7) // 2
''')
    s = f.body
    assert isinstance(s.indices[0], IntImm) and s.indices[0].value == 3  # type: ignore[attr-defined]
    assert isinstance(s.value, FloorDiv)  # type: ignore[attr-defined]


def test_expression_constructs() -> None:
    f = from_source('''
def f(A: T.Buffer((4,), "float32"), I: T.Buffer((4,), "int32")):
    for i in range(4):
        A[i] = T.if_then_else(i < 2 and not i == 1, T.exp(A[i]), T.min_value("float32"))
        A[i] = T.Cast("float32", I[i]) + T.cast(I[i], "float32") + T.abs(A[i])
        I[i] = T.ceildiv(I[i], 3) + T.max(i, 1) + T.floormod(i, 2)
        A[i] = A[i] if i > 0 else T.float32("inf")
        A[T.Ramp(0, 1, 4)] = T.Broadcast(T.float32(1), 4)
''')
    s = body_of(f).body.seq  # type: ignore[attr-defined]
    assert isinstance(s[0].value, Select) and isinstance(s[0].value.true_value, Call)
    assert isinstance(s[1].value.a.a, Cast)
    assert isinstance(s[3].value, Select)
    assert s[4].value.dtype == "float32x4"


def test_intrinsics_are_found_by_name_including_new_ones() -> None:
    if "test_script.twice" not in INTRINSICS:
        register_intrinsic("test_script.twice", 1)
    f = from_source('''
def f(A: T.Buffer((4,), "float32")):
    A[0] = T.test_script.twice(A[1])
    T.tvm_storage_sync("shared")
    T.evaluate(T.exp(A[0]))
    A[1] = T.call_intrin("float16", "exp", T.float16(1))
''')
    s = f.body.seq  # type: ignore[attr-defined]
    assert s[0].value.op == "test_script.twice"
    assert isinstance(s[1], Evaluate) and s[1].value.op == "tvm_storage_sync"
    assert s[1].value.args[0].value == "shared"
    assert isinstance(s[2], Evaluate) and s[2].value.op == "exp"
    assert s[3].value.dtype == "float16"


# --- statements -----------------------------------------------------------------------------


def test_loops() -> None:
    f = from_source('''
def f(A: T.Buffer((8, 8), "float32")):
    for i, j in T.grid(8, 8):
        A[i, j] = T.float32(0)
    for i in range(2, 6):
        for j in T.parallel(8):
            A[i, j] = T.float32(1)
    for b in T.thread_binding(8, "blockIdx.x"):
        for t in T.thread_binding(1, 8, thread="threadIdx.x", annotations={"k": 1}):
            for v in T.vectorized(8):
                for u in T.unroll(b, b + 2):
                    A[b, v] = T.float32(2)
''')
    grid, ranged, bound = f.body.seq  # type: ignore[attr-defined]
    assert grid.kind is ForKind.SERIAL and grid.body.kind is ForKind.SERIAL
    assert ranged.min.value == 2 and ranged.extent.value == 4 and ranged.body.kind is ForKind.PARALLEL
    assert bound.thread_tag == "blockIdx.x"
    t = bound.body
    assert (t.thread_tag, t.min.value, t.extent.value, dict(t.annotations)) == ("threadIdx.x", 1, 7, {"k": 1})
    u = t.body.body
    assert u.kind is ForKind.UNROLLED and isinstance(u.extent, IntImm) and u.extent.value == 2


def test_if_elif_else_and_augmented_stores() -> None:
    f = from_source('''
def f(A: T.Buffer((4,), "float32")):
    for i in range(4):
        if i == 0:
            A[i] += T.float32(1)
        elif i == 1:
            A[i] *= 2.0
        else:
            pass
''')
    s = f.body.body  # type: ignore[attr-defined]
    assert isinstance(s, IfThenElse) and isinstance(s.else_case, IfThenElse)
    assert loopir.script(s.then_case) == "A[i] = A[i] + T.float32(1)"
    assert isinstance(s.else_case.else_case, SeqStmt) and not s.else_case.else_case.seq


def test_allocations() -> None:
    f = from_source('''
def f(A: T.Buffer((4,), "float32")):
    with T.allocate((4,), "float32", "local") as L:
        L[0] = A[0]
    S = T.allocate((4,), "float32", "shared")
    S[0] = A[1]
    A[0] = S[0]
''')
    first, second = f.body.seq  # type: ignore[attr-defined]
    assert isinstance(first, Allocate) and first.buffer.scope == "local"
    assert isinstance(second, Allocate) and len(second.body.seq) == 2


# --- blocks ---------------------------------------------------------------------------------


def test_block_directives() -> None:
    f = from_source('''
def f(A: T.Buffer((8, 8), "float32"), C: T.Buffer((8,), "float32")):
    for i, k in T.grid(9, 8):
        with T.block("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            T.where(i < 8)
            T.block_attr({"meta": "x"})
            X = T.alloc_buffer((1,), "float32", scope="local")
            with T.init():
                C[vi] = T.float32(0)
            X[0] = A[vi, vk]
            C[vi] = C[vi] + X[0]
''')
    realize = body_of(f).body.body  # type: ignore[attr-defined]
    blk = realize.block
    assert [iv.kind for iv in blk.iter_vars] == [IterKind.SPATIAL, IterKind.REDUCE]
    assert int(blk.iter_vars[0].dom.extent) == 9  # the loop's range
    assert loopir.script(realize.predicate) == "i < 8"
    assert dict(blk.annotations) == {"meta": "x"}
    assert [b.name for b in blk.alloc_buffers] == ["X"] and blk.init is not None
    # inferred: no X (allocated here), no C among the reads (a reduction with an init)
    assert region_text(blk.reads) == ["A[vi, vk]"] and region_text(blk.writes) == ["C[vi]"]


def test_inferred_regions_cover_loops_inside_the_block() -> None:
    f = from_source('''
def f(A: T.Buffer((8, 16), "float32"), B: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            for k in range(4):
                B[vi] = B[vi] + A[vi, k * 2 + 1] + A[vi, 0]
''')
    blk = body_of(f).body.block  # type: ignore[attr-defined]
    # no init: the accumulated buffer is read too; A's column is the hull of 0 and 1..7
    assert region_text(blk.reads) == ["B[vi]", "A[vi, 0:8]"]
    assert region_text(blk.writes) == ["B[vi]"]


def test_regions_as_written_and_axes_with_domains() -> None:
    f = from_source('''
def f(A: T.Buffer((8, 8), "float32")):
    for i in range(2, 6):
        with T.block("A"):
            vi = T.axis.spatial((2, 6), i)
            vj = T.axis.reduce(T.Range(0, 8), 0)
            T.reads(A[vi, 0:8], A)
            T.writes([A[vi:vi + 1, vj]])
            A[vi, vj] = T.float32(0)
''')
    blk = body_of(f).body.block  # type: ignore[attr-defined]
    assert (int(blk.iter_vars[0].dom.min), int(blk.iter_vars[0].dom.extent)) == (2, 4)
    assert region_text(blk.reads) == ["A[vi, 0:8]", "A[0:8, 0:8]"]
    assert region_text(blk.writes) == ["A[vi, vj]"]


def test_root_block_implicit_and_explicit() -> None:
    implicit = from_source('''
def f(A: T.Buffer((4,), "float32")):
    X = T.alloc_buffer((4,), "float32")
    X[0] = A[0]
''')
    assert isinstance(implicit.body, BlockRealize) and implicit.body.block.name == "root"
    assert [b.name for b in implicit.body.block.alloc_buffers] == ["X"]
    explicit = from_source('''
def f(A: T.Buffer((4,), "float32")):
    with T.block("root"):
        T.reads()
        T.writes()
        with T.block("inner"):
            T.reads()
            T.writes(A[0])
            A[0] = T.float32(0)
''')
    assert explicit.body.block.name == "root"
    assert explicit.body.block.body.block.name == "inner"
    plain = from_source("def f(A: T.Buffer((4,), 'float32')):\n    A[0] = T.float32(0)\n")
    assert isinstance(plain.body, BufferStore)


# --- the decorator --------------------------------------------------------------------------


def test_the_decorator_reads_and_never_runs() -> None:
    calls = []

    def spy() -> None:  # pragma: no cover - must never run
        calls.append(1)

    @loopir.prim_func
    def f(A: T.Buffer((4,), "float32")):
        """A docstring is allowed."""
        for i in T.serial(4):
            A[i] = T.float32(0)

    assert not calls and isinstance(f, loopir.PrimFunc) and f.name == "f"
    assert isinstance(f.body, For)

    @T.prim_func(check_well_formed=False)
    def g(A: T.Buffer((4,), "float32")):
        A[0] = T.float32(1)

    assert isinstance(g.body, BufferStore)


def test_the_namespace_outside_a_script() -> None:
    with pytest.raises(loopir.errors.ScriptError, match="only meaningful inside a @T.prim_func"):
        T.serial(4)
    assert loopir.script(T.float32(0.5)) == "T.float32(0.5)"
    assert T.int64(3).dtype == "int64"
    assert repr(T.Buffer((4,), "float32")) == "T.Buffer((4,), 'float32')"
    with pytest.raises(AttributeError, match="no member 'nonsense'"):
        T.nonsense  # noqa: B018
    assert {"grid", "axis", "block", "exp", "float32", "loopir"} <= set(dir(T))


def test_the_parsed_function_keeps_its_positions() -> None:
    from loopir.ir.span import span_of

    f = from_source("def f(A: T.Buffer((4,), 'float32')):\n    for i in range(4):\n        A[i] = T.float32(0)\n",
                    file="k.py")  # fmt: skip
    loop = f.body
    assert str(span_of(loop)) == "k.py:2:5"
    assert str(span_of(loop.body)) == "k.py:3:9"  # type: ignore[attr-defined]
    assert span_of(attrs.evolve(loop)) is None


def test_int64_loops_give_int64_axes() -> None:
    f = from_source('''
def f(A: T.Buffer((T.int64(8),), "float32")):
    for i in T.serial(T.int64(8)):
        with T.block("A"):
            vi = T.axis.spatial(8, i)
            vj = T.axis.spatial((0, 8), i)
            A[vi] = T.float32(vj)
''')
    blk = body_of(f).body.block  # type: ignore[attr-defined]
    for iv in blk.iter_vars:
        assert iv.var.dtype == iv.dom.min.dtype == iv.dom.extent.dtype == "int64"
    loopir.verify(f)
