"""The GPU half of ``conv_sweep.py``: correctness, timing, bandwidth, the table, ncu's one call."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conv import SHAPES, conv_spec, problem_of  # noqa: E402
from conv_sweep import TOL, gemm_equivalent, traffic_bytes  # noqa: E402
from timing import events_per_call, graph_per_call, rel_err  # noqa: E402

from loopir.codegen_cuda.cutlass.emit import KernelSpec  # noqa: E402
from loopir.testing.conv import ConvSpec  # noqa: E402


def _setup_torch() -> Any:
    """torch with its primary context current (CUTLASS's libraries share it), cuDNN tuned."""
    import torch

    from loopir.codegen_cuda.cutlass.library import ensure_context

    torch.zeros(1, device="cuda")
    ensure_context()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    return torch


def _tensors(torch: Any, sp: ConvSpec) -> dict[str, Any]:
    """Random NHWC input, KRSC filter (channels_last NCHW views of one memory) and the output."""
    tdt = getattr(torch, sp.dtype)
    gen = torch.Generator(device="cuda").manual_seed(34)
    x = torch.rand(sp.n, sp.c, sp.h, sp.w, device="cuda", generator=gen).sub_(0.5).to(tdt)
    x = x.contiguous(memory_format=torch.channels_last)
    w = torch.rand(sp.k, sp.c, sp.r, sp.s, device="cuda", generator=gen).sub_(0.5).to(tdt)
    w = w.contiguous(memory_format=torch.channels_last)
    p, q = sp.output_hw()
    d = torch.empty(sp.n, p, q, sp.k, device="cuda", dtype=tdt)
    kw = dict(stride=sp.stride, padding=sp.r // 2)
    return {"x": x, "w": w, "d": d, "kw": kw}


def _bind(spec: KernelSpec, lib: Any, t: dict[str, Any], prob: Any) -> Any:
    """``spec``'s entry point bound to the tensors (a GEMM spec: the conv's equivalent GEMM)."""
    from loopir.codegen_cuda.cutlass.runtime import entry_dims

    if not spec.is_conv:
        prob = gemm_equivalent(prob)
    return lib.bind(spec.entry, t["x"].data_ptr(), t["w"].data_ptr(), t["d"].data_ptr(), *entry_dims(prob))


def _bandwidth(torch: Any, nbytes: int, d_bytes: int, args: Any) -> dict[str, float]:
    """The device's copy bandwidth (``copy_`` of ``nbytes / 2``: ``nbytes`` moved) and its write
    bandwidth (``zero_`` of ``d_bytes``), GB/s."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    out = torch.empty(d_bytes, dtype=torch.uint8, device="cuda")
    copy_ms = events_per_call(torch, lambda: dst.copy_(src), args.calls, args.repeat, warmup=5)
    write_ms = events_per_call(torch, out.zero_, args.calls, args.repeat, warmup=5)
    return {"copy_GBps": nbytes / copy_ms / 1e6, "write_GBps": d_bytes / write_ms / 1e6,
            "copy_ms": copy_ms, "write_ms": write_ms}  # fmt: skip


def _cudnn(torch: Any, t: dict[str, Any], args: Any) -> tuple[float, list[str]]:
    """cuDNN's milliseconds per conv (``args.calls`` captured in a CUDA graph) and its kernels."""
    import torch.nn.functional as F

    def op() -> Any:
        return F.conv2d(t["x"], t["w"], **t["kw"])

    ms = graph_per_call(torch, op, args.calls, args.repeat)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            op()
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
    except Exception as exc:  # the names are a convenience (ncu names them too)
        names = [f"(torch.profiler failed: {exc})"]
    return ms, names


def _candidate_row(torch: Any, spec: KernelSpec, lib: Any, t: dict[str, Any], ref: Any, prob: Any,
                   dtype: str, args: Any) -> dict[str, Any]:  # fmt: skip
    """One configuration: its error against float64, then (if right) its time."""
    from loopir.codegen_cuda.cutlass.runtime import time_ms

    c = spec.candidate
    row: dict[str, Any] = {"dtype": dtype, "kernel": c.short, "kind": "conv" if c.is_conv else "gemm",
                           "tile": list(c.tile), "cluster": list(c.cluster),
                           "stages": c.stages, "epilogue": c.epilogue_schedule.rsplit("::", 1)[-1]}  # fmt: skip
    if lib is None:
        return {**row, "error": "did not compile"}
    try:
        run = _bind(spec, lib, t, prob)
        t["d"].fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        d = t["d"]
        row["rel_err"] = err = rel_err(d, ref) if bool(torch.isfinite(d).all()) else float("inf")
        if not err < TOL[dtype]:
            return {**row, "error": f"wrong: rel err {err:.3e}"}
        row["ms"] = time_ms(run, warmup=3, repeat=args.repeat, inner=args.calls)
    except Exception as exc:  # a configuration that cannot run this shape is reported
        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return row


def _sweep_dtype(torch: Any, dtype: str, specs: list[KernelSpec], lib_of: dict[str, Any], args: Any,
                 results: dict[str, Any], dump: Any) -> None:  # fmt: skip
    """cuDNN, then every configuration of ``dtype``, rows appended to ``results`` as they come."""
    import torch.nn.functional as F

    sp = conv_spec(SHAPES[args.shape], dtype, "plain")
    prob = problem_of(sp, "plain")
    t = _tensors(torch, sp)
    ref = F.conv2d(t["x"].double(), t["w"].double(), **t["kw"]).permute(0, 2, 3, 1)
    cudnn_ms, names = _cudnn(torch, t, args)
    results["cudnn_kernels"][dtype] = names
    results["rows"].append({"dtype": dtype, "kernel": "cudnn", "ms": cudnn_ms,
                            "rel_err": rel_err(F.conv2d(t["x"], t["w"], **t["kw"]).permute(0, 2, 3, 1), ref)})  # fmt: skip
    for spec in specs:
        row = _candidate_row(torch, spec, lib_of.get(spec.entry), t, ref, prob, dtype, args)
        results["rows"].append(row)
        print(f"  {dtype:8s} {row['kernel']:90s} " + (f"{row['ms'] * 1e3:7.2f} us" if "ms" in row else row["error"]),
              flush=True)  # fmt: skip
        dump()


def _annotate(results: dict[str, Any]) -> None:
    """Each row's bandwidth, fraction of copy bandwidth and ratio to cuDNN of its dtype; the
    fastest configuration of each dtype (``results["best"]``), and of each kind (conv or GEMM
    kernel: ``results["best_by_kind"]``)."""
    nbytes, copy = results["bytes"], results["bandwidth"]["copy_GBps"]
    cudnn = {r["dtype"]: r["ms"] for r in results["rows"] if r["kernel"] == "cudnn"}
    for r in results["rows"]:
        if "ms" in r:
            r["GBps"] = nbytes / r["ms"] / 1e6
            r["frac_copy"] = r["GBps"] / copy
            r["vs_cudnn"] = cudnn[r["dtype"]] / r["ms"] if r["dtype"] in cudnn else None
    results["best"], results["best_by_kind"] = {}, {"conv": {}, "gemm": {}}
    for r in sorted((r for r in results["rows"] if "ms" in r and r["kernel"] != "cudnn"), key=lambda r: -r["ms"]):
        results["best"][r["dtype"]] = r["kernel"]
        results["best_by_kind"][r.get("kind", "conv")][r["dtype"]] = r["kernel"]


def table(results: dict[str, Any]) -> str:
    """The rows sorted by time (per dtype), failures last, with the bytes and bandwidths."""
    bw = results["bandwidth"]
    lines = [f"{results['shape']}: {results['bytes'] / 1e6:.1f} MB moved at least "
             f"(input {results['bytes_in'] / 1e6:.1f} MB + filter + output {results['bytes_out'] / 1e6:.1f} MB); "
             f"copy_ {bw['copy_GBps']:.0f} GB/s -> floor {results['bytes'] / bw['copy_GBps'] / 1e3:.2f} us; "
             f"write-only {bw['write_GBps']:.0f} GB/s"]  # fmt: skip
    for dtype in sorted({r["dtype"] for r in results["rows"]}):
        rows = [r for r in results["rows"] if r["dtype"] == dtype]
        ok = sorted((r for r in rows if "ms" in r), key=lambda r: r["ms"])
        lines.append(f"\n{dtype}: {len(ok)} timed, {len(rows) - len(ok)} failed")
        lines.append(f"{'us':>8s} {'x cudnn':>8s} {'GB/s':>6s} {'copy%':>6s} {'err':>8s}  kernel")
        for r in ok:
            lines.append(f"{r['ms'] * 1e3:8.2f} {r.get('vs_cudnn') or 0:8.3f} {r['GBps']:6.0f} "
                         f"{100 * r['frac_copy']:5.1f}% {r.get('rel_err', 0):8.1e}  {r['kernel']}")  # fmt: skip
        lines += [f"{'-':>8s} {'':8s} {'':6s} {'':6s} {'':8s}  {r['kernel']}: {r['error']}" for r in rows if "ms" not in r]
    return "\n".join(lines)


def run_sweep(args: Any, specs: dict[str, list[KernelSpec]], lib_of: dict[str, Any], results: dict[str, Any]) -> int:
    """Time every configuration of every dtype next to cuDNN; write the JSON and the table.

    Returns
    -------
    int
        0, or 1 when a configuration computed a wrong result.
    """
    torch = _setup_torch()
    prob = problem_of(conv_spec(SHAPES[args.shape], "float16", "plain"), "plain")
    nbytes = traffic_bytes(prob)
    d_bytes = 2 * prob.batch * prob.p * prob.q * prob.kout
    results.update(gpu=torch.cuda.get_device_name(0), torch=torch.__version__, cudnn=torch.backends.cudnn.version(),
                   bytes=nbytes, bytes_out=d_bytes, bytes_in=2 * prob.batch * prob.h * prob.w * prob.c,
                   bandwidth=_bandwidth(torch, nbytes, d_bytes, args), rows=[], cudnn_kernels={})  # fmt: skip

    def dump() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1, default=str))

    for dtype, lst in specs.items():
        _sweep_dtype(torch, dtype, lst, lib_of, args, results, dump)
    _annotate(results)
    dump()
    text = table(results)
    print(text, flush=True)
    if args.table:
        Path(args.table).write_text(text + "\n")
    return 1 if any(str(r.get("error", "")).startswith("wrong") for r in results["rows"]) else 0


def merge(paths: list[str], out_json: str | None, out_table: str | None) -> int:
    """One table of several sweeps' JSONs (the first sweep's cuDNN and bandwidth rows)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    merged = dict(runs[0], rows=list(runs[0]["rows"]))
    for run in runs[1:]:
        merged["rows"] += [r for r in run["rows"] if r["kernel"] != "cudnn"]
    _annotate(merged)
    text = table(merged)
    print(text, flush=True)
    if out_json:
        Path(out_json).write_text(json.dumps(merged, indent=1, default=str))
    if out_table:
        Path(out_table).write_text(text + "\n")
    return 0


def profile_one(args: Any, dtype: str, spec: KernelSpec | None, lib: Any) -> int:
    """One call of ``spec`` (or of cuDNN when None) between cudaProfilerStart and Stop, after a
    warm-up outside it (for ``ncu --profile-from-start off``)."""
    import torch.nn.functional as F

    torch = _setup_torch()
    sp = conv_spec(SHAPES[args.shape], dtype, "plain")
    t = _tensors(torch, sp)
    if spec is not None:
        if lib is None:
            raise SystemExit(f"{spec.candidate.short} did not compile")
        run = _bind(spec, lib, t, problem_of(sp, "plain"))
    else:
        def run() -> None:
            F.conv2d(t["x"], t["w"], **t["kw"])
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"profiled one call of {spec.candidate.short if spec else 'cudnn'} ({dtype})", flush=True)
    return 0
