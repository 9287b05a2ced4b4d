"""TVM's compile time (no nvcc) on the DietCode dense schedule: run it under a TVM venv's Python.

The reference row of ``benchmarks/compile_time.py --tvm PYTHON``; standalone, TVM is never a
loopir dependency::

    python3 -m venv /work/tvm-venv
    /work/tvm-venv/bin/pip install apache-tvm==0.27.0.post1 numpy
    /work/tvm-venv/bin/python benchmarks/tvm_dietcode.py [--repeat 5] [--source out.cu]

It builds ``C = A @ B`` (fp32, 960x770x2304 by default) with ``te.create_prim_func`` and
applies, primitive for primitive, the schedule of ``loopir.examples.dense`` (the DietCode
sample tiles: i split [None, 1, 8, 8, 2], j [None, 2, 32, 1, 2], k [None, 1, 4], 256 threads,
a local accumulator, shared A and B tiles fetched 4-wide by all threads, the init decomposed
at k0). TVM 0.27 has no local padding (``tir.enable_local_pad`` was never upstreamed), so its
kernel keeps the predicates of the non-divisible tiles.

Phases, each timed with ``time.perf_counter`` (median of ``--repeat`` runs after one
warm-up, every run from a fresh function):

schedule
    ``te.create_prim_func`` and the schedule primitives (``tvm.s_tir.Schedule``);
lower
    what ``tvm.tirx.build`` does before code generation: ``BindTarget``, the default TIR
    pipeline for CUDA (``s_tir``), the host/device split and the finalization passes;
emit
    ``target.build.cuda`` (CUDA source) and the host module (``target.build.llvm``, as
    ``tvm.tirx.build`` does), with ``tvm_callback_cuda_compile`` replaced by a function that
    returns the source instead of running nvcc or NVRTC.

Prints one JSON object: ``{"tvm": version, "shape": ..., "repeat": n, "schedule_ms": ...,
"lower_ms": ..., "emit_ms": ..., "total_ms": ..., "source_chars": ...}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

I_TILES = (1, 8, 8, 2)
J_TILES = (2, 32, 1, 2)
K_TILES = (1, 4)
VEC = 4


def dense_func(tvm: Any, M: int, K: int, N: int) -> Any:
    """``C[M, N] = A[M, K] @ B[K, N]`` in fp32, as ``loopir.examples.dense_func`` builds it."""
    from tvm import te

    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def dietcode_schedule(tvm: Any, M: int, K: int, N: int) -> Any:
    """The schedule of ``loopir.examples.dense(M, K, N)`` (vec 4, one stage) in TVM TensorIR."""
    from tvm import s_tir

    threads = I_TILES[1] * J_TILES[1]
    sch = s_tir.Schedule(dense_func(tvm, M, K, N))
    c = sch.get_sblock("C") if hasattr(sch, "get_sblock") else sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1, i2, i3, i4 = sch.split(i, [None, *I_TILES])
    j0, j1, j2, j3, j4 = sch.split(j, [None, *J_TILES])
    k0, k1, k2 = sch.split(k, [None, *K_TILES])
    sch.reorder(i0, j0, i1, j1, i2, j2, k0, k1, i3, j3, k2, i4, j4)
    bx = sch.fuse(i0, j0)
    sch.bind(bx, "blockIdx.x")
    vx = sch.fuse(i1, j1)
    sch.bind(vx, "vthread.x")
    tx = sch.fuse(i2, j2)
    sch.bind(tx, "threadIdx.x")
    c_local = sch.cache_write(c, 0, "local")  # C is the block's write buffer 0
    sch.reverse_compute_at(c_local, tx)
    for index in (0, 1):  # A and B: the block's read buffers 0 and 1
        shared = sch.cache_read(c, index, "shared")
        sch.compute_at(shared, k0, preserve_unit_loops=True)
        copy_loops = sch.get_loops(shared)[4:]  # below bx, vx, tx, k0
        fused = sch.fuse(*copy_loops)
        _, t, v = sch.split(fused, [None, threads, VEC])
        sch.bind(t, "threadIdx.x")
        sch.vectorize(v)
    sch.decompose_reduction(c, k0)
    return sch.mod


def _build_module() -> Any:
    """The module ``tvm.tirx.build`` (the package's attribute of that name is the function)."""
    import importlib

    return importlib.import_module("tvm.tirx.build")


def lower(tvm: Any, mod: Any, target: Any) -> tuple[Any, Any]:
    """``tvm.tirx.build`` up to code generation: (host module, {target: device module})."""
    tb = _build_module()
    mod = tvm.tirx.transform.BindTarget(target)(mod)
    pipeline, finalize_host, finalize_device = tvm.tirx.get_default_tir_pipeline(target)
    mod = pipeline(mod)
    host, devices = tb.split_host_device_mods(mod)
    host = finalize_host()(host)
    devices = {t: finalize_device()(m) for t, m in devices.items()}
    return host, devices


def emit(tvm: Any, host: Any, devices: dict[Any, Any], target: Any) -> str:
    """``tvm.tirx.build``'s code generation (CUDA source, host module); returns the CUDA source."""
    tb = _build_module()
    sources = [tb.codegen_build(m, t) for t, m in devices.items() if len(m.functions)]
    tb.codegen_build(host, target.host)
    return "".join(m.inspect_source() for m in sources)


def source_only_callback(tvm: Any) -> None:
    """Make ``target.build.cuda`` return the source without compiling it (no nvcc, no NVRTC)."""

    def compile_nothing(code: str, *_: Any) -> bytes:
        return code.encode()

    tvm.register_global_func("tvm_callback_cuda_compile", compile_nothing, override=True)


def run_once(tvm: Any, shape: tuple[int, int, int], target: Any) -> tuple[dict[str, float], str]:
    t0 = time.perf_counter()
    mod = dietcode_schedule(tvm, *shape)
    t1 = time.perf_counter()
    host, devices = lower(tvm, mod, target)
    t2 = time.perf_counter()
    source = emit(tvm, host, devices, target)
    t3 = time.perf_counter()
    times = {"schedule_ms": t1 - t0, "lower_ms": t2 - t1, "emit_ms": t3 - t2, "total_ms": t3 - t0}
    return {k: v * 1e3 for k, v in times.items()}, source


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5, help="timed runs per phase (median)")
    p.add_argument("--shape", default="960x770x2304", help="MxKxN")
    p.add_argument("--arch", default="sm_90a", help="the CUDA target's arch")
    p.add_argument("--source", default=None, help="write the generated CUDA source here")
    args = p.parse_args(argv)
    try:
        import tvm
        import tvm.s_tir  # noqa: F401  (TensorIR schedules live here since TVM 0.22)
        import tvm.tirx  # noqa: F401
    except ImportError as exc:
        print(f"tvm_dietcode: TVM with tvm.s_tir / tvm.tirx is not importable here "
              f"({sys.executable}): {exc}", file=sys.stderr)  # fmt: skip
        return 2
    shape = tuple(int(x) for x in args.shape.lower().split("x"))
    if len(shape) != 3:
        p.error(f"--shape must be MxKxN, got {args.shape!r}")
    source_only_callback(tvm)
    host = "llvm" if tvm.runtime.enabled("llvm") else "c"
    target = tvm.target.Target({"kind": "cuda", "arch": args.arch}, host=host)
    run_once(tvm, shape, target)  # warm-up
    runs = []
    source = ""
    for _ in range(max(1, args.repeat)):
        times, source = run_once(tvm, shape, target)  # type: ignore[arg-type]
        runs.append(times)
    if "__global__" not in source:
        print("tvm_dietcode: no CUDA kernel in the generated source", file=sys.stderr)
        return 1
    if args.source:
        with open(args.source, "w", encoding="utf-8") as f:
            f.write(source)
    out: dict[str, Any] = {
        "tvm": tvm.__version__, "shape": "x".join(map(str, shape)), "repeat": len(runs),
        "target": str(target.kind.name) + " " + args.arch, "host": host,
        "source_chars": len(source),
    }  # fmt: skip
    for key in runs[0]:
        out[key] = statistics.median(r[key] for r in runs)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
