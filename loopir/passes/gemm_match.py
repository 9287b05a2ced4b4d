"""Recognize GEMM stages and their fusable elementwise epilogues in te-built PrimFuncs.

The matcher works on the stage shape ``te.create_prim_func`` produces (a perfect serial loop nest
around one BlockRealize per tensor, see the te contract) and never guesses: anything it does not
recognize returns a [`NoMatch`][loopir.passes.gemm_match.NoMatch] with the reason, and the caller
keeps the generated code.

GEMM stage::

    C[b?, i, j] = 0                                   (init)
    C[b?, i, j] = C[b?, i, j] + c * A[..] * B[..]     (body; casts to C's dtype allowed,
                                                       c an optional constant factor)

with A indexed ``[b?, i, k]`` (row) or ``[b?, k, i]`` (col) and B ``[b?, k, j]`` (row) or
``[b?, j, k]`` (col). Epilogue stage (directly after, over the same domain)::

    D[b?, i, j] = act(alpha * C[b?, i, j] + beta * S[b?, i, j] + bias[j])

with act one of identity, ReLU (``max(x, 0)``, ``select(x > 0, x, 0)``), GELU
(``0.5 * x * (1 + erf(x * 0.7071...))``) and SiLU (``x * sigmoid(x)``, ``x / (1 + exp(-x))``),
float casts anywhere (CUTLASS computes the epilogue in fp32 and rounds once at the end).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import attrs

from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import (
    GE,
    GT,
    Add,
    BinaryOp,
    BufferLoad,
    Call,
    Cast,
    Div,
    FloatImm,
    IntImm,
    Max,
    Min,
    Mul,
    PrimExpr,
    Select,
    Sub,
    Var,
)
from loopir.ir.stmt import Block, BlockRealize, BufferStore, For, ForKind, IterKind, Stmt

__all__ = [
    "EpilogueMatch",
    "GemmCore",
    "NoMatch",
    "match_epilogue",
    "match_gemm",
    "match_output_epilogue",
    "stage_block",
]

_SQRT1_2 = 1.0 / math.sqrt(2.0)


@attrs.frozen
class NoMatch:
    """Why a stage was not matched (logged and kept for ``GemmOffload.report``)."""

    block: str
    reason: str


@attrs.frozen
class GemmCore:
    """A matched GEMM stage.

    Attributes
    ----------
    block
        The GEMM block's name.
    a, b, c
        Buffers of A, B and the accumulator C.
    layout_a, layout_b
        ``"row"``/``"col"`` (see ``problem.py``).
    m, n, k, batch
        Extents (``batch`` 1 when there is no batch dimension).
    alpha
        Constant factor found inside the reduction.
    dtype_ab
        Element type of A and B.
    spatial_vars
        The block's spatial iter vars (b?, i, j).
    """

    block: str
    a: Buffer
    b: Buffer
    c: Buffer
    layout_a: str
    layout_b: str
    m: int
    n: int
    k: int
    batch: int
    alpha: float
    dtype_ab: str
    spatial_vars: tuple[Var, ...]


@attrs.frozen
class EpilogueMatch:
    """A matched epilogue stage ``D = act(alpha * C + beta * S + bias[j])``."""

    block: str
    d: Buffer
    activation: str
    alpha: float
    beta: float
    source: Buffer | None
    bias: Buffer | None


def _const_int(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) else None


def stage_block(stage: Stmt) -> tuple[list[For], BlockRealize] | NoMatch:
    """Unwrap a te stage: its perfect serial loop nest and the BlockRealize inside."""
    loops: list[For] = []
    s = stage
    while isinstance(s, For):
        loops.append(s)
        s = s.body
    if not isinstance(s, BlockRealize):
        name = _first_block_name(stage)
        return NoMatch(name, "the stage is not a perfect loop nest around one block")
    name = s.block.name
    for loop in loops:
        if loop.kind is not ForKind.SERIAL or loop.annotations:
            return NoMatch(name, f"loop {loop.loop_var.name} is {loop.kind.value} (already scheduled)")
        if _const_int(loop.min) != 0 or _const_int(loop.extent) is None:
            return NoMatch(name, f"loop {loop.loop_var.name} does not run over a static range from 0")
    if not (isinstance(s.predicate, IntImm) and s.predicate.value == 1):
        return NoMatch(name, "the block has a predicate (split or padded)")
    if len(s.iter_values) != len(loops) or any(
        v is not lp.loop_var for v, lp in zip(s.iter_values, loops)
    ):
        return NoMatch(name, "the block's bindings are not the te loop variables (already scheduled)")
    for iv, loop in zip(s.block.iter_vars, loops):
        if _const_int(iv.dom.min) != 0 or _const_int(iv.dom.extent) != _const_int(loop.extent):
            return NoMatch(name, f"iter var {iv.var.name} has a domain that is not [0, extent)")
    return loops, s


def _first_block_name(stmt: Stmt) -> str:
    from loopir.ir.functor import post_order_stmts

    names: list[str] = []
    post_order_stmts(stmt, lambda n: names.append(n.name) if isinstance(n, Block) else None)
    return names[-1] if names else "<no block>"


def _flatten(e: PrimExpr, cls: type[BinaryOp]) -> list[PrimExpr]:
    if isinstance(e, cls):
        return _flatten(e.a, cls) + _flatten(e.b, cls)
    return [e]


def _strip_float_casts(e: PrimExpr) -> PrimExpr:
    while isinstance(e, Cast) and dt.is_float(e.dtype) and dt.is_float(e.value.dtype):
        e = e.value
    return e


def _float_const(e: PrimExpr) -> float | None:
    e = _strip_float_casts(e)
    if isinstance(e, FloatImm):
        return e.value
    if isinstance(e, IntImm) and not dt.is_bool(e.dtype):
        return float(e.value)
    return None


def _idx_vars(load: BufferLoad) -> tuple[Var, ...] | None:
    idx = tuple(i for i in load.indices if isinstance(i, Var))
    return idx if len(idx) == len(load.indices) else None


def match_gemm(stage: Stmt, *, params: Sequence[Buffer]) -> GemmCore | NoMatch:
    """Match a GEMM stage; see the module docstring for the accepted form."""
    unwrapped = stage_block(stage)
    if isinstance(unwrapped, NoMatch):
        return unwrapped
    loops, realize = unwrapped
    block = realize.block
    name = block.name
    spatial = [iv for iv in block.iter_vars if iv.kind is IterKind.SPATIAL]
    reduce = [iv for iv in block.iter_vars if iv.kind is IterKind.REDUCE]
    if not reduce:
        return NoMatch(name, "not a reduction")
    if len(reduce) != 1:
        return NoMatch(name, f"{len(reduce)} reduction axes (a GEMM has one)")
    if len(spatial) not in (2, 3):
        return NoMatch(name, f"{len(spatial)} spatial axes (a GEMM has 2, or 3 when batched)")
    if block.alloc_buffers:
        return NoMatch(name, "the block allocates buffers")
    body = block.body
    if not isinstance(body, BufferStore):
        return NoMatch(name, "the block body is not a single store")
    c = body.buffer
    svars = tuple(iv.var for iv in spatial)
    kvar = reduce[0].var
    if len(body.indices) != len(svars) or any(a is not b for a, b in zip(body.indices, svars)):
        return NoMatch(name, "the output is not indexed by the spatial iter vars in order")
    value = body.value
    if isinstance(value, (Max, Min)):
        kind = "max" if isinstance(value, Max) else "min"
        return NoMatch(name, f"the reduction is a {kind}, not a sum")
    if not isinstance(value, Add):
        return NoMatch(name, "the reduction update is not C = C + ...")
    cur, rhs = value.a, value.b
    if not _is_self_load(cur, c, svars):
        cur, rhs = rhs, cur
    if not _is_self_load(cur, c, svars):
        return NoMatch(name, "the reduction update is not C = C + ...")
    init = block.init
    if not (
        isinstance(init, BufferStore)
        and init.buffer is c
        and _float_const(init.value) == 0.0
        and all(a is b for a, b in zip(init.indices, svars))
    ):
        return NoMatch(name, "the reduction does not start from zero")
    if not dt.is_float(c.dtype):
        return NoMatch(name, f"accumulator dtype {c.dtype} is not a float type")
    # rhs: product of two loads (maybe cast) and constants.
    loads: list[BufferLoad] = []
    alpha = 1.0
    for f in _flatten(rhs, Mul):
        k_const = _float_const(f)
        if k_const is not None:
            alpha *= k_const
            continue
        g = f
        if isinstance(g, Cast):
            if not (dt.is_float(g.dtype) and dt.is_float(g.value.dtype)):
                return NoMatch(name, f"operand cast {g.value.dtype} -> {g.dtype} is not a float widening")
            if dt.bits(g.value.dtype) > dt.bits(g.dtype):
                # Narrowing (e.g. fp32 -> fp16) before the product: CUTLASS would read the
                # unrounded values, so the results would differ.
                return NoMatch(name, "an operand is narrowed before the product")
            g = g.value
        if not isinstance(g, BufferLoad):
            return NoMatch(name, f"the reduction body multiplies a non-load term ({type(g).__name__})")
        loads.append(g)
    if len(loads) != 2:
        return NoMatch(name, f"the reduction body multiplies {len(loads)} loads (a GEMM multiplies 2)")
    batched = len(svars) == 3
    bvar = svars[0] if batched else None
    ivar, jvar = svars[-2], svars[-1]
    found: dict[str, tuple[BufferLoad, str]] = {}
    for ld in loads:
        idx = _idx_vars(ld)
        if idx is None:
            return NoMatch(name, f"operand {ld.buffer.name} is not indexed by plain iter vars")
        if batched:
            if len(idx) != 3 or idx[0] is not bvar:
                return NoMatch(name, f"operand {ld.buffer.name} is not indexed by the batch axis first")
            idx = idx[1:]
        if len(idx) != 2:
            return NoMatch(name, f"operand {ld.buffer.name} has {len(idx)} dimensions (expected 2)")
        pair = (idx[0], idx[1])
        if pair[0] is ivar and pair[1] is kvar:
            found.setdefault("a", (ld, "row"))
        elif pair[0] is kvar and pair[1] is ivar:
            found.setdefault("a", (ld, "col"))
        elif pair[0] is kvar and pair[1] is jvar:
            found.setdefault("b", (ld, "row"))
        elif pair[0] is jvar and pair[1] is kvar:
            found.setdefault("b", (ld, "col"))
        else:
            return NoMatch(name, f"operand {ld.buffer.name} is indexed {[v.name for v in pair]}, not an (i,k)/(k,j) pattern")
    if set(found) != {"a", "b"}:
        return NoMatch(name, "the operands are not one (i,k) and one (k,j) matrix")
    (la, lay_a), (lb, lay_b) = found["a"], found["b"]
    a, b = la.buffer, lb.buffer
    if a.dtype != b.dtype:
        return NoMatch(name, f"A and B differ in dtype ({a.dtype} vs {b.dtype})")
    param_ids = {id(p) for p in params}
    for buf, role in ((a, "A"), (b, "B")):
        if id(buf) not in param_ids:
            return NoMatch(name, f"operand {role} ({buf.name}) is an intermediate buffer, not a function parameter")
        if buf.strides is not None or buf.scope != "global":
            return NoMatch(name, f"operand {role} ({buf.name}) is not a compact global buffer")
    extents = [_const_int(iv.dom.extent) for iv in spatial] + [_const_int(reduce[0].dom.extent)]
    static = [e for e in extents if e is not None]
    if len(static) != len(extents):
        return NoMatch(name, "symbolic extents are not offloaded")
    if batched:
        batch, m, n, k = static
    else:
        batch = 1
        m, n, k = static
    # The buffers must be exactly the operand shapes: a larger buffer would make the
    # compact-stride assumption of the CUTLASS entry point wrong.
    want_a = (k, m) if lay_a == "col" else (m, k)
    want_b = (n, k) if lay_b == "col" else (k, n)
    pre = (batch,) if batched else ()
    for buf, want in ((a, pre + want_a), (b, pre + want_b), (c, pre + (m, n))):
        got = tuple(_const_int(s) for s in buf.shape)
        if got != want:
            return NoMatch(name, f"buffer {buf.name} has shape {got}, expected exactly {want}")
    return GemmCore(
        block=name, a=a, b=b, c=c, layout_a=lay_a, layout_b=lay_b, m=m, n=n, k=k, batch=batch,
        alpha=alpha, dtype_ab=a.dtype, spatial_vars=svars,
    )  # fmt: skip


def _is_self_load(e: PrimExpr, buf: Buffer, svars: tuple[Var, ...]) -> bool:
    return (
        isinstance(e, BufferLoad)
        and e.buffer is buf
        and len(e.indices) == len(svars)
        and all(a is b for a, b in zip(e.indices, svars))
    )


# ---------------------------------------------------------------------------------------------
# Epilogue
# ---------------------------------------------------------------------------------------------


def _key(e: object) -> object:
    """Structural key of an expression with float casts removed (Vars/Buffers by identity)."""
    if isinstance(e, Cast) and dt.is_float(e.dtype) and dt.is_float(e.value.dtype):
        return _key(e.value)
    if isinstance(e, (Var, Buffer)):
        return (type(e).__name__, id(e))
    if isinstance(e, FloatImm):
        return ("const", e.value)
    if isinstance(e, IntImm):
        return ("const", float(e.value)) if not dt.is_bool(e.dtype) else ("bool", e.value)
    if isinstance(e, PrimExpr):
        # every concrete PrimExpr class is an attrs class (PrimExpr itself is only the base)
        cls = cast("type[attrs.AttrsInstance]", type(e))
        return (type(e).__name__,) + tuple(_key(getattr(e, f.name)) for f in attrs.fields(cls))
    if isinstance(e, tuple):
        return tuple(_key(x) for x in e)
    return e


def _same(a: PrimExpr, b: PrimExpr) -> bool:
    return _key(a) == _key(b)


def _is_zero(e: PrimExpr) -> bool:
    return _float_const(e) == 0.0


def _negated(e: PrimExpr) -> PrimExpr | None:
    """x when e is -x written as (-1)*x, x*(-1) or 0-x."""
    e = _strip_float_casts(e)
    if isinstance(e, Mul):
        if _float_const(e.a) == -1.0:
            return e.b
        if _float_const(e.b) == -1.0:
            return e.a
    if isinstance(e, Sub) and _is_zero(e.a):
        return e.b
    return None


def _match_activation(e: PrimExpr) -> tuple[str, PrimExpr]:
    """(activation, its argument); ``("identity", e)`` when no activation is on top."""
    e = _strip_float_casts(e)
    # ReLU
    if isinstance(e, Max):
        if _is_zero(e.b):
            return "relu", e.a
        if _is_zero(e.a):
            return "relu", e.b
    if isinstance(e, Select) and _is_zero(e.false_value):
        cond = e.condition
        if isinstance(cond, (GT, GE)) and _is_zero(cond.b) and _same(cond.a, e.true_value):
            return "relu", e.true_value
    if isinstance(e, Mul):
        factors = _flatten(e, Mul)
        # SiLU: x * sigmoid(x)
        if len(factors) == 2:
            for x, s in (factors, factors[::-1]):
                s0 = _strip_float_casts(s)
                if isinstance(s0, Call) and s0.op == "sigmoid" and _same(s0.args[0], x):
                    return "silu", x
        # GELU: 0.5 * x * (1 + erf(x * c)) in any order/association.
        consts = [f for f in factors if _float_const(f) is not None]
        rest = [f for f in factors if _float_const(f) is None]
        scale = math.prod(_float_const(f) or 0.0 for f in consts) if consts else 1.0
        if len(rest) == 2 and abs(scale - 0.5) < 1e-6:
            for x, g in (rest, rest[::-1]):
                arg = _erf_argument(g)
                if arg is not None and _is_scaled(arg, x, _SQRT1_2):
                    return "gelu", x
    if isinstance(e, Div):
        # SiLU: x / (1 + exp(-x))
        den = _strip_float_casts(e.b)
        if isinstance(den, Add):
            for one, ex in ((den.a, den.b), (den.b, den.a)):
                ex0 = _strip_float_casts(ex)
                if _float_const(one) == 1.0 and isinstance(ex0, Call) and ex0.op == "exp":
                    neg = _negated(ex0.args[0])
                    if neg is not None and _same(neg, e.a):
                        return "silu", e.a
    return "identity", e


def _erf_argument(g: PrimExpr) -> PrimExpr | None:
    g = _strip_float_casts(g)
    if not isinstance(g, Add):
        return None
    for one, er in ((g.a, g.b), (g.b, g.a)):
        er0 = _strip_float_casts(er)
        if _float_const(one) == 1.0 and isinstance(er0, Call) and er0.op == "erf":
            return er0.args[0]
    return None


def _is_scaled(arg: PrimExpr, x: PrimExpr, factor: float) -> bool:
    """arg == x * factor (or x / (1/factor)) up to float-literal rounding."""
    arg = _strip_float_casts(arg)
    if isinstance(arg, Mul):
        for c, y in ((arg.a, arg.b), (arg.b, arg.a)):
            v = _float_const(c)
            if v is not None and abs(v - factor) < 1e-4 and _same(y, x):
                return True
    if isinstance(arg, Div):
        v = _float_const(arg.b)
        if v is not None and v != 0 and abs(1.0 / v - factor) < 1e-4 and _same(arg.a, x):
            return True
    return False


def match_epilogue(
    stage: Stmt, core: GemmCore, *, params: Sequence[Buffer]
) -> EpilogueMatch | NoMatch:
    """Match the elementwise stage right after ``core`` that consumes its accumulator."""
    want = ([core.batch] if core.batch > 1 or len(core.spatial_vars) == 3 else []) + [core.m, core.n]
    return match_output_epilogue(stage, core.c, want, params=params)


def match_output_epilogue(
    stage: Stmt, c: Buffer, want: Sequence[int], *, params: Sequence[Buffer]
) -> EpilogueMatch | NoMatch:
    """Match an elementwise stage over ``want`` (the extents of the accumulator ``c``, its last
    the bias length) that consumes ``c``: the epilogue form of the module docstring, for any
    rank (a GEMM's ``[b?, i, j]``, a convolution's ``[n, p, q, k]``)."""
    unwrapped = stage_block(stage)
    if isinstance(unwrapped, NoMatch):
        return unwrapped
    _loops, realize = unwrapped
    block = realize.block
    name = block.name
    want = list(want)
    if block.init is not None or any(iv.kind is not IterKind.SPATIAL for iv in block.iter_vars):
        return NoMatch(name, "the epilogue is a reduction, not elementwise")
    if len(block.iter_vars) != len(want):
        return NoMatch(name, "the epilogue's domain differs from the accumulator's")
    dims = [_const_int(iv.dom.extent) for iv in block.iter_vars]
    if dims != want:
        return NoMatch(name, f"the epilogue's extents {dims} differ from the accumulator's {want}")
    store = block.body
    if not isinstance(store, BufferStore):
        return NoMatch(name, "the epilogue body is not a single store")
    evars = tuple(iv.var for iv in block.iter_vars)
    if len(store.indices) != len(evars) or any(a is not b for a, b in zip(store.indices, evars)):
        return NoMatch(name, "the epilogue output is not indexed by its iter vars in order")
    d = store.buffer
    param_ids = {id(p) for p in params}
    if id(d) not in param_ids:
        return NoMatch(name, f"the epilogue output {d.name} is an intermediate buffer, not a parameter")
    if d.strides is not None or tuple(_const_int(s) for s in d.shape) != tuple(want):
        return NoMatch(name, f"output {d.name} is not a compact {tuple(want)} buffer")
    if not dt.is_float(d.dtype):
        return NoMatch(name, f"output dtype {d.dtype} is not a float type")
    activation, x = _match_activation(store.value)
    alpha: float | None = None
    beta = 0.0
    source: Buffer | None = None
    bias: Buffer | None = None
    for term in _flatten(_strip_float_casts(x), Add):
        coef = 1.0
        loads: list[BufferLoad] = []
        for f in _flatten(_strip_float_casts(term), Mul):
            v = _float_const(f)
            if v is not None:
                coef *= v
                continue
            f0 = _strip_float_casts(f)
            if not isinstance(f0, BufferLoad):
                return NoMatch(name, f"the epilogue term {type(f0).__name__} is not a scaled load")
            loads.append(f0)
        if len(loads) != 1:
            return NoMatch(name, "an epilogue term is not a single scaled load")
        ld = loads[0]
        idx = _idx_vars(ld)
        if ld.buffer is c:
            if idx != evars or alpha is not None:
                return NoMatch(name, "the accumulator is read at another point or twice")
            alpha = coef
        elif id(ld.buffer) in param_ids and idx is not None and len(idx) == 1 and idx[0] is evars[-1]:
            if bias is not None or coef != 1.0:
                return NoMatch(name, "a second or scaled bias vector")
            if tuple(_const_int(s) for s in ld.buffer.shape) != (want[-1],) or ld.buffer.dtype != d.dtype:
                return NoMatch(name, f"bias {ld.buffer.name} is not a ({want[-1]},) {d.dtype} vector")
            bias = ld.buffer
        elif id(ld.buffer) in param_ids and idx == evars:
            if source is not None:
                return NoMatch(name, "two source matrices")
            if ld.buffer.dtype != d.dtype or ld.buffer.strides is not None or ld.buffer is d:
                return NoMatch(name, f"source {ld.buffer.name} is not a compact {d.dtype} matrix distinct from the output")
            source, beta = ld.buffer, coef
        else:
            return NoMatch(name, f"the epilogue reads {ld.buffer.name} in a way CUTLASS cannot fuse")
    if alpha is None:
        return NoMatch(name, f"the epilogue does not read the accumulator {c.name}")
    return EpilogueMatch(
        block=name, d=d, activation=activation, alpha=alpha, beta=beta, source=source, bias=bias
    )
