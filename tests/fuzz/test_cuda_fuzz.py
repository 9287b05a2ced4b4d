"""The GPU subset of the fuzzer: fuzzed schedules whose loop nests are bound to threads.

Each schedule is fuzzed on the CPU as usual, then :func:`bind_for_gpu` binds its top-level
nests to blockIdx/threadIdx. Building it for CUDA must either succeed or refuse with a
CodegenError that explains what to bind (the host/device split) or a PassError of
LowerCrossThreadReduction (a reduction loop bound in a way it refuses); nvcc must never reject
the generated source and nothing else may be raised. With a GPU, the kernel's outputs must
equal the CPU executor's.

``LOOPIR_FUZZ_CUDA_SCHEDULES`` sets how many schedules (default 6: each needs nvcc).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import loopir
from loopir.errors import CodegenError, PassError
from loopir.testing import check_equivalent
from loopir.testing.fuzz import (
    FuzzFinding,
    RandomChooser,
    ScheduleFuzzer,
    bind_for_gpu,
    cross_thread_refusal,
    draw_workload,
)

N = int(os.environ.get("LOOPIR_FUZZ_CUDA_SCHEDULES", "6"))
SEEDS = range(9000, 9000 + N)


def _gpu_schedule(seed: int) -> ScheduleFuzzer | None:
    ch = RandomChooser(seed)
    fz = ScheduleFuzzer(draw_workload(ch), seed=seed)
    try:
        for _ in range(8):
            fz.step(fz.draw(ch))
    except FuzzFinding:
        return None  # reported by the CPU fuzzer; not this test's subject
    bind_for_gpu(fz.sch)
    check_equivalent(fz.base, fz.sch.func, sizes=fz.workload.sizes)  # binding keeps semantics
    return fz


def _build(fz: ScheduleFuzzer, cache: Path) -> object | None:
    try:
        return loopir.build(fz.sch.func, target="cuda", cache_dir=cache)
    except PassError as e:
        # a reduction loop the fuzzer bound to threads in a way LowerCrossThreadReduction
        # refuses, saying why: a refusal too; any other PassError is a failure
        assert cross_thread_refusal(e), f"unexpected PassError:\n{e}\n{fz.reproducer()}"
        return None
    except CodegenError as e:
        text = str(e)
        assert "nvcc failed" not in text, f"nvcc rejected generated code:\n{text}\n{fz.reproducer()}"
        # the two clear refusals: code that cannot run on the host, and a proven data race
        # (bind_for_gpu binds loops without looking at the data flow between threads)
        assert "host/device split" in text or text.startswith("race check ("), (
            f"unexpected CodegenError:\n{text}\n{fz.reproducer()}"
        )
        return None


def _check_compiled(mod: object, fz: ScheduleFuzzer) -> None:
    """nvcc really produced every kernel of the module (not just text that looks like CUDA)."""
    names = [k.name for k in mod.kernels]  # type: ignore[attr-defined]
    assert names, f"no kernel was emitted\n{fz.reproducer()}"
    for name in names:
        assert f"{name}(" in mod.source, f"kernel {name} missing from the source"  # type: ignore[attr-defined]
        assert name in mod.resource_usage, f"ptxas reported nothing for {name}\n{fz.reproducer()}"  # type: ignore[attr-defined]
    assert mod.library_path.read_bytes()[:4] == b"\x7fELF"  # type: ignore[attr-defined]


@pytest.mark.nvcc
@pytest.mark.parametrize("seed", SEEDS)
def test_fuzzed_gpu_schedule_compiles_or_is_refused(seed: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    fz = _gpu_schedule(seed)
    if fz is None:
        pytest.skip("the CPU fuzzer reports this schedule (see test_schedule_fuzz)")
    mod = _build(fz, tmp_path_factory.getbasetemp() / "cuda-fuzz-cache")
    if mod is None:
        # A clear refusal is an allowed outcome, but not a pass: it checked nothing. How many
        # seeds may be refused is bounded by test_fuzzed_gpu_subset_mostly_compiles.
        pytest.skip("the CUDA backend refuses this schedule with a clear CodegenError")
    _check_compiled(mod, fz)


@pytest.mark.nvcc
def test_fuzzed_gpu_subset_mostly_compiles(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Without this, a backend that refused every schedule would pass the test above.
    cache = tmp_path_factory.getbasetemp() / "cuda-fuzz-cache"
    built, refused = 0, 0
    for seed in SEEDS:
        fz = _gpu_schedule(seed)
        if fz is None:
            continue
        if _build(fz, cache) is None:
            refused += 1
        else:
            built += 1
    assert built >= refused and built > 0, f"{refused} fuzzed schedules refused, {built} built"


@pytest.mark.gpu
@pytest.mark.parametrize("seed", SEEDS)
def test_fuzzed_gpu_schedule_matches_cpu(seed: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    fz = _gpu_schedule(seed)
    if fz is None:
        pytest.skip("the CPU fuzzer reports this schedule (see test_schedule_fuzz)")
    cache = tmp_path_factory.getbasetemp() / "cuda-fuzz-cache"
    if _build(fz, cache) is None:
        pytest.skip("the CUDA backend refuses this schedule with a clear CodegenError")
    check_equivalent(fz.base, fz.sch.func, sizes=fz.workload.sizes, target2="cuda",
                     build_options={"cache_dir": cache})  # fmt: skip
