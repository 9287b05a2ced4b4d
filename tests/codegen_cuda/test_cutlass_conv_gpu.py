"""CUTLASS convolutions on the GPU: te conv2d -> GemmOffload -> ``loopir.build(target="cuda")``,
called through ``mod()`` on random data and compared with the CPU executor (the same te
function, generated code) and a float64 reference.

The shapes are small and not multiples of the tiles (partial tiles in M = N*P*Q and in K), with
padding, strides, dilations, every filter layout, every epilogue and each element type, on the
sm90 (3.x) kernels and, for two cases, the sm80 (2.x) ones. Each family is one IRModule: one
library with each CUTLASS configuration instantiated once, its units compiled in parallel.

``python tests/codegen_cuda/test_cutlass_conv_gpu.py`` runs the first case once (what
``compute-sanitizer --tool memcheck`` is pointed at); with ``--precompile`` it builds every
module the tests use into the cache and stops (no GPU needed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("cutlass_library")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loopir.testing.conv import ConvSpec, conv2d, conv2d_reference  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

CASES = {
    "f16_3x3_bias_relu": ConvSpec(n=3, h=13, w=11, c=24, k=40, activation="relu", bias=True),
    "bf16_3x3_s2_kcrs_residual_gelu": ConvSpec(n=2, h=15, w=15, c=32, k=24, stride=(2, 2), layout="KCRS",
                                               dtype="bfloat16", activation="gelu", residual=True,
                                               alpha=0.5, beta=2.0),
    "f16_1x1_s2_rsck_bias_silu": ConvSpec(n=2, h=14, w=14, c=16, k=72, r=1, s=1, pad=None, stride=(2, 2),
                                          layout="RSCK", activation="silu", bias=True),
    "f16_dilated_asymmetric_to_f32": ConvSpec(n=2, h=12, w=10, c=8, k=16, dilation=(2, 2),
                                              pad=(2, 1, 0, 3), out="float32"),
    "f16_7x7_s2_stem_bias_relu": ConvSpec(n=2, h=30, w=30, c=8, k=32, r=7, s=7, pad=(3, 3, 3, 3),
                                          stride=(2, 2), activation="relu", bias=True),
    "tf32_3x3_bias": ConvSpec(n=2, h=9, w=9, c=20, k=12, dtype="float32", bias=True),
    "f16_3x3_s2_bias_and_residual_relu": ConvSpec(n=2, h=11, w=11, c=16, k=32, stride=(2, 2),
                                                  activation="relu", bias=True, residual=True),
}  # fmt: skip
SM80 = ("f16_3x3_bias_relu", "bf16_3x3_s2_kcrs_residual_gelu", "f16_1x1_s2_rsck_bias_silu")
REPEAT = ConvSpec(n=2, h=10, w=10, c=16, k=32, layout="KCRS", activation="relu", bias=True)

# max |got - ref| / max |ref| against float64 (the output's rounding included)
TOL = {"float16": 4e-3, "bfloat16": 2e-2, "float32": 5e-3}


def _round(x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(numpy array to pass -- bf16 as uint16 bits -- and its exact float64 value)."""
    from loopir.codegen_cuda.cutlass.runtime import numpy_to_bits

    bits = numpy_to_bits(x, dtype)
    if dtype == "bfloat16":
        return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return bits, bits.astype(np.float64)


def _as_float64(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def _tf32(x: np.ndarray) -> np.ndarray:
    """fp32 values with TF32's 10-bit mantissa (what the tensor cores read)."""
    return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def _inputs(sp: ConvSpec, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], str]:
    """Random parameters (rounded to their types), their float64 values and the output's type."""
    rng = np.random.default_rng(seed)
    shapes = sp.shapes()
    out_name = list(shapes)[-1]
    out_dtype = sp.acc if out_name == "Y" else (sp.out or sp.dtype)
    host, exact = {}, {}
    for name, shape in shapes.items():
        dtype = sp.dtype if name in ("X", "Wt") else out_dtype
        host[name], exact[name] = _round(rng.uniform(-1, 1, shape).astype(np.float32), dtype)
    return host, exact, out_dtype


def _reference(sp: ConvSpec, exact: dict[str, np.ndarray]) -> np.ndarray:
    x, w = exact["X"], exact["Wt"]
    if sp.dtype == "float32":
        x, w = _tf32(x), _tf32(w)
    return conv2d_reference(sp, x, w, exact.get("bias"), exact.get("S"))


def build_all(arch: int) -> Any:
    """One library for the cases on ``arch`` (and the repeated-call case on sm90)."""
    import os

    import loopir
    from loopir.passes.context import PassContext

    names = list(CASES) if arch == 90 else list(SM80)
    funcs = {name: conv2d(CASES[name]) for name in names}
    if arch == 90:
        funcs["repeat"] = conv2d(REPEAT)
    config = {"cuda.gemm_allow_tf32": True, "cuda.cutlass_arch": arch}
    with PassContext(config=config):
        return loopir.build(loopir.IRModule(funcs), target="cuda", strategy="units",
                            workers=os.cpu_count() or 1)  # fmt: skip


@pytest.fixture(scope="module")
def modules() -> dict[int, Any]:
    return {90: build_all(90), 80: build_all(80)}


def _err(got: np.ndarray, ref: np.ndarray) -> float:
    assert np.isfinite(got).all(), "non-finite output (an element left unwritten?)"
    return float(np.abs(got - ref).max() / np.abs(ref).max())


CASE_ARCHS = [(name, 90) for name in CASES] + [(name, 80) for name in SM80]


@pytest.mark.parametrize("name, arch", CASE_ARCHS, ids=[f"{n}-sm{a}" for n, a in CASE_ARCHS])
def test_conv_matches_cpu_executor_and_float64(name: str, arch: int, modules: dict[int, Any]) -> None:
    import loopir

    sp = CASES[name]
    mod = modules[arch][name]
    (call,) = mod.library_calls
    assert call["block"] == "Y" and call["kernel"].startswith(f"loopir_cutlass_conv_sm{arch}_")
    host, exact, out_dtype = _inputs(sp, seed=len(name))
    out_name = list(host)[-1]
    ref = _reference(sp, exact)
    gpu = dict(host)
    gpu[out_name] = np.full_like(host[out_name], 0x7FFF if out_dtype == "bfloat16" else np.nan)  # poison
    mod(*gpu.values())
    got = _as_float64(gpu[out_name], out_dtype)
    assert _err(got, ref) < TOL[sp.dtype], f"{name}: vs float64 {_err(got, ref):.3e}"
    # the CPU executor runs the generated code of the same te function
    cpu = dict(host)
    cpu[out_name] = np.zeros_like(host[out_name])
    loopir.build(conv2d(sp), target="cpu")(*cpu.values())
    want = _as_float64(cpu[out_name], out_dtype)
    if sp.dtype != "float32":  # the executor multiplies fp32 exactly, the tensor cores in TF32
        assert _err(got, want) < TOL[sp.dtype], f"{name}: vs CPU executor {_err(got, want):.3e}"
    assert _err(want, ref) < TOL[sp.dtype]


def test_repeated_calls_see_new_filters_and_inputs(modules: dict[int, Any]) -> None:
    """One module, two calls on the same torch tensors with new values in place: the KCRS filter
    is permuted again and the kernel's cached arguments are reused correctly."""
    torch = pytest.importorskip("torch")
    sp = REPEAT
    mod = modules[90]["repeat"]
    shapes = sp.shapes()
    tensors = {k: torch.empty(v, device="cuda", dtype=torch.float16) for k, v in shapes.items()}
    for seed in (1, 2):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        for name in ("X", "Wt", "bias"):
            tensors[name].copy_(torch.rand(shapes[name], device="cuda", generator=gen) * 2 - 1)
        tensors["D"].fill_(float("nan"))
        mod(*tensors.values())
        torch.cuda.synchronize()
        ref = conv2d_reference(sp, *(tensors[k].double().cpu().numpy() for k in ("X", "Wt", "bias")))
        got = tensors["D"].double().cpu().numpy()
        assert _err(got, ref) < TOL["float16"], f"call {seed}"


if __name__ == "__main__":
    if "--precompile" in sys.argv:  # build every module these tests use into the cache (no GPU)
        build_all(90)
        build_all(80)
        sys.exit(0)
    sp = CASES["f16_3x3_bias_relu"]
    host, exact, _ = _inputs(sp, seed=0)
    mod = build_all(90)["f16_3x3_bias_relu"]
    mod(*host.values())
    print("ok", _err(host["D"].astype(np.float64), _reference(sp, exact)))
