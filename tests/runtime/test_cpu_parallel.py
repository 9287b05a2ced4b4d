"""OpenMP in the CPU executor: parallel loops as ``omp parallel for``, vectorized loops as
``omp simd`` (issue 29 item 5), only where the iterations are proven independent, with the
sequential result and error."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopir
from loopir import arith, te
from loopir.errors import CodegenError, LaunchError, LoopIRError
from loopir.ir.buffer import Buffer, Range
from loopir.ir.expr import BufferLoad, Var
from loopir.ir.stmt import Block, BlockRealize, BufferStore, For, ForKind, PrimFunc, Stmt
from loopir.runtime import c_parallel
from loopir.runtime import cache as cpu_cache
from loopir.testing import check_equivalent, workloads

ROOT = Path(__file__).resolve().parents[2]


def matmul(m: int, k: int, n: int) -> PrimFunc:
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def cpu_matmul_schedule(func: PrimFunc, fi: int, vj: int, fuse: bool) -> loopir.Schedule:
    """Rows (or fused row tiles x column tiles) in parallel, the K loop inside, ``vj`` columns
    vectorized innermost."""
    sch = loopir.Schedule(func)
    blk = sch.get_block("C")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, fi])
    j0, j1 = sch.split(j, [None, vj])
    sch.reorder(i0, j0, i1, k, j1)
    sch.parallel(sch.fuse(i0, j0) if fuse else i0)
    sch.vectorize(j1)
    return sch


def pragma_lines(mod: object) -> list[str]:
    return [ln.strip() for ln in mod.source.splitlines() if ln.strip().startswith("#pragma omp")]  # type: ignore[attr-defined]


def test_parallel_and_vectorized_loops_emit_pragmas() -> None:
    sch = cpu_matmul_schedule(matmul(64, 16, 32), 8, 8, fuse=False)
    fast = loopir.build(sch.func, target="cpu", check_bounds=False)
    assert re.fullmatch(r"#pragma omp parallel num_threads\((team_\d+)\) if\(\1 > 1\)", pragma_lines(fast)[0])
    assert "#pragma omp for schedule(static)" in pragma_lines(fast)
    assert "#pragma omp simd if(lir_simd)" in pragma_lines(fast)
    assert fast.program.parallel and fast.program.simd
    assert "-fopenmp" in fast.compile_flags
    checked = loopir.build(sch.func, target="cpu")
    assert not any(p.startswith("#pragma omp simd") for p in pragma_lines(checked))
    assert "vectorized, run serially: bounds checks keep it scalar" in checked.source
    assert any(p.startswith("#pragma omp parallel") for p in pragma_lines(checked))
    plain = loopir.build(matmul(64, 16, 32), target="cpu")
    assert not pragma_lines(plain) and "-fopenmp" not in plain.compile_flags


def test_simd_alone_needs_no_openmp_runtime() -> None:
    sch = loopir.Schedule(matmul(8, 4, 16))
    _, j, _ = sch.get_loops(sch.get_block("C"))
    _, j1 = sch.split(j, [None, 8])
    sch.vectorize(j1)
    mod = loopir.build(sch.func, target="cpu", check_bounds=False)
    assert pragma_lines(mod) == ["#pragma omp simd if(lir_simd)"]
    assert "-fopenmp-simd" in mod.compile_flags and "-fopenmp" not in mod.compile_flags
    check_equivalent(matmul(8, 4, 16), sch.func, build_options={"check_bounds": False})


@given(m=st.integers(1, 40), k=st.integers(1, 9), n=st.integers(1, 40), fi=st.integers(1, 9),
       vj=st.sampled_from([1, 2, 4, 8]), fuse=st.booleans(), check=st.booleans(),
       threads=st.sampled_from([0, 2, 3]))  # fmt: skip
def test_parallel_vectorized_matmul_equals_unscheduled(
    m: int, k: int, n: int, fi: int, vj: int, fuse: bool, check: bool, threads: int
) -> None:
    func = matmul(m, k, n)
    sch = cpu_matmul_schedule(func, fi, vj, fuse)
    check_equivalent(func, sch.func, build_options={"check_bounds": check, "num_threads": threads})
    mod = loopir.build(sch.func, target="cpu", check_bounds=check)
    outer = sch.get(sch.get_loops(sch.get_block("C"))[0])
    assert mod.program.parallel == (outer.extent.value > 1)


# --- loops that must run serially ------------------------------------------------------------


def shared_sum(n: int) -> PrimFunc:
    """``for i in parallel(n): S[0] += A[i]``: every iteration updates one accumulator (a
    parallel loop that breaks its promise; the executor must still give the sequential sum)."""
    A, S = Buffer("A", (n,), "int32"), Buffer("S", (1,), "int32")
    i = Var("i")
    body = BufferStore(S, BufferLoad(S, (0,)) + BufferLoad(A, (i,)), (0,))
    return PrimFunc((A, S), For(i, 0, n, ForKind.PARALLEL, body), name="shared_sum")


def test_shared_accumulator_runs_serially_with_the_sequential_sum() -> None:
    n = 4_000_000  # long enough for two threads to overlap (lost updates when parallel)
    mod = loopir.build(shared_sum(n), target="cpu", num_threads=2)
    assert not mod.program.parallel
    assert "parallel, run serially: two iterations may touch one element of S" in mod.source
    a = np.arange(n, dtype=np.int32) % 7 + 1
    for _ in range(3):
        s = np.zeros(1, np.int32)
        mod(a, s)
        assert s[0] == a.sum()


def halo_reduction() -> tuple[PrimFunc, PrimFunc]:
    """``B[i] = sum_k A[i, k]; C[i] = B[i] + B[i + 1]`` with B computed under C's parallel
    loop: neighbouring iterations both initialize and accumulate ``B[i + 1]``."""
    n = 64
    A = te.placeholder((n + 1, 8), "float32", name="A")
    k = te.reduce_axis(8, name="k")
    B = te.compute((n + 1,), lambda i: te.sum(A[i, k], axis=k), name="B")
    C = te.compute((n,), lambda i: B[i] + B[i + 1], name="C")
    func = te.create_prim_func([A, C])
    sch = loopir.Schedule(func)
    (i,) = sch.get_loops(sch.get_block("C"))
    sch.parallel(i)
    sch.compute_at(sch.get_block("B"), i)
    return func, sch.func


def test_overlapping_recomputation_under_a_parallel_loop_runs_serially() -> None:
    func, scheduled = halo_reduction()
    mod = loopir.build(scheduled, target="cpu")
    assert not mod.program.parallel
    assert "two iterations may touch one element of B: one stores B[ax0 + i]" in mod.source
    check_equivalent(func, scheduled, build_options={"num_threads": 4})


def elementwise(m: int, n: int) -> PrimFunc:
    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return te.create_prim_func([A, B])


def test_thread_bound_loop_inside_runs_serially_also_lowered_in_random_order() -> None:
    func = elementwise(64, 16)
    sch = loopir.Schedule(func)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.parallel(i)
    sch.bind(j, "threadIdx.x")
    for f in (sch.func, loopir.lower(sch.func)):
        mod = loopir.build(f, target="cpu", thread_order="random")
        assert not pragma_lines(mod)
        assert "run serially: loop j inside it is bound to threadIdx.x" in mod.source
    check_equivalent(func, loopir.lower(sch.func), thread_order="random")


def test_parallel_loop_inside_a_thread_region_runs_serially() -> None:
    func = elementwise(64, 16)
    sch = loopir.Schedule(func)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    j0, j1 = sch.split(j, [4, None])
    sch.bind(j0, "threadIdx.x")
    sch.parallel(j1)
    low = loopir.lower(sch.func)
    mod = loopir.build(low, target="cpu", thread_order="random")
    assert mod.program.seeded and not pragma_lines(mod)
    assert "parallel, run serially: inside a thread region" in mod.source
    check_equivalent(func, low, thread_order="random")


def test_single_iteration_and_nested_parallel_loops() -> None:
    func = elementwise(1, 24)
    sch = loopir.Schedule(func)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.parallel(i)
    sch.parallel(j)
    mod = loopir.build(sch.func, target="cpu")
    assert "parallel, run serially: it has a single iteration" in mod.source
    assert len([p for p in pragma_lines(mod) if p.startswith("#pragma omp parallel")]) == 1
    func = elementwise(8, 24)
    sch = loopir.Schedule(func)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.parallel(i)
    sch.parallel(j)
    mod = loopir.build(sch.func, target="cpu")
    assert "parallel, run serially: inside a parallel loop that already runs concurrently" in mod.source
    check_equivalent(func, sch.func)


# --- errors, aliasing, options ------------------------------------------------------------------


def shifted_copy(n: int, shift: int) -> PrimFunc:
    """``for i in parallel(n): B[i] = A[i + shift]``: A has n + 1 elements."""
    A, B = Buffer("A", (n + 1,), "float32"), Buffer("B", (n,), "float32")
    i = Var("i")
    body = BufferStore(B, BufferLoad(A, (i + shift,)), (i,))
    return PrimFunc((A, B), For(i, 0, n, ForKind.PARALLEL, body), name="shifted_copy")


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_error_is_the_one_of_the_first_failing_iteration(threads: int) -> None:
    """Iterations 24.. read outside A; every thread fails in its own chunk, and the error is
    the one sequential execution reports (iteration 24), not the first a thread recorded."""
    func = shifted_copy(64, 41)
    mod = loopir.build(func, target="cpu", num_threads=threads)
    assert mod.program.parallel
    a, b = np.ones(65, np.float32), np.zeros(64, np.float32)
    with pytest.raises(LaunchError) as err:
        mod(a, b)
    assert "index 65 in dimension 0 is outside [0, 65)" in str(err.value)
    mod.num_threads = 1
    with pytest.raises(LaunchError) as serial:
        mod(a, b)
    assert str(serial.value) == str(err.value)


def test_overlapping_arguments_run_serially() -> None:
    """``B[i] = A[i + 1]`` with B and A views of one array: sequentially a shift left, which
    parallel chunks would break (a later chunk overwrites what an earlier one reads)."""
    n = 1_000_000  # long enough for the chunks to overlap in time (wrong when parallel)
    mod = loopir.build(shifted_copy(n, 1), target="cpu", num_threads=2)
    assert mod.program.parallel
    for _ in range(3):
        arr = np.arange(n + 1, dtype=np.float32)
        a, b = arr, arr[:n]
        assert mod._aliased([a, b])
        mod(a, b)
        np.testing.assert_array_equal(arr[:n], np.arange(1, n + 1, dtype=np.float32))
    assert not mod._aliased([np.zeros(n + 1, np.float32), np.zeros(n, np.float32)])


def test_overlapping_arguments_keep_simd_loops_sequential() -> None:
    """``B[i] = A[i] * 2`` vectorized, with B one element after A in one array: sequentially
    every element doubles the one before it; SIMD lanes would all read the old values."""
    n = 64
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    i = Var("i")
    body = BufferStore(B, BufferLoad(A, (i,)) * 2.0, (i,))
    func = PrimFunc((A, B), For(i, 0, n, ForKind.VECTORIZED, body), name="doubling")
    mod = loopir.build(func, target="cpu", check_bounds=False)
    assert mod.program.simd
    arr = np.ones(n + 1, np.float32)
    mod(arr[:n], arr[1:])
    np.testing.assert_array_equal(arr, 2.0 ** np.arange(n + 1, dtype=np.float32))
    separate = np.ones(n, np.float32), np.zeros(n, np.float32)
    mod(*separate)
    np.testing.assert_array_equal(separate[1], np.full(n, 2.0, np.float32))


def test_num_threads_option_and_attribute() -> None:
    sch = loopir.Schedule(elementwise(32, 8))
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.parallel(i)
    scheduled = sch.func
    mod = loopir.build(scheduled, target="cpu", num_threads=3)
    assert mod.num_threads == 3
    a = np.random.default_rng(0).random((32, 8), dtype=np.float32)
    for n in (0, 1, 2, 5, np.int64(4)):
        mod.num_threads = n
        b = np.zeros_like(a)
        mod(a, b)
        np.testing.assert_array_equal(b, a * 2 + 1)
    for bad in (-1, 1.5, True, "2", 10**6):
        with pytest.raises(CodegenError, match="num_threads must be an integer"):
            loopir.build(scheduled, target="cpu", num_threads=bad)
        with pytest.raises(CodegenError, match="num_threads must be an integer"):
            mod.num_threads = bad


def test_compiler_without_openmp_runs_the_loops_serially(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("loopir.runtime.cpu.supports_flag", lambda cc, flag: False)
    func = matmul(16, 4, 8)
    sch = cpu_matmul_schedule(func, 4, 4, fuse=True)
    mod = loopir.build(sch.func, target="cpu", check_bounds=False)
    assert mod.program.parallel and not any("openmp" in f for f in mod.compile_flags)
    check_equivalent(func, sch.func, build_options={"check_bounds": False})


def test_probe_of_a_missing_compiler_says_no() -> None:
    assert not cpu_cache.supports_flag("/nonexistent/cc", "-fopenmp")
    assert cpu_cache.supports_flag(cpu_cache.find_compiler(), "-fopenmp-simd")


def test_unloading_a_module_keeps_the_openmp_runtime(tmp_path: Path) -> None:
    """loopir.testing dlcloses every library it builds; the OpenMP runtime (loaded with the
    first parallel library) must stay, or its idle worker threads crash the process."""
    script = tmp_path / "unload.py"
    script.write_text(textwrap.dedent("""
        import loopir
        from loopir import te
        from loopir.testing import random_inputs, run_cpu
        A = te.placeholder((64, 64), "float32", name="A")
        B = te.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="B")
        func = te.create_prim_func([A, B])
        sch = loopir.Schedule(func)
        sch.parallel(sch.get_loops(sch.get_block("B"))[0])
        for k in range(30):  # four libraries, loaded and unloaded again and again
            run_cpu(sch.func, random_inputs(func, seed=k), {"num_threads": 2, "opt_level": k % 4})
        print("done")
    """))
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr[-2000:]


def test_a_forked_child_runs_parallel_loops_on_one_thread(tmp_path: Path) -> None:
    """libgomp's worker threads do not survive fork(): a team of two in the child waits for
    them forever. A child forked after OpenMP was used runs parallel loops on one thread."""
    script = tmp_path / "fork.py"
    script.write_text(textwrap.dedent("""
        import os
        import signal
        import numpy as np
        import loopir
        from loopir import te
        A = te.placeholder((256, 64), "float32", name="A")
        B = te.compute((256, 64), lambda i, j: A[i, j] * 2.0, name="B")
        sch = loopir.Schedule(te.create_prim_func([A, B]))
        sch.parallel(sch.get_loops(sch.get_block("B"))[0])
        mod = loopir.build(sch.func, target="cpu", num_threads=2)
        a, b = np.ones((256, 64), np.float32), np.zeros((256, 64), np.float32)
        mod(a, b)
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)  # a hung child must not outlive the test
            b[:] = 0
            mod(a, b)
            os._exit(0 if (b == 2).all() else 3)
        _, status = os.waitpid(pid, 0)
        mod(a, b)
        print("child", os.waitstatus_to_exitcode(status))
    """))
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "child 0", (proc.stdout, proc.stderr[-2000:])


# --- the proof against enumeration ---------------------------------------------------------------


def loops_with_context(s: Stmt, outer: dict[Var, Range]) -> Iterator[tuple[For, dict[Var, Range]]]:
    """Every loop with the ranges of the loops and block iter vars around it."""
    if isinstance(s, For):
        yield s, dict(outer)
        outer = {**outer, s.loop_var: Range(s.min, s.extent)}
        yield from loops_with_context(s.body, outer)
    elif isinstance(s, BlockRealize):
        yield from loops_with_context(s.block, outer)
    elif isinstance(s, Block):
        inner = {**outer, **{iv.var: iv.dom for iv in s.iter_vars}}
        for part in (s.init, s.body):
            if part is not None:
                yield from loops_with_context(part, inner)
    else:
        for name in ("seq", "then_case", "else_case", "body"):
            value = getattr(s, name, None)
            for x in value if isinstance(value, tuple) else [value]:
                if isinstance(x, Stmt):
                    yield from loops_with_context(x, outer)


def assignments(ranges: list[tuple[Var, Range]], env: Mapping[Var, int]) -> Iterator[dict[Var, int]]:
    if not ranges:
        yield dict(env)
        return
    (v, r), rest = ranges[0], ranges[1:]
    lo = int(arith.evaluate(r.min, env))
    for x in range(lo, lo + int(arith.evaluate(r.extent, env))):
        yield from assignments(rest, {**env, v: x})


def enumerated_conflict(loop: For, outer: dict[Var, Range]) -> str | None:
    """A store and an access of two different iterations on one element, found by trying
    every iteration (guards ignored, as the proof ignores them), or None."""
    col = c_parallel._Collector(simd=False)
    col.stmt(loop.body)
    assert not any(a.opaque for a in col.accesses)
    for env0 in assignments(list(outer.items()), {}):
        seen: dict[tuple[object, ...], list[tuple[int, bool]]] = {}
        for env1 in assignments([(loop.loop_var, Range(loop.min, loop.extent))], env0):
            v = env1[loop.loop_var]
            for acc in col.accesses:
                for env in assignments(list(acc.ranges), env1):
                    elem = (id(acc.buffer), *(int(arith.evaluate(i, env)) for i in acc.indices))
                    seen.setdefault(elem, []).append((v, acc.store))
        for elem, uses in seen.items():
            stores = {v for v, st in uses if st}
            if stores and len({v for v, _ in uses}) > 1:
                return f"element {elem} at iterations {sorted({v for v, _ in uses})}"
    return None


def random_schedule(data: st.DataObject) -> PrimFunc:
    name = data.draw(st.sampled_from(["matmul", "conv2d_nhwc", "elementwise_chain", "reduce_max",
                                      "matmul_bias_relu"]))  # fmt: skip
    d = lambda lo=1, hi=6: data.draw(st.integers(lo, hi))  # noqa: E731
    args = {
        "matmul": lambda: dict(M=d(), K=d(1, 4), N=d()),
        "conv2d_nhwc": lambda: dict(N=1, H=d(2, 5), W=d(2, 5), CI=d(1, 2), CO=d(1, 2), KH=2, KW=2, pad=d(0, 1),
                                    stride=d(1, 2)),
        "elementwise_chain": lambda: dict(M=d(), N=d(), stages=d(1, 3)),
        "reduce_max": lambda: dict(M=d(), K=d()),
        "matmul_bias_relu": lambda: dict(M=d(), K=d(1, 4), N=d()),
    }[name]()  # fmt: skip
    sch = loopir.Schedule(workloads.make_workload(name, **args).func)
    for _ in range(data.draw(st.integers(1, 8))):
        blocks = [b for b in ("C", "D", "Xpad", "R", "S", "T1", "T2", "T3", "BiasAdd")
                  if _has_block(sch, b)]  # fmt: skip
        blk = sch.get_block(data.draw(st.sampled_from(blocks)))
        loops = sch.get_loops(blk)
        prim = data.draw(st.sampled_from(["split", "fuse", "reorder", "compute_at", "reverse_compute_at",
                                          "parallel"]))  # fmt: skip
        try:
            if prim == "split":
                sch.split(data.draw(st.sampled_from(loops)), [None, d(1, 4)])
            elif prim == "fuse" and len(loops) >= 2:
                at = d(0, len(loops) - 2)
                sch.fuse(loops[at], loops[at + 1])
            elif prim == "reorder":
                sch.reorder(*data.draw(st.permutations(loops))[:2])
            elif prim in ("compute_at", "reverse_compute_at"):
                other = sch.get_loops(sch.get_block(data.draw(st.sampled_from(blocks))))
                getattr(sch, prim)(blk, data.draw(st.sampled_from(other)))
            else:
                sch.parallel(data.draw(st.sampled_from(loops)))
        except LoopIRError:
            pass
    return sch.func


def _has_block(sch: loopir.Schedule, name: str) -> bool:
    try:
        sch.get_block(name)
    except LoopIRError:
        return False
    return True


@given(data=st.data())
def test_proven_independent_loops_have_no_conflict_by_enumeration(data: st.DataObject) -> None:
    """For every loop of random schedules (and of their lowered form): when the proof says
    that no two iterations touch one element with a store, trying every iteration agrees."""
    func = random_schedule(data)
    funcs = [func]
    try:
        funcs.append(loopir.lower(func))
    except LoopIRError:
        pass
    for f in funcs:
        for loop, outer in loops_with_context(f.body, {}):
            if c_parallel.concurrency_problem(loop, outer) is None:
                assert enumerated_conflict(loop, outer) is None, loop


def test_enumeration_finds_the_conflicts_the_proof_refuses() -> None:
    """The oracle itself: the refused loops of the halo reduction and the reduction loop of a
    matmul have conflicts."""
    _, scheduled = halo_reduction()
    refused = [(lp, o) for lp, o in loops_with_context(scheduled.body, {}) if lp.kind is ForKind.PARALLEL]
    assert refused and all(enumerated_conflict(lp, o) for lp, o in refused)
    k_loops = [(lp, o) for lp, o in loops_with_context(matmul(3, 4, 5).body, {}) if lp.loop_var.name == "k"]
    assert c_parallel.concurrency_problem(*k_loops[0]) is not None and enumerated_conflict(*k_loops[0])


def test_fused_and_split_loops_are_proven() -> None:
    func = matmul(12, 4, 10)
    for fuse in (False, True):
        sch = cpu_matmul_schedule(func, 3, 5, fuse)
        outer = next(loops_with_context(sch.func.body, {}))
        assert outer[0].kind is ForKind.PARALLEL
        assert c_parallel.concurrency_problem(*outer) is None
