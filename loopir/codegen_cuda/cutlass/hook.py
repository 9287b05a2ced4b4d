"""The CUDA codegen's side of the GEMM and convolution offload: build and run a function's extern
calls.

``GemmOffload`` (``loopir.codegen_cuda.cutlass.offload``) leaves ``Evaluate(Call("loopir.extern_gemm",
call_id, ...))`` statements at the top level of the function body and the calls' descriptions
in ``func.attrs["loopir.library_calls"]``. The codegen:

1. runs ``GemmOffload`` first in ``lower(func, target="cuda")`` (a no-op when nothing matches
   or the backend is ``"generated"``),
2. treats each extern statement as a host step between kernel launches
   (``loopir.codegen_cuda.split.extern_call_id`` tells them apart from device code),
3. plans one [`ExternGemms`][loopir.codegen_cuda.cutlass.hook.ExternGemms] per function: the CUTLASS
   configuration of each call (a cached tuning choice, a fresh tuning run, or the default
   heuristic), the translation unit holding their entry points (compiled to an object and linked
   into the function's shared library), and the calls the generated host code makes
   ([`ExternCall`][loopir.codegen_cuda.host.ExternCall]).

``ExternGemms.library_calls`` is what ``mod.library_calls`` shows.
"""

from __future__ import annotations

import logging
from typing import Any

from loopir.codegen_cuda.cutlass.emit import KernelSpec, emit_module
from loopir.codegen_cuda.cutlass.enumerate import GemmCandidate, default_candidate
from loopir.codegen_cuda.cutlass.problem import ConvProblem, problem_from_signature
from loopir.codegen_cuda.host import ExternCall
from loopir.ir.stmt import PrimFunc

__all__ = [
    "ExternGemms",
    "problem_from_signature",
]

logger = logging.getLogger(__name__)


class ExternGemms:
    """The CUTLASS side of one function's extern GEMM calls.

    Parameters
    ----------
    func
        A function after ``GemmOffload``.
    tune_candidates
        0: use a cached tuning choice, else the default heuristic; N > 0: tune (compile and
        time up to N candidates on the GPU) the calls that have no cached choice. None reads
        the ``cuda.cutlass_tune_candidates`` config key of the current PassContext.
    cache
        Cache folder override (libraries and tuning choices).
    workers
        Parallel nvcc processes while tuning.

    Attributes
    ----------
    source
        The CUTLASS translation unit ("" when the function has no extern call).
    calls
        The host code's calls, one per extern statement.
    arch
        The newest architecture among the chosen kernels (90 or 80).
    library_calls
        ``[{call_id, block, fused, kernel, cutlass_kernel, config, problem, tuned}]``.
    """

    def __init__(
        self,
        func: PrimFunc,
        *,
        tune_candidates: int | None = None,
        cache: Any = None,
        workers: int | None = None,
    ) -> None:
        from loopir.codegen_cuda.cutlass.offload import library_calls_of
        from loopir.codegen_cuda.cutlass.tune import lookup, tune

        if tune_candidates is None:
            from loopir.passes.context import PassContext

            tune_candidates = int(PassContext.current().get("cuda.cutlass_tune_candidates"))
        descs = library_calls_of(func)
        self.calls: list[ExternCall] = []
        self.library_calls: list[dict[str, Any]] = []
        specs: list[KernelSpec] = []
        for call_id in sorted(descs):
            desc = descs[call_id]
            problem = problem_from_signature(desc["problem"])
            arch = int(desc["arch"])
            cand: GemmCandidate | None = lookup(problem, arch, cache)
            tuned = cand is not None
            if cand is None and tune_candidates > 0:
                cand = tune(problem, arch=arch, max_candidates=tune_candidates, cache=cache, workers=workers).best
                tuned = True
            if cand is None:
                cand = default_candidate(problem, arch)
            spec = KernelSpec.for_problem(problem, cand)
            specs.append(spec)
            epi = problem.epilogue
            self.calls.append(
                ExternCall(
                    call_id=call_id, entry=spec.entry,
                    operands={r: str(desc[r] or "") for r in ("a", "b", "d", "source", "bias")},
                    m=problem.m, n=problem.n, k=problem.k,
                    batch=1 if isinstance(problem, ConvProblem) else problem.batch,
                    alpha=float(epi.alpha), beta=float(epi.beta),
                    conv=problem.dims() if isinstance(problem, ConvProblem) else (),
                )
            )  # fmt: skip
            self.library_calls.append(
                {
                    "call_id": call_id, "block": desc["block"], "fused": tuple(desc["fused"]),
                    "kernel": spec.entry, "cutlass_kernel": cand.name, "config": cand.config(),
                    "problem": problem.signature(), "tuned": tuned,
                }
            )  # fmt: skip
        self.specs = specs
        self.source = emit_module(specs) if specs else ""
        self.arch = max((s.candidate.arch for s in specs), default=90)
