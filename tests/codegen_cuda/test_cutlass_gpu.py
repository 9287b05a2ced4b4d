"""CUTLASS GEMMs on the GPU: numerical checks against a float64 reference.

Each layout (NN, NT, TN on sm90; TT and NT on the sm80 2.x path), each epilogue (none,
alpha, bias + ReLU, GELU + source with alpha/beta, SiLU + bias), fp16/bf16/TF32/fp16->fp32,
batched and not, plus the end-to-end route te -> GemmOffload -> loopir.build(target="cuda").

The kernels are the configurations the benchmark uses by default (chosen at 4096^3), run here
on shapes that are not multiples of the tiles, so partial tiles and the K remainder are
exercised too.

``python tests/codegen_cuda/test_cutlass_gpu.py --precompile`` compiles every kernel these
tests (and, with ``--bench``, benchmarks/gemm.py) need, one translation unit each in parallel,
into the cache (``$LOOPIR_CACHE_DIR``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("cutlass_library")

from loopir.codegen_cuda.cutlass.emit import KernelSpec  # noqa: E402
from loopir.codegen_cuda.cutlass.enumerate import default_candidate  # noqa: E402
from loopir.codegen_cuda.cutlass.problem import EpilogueSpec, GemmProblem  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

M, N, K = 320, 264, 200

# id, arch, layout, dtype of A/B, dtype of D, epilogue, batch counts
CASES = [
    ("nn_f16_plain", 90, "NN", "float16", "float16", EpilogueSpec(), (1, 3)),
    ("nn_f16_bias_relu", 90, "NN", "float16", "float16", EpilogueSpec("relu", has_bias=True), (1,)),
    ("nn_bf16_plain", 90, "NN", "bfloat16", "bfloat16", EpilogueSpec(), (2,)),
    ("nn_bf16_bias_relu", 90, "NN", "bfloat16", "bfloat16", EpilogueSpec("relu", has_bias=True), (1,)),
    ("nt_f16_gelu_source", 90, "NT", "float16", "float16",
     EpilogueSpec("gelu", alpha=0.5, beta=2.0, has_source=True), (1, 2)),
    ("tn_bf16_silu_bias", 90, "TN", "bfloat16", "bfloat16", EpilogueSpec("silu", has_bias=True), (1,)),
    ("nn_tf32_alpha", 90, "NN", "float32", "float32", EpilogueSpec(alpha=1.5), (1,)),
    ("nt_f16_to_f32", 90, "NT", "float16", "float32", EpilogueSpec(), (3,)),
    ("tt_f16_bias_relu_sm80", 80, "TT", "float16", "float16", EpilogueSpec("relu", has_bias=True), (1, 2)),
    ("nt_bf16_gelu_source_sm80", 80, "NT", "bfloat16", "bfloat16",
     EpilogueSpec("gelu", beta=0.5, has_source=True), (1,)),
]  # fmt: skip

TOL = {"float16": 3e-3, "bfloat16": 1.2e-2, "float32": 3e-3}


def problem(case: tuple, batch: int, m: int = M, n: int = N, k: int = K) -> GemmProblem:
    _, _, layout, dab, dd, epi, _ = case
    return GemmProblem(
        m, n, k, dab, dd, "row" if layout[0] == "N" else "col",
        "row" if layout[1] == "N" else "col", batch, epi,
    )  # fmt: skip


def candidate(case: tuple):
    return default_candidate(problem(case, 1, 4096, 4096, 4096), case[1])


def gpu_test_specs() -> list[KernelSpec]:
    """Every kernel these tests run (for --precompile)."""
    out = []
    for case in CASES:
        p = problem(case, 1)
        out.append(KernelSpec.make(p.dtype_ab, p.dtype_d, p.epilogue, candidate(case)))
    return out


def _to_host(x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(array to pass, its exact float64 value) with ``x`` rounded to ``dtype``."""
    from loopir.codegen_cuda.cutlass.runtime import numpy_to_bits

    bits = numpy_to_bits(x, dtype)
    if dtype == "bfloat16":
        exact = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    elif dtype == "float32":
        exact = bits.astype(np.float64)
    else:
        exact = bits.astype(np.float64)
    return bits, exact


def _from_host(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def _act(x: np.ndarray, name: str) -> np.ndarray:
    from math import erf

    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "gelu":
        return 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))
    if name == "silu":
        return x / (1.0 + np.exp(-x))
    return x


def _tf32(x: np.ndarray) -> np.ndarray:
    """Truncate fp32 values to TF32's 10-bit mantissa (bounds the reference's own error)."""
    return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_cutlass_gemm_matches_float64_reference(case: tuple) -> None:
    from loopir.codegen_cuda.cutlass.runtime import CutlassGemm

    for batch in case[6]:
        p = problem(case, batch)
        g = CutlassGemm(p, arch=case[1], candidate=candidate(case))
        shapes = g.shapes()
        rng = np.random.default_rng(batch * 101 + len(case[0]))
        a, a64 = _to_host(rng.uniform(-1, 1, shapes["A"]).astype(np.float32), p.dtype_ab)
        b, b64 = _to_host(rng.uniform(-1, 1, shapes["B"]).astype(np.float32), p.dtype_ab)
        s, s64 = _to_host(rng.uniform(-1, 1, shapes["source"]).astype(np.float32), p.dtype_d)
        bias, bias64 = _to_host(rng.uniform(-1, 1, shapes["bias"]).astype(np.float32), p.dtype_d)
        d = np.zeros_like(_to_host(np.zeros(shapes["D"], np.float32), p.dtype_d)[0])
        epi = p.epilogue
        g(a, b, d, source=s if epi.has_source else None, bias=bias if epi.has_bias else None)
        # reference in float64 on the rounded inputs, user's layouts
        am = np.swapaxes(a64, -1, -2) if p.layout_a == "col" else a64
        bm = np.swapaxes(b64, -1, -2) if p.layout_b == "col" else b64
        if p.dtype_ab == "float32":
            am, bm = _tf32(am), _tf32(bm)
        acc = epi.alpha * (am @ bm)
        if epi.has_source:
            acc = acc + epi.beta * s64
        if epi.has_bias:
            acc = acc + bias64
        ref = _act(acc, epi.activation)
        got = _from_host(d, p.dtype_d)
        scale = np.abs(ref).max()
        err = np.abs(got - ref).max() / scale
        assert scale > 0.5, "degenerate reference"
        assert err < TOL[p.dtype_d], f"{case[0]} batch={batch}: relative max error {err:.3e}"


def test_device_arrays_are_used_in_place_and_errors_are_raised() -> None:
    torch = pytest.importorskip("torch")
    from loopir.codegen_cuda.cutlass.runtime import CutlassGemm
    from loopir.errors import LaunchError

    case = CASES[1]
    p = problem(case, 1)
    g = CutlassGemm(p, candidate=candidate(case))
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    bias = torch.randn(N, device="cuda", dtype=torch.float16)
    d = torch.empty(M, N, device="cuda", dtype=torch.float16)
    g(a, b, d, bias=bias)
    torch.cuda.synchronize()
    ref = torch.relu(a.double() @ b.double() + bias.double())
    assert ((d.double() - ref).abs().max() / ref.abs().max()).item() < TOL["float16"]
    with pytest.raises(LaunchError, match="parameter A is not contiguous"):
        g(a.t().contiguous().t(), b, d, bias=bias)
    with pytest.raises(LaunchError, match="needs a bias"):
        g(a, b, d)
    with pytest.raises(LaunchError, match="parameter B has dtype float32"):
        g(a, b.float(), d, bias=bias)
    # bad extents are refused by the entry point before anything is launched
    with pytest.raises(LaunchError, match="returned 6"):
        g.library.call(g.spec.entry, a.data_ptr(), b.data_ptr(), d.data_ptr(), 0, N, K, 1,
                       bias=bias.data_ptr())
    assert g.benchmark(a, b, d, bias=bias, warmup=1, repeat=3) > 0


def stream_k_candidate():
    """The fp16 NN stream-K kernel of the benchmark's tuning set (compiled once for both)."""
    from loopir.codegen_cuda.cutlass.enumerate import enumerate_candidates, rank_candidates

    p = GemmProblem(1024, 4096, 16384, "float16", "float16")
    return next(c for c in rank_candidates(p, enumerate_candidates(p, 90))
                if "StreamK" in c.tile_scheduler and c.tile[:2] == (128, 256) and c.cluster == (2, 1, 1))


def test_stream_k_is_right_on_every_repeated_launch() -> None:
    """Stream-K keeps barrier counters in its workspace: a second launch on the same arguments
    (no re-initialize) must re-zero them, else it deadlocks or sums stale partials."""
    torch = pytest.importorskip("torch")
    from loopir.codegen_cuda.cutlass.runtime import CutlassGemm

    m, n, k = 1024, 1024, 8192  # 32 output tiles for 132 SMs: the K loops are split
    p = GemmProblem(m, n, k, "float16", "float16")
    g = CutlassGemm(p, candidate=stream_k_candidate())
    gen = torch.Generator(device="cuda").manual_seed(3)
    a = torch.rand(m, k, device="cuda", generator=gen).sub_(0.5).half()
    b = torch.rand(k, n, device="cuda", generator=gen).sub_(0.5).half()
    d = torch.empty(m, n, device="cuda", dtype=torch.float16)
    ref = a.double() @ b.double()
    for i in range(3):
        d.fill_(float("nan"))
        g(a, b, d)
        torch.cuda.synchronize()
        err = ((d.double() - ref).abs().max() / ref.abs().max()).item()
        assert err < TOL["float16"], f"launch {i}: relative max error {err:.3e}"


def test_end_to_end_build_offloads_and_lists_library_calls() -> None:
    import loopir
    from loopir import te

    m = n = k = 2048
    A = te.placeholder((m, k), "float16", name="A")
    B = te.placeholder((k, n), "float16", name="B")
    bias = te.placeholder((n,), "float16", name="bias")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r), name="C")
    D = te.compute((m, n), lambda i, j: te.max(C[i, j] + bias[j].astype("float32"), 0.0).astype("float16"), name="D")
    func = te.create_prim_func([A, B, bias, D])
    mod = loopir.build(func, target="cuda")
    (call,) = mod.library_calls
    assert call["block"] == "C" and call["fused"] == ("D",)
    assert call["kernel"].startswith("loopir_cutlass_sm90_f16_")
    assert call["config"]["tile"] and call["cutlass_kernel"].startswith("cutlass3x_sm90")
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    bv = rng.uniform(-1, 1, (n,)).astype(np.float16)
    d = np.zeros((m, n), np.float16)
    mod(a, b, bv, d)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bv.astype(np.float64), 0.0)
    err = np.abs(d.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err < TOL["float16"], err


def _precompile(argv: list[str]) -> int:
    import argparse
    import importlib.util
    import os

    from loopir.codegen_cuda.cutlass.tune import compile_candidates

    ap = argparse.ArgumentParser()
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--bench", nargs=2, type=int, metavar=("PLAIN", "FUSED"),
                    help="also the benchmark's kernels with these candidate counts")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    specs = gpu_test_specs()
    if args.bench:
        path = Path(__file__).resolve().parents[2] / "benchmarks" / "gemm.py"
        spec = importlib.util.spec_from_file_location("bench_gemm", path)
        mod = importlib.util.module_from_spec(spec)
        assert spec.loader is not None
        spec.loader.exec_module(mod)
        for dtype in ("float16", "bfloat16"):
            specs += mod.family_specs(dtype, mod.PLAIN, args.bench[0])[0]
            specs += mod.family_specs(dtype, mod.FUSED, args.bench[1])[0]
    specs.append(KernelSpec.make("float16", "float16", EpilogueSpec(), stream_k_candidate()))
    unique: list[Any] = []
    for s in specs:
        if s not in unique:
            unique.append(s)
    # sm90 units take 2-3x longer than sm80 ones: start them first so the short ones fill in
    unique.sort(key=lambda s: -s.candidate.arch)
    libs, wall, unit = compile_candidates(unique, workers=args.workers)
    hits = sum(1 for lib in libs if lib is not None and lib.cache_hit)
    failed = [s.candidate.short for s, lib in zip(unique, libs) if lib is None]
    print(f"precompile: {len(unique)} units, {args.workers} workers, wall {wall:.1f} s, "
          f"{hits} cache hits, unit times {[round(u, 1) for u in unit]}, failed {failed}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    raise SystemExit(_precompile(sys.argv[1:]))
