"""CUTLASS GEMMs through loopir vs torch.matmul (cuBLAS) on the GPU, plus compile figures.

One command runs everything side by side, on random data, checking correctness against a
float64 reference before timing:

- fp16 and bf16, (M, N, K) in SHAPES: loopir tuned CUTLASS (the fastest of the tuning
  candidates), the default configuration (heuristic, no tuning) and torch.matmul;
- GEMM + bias + ReLU fused in the CUTLASS epilogue vs torch unfused (matmul, bias add, relu);
- compile figures: candidates compiled one per translation unit in parallel, a single unit
  alone (cold) and the final module build with a warm cache.

Usage (on the GPU machine)::

    python benchmarks/gemm.py --candidates 10 --fused-candidates 5 --json gemm.json --res-usage

``--compile-only`` builds every kernel the run needs into the cache and stops (no GPU needed),
so the slow sm90 compiles can happen ahead of time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loopir.codegen_cuda.cutlass.emit import KernelSpec  # noqa: E402
from loopir.codegen_cuda.cutlass.enumerate import (  # noqa: E402
    GemmCandidate,
    default_candidate,
    enumerate_candidates,
    rank_candidates,
    shared_tuning_candidates,
)
from loopir.codegen_cuda.cutlass.library import CutlassLibrary  # noqa: E402
from loopir.codegen_cuda.cutlass.problem import EpilogueSpec, GemmProblem  # noqa: E402
from loopir.codegen_cuda.cutlass.tune import compile_candidates, record_choice  # noqa: E402

SHAPES = [
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (4096, 11008, 4096),
    (11008, 4096, 4096),
    (1024, 4096, 16384),
]
# batch 1-16 decode (plain GEMMs only), where split-K / stream-K matters
DECODE = [(1, 4096, 4096), (8, 4096, 4096), (16, 4096, 4096)]
FUSED = EpilogueSpec("relu", has_bias=True)
PLAIN = EpilogueSpec()
ARCH = 90


def family_specs(
    dtype: str, epi: EpilogueSpec, count: int, shapes: list[tuple[int, int, int]]
) -> tuple[list[KernelSpec], dict]:
    """The kernels to compile for one (dtype, epilogue) family: ``count`` tuning candidates
    shared by all ``shapes`` (each shape's best guesses merged round-robin, see
    ``shared_tuning_candidates``) plus each shape's default; deduplicated, deterministic.

    Kernels take the shape at run time, so each compiled candidate is timed on every shape.
    """
    problems = [GemmProblem(m, n, k, dtype, dtype, epilogue=epi) for m, n, k in shapes]
    cands = shared_tuning_candidates(problems, ARCH, count)
    defaults = {}
    for (m, n, k), p in zip(shapes, problems):
        d = default_candidate(p, ARCH)
        defaults[(m, n, k)] = d
        if d not in cands:
            cands.append(d)
    specs = [KernelSpec.make(dtype, dtype, epi, c) for c in cands]
    return specs, defaults


def resource_usage(lib_path: Path) -> list[dict[str, int]]:
    """Registers, stack, shared and local memory of each kernel in a built library, read with
    ``cuobjdump -res-usage`` (spilled accumulators show up as STACK / LOCAL bytes)."""
    import re
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    exe = shutil.which("cuobjdump") or next(
        (str(c) for c in (
            Path(os.path.realpath(nvcc)).parent / "cuobjdump" if nvcc else None,
            Path("/usr/local/cuda/bin/cuobjdump"),
        ) if c is not None and c.exists()),
        None,
    )  # fmt: skip
    if exe is None:
        return []
    out = subprocess.run([exe, "-res-usage", str(lib_path)], capture_output=True, text=True).stdout
    usage = []
    for m in re.finditer(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out):
        reg, stack, shared, local = map(int, m.groups())
        usage.append({"reg": reg, "stack": stack, "shared": shared, "local": local})
    return usage


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--candidates", type=int, default=4, help="tuning candidates per dtype (plain)")
    ap.add_argument("--fused-candidates", type=int, default=2, help="tuning candidates (fused)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cache", default=None, help="cache folder (default: loopir's)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--compile-study", type=int, default=0,
                    help="also compile this many uncached candidates in parallel in a fresh "
                         "cache (and one alone) to measure compile times")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--inner", type=int, default=10, help="back-to-back calls per timed sample")
    ap.add_argument("--warm-gpu-s", type=float, default=2.0,
                    help="seconds of matmuls before the first measurement")
    ap.add_argument("--decode", action="store_true", help="add the decode shapes (plain GEMMs)")
    ap.add_argument("--res-usage", action="store_true",
                    help="record each kernel's registers / stack / local memory (cuobjdump)")
    args = ap.parse_args()
    dtypes = [d for d in args.dtypes.split(",") if d]
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "host": platform.node(), "cpu_count": os.cpu_count(), "args": vars(args),
        "gemm": [], "fused": [], "compile": {},
    }

    def dump() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1, default=str))

    # ---- compile every kernel this run needs (one translation unit each, in parallel) -------
    families: dict[tuple[str, str], tuple[list[KernelSpec], dict]] = {}
    shapes_of = {"plain": SHAPES + (DECODE if args.decode else []), "fused": SHAPES}
    all_specs: list[KernelSpec] = []
    for dtype in dtypes:
        for tag, epi, count in (("plain", PLAIN, args.candidates), ("fused", FUSED, args.fused_candidates)):
            specs, defaults = family_specs(dtype, epi, count, shapes_of[tag])
            families[(dtype, tag)] = (specs, defaults)
            all_specs += [s for s in specs if s not in all_specs]
    print(f"compiling {len(all_specs)} kernels, {args.workers} at a time", flush=True)
    libs, wall, unit = compile_candidates(all_specs, workers=args.workers, cache=args.cache)
    hits = [lib is not None and lib.cache_hit for lib in libs]
    results["compile"]["run"] = {
        "kernels": len(all_specs), "workers": args.workers, "wall_s": wall,
        "unit_s": unit, "cache_hits": sum(hits),
    }  # fmt: skip
    print(f"  wall {wall:.1f} s, {sum(hits)} cache hits", flush=True)
    dump()
    lib_of = {s.entry: lib for s, lib in zip(all_specs, libs)}
    if args.res_usage:
        results["res_usage"] = {
            f"{s.dtype_ab}/{s.activation}/{s.candidate.short}": resource_usage(lib.path)
            for s, lib in zip(all_specs, libs) if lib is not None
        }  # fmt: skip
        for key, usage in results["res_usage"].items():
            print(f"  res-usage {key}: {usage}", flush=True)
        dump()
    if args.compile_only:
        return 0 if all(lib is not None for lib in libs) else 1

    import torch

    from loopir.codegen_cuda.cutlass.library import ensure_context
    from loopir.codegen_cuda.cutlass.runtime import time_ms
    from loopir.errors import LoopIRError

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # create torch's (primary) context first
    ensure_context()
    results["gpu"] = torch.cuda.get_device_name(0)
    results["torch"] = torch.__version__
    torch.backends.cuda.matmul.allow_tf32 = False
    # Bring the GPU out of idle clocks before the first measurement (the first rows of an
    # earlier run were measured right after idle).
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    t_end = time.perf_counter() + args.warm_gpu_s
    while time.perf_counter() < t_end:
        for _ in range(20):
            x @ x
        torch.cuda.synchronize()
    del x

    tol = {"float16": 2e-2, "bfloat16": 6e-2}
    wrong: list[str] = []
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        for tag in ("plain", "fused"):
            specs, defaults = families[(dtype, tag)]
            specs = [s for s in specs if lib_of[s.entry] is not None]
            for m, n, k in shapes_of[tag]:
                epi = PLAIN if tag == "plain" else FUSED
                problem = GemmProblem(m, n, k, dtype, dtype, epilogue=epi)
                g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
                a = torch.rand(m, k, device="cuda", generator=g, dtype=torch.float32).sub_(0.5).to(tdt)
                b = torch.rand(k, n, device="cuda", generator=g, dtype=torch.float32).sub_(0.5).to(tdt)
                bias = torch.rand(n, device="cuda", generator=g, dtype=torch.float32).sub_(0.5).to(tdt)
                d = torch.empty(m, n, device="cuda", dtype=tdt)
                ref = a.double() @ b.double()
                if tag == "fused":
                    ref = torch.relu(ref + bias.double())
                scale = ref.abs().max().item()
                row: dict[str, Any] = {"dtype": dtype, "m": m, "n": n, "k": k}
                timings: dict[str, float | None] = {}
                errors: dict[str, float] = {}
                for spec in specs:
                    name = spec.candidate.short
                    run = lib_of[spec.entry].bind(
                        spec.entry, a.data_ptr(), b.data_ptr(), d.data_ptr(), m, n, k, 1,
                        bias=bias.data_ptr() if tag == "fused" else 0,
                    )  # fmt: skip
                    try:
                        # correctness first, twice: kernels with a workspace (stream-K) must
                        # also be right on a repeated launch
                        for _ in range(2):
                            d.fill_(float("nan"))
                            run()
                            torch.cuda.synchronize()
                            err = (d.double() - ref).abs().max().item() / scale
                            if not err < tol[dtype]:
                                break
                        errors[name] = err
                        if not err < tol[dtype]:
                            wrong.append(f"{dtype} {tag} {m}x{n}x{k} {name}: rel err {err}")
                            print(f"WRONG RESULT {wrong[-1]}", flush=True)
                            timings[name] = None
                            continue
                        timings[name] = time_ms(run, warmup=args.warmup, repeat=args.repeat, inner=args.inner)
                    except LoopIRError as exc:
                        print(f"FAILED {dtype} {tag} {m}x{n}x{k} {name}: {exc}", flush=True)
                        wrong.append(f"{dtype} {tag} {m}x{n}x{k} {name}: {exc}")
                        timings[name] = None
                ok = {key: v for key, v in timings.items() if v is not None}
                if not ok:
                    continue
                best_name = min(ok, key=ok.get)
                best_spec = next(s for s in specs if s.candidate.short == best_name)
                record_choice(problem, ARCH, best_spec.candidate, ok[best_name],
                              sorted(timings.items()), args.cache)
                default_name = defaults[(m, n, k)].short
                flops = 2.0 * m * n * k
                if tag == "plain":
                    t_torch = time_ms(lambda a=a, b=b: torch.matmul(a, b), warmup=args.warmup, repeat=args.repeat, inner=args.inner)
                    terr = (torch.matmul(a, b).double() - ref).abs().max().item() / scale
                else:
                    def unfused(a: Any = a, b: Any = b, bias: Any = bias) -> Any:
                        y = torch.matmul(a, b)
                        y = y + bias
                        return torch.relu(y)
                    t_torch = time_ms(unfused, warmup=args.warmup, repeat=args.repeat, inner=args.inner)
                    terr = (unfused().double() - ref).abs().max().item() / scale
                default_ms = timings.get(default_name)
                row.update(
                    tuned_ms=ok[best_name], tuned=best_name, default_ms=default_ms,
                    default=default_name, torch_ms=t_torch, torch_rel_err=terr,
                    tuned_tflops=flops / ok[best_name] / 1e9,
                    default_tflops=flops / default_ms / 1e9 if default_ms else None,
                    torch_tflops=flops / t_torch / 1e9,
                    speedup_tuned=t_torch / ok[best_name],
                    speedup_default=t_torch / default_ms if default_ms else None,
                    all_ms=timings, rel_err=errors,
                )  # fmt: skip
                results["gemm" if tag == "plain" else "fused"].append(row)
                print(f"{tag:5s} {dtype:8s} {m:6d}x{n:6d}x{k:6d}  tuned {row['tuned_ms']:.4f} ms "
                      f"({row['tuned_tflops']:.0f} TF/s)  default {default_ms or float('nan'):.4f}  "
                      f"torch {t_torch:.4f} ms  x{row['speedup_tuned']:.3f}  [{best_name}]", flush=True)
                dump()
    results["wrong"] = wrong
    summary = {}
    for dtype in dtypes:
        for tag in ("gemm", "fused"):
            rows = [r for r in results[tag] if r["dtype"] == dtype]
            summary[f"{tag}_{dtype}"] = {
                "geomean_speedup_tuned": geomean([r["speedup_tuned"] for r in rows]),
                "geomean_speedup_default": geomean([r["speedup_default"] for r in rows if r["speedup_default"]]),
            }
    results["summary"] = summary
    print(json.dumps(summary, indent=1), flush=True)
    dump()
    if wrong:
        print(f"{len(wrong)} candidate runs were wrong or failed: {wrong}", flush=True)

    # ---- module build with a warm cache -------------------------------------------------------
    spec0 = families[(dtypes[0], "plain")][0][0]
    warm = []
    for _ in range(5):
        t = time.perf_counter()
        lib = CutlassLibrary([spec0], cache=args.cache)
        lib._load()
        warm.append(time.perf_counter() - t)
    results["compile"]["warm_build_ms"] = [w * 1e3 for w in warm]
    print(f"warm module build: {min(warm) * 1e3:.2f} ms (min of 5), "
          f"first {warm[0] * 1e3:.2f} ms", flush=True)
    dump()

    # ---- compile study: fresh cache, one unit alone, then N units in parallel ---------------
    if args.compile_study > 0:
        base = GemmProblem(4096, 4096, 4096, dtypes[0], dtypes[0])
        ranked = rank_candidates(base, enumerate_candidates(base, ARCH))
        used = {s.candidate for s in all_specs}
        extra: list[GemmCandidate] = [c for c in ranked if c not in used][: args.compile_study]
        study_specs = [KernelSpec.make(dtypes[0], dtypes[0], PLAIN, c) for c in extra]
        with tempfile.TemporaryDirectory() as fresh:
            t = time.perf_counter()
            CutlassLibrary([KernelSpec.make(dtypes[0], dtypes[0], PLAIN, default_candidate(base))], cache=fresh)
            single = time.perf_counter() - t
            print(f"cold build of one sm90 unit (the default kernel): {single:.1f} s", flush=True)
            results["compile"]["cold_single_s"] = single
            dump()
            _, pwall, punit = compile_candidates(study_specs, workers=args.workers, cache=fresh)
        results["compile"]["study"] = {
            "units": len(study_specs), "workers": args.workers, "parallel_wall_s": pwall,
            "unit_s": punit, "serial_estimate_s": single * len(study_specs),
        }  # fmt: skip
        print(f"compile study: {len(study_specs)} units in parallel ({args.workers} workers): "
              f"{pwall:.1f} s wall; serial estimate {single * len(study_specs):.1f} s", flush=True)
        dump()
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
