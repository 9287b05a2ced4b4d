"""Whole modules: a LLaMA-7B decoder layer's projections as one IRModule, and GEMMs through mod().

Build times need nvcc only (no GPU)::

    python benchmarks/module.py build --json module_build.json

builds the layer module cold three ways -- one translation unit (``strategy="single"``), one unit
per function compiled concurrently (``strategy="units"``), and one module per function -- each in
a fresh cache directory, then warm (everything cached). On the GPU::

    python benchmarks/module.py run --json module_run.json

times, through ``mod()`` as a torch program calls it (one call between CUDA events, and 100
back to back), the fp16 GEMMs of issue 13's six shapes with the default CUTLASS configuration
against ``torch.matmul``, and the layer module's functions against the same torch ops; every
result is checked against float64 on random data first.

The layer at 2048 tokens, fp16 (hidden 4096, intermediate 11008): RMSNorm (generated), QKV
(4096 -> 12288), attention output (4096 -> 4096), gate with SiLU and up (4096 -> 11008 each), their
product (generated, elementwise), and down (11008 -> 4096) with the residual added in its
epilogue.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import loopir
from loopir import te

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import events_per_call, rel_err  # noqa: E402

T, H, I = 2048, 4096, 11008  # noqa: E741
SHAPES = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 11008, 4096),
          (11008, 4096, 4096), (1024, 4096, 16384)]  # fmt: skip


def gemm(m: int, n: int, k: int, act: str | None = None, residual: bool = False) -> Any:
    A = te.placeholder((m, k), "float16", name="A")
    B = te.placeholder((k, n), "float16", name="B")
    R = te.placeholder((m, n), "float16", name="R") if residual else None
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r), name="C")

    def epilogue(i: Any, j: Any) -> Any:
        x = C[i, j]
        if act == "silu":
            x = x * te.sigmoid(x)
        if R is not None:
            x = x + R[i, j].astype("float32")
        return x.astype("float16")

    D = te.compute((m, n), epilogue, name="D")
    return te.create_prim_func([A, B, *([R] if R is not None else []), D])


def _bind_flat(sch: Any, block: str, threads: int = 256) -> None:
    loops = sch.get_loops(sch.get_block(block))
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def rmsnorm(rows: int, cols: int) -> Any:
    X = te.placeholder((rows, cols), "float16", name="X")
    W = te.placeholder((cols,), "float16", name="W")
    k = te.reduce_axis(cols, name="k")
    S = te.compute((rows,), lambda i: te.sum(X[i, k].astype("float32") * X[i, k].astype("float32"), axis=k), name="S")
    Y = te.compute((rows, cols), lambda i, j: (X[i, j].astype("float32") * te.rsqrt(S[i] / float(cols) + 1e-6)
                                              * W[j].astype("float32")).astype("float16"), name="Y")  # fmt: skip
    sch = loopir.Schedule(te.create_prim_func([X, W, Y]))
    i, _ = sch.get_loops(sch.get_block("S"))
    bx, tx = sch.split(i, [None, 128])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    _bind_flat(sch, "Y")
    return sch.func


def multiply(rows: int, cols: int) -> Any:
    G = te.placeholder((rows, cols), "float16", name="G")
    U = te.placeholder((rows, cols), "float16", name="U")
    P = te.compute((rows, cols), lambda i, j: G[i, j] * U[i, j], name="P")
    sch = loopir.Schedule(te.create_prim_func([G, U, P]))
    _bind_flat(sch, "P")
    return sch.func


def layer_module() -> Any:
    return loopir.IRModule({
        "rmsnorm": rmsnorm(T, H), "qkv": gemm(T, 3 * H, H), "attn_out": gemm(T, H, H),
        "gate": gemm(T, I, H, act="silu"), "up": gemm(T, I, H), "swiglu": multiply(T, I),
        "down": gemm(T, H, I, residual=True),
    })  # fmt: skip


def cmd_build(args: argparse.Namespace) -> dict[str, Any]:
    mod = layer_module()
    flags = ("-DLOOPIR_HOST_TRACE",) if args.trace else ()
    out: dict[str, Any] = {}
    for strategy in args.strategies.split(","):
        cache = tempfile.mkdtemp(prefix=f"loopir-{strategy}-")
        t0 = time.perf_counter()
        if strategy == "per-function":
            for name in mod.names:
                loopir.build(mod[name], target="cuda", cache_dir=cache, nvcc_flags=flags)
            units: Any = None
        else:
            rt = loopir.build(mod, target="cuda", cache_dir=cache, nvcc_flags=flags, strategy=strategy)
            units = rt.units
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        if strategy == "per-function":
            for name in mod.names:
                loopir.build(mod[name], target="cuda", cache_dir=cache, nvcc_flags=flags)
        else:
            loopir.build(mod, target="cuda", cache_dir=cache, nvcc_flags=flags, strategy=strategy)
        warm = time.perf_counter() - t0
        out[strategy] = {"cold_s": cold, "warm_s": warm, "units": units}
        print(f"{strategy:14s} cold {cold:7.1f} s   warm {warm * 1e3:7.1f} ms", flush=True)
    return out


def cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"gemm": [], "layer": []}
    shapes = SHAPES[: args.shapes]
    gm = loopir.IRModule({f"g{m}_{n}_{k}": gemm(m, n, k) for m, n, k in shapes})
    t0 = time.perf_counter()
    rt = loopir.build(gm, target="cuda")
    out["gemm_module_build_s"] = time.perf_counter() - t0
    for m, n, k in shapes:
        f = rt[f"g{m}_{n}_{k}"]
        a = (torch.rand(m, k, device="cuda") - 0.5).half()
        b = (torch.rand(k, n, device="cuda") - 0.5).half()
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
        f(a, b, d)
        torch.cuda.synchronize()
        err = rel_err(d, a.double() @ b.double())
        assert err < 1e-2, (m, n, k, err)
        row = {"shape": [m, n, k], "rel_err": err, "config": f.library_calls[0]["config"]}
        for label, calls in (("one_call_ms", 1), ("back_to_back_ms", 100)):
            row[label] = events_per_call(torch, lambda f=f, a=a, b=b, d=d: f(a, b, d), calls, 20, warmup=3)
            row["torch_" + label] = events_per_call(torch, lambda a=a, b=b, d=d: torch.matmul(a, b, out=d), calls, 20, warmup=3)
        row["vs_torch_one_call"] = row["torch_one_call_ms"] / row["one_call_ms"]
        row["vs_torch_back_to_back"] = row["torch_back_to_back_ms"] / row["back_to_back_ms"]
        out["gemm"].append(row)
        print(f"{m}x{n}x{k}: {row['back_to_back_ms']:.4f} ms vs torch {row['torch_back_to_back_ms']:.4f} "
              f"({row['vs_torch_back_to_back']:.3f}x); one call {row['vs_torch_one_call']:.3f}x", flush=True)  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["build", "run"])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--trace", action="store_true", help="build: trace builds (same compile work)")
    ap.add_argument("--strategies", default="single,units,per-function", help="build: which, comma-separated")
    ap.add_argument("--shapes", type=int, default=len(SHAPES), help="run: how many of the GEMM shapes")
    args = ap.parse_args()
    out: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }
    out[args.mode] = cmd_build(args) if args.mode == "build" else cmd_run(args)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
