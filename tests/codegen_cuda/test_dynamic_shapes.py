"""Dynamic shapes everywhere (issue 28 item 3): every example and the default schedule of te
workloads build with each dimension symbolic alone and all together, with local padding on
and off; the race proof holds where it held at fixed sizes; on a GPU each equals the CPU
executor at sizes that are not multiples of the tiles, 1 included."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from typing import Any

import attrs
import pytest

import loopir
from loopir import examples
from loopir.codegen_cuda import prepare_function
from loopir.codegen_cuda.units import build_library
from loopir.examples.attention import attention_func
from loopir.examples.decode import decode_attention_func
from loopir.examples.dense import dense_func
from loopir.examples.reductions import layernorm_func, rmsnorm_func, row_sum_func, softmax_func
from loopir.examples.transpose import transpose_func
from loopir.ir.stmt import PrimFunc
from loopir.passes.race_check import RaceCheckWarning
from loopir.schedule.default_gpu import tile_gemm
from loopir.testing import check_equivalent
from loopir.testing import workloads as wl

Make = Callable[..., PrimFunc]


def _sched(f: Callable[..., Any]) -> Make:
    return lambda *dims: f(*dims).func


def _tiles(M: Any, K: Any, N: Any) -> PrimFunc:
    sch = loopir.Schedule(dense_func(M, K, N))
    tile_gemm(sch, "C", ti=4, tj=4, vi=2, vj=2, ri=4, rj=4, vec=4, ki=8, stages=2, unroll_k=True)
    return sch.func


def _te(make: Callable[..., Any]) -> Make:
    return lambda *dims: make(*dims).func


@attrs.frozen
class Case:
    scheduled: Make  # dims -> the scheduled (or, for the default schedule, plain) function
    reference: Make  # dims -> the plain function
    names: tuple[str, ...]
    fixed: tuple[int, ...]  # the size the symbolic dimensions replace
    sizes: tuple[tuple[int, ...], ...]  # GPU check sizes: 1 and non-multiples of the tiles


CASES = {
    "dense": Case(_sched(examples.dense), dense_func, ("M", "K", "N"), (960, 770, 2304),
                  ((1, 1, 1), (33, 70, 130), (200, 13, 257), (129, 770, 2304))),
    "pipelined_gemm": Case(_sched(examples.pipelined_gemm), dense_func, ("M", "K", "N"),
                           (1024, 1024, 1024), ((1, 1, 1), (33, 70, 130), (200, 13, 257), (65, 97, 129))),
    "sgemm_tiles": Case(_tiles, dense_func, ("M", "K", "N"), (256, 256, 256),
                        ((1, 1, 1), (33, 70, 130), (200, 13, 257), (65, 97, 129))),
    "softmax": Case(_sched(examples.softmax), softmax_func, ("rows", "cols"), (4096, 4096),
                    ((1, 1), (3, 1000), (17, 4097), (64, 33))),
    "layernorm": Case(_sched(examples.layernorm), layernorm_func, ("rows", "cols"), (4096, 1024),
                      ((1, 1), (3, 1000), (17, 4097), (64, 33))),
    "rmsnorm": Case(_sched(lambda r, c: examples.rmsnorm(r, c, "float32")),
                    lambda r, c: rmsnorm_func(r, c, "float32"), ("rows", "cols"), (4096, 1024),
                    ((1, 1), (3, 1000), (17, 4097), (64, 33))),
    "row_sum": Case(_sched(examples.row_sum), row_sum_func, ("rows", "cols"), (1024, 1024),
                    ((1, 1), (3, 1000), (17, 4097), (64, 33))),
    "transpose": Case(_sched(examples.transpose), transpose_func, ("M", "N"), (1024, 1024),
                      ((1, 1), (33, 70), (100, 257), (1000, 3))),
    # FlashAttention's program: one build for every query and key length
    "attention": Case(lambda sq, skv: examples.attention(2, 4, sq, skv, 64, "float16", True, 2,
                                                         fragments=False).func,
                      lambda sq, skv: attention_func(2, 4, sq, skv, 64, "float16", True, 2), ("seq_q", "seq_kv"),
                      (1000, 1000), ((1, 1), (33, 70), (100, 257), (130, 64))),
    "attention_fragments": Case(lambda sq, skv: examples.attention(2, 4, sq, skv, 64, "float16", True, 2,
                                                                   fragments=True).func,
                                lambda sq, skv: attention_func(2, 4, sq, skv, 64, "float16", True, 2,
                                                               fragments=True),
                                ("seq_q", "seq_kv"), (1000, 1000), ((1, 1), (33, 70), (100, 257), (130, 64))),
    "decode_attention": Case(lambda skv: examples.decode_attention(2, 8, skv, 64, "float16", 2).func,
                             lambda skv: decode_attention_func(2, 8, skv, 64, "float16", 2, block_n=64), ("seq_kv",),
                             (4096,), ((1,), (75,), (300,), (4097,))),
    "default/elementwise_chain": Case(_te(wl.elementwise_chain), _te(wl.elementwise_chain),
                                      ("M", "N"), (64, 48), ((1, 1), (33, 70), (100, 257), (7, 3))),
    "default/reduce_max": Case(_te(wl.reduce_max), _te(wl.reduce_max), ("M", "K"), (64, 48),
                               ((1, 1), (33, 70), (100, 257), (7, 3))),
}  # fmt: skip


def _variants(case: Case) -> list[tuple[str, ...]]:
    """Which dimensions are symbolic: each alone, then all together."""
    return [(n,) for n in case.names] + ([case.names] if len(case.names) > 1 else [])


def _dims(case: Case, symbolic: tuple[str, ...]) -> list[Any]:
    return [loopir.Var(n, "int32") if n in symbolic else v for n, v in zip(case.names, case.fixed)]


def _prepare(func: PrimFunc, pad: bool, strict: bool) -> Any:
    with loopir.PassContext(config={"tir.enable_local_pad": pad}), warnings.catch_warnings():
        if strict:
            warnings.simplefilter("error", RaceCheckWarning)
        return prepare_function(func)


def _proven_at_fixed_size(case: Case, pad: bool) -> bool:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _prepare(case.scheduled(*case.fixed), pad, strict=False)
    return not any(issubclass(w.category, RaceCheckWarning) for w in seen)


@pytest.mark.nvcc
@pytest.mark.parametrize("name", list(CASES))
def test_every_dimension_symbolic_builds_and_compiles(name: str, tmp_path: Any) -> None:
    case = CASES[name]
    codes = []
    every = _variants(case)[-1]  # every dimension symbolic (the one compiled, below)
    for pad in (False, True):
        strict = _proven_at_fixed_size(case, pad)
        for symbolic in _variants(case):
            func = case.scheduled(*_dims(case, symbolic))
            label = f"{name.replace('/', '_')}_{'_'.join(symbolic)}_{'pad' if pad else 'nopad'}"
            code = _prepare(attrs.evolve(func, name=label), pad, strict)  # lowered, race-proven, emitted
            if symbolic == every:
                codes.append(code)
    # one nvcc run for the example's every-dimension-symbolic kernels, with and without padding
    # (each dimension symbolic alone is prepared above, not compiled: nvcc's front end costs
    # 4-6 s a kernel, and the all-symbolic kernel takes every symbolic path those take)
    built = build_library(codes, arch="sm_90a", cache_dir=tmp_path)
    assert built.binary.data[:4] == b"\x7fELF"
    kernels = set(built.binary.resources)
    for code in codes:  # every variant's kernels are in the library
        assert {k.spec.name for k in code.emitted.kernels} <= kernels


def test_dense_with_a_dynamic_batch_keeps_two_barriers_per_k_step() -> None:
    # DietCode's headline case: a dynamic M, static weights (refused before: "a shared-memory
    # barrier is needed inside a region that not every thread reaches")
    for pad in (False, True):
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            text = loopir.lower(examples.dense(loopir.Var("M"), 770, 2304).func).script()
        k_loop = text[text.index("for k_0"):]
        assert k_loop.count("tvm_storage_sync") == 2, text
        assert text.count("tvm_storage_sync") == 2, text  # none in C's write-back


@pytest.mark.gpu
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_all_dimensions_symbolic_equal_the_cpu_executor(name: str, pad: bool) -> None:
    case = CASES[name]
    dims = _dims(case, case.names)
    func, reference = case.scheduled(*dims), case.reference(*dims)
    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        for size in case.sizes:  # one build (cached), four sizes
            check_equivalent(reference, func, sizes=dict(zip(case.names, size)), target2="cuda",
                             norm=True)  # fmt: skip


#: examples that take constant sizes only, and why (each refuses a Var by name)
CONSTANT_SIZES = {"tc_gemm": "transform_layout of the warp fragments needs constant shapes",
                  "hopper_gemm": "the same schedule (its accumulator fragments)"}


#: examples written as lowered IR (no schedule, so no local padding to turn on), and where their
#: symbolic sizes are tested
LOWERED_IR = {"tma_copy": "tests/codegen_cuda/test_tma.py (symbolic M and N, the tensor map per call)"}


def test_the_matrix_covers_every_example() -> None:
    # an example added to loopir.examples without a row here fails this test
    scheduled = {n for n in examples.__all__ if not n.endswith("_func")}
    covered = {n for n in CASES if not n.startswith("default/")}
    assert scheduled <= covered | {"dense"} | set(CONSTANT_SIZES) | set(LOWERED_IR), scheduled - covered
    for name in CONSTANT_SIZES:
        with pytest.raises(loopir.ScheduleError, match="must be a positive int"):
            getattr(examples, name)(loopir.Var("M", "int32"), 64, 64)
    assert list(itertools.chain.from_iterable(_variants(CASES["dense"]))) == ["M", "K", "N", "M", "K", "N"]
