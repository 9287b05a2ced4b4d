"""Verifier: accepts well-formed IR, rejects each kind of ill-formed IR with a clear message."""

from __future__ import annotations

import ir_samples as S
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ir_samples import TB, loop, point, reduce, root, spatial
from ir_strategies import bool_exprs_from, int_exprs, interpret

import loopir
from loopir.analysis.verifier import verify
from loopir.errors import IRValidationError
from loopir.ir import (
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferRegion,
    BufferStore,
    Cast,
    FloatImm,
    ForKind,
    IfThenElse,
    IntImm,
    IterKind,
    IterVar,
    PrimFunc,
    Range,
    Var,
    seq,
)
from loopir.ir.expr import Select


def rejects(func: PrimFunc, check: str, *fragments: str) -> IRValidationError:
    with pytest.raises(IRValidationError) as info:
        verify(func)
    err = info.value
    assert err.check == check, str(err)
    msg = str(err)
    assert msg.startswith(f"[{check}] ")
    for frag in fragments:
        assert frag in msg, msg
    assert err.node is not None and "offending node:" in msg
    return err


def one_block(
    binding_loops: list[tuple[Var, int]],
    iters,
    bindings,
    reads,
    writes,
    body,
    params,
    predicate=True,
    init=None,
    allocs=(),
    name="B",
):
    """``for`` nest over ``binding_loops`` around one block, inside a root block."""
    stmt = BlockRealize(bindings, predicate, Block(name, iters, reads, writes, body, init=init))
    for v, ext in reversed(binding_loops):
        stmt = loop(v, ext, stmt)
    return PrimFunc(params, root(stmt, allocs))


def copy_func(extent: int = 100, dom: int = 100, predicate=True, binding=None):
    """``B[v] = A[v]`` over a loop of ``extent`` bound to an iter var of domain ``dom``."""
    A, B = Buffer("A", (100,)), Buffer("B", (100,))
    i, v = Var("i"), Var("v")
    return one_block(
        [(i, extent)],
        [spatial(v, dom)],
        [i if binding is None else binding(i)],
        [point(A, v)],
        [point(B, v)],
        BufferStore(B, A[v], (v,)),
        (A, B),
        predicate=predicate if not callable(predicate) else predicate(i),
    )


# --- acceptance -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["matmul", "scheduled", "lowered", "clashing_names"])
def test_accepts_well_formed_samples(name):
    verify(getattr(S, name)())
    assert loopir.verify is verify


def test_accepts_symbolic_domains_and_guarded_access():
    n = Var("n")
    A, B = Buffer("A", (n,)), Buffer("B", (n,))
    i, v = Var("i"), Var("v")
    f = one_block(
        [(i, n)],
        [spatial(v, n)],
        [i],
        [point(A, v)],
        [point(B, v)],
        BufferStore(B, A[v], (v,)),
        (A, B),
    )
    verify(f)
    # Loads in a Select branch are covered under the branch condition only.
    A, B = Buffer("A", (100,)), Buffer("B", (100,))
    i, v = Var("i"), Var("v")
    f = one_block(
        [(i, 100)],
        [spatial(v, 100)],
        [i],
        [BufferRegion(A, [Range(0, 99)])],
        [point(B, v)],
        BufferStore(B, Select(v < 99, A[v], FloatImm(0.0)), (v,)),
        (A, B),
    )
    verify(f)


# --- undefined / duplicate definitions --------------------------------------------------------


def test_rejects_loop_var_used_outside_its_loop():
    A = Buffer("A", (8,))
    i = Var("i")
    body = seq(loop(i, 8, BufferStore(A, FloatImm(1.0), (i,))), BufferStore(A, FloatImm(2.0), (i,)))
    rejects(
        PrimFunc((A,), body),
        "undefined-var",
        "variable 'i' is used but never defined",
        "A[i] = T.float32(2)",
    )


def test_rejects_free_var_in_extent():
    A = Buffer("A", (8,))
    i, m = Var("i"), Var("m")
    rejects(PrimFunc((A,), loop(i, m, BufferStore(A, FloatImm(1.0), (i,)))), "undefined-var", "'m'")


def test_rejects_outer_loop_var_inside_block():
    A, B = Buffer("A", (16,)), Buffer("B", (16,))
    i, v = Var("i"), Var("v")
    f = one_block(
        [(i, 16)],
        [spatial(v, 16)],
        [i],
        [point(A, v)],
        [point(B, v)],
        BufferStore(B, A[i], (v,)),
        (A, B),
    )
    rejects(f, "undefined-var", "defined outside block 'B'", "only its iter vars")


def test_rejects_undefined_buffers():
    A, X = Buffer("A", (8,)), Buffer("X", (8,), scope="shared")
    i = Var("i")
    rejects(
        PrimFunc((A,), loop(i, 8, BufferStore(X, A[i], (i,)))),
        "undefined-buffer",
        "store of buffer 'X'",
    )
    # an Allocate's buffer is gone after its body
    j = Var("j")
    body = seq(
        Allocate(X, loop(i, 8, BufferStore(X, A[i], (i,)))), loop(j, 8, BufferStore(A, X[j], (j,)))
    )
    rejects(PrimFunc((A,), body), "undefined-buffer", "load of buffer 'X'")


def test_rejects_duplicate_definitions():
    A = Buffer("A", (8, 8))
    i = Var("i")
    nested = loop(i, 8, loop(i, 8, BufferStore(A, FloatImm(0.0), (i, i))))
    rejects(PrimFunc((A,), nested), "duplicate-var", "variable 'i' is defined twice")
    j = Var("j")
    siblings = seq(
        loop(j, 8, BufferStore(A, FloatImm(0.0), (j, 0))),
        loop(j, 8, BufferStore(A, FloatImm(0.0), (j, 1))),
    )
    rejects(PrimFunc((A,), siblings), "duplicate-var", "'j'")
    n = Var("n")
    An = Buffer("A", (n,))
    rejects(
        PrimFunc((An,), loop(n, 4, BufferStore(An, FloatImm(0.0), (n,)))),
        "duplicate-var",
        "shape variable",
    )
    rejects(
        PrimFunc((A, A), BufferStore(A, FloatImm(0.0), (0, 0))), "duplicate-buffer", "passed twice"
    )
    k = Var("k")
    re_alloc = Allocate(A, loop(k, 8, BufferStore(A, FloatImm(0.0), (k, k))))
    rejects(PrimFunc((A,), re_alloc), "duplicate-buffer", "buffer 'A' is defined twice")


# --- arity and dtype --------------------------------------------------------------------------


def test_rejects_index_arity_mismatch():
    A, B = Buffer("A", (8, 8)), Buffer("B", (8,))
    i = Var("i")
    bad_load = BufferLoad(A, (i,))  # built directly: Buffer.__getitem__ would refuse
    rejects(
        PrimFunc((A, B), loop(i, 8, BufferStore(B, bad_load, (i,)))),
        "index-arity",
        "uses 1 indices",
        "2 dimensions",
    )


def test_rejects_store_dtype_mismatch():
    A = Buffer("A", (8,))
    i = Var("i")
    body = loop(i, 8, BufferStore(A, Cast("float16", A[i]), (i,)))
    rejects(PrimFunc((A,), body), "store-dtype", "float16 value into buffer 'A' of dtype float32")


# --- block bindings ---------------------------------------------------------------------------


def test_rejects_binding_outside_domain():
    rejects(
        copy_func(extent=128, dom=100),
        "block-binding",
        "block 'B'",
        "binding i of iter var v is 100 at i=100",
        "outside its domain [0, 100)",
    )


def test_rejects_binding_outside_domain_in_a_huge_space():
    # 2**20 loop points: too many to enumerate, but a sum of distinct vars has exact bounds
    A, B = Buffer("A", (1,)), Buffer("B", (1,))
    i, j, v = Var("i"), Var("j"), Var("v")

    def func(dom):
        return one_block(
            [(i, 1024), (j, 1024)],
            [spatial(v, dom)],
            [i * 1024 + j],
            [point(A, 0)],
            [point(B, 0)],
            BufferStore(B, A[0], (0,)),
            (A, B),
        )

    rejects(func(1024 * 1023), "block-binding", "takes values in [0, 1048575]", "[0, 1047552)")
    verify(func(1024 * 1024))


def test_accepts_binding_guarded_by_predicate():
    verify(copy_func(extent=128, dom=100, predicate=lambda i: i < 100))
    verify(copy_func(extent=50, dom=100, binding=lambda i: i * 2))


def test_rejects_binding_when_predicate_too_weak():
    rejects(
        copy_func(extent=128, dom=100, predicate=lambda i: i < 110),
        "block-binding",
        "is 100 at i=100 where the predicate holds",
    )


def test_rejects_nonlinear_binding_by_enumeration():
    # (i * 7) % 13 over i < 13 is a permutation of 0..12: 12 is outside a domain of 12
    err = rejects(
        copy_func(extent=13, dom=12, binding=lambda i: i * 7 % 13), "block-binding", "is 12 at i="
    )
    assert "i * 7 % 13" in str(err)
    verify(copy_func(extent=13, dom=13, binding=lambda i: i * 7 % 13))


def test_rejects_binding_dtype_mismatch():
    rejects(copy_func(binding=lambda i: Cast("int64", i)), "block-binding", "of dtype int64")


def test_accepts_loop_var_in_spatial_and_reduce_bindings():
    """A fused spatial+reduce loop (TVM's fuse makes one) is well-formed: issue 20 item 4.
    The schedule keeps it correct (reorder of such a chain is refused, see test_loops)."""
    A, C = Buffer("A", (4, 5)), Buffer("C", (4,))
    f_, vi, vk = Var("f"), Var("v_i"), Var("v_k")
    f = one_block(
        [(f_, 20)],
        [spatial(vi, 4), reduce(vk, 5)],
        [f_ // 5, f_ % 5],
        [point(A, vi, vk)],
        [point(C, vi)],
        BufferStore(C, C[vi] + A[vi, vk], (vi,)),
        (A, C),
        init=BufferStore(C, FloatImm(0.0), (vi,)),
    )
    verify(f)


# --- regions ----------------------------------------------------------------------------------


def test_rejects_access_to_undeclared_buffer():
    A, B, Z = Buffer("A", (16,)), Buffer("B", (16,)), Buffer("Z", (16,))
    i, v = Var("i"), Var("v")
    store_z = one_block([(i, 16)], [spatial(v, 16)], [i], [point(A, v)], [point(B, v)],
                        seq(BufferStore(B, A[v], (v,)), BufferStore(Z, A[v], (v,))), (A, B, Z))  # fmt: skip
    rejects(
        store_z, "region-cover", "stores to buffer 'Z', which T.writes does not list", "Z[v] = A[v]"
    )
    i, v = Var("i"), Var("v")
    load_z = one_block([(i, 16)], [spatial(v, 16)], [i], [point(A, v)], [point(B, v)],
                       BufferStore(B, A[v] + Z[v], (v,)), (A, B, Z))  # fmt: skip
    rejects(
        load_z, "region-cover", "loads from buffer 'Z', which neither T.reads nor T.writes lists"
    )


def test_rejects_access_outside_declared_region():
    A, B = Buffer("A", (17,)), Buffer("B", (16,))
    i, v = Var("i"), Var("v")
    f = one_block(
        [(i, 16)],
        [spatial(v, 16)],
        [i],
        [point(A, v)],
        [point(B, v)],
        BufferStore(B, A[v + 1], (v,)),
        (A, B),
    )
    rejects(
        f,
        "region-cover",
        "load A[v + 1] accesses A[1] at v=0",
        "outside its declared region(s) A[v]",
        "B[v] = A[v + 1]",
    )


def test_tile_regions_with_inner_loops():
    def tiled(inner: int):
        A, B = Buffer("A", (64,)), Buffer("B", (16,))
        i, v, j = Var("i"), Var("v"), Var("j")
        body = loop(j, inner, BufferStore(B, B[v] + A[v * 4 + j], (v,)))
        return one_block([(i, 16)], [spatial(v, 16)], [i], [BufferRegion(A, [Range(v * 4, 4)])],
                         [point(B, v)], body, (A, B))  # fmt: skip

    verify(tiled(4))
    rejects(tiled(5), "region-cover", "A[4] at v=0, j=4")


def test_rejects_unguarded_access_outside_region():
    A, B = Buffer("A", (100,)), Buffer("B", (100,))
    i, v = Var("i"), Var("v")
    f = one_block([(i, 100)], [spatial(v, 100)], [i], [BufferRegion(A, [Range(0, 99)])], [point(B, v)],
                  IfThenElse(v < 99, BufferStore(B, A[v], (v,)), BufferStore(B, A[v], (v,))), (A, B))  # fmt: skip
    rejects(f, "region-cover", "A[99] at v=99")


# --- thread bindings --------------------------------------------------------------------------


def _kernel(inner_extent: int, nested: bool):
    A = Buffer("A", (64, 64))
    bx, t1, t2 = Var("bx"), Var("tx"), Var("ty")
    inner = loop(t2, inner_extent, BufferStore(A, FloatImm(0.0), (bx, t2)), TB, "threadIdx.x")
    if nested:
        body = loop(t1, 64, inner, TB, "threadIdx.x")
    else:
        body = seq(loop(t1, 64, BufferStore(A, FloatImm(1.0), (bx, t1)), TB, "threadIdx.x"), inner)
    return PrimFunc((A,), loop(bx, 64, body, TB, "blockIdx.x"))


def test_thread_extents():
    verify(_kernel(64, nested=True))  # cooperative-fetch style: same tag, same extent
    verify(_kernel(64, nested=False))
    rejects(
        _kernel(32, nested=True),
        "thread-extent",
        "threadIdx.x is bound with extent 32 here but with extent 64 by loop tx",
    )
    rejects(_kernel(32, nested=False), "thread-extent", "same kernel")
    # two separate kernels may use different extents
    A = Buffer("A", (64,))
    t1, t2 = Var("t1"), Var("t2")
    k1 = loop(t1, 64, BufferStore(A, FloatImm(0.0), (t1,)), TB, "threadIdx.x")
    k2 = loop(t2, 32, BufferStore(A, FloatImm(1.0), (t2,)), TB, "threadIdx.x")
    verify(PrimFunc((A,), seq(k1, k2)))


def _grid(tags: list[tuple[str, int]]):
    """Nested loops bound to ``tags`` (outermost first) around one store."""
    A = Buffer("A", (1,))
    body = BufferStore(A, FloatImm(0.0), (IntImm(0),))
    for k, (tag, extent) in reversed(list(enumerate(tags))):
        body = loop(Var(f"t{k}"), extent, body, TB, tag)
    return PrimFunc((A,), body)


def test_thread_limits():
    """Issue 11 item 4: CUDA launch limits are a named check (nvcc accepts these kernels)."""
    verify(_grid([("blockIdx.x", 2**31 - 1), ("threadIdx.x", 1024)]))
    verify(_grid([("blockIdx.y", 65535), ("threadIdx.z", 64), ("threadIdx.y", 16)]))
    verify(_grid([("vthread.x", 4096), ("threadIdx.x", 1024)]))  # virtual: no limit
    rejects(_grid([("threadIdx.x", 2048)]), "thread-limit",
            "loop t0 bound to threadIdx.x: extent 2048 exceeds the CUDA thread block dimension "
            "limit of 1024")  # fmt: skip
    rejects(_grid([("threadIdx.z", 65)]), "thread-limit", "limit of 64 for threadIdx.z")
    rejects(_grid([("blockIdx.y", 65536)]), "thread-limit", "grid dimension limit of 65535")
    rejects(_grid([("blockIdx.x", 2**31)]), "thread-limit", "limit of 2147483647")
    rejects(_grid([("threadIdx.y", 64), ("threadIdx.x", 32)]), "thread-limit",
            "loop t1 bound to threadIdx.x: the kernel would have 2048 threads per block "
            "(threadIdx.x=32 x threadIdx.y=64), more than the CUDA limit of 1024")  # fmt: skip
    # Two kernels of 1024 threads each are fine: the product is per kernel.
    A = Buffer("A", (1,))
    k1 = loop(Var("a"), 1024, BufferStore(A, FloatImm(0.0), (IntImm(0),)), TB, "threadIdx.x")
    k2 = loop(Var("b"), 1024, BufferStore(A, FloatImm(1.0), (IntImm(0),)), TB, "threadIdx.y")
    verify(PrimFunc((A,), seq(k1, k2)))


def test_rejects_non_function_input():
    with pytest.raises(IRValidationError, match=r"\[input\] verify expects a PrimFunc, got IntImm"):
        verify(IntImm(1))


def test_messages_show_the_kind_of_loop():
    # thread-extent's offending node is the inner loop: printed with its tag
    with pytest.raises(IRValidationError) as info:
        verify(_kernel(32, nested=True))
    assert 'T.thread_binding(32, thread="threadIdx.x")' in str(info.value)
    assert ForKind.THREAD_BINDING is info.value.node.kind
    assert IntImm(32).value == info.value.node.extent.value


# --- properties: the range checks agree with brute force ---------------------------------------

_i, _j = Var("i"), Var("j")


@given(
    int_exprs([_i, _j], depth=3),
    st.one_of(st.none(), bool_exprs_from(int_exprs([_i, _j], depth=1))),
    st.integers(1, 12),
    st.integers(1, 12),
    st.integers(-10, 10),
    st.integers(1, 40),
)
def test_binding_check_matches_brute_force(binding, pred, ei, ej, lo, ext):
    env_points = [{_i: a, _j: b} for a in range(ei) for b in range(ej)]
    active = [p for p in env_points if pred is None or interpret(pred, p)]
    violated = any(not lo <= interpret(binding, p) < lo + ext for p in active)
    A, B, v = Buffer("A", (1,)), Buffer("B", (1,)), Var("v")
    f = one_block(
        [(_i, ei), (_j, ej)],
        [IterVar(v, Range(lo, ext), IterKind.SPATIAL)],
        [binding],
        [point(A, 0)],
        [point(B, 0)],
        BufferStore(B, A[0], (0,)),
        (A, B),
        predicate=True if pred is None else pred,
    )
    if violated:
        rejects(f, "block-binding", "outside its domain")
    else:
        verify(f)


@given(
    int_exprs([_i, _j], depth=2),
    st.one_of(st.none(), bool_exprs_from(int_exprs([_i, _j], depth=1))),
    st.integers(1, 10),
    st.integers(1, 10),
    st.integers(-30, 30),
    st.integers(1, 40),
)
def test_region_check_matches_brute_force(index, guard, ei, ej, rlo, rext):
    """Block iter var ``i`` (domain ei), inner loop ``j`` (ej), a guarded load A[index]
    against the declared region A[rlo : rlo + rext]."""
    points = [{_i: a, _j: b} for a in range(ei) for b in range(ej)]
    active = [p for p in points if guard is None or interpret(guard, p)]
    violated = any(not rlo <= interpret(index, p) < rlo + rext for p in active)
    A, B, x = Buffer("A", (64,)), Buffer("B", (16,)), Var("x")
    load = BufferStore(B, B[_i] + A[index], (_i,))
    inner = loop(_j, ej, load if guard is None else IfThenElse(guard, load))
    f = one_block(
        [(x, ei)],
        [spatial(_i, ei)],
        [x],
        [BufferRegion(A, [Range(rlo, rext)])],
        [point(B, _i)],
        inner,
        (A, B),
    )
    if violated:
        rejects(f, "region-cover", "outside its declared region")
    else:
        verify(f)


def _nested(use_outer_loop_var: bool) -> PrimFunc:
    """An outer block over 4-row tiles holding a loop and an inner per-row block."""
    A, B = Buffer("A", (16,)), Buffer("B", (16,))
    io, ii, vo, vi = Var("io"), Var("ii"), Var("vo"), Var("vi")
    inner_binding = (io if use_outer_loop_var else vo) * 4 + ii
    inner = BlockRealize(
        (inner_binding,),
        True,
        Block(
            "inner", [spatial(vi, 16)], [point(A, vi)], [point(B, vi)], BufferStore(B, A[vi], (vi,))
        ),
    )
    outer = BlockRealize(
        (io,),
        True,
        Block(
            "outer",
            [spatial(vo, 4)],
            [BufferRegion(A, [Range(vo * 4, 4)])],
            [BufferRegion(B, [Range(vo * 4, 4)])],
            loop(ii, 4, inner),
        ),
    )
    return PrimFunc((A, B), root(loop(io, 4, outer)))


def test_nested_blocks():
    verify(_nested(use_outer_loop_var=False))
    rejects(
        _nested(use_outer_loop_var=True), "undefined-var", "'io' is defined outside block 'outer'"
    )


def test_nested_block_sees_the_enclosing_blocks_iter_vars():
    """As in TensorIR (the inner block of blockize indexes with the outer block's iter vars):
    a nested block may use the iter vars of the blocks around it, not the loops between."""
    A, B = Buffer("A", (16,)), Buffer("B", (16,))
    io, ii, vo, vi = Var("io"), Var("ii"), Var("vo"), Var("vi")

    def func(index_var: Var, shift: int = 0) -> PrimFunc:
        inner = BlockRealize(
            (ii,),
            True,
            Block(
                "inner", [spatial(vi, 4)], [point(A, vo * 4 + vi)], [point(B, vo * 4 + vi)],
                BufferStore(B, A[vo * 4 + vi], (index_var * 4 + vi + shift,)),
            ),
        )  # fmt: skip
        outer = BlockRealize(
            (io,),
            True,
            Block(
                "outer", [spatial(vo, 4)], [BufferRegion(A, [Range(vo * 4, 4)])],
                [BufferRegion(B, [Range(vo * 4, 4)])], loop(ii, 4, inner),
            ),
        )  # fmt: skip
        return PrimFunc((A, B), root(loop(io, 4, outer)))

    verify(func(vo))
    rejects(func(ii), "undefined-var", "'ii' is defined outside block 'inner'")
    # the region check knows the enclosing iter var: a store one past the declared point is out
    rejects(func(vo, shift=1), "region-cover")
