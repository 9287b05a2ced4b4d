"""Tensor-core GEMMs through ``mod()``: loopir ``examples.tc_gemm`` vs torch.matmul (cuBLAS) vs a
Triton ``tl.dot`` GEMM autotuned over a few configurations (issue 31).

One command on the GPU machine::

    python benchmarks/tensor_core.py --json tensor_core.json

Cases (``M x K x N``), fp16 and bf16 inputs, fp32 accumulation, C written in the input type
by all: 4096^3, 8192^3 and 4096 x 4096 x 11008 (K = 4096, N = 11008: a LLaMA-7B MLP
up-projection with 4096 tokens); then GEMMs CUTLASS does not take, also timed as
``loopir.build`` builds them unscheduled (``loopir_default``: the default GPU schedule's
tensor-core rule, or CUTLASS; ``loopir_default_cuda_cores``: with that rule turned off, what the
default schedule gave before): fp16 with K = 100 (padded by
tc_gemm: zero-filled fetches), 32 batches of 512 x 128 x 512 (``batch=32``, on
``blockIdx.z``), and the same with a ReLU on A fused as a prologue (``a_prologue``; torch runs
``relu`` then ``matmul``, Triton applies it to the loaded tile). Every implementation is first checked against a float32 reference on random data
(max abs error over max abs reference), then timed with CUDA events around ``--calls``
back-to-back calls (median of ``--repeat`` samples).

``--smoke`` builds what it can without a GPU: every loopir schedule of the run, lowered, race
checked and emitted as CUDA, and compiled with nvcc for ``--arch`` when nvcc is on PATH; it
imports neither torch nor Triton.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import loopir
from loopir.errors import ScheduleError
from loopir.examples import hopper_gemm, tc_gemm, tc_gemm_func

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import events_per_call  # noqa: E402

#: (M, K, N)
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 11008)]
#: the GEMMs CUTLASS does not take: (name, M, K, N, batch, ReLU prologue on A)
EXTRA = [("fp16 K=100", 4096, 100, 4096, 1, False), ("fp16 32 x 512x128x512", 512, 128, 512, 32, False),
         ("fp16 32 x relu(A) 512x128x512", 512, 128, 512, 32, True)]  # fmt: skip
DTYPES = ["float16", "bfloat16"]
#: the schedule's parameters (the defaults of tc_gemm, spelled out for the record); every
#: implementation writes C in the input type (fp32 accumulation)
PARAMS: dict[str, Any] = dict(block=(128, 128, 32), warp=(64, 64), stages=4, swizzle=True, vec=8)
#: ``examples.hopper_gemm`` (wgmma, sm_90a; B stored [N, K]): ``loopir_wgmma`` in the main cases, in
#: its default form (issue 32: TMA copies, a producer warpgroup, a persistent grid of 132 blocks,
#: ``raster=8``); ``--hopper '{"tma": false}'`` times the ``cp.async`` form, ``'{"persistent": false}'``
#: the non-persistent warp-specialized one
HOPPER: dict[str, Any] = dict(block=(128, 256, 64), wn=256, stages=4)


def relu(x: Any) -> Any:
    from loopir.ir import op

    return op.max_(x, op.const(0, x.dtype))


def gemm_bias_gelu_func(M: int, K: int, N: int, dtype: str) -> Any:
    """``D = gelu(A @ B.T + bias).astype(dtype)`` as te stages (B ``[N, K]``, fp32 accumulation,
    the exact erf GELU): what the default schedule fuses into the GEMM's copy-out."""
    import math

    from loopir import te
    from loopir.ir import op

    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((N, K), dtype, name="B")
    bias = te.placeholder((N,), "float32", name="bias")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("float32") * B[j, k].astype("float32"), axis=k),
                   name="C")  # fmt: skip

    def gelu(x: Any) -> Any:
        return x * op.const(0.5, "float32") * (op.const(1.0, "float32") + op.erf(x * op.const(1 / math.sqrt(2), "float32")))

    D = te.compute((M, N), lambda i, j: gelu(C[i, j] + bias[j]).astype(dtype), name="D")
    return te.create_prim_func([A, B, bias, D])


def run_fused(torch: Any, args: argparse.Namespace, M: int, K: int, N: int, dtype: str) -> dict[str, Any]:
    """GEMM + bias + GELU: the default schedule's wgmma form (generated: CUTLASS off) and
    ``loopir.build``'s default (CUTLASS when it takes it) vs torch's three ops."""
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=tdt, generator=gen)
    b = torch.randn(N, K, device="cuda", dtype=tdt, generator=gen)
    bias = torch.randn(N, device="cuda", dtype=torch.float32, generator=gen)
    ref = torch.nn.functional.gelu(a.float() @ b.float().T + bias)
    func = gemm_bias_gelu_func(M, K, N, dtype)
    with loopir.PassContext(config={"cuda.gemm_backend": "generated", "cuda.default_schedule.wgmma": "on"}):
        wmod = loopir.build(func, target="cuda")
    dmod = loopir.build(func, target="cuda")
    outs = {k: torch.empty(M, N, device="cuda", dtype=tdt) for k in ("w", "d", "t")}
    impls = {
        "loopir_wgmma": (lambda: wmod(a, b, bias, outs["w"]), outs["w"]),
        "loopir_default": (lambda: dmod(a, b, bias, outs["d"]), outs["d"]),
        "torch_unfused": (lambda: outs["t"].copy_(torch.nn.functional.gelu(torch.matmul(a, b.T) + bias)), outs["t"]),
    }  # fmt: skip
    return run_case(torch, args, f"{dtype} {M}x{K}x{N} + bias + GELU", 2.0 * M * N * K, ref, impls)


def schedule(M: int, K: int, N: int, dtype: str, batch: int = 1, prologue: bool = False) -> loopir.Schedule:
    return tc_gemm(M, K, N, dtype, **PARAMS, batch=batch if batch > 1 else None, out_dtype=dtype,
                   a_prologue=relu if prologue else None)  # fmt: skip


def default_func(M: int, K: int, N: int, dtype: str, batch: int = 1, prologue: bool = False) -> Any:
    """The same GEMM unscheduled: what ``loopir.build`` gives without a schedule (CUTLASS when
    its matcher takes it, else the default GPU schedule)."""
    return tc_gemm_func(M, K, N, dtype, batch=batch if batch > 1 else None, out_dtype=dtype,
                        a_prologue=relu if prologue else None)  # fmt: skip


def smoke(arch: str) -> int:
    """Build every loopir schedule of the run (no GPU needed)."""
    from loopir.codegen_cuda import compile_cuda, prepare_function

    nvcc = shutil.which("nvcc") is not None
    for dtype in DTYPES:
        for M, K, N in SHAPES:
            sch = schedule(M, K, N, dtype)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a RaceCheckWarning fails the smoke run
                src = prepare_function(sch.func).emitted.source
            line = f"{dtype} {M}x{K}x{N}: {len(src)} chars of CUDA"
            if nvcc:
                binary = compile_cuda(src, arch=arch)
                res = next(iter(binary.resources.values()))
                line += (f", {arch}: {res.registers} registers, {res.shared_bytes} B shared, "
                         f"spills {res.spill_store_bytes}/{res.spill_load_bytes}")  # fmt: skip
            print(line, flush=True)
            if arch.startswith("sm_90a"):
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    hsrc = prepare_function(hopper_gemm(M, K, N, dtype, **HOPPER, out_dtype=dtype).func).emitted.source
                if nvcc:
                    res = next(iter(compile_cuda(hsrc, arch=arch).resources.values()))
                    print(f"  wgmma: {res.registers} registers, {res.shared_bytes} B shared, "
                          f"spills {res.spill_store_bytes}/{res.spill_load_bytes}", flush=True)
    for name, M, K, N, batch, pro in EXTRA:
        why = _refusal(M, K, N, batch, pro)
        if why is None:
            src = prepare_function(schedule(M, K, N, "float16", batch, pro).func).emitted.source
            why = f"loopir supported ({len(src)} chars of CUDA)"
        print(f"{name}: {why}", flush=True)
    return 0


def _refusal(M: int, K: int, N: int, batch: int, prologue: bool = False) -> str | None:
    """Why loopir cannot run the case (None: it can)."""
    try:
        schedule(M, K, N, "float16", batch, prologue)
    except ScheduleError as e:
        return f"loopir skipped: {e.message}"
    return None


def _triton_matmul() -> Any:
    """``c = a @ b`` with ``tl.dot``, autotuned over 4 configurations (None without Triton)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    configs = [
        triton.Config({"BM": 128, "BN": 256, "BK": 64, "G": 8}, num_stages=3, num_warps=8),
        triton.Config({"BM": 128, "BN": 128, "BK": 64, "G": 8}, num_stages=4, num_warps=4),
        triton.Config({"BM": 128, "BN": 128, "BK": 32, "G": 8}, num_stages=4, num_warps=4),
        triton.Config({"BM": 64, "BN": 128, "BK": 32, "G": 8}, num_stages=4, num_warps=4),
    ]

    @triton.autotune(configs=configs, key=["M", "N", "K", "RELU"])
    @triton.jit
    def kernel(a_ptr, b_ptr, c_ptr, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,  # type: ignore[no-untyped-def]
               RELU: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr):  # fmt: skip
        pid = tl.program_id(0)
        batch = tl.program_id(1)
        num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = pid // (G * num_n)
        first_m = group * G
        size_m = min(num_m - first_m, G)
        pm = first_m + (pid % size_m)
        pn = (pid % (G * num_n)) // size_m
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a_ptrs = a_ptr + batch * sab + rm[:, None] * sam + rk[None, :] * sak
        b_ptrs = b_ptr + batch * sbb + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            kk = k * BK + rk
            a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
            if RELU:
                a = tl.maximum(a, 0.0).to(a.dtype)
            b = tl.load(b_ptrs, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
            a_ptrs += BK * sak
            b_ptrs += BK * sbk
        c_ptrs = c_ptr + batch * scb + rm[:, None] * scm + rn[None, :] * scn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

    def matmul(a: Any, b: Any, c: Any, relu: bool = False) -> Any:
        a3, b3, c3 = (x if x.dim() == 3 else x.unsqueeze(0) for x in (a, b, c))
        B, M, K = a3.shape
        N = b3.shape[2]

        def grid(meta: dict[str, int]) -> tuple[int, int]:
            return (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]), B)

        kernel[grid](a3, b3, c3, M, N, K, a3.stride(0), a3.stride(1), a3.stride(2), b3.stride(0),
                     b3.stride(1), b3.stride(2), c3.stride(0), c3.stride(1), c3.stride(2), relu)  # fmt: skip
        return c

    return matmul


def _err(got: Any, ref: Any) -> float:
    return float((got.float() - ref).abs().max() / ref.abs().max())


#: per worker process: the random operands and the float32 reference of each tuned GEMM
_OPERANDS: dict[tuple[int, int, int, str], tuple[Any, Any, Any]] = {}


class TorchGemmRunner:
    """``loopir.tune``'s runner for ``hopper_gemm_space`` (``--tune``): the farm's runner process
    checks each loaded build against torch on the GPU (``A @ B.T`` in float32 from random
    operands, max error over the largest ``|C|`` below ``tol``; the CPU executor would take
    minutes at these sizes), then times it through ``mod()`` with CUDA events, as every
    implementation here. A build that fails the check raises ``LoopIRError``: tune drops it."""

    def __init__(self, M: int, K: int, N: int, dtype: str, tol: float, calls: int, repeat: int) -> None:
        self.shape, self.dtype, self.tol, self.calls, self.repeat = (M, K, N), dtype, tol, calls, repeat

    def measure_module(self, func: Any, mod: Any) -> float:
        import torch

        from loopir.errors import LoopIRError

        M, K, N = self.shape
        key = (M, K, N, self.dtype)
        if key not in _OPERANDS:
            _OPERANDS.clear()
            gen = torch.Generator(device="cuda").manual_seed(1)
            a, bt = (torch.randn(*s, device="cuda", dtype=getattr(torch, self.dtype), generator=gen)
                     for s in ((M, K), (N, K)))  # fmt: skip
            _OPERANDS[key] = (a, bt, a.float() @ bt.float().T)
        a, bt, ref = _OPERANDS[key]
        c = torch.full((M, N), float("nan"), device="cuda", dtype=a.dtype)
        mod(a, bt, c)
        torch.cuda.synchronize()
        err = _err(c, ref)
        if not err < self.tol:
            raise LoopIRError(f"TorchGemmRunner: {M}x{K}x{N} {self.dtype}: max error {err} >= {self.tol}")
        return float(events_per_call(torch, lambda: mod(a, bt, c), self.calls, self.repeat, warmup=3))


def tune_hopper(M: int, K: int, N: int, dtype: str, args: argparse.Namespace, farm: Any) -> Any:
    """``loopir.tune`` over ``hopper_gemm_space`` at one shape (``--tune`` trials), its
    candidates built by ``farm``'s builders and measured by ``TorchGemmRunner``."""
    from loopir.examples.tensor_core import hopper_gemm_space
    from loopir.tune import tune

    func = tc_gemm_func(M, K, N, dtype, b_trans=True, out_dtype=dtype)
    runner = TorchGemmRunner(M, K, N, dtype, args.tol, args.calls, args.repeat)
    return tune(func, hopper_gemm_space, target="cuda", trials=args.tune, population=min(8, args.tune), seed=0,
                farm=farm, runner=runner, show_progress=False)  # fmt: skip


def run_case(torch: Any, args: argparse.Namespace, name: str, flops: float, ref: Any,
             impls: dict[str, tuple[Any, Any]]) -> dict[str, Any]:  # fmt: skip
    """Check then time each ``label: (fn, out)``; TFLOP/s and ratios to loopir."""
    row: dict[str, Any] = {"case": name, "flops": flops}
    for label, (fn, out) in impls.items():
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = _err(out, ref)
        if not err < args.tol:
            raise AssertionError(f"{name} {label}: max error {err} >= {args.tol} of the largest |C|")
        ms = events_per_call(torch, fn, args.calls, args.repeat, warmup=3)
        row[label] = {"ms": ms, "TFLOP/s": flops / ms / 1e9, "err": err}
    line = "  ".join(f"{k} {v['ms']:.3f} ms {v['TFLOP/s']:.0f} TFLOP/s" for k, v in row.items()
                     if isinstance(v, dict))  # fmt: skip
    for ours in ("loopir", "loopir_wgmma", "loopir_tuned"):
        base = row.get(ours, {}).get("ms")
        if base:
            for k, v in list(row.items()):
                if isinstance(v, dict) and not k.startswith("loopir"):
                    row[f"{ours}_vs_{k}"] = v["ms"] / base  # > 1: loopir is faster
            line += "  " + "  ".join(f"{ours}/{k[len(ours) + 4:]} {v:.2f}x" for k, v in row.items()
                                     if k.startswith(f"{ours}_vs_"))  # fmt: skip
    print(f"{name}: {line}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--tol", type=float, default=1e-2, help="max error over the largest |C|")
    ap.add_argument("--smoke", action="store_true", help="build the loopir modules only (no GPU)")
    ap.add_argument("--arch", default="sm_90a", help="nvcc architecture of --smoke")
    ap.add_argument("--params", type=json.loads, default=None,
                    help="JSON of tc_gemm parameters replacing PARAMS (block, warp, stages, ...)")
    ap.add_argument("--hopper", type=json.loads, default=None,
                    help="JSON of hopper_gemm parameters replacing HOPPER (block, wn, stages; the form left "
                         "to hopper_gemm's default unless given: tma, warp_specialized, persistent, raster)")
    ap.add_argument("--only-main", action="store_true", help="the main GEMM shapes only")
    ap.add_argument("--shapes", default=None, help="comma-separated MxKxN of the main shapes to run (default: all)")
    ap.add_argument("--fused", action="store_true", help="also GEMM + bias + GELU (wgmma form, sm_90) vs torch")
    ap.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                    help="sm_90: also loopir_tuned, loopir.tune over hopper_gemm_space at each main shape "
                         "(TRIALS candidates, built in parallel by a local farm)")
    ap.add_argument("--builders", type=int, default=None, help="--tune: the farm's compile processes (default: cores)")
    args = ap.parse_args(argv)
    if args.params:
        PARAMS.update({k: tuple(v) if isinstance(v, list) else v for k, v in args.params.items()})
    if args.hopper:
        HOPPER.update({k: tuple(v) if isinstance(v, list) else v for k, v in args.hopper.items()})
    if args.smoke:
        return smoke(args.arch)

    import torch

    out: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "command": " ".join(sys.argv), "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "params": {k: list(v) if isinstance(v, tuple) else v for k, v in PARAMS.items()},
        "hopper": {k: list(v) if isinstance(v, tuple) else v for k, v in HOPPER.items()}, "cases": [],
    }  # fmt: skip
    triton_mm = _triton_matmul()
    gen = torch.Generator(device="cuda").manual_seed(0)
    shapes = SHAPES if args.shapes is None else [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    farm, tuned = None, {}
    if args.tune and torch.cuda.get_device_capability() == (9, 0):
        from loopir.tune.farm import local_farm

        farm = local_farm("cuda", builders=args.builders)
    for dtype in DTYPES:
        tdt = getattr(torch, dtype)
        for M, K, N in shapes:
            a = torch.randn(M, K, device="cuda", dtype=tdt, generator=gen)
            b = torch.randn(K, N, device="cuda", dtype=tdt, generator=gen)
            ref = a.float() @ b.float()
            mod = loopir.build(schedule(M, K, N, dtype).func, target="cuda")
            cl = torch.empty(M, N, device="cuda", dtype=tdt)
            c = torch.empty(M, N, device="cuda", dtype=tdt)
            impls = {"loopir": (lambda mod=mod, a=a, b=b, cl=cl: mod(a, b, cl), cl),
                     "torch": (lambda a=a, b=b, c=c: torch.matmul(a, b, out=c), c)}  # fmt: skip
            if torch.cuda.get_device_capability() == (9, 0):
                bt = b.T.contiguous()  # hopper_gemm reads B as [N, K]
                hmod = loopir.build(hopper_gemm(M, K, N, dtype, **HOPPER, out_dtype=dtype).func, target="cuda")
                ch = torch.empty(M, N, device="cuda", dtype=tdt)
                impls["loopir_wgmma"] = (lambda hmod=hmod, a=a, bt=bt, ch=ch: hmod(a, bt, ch), ch)
                if farm is not None:
                    res = tune_hopper(M, K, N, dtype, args, farm)
                    tuned[f"{dtype} {M}x{K}x{N}"] = {"ms_in_tune": res.ms, "measured": len(res.measured),
                                                     "dropped": res.dropped, "trace": str(res.trace)}  # fmt: skip
                    print(f"tuned {dtype} {M}x{K}x{N}: {res.ms:.3f} ms, {len(res.measured)} measured, "
                          f"{res.dropped} dropped, decisions {res.trace.decisions}", flush=True)
                    tmod = loopir.build(res.func, target="cuda")
                    cu = torch.empty(M, N, device="cuda", dtype=tdt)
                    impls["loopir_tuned"] = (lambda tmod=tmod, a=a, bt=bt, cu=cu: tmod(a, bt, cu), cu)
            if triton_mm is not None:
                ct = torch.empty(M, N, device="cuda", dtype=tdt)
                impls["triton"] = (lambda a=a, b=b, ct=ct: triton_mm(a, b, ct), ct)
            row = run_case(torch, args, f"{dtype} {M}x{K}x{N}", 2.0 * M * N * K, ref, impls)
            out["cases"].append(dict(row, tuned=tuned.get(f"{dtype} {M}x{K}x{N}")) if tuned else row)
            del a, b, c, cl, ref
    if farm is not None:
        farm.close()
    if args.fused and torch.cuda.get_device_capability() == (9, 0):
        for dtype in DTYPES:
            out["cases"].append(run_fused(torch, args, 4096, 4096, 4096, dtype))
    for name, M, K, N, batch, pro in [] if args.only_main else EXTRA:
        shape = (batch, M, K) if batch > 1 else (M, K)
        a = torch.randn(*shape, device="cuda", dtype=torch.float16, generator=gen)
        b = torch.randn(*((batch, K, N) if batch > 1 else (K, N)), device="cuda", dtype=torch.float16, generator=gen)
        ref = (a.float().relu() if pro else a.float()) @ b.float()
        c = torch.empty(ref.shape, device="cuda", dtype=torch.float16)
        impls: dict[str, tuple[Any, Any]] = {}
        why = _refusal(M, K, N, batch, pro)
        if why is None:
            mod = loopir.build(schedule(M, K, N, "float16", batch, pro).func, target="cuda")
            cl = torch.empty_like(c)
            impls["loopir"] = (lambda mod=mod, a=a, b=b, cl=cl: mod(a, b, cl), cl)
        # what loopir.build does with no schedule (CUTLASS, or the default GPU schedule: tensor
        # cores now, CUDA cores before this issue and with the tensor-core rule turned off)
        dmod = loopir.build(default_func(M, K, N, "float16", batch, pro), target="cuda")
        cd = torch.empty_like(c)
        impls["loopir_default"] = (lambda dmod=dmod, a=a, b=b, cd=cd: dmod(a, b, cd), cd)
        with loopir.PassContext(config={"cuda.default_schedule.tensor_cores": False}):
            fmod = loopir.build(default_func(M, K, N, "float16", batch, pro), target="cuda")
        cf = torch.empty_like(c)
        impls["loopir_default_cuda_cores"] = (lambda fmod=fmod, a=a, b=b, cf=cf: fmod(a, b, cf), cf)
        if pro:
            impls["torch"] = (lambda a=a, b=b, c=c: torch.matmul(torch.relu(a), b, out=c), c)
        else:
            impls["torch"] = (lambda a=a, b=b, c=c: torch.matmul(a, b, out=c), c)
        if triton_mm is not None:
            ct = torch.empty_like(c)
            impls["triton"] = (lambda a=a, b=b, ct=ct, pro=pro: triton_mm(a, b, ct, pro), ct)
        row = run_case(torch, args, name, 2.0 * batch * M * N * K, ref, impls)
        cutlass = "cutlass" in str(getattr(dmod, "source", "")).lower()
        row["loopir_default_is"] = "CUTLASS" if cutlass else "the default GPU schedule"
        if why is not None:
            row["loopir"] = why
            print(f"  {why}")
        out["cases"].append(row)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
