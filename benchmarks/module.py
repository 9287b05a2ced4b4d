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


def gemm(
    m: int, n: int, k: int, act: str | None = None, residual: bool = False, bias: bool = False,
    dtype: str = "float16",
) -> Any:
    """``D = act(A @ B + bias) (+ R)`` in ``dtype`` with fp32 accumulation (a CUTLASS match)."""
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    R = te.placeholder((m, n), dtype, name="R") if residual else None
    V = te.placeholder((n,), dtype, name="bias") if bias else None
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r), name="C")

    def epilogue(i: Any, j: Any) -> Any:
        x = C[i, j]
        if V is not None:
            x = x + V[j].astype("float32")
        if act == "silu":
            x = x * te.sigmoid(x)
        elif act == "relu":
            x = te.max(x, 0.0)
        if R is not None:
            x = x + R[i, j].astype("float32")
        return x.astype(dtype)

    D = te.compute((m, n), epilogue, name="D")
    extra = [t for t in (R, V) if t is not None]
    return te.create_prim_func([A, B, *extra, D])


def _bind_flat(sch: Any, block: str, threads: int = 256) -> None:
    loops = sch.get_loops(sch.get_block(block))
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def rmsnorm(rows: int, cols: int) -> Any:
    """LLaMA's RMSNorm, one block per row (the sum of squares across the block's threads)."""
    from loopir.examples import rmsnorm as scheduled

    return scheduled(rows, cols, "float16").func


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


DECODE = [(1, 4096, 4096), (8, 4096, 4096), (16, 4096, 4096)]


def _timed(torch: Any, fn: Any, ref_fn: Any) -> dict[str, float]:
    """One call between events and 100 back to back, for loopir's ``fn`` and torch's ``ref_fn``."""
    row: dict[str, float] = {}
    for label, calls in (("one_call_ms", 1), ("back_to_back_ms", 100)):
        row[label] = events_per_call(torch, fn, calls, 20, warmup=3)
        row["torch_" + label] = events_per_call(torch, ref_fn, calls, 20, warmup=3)
    row["vs_torch_one_call"] = row["torch_one_call_ms"] / row["one_call_ms"]
    row["vs_torch_back_to_back"] = row["torch_back_to_back_ms"] / row["back_to_back_ms"]
    return row


def _rand(torch: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    return (torch.rand(*shape, device="cuda") - 0.5).to(dtype)


def gemm_cases(shapes: list[tuple[int, int, int]], decode: bool) -> dict[str, tuple[str, tuple[int, int, int]]]:
    """``{function name: (kind, (m, n, k))}``: plain and fused (bias + ReLU) GEMMs."""
    cases = {f"g{m}_{n}_{k}": ("plain", (m, n, k)) for m, n, k in shapes}
    cases.update({f"fused{m}_{n}_{k}": ("fused", (m, n, k)) for m, n, k in shapes})
    if decode:
        cases.update({f"decode{m}_{n}_{k}": ("plain", (m, n, k)) for m, n, k in DECODE})
    return cases


def run_gemms(torch: Any, dtype: str, cases: dict[str, Any], label: str, workers: int | None) -> dict[str, Any]:
    """Build the cases as one IRModule (CUTLASS configurations: the cache's tuning choices,
    else the default heuristic) and time each through ``mod()`` against torch (unfused for
    the fused cases)."""
    tdt = getattr(torch, dtype)
    mod = loopir.IRModule({
        name: gemm(m, n, k, dtype=dtype, **({"act": "relu", "bias": True} if kind == "fused" else {}))
        for name, (kind, (m, n, k)) in cases.items()
    })  # fmt: skip
    t0 = time.perf_counter()
    rt = loopir.build(mod, target="cuda", strategy="units", workers=workers)
    out: dict[str, Any] = {"build_s": time.perf_counter() - t0, "rows": []}
    tol = 1e-2 if dtype == "float16" else 4e-2
    for name, (kind, (m, n, k)) in cases.items():
        f = rt[name]
        a, b = _rand(torch, (m, k), tdt), _rand(torch, (k, n), tdt)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
        if kind == "fused":
            bias = _rand(torch, (n,), tdt)
            args: tuple[Any, ...] = (a, b, bias, d)
            ref = torch.relu(a.double() @ b.double() + bias.double())

            def torch_fn(a: Any = a, b: Any = b, bias: Any = bias) -> Any:
                return torch.relu(torch.matmul(a, b) + bias)
        else:
            args = (a, b, d)
            ref = a.double() @ b.double()

            def torch_fn(a: Any = a, b: Any = b, d: Any = d) -> Any:
                return torch.matmul(a, b, out=d)
        f(*args)
        torch.cuda.synchronize()
        err = rel_err(d, ref)
        assert err < tol, (name, err)
        row: dict[str, Any] = {"name": name, "kind": kind, "shape": [m, n, k], "rel_err": err,
                               "config": f.library_calls[0]["config"], "tuned": f.library_calls[0]["tuned"]}  # fmt: skip
        row.update(_timed(torch, lambda f=f, args=args: f(*args), torch_fn))
        out["rows"].append(row)
        print(f"{dtype} {label} {name}: {row['back_to_back_ms']:.4f} ms vs torch "
              f"{row['torch_back_to_back_ms']:.4f} ({row['vs_torch_back_to_back']:.3f}x); "
              f"one call {row['vs_torch_one_call']:.3f}x", flush=True)  # fmt: skip
    return out


def run_layer(torch: Any, workers: int | None) -> list[dict[str, Any]]:
    """The layer module's functions through ``mod()`` against the same torch ops."""
    t0 = time.perf_counter()
    rt = loopir.build(layer_module(), target="cuda", strategy="units", workers=workers)
    print(f"layer module build {time.perf_counter() - t0:.1f} s", flush=True)
    h, f16 = torch.float16, torch.nn.functional
    x, w_norm = _rand(torch, (T, H), h), _rand(torch, (H,), h) + 1.0
    weights = {"qkv": (H, 3 * H), "attn_out": (H, H), "gate": (H, I), "up": (H, I), "down": (I, H)}
    w = {name: _rand(torch, shape, h) * 0.05 for name, shape in weights.items()}
    g, u, resid = _rand(torch, (T, I), h), _rand(torch, (T, I), h), _rand(torch, (T, H), h)
    xi = _rand(torch, (T, I), h)
    empty = {name: torch.empty(T, shape[1], device="cuda", dtype=h) for name, shape in weights.items()}
    y_norm, prod = torch.empty(T, H, device="cuda", dtype=h), torch.empty(T, I, device="cuda", dtype=h)

    def rms_ref(x: Any) -> Any:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w_norm.float()).half()

    cases = {
        "rmsnorm": ((x, w_norm, y_norm), y_norm, lambda: rms_ref(x), rms_ref(x.double()).double()),
        "qkv": ((x, w["qkv"], empty["qkv"]), empty["qkv"], lambda: torch.matmul(x, w["qkv"]), x.double() @ w["qkv"].double()),
        "attn_out": ((x, w["attn_out"], empty["attn_out"]), empty["attn_out"], lambda: torch.matmul(x, w["attn_out"]),
                     x.double() @ w["attn_out"].double()),
        "gate": ((x, w["gate"], empty["gate"]), empty["gate"], lambda: f16.silu(torch.matmul(x, w["gate"])),
                 f16.silu(x.double() @ w["gate"].double())),
        "up": ((x, w["up"], empty["up"]), empty["up"], lambda: torch.matmul(x, w["up"]), x.double() @ w["up"].double()),
        "swiglu": ((g, u, prod), prod, lambda: g * u, g.double() * u.double()),
        "down": ((xi, w["down"], resid, empty["down"]), empty["down"], lambda: torch.matmul(xi, w["down"]) + resid,
                 xi.double() @ w["down"].double() + resid.double()),
    }  # fmt: skip
    rows = []
    for name, (args, result, torch_fn, ref) in cases.items():
        f = rt[name]
        result.fill_(float("nan"))
        f(*args)
        torch.cuda.synchronize()
        err = rel_err(result, ref)
        assert err < 1e-2, (name, err)
        row: dict[str, Any] = {"name": name, "rel_err": err}
        row.update(_timed(torch, lambda f=f, args=args: f(*args), torch_fn))
        rows.append(row)
        print(f"layer {name}: {row['back_to_back_ms']:.4f} ms vs torch {row['torch_back_to_back_ms']:.4f} "
              f"({row['vs_torch_back_to_back']:.3f}x)", flush=True)  # fmt: skip
    return rows


def cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from loopir._cache_dir import set_cache_root

    torch.backends.cuda.matmul.allow_tf32 = False
    out: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    cases = gemm_cases(SHAPES[: args.shapes], args.decode)
    for dtype in args.dtypes.split(",") if cases else ():
        # a fresh cache: "default" means that no tuning choice is recorded
        set_cache_root(tempfile.mkdtemp(prefix="loopir-default-"))
        out[f"{dtype}_default"] = run_gemms(torch, dtype, cases, "default", args.workers)
        if args.tuned_cache:
            # the choices benchmarks/gemm.py recorded (``--cache <root>/cutlass``)
            set_cache_root(args.tuned_cache)
            out[f"{dtype}_tuned"] = run_gemms(torch, dtype, cases, "tuned", args.workers)
    if args.layer:
        out["layer"] = run_layer(torch, args.workers)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["build", "run"])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--trace", action="store_true", help="build: trace builds (same compile work)")
    ap.add_argument("--strategies", default="single,units,per-function", help="build: which, comma-separated")
    ap.add_argument("--shapes", type=int, default=len(SHAPES), help="run: how many of the GEMM shapes")
    ap.add_argument("--dtypes", default="float16,bfloat16", help="run: GEMM dtypes, comma-separated")
    ap.add_argument("--tuned-cache", default=None,
                    help="run: also build with the tuning choices of this cache root (from benchmarks/gemm.py)")
    ap.add_argument("--decode", action="store_true", help="run: add the decode shapes (M in 1, 8, 16)")
    ap.add_argument("--layer", action="store_true", help="run: time the layer module's functions")
    ap.add_argument("--workers", type=int, default=None, help="concurrent nvcc processes")
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
