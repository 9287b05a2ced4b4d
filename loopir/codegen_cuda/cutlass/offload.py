"""GemmOffload: hand GEMM blocks (and their fusable epilogues) to CUTLASS.

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

Stages that do not match, or that CUTLASS cannot take (dtype, alignment, shape), stay generated
code; the reason is logged (logger ``loopir.codegen_cuda.cutlass.offload``) and kept in the
``report`` of [`GemmOffload`][loopir.codegen_cuda.cutlass.offload.GemmOffload].

Configuration keys:

- ``cuda.gemm_backend``: ``"auto"`` (default; offload what CUTLASS supports, silently keep
  generated code when the nvidia-cutlass package is missing), ``"cutlass"`` (as auto, but a
  missing package is an error and fallbacks are logged as warnings), ``"generated"`` (never
  offload).
- ``cuda.gemm_allow_tf32``: offload fp32 GEMMs to TF32 tensor-core kernels (default False).
- ``cuda.cutlass_arch``: 90 (CUTLASS 3.x, sm_90a) or 80 (CUTLASS 2.x; also runs on sm90).
- ``cuda.cutlass_tune_candidates``: when building, tune calls that have no cached choice over
  this many candidates (0, the default: cached choice, else the default heuristic).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import attrs

from loopir.errors import CodegenError, PassError
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, FloatImm, IntImm, StringImm, register_intrinsic
from loopir.ir.functor import post_order_stmts, post_order_visit
from loopir.ir.stmt import Block, BlockRealize, Evaluate, FrozenDict, PrimFunc, Stmt, seq
from loopir.passes.base import Pass
from loopir.passes.context import PassContext
from loopir.passes.gemm_match import (
    EpilogueMatch,
    GemmCore,
    NoMatch,
    match_epilogue,
    match_gemm,
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


def _reads_buffer(stmt: Stmt, buf: Buffer) -> bool:
    hit: list[bool] = []

    def visit(n: Any) -> None:
        if isinstance(n, BufferLoad) and n.buffer is buf:
            hit.append(True)
        if isinstance(n, Block) and any(r.buffer is buf for r in n.reads):
            hit.append(True)

    post_order_visit(stmt, visit)
    return bool(hit)


class GemmOffload(Pass):
    """Replace GEMM stages (+ a fusable epilogue) with ``loopir.extern_gemm`` calls.

    Parameters
    ----------
    arch
        CUTLASS family to check support against; None reads ``cuda.cutlass_arch``.

    Attributes
    ----------
    report
        One [`OffloadDecision`][loopir.codegen_cuda.cutlass.offload.OffloadDecision] per GEMM-like
        block of the last run.
    """

    name = "GemmOffload"
    opt_level = 0
    required = False

    def __init__(self, arch: int | None = None) -> None:
        self.arch = arch
        self.report: list[OffloadDecision] = []

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        from loopir.codegen_cuda.cutlass.enumerate import enumerate_candidates, supported_archs
        from loopir.codegen_cuda.cutlass.problem import EpilogueSpec, GemmProblem

        self.report = []
        backend = ctx.get("cuda.gemm_backend")
        if backend not in _BACKENDS:
            raise PassError(
                f"pass {self.name}: cuda.gemm_backend must be one of {_BACKENDS}, got {backend!r}"
            )
        arch = self.arch if self.arch is not None else ctx.get("cuda.cutlass_arch")
        if arch not in supported_archs():
            raise PassError(
                f"pass {self.name}: cuda.cutlass_arch must be one of {supported_archs()}, got {arch!r}"
            )
        allow_tf32 = ctx.get("cuda.gemm_allow_tf32")
        warn = logger.warning if backend == "cutlass" else logger.info
        if backend == "generated":
            return func
        missing = _cutlass_available()
        if missing is not None:
            if backend == "cutlass":
                raise PassError(
                    f"pass {self.name}: cuda.gemm_backend='cutlass' but {missing} "
                    "(pip install --no-deps nvidia-cutlass==4.2.0.0)"
                )
            logger.info("GemmOffload: %s; GEMMs stay generated code", missing)
            return func
        root = func.body
        if not (isinstance(root, BlockRealize) and root.block.name == "root"):
            logger.info("GemmOffload: %s has no te root block; nothing offloaded", func.name)
            return func
        stages = list(root.block.body.seq) if hasattr(root.block.body, "seq") else [root.block.body]
        params = func.params
        out: list[Stmt] = []
        calls: dict[str, FrozenDict] = dict(func.attrs.get(LIBRARY_CALLS_ATTR, {}) or {})
        dropped: set[int] = set()
        i = 0
        while i < len(stages):
            stage = stages[i]
            core = match_gemm(stage, params=params)
            if isinstance(core, NoMatch):
                if _is_gemm_candidate(stage):
                    self._decide(OffloadDecision(core.block, False, core.reason), warn)
                out.append(stage)
                i += 1
                continue
            decision, epi = self._plan(core, stages, i, params, root.block.alloc_buffers)
            if decision is not None:
                self._decide(decision, warn)
                out.append(stage)
                i += 1
                continue
            d = epi.d if epi is not None else core.c
            if backend == "auto" and _is_gemv(core, epi, ctx.get("cuda.gemv_max_rows")):
                self._decide(OffloadDecision(core.block, False, f"a decode GEMV (M = {core.m}): the default "
                                             "GPU schedule's GEMV rule reads W once (cuda.gemv_max_rows)"), warn)  # fmt: skip
                out.append(stage)
                i += 1
                continue
            if core.dtype_ab == "float32" and not allow_tf32:
                self._decide(
                    OffloadDecision(
                        core.block, False,
                        "fp32 GEMM: CUTLASS would use TF32 tensor cores; set "
                        "cuda.gemm_allow_tf32=True to allow it",
                    ),  # fmt: skip
                    warn,
                )
                out.append(stage)
                i += 1
                continue
            spec = EpilogueSpec(
                activation=epi.activation if epi else "identity",
                alpha=core.alpha * (epi.alpha if epi else 1.0),
                beta=epi.beta if epi else 0.0,
                has_bias=bool(epi and epi.bias is not None),
                has_source=bool(epi and epi.source is not None),
            )
            try:
                problem = GemmProblem(
                    m=core.m, n=core.n, k=core.k, dtype_ab=core.dtype_ab, dtype_d=d.dtype,
                    layout_a=core.layout_a, layout_b=core.layout_b, batch=core.batch,
                    epilogue=spec,
                )  # fmt: skip
                enumerate_candidates(problem, arch)
            except CodegenError as exc:
                reason = str(exc).removeprefix("cutlass: ")
                self._decide(OffloadDecision(core.block, False, reason), warn)
                out.append(stage)
                i += 1
                continue
            call_id = _unique_call_id(f"gemm_{core.block}", calls)
            fused = (epi.block,) if epi is not None else ()
            calls[call_id] = FrozenDict(
                {
                    "block": core.block,
                    "fused": fused,
                    "a": core.a.name,
                    "b": core.b.name,
                    "d": d.name,
                    "source": epi.source.name if epi and epi.source is not None else "",
                    "bias": epi.bias.name if epi and epi.bias is not None else "",
                    "arch": arch,
                    "problem": FrozenDict(problem.signature()),
                }
            )
            out.append(_extern_call(call_id, core, d, epi, spec))
            if epi is not None:
                dropped.add(id(core.c))
                i += 2
            else:
                i += 1
            self._decide(
                OffloadDecision(core.block, True, f"offloaded as {call_id} ({problem.layout_code}, "
                                f"{problem.dtype_ab}->{problem.dtype_d}, epilogue {spec.describe()})",
                                call_id, fused),
                logger.info,
            )  # fmt: skip
        if not calls or len(calls) == len(func.attrs.get(LIBRARY_CALLS_ATTR, {}) or {}):
            return func
        allocs = tuple(b for b in root.block.alloc_buffers if id(b) not in dropped)
        new_block = attrs.evolve(root.block, body=seq(*out), alloc_buffers=allocs)
        new_root = attrs.evolve(root, block=new_block)
        return attrs.evolve(
            func, body=new_root, attrs=func.attrs.set(LIBRARY_CALLS_ATTR, FrozenDict(calls))
        )

    def _plan(
        self,
        core: GemmCore,
        stages: Sequence[Stmt],
        i: int,
        params: Sequence[Buffer],
        allocs: Sequence[Buffer],
    ) -> tuple[OffloadDecision | None, EpilogueMatch | None]:
        """Decide whether the GEMM fuses the next stage; a decision means 'do not offload'."""
        param_ids = {id(p) for p in params}
        c_is_param = id(core.c) in param_ids
        later = stages[i + 1 :]
        if c_is_param:
            return None, None
        if not any(b is core.c for b in allocs):
            return OffloadDecision(core.block, False, f"accumulator {core.c.name} is not allocated by the root block"), None
        if not later:
            return OffloadDecision(core.block, False, f"accumulator {core.c.name} is never read"), None
        epi = match_epilogue(later[0], core, params=params)
        if isinstance(epi, NoMatch):
            return OffloadDecision(
                core.block, False,
                f"accumulator {core.c.name} is an intermediate and its consumer "
                f"{epi.block} is not a fusable epilogue: {epi.reason}",
            ), None  # fmt: skip
        if any(_reads_buffer(s, core.c) for s in later[1:]):
            return OffloadDecision(
                core.block, False,
                f"accumulator {core.c.name} is read after the epilogue {epi.block} too",
            ), None  # fmt: skip
        return None, epi

    def _decide(self, decision: OffloadDecision, log: Any) -> None:
        self.report.append(decision)
        if decision.offloaded:
            logger.info("GemmOffload: block %s %s", decision.block, decision.reason)
        else:
            log("GemmOffload: block %s stays generated code: %s", decision.block, decision.reason)


def _unique_call_id(base: str, taken: dict[str, Any]) -> str:
    name, n = base, 1
    while name in taken:
        name = f"{base}_{n}"
        n += 1
    return name


def _extern_call(
    call_id: str, core: GemmCore, d: Buffer, epi: EpilogueMatch | None, spec: Any
) -> Stmt:
    src = epi.source.name if epi and epi.source is not None else ""
    bias = epi.bias.name if epi and epi.bias is not None else ""
    args = [
        StringImm(call_id), StringImm(core.a.name), StringImm(core.b.name), StringImm(d.name),
        StringImm(src), StringImm(bias),
        IntImm(core.m), IntImm(core.n), IntImm(core.k), IntImm(core.batch),
        FloatImm(spec.alpha), FloatImm(spec.beta),
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
