"""LocalPadding stays sound for te reductions with casts and index-dependent factors (issue 28).

A padded (out-of-range) iteration computes with the reduction's identity instead of being
guarded away. Two classes of te expressions broke that:

1. a cast between the padded load and the reduction that changes the identity
   (``int32(int8(x))``: INT32_MIN through int8 is 0, so ``max`` sees 0);
2. a factor that depends only on the loop index and is defined on the real iterations but not
   on the padded ones (``A[i, k] * (1 / (K - k))`` is NaN, ``A[i, k] * (60 // (K - k))`` divides
   by zero at ``k == K``).

Each case is a te workload under the smallest schedule that pads (k split by 4, a local
accumulator at ``i``, A read into a local tile at ``k0``), lowered with padding on and off and run
on the CPU executor; the padded kernel must compute what the unpadded one and numpy compute,
and the report must say why a guard stays. Controls check that the same shapes stay padded
where the proof holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _passes_util import lower_with, run_cpu

import loopir
from loopir import te
from loopir.ir import Buffer, Evaluate, For, ForKind, PrimFunc, Var, op
from loopir.passes import LocalPadding, LocalPaddingReport, PassContext, default_pipeline
from loopir.passes.local_pad_values import undefined_reason

M, K = 3, 7  # K = 7 with k split by 4: k = 7 is the one padded iteration


def tiny_schedule(func: PrimFunc) -> PrimFunc:
    """Split k by 4, accumulate C locally at i, fetch A's row piece locally at k0."""
    sch = loopir.Schedule(func)
    blk = sch.get_block("C")
    i, k = sch.get_loops(blk)
    k0, _ = sch.split(k, [None, 4])
    cw = sch.cache_write(blk, "C", "local")
    sch.reverse_compute_at(cw, i)
    cr = sch.cache_read(blk, "A", "local")
    sch.compute_at(cr, k0)
    return sch.func


def workload(dtype: str, term: Callable[[Any, Any], Any], red: Callable[..., Any] = te.sum) -> PrimFunc:
    A = te.placeholder((M, K), dtype, name="A")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M,), lambda i: red(term(A[i, k], k), axis=k), name="C")
    return tiny_schedule(te.create_prim_func([A, C]))


def report(func: PrimFunc) -> LocalPaddingReport:
    with PassContext(config={"tir.enable_local_pad": True}):
        pipeline = default_pipeline(explain_local_pad=True)
        pipeline(func)
    rep = next(p.report for p in pipeline if isinstance(p, LocalPadding))
    assert rep is not None
    return rep


def one(rep: LocalPaddingReport, kind: str) -> Any:
    (c,) = [c for c in rep.candidates if c.kind == kind and c.buffer.startswith("A" if kind == "fetch" else "C")]
    return c


def run_both(func: PrimFunc, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out = np.zeros(M, func.params[-1].dtype)
    on = run_cpu(lower_with(func, pad=True), [a, out])[-1]
    off = run_cpu(lower_with(func, pad=False), [a, out])[-1]
    return on, off


# --- 1. casts between the padded load and a max/min ---------------------------------------------


NEG = -np.arange(1, M * K + 1, dtype=np.int32).reshape(M, K)  # every real value is negative


@pytest.mark.parametrize(
    "red,data,ref",
    [(te.max, NEG, lambda a: a.max(axis=1)), (te.min, -NEG, lambda a: a.min(axis=1))],
    ids=["max", "min"],
)
def test_narrowing_cast_around_a_max_min_operand_is_not_padded(red, data, ref) -> None:  # noqa: ANN001
    """``max(acc, int32(int8(A_local)))``: the pad INT32_MIN would reach the max as 0."""
    f = workload("int32", lambda a, k: a.astype("int8").astype("int32"), red)
    on, off = run_both(f, data)
    np.testing.assert_array_equal(off, ref(data))
    np.testing.assert_array_equal(on, off)
    rep = report(f)
    fetch = one(rep, "fetch")
    assert fetch.outcome == "refused" and "cast" in fetch.reason and "int8" in fetch.reason, str(rep)
    comp = one(rep, "compute")
    assert comp.outcome == "unchanged" and comp.pad_value is None, str(rep)


def test_widening_cast_around_a_max_operand_is_not_padded() -> None:
    """An int8 tile padded with -128 reaches an int32 max as -128, not INT32_MIN."""
    f = workload("int8", lambda a, k: a.astype("int32"), te.max)
    rep = report(f)
    fetch = one(rep, "fetch")
    assert fetch.outcome == "refused" and "-128" in fetch.reason, str(rep)
    data = (NEG % 100 - 100).astype(np.int8)
    on, off = run_both(f, data)
    np.testing.assert_array_equal(on, off)


def test_casts_that_keep_the_identity_still_pad() -> None:
    """A sum's 0 survives any integer cast and -inf survives a float cast: still padded."""
    f = workload("int32", lambda a, k: a.astype("int8").astype("int32"))
    comp = one(report(f), "compute")
    assert comp.outcome == "guard reduced", str(comp)
    on, off = run_both(f, NEG)
    np.testing.assert_array_equal(on, off)
    g = workload("float16", lambda a, k: a.astype("float32").astype("float16"), te.max)
    assert one(report(g), "fetch").outcome == "padded"
    comp = one(report(g), "compute")
    assert comp.outcome == "guard reduced", str(comp)
    data = (NEG / 8).astype(np.float16)
    on, off = run_both(g, data)
    np.testing.assert_array_equal(on, off)
    np.testing.assert_array_equal(off, data.max(axis=1))


# --- 2. factors that depend on the padded loop index ----------------------------------------------


def _kept_k_guard(rep: LocalPaddingReport, why: str) -> None:
    comp = one(rep, "compute")
    assert comp.outcome == "unchanged", str(rep)
    (k_guard,) = [c for c in comp.conjuncts if "< 7" in c.text]
    assert not k_guard.inlined and why in k_guard.reason, str(rep)
    assert "k_0 = 1, k_1 = 3" in k_guard.reason, str(rep)  # the padded iteration, named


def test_float_reciprocal_of_the_distance_to_the_end_keeps_the_guard() -> None:
    """``A[i, k] * (1 / (K - k))``: at the padded k = K the factor is inf and 0 * inf NaN."""
    f = workload("float32", lambda a, k: a * (1.0 / (K - k)))
    data = np.linspace(-1, 1, M * K, dtype=np.float32).reshape(M, K)
    on, off = run_both(f, data)
    want = (data.astype(np.float64) / (K - np.arange(K))).sum(axis=1)
    np.testing.assert_allclose(off, want, rtol=1e-5)
    np.testing.assert_array_equal(on, off)
    _kept_k_guard(report(f), "divides by zero")


def test_integer_division_by_the_distance_to_the_end_keeps_the_guard() -> None:
    """``A[i, k] * (60 // (K - k))``: at the padded k = K the division is by zero."""
    f = workload("int32", lambda a, k: a * (60 // (K - k)))
    on, off = run_both(f, NEG)  # the padded kernel used to stop with a division by zero
    np.testing.assert_array_equal(off, (NEG * (60 // (K - np.arange(K)))).sum(axis=1))
    np.testing.assert_array_equal(on, off)
    _kept_k_guard(report(f), "divides by zero")


def test_sqrt_out_of_its_domain_keeps_the_guard() -> None:
    """``A[i, k] * sqrt(K - 1 - k)``: the square root of -1 at the padded k = K is NaN."""
    f = workload("float32", lambda a, k: a * te.sqrt(te.cast(K - 1 - k, "float32")))
    data = np.linspace(-1, 1, M * K, dtype=np.float32).reshape(M, K)
    on, off = run_both(f, data)
    np.testing.assert_array_equal(on, off)
    _kept_k_guard(report(f), "not finite")


@pytest.mark.parametrize(
    "dtype,term",
    [
        ("float32", lambda a, k: a * (1.0 / (K + 1 - k))),  # K + 1 - k >= 1 up to the padded k = K
        ("int32", lambda a, k: a * (60 // (K + 1 - k))),
        ("float32", lambda a, k: a * te.sqrt(te.cast(K - k, "float32"))),
    ],
    ids=["reciprocal", "floordiv", "sqrt"],
)
def test_index_factors_defined_at_every_padded_iteration_still_pad(dtype: str, term) -> None:  # noqa: ANN001
    f = workload(dtype, term)
    comp = one(report(f), "compute")
    assert comp.outcome == "guard reduced" and all(c.inlined for c in comp.conjuncts), str(comp)
    data = NEG.astype(dtype)
    on, off = run_both(f, data)
    np.testing.assert_array_equal(on, off)


def test_division_by_loaded_data_keeps_the_guard() -> None:
    """``A[i, k] * (1 / B[i])``: nothing proves B[i] nonzero (0 * inf would be NaN)."""
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((M,), "float32", name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M,), lambda i: te.sum(A[i, k] * (1.0 / B[i]), axis=k), name="C")
    f = tiny_schedule(te.create_prim_func([A, B, C]))
    comp = one(report(f), "compute")
    assert comp.outcome == "unchanged", str(comp)
    (k_guard,) = [c for c in comp.conjuncts if "< 7" in c.text]
    assert "cannot prove" in k_guard.reason and "B[i]" in k_guard.reason, str(comp)
    a = np.ones((M, K), np.float32)
    b = np.array([0.0, 1.0, 2.0], np.float32)
    out = np.zeros(M, np.float32)
    on = run_cpu(lower_with(f, pad=True), [a, b, out])[-1]
    off = run_cpu(lower_with(f, pad=False), [a, b, out])[-1]
    np.testing.assert_array_equal(on, off)  # inf stays inf (no 0 * inf = NaN from a pad)


# --- the definedness proof, node by node -------------------------------------------------------------


def _defined_cases() -> list[tuple[str, Callable[..., Any], str]]:
    f32 = lambda x: op.cast(x, "float32")  # noqa: E731
    return [
        ("reciprocal ok", lambda k, n, b, b8: 1.0 / f32(8 - k), ""),
        ("reciprocal of 0", lambda k, n, b, b8: 1.0 / f32(7 - k), "divides by zero (at k = 7)"),
        ("guarded by select", lambda k, n, b, b8: op.if_then_else(k < 7, 1.0 / f32(7 - k), f32(0)), ""),
        ("guarded by and", lambda k, n, b, b8: op.all_(k < 7, 60 // (7 - k) > 1), ""),
        ("floordiv by 0", lambda k, n, b, b8: 60 // (7 - k), "divides by zero (at k = 7)"),
        ("floormod by 0", lambda k, n, b, b8: 60 % (k - 3), "divides by zero (at k = 3)"),
        ("symbolic divisor", lambda k, n, b, b8: k // n, "cannot prove the divisor n"),
        ("symbolic size + 1", lambda k, n, b, b8: k // (n + 1), ""),
        ("data divisor", lambda k, n, b, b8: 1.0 / b[k], "cannot prove the divisor B[k]"),
        ("constant divisor", lambda k, n, b, b8: b[k] / 0.5 + b[k] // f32(2), ""),
        ("exp overflows", lambda k, n, b, b8: op.exp(f32(k * 20)), "not finite or undefined (at k = 5)"),
        ("exp of data", lambda k, n, b, b8: op.exp(b[k]), "cannot prove that T.exp(B[k])"),
        ("log of 0", lambda k, n, b, b8: op.log(f32(k)), "not finite or undefined (at k = 0)"),
        ("log ok", lambda k, n, b, b8: op.log(f32(k + 1)) * op.sqrt(f32(k)), ""),
        ("lowest // -1", lambda k, n, b, b8: op.cast(b[k], "int32") // (k - 8), "may overflow"),
        ("int8 // -1", lambda k, n, b, b8: op.cast(b8[k], "int32") // (k - 8), ""),
        ("float to int overflow", lambda k, n, b, b8: op.cast(f32(k) * 1e10, "int32"), "not finite or undefined (at k = 1)"),
        ("float to int of data", lambda k, n, b, b8: op.cast(b[k], "int32"), "cannot prove that the cast"),
        ("narrowing float", lambda k, n, b, b8: op.cast(f32(k) * 1e30, "float16"), "not finite or undefined (at k = 1)"),
        ("total calls", lambda k, n, b, b8: op.tanh(b[k]) + op.fabs(b[k]), ""),
    ]


@pytest.mark.parametrize("name,build,why", _defined_cases(), ids=[c[0] for c in _defined_cases()])
def test_definedness_proof(name: str, build: Callable[..., Any], why: str) -> None:
    k, n = Var("k"), Var("n")
    b = Buffer("B", (8,), "int32" if name == "lowest // -1" else "float32")
    b8 = Buffer("B8", (8,), "int8")
    loop = For(k, 0, 8, ForKind.SERIAL, Evaluate(0))
    got = undefined_reason(build(k, n, b, b8), [], [loop], sizes=[n])
    assert (why in got) if why else got == "", got
