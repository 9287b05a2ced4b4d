"""Structural equality: variable/buffer mapping, value comparison, readable failures."""

from __future__ import annotations

import attrs
import ir_samples as S
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from ir_strategies import BumpConstant, Rebuild, count_int_constants, int_exprs

import loopir
from loopir.errors import LoopIRError, StructuralEqualError
from loopir.ir import (
    Buffer,
    BufferStore,
    FloatImm,
    For,
    ForKind,
    IntImm,
    PrimFunc,
    Var,
    collect_vars,
    substitute,
)
from loopir.ir.equality import assert_structural_equal, structural_equal

x, y, z = Var("x"), Var("y"), Var("z")
SAMPLES = ["matmul", "scheduled", "lowered", "clashing_names"]


# --- whole functions --------------------------------------------------------------------------


@pytest.mark.parametrize("name", SAMPLES)
def test_independent_builds_are_equal(name):
    a, b = getattr(S, name)(), getattr(S, name)()
    assert structural_equal(a, b)
    # every var and buffer is defined inside the function: no free-var mapping needed
    assert structural_equal(a, b, map_free_vars=False)
    assert_structural_equal(a, b)


@pytest.mark.parametrize("name", SAMPLES)
def test_equal_to_itself(name):
    f = getattr(S, name)()
    assert structural_equal(f, f, map_free_vars=False)


def test_different_functions_differ():
    fs = [getattr(S, n)() for n in SAMPLES]
    for i, a in enumerate(fs):
        for j, b in enumerate(fs):
            assert structural_equal(a, b) == (i == j)


def test_names_of_vars_and_buffers_do_not_matter():
    f = S.matmul()
    A, B, C = f.params
    renamed = {b: Buffer(b.name + "_x", b.shape, b.dtype) for b in (A, B, C)}

    class _R(loopir.ir.Mutator):
        def visit_Buffer(self, b):
            return renamed.get(b, b)

    g = PrimFunc(tuple(renamed[b] for b in (A, B, C)), _R().visit(f.body))
    assert script_differs(f, g)
    assert structural_equal(f, g)


def script_differs(a, b) -> bool:
    return loopir.script(a) != loopir.script(b)


def test_block_names_and_function_names_matter():
    f = S.matmul()
    blk = f.body.block.body.body.body.body.block
    g = PrimFunc(f.params, _replace(f.body, blk, attrs.evolve(blk, name="C2")))
    assert not structural_equal(f, g)
    assert not structural_equal(f, attrs.evolve(f, name="other"))


def _replace(tree, old, new):
    class _M(loopir.ir.Mutator):
        def visit(self, node):
            if node is old:
                return new
            return super().visit(node)

    return _M().visit(tree)


def test_annotations_compared_as_values():
    f = S.scheduled()
    relu_j = f.body.block.body.seq[1].body
    same = attrs.evolve(relu_j, annotations={"pragma_unroll_explicit": 1})
    other = attrs.evolve(relu_j, annotations={"pragma_unroll_explicit": 2})
    more = attrs.evolve(relu_j, annotations={"pragma_unroll_explicit": 1, "x": 1})
    g = PrimFunc(f.params, _replace(f.body, relu_j, same), f.name, f.attrs)
    assert structural_equal(f, g)
    for changed in (other, more):
        h = PrimFunc(f.params, _replace(f.body, relu_j, changed), f.name, f.attrs)
        assert not structural_equal(f, h)
    # function attrs: dict order does not matter, values do
    assert structural_equal(
        f, attrs.evolve(f, attrs={"tir.noalias": True, "global_symbol": "dense_relu"})
    )
    assert not structural_equal(
        f, attrs.evolve(f, attrs={"tir.noalias": False, "global_symbol": "dense_relu"})
    )
    # an expression-valued annotation compares structurally, through the var mapping
    i = Var("i")
    A = Buffer("A", (8,))
    mk = lambda v, ann: For(v, 0, 8, ForKind.SERIAL, BufferStore(A, FloatImm(0.0), (v,)), None, ann)  # noqa: E731
    j = Var("j")
    assert structural_equal(mk(i, {"hint": i * 2}), mk(j, {"hint": j * 2}))
    assert not structural_equal(mk(i, {"hint": i * 2}), mk(j, {"hint": j * 3}))


def test_buffer_properties_must_match():
    a = Buffer("A", (4, 8), "float32")
    assert structural_equal(a, Buffer("B", (4, 8), "float32"))
    assert not structural_equal(a, Buffer("A", (4, 8), "float16"))
    assert not structural_equal(a, Buffer("A", (8, 4), "float32"))
    assert not structural_equal(a, Buffer("A", (4, 8), "float32", scope="shared"))
    assert not structural_equal(a, Buffer("A", (4, 8), "float32", strides=(16, 1)))
    n, m = Var("n"), Var("m")
    assert structural_equal(Buffer("A", (n, n)), Buffer("A", (m, m)))
    assert not structural_equal(Buffer("A", (n, n)), Buffer("A", (n, m)))


def test_symbolic_shape_vars_map_by_position():
    f, g = S.lowered(), S.lowered()
    assert structural_equal(f, g, map_free_vars=False)
    # same structure but the two params use different size vars: not equal
    n1, n2 = Var("n"), Var("n")
    A = Buffer("A", (n1,))
    B1, B2 = Buffer("B", (n1,)), Buffer("B", (n2,))
    i = Var("i")
    body = For(i, 0, n1, ForKind.SERIAL, BufferStore(A, FloatImm(0.0), (i,)))
    assert not structural_equal(PrimFunc((A, B1), body), PrimFunc((A, B2), body))


def test_loop_var_definitions_map_positionally():
    A = Buffer("A", (8, 8))
    i, j = Var("i"), Var("j")

    def nest(a, b, swap):
        idx = (b, a) if swap else (a, b)
        return For(
            a,
            0,
            8,
            ForKind.SERIAL,
            For(b, 0, 8, ForKind.SERIAL, BufferStore(A, FloatImm(0.0), idx)),
        )

    k, m = Var("k"), Var("m")
    assert structural_equal(nest(i, j, False), nest(k, m, False), map_free_vars=False)
    assert not structural_equal(nest(i, j, False), nest(k, m, True))


# --- expressions ------------------------------------------------------------------------------


def test_free_vars_with_and_without_mapping():
    assert structural_equal(x + y, z + x)
    assert not structural_equal(x + y, z + x, map_free_vars=False)
    assert structural_equal(x + y, x + y, map_free_vars=False)
    assert not structural_equal(x + y, z + z)  # two vars cannot map to one
    assert not structural_equal(x + x, y + z)  # one var cannot map to two
    assert not structural_equal(x, Var("x", "int64"))


def test_constants_and_types():
    assert structural_equal(IntImm(3), IntImm(3))
    assert not structural_equal(IntImm(3), IntImm(3, "int64"))
    assert not structural_equal(IntImm(3), IntImm(4))
    assert not structural_equal(FloatImm(1.0), FloatImm(1.0, "float16"))
    assert structural_equal(FloatImm(float("nan")), FloatImm(float("nan")))
    assert not structural_equal(x + 1, x - 1)
    assert not structural_equal(x + 1, 1 + x)


@given(int_exprs([x, y, z], depth=3))
def test_expr_equals_itself_rebuilt_with_fresh_vars(e):
    fresh = {v: Var(v.name + "_fresh") for v in (x, y, z)}
    rebuilt = Rebuild(fresh).visit(e)
    assert structural_equal(e, rebuilt)
    assert structural_equal(e, Rebuild().visit(e), map_free_vars=False)
    if collect_vars(e):
        assert not structural_equal(e, rebuilt, map_free_vars=False)


@given(int_exprs([x, y, z], depth=3), st.data())
def test_changing_any_constant_breaks_equality(e, data):
    n = count_int_constants(e)
    assume(n > 0)
    k = data.draw(st.integers(0, n - 1))
    changed = BumpConstant(k).visit(e)
    assert changed is not e
    assert not structural_equal(e, changed)
    with pytest.raises(StructuralEqualError, match="structural mismatch at"):
        assert_structural_equal(e, changed)


@given(int_exprs([x, y, z], depth=3))
def test_free_var_mapping_is_a_bijection(e):
    used = collect_vars(e)
    # swapping two vars is a bijection: still equal
    assert structural_equal(e, substitute(e, {x: y, y: x}))
    if x in used and y in used:
        # merging two distinct vars into one is not
        assert not structural_equal(e, substitute(e, {y: x}))
        assert not structural_equal(substitute(e, {y: x}), e)


# --- assert_structural_equal ------------------------------------------------------------------


def test_assert_message_shows_path_and_diff():
    f = S.matmul()
    g = S.matmul(k=769)
    with pytest.raises(StructuralEqualError) as info:
        assert_structural_equal(f, g)
    msg = str(info.value)
    assert msg.startswith("structural mismatch at PrimFunc.params[0].shape[1]")
    assert "770 != 769" in msg
    assert "--- lhs" in msg and "+++ rhs" in msg
    assert '-def main(A: T.Buffer((960, 770), "float32")' in msg
    assert '+def main(A: T.Buffer((960, 769), "float32")' in msg
    assert isinstance(info.value, AssertionError) and isinstance(info.value, LoopIRError)
    assert loopir.assert_structural_equal is assert_structural_equal


def test_assert_message_for_identity_only_difference():
    with pytest.raises(StructuralEqualError) as info:
        assert_structural_equal(x + y, x + Var("y"), map_free_vars=False)
    msg = str(info.value)
    assert "free variables differ" in msg
    assert "printed scripts are identical" in msg


def test_assert_message_names_the_differing_node():
    f = S.scheduled()
    relu_j = f.body.block.body.seq[1].body
    g = PrimFunc(
        f.params,
        _replace(f.body, relu_j, attrs.evolve(relu_j, kind=ForKind.UNROLLED)),
        f.name,
        f.attrs,
    )
    with pytest.raises(StructuralEqualError) as info:
        assert_structural_equal(f, g)
    msg = str(info.value)
    assert "PrimFunc.body.block.body.seq[1].body.kind" in msg
    assert "ForKind.SERIAL != <ForKind.UNROLLED" in msg or "SERIAL" in msg
    assert "+        for j_1 in T.unroll(2, 64" in msg
