"""conv2d forward in the te form users write, and its float64 reference.

[`conv2d`][loopir.testing.conv.conv2d] builds ``Y = conv(X, W)`` on an NHWC input (optionally
through a zero-padding stage) with the filter stored KRSC, KCRS or RSCK, summed in ``acc``, and
optionally an elementwise epilogue stage ``D = act(alpha * Y + beta * S + bias[k])`` rounded to
``out``: the shapes the conv matcher ([`loopir.passes.conv_match`][loopir.passes.conv_match]) and
the CUTLASS offload take, shared by their tests and ``benchmarks/conv.py``.
[`conv2d_reference`][loopir.testing.conv.conv2d_reference] computes the same in float64 with
NumPy.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from loopir import te
from loopir.errors import LoopIRError
from loopir.ir.stmt import PrimFunc

__all__ = ["ConvSpec", "conv2d", "conv2d_reference", "filter_shape"]

_ACTIVATIONS = ("identity", "relu", "gelu", "silu")


@attrs.frozen
class ConvSpec:
    """A convolution and its epilogue (see the module docstring).

    Attributes
    ----------
    n, h, w, c, k, r, s
        Batch, input height, width and channels, output channels, filter height and width.
    pad
        ``(top, left, bottom, right)``; None: no padding stage (X is read directly).
    stride, dilation
        ``(sh, sw)``, ``(dh, dw)``.
    layout
        The filter's layout: ``"KRSC"``, ``"KCRS"`` or ``"RSCK"``.
    dtype, acc
        The operands' type and the type the products are summed in.
    pad_form
        ``"if_then_else"`` or ``"reversed"`` (the bounds written constant-first).
    activation, bias, residual, alpha, beta
        The epilogue: ``act(alpha * Y + beta * S + bias[k])``.
    out
        The epilogue output's type (None: ``dtype``). With none of these (identity, no bias, no
        residual, alpha 1, out None) there is no epilogue stage and Y (in ``acc``) is the output.
    """

    n: int = 2
    h: int = 9
    w: int = 7
    c: int = 8
    k: int = 16
    r: int = 3
    s: int = 3
    pad: tuple[int, int, int, int] | None = (1, 1, 1, 1)
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    layout: str = "KRSC"
    dtype: str = "float16"
    acc: str = "float32"
    pad_form: str = "if_then_else"
    activation: str = "identity"
    bias: bool = False
    residual: bool = False
    alpha: float = 1.0
    beta: float = 1.0
    out: str | None = None

    @property
    def has_epilogue(self) -> bool:
        """Whether there is an epilogue stage (any of its parts, or an output type)."""
        return (self.activation != "identity" or self.bias or self.residual or self.alpha != 1.0
                or self.out is not None)  # fmt: skip

    def output_hw(self) -> tuple[int, int]:
        """``(P, Q)``, the output height and width."""
        top, left, bottom, right = self.pad or (0, 0, 0, 0)
        (sh, sw), (dh, dw) = self.stride, self.dilation
        p = (self.h + top + bottom - dh * (self.r - 1) - 1) // sh + 1
        q = (self.w + left + right - dw * (self.s - 1) - 1) // sw + 1
        return p, q

    def flops(self) -> float:
        p, q = self.output_hw()
        return 2.0 * self.n * p * q * self.k * self.c * self.r * self.s

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Parameter shapes by name, in parameter order (X, Wt, [bias], [S], output)."""
        p, q = self.output_hw()
        out: dict[str, tuple[int, ...]] = {
            "X": (self.n, self.h, self.w, self.c),
            "Wt": filter_shape(self.layout, self.k, self.r, self.s, self.c),
        }
        if self.bias:
            out["bias"] = (self.k,)
        if self.residual:
            out["S"] = (self.n, p, q, self.k)
        out["D" if self.has_epilogue else "Y"] = (self.n, p, q, self.k)
        return out


def filter_shape(layout: str, k: int, r: int, s: int, c: int) -> tuple[int, int, int, int]:
    """The filter's shape in ``layout``."""
    shapes = {"KRSC": (k, r, s, c), "KCRS": (k, c, r, s), "RSCK": (r, s, c, k)}
    if layout not in shapes:
        raise LoopIRError(f"conv2d: layout must be one of {sorted(shapes)}, got {layout!r}")
    return shapes[layout]


def _activation(x: Any, name: str) -> Any:
    if name == "relu":
        return te.max(x, te.const(0.0, "float32"))
    if name == "gelu":
        return 0.5 * x * (1.0 + te.erf(x * (1.0 / math.sqrt(2.0))))
    if name == "silu":
        return x * te.sigmoid(x)
    return x


def conv2d(spec: ConvSpec | None = None, **kw: Any) -> PrimFunc:
    """The te function of ``spec`` (or of ``ConvSpec(**kw)``); parameters as in
    [`ConvSpec.shapes`][loopir.testing.conv.ConvSpec.shapes]."""
    sp = spec if spec is not None else ConvSpec(**kw)
    if sp.activation not in _ACTIVATIONS:
        raise LoopIRError(f"conv2d: activation must be one of {_ACTIVATIONS}, got {sp.activation!r}")
    shapes = sp.shapes()
    X = te.placeholder(shapes["X"], sp.dtype, name="X")
    Wt = te.placeholder(shapes["Wt"], sp.dtype, name="Wt")
    top, left, bottom, right = sp.pad or (0, 0, 0, 0)
    Xp = X
    if sp.pad is not None:
        H, W = sp.h, sp.w

        def padded(n: Any, h: Any, w: Any, c: Any) -> Any:
            inside = te.all(h >= top, h < H + top, w >= left, w < W + left)
            if sp.pad_form == "reversed":
                inside = te.all(top <= h, H + top > h, left <= w, W + left > w)
            return te.if_then_else(inside, X[n, h - top, w - left, c], te.const(0, sp.dtype))

        Xp = te.compute((sp.n, H + top + bottom, W + left + right, sp.c), padded, name="Xpad")
    (sh, sw), (dh, dw) = sp.stride, sp.dilation
    p, q = sp.output_hw()
    r, s, c = te.reduce_axis(sp.r, name="r"), te.reduce_axis(sp.s, name="s"), te.reduce_axis(sp.c, name="c")

    def weight(k: Any) -> Any:
        return {"KRSC": lambda: Wt[k, r, s, c], "RSCK": lambda: Wt[r, s, c, k],
                "KCRS": lambda: Wt[k, c, r, s]}[sp.layout]()  # fmt: skip

    def cast(e: Any) -> Any:
        return e if sp.acc == sp.dtype else e.astype(sp.acc)

    Y = te.compute((sp.n, p, q, sp.k), lambda n_, p_, q_, k_: te.sum(
        cast(Xp[n_, p_ * sh + r * dh, q_ * sw + s * dw, c]) * cast(weight(k_)), axis=[r, s, c]), name="Y")  # fmt: skip
    params = [X, Wt]
    if not sp.has_epilogue:
        return te.create_prim_func([*params, Y])
    bias = te.placeholder((sp.k,), sp.out or sp.dtype, name="bias") if sp.bias else None
    S = te.placeholder(shapes["S"], sp.out or sp.dtype, name="S") if sp.residual else None
    params += [t for t in (bias, S) if t is not None]

    def epilogue(n_: Any, p_: Any, q_: Any, k_: Any) -> Any:
        x = Y[n_, p_, q_, k_].astype("float32")
        if sp.alpha != 1.0:
            x = x * sp.alpha
        if S is not None:
            x = x + S[n_, p_, q_, k_].astype("float32") * sp.beta
        if bias is not None:
            x = x + bias[k_].astype("float32")
        return _activation(x, sp.activation).astype(sp.out or sp.dtype)

    D = te.compute((sp.n, p, q, sp.k), epilogue, name="D")
    return te.create_prim_func([*params, D])


def conv2d_reference(spec: ConvSpec, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
                     residual: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``spec``'s output in float64 from the (already rounded) inputs, before the final rounding."""
    top, left, bottom, right = spec.pad or (0, 0, 0, 0)
    x = np.pad(x.astype(np.float64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    krsc = {"KRSC": lambda a: a, "KCRS": lambda a: a.transpose(0, 2, 3, 1),
            "RSCK": lambda a: a.transpose(3, 0, 1, 2)}[spec.layout](w.astype(np.float64))  # fmt: skip
    p, q = spec.output_hw()
    (sh, sw), (dh, dw) = spec.stride, spec.dilation
    y = np.zeros((spec.n, p, q, spec.k))
    for r in range(spec.r):
        for s in range(spec.s):
            patch = x[:, r * dh : r * dh + (p - 1) * sh + 1 : sh, s * dw : s * dw + (q - 1) * sw + 1 : sw, :]
            y += patch @ krsc[:, r, s, :].T
    if not spec.has_epilogue:
        return y
    y = y * spec.alpha
    if residual is not None:
        y = y + spec.beta * residual.astype(np.float64)
    if bias is not None:
        y = y + bias.astype(np.float64)
    if spec.activation == "relu":
        return np.maximum(y, 0.0)
    if spec.activation == "gelu":
        from math import erf

        erf_y: np.ndarray = np.vectorize(erf)(y / math.sqrt(2.0))
        return 0.5 * y * (1.0 + erf_y)
    if spec.activation == "silu":
        return y / (1.0 + np.exp(-y))
    return y
