"""The CPU executor with OpenMP: does a tuned CPU matmul beat the untuned one? (issue 29 item 5)

One command (from the repository root)::

    python benchmarks/cpu_parallel.py                 # 256^3 float32, 16 tuning trials
    python benchmarks/cpu_parallel.py --shape 128 128 128 --trials 24 --rounds 41

Cases, all float32 ``C = A @ B`` built for ``target="cpu"`` and checked against numpy first:

- ``untuned``: the te matmul as written (i, j, k loops; no schedule);
- ``hand``: rows in parallel (``parallel(i0)``), 8 columns innermost and vectorized;
- ``tuned``: the best of ``--trials`` candidates of a small CPU design space (row and column
  tiles sampled, the row tiles parallel, the column tile vectorized) searched by
  :func:`loopir.tune.tune` with its default CPU runner (bounds checks on, all cores);
- each with bounds checks (the default build) and without (``check_bounds=False``, where the
  vectorized loop becomes ``omp simd``), and each scheduled one also with ``num_threads=1``.

The machine is shared and noisy, so the modules are timed interleaved: each round calls every
module once, in a rotating order, and the table gives the median over the rounds of the wall
time and of the process CPU time (the threads' sum), and the load average before and after.
OpenMP's wait policy matters on a busy machine: run it once more with
``OMP_WAIT_POLICY=passive`` to see the cost of idle threads spinning at the barrier.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time
from typing import Any

import numpy as np

import loopir
import loopir.tune
from loopir import te
from loopir.ir.stmt import PrimFunc
from loopir.schedule import Schedule


def matmul(M: int, K: int, N: int) -> PrimFunc:
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def hand_schedule(func: PrimFunc) -> PrimFunc:
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(i0, j0, i1, k, j1)
    sch.parallel(i0)
    sch.vectorize(j1)
    return sch.func


def cpu_matmul_space(sch: Schedule) -> None:
    """Row tiles in parallel (``ti`` rows each), K inside, ``tj`` columns innermost and
    vectorized. (Fusing the row and column tiles into one parallel loop costs a floor division
    and a modulo per innermost iteration in the generated C: it measured 2-3x slower per core.)"""
    i, j, k = sch.get_loops(sch.get_block("C"))
    ti = sch.sample_categorical([1, 2, 4, 8, 16], [1.0] * 5)
    tj = sch.sample_categorical([8, 16, 32, 64, 128, 256], [1.0] * 6)
    i0, i1 = sch.split(i, [None, ti])
    j0, j1 = sch.split(j, [None, tj])
    sch.reorder(i0, j0, i1, k, j1)
    sch.parallel(i0)
    sch.vectorize(j1)


def interleaved(mods: dict[str, Any], args: list[np.ndarray], rounds: int) -> dict[str, tuple[float, float]]:
    """Median wall and process CPU milliseconds per module (CPU time sums the threads),
    calling each once per round in a rotating order."""
    names = list(mods)
    times: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for n in names:  # warm up: first-touch, thread pool
        mods[n](*args)
    for r in range(rounds):
        for n in names[r % len(names):] + names[: r % len(names)]:
            t0, c0 = time.perf_counter(), time.process_time()
            mods[n](*args)
            times[n].append(((time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3))
    return {n: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for n, t in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", nargs=3, type=int, default=[256, 256, 256], metavar=("M", "K", "N"))
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--rounds", type=int, default=31)
    a = p.parse_args()
    M, K, N = a.shape
    func = matmul(M, K, N)
    t0 = time.perf_counter()
    tuned = loopir.tune.tune(func, cpu_matmul_space, trials=a.trials, seed=0, show_progress=False)
    tune_s = time.perf_counter() - t0
    funcs = {"untuned": func, "hand": hand_schedule(func), "tuned": tuned.func}
    rng = np.random.default_rng(0)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    C = np.zeros((M, N), np.float32)
    want = A.astype(np.float64) @ B.astype(np.float64)
    mods: dict[str, Any] = {}
    for check in (True, False):
        for name, f in funcs.items():
            for threads in (0, 1) if name != "untuned" else (0,):
                mod = loopir.build(f, target="cpu", check_bounds=check, num_threads=threads)
                C[:] = 0
                mod(A, B, C)
                err = float(np.max(np.abs(C - want)))
                assert err < 1e-3, (name, check, err)
                mods[f"{name} | {check} | {threads or os.cpu_count()}"] = mod
    load0 = os.getloadavg()[0]
    ms = interleaved(mods, [A, B, C], a.rounds)
    load1 = os.getloadavg()[0]
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
          f"{os.cpu_count()} cores, load average {load0:.1f} -> {load1:.1f}; matmul {M}x{K}x{N} float32; "
          f"tuning: {a.trials} trials in {tune_s:.0f} s, best {tuned.ms:.2f} ms, trace decisions "
          f"{sorted(tuned.trace.decisions.values())}")  # fmt: skip
    print()
    print(f"| schedule | check_bounds | threads | wall, median of {a.rounds} interleaved (ms) | vs untuned "
          "| CPU time (ms) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for key, (wall, cpu) in ms.items():
        name, check, threads = key.split(" | ")
        base = ms[f"untuned | {check} | {os.cpu_count()}"][0]
        print(f"| {name} | {check} | {threads} | {wall:.2f} | {base / wall:.2f}x | {cpu:.2f} |")


if __name__ == "__main__":
    main()
