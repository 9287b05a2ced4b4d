"""GemmOffload: hand GEMM and conv2d blocks (and their fusable epilogues) to CUTLASS.

The pass runs on the TensorIR form (before ``lower``) of te-built functions. It finds each
stage ``C = sum_k A*B`` (NN/NT/TN/TT layouts, optional batch axis, fp16/bf16 inputs with fp32
accumulation, fp32 only through TF32 when ``cuda.gemm_allow_tf32`` is set) and, when the next
stage is an elementwise epilogue over C that CUTLASS can fuse (bias over columns, alpha/beta,
ReLU/GELU/SiLU), replaces both stages with one extern call::

    T.evaluate(T.call_extern("loopir.extern_gemm", "gemm_C", "A", "B", "D", "", "bias",
                             M, N, K, batch, alpha, beta))

(argument order: call id, buffer names of A, B, D, source, bias -- "" when absent -- then the
extents and scalars). The full description of every call lives in the function attribute
``"loopir.library_calls"``: ``{call id: FrozenDict(problem signature, buffer and block names)}``;
the CUDA codegen builds the CUTLASS module from it (``loopir.codegen_cuda.cutlass.hook``).

Convolutions (issue 34): a conv2d fprop stage ``Y[n, p, q, k] = sum_{r,s,c} Xp[..] * W[..]``
recognized by [`loopir.passes.conv_match`][loopir.passes.conv_match] (NHWC input, directly or
through a zero-padding stage, a KRSC/KCRS/RSCK filter, strides, dilations, fp16/bf16 with fp32
accumulation, fp32 through TF32 under the same ``cuda.gemm_allow_tf32``) becomes one extern call
of a CUTLASS 2.x implicit-GEMM kernel, with the epilogue stage after it fused as for GEMMs (bias
per output channel, a residual source, ReLU/GELU/SiLU) and the padding stage folded into the
kernel (dropped when nothing else reads the padded tensor). Its extern statement carries the
implicit GEMM's extents (``M = N*P*Q``, ``N = K``, ``K = C*R*S``); the description holds the
geometry (``problem.ConvProblem.signature``). ``cuda.cutlass_arch`` 90 takes CUTLASS 3.x kernels
(im2col TMA), 80 the 2.x ones (which also run on sm_90).

Stages that do not match, or that CUTLASS cannot take (dtype, alignment, shape), stay generated
code; the reason is logged (logger ``loopir.codegen_cuda.cutlass.offload``) and kept in the
``report`` of [`GemmOffload`][loopir.codegen_cuda.cutlass.offload.GemmOffload].

Configuration keys:

- ``cuda.gemm_backend``: ``"auto"`` (default; offload what CUTLASS supports, silently keep
  generated code when the nvidia-cutlass package is missing), ``"cutlass"`` (as auto, but a
  missing package is an error and fallbacks are logged as warnings), ``"generated"`` (never
  offload).
- ``cuda.conv_backend``: the same three values, for convolutions.
- ``cuda.gemm_allow_tf32``: offload fp32 GEMMs and convolutions to TF32 tensor-core kernels
  (default False).
- ``cuda.conv_pointwise_as_gemm``: offload a 1x1, stride-1, unpadded convolution as the GEMM it
  is on the same memory (default False; see ``_pointwise``).
- ``cuda.cutlass_arch``: 90 (CUTLASS 3.x, sm_90a) or 80 (CUTLASS 2.x; also runs on sm90).
- ``cuda.cutlass_tune_candidates``: when building, tune calls that have no cached choice over
  this many candidates (0, the default: cached choice, else the default heuristic).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

from loopir.codegen_cuda.cutlass.problem import ConvProblem, EpilogueSpec, GemmProblem, Problem
from loopir.codegen_cuda.default_schedule import TENSOR_CORES_KEY
from loopir.errors import CodegenError, PassError
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, FloatImm, IntImm, StringImm, register_intrinsic
from loopir.ir.functor import post_order_stmts, post_order_visit
from loopir.ir.stmt import (
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    FrozenDict,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.passes.base import Pass
from loopir.passes.context import PassContext
from loopir.passes.conv_match import (
    Conv2dCore,
    PadStage,
    is_conv_candidate,
    match_conv2d,
    match_pad,
)
from loopir.passes.gemm_match import (
    EpilogueMatch,
    GemmCore,
    NoMatch,
    match_epilogue,
    match_gemm,
    match_output_epilogue,
)

__all__ = [
    "EXTERN_GEMM",
    "LIBRARY_CALLS_ATTR",
    "GemmOffload",
    "OffloadDecision",
    "library_calls_of",
]

logger = logging.getLogger(__name__)

EXTERN_GEMM = "loopir.extern_gemm"
LIBRARY_CALLS_ATTR = "loopir.library_calls"

# Impure: it writes its output buffer; dead-code elimination must keep it.
register_intrinsic(EXTERN_GEMM, 12, pure=False, result="int32")

# The cuda.gemm_* / cuda.cutlass_* keys are registered by loopir.passes.cuda_config, so that a
# PassContext can name them before the backend is imported.

_BACKENDS = ("auto", "cutlass", "generated")


@attrs.frozen
class OffloadDecision:
    """What the pass decided for one GEMM-like block."""

    block: str
    offloaded: bool
    reason: str
    call_id: str | None = None
    fused: tuple[str, ...] = ()


def _cutlass_available() -> str | None:
    """None when nvidia-cutlass is importable, else why not."""
    try:
        import cutlass_library  # noqa: F401
    except ImportError:
        return "the nvidia-cutlass package is not installed"
    return None


def _is_gemm_candidate(stage: Stmt) -> bool:
    """Whether a stage looks like a reduction worth reporting on (has an init)."""
    found: list[Block] = []
    post_order_stmts(stage, lambda n: found.append(n) if isinstance(n, Block) else None)
    return any(b.init is not None for b in found)


def _is_gemv(core: GemmCore, epi: EpilogueMatch | None, max_rows: int) -> bool:
    """Whether the GEMM is a decode GEMV the default schedule's GEMV rule takes: at most
    ``max_rows`` rows, K contiguous in A and B (``Y = X W^T``), no batch, no epilogue."""
    from loopir.schedule.gemv import MAX_GEMV_ROWS

    return (epi is None and core.batch == 1 and 0 < core.m <= min(max_rows, MAX_GEMV_ROWS)
            and core.layout_a == "row" and core.layout_b == "col")  # fmt: skip


def _kept_decode(core: GemmCore, epi: EpilogueMatch | None, settings: _Settings) -> str | None:
    """Why a decode GEMM stays generated code (None: it is offloaded): at most
    ``cuda.gemv_max_rows`` rows go to the default schedule's GEMV rule, 16-bit ones of at most
    ``cuda.decode_gemm_max_rows`` rows to its tensor-core rule's 16-row tiles."""
    if _is_gemv(core, epi, settings.gemv_rows):
        return (f"a decode GEMV (M = {core.m}): the default GPU schedule's GEMV rule reads W once "
                "(cuda.gemv_max_rows)")  # fmt: skip
    if core.dtype_ab in ("float16", "bfloat16") and _is_gemv(core, epi, settings.decode_rows):
        return (f"a decode GEMM (M = {core.m}): the default GPU schedule's tensor-core rule reads W once "
                "in 16-row tiles (cuda.decode_gemm_max_rows)")  # fmt: skip
    return None


def _reads_buffer(stmt: Stmt, buf: Buffer) -> bool:
    hit: list[bool] = []

    def visit(n: Any) -> None:
        if isinstance(n, BufferLoad) and n.buffer is buf:
            hit.append(True)
        if isinstance(n, Block) and any(r.buffer is buf for r in n.reads):
            hit.append(True)

    post_order_visit(stmt, visit)
    return bool(hit)


@attrs.frozen
class _Settings:
    """The pass's configuration for one run."""

    arch: int
    allow_tf32: bool
    gemm: bool
    conv: bool
    warn: Any
    gemv_rows: int = 0  # with the backend "auto": GEMMs of at most this many rows stay generated
    pointwise_gemm: bool = False  # cuda.conv_pointwise_as_gemm
    decode_rows: int = 0  # ... and 16-bit ones of at most this many (cuda.decode_gemm_max_rows)


class GemmOffload(Pass):
    """Replace GEMM and conv2d stages (+ a fusable epilogue) with ``loopir.extern_gemm`` calls.

    Parameters
    ----------
    arch
        CUTLASS family to check support against; None reads ``cuda.cutlass_arch``.

    Attributes
    ----------
    report
        One [`OffloadDecision`][loopir.codegen_cuda.cutlass.offload.OffloadDecision] per GEMM-like
        or convolution-like block of the last run.
    """

    name = "GemmOffload"
    opt_level = 0
    required = False

    def __init__(self, arch: int | None = None) -> None:
        self.arch = arch
        self.report: list[OffloadDecision] = []

    def _settings(self, ctx: PassContext) -> _Settings | None:
        """The run's settings, or None when nothing is to be offloaded."""
        from loopir.codegen_cuda.cutlass.enumerate import supported_archs

        backend = ctx.get("cuda.gemm_backend")
        conv_backend = ctx.get("cuda.conv_backend")
        for key, value in (("cuda.gemm_backend", backend), ("cuda.conv_backend", conv_backend)):
            if value not in _BACKENDS:
                raise PassError(f"pass {self.name}: {key} must be one of {_BACKENDS}, got {value!r}")
        arch = self.arch if self.arch is not None else ctx.get("cuda.cutlass_arch")
        if arch not in supported_archs():
            raise PassError(
                f"pass {self.name}: cuda.cutlass_arch must be one of {supported_archs()}, got {arch!r}"
            )
        strict = "cutlass" in (backend, conv_backend)
        if backend == "generated" and conv_backend == "generated":
            return None
        missing = _cutlass_available()
        if missing is not None:
            if strict:
                raise PassError(
                    f"pass {self.name}: cuda.gemm_backend/cuda.conv_backend='cutlass' but {missing} "
                    "(pip install --no-deps nvidia-cutlass==4.2.0.0)"
                )
            logger.info("GemmOffload: %s; GEMMs and convolutions stay generated code", missing)
            return None
        return _Settings(arch, bool(ctx.get("cuda.gemm_allow_tf32")), backend != "generated",
                         conv_backend != "generated", logger.warning if strict else logger.info,
                         int(ctx.get("cuda.gemv_max_rows")) if backend == "auto" else 0,
                         bool(ctx.get("cuda.conv_pointwise_as_gemm")),
                         int(ctx.get("cuda.decode_gemm_max_rows")) if backend == "auto" and bool(
                             ctx.get(TENSOR_CORES_KEY)) else 0)  # fmt: skip

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        self.report = []
        settings = self._settings(ctx)
        if settings is None:
            return func
        root = func.body
        if not (isinstance(root, BlockRealize) and root.block.name == "root"):
            logger.info("GemmOffload: %s has no te root block; nothing offloaded", func.name)
            return func
        stages = list(root.block.body.seq) if hasattr(root.block.body, "seq") else [root.block.body]
        run = _Run(func, stages, root.block.alloc_buffers, settings)
        i = 0
        while i < len(stages):
            i += self._stage(run, i)
        if len(run.calls) == len(func.attrs.get(LIBRARY_CALLS_ATTR, {}) or {}):
            return func
        out = run.without_folded_pads()
        allocs = tuple(b for b in root.block.alloc_buffers if id(b) not in run.dropped)
        new_block = attrs.evolve(root.block, body=seq(*out), alloc_buffers=allocs)
        new_root = attrs.evolve(root, block=new_block)
        return attrs.evolve(
            func, body=new_root, attrs=func.attrs.set(LIBRARY_CALLS_ATTR, FrozenDict(run.calls))
        )

    def _stage(self, run: _Run, i: int) -> int:
        """Handle stage ``i``; the number of stages consumed."""
        stage = run.stages[i]
        pad = match_pad(stage, params=run.func.params)
        if isinstance(pad, PadStage):
            run.pads[pad.dst] = pad
            run.out.append(stage)
            return 1
        if is_conv_candidate(stage):
            if run.settings.conv:
                return self._conv(run, i)
            run.out.append(stage)
            return 1
        if not run.settings.gemm:
            run.out.append(stage)
            return 1
        return self._gemm_stage(run, i)

    def _keep(self, run: _Run, stage: Stmt, decision: OffloadDecision) -> int:
        self._decide(decision, run.settings.warn)
        run.out.append(stage)
        return 1

    def _gemm_stage(self, run: _Run, i: int) -> int:
        stage, params = run.stages[i], run.func.params
        core = match_gemm(stage, params=params)
        if isinstance(core, NoMatch):
            if _is_gemm_candidate(stage):
                self._decide(OffloadDecision(core.block, False, core.reason), run.settings.warn)
            run.out.append(stage)
            return 1
        plan = _plan(core.block, core.c, lambda st: match_epilogue(st, core, params=params),
                     run.stages, i, params, run.allocs)  # fmt: skip
        kept = _kept_decode(core, plan[1], run.settings) if plan[0] is None else None
        if kept is not None:
            return self._keep(run, stage, OffloadDecision(core.block, False, kept))

        def make(d: Buffer, spec: EpilogueSpec) -> GemmProblem:
            return GemmProblem(
                m=core.m, n=core.n, k=core.k, dtype_ab=core.dtype_ab, dtype_d=d.dtype,
                layout_a=core.layout_a, layout_b=core.layout_b, batch=core.batch, epilogue=spec,
            )  # fmt: skip

        return self._offload(run, i, plan, _Offload(core.block, "gemm", core.dtype_ab, core.alpha,
                                                    (core.a, core.b, core.c), ()), make)  # fmt: skip

    def _conv(self, run: _Run, i: int) -> int:
        stage, params = run.stages[i], run.func.params
        core = match_conv2d(stage, params=params, pads=run.pads)
        if isinstance(core, NoMatch):
            return self._keep(run, stage, OffloadDecision(core.block, False, core.reason))
        reason = _conv_operands_reason(core, params)
        plan = (OffloadDecision(core.block, False, reason), None) if reason else _plan(
            core.block, core.y,
            lambda st: match_output_epilogue(st, core.y, [core.n, core.p, core.q, core.k], params=params),
            run.stages, i, params, run.allocs)  # fmt: skip

        def make(d: Buffer, spec: EpilogueSpec) -> ConvProblem | GemmProblem:
            if run.settings.pointwise_gemm and _pointwise(core):  # the same memory as a GEMM
                return GemmProblem(m=core.n * core.p * core.q, n=core.k, k=core.c, dtype_ab=core.dtype,
                                   dtype_d=d.dtype, layout_a="row", layout_b="row" if core.layout_w == "RSCK" else "col",
                                   epilogue=spec)  # fmt: skip
            return ConvProblem(
                core.n, core.h, core.w_in, core.c, core.k, core.r, core.s, core.p, core.q, core.dtype,
                d.dtype, core.pad[:2], core.stride, core.dilation, core.layout_w, spec,
            )  # fmt: skip

        folded = tuple(p for p in run.pads.values() if p.block == core.pad_block)
        return self._offload(run, i, plan, _Offload(core.block, "conv2d", core.dtype, 1.0,
                                                    (core.x, core.w, core.y), folded), make)  # fmt: skip

    def _offload(self, run: _Run, i: int, plan: tuple[OffloadDecision | None, EpilogueMatch | None],
                 what: _Offload, make: Callable[[Buffer, EpilogueSpec], _P]) -> int:  # fmt: skip
        """Offload a matched stage as planned (or keep it, with the reason); stages consumed."""
        decision, epi = plan
        if decision is None and what.dtype == "float32" and not run.settings.allow_tf32:
            decision = OffloadDecision(what.block, False, _TF32_REASON.format(what=what.kind))
        if decision is not None:
            return self._keep(run, run.stages[i], decision)
        a, b, acc = what.operands
        d = epi.d if epi is not None else acc
        spec = _epilogue_spec(what.alpha, epi)
        problem = _supported(lambda: make(d, spec), run.settings.arch)
        if isinstance(problem, str):
            return self._keep(run, run.stages[i], OffloadDecision(what.block, False, problem))
        text = f"{problem.describe()}, {problem.dtype_ab}->{problem.dtype_d}, epilogue {spec.describe()}"
        self._record(run, f"{what.kind}_{what.block}", what.block, (a, b, d), epi, problem,
                     run.settings.arch, what.pads, text)  # fmt: skip
        if epi is None:
            return 1
        run.dropped.add(id(acc))
        return 2

    def _record(self, run: _Run, base: str, block: str, abd: tuple[Buffer, Buffer, Buffer],
                epi: EpilogueMatch | None, problem: Problem, arch: int, pads: tuple[PadStage, ...],
                what: str) -> None:  # fmt: skip
        """Register an offloaded call: its description, its extern statement, its decision."""
        a, b, d = abd
        call_id = _unique_call_id(base, run.calls)
        fused = (*(p.block for p in pads), *((epi.block,) if epi is not None else ()))
        run.calls[call_id] = FrozenDict(
            {
                "block": block, "fused": fused, "a": a.name, "b": b.name, "d": d.name,
                "source": epi.source.name if epi and epi.source is not None else "",
                "bias": epi.bias.name if epi and epi.bias is not None else "",
                "arch": arch, "problem": FrozenDict(problem.signature()),
            }
        )  # fmt: skip
        run.folded.extend(pads)
        run.out.append(_extern_call(call_id, a, b, d, epi, problem))
        self._decide(OffloadDecision(block, True, f"offloaded as {call_id} ({what})", call_id, fused),
                     logger.info)  # fmt: skip

    def _decide(self, decision: OffloadDecision, log: Any) -> None:
        self.report.append(decision)
        if decision.offloaded:
            logger.info("GemmOffload: block %s %s", decision.block, decision.reason)
        else:
            log("GemmOffload: block %s stays generated code: %s", decision.block, decision.reason)


@attrs.frozen
class _Offload:
    """A matched stage to offload: its block, kind ("gemm"/"conv2d", the call id's prefix),
    operand type, constant factor, operands (A, B, accumulator) and folded padding stages."""

    block: str
    kind: str
    dtype: str
    alpha: float
    operands: tuple[Buffer, Buffer, Buffer]
    pads: tuple[PadStage, ...]


_TF32_REASON = (
    "fp32 {what}: CUTLASS would use TF32 tensor cores; set cuda.gemm_allow_tf32=True to allow it"
)


_P = TypeVar("_P", bound=Problem)


class _Run:
    """The state of one transform: the stages kept or replaced, the calls, the padding stages."""

    def __init__(self, func: PrimFunc, stages: list[Stmt], allocs: Sequence[Buffer],
                 settings: _Settings) -> None:  # fmt: skip
        self.func = func
        self.stages = stages
        self.allocs = allocs
        self.settings = settings
        self.out: list[Stmt] = []
        self.calls: dict[str, FrozenDict] = dict(func.attrs.get(LIBRARY_CALLS_ATTR, {}) or {})
        self.dropped: set[int] = set()
        self.pads: dict[Buffer, PadStage] = {}
        self.folded: list[PadStage] = []

    def without_folded_pads(self) -> list[Stmt]:
        """``out`` without the padding stages a convolution call folded in (the kernel pads
        itself) whose output nothing else reads; their buffers are dropped too."""
        out = list(self.out)
        for pad in self.folded:
            owner = [s for s in out if _writes(s, pad.dst)]
            if len(owner) != 1 or any(_reads_buffer(s, pad.dst) for s in out if s is not owner[0]):
                continue
            if any(p is pad.dst for p in self.func.params):
                continue
            out.remove(owner[0])
            self.dropped.add(id(pad.dst))
        return out


def _writes(stmt: Stmt, buf: Buffer) -> bool:
    hit: list[bool] = []
    post_order_stmts(stmt, lambda n: hit.append(True) if isinstance(n, BufferStore) and n.buffer is buf else None)
    return bool(hit)


def _pointwise(core: Conv2dCore) -> bool:
    """Whether the convolution is a GEMM on the same memory: a 1x1 filter, stride and dilation
    1, no padding, so the NHWC input is the ``(N*H*W, C)`` row-major A, the filter ``(K, C)``
    (KRSC, KCRS: B stored ``[N, K]``) or ``(C, K)`` (RSCK), the NHWC output the ``(N*P*Q, K)``
    D, its per-channel bias D's per-column bias. It is offloaded as that GEMM: CUTLASS 4.2's
    sm90 implicit-GEMM conv kernel is not persistent and, at ResNet-50's c2 1x1 64 -> 256
    (K = 64: one K step a tile), runs each tile's load, MMA and store back to back, 0.58x
    cuDNN, where the persistent ping-pong GEMM kernels reach 1.05x (docs/benchmarks.md,
    session 13: cuDNN calls a GEMM there too). Only with ``cuda.conv_pointwise_as_gemm``: the
    other 1x1 shapes are not measured that way yet."""
    return (core.r, core.s, core.stride, core.dilation, core.pad) == (1, 1, (1, 1), (1, 1), (0, 0, 0, 0))


def _conv_operands_reason(core: Conv2dCore, params: Sequence[Buffer]) -> str | None:
    """Why the convolution's input or filter cannot be handed to the kernel (None: they can)."""
    for buf, role in ((core.x, "input"), (core.w, "filter")):
        if not any(p is buf for p in params):
            return f"the {role} {buf.name} is an intermediate buffer, not a function parameter"
        if buf.strides is not None or buf.scope != "global":
            return f"the {role} {buf.name} is not a compact global buffer"
    if core.acc != "float32":
        return f"the products are summed in {core.acc}; CUTLASS accumulates in float32"
    return None


def _supported(make: Callable[[], _P], arch: int) -> _P | str:
    """The problem ``make`` builds when CUTLASS has kernels for it, else why not (its dtype,
    alignment or epilogue rule)."""
    from loopir.codegen_cuda.cutlass.enumerate import enumerate_candidates

    try:
        problem = make()
        enumerate_candidates(problem, arch)
    except CodegenError as exc:
        return str(exc).removeprefix("cutlass: ")
    return problem


def _epilogue_spec(alpha: float, epi: EpilogueMatch | None) -> EpilogueSpec:
    return EpilogueSpec(
        activation=epi.activation if epi else "identity",
        alpha=alpha * (epi.alpha if epi else 1.0),
        beta=epi.beta if epi else 0.0,
        has_bias=bool(epi and epi.bias is not None),
        has_source=bool(epi and epi.source is not None),
    )


def _plan(
    block: str,
    c: Buffer,
    epilogue_of: Callable[[Stmt], EpilogueMatch | NoMatch],
    stages: Sequence[Stmt],
    i: int,
    params: Sequence[Buffer],
    allocs: Sequence[Buffer],
) -> tuple[OffloadDecision | None, EpilogueMatch | None]:
    """Decide whether the stage writing accumulator ``c`` fuses the next stage; a decision
    means 'do not offload'."""
    if any(p is c for p in params):
        return None, None
    later = stages[i + 1 :]
    if not any(b is c for b in allocs):
        return OffloadDecision(block, False, f"accumulator {c.name} is not allocated by the root block"), None
    if not later:
        return OffloadDecision(block, False, f"accumulator {c.name} is never read"), None
    epi = epilogue_of(later[0])
    if isinstance(epi, NoMatch):
        return OffloadDecision(
            block, False,
            f"accumulator {c.name} is an intermediate and its consumer "
            f"{epi.block} is not a fusable epilogue: {epi.reason}",
        ), None  # fmt: skip
    if any(_reads_buffer(s, c) for s in later[1:]):
        return OffloadDecision(block, False, f"accumulator {c.name} is read after the epilogue {epi.block} too"), None
    return None, epi


def _unique_call_id(base: str, taken: dict[str, Any]) -> str:
    name, n = base, 1
    while name in taken:
        name = f"{base}_{n}"
        n += 1
    return name


def _extern_call(call_id: str, a: Buffer, b: Buffer, d: Buffer, epi: EpilogueMatch | None, problem: Problem) -> Stmt:
    """The extern statement; a convolution's extents are its implicit GEMM's (M = N*P*Q,
    N = K, K = C*R*S; the full geometry is in the call's description)."""
    src = epi.source.name if epi and epi.source is not None else ""
    bias = epi.bias.name if epi and epi.bias is not None else ""
    batch = 1 if isinstance(problem, ConvProblem) else problem.batch
    args = [
        StringImm(call_id), StringImm(a.name), StringImm(b.name), StringImm(d.name),
        StringImm(src), StringImm(bias),
        IntImm(problem.m), IntImm(problem.n), IntImm(problem.k), IntImm(batch),
        FloatImm(problem.epilogue.alpha), FloatImm(problem.epilogue.beta),
    ]  # fmt: skip
    return Evaluate(Call("int32", EXTERN_GEMM, args))


def library_calls_of(func: PrimFunc) -> dict[str, dict[str, Any]]:
    """The extern GEMM calls recorded on ``func`` as plain dicts (``{call id: description}``)."""
    raw = func.attrs.get(LIBRARY_CALLS_ATTR, {}) or {}
    out: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        entry = dict(value)
        entry["problem"] = dict(entry["problem"])
        entry["problem"]["epilogue"] = dict(entry["problem"]["epilogue"])
        entry["fused"] = tuple(entry["fused"])
        out[key] = entry
    return out
