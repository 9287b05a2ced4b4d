"""GemmOffload on convolutions (issue 34): the te variants it hands to CUTLASS, with what it
records, and the ones it keeps as generated code, with the reason logged at INFO."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from loopir import te
from loopir.ir.expr import Call
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import Block, PrimFunc
from loopir.passes.context import PassContext
from loopir.testing.conv import ConvSpec, conv2d

pytest.importorskip("cutlass_library")

from loopir.codegen_cuda.cutlass.offload import EXTERN_GEMM, GemmOffload, library_calls_of  # noqa: E402


def offload(func: PrimFunc, **config: Any) -> tuple[PrimFunc, GemmOffload]:
    p = GemmOffload()
    with PassContext(config=config):
        out = p(func)
    return out, p


def blocks(func: PrimFunc) -> list[str]:
    names: list[str] = []
    post_order_visit(func.body, lambda n: names.append(n.name) if isinstance(n, Block) else None)
    return [n for n in names if n != "root"]


def externs(func: PrimFunc) -> list[Call]:
    found: list[Call] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, Call) and n.op == EXTERN_GEMM else None)
    return found


@pytest.mark.parametrize("kw, geometry, fused", [
    (dict(), dict(pad=[1, 1], stride=[1, 1], dilation=[1, 1], layout_w="KRSC", p=9, q=7), ("Xpad",)),
    (dict(pad=None, r=1, s=1), dict(pad=[0, 0], r=1, s=1), ()),
    (dict(pad=(3, 3, 3, 3), r=7, s=7, stride=(2, 2)), dict(pad=[3, 3], stride=[2, 2], p=5, q=4), ("Xpad",)),
    (dict(pad=(2, 3, 2, 3), dilation=(2, 3)), dict(dilation=[2, 3], p=9, q=7), ("Xpad",)),
    (dict(pad=(0, 1, 1, 0), stride=(2, 1)), dict(pad=[0, 1], stride=[2, 1], p=4, q=6), ("Xpad",)),
    (dict(layout="KCRS", dtype="bfloat16"), dict(layout_w="KCRS", dtype_ab="bfloat16"), ("Xpad",)),
    (dict(layout="RSCK", pad_form="reversed"), dict(layout_w="RSCK"), ("Xpad",)),
    (dict(activation="relu", bias=True), dict(dtype_d="float16"), ("Xpad", "D")),
    (dict(activation="gelu", residual=True, beta=0.5, alpha=2.0), dict(dtype_d="float16"), ("Xpad", "D")),
    (dict(activation="silu", bias=True, out="float32"), dict(dtype_d="float32"), ("Xpad", "D")),
])  # fmt: skip
def test_offloaded_forms(kw: dict, geometry: dict, fused: tuple[str, ...]) -> None:
    spec = ConvSpec(**kw)
    out, p = offload(conv2d(spec))
    (decision,) = p.report
    assert decision.offloaded, decision.reason
    (call,) = library_calls_of(out).values()
    prob = call["problem"]
    assert prob["kind"] == "conv2d_fprop" and call["fused"] == fused and call["arch"] == 90
    for key, value in geometry.items():
        assert prob[key] == value, (key, prob[key])
    assert (call["a"], call["b"], call["d"]) == ("X", "Wt", "D" if spec.has_epilogue else "Y")
    assert call["bias"] == ("bias" if spec.bias else "") and call["source"] == ("S" if spec.residual else "")
    epi = prob["epilogue"]
    assert (epi["activation"], epi["has_bias"], epi["has_source"]) == (spec.activation, spec.bias, spec.residual)
    assert epi["alpha"] == spec.alpha and epi["beta"] == (spec.beta if spec.residual else 0.0)
    # every stage became the one call: the padding stage is folded into the kernel
    (ext,) = externs(out)
    assert blocks(out) == [] and ext.args[0].value == "conv2d_Y"
    p_, q_ = spec.output_hw()
    assert [a.value for a in ext.args[6:10]] == [spec.n * p_ * q_, spec.k, spec.c * spec.r * spec.s, 1]
    root = out.body.block
    assert not root.alloc_buffers


def refused(func: PrimFunc, caplog: pytest.LogCaptureFixture, **config: Any) -> str:
    with caplog.at_level(logging.INFO, logger="loopir.codegen_cuda.cutlass.offload"):
        out, p = offload(func, **config)
    assert not externs(out) and out is func
    (decision,) = [d for d in p.report if d.block == "Y"]
    assert not decision.offloaded
    assert any(r.levelno == logging.INFO and "block Y stays generated code" in r.getMessage()
               and decision.reason in r.getMessage() for r in caplog.records)  # fmt: skip
    return decision.reason


@pytest.mark.parametrize("kw, config, needle", [
    (dict(c=12), {}, "C=12 input channels are not a multiple of 8"),
    (dict(k=20), {}, "K=20 output channels are not a multiple of 8"),
    (dict(c=6, dtype="float32"), {"cuda.gemm_allow_tf32": True}, "C=6 input channels are not a multiple of 4"),
    (dict(dtype="float32"), {}, "fp32 conv2d: CUTLASS would use TF32"),
    (dict(acc="float16"), {}, "summed in float16"),
    (dict(bias=True, residual=True), {"cuda.cutlass_arch": 80}, "cannot add both a bias vector and a source"),
    (dict(r=33, s=1, h=40, pad=None), {}, "at most 32x32"),
])  # fmt: skip
def test_refused_with_the_rule(kw: dict, config: dict, needle: str, caplog: pytest.LogCaptureFixture) -> None:
    assert needle in refused(conv2d(ConvSpec(**kw)), caplog, **config)


def test_sm90_fuses_bias_and_residual_and_sm80_is_chosen_by_the_arch_key() -> None:
    func = conv2d(ConvSpec(activation="relu", bias=True, residual=True))
    out, p = offload(func)
    assert p.report[0].offloaded and library_calls_of(out)["conv2d_Y"]["arch"] == 90
    out, p = offload(conv2d(ConvSpec(activation="relu", bias=True)), **{"cuda.cutlass_arch": 80})
    assert p.report[0].offloaded and library_calls_of(out)["conv2d_Y"]["arch"] == 80


def test_tf32_when_allowed() -> None:
    out, p = offload(conv2d(ConvSpec(dtype="float32")), **{"cuda.gemm_allow_tf32": True})
    assert p.report[0].offloaded and library_calls_of(out)["conv2d_Y"]["problem"]["dtype_ab"] == "float32"


def test_backend_generated_keeps_every_convolution() -> None:
    func = conv2d(ConvSpec(activation="relu", bias=True))
    out, p = offload(func, **{"cuda.conv_backend": "generated"})
    assert out is func and p.report == []


def test_unfusable_epilogue_names_its_stage(caplog: pytest.LogCaptureFixture) -> None:
    X = te.placeholder((1, 8, 8, 8), "float16", name="X")
    Wt = te.placeholder((8, 3, 3, 8), "float16", name="Wt")
    r, s, c = te.reduce_axis(3, name="r"), te.reduce_axis(3, name="s"), te.reduce_axis(8, name="c")
    Y = te.compute((1, 6, 6, 8), lambda n, p, q, k: te.sum(
        X[n, p + r, q + s, c].astype("float32") * Wt[k, r, s, c].astype("float32"), axis=[r, s, c]), name="Y")
    D = te.compute((1, 6, 6, 8), lambda n, p, q, k: te.tanh(Y[n, p, q, k]).astype("float16"), name="D")
    reason = refused(te.create_prim_func([X, Wt, D]), caplog)
    assert "its consumer D is not a fusable epilogue" in reason


def test_intermediate_filter_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    X = te.placeholder((1, 8, 8, 8), "float16", name="X")
    W0 = te.placeholder((8, 3, 3, 8), "float16", name="W0")
    Wt = te.compute((8, 3, 3, 8), lambda k, r, s, c: W0[k, r, s, c] * te.const(2, "float16"), name="Wt")
    r, s, c = te.reduce_axis(3, name="r"), te.reduce_axis(3, name="s"), te.reduce_axis(8, name="c")
    Y = te.compute((1, 6, 6, 8), lambda n, p, q, k: te.sum(
        X[n, p + r, q + s, c].astype("float32") * Wt[k, r, s, c].astype("float32"), axis=[r, s, c]), name="Y")
    assert "the filter Wt is an intermediate buffer" in refused(te.create_prim_func([X, W0, Y]), caplog)


def test_a_padded_input_read_elsewhere_keeps_its_stage() -> None:
    """The kernel pads by itself; the padding stage stays only for its other reader."""
    sp = ConvSpec()
    X = te.placeholder((2, 9, 7, 8), "float16", name="X")
    Wt = te.placeholder((16, 3, 3, 8), "float16", name="Wt")
    Xp = te.compute((2, 11, 9, 8), lambda n, h, w, c: te.if_then_else(
        te.all(h >= 1, h < 10, w >= 1, w < 8), X[n, h - 1, w - 1, c], te.const(0, "float16")), name="Xpad")
    r, s, c = te.reduce_axis(3, name="r"), te.reduce_axis(3, name="s"), te.reduce_axis(8, name="c")
    Y = te.compute((2, 9, 7, 16), lambda n, p, q, k: te.sum(
        Xp[n, p + r, q + s, c].astype("float32") * Wt[k, r, s, c].astype("float32"), axis=[r, s, c]), name="Y")
    E = te.compute((2, 11, 9, 8), lambda n, h, w, c: Xp[n, h, w, c] * te.const(2, "float16"), name="E")
    out, p = offload(te.create_prim_func([X, Wt, Y, E]))
    assert p.report[0].offloaded and sp.output_hw() == (9, 7)
    assert blocks(out) == ["Xpad", "E"] and [b.name for b in out.body.block.alloc_buffers] == ["Xpad"]


@pytest.mark.parametrize("layout, code", [("KRSC", "NT"), ("KCRS", "NT"), ("RSCK", "NN")])
def test_a_pointwise_conv_is_offloaded_as_its_gemm_when_asked(layout: str, code: str) -> None:
    """``cuda.conv_pointwise_as_gemm``: a 1x1, stride-1, unpadded conv is the GEMM (N*H*W, C) x
    (K, C)^T (RSCK: (C, K)) into the NHWC output, with its bias and activation; the default (and a
    strided or padded one) stays a conv."""
    spec = ConvSpec(pad=None, r=1, s=1, layout=layout, activation="relu", bias=True)
    out, _ = offload(conv2d(spec), **{"cuda.conv_pointwise_as_gemm": True})
    (call,) = library_calls_of(out).values()
    prob = call["problem"]
    assert "kind" not in prob and (prob["m"], prob["n"], prob["k"]) == (spec.n * spec.h * spec.w, spec.k, spec.c)
    assert prob["layout"] == code  # A (N*H*W, C) row-major; B (K, C) stored [N, K] ("T"), or (C, K)
    assert (call["a"], call["b"], call["d"], call["bias"]) == ("X", "Wt", "D", "bias")
    assert prob["epilogue"]["activation"] == "relu" and prob["epilogue"]["has_bias"]
    (default,) = library_calls_of(offload(conv2d(spec))[0]).values()
    assert default["problem"]["kind"] == "conv2d_fprop"
    strided = ConvSpec(pad=None, r=1, s=1, stride=(2, 2))
    (kept,) = library_calls_of(offload(conv2d(strided), **{"cuda.conv_pointwise_as_gemm": True})[0]).values()
    assert kept["problem"]["kind"] == "conv2d_fprop"
