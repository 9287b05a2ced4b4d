"""Four processes building the same kernel at once share one cache safely.

CPU: builds of one key are serialized by a lock file, so exactly one process compiles and
the other three load its library. CUDA: every process gets byte-identical cubins and the
cache entry left behind is complete (its hash matches). No temporary file is left behind.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
from pathlib import Path
from typing import Any

import numpy as np
import pytest

N_PROCS = 4


def _cpu_worker(cache_dir: str, barrier: Any, out: Any) -> None:
    import loopir
    from loopir.testing import random_inputs
    from loopir.testing.workloads import conv2d_nhwc

    func = conv2d_nhwc(1, 5, 4, 2, 3, 3, 3, 1, 1).func
    barrier.wait()  # start the four builds together
    mod = loopir.build(func, target="cpu", cache_dir=cache_dir)
    args = random_inputs(func, seed=3)
    mod(*args)
    out.put((mod.cache_hit, mod.library_path, args[-1].tobytes()))


def _cuda_worker(cache_dir: str, barrier: Any, out: Any) -> None:
    import loopir
    from loopir.testing.workloads import matmul

    sch = loopir.Schedule(matmul(16, 8, 12).func)
    b = sch.get_block("C")
    i, j, _ = sch.get_loops(b)
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    func = sch.func
    barrier.wait()
    mod = loopir.build(func, target="cuda", cache_dir=cache_dir)
    out.put((str(mod.cubin_path), hashlib.sha256(mod.cubin_path.read_bytes()).hexdigest()))


def _run(worker: Any, cache_dir: Path) -> list[Any]:
    ctx = mp.get_context("spawn")  # no state inherited from the test process
    barrier, out = ctx.Barrier(N_PROCS), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(str(cache_dir), barrier, out)) for _ in range(N_PROCS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return results


def test_four_processes_build_one_cpu_library(tmp_path: Path) -> None:
    results = _run(_cpu_worker, tmp_path)
    hits = [r[0] for r in results]
    assert hits.count(False) == 1, f"expected exactly one compile, got cache hits {hits}"
    assert len({r[1] for r in results}) == 1
    assert len({r[2] for r in results}) == 1  # identical outputs
    cpu = tmp_path / "cpu"
    libs = list(cpu.glob("*.so"))
    assert len(libs) == 1
    stem = libs[0].stem
    digest = (cpu / f"{stem}.sha256").read_text().strip()
    assert digest == hashlib.sha256(libs[0].read_bytes()).hexdigest()
    leftovers = [p.name for p in cpu.iterdir() if p.suffix not in (".so", ".c", ".sha256", ".lock")]
    assert not leftovers, leftovers
    out = np.frombuffer(results[0][2], dtype=np.float32)
    assert np.isfinite(out).all()


@pytest.mark.nvcc
def test_four_processes_build_one_cubin(tmp_path: Path) -> None:
    results = _run(_cuda_worker, tmp_path)
    assert len({r[0] for r in results}) == 1
    assert len({r[1] for r in results}) == 1, "processes got different cubins"
    cubins = list(tmp_path.glob("*.cubin"))
    assert len(cubins) == 1
    meta = json.loads((tmp_path / (cubins[0].stem + ".json")).read_text())
    assert meta["sha256"] == hashlib.sha256(cubins[0].read_bytes()).hexdigest() == results[0][1]
    assert not list(tmp_path.glob("*.tmp"))
