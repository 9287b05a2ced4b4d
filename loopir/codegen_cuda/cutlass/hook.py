"""The CUDA codegen's side of the GEMM offload: build and run a function's extern GEMM calls.

``GemmOffload`` (``loopir.passes.gemm_offload``) leaves ``Evaluate(Call("loopir.extern_gemm",
call_id, ...))`` statements at the top level of the function body and the calls' descriptions
in ``func.attrs["loopir.library_calls"]``. The codegen:

1. runs :func:`offload` before ``lower`` (it is a no-op when nothing matches or the backend is
   ``"generated"``),
2. treats each extern statement as a host step between kernel launches
   (:func:`extern_call_id` tells them apart from device code),
3. builds one :class:`ExternGemmRunner` per module (one nvcc invocation for all CUTLASS
   kernels, content-hash cached) and, at call time, calls ``runner.run(call_id, pointers)``
   with the device pointers of the function's parameters by name.

``runner.library_calls`` is what ``mod.library_calls`` shows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from loopir.codegen_cuda.cutlass.emit import KernelSpec
from loopir.codegen_cuda.cutlass.enumerate import GemmCandidate, default_candidate
from loopir.codegen_cuda.cutlass.library import CutlassLibrary
from loopir.codegen_cuda.cutlass.problem import EpilogueSpec, GemmProblem
from loopir.errors import LaunchError
from loopir.ir.expr import Call, StringImm
from loopir.ir.stmt import Evaluate, PrimFunc, Stmt

__all__ = [
    "ExternGemmRunner",
    "extern_call_id",
    "offload",
    "problem_from_signature",
]

logger = logging.getLogger(__name__)


def offload(func: PrimFunc) -> PrimFunc:
    """Run the GemmOffload pass under the current PassContext."""
    from loopir.passes.gemm_offload import GemmOffload

    return GemmOffload()(func)


def extern_call_id(stmt: Stmt) -> str | None:
    """The call id when ``stmt`` is an extern GEMM statement, else None."""
    from loopir.passes.gemm_offload import EXTERN_GEMM

    if isinstance(stmt, Evaluate) and isinstance(stmt.value, Call) and stmt.value.op == EXTERN_GEMM:
        first = stmt.value.args[0]
        if isinstance(first, StringImm):
            return first.value
    return None


def problem_from_signature(sig: Mapping[str, Any]) -> GemmProblem:
    """Rebuild a :class:`GemmProblem` from ``GemmProblem.signature()`` (as stored in attrs)."""
    layout = sig["layout"]
    epi = dict(sig["epilogue"])
    return GemmProblem(
        m=sig["m"], n=sig["n"], k=sig["k"], batch=sig["batch"],
        dtype_ab=sig["dtype_ab"], dtype_d=sig["dtype_d"],
        layout_a="row" if layout[0] == "N" else "col",
        layout_b="row" if layout[1] == "N" else "col",
        epilogue=EpilogueSpec(**epi),
    )  # fmt: skip


class ExternGemmRunner:
    """The CUTLASS library of one function's extern GEMM calls.

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
    library
        The :class:`CutlassLibrary` (None when the function has no extern call).
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
        from loopir.codegen_cuda.cutlass.tune import lookup, tune
        from loopir.passes.gemm_offload import library_calls_of

        if tune_candidates is None:
            from loopir.passes.context import PassContext

            tune_candidates = int(PassContext.current().get("cuda.cutlass_tune_candidates"))
        self.calls = library_calls_of(func)
        self._entries: dict[str, tuple[KernelSpec, GemmProblem, dict[str, Any]]] = {}
        self.library_calls: list[dict[str, Any]] = []
        specs: list[KernelSpec] = []
        for call_id in sorted(self.calls):
            desc = self.calls[call_id]
            problem = problem_from_signature(desc["problem"])
            arch = int(desc["arch"])
            cand: GemmCandidate | None = lookup(problem, arch, cache)
            tuned = cand is not None
            if cand is None and tune_candidates > 0:
                cand = tune(problem, arch=arch, max_candidates=tune_candidates, cache=cache, workers=workers).best
                tuned = True
            if cand is None:
                cand = default_candidate(problem, arch)
            spec = KernelSpec.make(problem.dtype_ab, problem.dtype_d, problem.epilogue, cand)
            specs.append(spec)
            self._entries[call_id] = (spec, problem, desc)
            self.library_calls.append(
                {
                    "call_id": call_id, "block": desc["block"], "fused": tuple(desc["fused"]),
                    "kernel": spec.entry, "cutlass_kernel": cand.name, "config": cand.config(),
                    "problem": problem.signature(), "tuned": tuned,
                }
            )  # fmt: skip
        self.library = CutlassLibrary(specs, cache=cache) if specs else None

    @property
    def source(self) -> str:
        return self.library.source if self.library is not None else ""

    def run(self, call_id: str, pointers: Mapping[str, int], stream: int = 0) -> None:
        """Run extern call ``call_id`` with ``pointers`` = {parameter name: device pointer}.

        Raises
        ------
        LaunchError
            Unknown call id, a missing pointer, or a CUTLASS error status.
        """
        if call_id not in self._entries or self.library is None:
            raise LaunchError(f"cutlass: unknown extern GEMM call {call_id!r}; known: {sorted(self._entries)}")
        spec, problem, desc = self._entries[call_id]

        def ptr(role: str) -> int:
            name = desc[role]
            if not name:
                return 0
            if name not in pointers:
                raise LaunchError(f"cutlass: extern GEMM {call_id} needs the pointer of parameter {name!r}")
            return int(pointers[name])

        epi = problem.epilogue
        self.library.call(
            spec.entry, ptr("a"), ptr("b"), ptr("d"), problem.m, problem.n, problem.k, problem.batch,
            source=ptr("source"), bias=ptr("bias"), alpha=epi.alpha, beta=epi.beta, stream=stream,
        )  # fmt: skip
