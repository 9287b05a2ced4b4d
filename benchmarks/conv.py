"""ResNet-50 convolutions through loopir (CUTLASS implicit GEMM) vs torch conv2d (cuDNN).

One command, on random data, correctness against float64 before any timing:

- the ResNet-50 convolutions at batch 32 (the 3x3 of each stage, the 1x1 reductions and
  expansions, the stride-2 3x3 and projection convolutions) in fp16 and bf16, written in te
  (NHWC, a zero-padding stage, a KRSC filter), built with ``loopir.build`` into one library per
  dtype and called through ``mod()`` on torch tensors, against
  ``torch.nn.functional.conv2d`` on the same memory (channels_last, same dtype,
  ``cudnn.benchmark`` on);
- conv + bias + ReLU fused in the CUTLASS epilogue against torch's three unfused ops;
- tuning: every shape's configuration is the fastest of a shared set of candidates
  (``shared_tuning_candidates``, timed on the kernel), recorded in the tuning cache that
  ``loopir.build`` reads, as for GEMMs;
- build times: each candidate configuration compiled cold (one unit each, in parallel), the
  modules' cold build (the chosen configurations, once each) and their warm build (cache hits).

Usage (on the GPU machine)::

    python benchmarks/conv.py --json conv.json

``--compile-only`` compiles every unit the run needs into ``--cache`` and stops (no GPU).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import events_per_call, graph_per_call, rel_err  # noqa: E402

from loopir.codegen_cuda.cutlass.emit import KernelSpec  # noqa: E402
from loopir.codegen_cuda.cutlass.enumerate import default_candidate, shared_tuning_candidates  # noqa: E402
from loopir.codegen_cuda.cutlass.problem import ConvProblem, EpilogueSpec  # noqa: E402
from loopir.codegen_cuda.cutlass.tune import compile_candidates, record_choice  # noqa: E402
from loopir.testing.conv import ConvSpec, conv2d  # noqa: E402

BATCH = 32
# name: (input H = W, C, K, R = S, stride); padding R // 2
SHAPES: dict[str, tuple[int, int, int, int, int]] = {
    "c2_1x1_64_64": (56, 64, 64, 1, 1),
    "c2_3x3_64": (56, 64, 64, 3, 1),
    "c2_1x1_64_256": (56, 64, 256, 1, 1),  # also the stage-2 projection
    "c2_1x1_256_64": (56, 256, 64, 1, 1),
    "c3_1x1_256_128": (56, 256, 128, 1, 1),
    "c3_3x3_128_s2": (56, 128, 128, 3, 2),
    "c3_3x3_128": (28, 128, 128, 3, 1),
    "c3_1x1_128_512": (28, 128, 512, 1, 1),
    "c3_1x1_512_128": (28, 512, 128, 1, 1),
    "c3_proj_256_512_s2": (56, 256, 512, 1, 2),
    "c4_1x1_512_256": (28, 512, 256, 1, 1),
    "c4_3x3_256_s2": (28, 256, 256, 3, 2),
    "c4_3x3_256": (14, 256, 256, 3, 1),
    "c4_1x1_256_1024": (14, 256, 1024, 1, 1),
    "c4_1x1_1024_256": (14, 1024, 256, 1, 1),
    "c4_proj_512_1024_s2": (28, 512, 1024, 1, 2),
    "c5_1x1_1024_512": (14, 1024, 512, 1, 1),
    "c5_3x3_512_s2": (14, 512, 512, 3, 2),
    "c5_3x3_512": (7, 512, 512, 3, 1),
    "c5_1x1_512_2048": (7, 512, 2048, 1, 1),
    "c5_1x1_2048_512": (7, 2048, 512, 1, 1),
    "c5_proj_1024_2048_s2": (14, 1024, 2048, 1, 2),
}
STEM = (224, 3, 64, 7, 2)  # C = 3: not offloaded (reported with its reason)
FAMILIES = {"plain": EpilogueSpec(), "fused": EpilogueSpec("relu", has_bias=True)}
ARCH = 90  # CUTLASS 3.x implicit-GEMM kernels (cuda.cutlass_arch's default)


def conv_spec(shape: tuple[int, int, int, int, int], dtype: str, family: str) -> ConvSpec:
    h, c, k, r, stride = shape
    pad = None if r == 1 else (r // 2,) * 4
    epi = dict(activation="relu", bias=True) if family == "fused" else {}
    return ConvSpec(n=BATCH, h=h, w=h, c=c, k=k, r=r, s=r, pad=pad, stride=(stride, stride),
                    dtype=dtype, out=dtype, **epi)  # fmt: skip


def problem_of(sp: ConvSpec, family: str) -> ConvProblem:
    p, q = sp.output_hw()
    pad = (sp.pad or (0, 0, 0, 0))[:2]
    return ConvProblem(sp.n, sp.h, sp.w, sp.c, sp.k, sp.r, sp.s, p, q, sp.dtype, sp.dtype, pad,
                       sp.stride, sp.dilation, "KRSC", FAMILIES[family])  # fmt: skip


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def candidate_specs(dtypes: list[str], counts: dict[str, int]) -> dict[tuple[str, str], list[KernelSpec]]:
    """The tuning candidates of each (dtype, family): one shared set over all shapes."""
    out = {}
    for dtype in dtypes:
        for family, count in counts.items():
            problems = [problem_of(conv_spec(s, dtype, family), family) for s in SHAPES.values()]
            cands = shared_tuning_candidates(problems, ARCH, count)
            out[(dtype, family)] = [KernelSpec.for_problem(problems[0], c) for c in cands]
    return out


def compile_objects(specs: list[KernelSpec], cache: str | None, workers: int) -> None:
    """Each configuration's object unit, as ``loopir.build(..., strategy="units")`` compiles it
    for the device (``--compile-only``: the module builds then hit the cache)."""
    from concurrent.futures import ThreadPoolExecutor

    from loopir.codegen_cuda.compile import compile_cuda
    from loopir.codegen_cuda.cutlass.emit import emit_module
    from loopir.codegen_cuda.cutlass.library import unit_flags

    def one(spec: KernelSpec) -> None:
        compile_cuda(emit_module([spec]), arch="sm_90a", flags=tuple(unit_flags()), cache_dir=cache,
                     output="object")  # fmt: skip

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, specs))


def tune_shapes(torch: Any, dtype: str, family: str, specs: list[KernelSpec], libs: dict[str, Any],
                cache: str | None, results: dict[str, Any]) -> None:  # fmt: skip
    """Time every candidate on every shape (the kernel alone) and record the fastest."""
    from loopir.codegen_cuda.cutlass.runtime import entry_dims, time_ms

    tdt = getattr(torch, dtype)
    for name, shape in SHAPES.items():
        sp = conv_spec(shape, dtype, family)
        prob = problem_of(sp, family)
        t = {k: torch.rand(v, device="cuda", dtype=torch.float32).sub_(0.5).to(tdt) for k, v in sp.shapes().items()}
        timings: dict[str, float | None] = {}
        for spec in specs:
            lib = libs.get(spec.entry)
            if lib is None:
                continue
            run = lib.bind(spec.entry, t["X"].data_ptr(), t["Wt"].data_ptr(), t["D"].data_ptr(),
                           *entry_dims(prob), bias=t["bias"].data_ptr() if "bias" in t else 0)  # fmt: skip
            try:
                timings[spec.candidate.short] = time_ms(run, warmup=3, repeat=10, inner=5)
            except Exception as exc:  # a candidate that cannot run this shape is skipped
                print(f"  {name} {spec.candidate.short}: {exc}", flush=True)
                timings[spec.candidate.short] = None
        ok = {k: v for k, v in timings.items() if v is not None}
        if not ok:
            results["wrong"].append(f"{dtype} {family} {name}: no candidate ran")
            continue
        best = min(ok, key=ok.__getitem__)
        cand = next(s.candidate for s in specs if s.candidate.short == best)
        record_choice(prob, ARCH, cand, ok[best], sorted(timings.items()), cache)
        results["tuning"].append({"dtype": dtype, "family": family, "shape": name, "best": best,
                                  "default": default_candidate(prob, ARCH).short, "ms": timings})  # fmt: skip


def fname(dtype: str, family: str, shape: str) -> str:
    return f"{family}_{dtype}_{shape}"


def build_all(loopir: Any, dtypes: list[str], args: Any, results: dict[str, Any]) -> Any:
    """One module of every (dtype, family, shape) function: one library, each CUTLASS
    configuration instantiated once, the units compiled in parallel; built cold, then warm."""
    funcs = {fname(d, f, name): conv2d(conv_spec(shape, d, f))
             for d in dtypes for f in FAMILIES for name, shape in SHAPES.items()}  # fmt: skip
    irmod = loopir.IRModule(funcs)
    rt = None
    for attempt in ("cold", "warm"):
        t0 = time.perf_counter()
        rt = loopir.build(irmod, target="cuda", strategy="units", workers=args.workers, cache_dir=args.cache)
        seconds = time.perf_counter() - t0
        cutlass = [u for u in rt.units if u["unit"].startswith("cutlass")]
        results["builds"].append({"build": attempt, "seconds": seconds, "functions": len(funcs),
                                  "cutlass_units": cutlass, "other_units": len(rt.units) - len(cutlass)})  # fmt: skip
        compiled = [u["seconds"] for u in cutlass if not u["cache_hit"]]
        print(f"  module build ({attempt}): {seconds:.1f} s for {len(funcs)} functions; "
              f"{len(cutlass)} CUTLASS configurations, {len(compiled)} compiled "
              f"({min(compiled, default=0):.1f}-{max(compiled, default=0):.1f} s each)", flush=True)
    return rt


def run_family(torch: Any, rt: Any, dtype: str, family: str, args: Any, results: dict[str, Any]) -> None:
    """Correctness vs float64, then ``mod()`` against cuDNN (fused: against three torch ops)."""
    import torch.nn.functional as F

    tdt = getattr(torch, dtype)
    for name, shape in SHAPES.items():
        sp = conv_spec(shape, dtype, family)
        mod = rt[fname(dtype, family, name)]
        (call,) = mod.library_calls
        gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{dtype}{family}{name}".encode()))
        x = torch.rand(BATCH, sp.c, sp.h, sp.w, device="cuda", generator=gen).sub_(0.5).to(tdt)
        x = x.contiguous(memory_format=torch.channels_last)
        w = torch.rand(sp.k, sp.c, sp.r, sp.s, device="cuda", generator=gen).sub_(0.5).to(tdt)
        w = w.contiguous(memory_format=torch.channels_last)
        bias = torch.rand(sp.k, device="cuda", generator=gen).sub_(0.5).to(tdt)
        p, q = sp.output_hw()
        d = torch.empty(BATCH, p, q, sp.k, device="cuda", dtype=tdt)  # NHWC
        x_nhwc, w_krsc = x.permute(0, 2, 3, 1), w.permute(0, 2, 3, 1)  # views of the same memory
        assert x_nhwc.is_contiguous() and w_krsc.is_contiguous()
        pad = sp.r // 2
        conv_args = dict(stride=sp.stride, padding=pad)
        loopir_args = (x_nhwc, w_krsc, bias, d) if family == "fused" else (x_nhwc, w_krsc, d)

        def ours(a: tuple = loopir_args, m: Any = mod) -> None:
            m(*a)

        if family == "fused":
            def theirs(x: Any = x, w: Any = w, b: Any = bias, kw: dict = conv_args) -> Any:
                return torch.relu(F.conv2d(x, w, **kw) + b.view(1, -1, 1, 1))
        else:
            def theirs(x: Any = x, w: Any = w, kw: dict = conv_args) -> Any:
                return F.conv2d(x, w, **kw)

        ref = F.conv2d(x.double(), w.double(), **conv_args)
        if family == "fused":
            ref = torch.relu(ref + bias.double().view(1, -1, 1, 1))
        ref = ref.permute(0, 2, 3, 1)
        d.fill_(float("nan"))
        ours()
        torch.cuda.synchronize()
        err = rel_err(d, ref) if torch.isfinite(d).all() else float("inf")
        terr = rel_err(theirs().permute(0, 2, 3, 1), ref)
        row: dict[str, Any] = {"dtype": dtype, "family": family, "shape": name, "rel_err": err,
                               "torch_rel_err": terr, "kernel": call["config"]["name"],
                               "tuned": call["tuned"], "flops": sp.flops()}  # fmt: skip
        if not err < args.tol[dtype]:
            row["wrong"] = True
            results["wrong"].append(f"{dtype} {family} {name}: rel err {err}")
            print(f"WRONG {dtype} {family} {name}: rel err {err:.3e}", flush=True)
            results["rows"].append(row)
            continue
        t_ours = events_per_call(torch, ours, args.calls, args.repeat, warmup=5)
        t_torch = events_per_call(torch, theirs, args.calls, args.repeat, warmup=5)
        row.update(loopir_ms=t_ours, torch_ms=t_torch, ratio=t_torch / t_ours,
                   loopir_tflops=sp.flops() / t_ours / 1e9, torch_tflops=sp.flops() / t_torch / 1e9)  # fmt: skip
        results["rows"].append(row)
        print(f"{family:5s} {dtype:8s} {name:22s} loopir {t_ours:.4f} ms ({row['loopir_tflops']:5.0f} TF/s) "
              f"torch {t_torch:.4f} ms  x{row['ratio']:.3f}  err {err:.1e}  [{call['config']['name']}]", flush=True)


def cudnn_graph_times(torch: Any, families: dict[tuple[str, str], Any], args: Any,
                      results: dict[str, Any]) -> None:  # fmt: skip
    """cuDNN's kernel time per shape: ``args.calls`` convolutions (fused: the three ops) captured
    in a CUDA graph and replayed, against the tuned CUTLASS kernel's time from the tuning run."""
    import torch.nn.functional as F

    tuned = {(t["dtype"], t["family"], t["shape"]): t for t in results["tuning"]}
    for dtype, family in families:
        tdt = getattr(torch, dtype)
        for name, shape in SHAPES.items():
            sp = conv_spec(shape, dtype, family)
            x = torch.rand(BATCH, sp.c, sp.h, sp.w, device="cuda").sub_(0.5).to(tdt)
            x = x.contiguous(memory_format=torch.channels_last)
            w = torch.rand(sp.k, sp.c, sp.r, sp.s, device="cuda").sub_(0.5).to(tdt)
            w = w.contiguous(memory_format=torch.channels_last)
            b = torch.rand(sp.k, device="cuda").sub_(0.5).to(tdt).view(1, -1, 1, 1)

            def op(x: Any = x, w: Any = w, b: Any = b, sp: ConvSpec = sp, fused: bool = family == "fused") -> Any:
                y = F.conv2d(x, w, stride=sp.stride, padding=sp.r // 2)
                return torch.relu(y + b) if fused else y

            ms = graph_per_call(torch, op, args.calls, args.repeat)
            t = tuned[(dtype, family, name)]
            ours = min(v for v in t["ms"].values() if v is not None)
            row = {"dtype": dtype, "family": family, "shape": name, "cutlass_kernel_ms": ours,
                   "cudnn_graph_ms": ms, "kernel_ratio": ms / ours, "best": t["best"]}  # fmt: skip
            results["kernels"] = results.get("kernels", []) + [row]
            print(f"kernel {family:5s} {dtype:8s} {name:22s} cutlass {ours:.4f} ms  cudnn(graph) {ms:.4f} ms  "
                  f"x{row['kernel_ratio']:.3f}", flush=True)
    for dtype, family in families:
        rows = [r for r in results["kernels"] if r["dtype"] == dtype and r["family"] == family]
        results.setdefault("kernel_summary", {})[f"{family}_{dtype}"] = {
            "geomean_ratio": geomean([r["kernel_ratio"] for r in rows]),
            "min_ratio": min(r["kernel_ratio"] for r in rows),
        }  # fmt: skip
    print(json.dumps(results["kernel_summary"], indent=1), flush=True)


def stem_reason(dtype: str) -> str:
    """Why the 7x7 stem (3 input channels) stays generated code."""
    from loopir.codegen_cuda.cutlass.offload import GemmOffload

    p = GemmOffload()
    p(conv2d(conv_spec(STEM, dtype, "plain")))
    return "; ".join(f"{d.block}: {d.reason}" for d in p.report)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--candidates", type=int, default=3, help="tuning candidates (plain)")
    ap.add_argument("--fused-candidates", type=int, default=2, help="tuning candidates (fused)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cache", default=None, help="cache folder (default: loopir's)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--kernels-only", action="store_true",
                    help="kernel times without host overhead: the tuned CUTLASS kernel (its tuning "
                         "time) against cuDNN replayed from a CUDA graph; no module is built")
    ap.add_argument("--families", default="plain,fused")
    ap.add_argument("--calls", type=int, default=20, help="calls per timed sample")
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    args.tol = {"float16": 1e-2, "bfloat16": 3e-2}
    dtypes = [d for d in args.dtypes.split(",") if d]
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "host": platform.node(),
        "cpu_count": os.cpu_count(), "argv": sys.argv, "batch": BATCH, "tuning": [], "builds": [],
        "rows": [], "wrong": [], "compile": {},
    }  # fmt: skip

    def dump() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1, default=str))

    counts = {"plain": args.candidates, "fused": args.fused_candidates}
    families = candidate_specs(dtypes, {f: counts[f] for f in args.families.split(",") if f})
    all_specs = list({s.entry: s for specs in families.values() for s in specs}.values())
    print(f"compiling {len(all_specs)} candidate configurations, {args.workers} at a time", flush=True)
    libs, wall, unit = compile_candidates(all_specs, workers=args.workers, cache=args.cache, progress=False)
    results["compile"]["candidates"] = {
        "wall_s": wall, "workers": args.workers,
        "units": [{"config": s.candidate.short, "dtype": s.dtype_ab, "epilogue": s.activation,
                   "seconds": u, "cache_hit": bool(lib and lib.cache_hit)}
                  for s, u, lib in zip(all_specs, unit, libs)],
    }  # fmt: skip
    print(f"  wall {wall:.1f} s; per unit {min(unit):.1f}-{max(unit):.1f} s", flush=True)
    dump()
    if args.compile_only:
        t0 = time.perf_counter()
        compile_objects(all_specs, args.cache, args.workers)
        print(f"  object units: {time.perf_counter() - t0:.1f} s", flush=True)
        return 0 if all(lib is not None for lib in libs) else 1
    lib_of = {s.entry: lib for s, lib in zip(all_specs, libs)}

    import torch

    import loopir
    from loopir.codegen_cuda.cutlass.library import ensure_context

    torch.zeros(1, device="cuda")  # torch's (primary) context first
    ensure_context()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    results.update(gpu=torch.cuda.get_device_name(0), torch=torch.__version__,
                   cudnn=torch.backends.cudnn.version())  # fmt: skip
    results["stem"] = {d: stem_reason(d) for d in dtypes}
    for (dtype, family), specs in families.items():
        tune_shapes(torch, dtype, family, specs, lib_of, args.cache, results)
    dump()
    if args.kernels_only:
        cudnn_graph_times(torch, families, args, results)
        dump()
        return 0
    rt = build_all(loopir, dtypes, args, results)
    dump()
    for dtype in dtypes:
        for family in FAMILIES:
            run_family(torch, rt, dtype, family, args, results)
            dump()
    summary: dict[str, Any] = {}
    for dtype in dtypes:
        for family in FAMILIES:
            rows = [r for r in results["rows"] if r["dtype"] == dtype and r["family"] == family and "ratio" in r]
            if rows:
                summary[f"{family}_{dtype}"] = {
                    "geomean_ratio": geomean([r["ratio"] for r in rows]),
                    "min_ratio": min(r["ratio"] for r in rows),
                    "min_shape": min(rows, key=lambda r: r["ratio"])["shape"], "shapes": len(rows),
                }  # fmt: skip
    results["summary"] = summary
    dump()
    print(json.dumps(summary, indent=1), flush=True)
    return 1 if results["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
