"""loopir.testing: random inputs, check_equivalent, workloads, and the import contract."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import loopir
from loopir import te
from loopir.errors import LoopIRError
from loopir.testing import (
    EquivalenceError,
    assert_outputs_equal,
    check_equivalent,
    random_inputs,
    run_cpu,
)
from loopir.testing import workloads as W


def test_import_does_not_need_hypothesis() -> None:
    code = (
        "import sys, loopir.testing, loopir.testing.fuzz, loopir.testing.workloads\n"
        "assert 'hypothesis' not in sys.modules, 'loopir.testing imported hypothesis'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", list(W.WORKLOADS))
def test_every_workload_builds_runs_and_matches_itself(name: str) -> None:
    w = W.make_workload(name)
    loopir.verify(w.func)
    inputs = random_inputs(w.func, w.sizes, seed=1)
    for x in inputs:
        assert (x != 0).all()  # never zero: zeros hide indexing bugs
    # Against its lowered form: a second, independent build (comparing a function with
    # itself checks nothing but determinism).
    lowered = loopir.lower(w.func)
    assert not loopir.structural_equal(lowered, w.func)
    check_equivalent(w.func, lowered, sizes=w.sizes)
    out = run_cpu(w.func, inputs)
    assert all(np.isfinite(a).all() for a in out)
    # The reproducer text really rebuilds the same workload.
    again = eval(w.source, {"loopir": loopir})  # noqa: S307 - our own text
    loopir.assert_structural_equal(w.func, again.func)


def test_matmul_reference_values() -> None:
    w = W.matmul(4, 3, 5)
    a, b, c = random_inputs(w.func, seed=2)
    _, _, got = run_cpu(w.func, [a, b, c])
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5)
    bm = W.batch_matmul(2, 3, 4, 2)
    a, b, c = random_inputs(bm.func, seed=3)
    np.testing.assert_allclose(run_cpu(bm.func, [a, b, c])[2], np.matmul(a, b), rtol=1e-5)
    r = W.reduce_min(3, 4)
    a, s = random_inputs(r.func, seed=4)
    np.testing.assert_allclose(run_cpu(r.func, [a, s])[1], (2 * a).min(axis=1) + 1, rtol=1e-6)


def test_check_equivalent_reports_first_difference() -> None:
    w = W.matmul(4, 3, 5)
    A = te.placeholder((4, 3), "float32", name="A")
    B = te.placeholder((3, 5), "float32", name="B")
    k = te.reduce_axis(3, name="k")
    C = te.compute(
        (4, 5), lambda i, j: te.sum(A[i, k] * B[k, j] + te.if_then_else(
            te.all(i == 2, j == 3), te.const(1.0, "float32"), te.const(0.0, "float32")), axis=k),
        name="C",
    )  # fmt: skip
    wrong = te.create_prim_func([A, B, C])
    with pytest.raises(EquivalenceError, match=r"parameter C differs at index \(2, 3\).*1 of 20"):
        check_equivalent(w.func, wrong)
    with pytest.raises(EquivalenceError, match=r"signatures differ: 3 parameters \(A, B, C\) vs 2 \("):
        check_equivalent(w.func, W.reduce_max().func)


def test_symbolic_sizes_need_values() -> None:
    w = W.symbolic_matmul(5, 3, 2)
    with pytest.raises(LoopIRError, match="symbolic size 'n'.*sizes="):
        random_inputs(w.func)
    a, b, c = random_inputs(w.func, {"n": 5})
    assert a.shape == (5, 3) and c.shape == (5, 2)


def test_tolerances_by_dtype() -> None:
    w = W.elementwise_chain(2, 3, stages=1)
    x = [np.ones((2, 3), np.float32)] * 3
    y = [np.ones((2, 3), np.float32)] * 2 + [np.full((2, 3), 1 + 1e-6, np.float32)]
    assert_outputs_equal(w.func, x, y)  # within float32 tolerance
    y[2] = np.full((2, 3), 1.01, np.float32)
    with pytest.raises(EquivalenceError, match="6 of 6 elements differ"):
        assert_outputs_equal(w.func, x, y)
    assert_outputs_equal(w.func, x, y, rtol=0.1)
    with pytest.raises(EquivalenceError, match="has 3 parameters, got 2 and 3"):
        assert_outputs_equal(w.func, x[:2], y)


def test_unknown_workload() -> None:
    with pytest.raises(LoopIRError, match="unknown workload 'gemm'"):
        W.make_workload("gemm")
    with pytest.raises(LoopIRError, match="stages must be >= 1"):
        W.elementwise_chain(stages=0)


def test_normwise_comparison_tolerates_reordered_sums_but_not_errors() -> None:
    import numpy as np

    from loopir.testing import EquivalenceError, assert_outputs_equal
    from loopir.testing.workloads import matmul

    f = matmul(4, 3, 50).func
    rng = np.random.default_rng(0)
    x = [rng.random((4, 3), "float32"), rng.random((3, 50), "float32"), 40 + rng.random((4, 50), "float32")]
    x[2][0, 0] = 1e-6  # an output that cancelled to ~0: no relative precision left
    y = [a.copy() for a in x]
    y[2][0, 0] = 3e-5  # what another order of additions leaves there
    with pytest.raises(EquivalenceError, match=r"parameter C differs at index \(0, 0\)"):
        assert_outputs_equal(f, x, y)
    assert_outputs_equal(f, x, y, norm=True)
    y[2][1] += 1.0  # a wrong row
    with pytest.raises(EquivalenceError, match=r"parameter C: relative \(Frobenius\) error"):
        assert_outputs_equal(f, x, y, norm=True)
    y[2][1] = x[2][1]
    y[2][2, 2] = np.nan
    with pytest.raises(EquivalenceError, match="Frobenius"):
        assert_outputs_equal(f, x, y, norm=True)


def test_check_gemm_passes_a_gemm_and_fails_a_wrong_or_unwritten_one() -> None:
    from loopir.testing import check_gemm

    mod = loopir.build(W.matmul(33, 9, 70).func, target="cpu")
    assert check_gemm(mod, 33, 9, 70, seed=3) < 1e-6

    def product(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        c[...] = a @ b

    def one_unwritten(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        c[1:] = (a @ b)[1:]  # row 0 keeps the NaN it started with

    def one_wrong(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        c[...] = a @ b
        c[5, 5] += 1.0

    assert check_gemm(product, 33, 9, 70) < 1e-6
    with pytest.raises(EquivalenceError, match=r"33x9x70 GEMM's relative \(Frobenius\) error is nan"):
        check_gemm(one_unwritten, 33, 9, 70)
    with pytest.raises(EquivalenceError, match="> 1e-05"):
        check_gemm(one_wrong, 33, 9, 70)
