"""FastMath: float32 exponentials, logarithms and divisions as hardware approximations.

Off by default. The PassContext key ``cuda.fast_math`` turns it on for a whole function; the
block annotation ``loopir.fast_math`` (``sch.annotate(block, "loopir.fast_math", True)``) turns
it on for one block and what is nested in it, and ``False`` turns it off there even when the key
is on. The pass runs among the CUDA target's first passes, while blocks and their annotations
are still there, and rewrites, in float32, float16 and bfloat16 (whose math the CUDA backend
computes in float32):

| before | after | CUDA | error (CUDA Programming Guide, intrinsic functions) |
| --- | --- | --- | --- |
| ``T.exp(x)`` | ``T.fast_exp(x)`` | ``__expf(x)`` | ``ex2.approx.ftz.f32(x * log2(e))``: at most ``2 + floor(abs(1.173 x))`` ulp; results under 2^-126 flush to 0 |
| ``T.exp(a * c - b)`` (float32, ``c`` a constant or absent) | ``T.fast_exp(a * c - b)`` | ``loopir_ex2(fmaf(a, c * log2(e), -b * log2(e)))`` (``ex2.approx.ftz.f32``) | ``ex2.approx``'s 2 ulp plus ``abs(a c) + abs(b) + abs(a c - b)`` ulp from rounding the folded argument (one FFMA instead of a subtraction and two multiplies: the softmax scale and maximum folded as FlashAttention does); results under 2^-126 flush to 0, as ``__expf``'s |
| ``T.log(x)`` | ``T.fast_log(x)`` | ``__logf(x)`` | absolute 2^-21.41 for x in [0.5, 2], else 3 ulp |
| ``a / b`` | ``T.fast_div(a, b)`` | ``__fdividef(a, b)`` | 2 ulp for 2^-126 <= abs(b) <= 2^126; 0 for larger abs(b) |

``T.rsqrt`` needs no rewrite: the backend always prints it as ``rsqrtf`` (2 ulp). The fast
intrinsics *mean* the exact operation: the CPU executor computes ``exp``, ``log`` and ``/``, and
the error bounds above are what the GPU tests check against it.

Before / after (key on)::

    S[i] = S[i] + T.exp(X[i, k] - M[i])          S[i] = S[i] + T.fast_exp(X[i, k] - M[i])
"""

from __future__ import annotations

from loopir.ir import dtype as dt
from loopir.ir.expr import Call, Div, PrimExpr
from loopir.ir.functor import Mutator
from loopir.ir.stmt import Block, PrimFunc, Stmt
from loopir.passes.base import Pass
from loopir.passes.context import PassContext, register_config

__all__ = ["FAST_MATH_ANNOTATION", "FAST_MATH_KEY", "FAST_OPS", "FastMath", "fast_math"]

#: PassContext key: the fast-math rewrite for the whole function.
FAST_MATH_KEY = "cuda.fast_math"
#: Block annotation: the fast-math rewrite for one block (True) or none there (False).
FAST_MATH_ANNOTATION = "loopir.fast_math"
#: The rewritten intrinsics (division is ``fast_div``).
FAST_OPS = {"exp": "fast_exp", "log": "fast_log"}

register_config(
    FAST_MATH_KEY, bool, False,
    "FastMath: compute float32 (and float16/bfloat16) exp, log and division with the GPU's "
    "approximate instructions (__expf, __logf, __fdividef; error bounds in loopir.passes.fast_math)",
)  # fmt: skip

_FLOATS = ("float32", "float16", "bfloat16")


class _Rewrite(Mutator):
    def __init__(self, on: bool) -> None:
        self.on = on

    def visit_Block(self, node: Block) -> Stmt:
        ann = node.annotations.get(FAST_MATH_ANNOTATION)
        if ann is None:
            out: Stmt = self.generic_visit(node)
            return out
        saved, self.on = self.on, bool(ann)
        try:
            out = self.generic_visit(node)
        finally:
            self.on = saved
        return out

    def visit_Call(self, node: Call) -> PrimExpr:
        new: PrimExpr = self.generic_visit(node)
        if self.on and isinstance(new, Call) and new.op in FAST_OPS and dt.element(new.dtype) in _FLOATS:
            return Call(new.dtype, FAST_OPS[new.op], new.args)
        return new

    def visit_Div(self, node: Div) -> PrimExpr:
        new: PrimExpr = self.generic_visit(node)
        if self.on and isinstance(new, Div) and dt.lanes(new.dtype) == 1 and dt.element(new.dtype) in _FLOATS:
            return Call(new.dtype, "fast_div", (new.a, new.b))
        return new


def fast_math(func: PrimFunc, on: bool = True) -> PrimFunc:
    """``func`` with exp, log and float division rewritten to their fast forms where ``on`` (or
    a ``loopir.fast_math`` block annotation) asks for it; ``func`` itself when nothing changed."""
    body = _Rewrite(on).visit(func.body)
    if body is func.body:
        return func
    import attrs

    return attrs.evolve(func, body=body)


class FastMath(Pass):
    """The rewrite of [`fast_math`][loopir.passes.fast_math.fast_math] under ``cuda.fast_math``
    (see the module docstring)."""

    name = "FastMath"
    opt_level = 0
    required = False

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        return fast_math(func, bool(ctx.get(FAST_MATH_KEY)))
