"""GemmOffload: what matches, what does not (and why), and the extern call it leaves."""

from __future__ import annotations

import logging

import attrs
import pytest

from loopir import te
from loopir.errors import PassError
from loopir.ir.expr import Call, StringImm
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import Block, Evaluate, ForKind
from loopir.passes.context import PassContext

pytest.importorskip("cutlass_library")

from loopir.codegen_cuda.cutlass.offload import (  # noqa: E402
    EXTERN_GEMM,
    LIBRARY_CALLS_ATTR,
    GemmOffload,
    library_calls_of,
)


def gemm(m=256, n=128, k=64, dtype="float16", acc="float32", layout="NN", batch=None, scale=None):
    """te GEMM C = sum_k A*B (accumulated in ``acc``) with A/B stored per ``layout``."""
    pre = (batch,) if batch else ()
    a_shape = pre + ((k, m) if layout[0] == "T" else (m, k))
    b_shape = pre + ((n, k) if layout[1] == "T" else (k, n))
    A = te.placeholder(a_shape, dtype, name="A")
    B = te.placeholder(b_shape, dtype, name="B")
    kk = te.reduce_axis(k, name="k")

    def load(t, x, y, bb):
        idx = (bb,) if batch else ()
        return t[idx + (x, y)]

    def body(*ax):
        bb = ax[0] if batch else None
        i, j = ax[-2], ax[-1]
        av = load(A, kk, i, bb) if layout[0] == "T" else load(A, i, kk, bb)
        bv = load(B, j, kk, bb) if layout[1] == "T" else load(B, kk, j, bb)
        if acc != dtype:
            av, bv = av.astype(acc), bv.astype(acc)
        prod = av * bv
        if scale is not None:
            prod = prod * scale
        return te.sum(prod, axis=kk)

    C = te.compute(pre + (m, n), body, name="C")
    return A, B, C


def calls_in(func):
    found = []

    def visit(n):
        if isinstance(n, Evaluate) and isinstance(n.value, Call) and n.value.op == EXTERN_GEMM:
            found.append(n.value)

    post_order_visit(func.body, visit)
    return found


def block_names(func):
    names = []
    post_order_visit(func.body, lambda n: names.append(n.name) if isinstance(n, Block) else None)
    return names


def run(func, **config):
    p = GemmOffload()
    with PassContext(config=config):
        out = p(func)
    return out, p.report


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_plain_gemm_matches_each_layout(layout):
    A, B, C = gemm(layout=layout)
    func = te.create_prim_func([A, B, C])
    out, report = run(func)
    (call,) = calls_in(out)
    assert [a.value for a in call.args[:6]] == ["gemm_C", "A", "B", "C", "", ""]
    assert [a.value for a in call.args[6:10]] == [256, 128, 64, 1]
    assert not call.pure
    desc = library_calls_of(out)["gemm_C"]
    assert desc["problem"]["layout"] == layout
    assert desc["problem"]["dtype_ab"] == "float16" and desc["problem"]["dtype_d"] == "float32"
    assert report[0].offloaded and report[0].call_id == "gemm_C"
    assert "C" not in block_names(out)  # the GEMM block is gone


def test_bias_relu_epilogue_is_fused_and_the_accumulator_dropped():
    A, B, C = gemm()
    bias = te.placeholder((128,), "float16", name="bias")
    D = te.compute(
        (256, 128), lambda i, j: te.max(C[i, j] + bias[j].astype("float32"), 0.0).astype("float16"), name="D"
    )
    func = te.create_prim_func([A, B, bias, D])
    out, report = run(func)
    (call,) = calls_in(out)
    assert [a.value for a in call.args[:6]] == ["gemm_C", "A", "B", "D", "", "bias"]
    desc = library_calls_of(out)["gemm_C"]
    assert desc["fused"] == ("D",)
    assert desc["problem"]["epilogue"] == {
        "activation": "relu", "alpha": 1.0, "beta": 0.0, "has_bias": True, "has_source": False,
    }  # fmt: skip
    assert desc["problem"]["dtype_d"] == "float16"
    assert block_names(out) == ["root"]
    assert out.body.block.alloc_buffers == ()  # C is no longer allocated
    assert report[0].fused == ("D",)


def _epilogue(expr_fn, extra=()):
    A, B, C = gemm()
    bufs = {
        "bias": te.placeholder((128,), "float16", name="bias"),
        "S": te.placeholder((256, 128), "float16", name="S"),
    }
    D = te.compute((256, 128), lambda i, j: expr_fn(C, bufs, i, j), name="D")
    func = te.create_prim_func([A, B, *[bufs[e] for e in extra], D])
    return run(func)


@pytest.mark.parametrize(
    "name, fn, extra, expect",
    [
        ("relu_select", lambda C, b, i, j: te.if_then_else(C[i, j] > 0.0, C[i, j], 0.0).astype("float16"),
         (), ("relu", 1.0, 0.0, False, False)),
        ("relu_after_cast", lambda C, b, i, j: te.max(C[i, j].astype("float16"), te.const(0.0, "float16")),
         (), ("relu", 1.0, 0.0, False, False)),
        ("gelu", lambda C, b, i, j: (0.5 * C[i, j] * (1.0 + te.erf(C[i, j] * 0.7071067811865476))).astype("float16"),
         (), ("gelu", 1.0, 0.0, False, False)),
        ("silu_sigmoid", lambda C, b, i, j: (C[i, j] * te.sigmoid(C[i, j])).astype("float16"),
         (), ("silu", 1.0, 0.0, False, False)),
        ("silu_exp", lambda C, b, i, j: (C[i, j] / (1.0 + te.exp(-1.0 * C[i, j]))).astype("float16"),
         (), ("silu", 1.0, 0.0, False, False)),
        ("alpha_beta", lambda C, b, i, j: (2.0 * C[i, j] + b["S"][i, j].astype("float32") * 0.5).astype("float16"),
         ("S",), ("identity", 2.0, 0.5, False, True)),
        ("bias_source_gelu", lambda C, b, i, j: (
            0.5 * (C[i, j] + b["bias"][j].astype("float32") + b["S"][i, j].astype("float32"))
            * (1.0 + te.erf((C[i, j] + b["bias"][j].astype("float32") + b["S"][i, j].astype("float32"))
                            * 0.7071067811865476))).astype("float16"),
         ("bias", "S"), ("gelu", 1.0, 1.0, True, True)),
    ],
)
def test_epilogue_forms(name, fn, extra, expect):
    out, report = _epilogue(fn, extra)
    assert report[0].offloaded, report[0].reason
    epi = library_calls_of(out)["gemm_C"]["problem"]["epilogue"]
    got = (epi["activation"], epi["alpha"], epi["beta"], epi["has_bias"], epi["has_source"])
    assert got == expect


def test_alpha_inside_the_reduction_is_folded():
    A, B, C = gemm(scale=0.25)
    out, report = run(te.create_prim_func([A, B, C]))
    assert library_calls_of(out)["gemm_C"]["problem"]["epilogue"]["alpha"] == 0.25
    assert calls_in(out)[0].args[10].value == 0.25


def test_batched_gemm():
    A, B, C = gemm(batch=3, layout="NT")
    out, _ = run(te.create_prim_func([A, B, C]))
    prob = library_calls_of(out)["gemm_C"]["problem"]
    assert (prob["batch"], prob["m"], prob["n"], prob["k"], prob["layout"]) == (3, 256, 128, 64, "NT")


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"k": 100}, "K=100 is not a multiple of 8"),
        ({"n": 100, "layout": "NN"}, "N=100 is not a multiple of 8"),
        ({"m": 100, "layout": "TN"}, "M=100 is not a multiple of 8"),
        ({"dtype": "float64", "acc": "float64"}, "float64"),
        ({"dtype": "float32", "acc": "float32"}, "cuda.gemm_allow_tf32"),
    ],
)
def test_unsupported_gemms_stay_generated_with_a_reason(kwargs, needle, caplog):
    A, B, C = gemm(**kwargs)
    func = te.create_prim_func([A, B, C])
    with caplog.at_level(logging.INFO, logger="loopir.codegen_cuda.cutlass.offload"):
        out, report = run(func)
    assert out is func
    assert not report[0].offloaded and needle in report[0].reason, report[0].reason
    assert needle in caplog.text


def test_int8_gemm_is_not_offloaded():
    A = te.placeholder((64, 64), "int8", name="A")
    B = te.placeholder((64, 64), "int8", name="B")
    k = te.reduce_axis(64, name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k), name="C")
    func = te.create_prim_func([A, B, C])
    out, report = run(func)
    assert out is func and "not a float" in report[0].reason


def test_tf32_needs_the_config_key():
    A, B, C = gemm(dtype="float32", acc="float32")
    func = te.create_prim_func([A, B, C])
    out, report = run(func, **{"cuda.gemm_allow_tf32": True})
    assert report[0].offloaded, report[0].reason
    assert library_calls_of(out)["gemm_C"]["problem"]["dtype_ab"] == "float32"


def test_max_reduction_is_not_a_gemm():
    A = te.placeholder((64, 64), "float16", name="A")
    B = te.placeholder((64, 64), "float16", name="B")
    k = te.reduce_axis(64, name="k")
    C = te.compute((64, 64), lambda i, j: te.max(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])
    out, report = run(func)
    assert out is func and "max, not a sum" in report[0].reason


def test_three_operand_product_is_not_a_gemm():
    A = te.placeholder((64, 64), "float16", name="A")
    B = te.placeholder((64, 64), "float16", name="B")
    k = te.reduce_axis(64, name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j] * A[i, k], axis=k), name="C")
    out, report = run(te.create_prim_func([A, B, C]))
    assert "multiplies 3 loads" in report[0].reason


def test_unfusable_consumer_keeps_everything_generated():
    A, B, C = gemm()
    D = te.compute((256, 128), lambda i, j: te.exp(C[i, j]).astype("float16"), name="D")
    func = te.create_prim_func([A, B, D])
    out, report = run(func)
    assert out is func
    assert "consumer D is not a fusable epilogue" in report[0].reason


def test_accumulator_read_again_after_the_epilogue_is_not_fused():
    A, B, C = gemm()
    D = te.compute((256, 128), lambda i, j: C[i, j].astype("float16"), name="D")
    E = te.compute((256, 128), lambda i, j: C[i, j] * 2.0, name="E")
    func = te.create_prim_func([A, B, D, E])
    out, report = run(func)
    assert out is func and "read after the epilogue D" in report[0].reason


def test_bias_of_another_dtype_is_not_fused():
    A, B, C = gemm()
    bias = te.placeholder((128,), "float32", name="bias")
    D = te.compute((256, 128), lambda i, j: (C[i, j] + bias[j]).astype("float16"), name="D")
    out, report = run(te.create_prim_func([A, B, bias, D]))
    assert "bias bias is not a (128,) float16 vector" in report[0].reason


def test_sm80_cannot_fuse_bias_and_source():
    A, B, C = gemm()
    bias = te.placeholder((128,), "float16", name="bias")
    S = te.placeholder((256, 128), "float16", name="S")
    D = te.compute(
        (256, 128), lambda i, j: (C[i, j] + bias[j].astype("float32") + S[i, j].astype("float32")).astype("float16"),
        name="D",
    )
    func = te.create_prim_func([A, B, bias, S, D])
    out, report = run(func, **{"cuda.cutlass_arch": 80})
    assert out is func and "sm80" in report[0].reason
    out90, report90 = run(func)
    assert report90[0].offloaded


def test_scheduled_loops_are_not_matched():
    A, B, C = gemm()
    func = te.create_prim_func([A, B, C])
    stage = func.body.block.body
    unrolled = attrs.evolve(stage, kind=ForKind.UNROLLED)
    func2 = func.with_body(attrs.evolve(func.body, block=attrs.evolve(func.body.block, body=unrolled)))
    out, report = run(func2)
    assert out is func2 and "already scheduled" in report[0].reason


def test_symbolic_extent_is_not_offloaded():
    from loopir.ir.expr import Var

    n = Var("n")
    A = te.placeholder((n, 64), "float16", name="A")
    B = te.placeholder((64, 64), "float16", name="B")
    k = te.reduce_axis(64, name="k")
    C = te.compute((n, 64), lambda i, j: te.sum(A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k), name="C")
    out, report = run(te.create_prim_func([A, B, C]))
    assert not report[0].offloaded
    assert "static range" in report[0].reason or "symbolic" in report[0].reason


def test_generated_backend_leaves_the_function_alone():
    A, B, C = gemm()
    func = te.create_prim_func([A, B, C])
    out, report = run(func, **{"cuda.gemm_backend": "generated"})
    assert out is func and report == []


def test_bad_backend_value_is_a_pass_error():
    A, B, C = gemm()
    func = te.create_prim_func([A, B, C])
    with pytest.raises(PassError, match="cuda.gemm_backend must be one of"):
        run(func, **{"cuda.gemm_backend": "cublas"})


def test_bad_arch_is_a_pass_error():
    A, B, C = gemm()
    with pytest.raises(PassError, match="cuda.cutlass_arch"):
        run(te.create_prim_func([A, B, C]), **{"cuda.cutlass_arch": 75})


def test_two_gemms_get_two_calls_and_unrelated_stages_stay():
    A, B, C = gemm()
    E = te.compute((256, 128), lambda i, j: C[i, j] + 1.0, name="E")
    A2 = te.placeholder((128, 64), "float16", name="A2")
    B2 = te.placeholder((64, 64), "float16", name="B2")
    k = te.reduce_axis(64, name="k2")
    C2 = te.compute((128, 64), lambda i, j: te.sum(A2[i, k].astype("float32") * B2[k, j].astype("float32"), axis=k), name="C2")
    func = te.create_prim_func([A, B, C, E, A2, B2, C2])
    out, report = run(func)
    assert sorted(library_calls_of(out)) == ["gemm_C", "gemm_C2"]
    assert "E" in block_names(out)  # the elementwise consumer of a parameter C stays
    assert [r.offloaded for r in report] == [True, True]
    assert isinstance(calls_in(out)[0].args[0], StringImm)
    assert LIBRARY_CALLS_ATTR in out.attrs


def test_the_cuda_target_pipeline_starts_with_the_offload_then_the_default_schedule() -> None:
    import loopir.codegen_cuda  # noqa: F401  (the backend registers its target's passes)
    from loopir.passes import default_pipeline, lower

    names = [p.name for p in default_pipeline(target="cuda").passes]
    assert names[:5] == ["GemmOffload", "DefaultGPUSchedule", "FastMath", "LowerCrossThreadReduction", "LowerBlocks"]
    assert names[-3:] == ["PrivatizeThreadLocals", "LowerWarpMemory", "HoistIfThenElse"]
    assert [p.name for p in default_pipeline(target="cpu").passes][0] == "LowerCrossThreadReduction"
    with pytest.raises(PassError, match="no passes are registered for target 'tpu'"):
        default_pipeline(target="tpu")
    from loopir import te

    m = n = k = 256
    A = te.placeholder((m, k), "float16", name="A")
    B = te.placeholder((k, n), "float16", name="B")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r), name="C")
    D = te.compute((m, n), lambda i, j: C[i, j].astype("float16"), name="D")
    lowered = lower(te.create_prim_func([A, B, D]), target="cuda")
    import loopir

    assert list(library_calls_of(lowered)) == ["gemm_C"] and "loopir.extern_gemm" in loopir.script(lowered)
