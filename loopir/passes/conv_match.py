"""Recognize conv2d forward (fprop) stages in te-built PrimFuncs, for an implicit-GEMM backend.

The first step of handing convolutions to CUTLASS (issue 34): it reads the stage shapes
``te.create_prim_func`` produces (a perfect serial loop nest around one BlockRealize per tensor,
as [`loopir.passes.gemm_match`][loopir.passes.gemm_match] does for GEMMs) and never guesses:
what it does not recognize is a [`NoMatch`][loopir.passes.gemm_match.NoMatch] naming the stage
and the rule. Nothing is offloaded by this module: ``GemmOffload``
([`loopir.codegen_cuda.cutlass.offload`][loopir.codegen_cuda.cutlass.offload]) hands the matches
to CUTLASS.

Padding stage (optional, before the convolution)::

    Xp[n, h, w, c] = if_then_else(ph <= h < H + ph and pw <= w < W + pw, X[n, h - ph, w - pw, c], 0)

Convolution stage, NHWC input (``X`` or its padded copy), output ``Y[n, p, q, k]``::

    Y[n, p, q, k] = 0                                                        (init)
    Y[n, p, q, k] = Y[n, p, q, k] + acc(Xp[n, p * sh + r * dh, q * sw + s * dw, c]) * acc(Wt[...])

with the weights indexed by a permutation of ``(k, r, s, c)``: ``KRSC`` (CUTLASS's and
cuDNN's NHWC filter layout), ``RSCK`` (TF's HWIO) or ``KCRS`` (PyTorch's OIHW); ``acc`` casts to
the output's type (or none); groups = 1. The output size must be the one the strides,
dilations and paddings give. The elementwise stage after it, when it consumes ``Y``, is matched
as a GEMM epilogue is (``act(alpha * Y + beta * S + bias[k])``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from loopir import arith
from loopir.ir.buffer import Buffer
from loopir.ir.expr import (
    GE,
    GT,
    LE,
    LT,
    Add,
    And,
    BufferLoad,
    Call,
    Cast,
    CmpOp,
    FloatImm,
    IntImm,
    Mul,
    PrimExpr,
    Select,
    Var,
)
from loopir.ir.stmt import Block, BlockRealize, BufferStore, IterKind, Stmt
from loopir.passes.gemm_match import EpilogueMatch, NoMatch, match_output_epilogue, stage_block

__all__ = ["Conv2dCore", "PadStage", "is_conv_candidate", "match_conv2d", "match_conv2d_stages", "match_pad"]

#: Weight layouts: the order of ``(k, r, s, c)`` in the filter's indices.
WEIGHT_LAYOUTS = {"krsc": "KRSC", "rsck": "RSCK", "kcrs": "KCRS"}


@attrs.frozen
class PadStage:
    """A zero-padding stage ``dst = pad(src)`` of an NHWC tensor."""

    block: str
    src: Buffer
    dst: Buffer
    before: tuple[int, int]
    after: tuple[int, int]


@attrs.frozen
class Conv2dCore:
    """A matched conv2d fprop stage (module docstring).

    Attributes
    ----------
    block
        The convolution block.
    x, w, y
        The input (before padding), the filter and the output.
    n, h, w_in, c, k, r, s, p, q
        Batch, input height and width, input channels, output channels, filter height and
        width, output height and width.
    pad
        ``(top, left, bottom, right)`` zero padding (0 without a padding stage).
    stride, dilation
        ``(sh, sw)``, ``(dh, dw)``.
    layout_w
        ``"KRSC"``, ``"RSCK"`` or ``"KCRS"``.
    dtype, acc
        The operands' type and the accumulator's (the output's).
    pad_block
        The padding stage folded in (None: X is read directly).
    epilogue
        The elementwise stage after it that consumes Y, in the GEMM epilogue form
        ([`match_output_epilogue`][loopir.passes.gemm_match.match_output_epilogue]: a bias per
        output channel, a residual, an activation), or None.
    """

    block: str
    x: Buffer
    w: Buffer
    y: Buffer
    n: int
    h: int
    w_in: int
    c: int
    k: int
    r: int
    s: int
    p: int
    q: int
    pad: tuple[int, int, int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    layout_w: str
    dtype: str
    acc: str
    pad_block: str | None = None
    epilogue: EpilogueMatch | None = None


def _ints(shape: Sequence[PrimExpr]) -> list[int] | None:
    vals = [e.value if isinstance(e, IntImm) else None for e in shape]
    return None if None in vals else [v for v in vals if v is not None]


def _is_zero(e: PrimExpr) -> bool:
    while isinstance(e, Cast):
        e = e.value
    return isinstance(e, (IntImm, FloatImm)) and e.value == 0


def _conjuncts(e: PrimExpr) -> list[PrimExpr]:
    return _conjuncts(e.a) + _conjuncts(e.b) if isinstance(e, And) else [e]


def _bounds(cond: PrimExpr, vs: Sequence[Var]) -> dict[Var, list[int | None]] | None:
    """``{v: [lo, hi)}`` from a conjunction of ``v (<, <=, >, >=) constant`` (None: other terms)."""
    out: dict[Var, list[int | None]] = {v: [None, None] for v in vs}
    for t in _conjuncts(cond):
        if not isinstance(t, (GE, GT, LE, LT)):
            return None
        a, b = t.a, t.b
        cmp: type[CmpOp] = type(t)
        if isinstance(a, IntImm) and isinstance(b, Var):  # c < v  is  v > c
            a, b = b, a
            cmp = {GE: LE, GT: LT, LE: GE, LT: GT}[cmp]
        if not (isinstance(a, Var) and a in out and isinstance(b, IntImm)):
            return None
        c = b.value
        if cmp is GE:
            out[a][0] = c
        elif cmp is GT:
            out[a][0] = c + 1
        elif cmp is LT:
            out[a][1] = c
        else:
            out[a][1] = c + 1
    return out


def _lin_ints(e: PrimExpr, vs: Sequence[Var]) -> list[int] | None:
    """``[c_0, .., c_n, base]`` of ``e == sum(c_i * vs[i]) + base`` when all are constants."""
    lin = arith.detect_linear(e, vs)
    if lin is None or not all(isinstance(c, IntImm) for c in lin):
        return None
    return [c.value for c in lin if isinstance(c, IntImm)]


def _stage(stage: Stmt) -> Block | NoMatch:
    """The block of a te stage (its perfect serial nest unwrapped), or why there is none."""
    unwrapped = stage_block(stage)
    return unwrapped if isinstance(unwrapped, NoMatch) else unwrapped[1].block


def match_pad(stage: Stmt, *, params: Sequence[Buffer]) -> PadStage | NoMatch:
    """Match a zero-padding stage of an NHWC tensor (module docstring)."""
    block = _stage(stage)
    if isinstance(block, NoMatch):
        return block
    name = block.name
    body = block.body
    ivs = [iv.var for iv in block.iter_vars]
    if block.init is not None or len(ivs) != 4 or any(iv.kind is not IterKind.SPATIAL for iv in block.iter_vars):
        return NoMatch(name, "not a 4-D spatial stage")
    if not (isinstance(body, BufferStore) and all(i is v for i, v in zip(body.indices, ivs))):
        return NoMatch(name, "the stage does not write its tensor at its own indices")
    value = body.value
    if isinstance(value, Call) and value.op == "if_then_else" and len(value.args) == 3:
        cond, then, other = value.args
    elif isinstance(value, Select):
        cond, then, other = value.condition, value.true_value, value.false_value
    else:
        return NoMatch(name, "the value is not if_then_else(in bounds, X[...], 0)")
    if not (isinstance(then, BufferLoad) and _is_zero(other)):
        return NoMatch(name, "the value is not if_then_else(in bounds, X[...], 0)")
    src = then.buffer
    n, h, w, c = ivs
    offsets = []
    for idx, v in zip(then.indices, ivs):
        lin = _lin_ints(idx, [v])
        if lin is None or lin[0] != 1:
            return NoMatch(name, f"the source index {idx} is not {v.name} plus a constant")
        offsets.append(-lin[1])
    if offsets[0] or offsets[3]:
        return NoMatch(name, "only H and W are padded (N and C read at their own indices)")
    src_shape, dst_shape = _ints(src.shape), _ints(body.buffer.shape)
    if src_shape is None or dst_shape is None:
        return NoMatch(name, "symbolic shapes")
    bounds = _bounds(cond, [h, w])
    if bounds is None:
        return NoMatch(name, f"the condition {cond} is not a conjunction of bounds on h and w")
    before = (offsets[1], offsets[2])
    for d, v in ((1, h), (2, w)):
        lo, hi = bounds[v]
        if (lo or 0) != before[d - 1] or (hi if hi is not None else dst_shape[d]) != before[d - 1] + src_shape[d]:
            return NoMatch(name, f"the condition does not keep exactly the source's rows of {v.name}")
    after = (dst_shape[1] - src_shape[1] - before[0], dst_shape[2] - src_shape[2] - before[1])
    if min(*before, *after) < 0 or src_shape[0] != dst_shape[0] or src_shape[3] != dst_shape[3]:
        return NoMatch(name, "the padded shape does not contain the source")
    return PadStage(name, src, body.buffer, before, after)


def _operands(value: PrimExpr, acc: str) -> tuple[BufferLoad, BufferLoad] | None:
    def strip(e: PrimExpr) -> PrimExpr:
        return e.value if isinstance(e, Cast) and e.dtype == acc else e

    if not isinstance(value, Mul):
        return None
    a, b = strip(value.a), strip(value.b)
    if not (isinstance(a, BufferLoad) and isinstance(b, BufferLoad)):
        return None
    return a, b


def match_conv2d(stage: Stmt, *, params: Sequence[Buffer],
                 pads: Mapping[Buffer, PadStage] | None = None) -> Conv2dCore | NoMatch:  # fmt: skip
    """Match a conv2d fprop stage (module docstring); ``pads``: the padding stages before it,
    by the buffer they write."""
    block = _stage(stage)
    if isinstance(block, NoMatch):
        return block
    name = block.name
    kinds = [iv.kind for iv in block.iter_vars]
    if block.init is None or kinds != [IterKind.SPATIAL] * 4 + [IterKind.REDUCE] * 3:
        return NoMatch(name, "not a reduction over 3 axes (r, s, c) of a 4-D output (n, p, q, k)")
    body = block.body
    n, p, q, k, *red = (iv.var for iv in block.iter_vars)
    if not (isinstance(body, BufferStore) and all(i is v for i, v in zip(body.indices, (n, p, q, k)))):
        return NoMatch(name, "the output is not written at (n, p, q, k)")
    y, value = body.buffer, body.value
    acc = y.dtype
    if not (isinstance(value, Add) and isinstance(value.a, BufferLoad) and value.a.buffer is y):
        return NoMatch(name, "the value is not Y + X * W")
    ops = _operands(value.b, acc)
    if ops is None:
        return NoMatch(name, "the update is not a product of two loads")
    inputs = [pair for pair in (ops, ops[::-1]) if len(pair[0].indices) == 4 and pair[0].indices[0] is n]
    if not inputs:
        return NoMatch(name, "no operand is the NHWC input (indexed by n first)")
    x_load, w_load = inputs[0]
    # the input's channel index is the reduce var that is not used by its rows
    cvar = x_load.indices[3]
    if not (isinstance(cvar, Var) and cvar in red):
        return NoMatch(name, "the input's channel index is not a reduction variable")
    rs = [v for v in red if v is not cvar]
    hw: list[tuple[int, int, Var]] = []
    for idx, out_v in ((x_load.indices[1], p), (x_load.indices[2], q)):
        # the row index: out_v * stride + (one of r, s) * dilation
        found = None
        for red_v in rs:
            lin = _lin_ints(idx, [out_v, red_v])
            if lin is not None and lin[2] == 0 and lin[1] > 0 and lin[0] > 0:
                found = (lin[0], lin[1], red_v)
        if found is None:
            return NoMatch(name, f"the input index {idx} is not {out_v.name} * stride + r * dilation")
        hw.append(found)
    (sh, dh, r_var), (sw, dw, s_var) = hw
    if r_var is s_var:
        return NoMatch(name, "the input's rows and columns use one reduction variable")
    if min(sh, dh, sw, dw) < 1:
        return NoMatch(name, "non-positive stride or dilation")
    order = "".join({k: "k", r_var: "r", s_var: "s", cvar: "c"}.get(i, "?") if isinstance(i, Var) else "?"
                    for i in w_load.indices)  # fmt: skip
    layout = WEIGHT_LAYOUTS.get(order)
    if layout is None:
        return NoMatch(name, f"the filter is indexed in the order {order!r}; accepted: {sorted(WEIGHT_LAYOUTS.values())}")
    dtype = x_load.buffer.dtype
    if w_load.buffer.dtype != dtype:
        return NoMatch(name, f"the input is {dtype} and the filter {w_load.buffer.dtype}")
    pad = (pads or {}).get(x_load.buffer)
    x = pad.src if pad is not None else x_load.buffer
    if pad is None and x not in params:
        return NoMatch(name, f"the input {x.name} is neither a parameter nor a padding stage's output")
    xs, ws, ys = _ints(x.shape), _ints(w_load.buffer.shape), _ints(y.shape)
    if xs is None or ws is None or ys is None:
        return NoMatch(name, "symbolic shapes")
    N, H, W, C = xs
    R, S = ({"KRSC": (ws[1], ws[2]), "RSCK": (ws[0], ws[1]), "KCRS": (ws[2], ws[3])})[layout]
    K, P, Q = ys[3], ys[1], ys[2]
    before, after = (pad.before, pad.after) if pad is not None else ((0, 0), (0, 0))
    want_p = (H + before[0] + after[0] - dh * (R - 1) - 1) // sh + 1
    want_q = (W + before[1] + after[1] - dw * (S - 1) - 1) // sw + 1
    if (P, Q) != (want_p, want_q) or ys[0] != N:
        return NoMatch(name, f"the output is {ys}, but the input, filter, strides and paddings give "
                             f"[{N}, {want_p}, {want_q}, {K}]")  # fmt: skip
    return Conv2dCore(name, x, w_load.buffer, y, N, H, W, C, K, R, S, P, Q,
                      (before[0], before[1], after[0], after[1]), (sh, sw), (dh, dw), layout, dtype, acc,
                      pad.block if pad is not None else None)  # fmt: skip


def match_conv2d_stages(root: Stmt, params: Sequence[Buffer]) -> list[Conv2dCore | NoMatch]:
    """Every conv2d stage of a te function's root block (the padding stages found on the way),
    matched or with the reason it is not; stages that are neither are skipped."""
    if not (isinstance(root, BlockRealize) and root.block.name == "root"):
        return []
    body = root.block.body
    stages = list(body.seq) if hasattr(body, "seq") else [body]
    pads: dict[Buffer, PadStage] = {}
    out: list[Conv2dCore | NoMatch] = []
    i = 0
    while i < len(stages):
        stage = stages[i]
        i += 1
        pad = match_pad(stage, params=params)
        if isinstance(pad, PadStage):
            pads[pad.dst] = pad
            continue
        got = match_conv2d(stage, params=params, pads=pads)
        if isinstance(got, Conv2dCore) and got.y not in params and i < len(stages):
            epi = match_output_epilogue(stages[i], got.y, [got.n, got.p, got.q, got.k], params=params)
            if isinstance(epi, EpilogueMatch):
                got = attrs.evolve(got, epilogue=epi)
                i += 1
        if isinstance(got, Conv2dCore) or is_conv_candidate(stage):
            out.append(got)
    return out


def is_conv_candidate(stage: Stmt) -> bool:
    """Whether a stage looks like a convolution (a reduction over three axes), so that a
    failed match is worth reporting."""
    unwrapped = stage_block(stage)
    return not isinstance(unwrapped, NoMatch) and \
        sum(iv.kind is IterKind.REDUCE for iv in unwrapped[1].block.iter_vars) == 3  # fmt: skip
