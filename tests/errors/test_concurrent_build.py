"""Eight processes building the same CUDA and CPU modules at once share one cache safely.

The workers use the *default* cache location (``$XDG_CACHE_HOME/loopir``, no override), the
one with a fallback, and must never take the fallback: an earlier ``.write-probe`` shared by
all processes made one process's ``unlink`` fail in another and send it to a shared ``/tmp``
directory (issue 18). Builds of one key are serialized by a lock file, so exactly one
process compiles each module and the other seven load its result. A second round starts
from a cache whose entries were corrupted: none of the eight may load them.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import queue
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.nvcc  # the CUDA half compiles with nvcc (no GPU needed)

N_PROCS = 8


def _worker(xdg: str, tmpdir: str, barrier: Any, out: Any) -> None:
    import logging
    import os

    # The default location: no override from the test session, a private temp dir.
    os.environ.pop("LOOPIR_CACHE_DIR", None)
    os.environ["XDG_CACHE_HOME"] = xdg
    os.environ["TMPDIR"] = tmpdir

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logging.getLogger("loopir").addHandler(Keep(logging.WARNING))

    import loopir
    from loopir.testing import random_inputs
    from loopir.testing.workloads import conv2d_nhwc, matmul

    sch = loopir.Schedule(matmul(16, 8, 12).func)
    i, j, _ = sch.get_loops(sch.get_block("C"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    gpu_func = sch.func
    cpu_func = conv2d_nhwc(1, 5, 4, 2, 3, 3, 3, 1, 1).func
    class Fake:  # a CUDA array nobody dereferences: the trace build records, never launches
        def __init__(self, shape: tuple[int, ...], ptr: int) -> None:
            self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (ptr, False),
                                             "version": 3, "strides": None}  # fmt: skip

    barrier.wait()  # start the eight builds together
    # The whole CUDA module (kernels and host code in one library), loaded and called: a
    # trace build, so that no GPU is needed.
    cuda = loopir.build(gpu_func, target="cuda", nvcc_flags=("-DLOOPIR_HOST_TRACE",))
    cuda(Fake((16, 8), 0x1000), Fake((8, 12), 0x2000), Fake((16, 12), 0x3000))
    cpu = loopir.build(cpu_func, target="cpu")
    args = random_inputs(cpu_func, seed=3)
    cpu(*args)
    out.put({
        "cuda_hit": cuda.cache_hit, "cuda_path": str(cuda.library_path),
        "cuda_sha": hashlib.sha256(cuda.library_path.read_bytes()).hexdigest(),
        "trace": cuda._library().trace(),
        "cpu_hit": cpu.cache_hit, "lib": str(cpu.library_path), "out": args[-1].tobytes(),
        "warnings": records,
    })  # fmt: skip


def _round(xdg: Path, tmpdir: Path) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")  # no state inherited from the test process
    barrier, out = ctx.Barrier(N_PROCS), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(str(xdg), str(tmpdir), barrier, out))
        for _ in range(N_PROCS)
    ]
    for p in procs:
        p.start()
    results: list[dict[str, Any]] = []
    deadline = time.monotonic() + 300
    try:
        while len(results) < N_PROCS:
            try:
                results.append(out.get(timeout=1))
            except queue.Empty:
                # A worker that died would leave the others at the barrier: fail now.
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                assert not dead, f"a worker failed (exit codes {dead}); see its traceback above"
                assert time.monotonic() < deadline, "the workers did not finish in 300 s"
    finally:
        for p in procs:
            if p.exitcode is None and len(results) < N_PROCS:
                p.kill()
            p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    return results


def _check_round(results: list[dict[str, Any]], root: Path, tmpdir: Path) -> None:
    assert [r["cuda_hit"] for r in results].count(False) == 1, "expected exactly one nvcc run"
    assert [r["cpu_hit"] for r in results].count(False) == 1, "expected exactly one C compile"
    for r in results:
        assert Path(r["cuda_path"]).parent == root / "cuda", r["cuda_path"]
        assert Path(r["lib"]).parent == root / "cpu", r["lib"]
        assert not [w for w in r["warnings"] if "fallback" in w], r["warnings"]
        assert r["trace"].startswith("launch main_kernel0 grid=(16,1,1) block=(12,1,1) args= 0x1000 0x2000 0x3000")
    assert len({r["cuda_sha"] for r in results}) == 1, "processes got different CUDA libraries"
    assert len({r["out"] for r in results}) == 1, "processes computed different outputs"
    assert not tmpdir.exists() or not list(tmpdir.iterdir()), "a fallback directory was made"
    libs_cuda = list((root / "cuda").glob("*.so"))
    assert len(libs_cuda) == 1
    meta = json.loads(libs_cuda[0].with_suffix(".json").read_text())
    assert meta["sha256"] == hashlib.sha256(libs_cuda[0].read_bytes()).hexdigest()
    assert meta["sha256"] == results[0]["cuda_sha"]
    libs = list((root / "cpu").glob("*.so"))
    assert len(libs) == 1
    digest = libs[0].with_suffix(".sha256").read_text().strip()
    assert digest == hashlib.sha256(libs[0].read_bytes()).hexdigest()
    for kind in ("cpu", "cuda"):
        leftovers = [p.name for p in (root / kind).iterdir() if p.name.endswith(".tmp")]
        assert not leftovers, leftovers


def test_eight_processes_build_one_cuda_and_one_cpu_library(tmp_path: Path) -> None:
    xdg, tmpdir = tmp_path / "xdg", tmp_path / "tmp"
    tmpdir.mkdir(mode=0o700)
    root = xdg / "loopir"
    first = _round(xdg, tmpdir)
    _check_round(first, root, tmpdir)
    assert not any(r["warnings"] for r in first), [r["warnings"] for r in first]
    assert (root.stat().st_mode & 0o777) == 0o700

    # Corrupt both entries (this process never loaded them): all eight must see it.
    cuda_lib = next((root / "cuda").glob("*.so"))
    data = bytearray(cuda_lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cuda_lib.write_bytes(bytes(data))
    corrupted = hashlib.sha256(bytes(data)).hexdigest()
    lib = next((root / "cpu").glob("*.so"))
    lib.write_bytes(lib.read_bytes()[:100])
    second = _round(xdg, tmpdir)
    _check_round(second, root, tmpdir)
    assert second[0]["cuda_sha"] != corrupted  # rebuilt once, then loaded by all eight
    assert second[0]["out"] == first[0]["out"]
    out = np.frombuffer(first[0]["out"], dtype=np.float32)
    assert np.isfinite(out).all()
    shutil.rmtree(xdg)
