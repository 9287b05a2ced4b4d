"""The conv2d fprop matcher (issue 34, its first step): te variants it recognizes, with what it
reads from them, and the ones it refuses, with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from loopir import te
from loopir.passes.conv_match import Conv2dCore, match_conv2d_stages
from loopir.passes.gemm_match import NoMatch
from loopir.testing.conv import ConvSpec, conv2d


def conv(N: int = 2, H: int = 9, W: int = 7, C: int = 8, K: int = 16, R: int = 3, S: int = 3,
         pad: tuple[int, int, int, int] | None = (1, 1, 1, 1), stride: tuple[int, int] = (1, 1),
         dilation: tuple[int, int] = (1, 1), layout: str = "KRSC", dtype: str = "float16",
         acc: str = "float32", pad_form: str = "if_then_else") -> Any:  # fmt: skip
    """A te conv2d as users write it (``loopir.testing.conv``): NHWC input, an optional
    zero-padding stage, the filter in ``layout``, products summed in ``acc``."""
    return conv2d(ConvSpec(N, H, W, C, K, R, S, pad, stride, dilation, layout, dtype, acc, pad_form))


def matched(func: Any) -> Conv2dCore | NoMatch:
    (only,) = match_conv2d_stages(func.body, func.params)
    return only


@pytest.mark.parametrize("kw, want", [
    (dict(), dict(pad=(1, 1, 1, 1), stride=(1, 1), dilation=(1, 1), layout_w="KRSC", p=9, q=7)),
    (dict(pad=None, R=1, S=1), dict(pad=(0, 0, 0, 0), p=9, q=7, pad_block=None)),
    (dict(stride=(2, 2), pad=(3, 3, 3, 3), R=7, S=7), dict(stride=(2, 2), pad=(3, 3, 3, 3), p=5, q=4)),
    (dict(dilation=(2, 3), pad=(2, 3, 2, 3)), dict(dilation=(2, 3), p=9, q=7)),
    (dict(pad=(0, 1, 1, 0), stride=(2, 1)), dict(pad=(0, 1, 1, 0), stride=(2, 1), p=4, q=6)),
    (dict(layout="RSCK"), dict(layout_w="RSCK")),
    (dict(layout="KCRS", dtype="bfloat16"), dict(layout_w="KCRS", dtype="bfloat16")),
    (dict(pad_form="reversed"), dict(pad=(1, 1, 1, 1))),
    (dict(dtype="float32"), dict(dtype="float32", acc="float32")),
])  # fmt: skip
def test_recognized_forms(kw: dict, want: dict) -> None:
    core = matched(conv(**kw))
    assert isinstance(core, Conv2dCore), core
    for name, value in want.items():
        assert getattr(core, name) == value, (name, getattr(core, name))
    assert (core.n, core.h, core.w_in, core.c, core.k) == (2, 9, 7, 8, 16)
    assert core.x.name == "X" and core.w.name == "Wt" and core.y.name == "Y"
    assert core.pad_block == ("Xpad" if kw.get("pad", ()) is not None else None)


def test_a_filter_in_another_order_is_refused_with_the_order() -> None:
    X = te.placeholder((1, 6, 6, 4), "float16", name="X")
    Wt = te.placeholder((3, 4, 3, 8), "float16", name="Wt")  # (R, C, S, K): no accepted layout
    r, s, c = te.reduce_axis(3, name="r"), te.reduce_axis(3, name="s"), te.reduce_axis(4, name="c")
    Y = te.compute((1, 4, 4, 8), lambda n, p, q, k: te.sum(
        X[n, p + r, q + s, c].astype("float32") * Wt[r, c, s, k].astype("float32"), axis=[r, s, c]), name="Y")
    got = matched(te.create_prim_func([X, Wt, Y]))
    assert isinstance(got, NoMatch) and got.block == "Y" and "'rcsk'" in got.reason


def test_a_padding_that_keeps_other_rows_is_not_folded() -> None:
    X = te.placeholder((1, 6, 6, 4), "float16", name="X")
    Wt = te.placeholder((8, 3, 3, 4), "float16", name="Wt")
    # the condition keeps one row too few: not a zero padding of X
    Xp = te.compute((1, 8, 8, 4), lambda n, h, w, c: te.if_then_else(
        te.all(h >= 1, h < 6, w >= 1, w < 7), X[n, h - 1, w - 1, c], te.const(0, "float16")), name="Xpad")
    r, s, c = te.reduce_axis(3, name="r"), te.reduce_axis(3, name="s"), te.reduce_axis(4, name="c")
    Y = te.compute((1, 6, 6, 8), lambda n, p, q, k: te.sum(
        Xp[n, p + r, q + s, c].astype("float32") * Wt[k, r, s, c].astype("float32"), axis=[r, s, c]), name="Y")
    got = matched(te.create_prim_func([X, Wt, Y]))
    assert isinstance(got, NoMatch) and "neither a parameter nor a padding stage" in got.reason


def test_a_gemm_is_not_a_convolution() -> None:
    A = te.placeholder((16, 16), "float16", name="A")
    B = te.placeholder((16, 16), "float16", name="B")
    k = te.reduce_axis(16, name="k")
    C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])
    assert match_conv2d_stages(func.body, func.params) == []


def test_the_conv2d_workload_matches() -> None:
    from loopir.testing.workloads import make_workload

    w = make_workload("conv2d_nhwc", N=2, H=8, W=8, CI=3, CO=4, KH=3, KW=3, pad=1, stride=2)
    core = matched(w.func)
    assert isinstance(core, Conv2dCore)
    assert (core.layout_w, core.stride, core.pad, core.p, core.q) == ("RSCK", (2, 2), (1, 1, 1, 1), 4, 4)
    assert core.dtype == core.acc == "float32"


@pytest.mark.parametrize("act", ["relu", "none"])
def test_bias_activation_and_residual_after_the_convolution(act: str) -> None:
    from loopir.ir import op

    X = te.placeholder((2, 8, 8, 16), "float16", name="X")
    Wt = te.placeholder((32, 1, 1, 16), "float16", name="Wt")
    bias = te.placeholder((32,), "float16", name="bias")
    res = te.placeholder((2, 8, 8, 32), "float16", name="res")
    r, s, c = te.reduce_axis(1, name="r"), te.reduce_axis(1, name="s"), te.reduce_axis(16, name="c")
    Y = te.compute((2, 8, 8, 32), lambda n, p, q, k: te.sum(
        X[n, p + r, q + s, c].astype("float32") * Wt[k, r, s, c].astype("float32"), axis=[r, s, c]), name="Y")

    def epi(n: Any, p: Any, q: Any, k: Any) -> Any:
        v = Y[n, p, q, k].astype("float16") + bias[k] + res[n, p, q, k]
        return op.max_(v, op.const(0, "float16")) if act == "relu" else v

    D = te.compute((2, 8, 8, 32), epi, name="D")
    core = matched(te.create_prim_func([X, Wt, bias, res, D]))
    assert isinstance(core, Conv2dCore) and core.epilogue is not None
    e = core.epilogue
    assert (e.block, e.activation, e.bias.name, e.source.name) == ("D", "relu" if act == "relu" else "identity",
                                                                   "bias", "res")  # fmt: skip
