"""FastMath: exp, log and float division as the GPU's approximate instructions."""

from __future__ import annotations

import re

import numpy as np
import pytest

import loopir
from loopir import te
from loopir.codegen_cuda import emit_cuda
from loopir.examples.reductions import softmax_func
from loopir.ir.expr import Call, Div
from loopir.ir.functor import post_order_visit
from loopir.passes.fast_math import FAST_MATH_KEY, fast_math


def _ops(f) -> list[str]:
    found: list[str] = []

    def visit(n: object) -> None:
        if isinstance(n, Call):
            found.append(n.op)
        elif isinstance(n, Div):
            found.append("/")

    post_order_visit(f.body, visit)
    return sorted(found)


def _exp_log_div(n: int = 1024):
    X = te.placeholder((n,), "float32", name="X")
    D = te.placeholder((n,), "float64", name="D")
    Y = te.compute((n,), lambda i: te.exp(X[i]) + te.log(X[i] + 30.0) / (X[i] + 30.0), name="Y")
    Z = te.compute((n,), lambda i: te.exp(D[i]) / 3.0, name="Z")  # float64 stays exact
    return te.create_prim_func([X, D, Y, Z])


def test_off_by_default_and_unchanged_when_off() -> None:
    f = softmax_func(4, 64)
    assert fast_math(f, on=False) is f
    with loopir.PassContext():
        assert loopir.PassContext.current().get(FAST_MATH_KEY) is False
    assert "__expf" not in emit_cuda(loopir.lower(f, target="cuda")).source


def test_the_rewrite_before_and_after(golden) -> None:
    f = softmax_func(4, 64, "float16")
    golden("passes/fast_math_softmax", f"# before\n{f.script()}\n# after\n{fast_math(f).script()}")


def test_float32_ops_rewritten_float64_kept() -> None:
    f = fast_math(_exp_log_div())
    assert _ops(f) == ["/", "exp", "fast_div", "fast_exp", "fast_log"]


def test_block_annotation_turns_it_on_or_off_for_one_block() -> None:
    sch = loopir.Schedule(softmax_func(4, 64))
    sch.annotate(sch.get_block("S"), "loopir.fast_math", True)
    on_s = fast_math(sch.func, on=False)
    assert _ops(on_s).count("fast_exp") == 1 and _ops(on_s).count("exp") == 1
    sch2 = loopir.Schedule(softmax_func(4, 64))
    sch2.annotate(sch2.get_block("Y"), "loopir.fast_math", False)
    off_y = fast_math(sch2.func, on=True)
    assert _ops(off_y).count("fast_exp") == 1 and "/" in _ops(off_y)


def test_the_fast_forms_mean_the_exact_operations_on_the_cpu() -> None:
    f = _exp_log_div()
    loopir.testing.check_equivalent(f, fast_math(f), rtol=0, atol=0)
    g = softmax_func(5, 300, "float16")
    loopir.testing.check_equivalent(g, fast_math(g), rtol=0, atol=0)


def test_the_cuda_text_and_a_script_round_trip() -> None:
    with loopir.PassContext(config={FAST_MATH_KEY: True}):
        source = emit_cuda(loopir.lower(_exp_log_div(), target="cuda")).source
    assert "__expf(" in source and "__logf(" in source and "__fdividef(" in source
    assert "exp(D_v_0) / 3.0" in source  # float64: the exact exp and division
    with loopir.PassContext(config={FAST_MATH_KEY: True}):
        soft = emit_cuda(loopir.lower(softmax_func(4, 64), target="cuda")).source
    # exp(X - M): the subtraction folded into the ex2's scaling (one FFMA), not __expf(X - M)
    assert "loopir_ex2(fmaf(X[" in soft and "__expf" not in soft, soft
    X = te.placeholder((64,), "float16", name="X")
    silu = te.compute((64,), lambda i: (X[i].astype("float32") / (1.0 + te.exp(-X[i].astype("float32")))), name="Y")
    with loopir.PassContext(config={FAST_MATH_KEY: True}):
        text = emit_cuda(loopir.lower(te.create_prim_func([X, silu]), target="cuda")).source
    # exp(0 - x): one multiply into the ex2, no FFMA with a zero operand
    assert "loopir_ex2(-(((float)X[" in text and "fmaf(0.0f" not in text, text
    f = fast_math(softmax_func(4, 64))
    loopir.assert_structural_equal(loopir.script.from_source(f.script()), f)


@pytest.mark.nvcc
def test_fast_kernels_compile(tmp_path) -> None:
    from loopir.codegen_cuda.compile import compile_cuda

    with loopir.PassContext(config={FAST_MATH_KEY: True}):
        for f in (_exp_log_div(), softmax_func(8, 1024, "float16"), softmax_func(8, 1024, "bfloat16")):
            compile_cuda(emit_cuda(loopir.lower(f, target="cuda")).source, arch="sm_90a", cache_dir=tmp_path)


@pytest.mark.nvcc
def test_the_folded_exponential_is_one_ftz_ex2(tmp_path) -> None:
    """CUDA's ``exp2f`` is the non-``ftz`` ``ex2.approx.f32`` (a range fix-up around each MUFU
    in SASS); the fold prints ``loopir_ex2``, whose PTX is ``ex2.approx.ftz.f32`` only."""
    import shutil
    import subprocess

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    with loopir.PassContext(config={FAST_MATH_KEY: True}):
        src = emit_cuda(loopir.lower(softmax_func(8, 1024, "float16"), target="cuda")).source
    assert "loopir_ex2(fmaf(" in src and "exp2f" not in src
    cu, ptx = tmp_path / "softmax.cu", tmp_path / "softmax.ptx"
    cu.write_text(src)
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90a", "-O3", "-o", str(ptx), str(cu)], check=True, capture_output=True)
    ex2 = re.findall(r"\bex2\.[a-z0-9.]+", ptx.read_text())
    assert ex2 and set(ex2) == {"ex2.approx.ftz.f32"}, sorted(set(ex2))


@pytest.mark.gpu
def test_gpu_folded_exponentials_under_2_to_the_minus_126_flush_to_zero() -> None:
    """The documented flush of ``loopir_ex2``: ``exp(a c - b)`` below 2^-126 is 0 (``__expf``'s
    behaviour), just above it the 2-ulp result."""
    n = 4096
    b = np.linspace(80.0, 110.0, n).astype("float32")  # exp(-b): 2^-115 ... 2^-159
    x = np.full(n, 0.5, "float32")
    X, B = te.placeholder((n,), "float32", name="X"), te.placeholder((n,), "float32", name="B")
    F = te.compute((n,), lambda i: te.exp(X[i] * 0.5 - B[i]), name="F")
    with loopir.PassContext(config={FAST_MATH_KEY: True}):
        mod = loopir.build(te.create_prim_func([X, B, F]), target="cuda")
    assert "loopir_ex2(fmaf(" in mod.source
    f = np.full(n, np.nan, "float32")
    mod(x, b, f)
    exact = np.exp(0.25 - b.astype("float64"))
    tiny, normal = exact < 2.0**-126 * 0.99, exact > 2.0**-126 * 1.01  # clear of the boundary's rounding
    assert tiny.sum() > n // 2 and normal.sum() > n // 8
    assert (f[tiny] == 0).all(), f[tiny][:5]
    # above it the fold's documented bound: 2 ulp plus |a c| + |b| + |a c - b| ulp
    ulps = np.abs(f[normal] - exact[normal]) / np.spacing(exact[normal].astype("float32")).astype("float64")
    bd = b[normal].astype("float64")
    assert (ulps <= 2 + 0.25 + bd + np.abs(0.25 - bd) + 0.5).all(), ulps.max()


@pytest.mark.gpu
def test_gpu_results_within_the_documented_bounds() -> None:
    """``__expf``: 2 + floor(|1.173 x|) ulp; ``__logf``: 2^-21.41 absolute on [0.5, 2], 3 ulp
    elsewhere; ``__fdividef``: 2 ulp (float32 ulp of the exact result)."""
    n = 1 << 16
    rng = np.random.default_rng()
    x = rng.uniform(-40.0, 40.0, n).astype("float32")
    X = te.placeholder((n,), "float32", name="X")
    E = te.compute((n,), lambda i: te.exp(X[i]), name="E")
    L = te.compute((n,), lambda i: te.log(X[i] + 41.0), name="L")
    Q = te.compute((n,), lambda i: X[i] / (X[i] * X[i] + 1.5), name="Q")
    B = te.placeholder((n,), "float32", name="B")
    F = te.compute((n,), lambda i: te.exp(X[i] * 0.3 - B[i]), name="F")  # the ex2 fold
    N = te.compute((n,), lambda i: te.exp(-B[i]), name="N")  # exp(0 - b): the fold without its FFMA
    with loopir.PassContext(config={FAST_MATH_KEY: True}):
        mod = loopir.build(te.create_prim_func([X, B, E, L, Q, F, N]), target="cuda")
    # B is read straight (B[i]) or through the vector loads' registers (B_v_0)
    assert "__expf" in mod.source and "loopir_ex2(fmaf(" in mod.source and re.search(r"loopir_ex2\(-\(B(\[|_v_)", mod.source)
    b = rng.uniform(-20.0, 20.0, n).astype("float32")
    e, lg, q, fo, ne = (np.full(n, np.nan, "float32") for _ in range(5))
    mod(x, b, e, lg, q, fo, ne)
    xd = x.astype("float64")

    def ulps(got, exact):
        return np.abs(got.astype("float64") - exact) / np.spacing(np.abs(exact).astype("float32")).astype("float64")

    ok = ulps(e, np.exp(xd)) <= 2 + np.floor(np.abs(1.173 * xd)) + 0.5  # + the rounding of exp(x) itself
    assert ok.all(), x[~ok][:5]
    arg = (x + np.float32(41.0)).astype("float64")
    near = (arg >= 0.5) & (arg <= 2.0)
    lerr = np.abs(lg.astype("float64") - np.log(arg))
    assert (lerr[near] <= 2.0**-21.41).all()
    assert (ulps(lg, np.log(arg))[~near] <= 3.5).all()
    den = (xd * xd + 1.5).astype("float32").astype("float64")  # nvcc contracts x * x + 1.5 to one fma
    assert (ulps(q, xd / den) <= 2.5).all()
    # the fold: 2 ulp of ex2.approx, plus |a c| + |b| + |a c - b| ulp from rounding the argument
    ac, bd = (xd * np.float64(np.float32(0.3))), b.astype("float64")
    fold_ok = ulps(fo, np.exp(ac - bd)) <= 2 + np.abs(ac) + np.abs(bd) + np.abs(ac - bd) + 0.5
    assert fold_ok.all(), (x[~fold_ok][:5], b[~fold_ok][:5])
    neg_ok = ulps(ne, np.exp(-bd)) <= 2 + 2 * np.abs(bd) + 0.5
    assert neg_ok.all(), b[~neg_ok][:5]
