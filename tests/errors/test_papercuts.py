"""Papercuts a TVM user met trying loopir (issue 29, item 4): each error names what is wrong,
and the forms a user reaches for (a path, names, a bare ``import loopir``) work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import loopir
from loopir import te
from loopir.errors import IRValidationError, LaunchError, LoopIRError, ScheduleError, TraceError
from loopir.ir.functor import substitute
from loopir.testing import EquivalenceError, check_equivalent
from loopir.testing.workloads import matmul

ROOT = Path(__file__).resolve().parents[2]


def _fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter that imports this checkout's loopir."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)  # fmt: skip


# ---- te: a reduce variable used but not listed -----------------------------------------------


def _unlisted_reduce_var() -> tuple[te.Tensor, te.Tensor]:
    A = te.placeholder((8, 8), "float32", name="A")
    k, k2 = te.reduce_axis(8, name="k"), te.reduce_axis(8, name="k2")
    return A, te.compute((8,), lambda i: te.sum(A[i, k], axis=k2), name="C")


def test_create_prim_func_refuses_a_reduce_var_the_reduction_does_not_list() -> None:
    A, C = _unlisted_reduce_var()
    with pytest.raises(IRValidationError, match=r"compute 'C'.*reduce axis 'k'.*axis=\[k2\]"):
        te.create_prim_func([A, C])


def test_create_prim_func_refuses_a_reduce_var_outside_any_reduction() -> None:
    A = te.placeholder((8, 8), "float32", name="A")
    k = te.reduce_axis(8, name="k")
    B = te.compute((8,), lambda i: A[i, k] + 1.0, name="B")
    with pytest.raises(IRValidationError, match=r"compute 'B'.*reduce axis 'k'.*outside"):
        te.create_prim_func([A, B])
    kw, k2 = te.reduce_axis(8, name="kw"), te.reduce_axis(8, name="k2")
    D = te.compute((8,), lambda i: te.sum(A[i, k2], axis=k2, where=kw < 4), name="D")
    with pytest.raises(IRValidationError, match=r"compute 'D'.*reduce axis 'kw'"):
        te.create_prim_func([A, D])


def test_verify_sees_a_reduce_var_left_free_in_a_block() -> None:
    f = matmul(8, 6, 5).func
    block = next(n for n in _blocks(f) if n.name == "C")
    v_k = block.iter_vars[2].var
    free = te.reduce_axis(6, name="k")
    # the uses of v_k become a te reduce axis that nothing in the function defines
    g = substitute(f, {v_k: free})
    with pytest.raises(IRValidationError, match="variable 'k' is used but never defined"):
        loopir.verify(g)


def _blocks(f: loopir.PrimFunc) -> list[loopir.ir.stmt.Block]:
    from loopir.ir.functor import post_order_visit
    from loopir.ir.stmt import Block

    out: list[Block] = []
    post_order_visit(f.body, lambda n: out.append(n) if isinstance(n, Block) else None)
    return out


# ---- schedule primitives ------------------------------------------------------------------------


def test_decompose_reduction_twice_says_it_was_already_decomposed() -> None:
    sch = loopir.Schedule(matmul(16, 8, 12).func)
    b = sch.get_block("C")
    sch.decompose_reduction(b, sch.get_loops(b)[2])
    with pytest.raises(ScheduleError, match=r"decompose_reduction.*'C' was already decomposed.*'C_init'"):
        sch.decompose_reduction(b, sch.get_loops(b)[2])


def test_decompose_reduction_of_a_spatial_block_still_says_it_is_not_a_reduction() -> None:
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    sch = loopir.Schedule(te.create_prim_func([A, B]))
    b = sch.get_block("B")
    with pytest.raises(ScheduleError, match="'B' is not a reduction block"):
        sch.decompose_reduction(b, sch.get_loops(b)[0])


def test_reorder_of_loops_of_two_blocks_names_the_blocks() -> None:
    A = te.placeholder((8, 8), "float32", name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] * 2.0, name="C")
    sch = loopir.Schedule(te.create_prim_func([A, C]))
    ib = sch.get_loops(sch.get_block("B"))[0]
    ic = sch.get_loops(sch.get_block("C"))[0]
    with pytest.raises(ScheduleError, match=r"loops i \(of block 'B'\) and i \(of block 'C'\) are not in one chain"):
        sch.reorder(ib, ic)


# ---- check_equivalent -----------------------------------------------------------------------


def test_check_equivalent_names_the_parameter_whose_shape_differs() -> None:
    with pytest.raises(EquivalenceError, match=r"signatures differ: parameter 1 \(B\): shape \(8, 12\) vs \(8, 13\)"):
        check_equivalent(matmul(16, 8, 12).func, matmul(16, 8, 13).func)


def test_check_equivalent_names_the_parameter_whose_dtype_differs() -> None:
    def add_one(dtype: str) -> loopir.PrimFunc:
        A = te.placeholder((8,), dtype, name="A")
        return te.create_prim_func([A, te.compute((8,), lambda i: A[i] + 1.0, name="B")])

    with pytest.raises(EquivalenceError, match=r"signatures differ: parameter 0 \(A\): dtype float32 vs float16"):
        check_equivalent(add_one("float32"), add_one("float16"))


def test_check_equivalent_counts_parameters_with_their_names() -> None:
    A = te.placeholder((8,), "float32", name="A")
    f2 = te.create_prim_func([A, te.compute((8,), lambda i: A[i] + 1.0, name="B")])
    with pytest.raises(EquivalenceError, match=r"signatures differ: 3 parameters \(A, B, C\) vs 2 \(A, B\)"):
        check_equivalent(matmul(8, 6, 5).func, f2)


def test_check_equivalent_accepts_a_symbolic_signature_against_a_fixed_one() -> None:
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    sym = te.create_prim_func([A, te.compute((n,), lambda i: A[i] + 1.0, name="B")])
    A8 = te.placeholder((8,), "float32", name="A")
    fixed = te.create_prim_func([A8, te.compute((8,), lambda i: A8[i] + 1.0, name="B")])
    check_equivalent(fixed, sym)
    with pytest.raises(EquivalenceError, match=r"parameter 0 \(A\): shape \(8,\) vs \(9,\)"):
        check_equivalent(fixed, sym, sizes={"n": 9})


# ---- Trace.from_json ----------------------------------------------------------------------------


def _saved_trace() -> tuple[dict, loopir.PrimFunc]:
    sch = loopir.Schedule(matmul(16, 8, 12).func)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 4])
    return sch.trace.as_json(), sch.func


def test_trace_from_json_reads_a_path(tmp_path: Path) -> None:
    data, scheduled = _saved_trace()
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(data))
    for source in (path, str(path), json.dumps(data), data):
        tr = loopir.Trace.from_json(source)
        assert tr.as_json() == data
        sch = loopir.Schedule(matmul(16, 8, 12).func)
        tr.apply_to(sch)
        loopir.assert_structural_equal(sch.func, scheduled)


def test_trace_from_json_names_a_missing_or_bad_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(TraceError, match=r"Trace.from_json: no such file: .*nope\.json"):
        loopir.Trace.from_json(missing)
    with pytest.raises(TraceError, match=r"not valid JSON and not an existing file: '.*nope\.json'"):
        loopir.Trace.from_json(str(missing))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError, match=r"Trace.from_json: the file '.*bad\.json' is not valid JSON"):
        loopir.Trace.from_json(bad)
    with pytest.raises(TraceError, match="Trace.from_json: not valid JSON"):
        loopir.Trace.from_json("{not json")


# ---- modules called by parameter name -------------------------------------------------------


def _matmul_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((16, 8)).astype("float32"), rng.standard_normal((8, 12)).astype("float32"),
            np.zeros((16, 12), "float32"))  # fmt: skip


def test_cpu_module_takes_arrays_by_parameter_name() -> None:
    mod = loopir.build(matmul(16, 8, 12).func, target="cpu")
    a, b, c = _matmul_arrays()
    mod(C=c, B=b, A=a)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    c2 = np.zeros_like(c)
    mod(a, b, C=c2)
    np.testing.assert_array_equal(c2, c)


def test_cpu_module_refuses_wrong_names_naming_the_parameters() -> None:
    mod = loopir.build(matmul(16, 8, 12).func, target="cpu")
    a, b, c = _matmul_arrays()
    with pytest.raises(LaunchError, match=r"main: no parameter named 'X'; its parameters are A, B, C"):
        mod(A=a, B=b, X=c)
    with pytest.raises(LaunchError, match=r"main: parameter 'A' is given twice \(by position 0 and by name\)"):
        mod(a, b, A=c)
    with pytest.raises(LaunchError, match=r"main: no array for parameter C \(parameters: A, B, C\)"):
        mod(A=a, B=b)


def test_shape_dispatch_binds_names_before_reading_the_sizes() -> None:
    from loopir.runtime.dispatch import ShapeDispatch

    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    f = te.create_prim_func([A, te.compute((n,), lambda i: A[i] + 1.0, name="B")])
    calls: list[tuple[tuple, dict]] = []

    def small(*args, **kw):
        calls.append((args, kw))

    dispatch = ShapeDispatch(f, [({"n": (1, 8)}, small)], fallback=None)
    a, b = np.zeros(4, "float32"), np.zeros(4, "float32")
    dispatch(B=b, A=a, stream=7)
    assert calls[0][0][0] is a and calls[0][0][1] is b and calls[0][1] == {"stream": 7}


# ---- tune(database=path) -----------------------------------------------------------------------


def _space(sch: loopir.Schedule) -> None:
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=8))


def test_tune_takes_a_database_path_as_build_does(tmp_path: Path) -> None:
    from loopir.schedule.database import Database
    from loopir.tune import tune

    path = tmp_path / "db.jsonl"
    res = tune(matmul(16, 8, 12).func, _space, trials=2, seed=0, runner=lambda f: 1.0, database=str(path),
               show_progress=False)  # fmt: skip
    assert len(Database(path)) == 2
    tune(matmul(16, 8, 12).func, _space, trials=1, seed=1, runner=lambda f: 2.0, database=path,
         show_progress=False)  # fmt: skip
    assert len(Database(path)) == 3
    built = loopir.build(matmul(16, 8, 12).func, target="cpu", database=str(path))
    loopir.assert_structural_equal(built.func, res.func)


def test_tune_and_build_refuse_a_database_of_another_type() -> None:
    from loopir.tune import tune

    with pytest.raises(LoopIRError, match=r"tune: database must be a Database or the path of one, got int: 3"):
        tune(matmul(16, 8, 12).func, _space, trials=1, runner=lambda f: 1.0, database=3, show_progress=False)
    with pytest.raises(LoopIRError, match=r"build: database must be a Database or the path of one, got int: 3"):
        loopir.build(matmul(16, 8, 12).func, target="cpu", database=3)


# ---- a bare ``import loopir`` ------------------------------------------------------------------


def test_tune_is_an_attribute_of_loopir_and_cuda_passes_are_found_by_name() -> None:
    proc = _fresh_python(
        "import sys, loopir\n"
        "from loopir.testing.workloads import matmul\n"
        "assert 'loopir.tune' not in sys.modules and 'loopir.codegen_cuda' not in sys.modules\n"
        "print(loopir.tune.tune.__name__)\n"
        "f = loopir.Schedule(matmul(8, 6, 5).func).func\n"
        "print(type(loopir.lower(f, target='cuda')).__name__)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["tune", "PrimFunc"]


def test_an_unknown_target_still_lists_the_known_ones() -> None:
    with pytest.raises(LoopIRError, match=r"no passes are registered for target 'tpu' \(known: cpu, cuda"):
        loopir.lower(matmul(8, 6, 5).func, target="tpu")
