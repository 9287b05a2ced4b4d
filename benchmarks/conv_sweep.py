"""Every sm90 CUTLASS configuration on one ResNet-50 convolution, against cuDNN (issue 34).

For one shape of ``benchmarks/conv.py`` (default ``c2_1x1_64_256``: 1x1, 64 -> 256 channels at
56x56, an implicit GEMM of M = 100352, N = 256, K = 64 that moves far more bytes than it
computes), each dtype:

- the configurations: every sm90 conv fprop tile, cluster and stage count ``cutlass_library``
  offers for it (``enumerate_candidates``: the generator's automatic stage count and the fixed
  ones of ``CONV_SM90_STAGES``), filtered by ``--stages`` and by whether the accumulators fit in
  registers (``--spilling`` adds tiles that do not); with ``--epilogues tma,nosmem`` the
  ``NoSmemWarpSpecialized`` epilogue too (direct stores from registers; not in the generator's
  conv list), for the ``--nosmem-tk`` K tiles at the fixed stage counts;
- each checked against float64 (torch on the GPU) before it is timed (CUDA events around
  back-to-back calls of the bound entry point, as ``conv.py`` tunes);
- cuDNN (torch conv2d, channels_last, ``cudnn.benchmark``) replayed from a CUDA graph;
- the bytes each moves (input + filter read once, output written once) and the fraction of the
  device's copy bandwidth (``copy_``, read + write) that is, next to a write-only fill of the
  output (most of the bytes);
- a 1x1 convolution is also a plain GEMM (``gemm_equivalent``): ``--gemm`` GEMM tuning candidates
  run on the same memory (persistent ping-pong / cooperative kernels, which CUTLASS's sm90 conv
  kernel has not).

A JSON and a table sorted by time; ``--compile-only`` builds every unit into ``--cache`` and
stops (no GPU). ``--profile NAME`` runs one call of a configuration (``--profile cudnn``: of
cuDNN) between ``cudaProfilerStart``/``Stop`` for ``ncu --profile-from-start off``; ``--merge``
prints one table of several sweeps' JSONs.

Usage::

    python benchmarks/conv_sweep.py --compile-only --cache DIR
    python benchmarks/conv_sweep.py --cache DIR --json sweep.json --table sweep.txt
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conv import SHAPES, conv_spec, problem_of  # noqa: E402

from loopir.codegen_cuda.cutlass.emit import KernelSpec  # noqa: E402
from loopir.codegen_cuda.cutlass.enumerate import (  # noqa: E402
    GemmCandidate,
    enumerate_candidates,
    fits_registers,
    tuning_candidates,
)
from loopir.codegen_cuda.cutlass.problem import ConvProblem, GemmProblem  # noqa: E402
from loopir.codegen_cuda.cutlass.tune import compile_candidates  # noqa: E402

ARCH = 90
NOSMEM = "cutlass::epilogue::NoSmemWarpSpecialized"
TOL = {"float16": 1e-2, "bfloat16": 3e-2}


def sweep_candidates(problem: ConvProblem, stages: set[int], spilling: set[tuple[int, ...]],
                     epilogues: set[str], nosmem_tk: set[int]) -> list[GemmCandidate]:  # fmt: skip
    """The configurations swept for ``problem``.

    Parameters
    ----------
    problem
        The convolution (plain epilogue: the NoSmem variants cannot fuse a bias).
    stages
        Stage counts kept (0: the generator's automatic count).
    spilling
        Tiles (M, N, K) kept although their accumulators do not fit in registers (1x1x1
        cluster, the largest of ``stages``, TMA store only).
    epilogues
        "tma" (the generator's epilogue) and/or "nosmem" (direct stores; plain problems only).
    nosmem_tk
        The K tiles given a NoSmem variant (fixed stage counts only).

    Returns
    -------
    list of GemmCandidate
        In the enumeration's order, the TMA-store ones first.
    """
    cands = [c for c in enumerate_candidates(problem, ARCH) if c.stages in stages]
    fit = [c for c in cands if fits_registers(c)]
    spill = [c for c in cands if c.tile in spilling and c.cluster == (1, 1, 1) and c.stages == max(stages)]
    out = fit + spill if "tma" in epilogues else []
    if "nosmem" in epilogues and problem.epilogue.is_plain:
        out = out + [attrs.evolve(c, epilogue_schedule=NOSMEM) for c in fit if c.tile[2] in nosmem_tk and c.stages]
    return out


def gemm_equivalent(problem: ConvProblem) -> GemmProblem | None:
    """The GEMM a 1x1, stride-1, unpadded NHWC convolution is (None for any other): the input is
    an (N*H*W, C) row-major A, the KRSC filter a (K, C) row-major, i.e. column-major, B, the NHWC
    output the (N*P*Q, K) row-major D. CUTLASS's GEMM kernels include persistent ones (ping-pong:
    one warpgroup's epilogue overlaps the other's main loop), which its sm90 conv kernel lacks."""
    one = (problem.r, problem.s, problem.stride, problem.pad) == (1, 1, (1, 1), (0, 0))
    if not one or (problem.p, problem.q) != (problem.h, problem.w):
        return None
    return GemmProblem(problem.batch * problem.p * problem.q, problem.kout, problem.c,
                       problem.dtype_ab, problem.dtype_d, "row", "col")  # fmt: skip


def sweep_specs(args: Any) -> dict[str, list[KernelSpec]]:
    """Each dtype's kernel specs (the plain family of ``conv.py``'s problem for the shape), then
    the first ``args.gemm`` tuning candidates of its GEMM (1x1 convolutions)."""
    stages = {int(s) for s in args.stages.split(",")}
    spilling = {tuple(int(v) for v in t.split("x")) for t in args.spilling.split(",") if t}
    epilogues = set(args.epilogues.split(","))
    nosmem_tk = {int(t) for t in args.nosmem_tk.split(",") if t}
    out = {}
    for dtype in args.dtypes.split(","):
        prob = problem_of(conv_spec(SHAPES[args.shape], dtype, "plain"), "plain")
        out[dtype] = [KernelSpec.for_problem(prob, c) for c in sweep_candidates(prob, stages, spilling, epilogues, nosmem_tk)]
        gemm = gemm_equivalent(prob)
        if gemm is not None and args.gemm:
            cands = tuning_candidates(gemm, enumerate_candidates(gemm, ARCH), args.gemm)
            out[dtype] += [KernelSpec.for_problem(gemm, c) for c in cands]
    return out


def traffic_bytes(problem: ConvProblem) -> int:
    """Bytes a convolution must move at least: its input and filter read once, output written once."""
    a = problem.batch * problem.h * problem.w * problem.c
    b = problem.kout * problem.r * problem.s * problem.c
    d = problem.batch * problem.p * problem.q * problem.kout
    return 2 * (a + b + d)  # fp16 / bf16


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="c2_1x1_64_256", choices=sorted(SHAPES))
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--stages", default="0,2", help="stage counts (0: automatic)")
    ap.add_argument("--spilling", default="128x256x64,256x128x64",
                    help="tiles kept although their accumulators spill (1x1x1 cluster, TMA store)")
    ap.add_argument("--epilogues", default="tma,nosmem")
    ap.add_argument("--nosmem-tk", default="64", help="K tiles given a NoSmem-epilogue variant")
    ap.add_argument("--gemm", type=int, default=6,
                    help="GEMM tuning candidates of a 1x1 conv's GEMM (persistent kernels), 0: none")  # fmt: skip
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cache", default=None)
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--compile-timeout", type=float, default=None,
                    help="seconds per nvcc (a few: a unit missing from --cache fails, not compiles)")  # fmt: skip
    ap.add_argument("--json", default=None)
    ap.add_argument("--table", default=None)
    ap.add_argument("--calls", type=int, default=20, help="calls per timed sample")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--profile", default=None,
                    help="one call of this configuration (short name) or of 'cudnn', first dtype, "
                         "between cudaProfilerStart/Stop (for ncu --profile-from-start off)")  # fmt: skip
    ap.add_argument("--merge", nargs="+", default=None, help="one table of these sweeps' JSONs")
    args = ap.parse_args()
    if args.merge:
        from conv_sweep_run import merge

        return merge(args.merge, args.json, args.table)
    specs = sweep_specs(args)
    flat = [s for lst in specs.values() for s in lst]
    if args.profile:
        from conv_sweep_run import profile_one

        dtype = args.dtypes.split(",")[0]
        flat = [s for s in specs[dtype] if s.candidate.short == args.profile]
        if args.profile != "cudnn" and not flat:
            sys.exit(f"no configuration {args.profile!r} for {dtype}")
        libs = [None]
        if flat:
            libs = compile_candidates(flat, workers=1, cache=args.cache, progress=False,
                                      timeout_s=args.compile_timeout)[0]  # fmt: skip
        return profile_one(args, dtype, flat[0] if flat else None, libs[0])
    print(f"{args.shape}: {len(flat)} configurations, {args.workers} nvcc at a time", flush=True)
    libs, wall, unit = compile_candidates(flat, workers=args.workers, cache=args.cache, progress=False,
                                          timeout_s=args.compile_timeout)  # fmt: skip
    failed = [s.candidate.short for s, lib in zip(flat, libs) if lib is None]
    print(f"  compile wall {wall:.1f} s, units {min(unit, default=0):.1f}-{max(unit, default=0):.1f} s, "
          f"{sum(bool(lib and lib.cache_hit) for lib in libs)} cache hits, failed: {failed}", flush=True)  # fmt: skip
    if args.compile_only:
        return 1 if failed else 0
    from conv_sweep_run import run_sweep

    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "host": platform.node(),
        "argv": sys.argv, "shape": args.shape, "compile_wall_s": wall, "compile_failed": failed,
    }  # fmt: skip
    return run_sweep(args, specs, dict(zip((s.entry for s in flat), libs)), results)


if __name__ == "__main__":
    sys.exit(main())
