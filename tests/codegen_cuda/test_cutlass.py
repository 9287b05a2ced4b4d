"""CUTLASS support without a GPU: enumeration, emitted source, cache keys, tuning cache, hooks.

One test (marked ``nvcc``) compiles a single small sm80 module -- the cheapest CUTLASS unit --
and checks the library cache and the entry point's argument checking through ctypes.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("cutlass_library")

from loopir.codegen_cuda.cutlass.emit import KernelSpec, emit_kernel, emit_module  # noqa: E402
from loopir.codegen_cuda.cutlass.enumerate import (  # noqa: E402
    MAX_ACCUMULATOR_REGISTERS,
    GemmCandidate,
    accumulator_registers,
    default_candidate,
    enumerate_candidates,
    estimated_cost,
    fits_registers,
    rank_candidates,
    shared_tuning_candidates,
    tuning_candidates,
    unsupported_reason,
)
from loopir.codegen_cuda.cutlass.problem import (  # noqa: E402
    EpilogueSpec,
    GemmProblem,
    cutlass_operands,
    cutlass_version,
)
from loopir.errors import CodegenError, LaunchError  # noqa: E402

BIAS_RELU = EpilogueSpec("relu", has_bias=True)


def prob(layout="NN", dtype="float16", out=None, epi=None, m=512, n=256, k=128, batch=1):
    return GemmProblem(
        m, n, k, dtype, out or dtype, "row" if layout[0] == "N" else "col",
        "row" if layout[1] == "N" else "col", batch, epi or EpilogueSpec(),
    )  # fmt: skip


# --- problem ----------------------------------------------------------------------------------


def test_problem_validation_names_the_field():
    with pytest.raises(CodegenError, match="dtype_ab='int8'"):
        GemmProblem(8, 8, 8, "int8", "float16")
    with pytest.raises(CodegenError, match="m must be a positive int"):
        GemmProblem(0, 8, 8, "float16", "float16")
    with pytest.raises(CodegenError, match="unknown epilogue activation 'tanh'"):
        EpilogueSpec("tanh")


@pytest.mark.parametrize(
    "layout, want",
    [
        ("NN", ("ColumnMajor", "ColumnMajor", "n", "k")),
        ("NT", ("RowMajor", "ColumnMajor", "k", "k")),
        ("TN", ("ColumnMajor", "RowMajor", "n", "m")),
        ("TT", ("RowMajor", "RowMajor", "k", "m")),
    ],
)
def test_transposed_operands(layout, want):
    ops = cutlass_operands(prob(layout))
    assert (ops["layout_a"], ops["layout_b"], ops["contig_a"], ops["contig_b"]) == want
    assert ops["contig_d"] == "n"


def test_problem_key_depends_on_every_field():
    base = prob()
    keys = {
        base.key(), prob(m=1024).key(), prob("NT").key(), prob(dtype="bfloat16").key(),
        prob(epi=BIAS_RELU).key(), prob(batch=2).key(), prob(out="float32").key(),
    }  # fmt: skip
    assert len(keys) == 7 and base.key() == prob().key()


# --- enumeration --------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", [90, 80])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_candidates_match_layout_alignment_and_dtype(arch, layout, dtype):
    p = prob(layout, dtype)
    cands = enumerate_candidates(p, arch)
    assert cands
    ops = cutlass_operands(p)
    for c in cands:
        assert c.arch == arch
        assert (c.layout_a, c.layout_b) == (ops["layout_a"], ops["layout_b"])
        assert c.align_a == c.align_b == 8 and c.align_c == 8
        assert c.element_ab == {"float16": "cutlass::half_t", "bfloat16": "cutlass::bfloat16_t"}[dtype]
        if arch == 90:
            assert c.kernel_schedule.startswith("cutlass::gemm::KernelTmaWarpSpecialized")
            assert "PtrArray" not in c.kernel_schedule and "CpAsync" not in c.kernel_schedule
        else:
            assert c.kernel_schedule == "" and "Swizzle" in c.swizzle
    assert cands == sorted(cands, key=GemmCandidate.sort_key)
    assert len({c.sort_key()[:-1] for c in cands}) == len(cands)  # no duplicates


def test_fused_epilogues_only_get_tma_epilogue_schedules():
    plain = enumerate_candidates(prob(), 90)
    fused = enumerate_candidates(prob(epi=BIAS_RELU), 90)
    assert any("NoSmem" in c.epilogue_schedule for c in plain)
    assert fused and all("TmaWarpSpecialized" in c.epilogue_schedule for c in fused)
    assert set(fused) < set(plain)


def test_tf32_candidates_and_mixed_output():
    tf32 = enumerate_candidates(prob(dtype="float32"), 90)
    assert tf32 and all(c.element_ab == "float" and c.align_a == 4 for c in tf32)
    assert enumerate_candidates(prob(dtype="float32"), 80)[0].element_ab == "cutlass::tfloat32_t"
    mixed = enumerate_candidates(prob(dtype="float16", out="float32"), 90)
    assert mixed and all(c.align_c == 4 for c in mixed)


@pytest.mark.parametrize(
    "p, needle",
    [
        (prob(k=100), "K=100 is not a multiple of 8"),
        (prob("TN", m=100), "M=100 is not a multiple of 8"),
        (prob(n=20), "N=20 is not a multiple of 8"),
        (prob(out="bfloat16"), "mixed input/output"),
    ],
)
def test_unsupported_reasons(p, needle):
    reason = unsupported_reason(p, 90)
    assert reason is not None and needle in reason
    with pytest.raises(CodegenError, match="cannot offload"):
        enumerate_candidates(p, 90)


def test_misaligned_m_is_fine_when_m_is_not_contiguous():
    assert unsupported_reason(prob("NN", m=100), 90) is None


def test_sm80_refuses_bias_plus_source_and_unknown_arch():
    p = prob(epi=EpilogueSpec("relu", beta=1.0, has_bias=True, has_source=True))
    assert "sm80" in unsupported_reason(p, 80)
    assert unsupported_reason(p, 90) is None
    assert "not supported" in unsupported_reason(p, 75)


def test_default_and_ranking_are_deterministic():
    p = prob(m=4096, n=4096, k=4096)
    cands = enumerate_candidates(p, 90)
    r1 = rank_candidates(p, cands)
    r2 = rank_candidates(p, list(reversed(cands)))
    assert r1 == r2 and default_candidate(p) == r1[0]
    # a tiny problem prefers a smaller tile than a big one (wave quantization)
    small = default_candidate(prob(m=256, n=256, k=4096))
    assert small.tile[0] * small.tile[1] <= r1[0].tile[0] * r1[0].tile[1]


def test_tuning_candidates_cover_different_schedules():
    p = prob(m=4096, n=4096, k=4096)
    picked = tuning_candidates(p, enumerate_candidates(p, 90), 4)
    assert len(picked) == len(set(picked)) == 4
    assert len({c.kernel_schedule for c in picked}) >= 2
    assert picked[0] == default_candidate(p)
    with pytest.raises(CodegenError, match=">= 1"):
        tuning_candidates(p, enumerate_candidates(p, 90), 0)


def _cand(cands, tile, schedule, scheduler="void", cluster=(2, 1, 1)):
    """The one candidate with this tile / kernel schedule (suffix) / tile scheduler / cluster."""
    (c,) = [
        c for c in cands
        if c.tile[:2] == tile and c.kernel_schedule.endswith(schedule) and c.cluster == cluster
        and c.tile_scheduler.rsplit("::", 1)[-1] == scheduler and "NoSmem" not in c.epilogue_schedule
    ]  # fmt: skip
    return c


def test_accumulator_registers_and_spilling_configs_are_dropped():
    p = prob(m=4096, n=4096, k=4096)
    cands = enumerate_candidates(p, 90)
    pingpong_128x256 = _cand(cands, (128, 256), "KernelTmaWarpSpecializedPingpong")
    coop_128x256 = _cand(cands, (128, 256), "KernelTmaWarpSpecializedCooperative")
    coop_256x256 = _cand(cands, (256, 256), "KernelTmaWarpSpecializedCooperative")
    pingpong_128x128 = _cand(cands, (128, 128), "KernelTmaWarpSpecializedPingpong")
    # one warpgroup owns the whole tile (ping-pong) vs two share it (cooperative)
    assert accumulator_registers(pingpong_128x256) == 256
    assert accumulator_registers(coop_128x256) == 128
    assert accumulator_registers(coop_256x256) == 256
    assert accumulator_registers(pingpong_128x128) == 128
    assert not fits_registers(pingpong_128x256) and not fits_registers(coop_256x256)
    assert fits_registers(coop_128x256) and fits_registers(pingpong_128x128)
    ranked = rank_candidates(p, cands)
    assert pingpong_128x256 not in ranked and coop_256x256 not in ranked
    assert all(accumulator_registers(c) <= MAX_ACCUMULATOR_REGISTERS for c in ranked)
    assert pingpong_128x256 not in tuning_candidates(p, cands, len(cands))
    # sm80 warp tiles: 64x64 fp32 per warp = 128 per thread
    sm80 = enumerate_candidates(p, 80)
    assert all(fits_registers(c) for c in sm80)
    with pytest.raises(CodegenError, match="fits its accumulators"):
        rank_candidates(p, [pingpong_128x256])


def test_cost_model_wave_quantization_and_stream_k():
    cands = enumerate_candidates(prob(m=4096, n=4096, k=4096), 90)
    coop = _cand(cands, (128, 256), "KernelTmaWarpSpecializedCooperative")
    coop_sk = _cand(cands, (128, 256), "KernelTmaWarpSpecializedCooperative", "StreamKScheduler")
    # exactly one wave of 132 tiles: nothing for stream-K to balance
    full = prob(m=256 * 11, n=128 * 12, k=4096)
    assert estimated_cost(full, coop, 132) < estimated_cost(full, coop_sk, 132)
    # 33 tiles on 32 SMs take two waves data-parallel; stream-K spreads the 33rd K loop
    ragged = prob(m=256 * 3, n=128 * 11, k=8192)
    assert estimated_cost(ragged, coop_sk, 32) < estimated_cost(ragged, coop, 32)
    # doubling K doubles the main loop but not the epilogue
    k1, k2 = (estimated_cost(prob(m=4096, n=4096, k=k), coop, 132) for k in (4096, 8192))
    assert 1.9 < k2 / k1 < 2.0


@pytest.mark.parametrize(
    "m, n, k, want",
    [
        (512, 512, 32768, "StreamK"),  # 16 tiles, long K: split the K loops over the SMs
        (256, 256, 4096, "StreamK"),  # 4 tiles
        (256 * 11, 128 * 12, 4096, "void"),  # exactly one full wave: data-parallel
    ],
)
def test_default_uses_stream_k_for_few_tiles_with_long_k(m, n, k, want):
    assert want in default_candidate(prob(m=m, n=n, k=k)).tile_scheduler


def test_small_problem_default_keeps_the_sms_busy():
    # 1024x1024: 128x256 tiles give 32 tiles for 132 SMs; the default must not leave 100 idle
    small = default_candidate(prob(m=1024, n=1024, k=1024))
    tiles = (1024 // small.tile[0]) * (1024 // small.tile[1])
    assert tiles >= 64 or "StreamK" in small.tile_scheduler


def test_tuning_candidates_span_designs_schedulers_and_clusters():
    p = prob(m=2048, n=2048, k=2048)
    cands = enumerate_candidates(p, 90)
    picked = tuning_candidates(p, cands, 8)
    assert picked[0] == default_candidate(p) and len(set(picked)) == 8
    assert {c.tile[0] * c.tile[1] for c in picked} >= {128 * 128, 128 * 256}
    assert any("Pingpong" in c.kernel_schedule for c in picked)
    assert any("Cooperative" in c.kernel_schedule for c in picked)
    assert any("StreamK" in c.tile_scheduler for c in picked)
    assert all(fits_registers(c) for c in picked)
    # the basic (non-persistent) kernels come only after the persistent designs
    assert not any(c.kernel_schedule.endswith("KernelTmaWarpSpecialized") for c in picked[:6])
    # cluster sizes 1 and 2 both get tried once the designs are covered
    more = tuning_candidates(p, cands, 12)
    assert {c.cluster[0] * c.cluster[1] for c in more} == {1, 2}
    assert more[:8] == picked  # a larger budget extends, never reorders


def test_shared_tuning_candidates_merge_shapes_round_robin():
    shapes = [(2048, 2048, 2048), (4096, 4096, 4096), (1024, 4096, 16384), (8192, 8192, 8192)]
    problems = [prob(m=m, n=n, k=k) for m, n, k in shapes]
    shared = shared_tuning_candidates(problems, 90, 6)
    assert len(shared) == len(set(shared)) == 6
    assert shared == shared_tuning_candidates(problems, 90, 6)  # deterministic
    cands = enumerate_candidates(problems[0], 90)
    for p in problems:  # every shape's default is in the set
        assert rank_candidates(p, cands)[0] in shared
    assert {c.tile[0] * c.tile[1] for c in shared} >= {128 * 128, 128 * 256}
    with pytest.raises(CodegenError, match="one kernel family"):
        shared_tuning_candidates([problems[0], prob(dtype="bfloat16")], 90, 4)
    with pytest.raises(CodegenError, match="no problems"):
        shared_tuning_candidates([], 90, 4)
    with pytest.raises(CodegenError, match=">= 1"):
        shared_tuning_candidates(problems, 90, 0)


def test_enumeration_includes_single_cta_clusters():
    cands = enumerate_candidates(prob(m=4096, n=4096, k=4096), 90)
    assert {c.cluster for c in cands} == {(1, 1, 1), (1, 2, 1), (2, 1, 1)}


# --- emission -----------------------------------------------------------------------------------


def spec_for(p, arch=90):
    return KernelSpec.make(p.dtype_ab, p.dtype_d, p.epilogue, default_candidate(p, arch))


def test_sm90_source_for_bias_relu():
    p = prob(epi=BIAS_RELU, m=4096, n=4096, k=4096)
    spec = spec_for(p)
    src = emit_kernel(spec)
    c = spec.candidate
    assert "cutlass::gemm::collective::CollectiveBuilder<" in src
    assert "cutlass::epilogue::collective::CollectiveBuilder<" in src
    assert "cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>" in src
    assert "LinCombPerRowBiasEltAct<cutlass::epilogue::thread::ReLu, ElementD, ElementCompute, ElementD, void" in src
    assert f"cute::Shape<cute::_{c.tile[0]}, cute::_{c.tile[1]}, cute::_{c.tile[2]}>" in src
    assert c.kernel_schedule in src and c.epilogue_schedule in src
    assert "using ElementC = void;" in src  # no source matrix: C is not read at all
    assert "args.epilogue.thread.bias_ptr" in src
    assert f'extern "C" int {spec.entry}(' in src
    assert "hw_info.sm_count = g_state.sm_count;" in src  # queried once, not per call


def test_stream_k_kernels_reset_their_workspace_every_launch():
    p = prob(m=4096, n=4096, k=4096)
    cands = enumerate_candidates(p, 90)
    sk = _cand(cands, (128, 256), "KernelTmaWarpSpecializedCooperative", "StreamKScheduler")
    dp = _cand(cands, (128, 256), "KernelTmaWarpSpecializedCooperative")
    src_sk = emit_kernel(KernelSpec.make("float16", "float16", p.epilogue, sk))
    src_dp = emit_kernel(KernelSpec.make("float16", "float16", p.epilogue, dp))
    assert "run_gemm<Gemm, true>" in src_sk and "StreamKScheduler" in src_sk
    assert "run_gemm<Gemm, false>" in src_dp
    module = emit_module([KernelSpec.make("float16", "float16", p.epilogue, sk)])
    assert "Gemm::GemmKernel::initialize_workspace(args, st.workspace, stream)" in module


def test_sm90_source_matrix_and_activations():
    for act, functor in (("gelu", "GELU"), ("silu", "SiLu"), ("identity", None)):
        p = prob(epi=EpilogueSpec(act, alpha=2.0, beta=0.5, has_source=True))
        src = emit_kernel(spec_for(p))
        assert "using ElementC = ElementD;" in src and "args.epilogue.thread.beta = beta;" in src
        if functor:
            assert f"LinCombEltAct<cutlass::epilogue::thread::{functor}," in src
        else:
            assert "fusion::LinearCombination<ElementD, ElementCompute, ElementD" in src


def test_sm80_source():
    p = prob("TT", epi=EpilogueSpec("gelu", beta=0.5, has_source=True))
    spec = spec_for(p, 80)
    src = emit_kernel(spec)
    assert "cutlass::gemm::device::GemmUniversal<" in src
    assert "LinearCombinationGeneric<cutlass::epilogue::thread::GELU" in src
    assert "cutlass::layout::RowMajor, ElementAB, cutlass::layout::RowMajor" in src
    assert "const void* src = S;" in src
    bias = emit_kernel(spec_for(prob(epi=BIAS_RELU), 80))
    assert "const void* src = bias;" in bias and "const int64_t ldc = 0;" in bias
    both = KernelSpec("float16", "float16", "relu", True, True, spec.candidate)
    with pytest.raises(CodegenError, match="cannot fuse both"):
        emit_kernel(both)


def test_module_is_deterministic_and_deduplicated():
    s1 = spec_for(prob(epi=BIAS_RELU))
    s2 = spec_for(prob("NT"))
    m1 = emit_module([s1, s2, s1])
    m2 = emit_module([s2, s1])
    assert m1 == m2
    assert m1.count(f'extern "C" int {s1.entry}(') == 1
    assert m1.startswith("#define LOOPIR_CUTLASS_SM90 1")
    assert 'extern "C" __attribute__((weak)) const char* loopir_cutlass_last_error' in m1
    # each entry point's own error getter: units of several configurations link together
    assert m1.count(f'extern "C" const char* {s1.entry}_error(void)') == 1
    assert emit_module([spec_for(prob(), 80)]).startswith("#define LOOPIR_CUTLASS_SM90 0")
    with pytest.raises(CodegenError, match="at least one"):
        emit_module([])


def test_entry_names_are_unique_per_configuration():
    p = prob(m=4096, n=4096, k=4096)
    cands = enumerate_candidates(p, 90)
    names = {KernelSpec.make("float16", "float16", p.epilogue, c).entry for c in cands}
    assert len(names) == len(cands)
    assert all(n.isidentifier() for n in names)


# --- library cache, tuning cache ------------------------------------------------------------


def test_cache_key_tracks_source_and_flags(monkeypatch):
    from loopir.codegen_cuda.cutlass import library

    monkeypatch.setattr(library, "nvcc_version", lambda: "release 13.0")
    k1 = library._cache_key("a", ["-O3"])
    assert k1 == library._cache_key("a", ["-O3", "-I/some/where"])  # include paths don't matter
    assert k1 != library._cache_key("b", ["-O3"])
    assert k1 != library._cache_key("a", ["-O2"])


def test_tuning_choice_round_trip(tmp_path):
    from loopir.codegen_cuda.cutlass import tune

    p = prob(m=4096, n=4096, k=4096)
    assert tune.lookup(p, 90, tmp_path) is None
    cand = enumerate_candidates(p, 90)[3]
    tune.record_choice(p, 90, cand, 1.25, [(cand.short, 1.25)], tmp_path)
    assert tune.lookup(p, 90, tmp_path) == cand
    assert tune.lookup(prob(m=2048, n=4096, k=4096), 90, tmp_path) is None  # other shape
    db = json.loads((tmp_path / "tuning.json").read_text())
    (key,) = db
    assert f"cutlass{cutlass_version()}" in key and "-sm90-" in key
    (tmp_path / "tuning.json").write_text("{not json")
    assert tune.lookup(p, 90, tmp_path) is None


def test_runner_helpers():
    from loopir.codegen_cuda.cutlass.hook import problem_from_signature
    from loopir.codegen_cuda.cutlass.offload import EXTERN_GEMM
    from loopir.codegen_cuda.split import extern_call_id
    from loopir.ir.expr import Call, FloatImm, IntImm, StringImm
    from loopir.ir.stmt import Evaluate

    p = prob("TN", epi=EpilogueSpec("silu", alpha=0.5, has_bias=True), batch=4)
    assert problem_from_signature(p.signature()) == p
    args = [StringImm("gemm_C"), *(StringImm(x) for x in "ABD"), StringImm(""), StringImm("")]
    args += [IntImm(1), IntImm(1), IntImm(1), IntImm(1), FloatImm(1.0), FloatImm(0.0)]
    assert extern_call_id(Evaluate(Call("int32", EXTERN_GEMM, args))) == "gemm_C"
    assert extern_call_id(Evaluate(IntImm(0))) is None


def test_array_checks_name_the_parameter():
    import numpy as np

    from loopir.codegen_cuda.cutlass.runtime import as_device

    with pytest.raises(LaunchError, match="parameter A has shape"):
        as_device(np.zeros((4, 4), np.float16), "A", (4, 8), "float16", output=False)
    with pytest.raises(LaunchError, match="parameter B has dtype float32"):
        as_device(np.zeros((4, 8), np.float32), "B", (4, 8), "float16", output=False)
    with pytest.raises(LaunchError, match="raw uint16 bits"):
        as_device(np.zeros((4, 8), np.float32), "B", (4, 8), "bfloat16", output=False)
    with pytest.raises(LaunchError, match="parameter D is a list"):
        as_device([1, 2], "D", (2,), "float16", output=True)


def test_numpy_to_bits_rounds_bf16():
    import numpy as np

    from loopir.codegen_cuda.cutlass.runtime import numpy_to_bits

    x = np.array([1.0, -2.5, 1.0 + 2**-9, 3.140625], np.float32)
    bits = numpy_to_bits(x, "bfloat16")
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(back, np.array([1.0, -2.5, 1.0, 3.140625], np.float32))


# --- one real compile ----------------------------------------------------------------------


@pytest.mark.nvcc
def test_one_module_compiles_caches_and_checks_arguments(monkeypatch):
    """Compile one sm80 kernel (the cheapest CUTLASS unit, ~30 s), reuse it from the cache."""
    import ctypes

    from loopir.codegen_cuda.cutlass.library import CutlassLibrary

    spec = spec_for(prob(epi=BIAS_RELU), 80)
    lib = CutlassLibrary([spec])  # default cache folder: built once per machine
    assert lib.path.exists() and lib.source.count('extern "C" int') == 1
    again = CutlassLibrary([spec])
    fn = again.entry(spec.entry)
    assert again.cache_hit and again.path == lib.path  # reused, not compiled (no timing asserted)
    # Argument checking happens before any CUDA call, so it works without a GPU.
    status = fn(None, None, None, None, None, 1, 1, 1, 1, ctypes.c_float(1.0), ctypes.c_float(0.0), None)
    assert status == 6
    assert spec.entry in again.last_error() and "null pointer" in again.last_error()
    # the pre-bound fast path checks the status the same way (no CUDA call reached here)
    from loopir.codegen_cuda.cutlass import library as library_mod

    monkeypatch.setattr(library_mod, "ensure_context", lambda: None)
    bound = again.bind(spec.entry, 0, 0, 0, 0, 8, 8, 1)
    with pytest.raises(LaunchError, match=r"returned 6 \(invalid argument"):
        bound()
    with pytest.raises(LaunchError, match="no entry point"):
        again.entry("nope")


@pytest.mark.nvcc
def test_nvcc_failure_reports_log_and_source(tmp_path):
    from loopir.codegen_cuda.cutlass.library import build_library

    with pytest.raises(CodegenError) as info:
        build_library("this is not C++;\n", 80, cache=tmp_path)
    text = str(info.value)
    assert "nvcc failed" in text and str(tmp_path) in text and ".cu" in text
    assert not list(tmp_path.glob("lib_*.so"))


# --- tuning and the codegen runner, with the compiler and the GPU stubbed out ----------------


class _FakeLibrary:
    """Stands in for CutlassLibrary: records what would be built and called."""

    built: list = []
    fail: str | None = None  # kernel schedule substring whose "compile" fails

    def __init__(self, specs, cache=None, timeout_s=None, extra_flags=()):
        self.specs = {s.entry: s for s in specs}
        self.source = "// fake"
        self.cache_hit = False
        self.calls: list = []
        for s in specs:
            if _FakeLibrary.fail and _FakeLibrary.fail in s.candidate.kernel_schedule:
                raise CodegenError("cutlass: nvcc failed (simulated)")
        _FakeLibrary.built.append(sorted(self.specs))

    def call(self, name, a, b, d, m, n, k, batch=1, **kw):
        self.calls.append((name, a, b, d, m, n, k, batch, kw))


def test_compile_candidates_runs_units_in_parallel_and_reports_failures(monkeypatch):
    from loopir.codegen_cuda.cutlass import tune

    monkeypatch.setattr(tune, "CutlassLibrary", _FakeLibrary)
    monkeypatch.setattr(_FakeLibrary, "fail", "Pingpong")
    p = prob(m=4096, n=4096, k=4096)
    cands = tuning_candidates(p, enumerate_candidates(p, 90), 4)
    specs = [KernelSpec.make("float16", "float16", p.epilogue, c) for c in cands]
    libs, wall, unit = tune.compile_candidates(specs, workers=3, progress=False)
    assert len(libs) == len(unit) == 4 and wall >= 0
    failed = [s for s, lib in zip(specs, libs) if lib is None]
    assert failed and all("Pingpong" in s.candidate.kernel_schedule for s in failed)
    assert all(lib is not None for s, lib in zip(specs, libs) if s not in failed)


def test_tune_needs_a_gpu_and_compiles_nothing_without_one(monkeypatch, tmp_path):
    from loopir.codegen_cuda.cutlass import library, tune

    def no_gpu():
        raise LaunchError("cutlass: pycuda is not installed; cannot run CUTLASS kernels")

    monkeypatch.setattr(library, "ensure_context", no_gpu)
    monkeypatch.setattr(tune, "CutlassLibrary", _FakeLibrary)
    _FakeLibrary.built = []
    with pytest.raises(LaunchError, match="cannot run CUTLASS"):
        tune.tune(prob(), cache=tmp_path, progress=False)
    assert _FakeLibrary.built == []
    with pytest.raises(CodegenError, match="max_candidates must be >= 1"):
        tune.tune(prob(), cache=tmp_path, max_candidates=0)
    # a cached choice is returned without touching the GPU
    cand = enumerate_candidates(prob(), 90)[1]
    tune.record_choice(prob(), 90, cand, 0.5, [(cand.short, 0.5)], tmp_path)
    res = tune.tune(prob(), cache=tmp_path)
    assert res.from_cache and res.best == cand and res.best_ms == 0.5


def _offloaded_func(layout="NN"):
    from loopir import te
    from loopir.codegen_cuda.cutlass.offload import GemmOffload

    A = te.placeholder((512, 128) if layout[0] == "N" else (128, 512), "float16", name="A")
    B = te.placeholder((128, 256), "float16", name="B")
    bias = te.placeholder((256,), "float16", name="bias")
    r = te.reduce_axis(128, name="k")

    def a_at(i):
        return A[i, r] if layout[0] == "N" else A[r, i]

    C = te.compute((512, 256), lambda i, j: te.sum(a_at(i).astype("float32") * B[r, j].astype("float32"), axis=r), name="C")
    D = te.compute((512, 256), lambda i, j: te.max(C[i, j] * 2.0 + bias[j].astype("float32"), 0.0).astype("float16"), name="D")
    return GemmOffload()(te.create_prim_func([A, B, bias, D]))


def test_extern_gemms_plan_the_calls_the_host_code_makes(tmp_path):
    from loopir.codegen_cuda.cutlass import hook, tune

    func = _offloaded_func("TN")
    plan = hook.ExternGemms(func, cache=tmp_path, tune_candidates=0)
    (call,) = plan.library_calls
    assert call["call_id"] == "gemm_C" and call["fused"] == ("D",) and not call["tuned"]
    p = hook.problem_from_signature(call["problem"])
    assert call["config"] == default_candidate(p).config()
    (c,) = plan.calls
    assert c.entry == call["kernel"] and f'int {c.entry}(' in plan.source
    assert c.operands == {"a": "A", "b": "B", "d": "D", "source": "", "bias": "bias"}
    assert (c.m, c.n, c.k, c.batch, c.alpha, c.beta) == (512, 256, 128, 1, 2.0, 0.0)
    # a tuned choice in the cache wins over the heuristic
    other = enumerate_candidates(p, 90)[2]
    tune.record_choice(p, 90, other, 0.1, [], tmp_path)
    tuned = hook.ExternGemms(func, cache=tmp_path, tune_candidates=0)
    assert tuned.library_calls[0]["tuned"] and tuned.library_calls[0]["config"] == other.config()


@pytest.mark.nvcc
def test_built_module_calls_cutlass_from_its_host_code():
    """The whole path without a GPU: the CUTLASS unit compiled to an object, linked into the
    function's library, and called by the generated host code (a trace build records it)."""
    import loopir
    from loopir import te

    A = te.placeholder((256, 128), "float16", name="A")
    B = te.placeholder((128, 256), "float16", name="B")
    r = te.reduce_axis(128, name="k")
    C = te.compute((256, 256), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r), name="C")
    D = te.compute((256, 256), lambda i, j: C[i, j].astype("float16"), name="D")
    # the session cache (tests/conftest.py): the CUTLASS unit is shared with test_module.py
    mod = loopir.build(te.create_prim_func([A, B, D]), target="cuda", nvcc_flags=("-DLOOPIR_HOST_TRACE",))
    (call,) = mod.library_calls
    assert f'int {call["kernel"]}(' in mod.cutlass_source and call["kernel"] in mod.source

    class Fake:
        def __init__(self, shape, ptr):
            self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f2", "data": (ptr, False),
                                             "version": 3, "strides": None}  # fmt: skip

    mod(Fake((256, 128), 0x1000), Fake((128, 256), 0x20000), Fake((256, 256), 0x40000))
    assert mod._library().trace().splitlines() == [
        f"call {call['kernel']} args= 0x1000 0x20000 (nil) (nil) 0x40000 256 256 128 1 1 0 (nil)"]
    with pytest.raises(LaunchError, match="parameter 'B': dimension 1 must be 256, got 255"):
        mod(Fake((256, 128), 0x1000), Fake((128, 255), 0x20000), Fake((256, 256), 0x40000))
