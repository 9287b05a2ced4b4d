"""Structure of te.create_prim_func output: the contract other areas build on."""

from __future__ import annotations

import math

import pytest
from strategies import te_conv2d_nhwc, te_matmul, te_matmul_bias_relu

import loopir
from loopir import te
from loopir.errors import IRValidationError
from loopir.ir.expr import Add, BufferLoad, FloatImm, IntImm, Max, Min, Var
from loopir.ir.stmt import BlockRealize, BufferStore, For, ForKind, IterKind, SeqStmt


def stages(func: loopir.PrimFunc) -> list:
    root = func.body
    assert isinstance(root, BlockRealize) and root.block.name == "root"
    assert root.block.iter_vars == ()
    body = root.block.body
    return list(body.seq) if isinstance(body, SeqStmt) else [body]


def unnest(stmt) -> tuple[list[For], BlockRealize]:
    loops = []
    while isinstance(stmt, For):
        loops.append(stmt)
        stmt = stmt.body
    assert isinstance(stmt, BlockRealize)
    return loops, stmt


def region_text(regions) -> list[str]:
    return [repr(r) for r in regions]


def test_matmul_structure() -> None:
    tensors, _ = te_matmul(16, 8, 4)
    func = te.create_prim_func(tensors)
    assert [b.name for b in func.params] == ["A", "B", "C"]
    assert [tuple(s.value for s in b.shape) for b in func.params] == [(16, 8), (8, 4), (16, 4)]
    assert func.body.block.alloc_buffers == ()
    (stage,) = stages(func)
    loops, realize = unnest(stage)
    assert [lp.loop_var.name for lp in loops] == ["i", "j", "k"]
    assert [lp.extent.value for lp in loops] == [16, 4, 8]
    assert all(lp.kind is ForKind.SERIAL and lp.min.value == 0 for lp in loops)
    blk = realize.block
    assert blk.name == "C"
    assert [iv.var.name for iv in blk.iter_vars] == ["v_i", "v_j", "v_k"]
    assert [iv.kind for iv in blk.iter_vars] == [IterKind.SPATIAL, IterKind.SPATIAL, IterKind.REDUCE]
    assert [iv.dom.extent.value for iv in blk.iter_vars] == [16, 4, 8]
    # bindings are exactly the loop vars
    assert all(v is lp.loop_var for v, lp in zip(realize.iter_values, loops))
    assert isinstance(realize.predicate, IntImm) and realize.predicate.value == 1
    assert region_text(blk.reads) == ["A[v_i:v_i + 1, v_k:v_k + 1]", "B[v_k:v_k + 1, v_j:v_j + 1]"]
    assert region_text(blk.writes) == ["C[v_i:v_i + 1, v_j:v_j + 1]"]
    # init stores the identity; the body accumulates into the same element
    assert isinstance(blk.init, BufferStore) and isinstance(blk.init.value, FloatImm)
    assert blk.init.value.value == 0.0
    assert isinstance(blk.body, BufferStore) and isinstance(blk.body.value, Add)
    acc = blk.body.value.a
    assert isinstance(acc, BufferLoad) and acc.buffer is func.params[2]
    v_i, v_j, _ = (iv.var for iv in blk.iter_vars)
    assert acc.indices[0] is v_i and acc.indices[1] is v_j
    assert blk.body.indices[0] is v_i and blk.body.indices[1] is v_j


def test_intermediates_and_topological_order() -> None:
    tensors, _ = te_matmul_bias_relu(8, 4, 6)
    func = te.create_prim_func(tensors)
    assert [b.name for b in func.params] == ["A", "B", "bias", "D"]
    assert [b.name for b in func.body.block.alloc_buffers] == ["C", "BiasAdd"]
    names = [unnest(s)[1].block.name for s in stages(func)]
    assert names == ["C", "BiasAdd", "D"]
    # the buffers read by later stages are the root block's allocations (same objects)
    c_buf = func.body.block.alloc_buffers[0]
    _, bias_add = unnest(stages(func)[1])
    assert bias_add.block.reads[0].buffer is c_buf
    assert bias_add.block.init is None
    assert [iv.kind for iv in bias_add.block.iter_vars] == [IterKind.SPATIAL] * 2
    assert region_text(bias_add.block.reads) == ["C[v_i:v_i + 1, v_j:v_j + 1]", "bias[v_j:v_j + 1]"]


def test_max_min_identities_and_combiners() -> None:
    A = te.placeholder((4, 5), "float32", name="A")
    I = te.placeholder((4, 5), "int16", name="I")
    k = te.reduce_axis(5, name="k")
    r = te.reduce_axis(5, name="r")
    mx = te.compute((4,), lambda i: te.max(A[i, k], axis=k), name="mx")
    mn = te.compute((4,), lambda i: te.min(I[i, r], axis=r), name="mn")
    func = te.create_prim_func([A, I, mx, mn])
    b_mx = unnest(stages(func)[0])[1].block
    b_mn = unnest(stages(func)[1])[1].block
    assert b_mx.init.value.value == -math.inf
    assert isinstance(b_mx.body.value, Max)
    assert b_mn.init.value.value == 32767 and b_mn.init.value.dtype == "int16"
    assert isinstance(b_mn.body.value, Min)


def test_reduce_axis_with_bounds_binds_loop_plus_lo() -> None:
    A = te.placeholder((10,), "float32", name="A")
    k = te.reduce_axis((3, 8), name="k")
    B = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="B")
    func = te.create_prim_func([A, B])
    loops, realize = unnest(stages(func)[0])
    assert loops[1].loop_var.name == "k" and loops[1].extent.value == 5 and loops[1].min.value == 0
    kdom = realize.block.iter_vars[1].dom
    assert (kdom.min.value, kdom.extent.value) == (3, 5)
    binding = realize.iter_values[1]
    assert isinstance(binding, Add) and binding.a is loops[1].loop_var and binding.b.value == 3


def test_stencil_regions_are_bounding_boxes() -> None:
    A = te.placeholder((10, 10), "float32", name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] + A[i + 2, j + 1] + A[i + 1, j], name="B")
    func = te.create_prim_func([A, B])
    blk = unnest(stages(func)[0])[1].block
    assert region_text(blk.reads) == ["A[v_i:v_i + 3, v_j:v_j + 2]"]


def test_conv_padding_regions_point_access() -> None:
    tensors, _ = te_conv2d_nhwc(1, 5, 5, 2, 3, 3, 3, pad=1)
    func = te.create_prim_func(tensors)
    pad_blk = unnest(stages(func)[0])[1].block
    assert pad_blk.name == "Xpad"
    assert region_text(pad_blk.reads) == ["X[v_n:v_n + 1, v_h - 1:v_h - 1 + 1, v_w - 1:v_w - 1 + 1, v_c:v_c + 1]"]
    conv = unnest(stages(func)[1])
    assert [lp.loop_var.name for lp in conv[0]] == ["n", "h", "w", "o", "rh", "rw", "rc"]
    assert [iv.kind.value[0].upper() for iv in conv[1].block.iter_vars] == list("SSSSRRR")


def test_symbolic_extents() -> None:
    n = Var("n")
    A = te.placeholder((n, 4), "float32", name="A")
    B = te.compute((n, 4), lambda i, j: A[i, j] * 2.0, name="B")
    func = te.create_prim_func([A, B])
    assert func.params[0].shape[0] is n and func.params[1].shape[0] is n
    loops, realize = unnest(stages(func)[0])
    assert loops[0].extent is n
    assert realize.block.iter_vars[0].dom.extent is n


def test_where_and_elementwise_reducer_forms() -> None:
    A = te.placeholder((6,), "float32", name="A")
    k = te.reduce_axis(6, name="k")
    S = te.compute((1,), lambda i: te.sum(A[k], axis=k, where=k % 2 == 0), name="S")
    func = te.create_prim_func([A, S])
    blk = unnest(stages(func)[0])[1].block
    assert "Select" in type(blk.body.value.b).__name__
    e = te.max(A[0], A[1])
    assert isinstance(e, Max)


def test_duplicate_names_are_made_unique() -> None:
    A = te.placeholder((4,), "float32", name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0)
    C = te.compute((4,), lambda i: B[i] * 2.0)
    func = te.create_prim_func([A, C])
    assert [b.name for b in func.params] == ["A", "compute"]
    assert [b.name for b in func.body.block.alloc_buffers] == ["compute_1"]
    assert [unnest(s)[1].block.name for s in stages(func)] == ["compute_1", "compute"]


def test_params_in_list_order_and_output_first() -> None:
    tensors, _ = te_matmul(4, 4, 4)
    A, B, C = tensors
    func = te.create_prim_func([C, B, A])
    assert [b.name for b in func.params] == ["C", "B", "A"]


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------


def test_missing_placeholder_is_named() -> None:
    tensors, _ = te_matmul(4, 4, 4)
    A, B, C = tensors
    with pytest.raises(IRValidationError, match="placeholder B is read by C"):
        te.create_prim_func([A, C])


def test_nested_reduction_rejected() -> None:
    A = te.placeholder((4, 4), "float32", name="A")
    k = te.reduce_axis(4, name="k")
    with pytest.raises(IRValidationError, match="outermost operation"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k) * 2.0, name="bad")
    with pytest.raises(IRValidationError, match="outermost operation"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k).astype("float16"), name="bad")


def test_bad_inputs() -> None:
    A = te.placeholder((4, 4), "float32", name="A")
    with pytest.raises(IRValidationError, match="tensor A has 2 dimensions"):
        te.compute((4,), lambda i: A[i], name="bad")
    with pytest.raises(IRValidationError, match="fcompute takes 1 index arguments"):
        te.compute((4, 4), lambda i: A[i, i], name="bad")
    with pytest.raises(IRValidationError, match="axis entries must come from te.reduce_axis"):
        te.sum(A[0, 0], axis=[Var("x")])
    with pytest.raises(IRValidationError, match="empty domain"):
        te.reduce_axis((3, 3), name="k")
    with pytest.raises(IRValidationError, match="listed twice"):
        te.create_prim_func([A, A])
    with pytest.raises(IRValidationError, match="must be te tensors"):
        te.create_prim_func([A, "B"])
    with pytest.raises(IRValidationError, match="te.placeholder 'X'"):
        te.placeholder((4,), "float17", name="X")
    with pytest.raises(IRValidationError, match="shape entries must be ints"):
        te.placeholder((4, 2.5), "float32", name="X")


def test_non_constant_offsets_fall_back_to_whole_dimension() -> None:
    A = te.placeholder((10, 10), "float32", name="A")
    B = te.compute((5, 5), lambda i, j: A[i * 2, j] + A[j, i], name="B")
    blk = unnest(stages(te.create_prim_func([A, B]))[0])[1].block
    (region,) = blk.reads
    assert [(r.min.value, r.extent.value) for r in region.region] == [(0, 10), (0, 10)]


def test_reduce_axis_usable_in_index_arithmetic_and_var_names() -> None:
    A = te.placeholder((12,), "float32", name="A")
    r = te.reduce_axis(3, name="r")
    B = te.compute((4,), lambda idx: te.sum(A[idx * 3 + r], axis=r), name="B")
    func = te.create_prim_func([A, B])
    loops, realize = unnest(stages(func)[0])
    assert [lp.loop_var.name for lp in loops] == ["idx", "r"]
    assert region_text(realize.block.reads) == ["A[v_idx * 3 + v_r:v_idx * 3 + v_r + 1]"]


def test_te_functions_pass_the_verifier() -> None:
    for tensors, _ in (te_matmul(8, 4, 6), te_matmul_bias_relu(3, 5, 7), te_conv2d_nhwc(1, 5, 5, 2, 3, 3, 3, 1, 2)):
        loopir.verify(te.create_prim_func(tensors))


def test_tensor_named_root_does_not_clash_with_root_block() -> None:
    A = te.placeholder((4,), "float32", name="root")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    func = te.create_prim_func([A, B])
    assert [b.name for b in func.params] == ["root_1", "B"]
    assert unnest(stages(func)[0])[1].block.reads[0].buffer is func.params[0]
