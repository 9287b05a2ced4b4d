"""CUTLASS convolutions without a GPU: the problem, the candidates from cutlass_library, the
emitted implicit-GEMM units, the tuning cache, the host code's calls.

Two tests (marked ``nvcc``) compile: one module holding every kind of sm80 (2.x) conv entry point
the emitter writes (fp16/bf16/TF32, fp16 -> fp32, KRSC and the permuted KCRS/RSCK filters, bias,
source, every activation), and one te function built end to end on the default sm90 (3.x) kernel
with a bias, a residual source, an activation and a permuted filter, with a trace of its host
code.
"""

from __future__ import annotations

import ctypes
import json

import attrs
import pytest

pytest.importorskip("cutlass_library")

from loopir.codegen_cuda.cutlass.emit import KernelSpec, emit_module  # noqa: E402
from loopir.codegen_cuda.cutlass.enumerate import (  # noqa: E402
    CONV_SM90_STAGES,
    default_candidate,
    enumerate_candidates,
    rank_candidates,
    tuning_candidates,
    unsupported_reason,
)
from loopir.codegen_cuda.cutlass.problem import (  # noqa: E402
    ConvProblem,
    EpilogueSpec,
    GemmProblem,
    problem_from_signature,
)
from loopir.errors import CodegenError, LaunchError  # noqa: E402
from loopir.testing.conv import ConvSpec, conv2d  # noqa: E402


def conv(dtype="float16", out=None, layout="KRSC", epi=None, c=64, k=128, **kw) -> ConvProblem:
    geo = dict(batch=32, h=28, w=28, c=c, kout=k, r=3, s=3, p=28, q=28, pad=(1, 1))
    geo.update(kw)
    return ConvProblem(**geo, dtype_ab=dtype, dtype_d=out or dtype, layout_w=layout,
                       epilogue=epi or EpilogueSpec())  # fmt: skip


def spec_for(p: ConvProblem, arch: int = 80) -> KernelSpec:
    return KernelSpec.for_problem(p, default_candidate(p, arch))


def test_problem_geometry_signature_and_validation() -> None:
    p = conv(stride=(2, 2), p=14, q=14, dilation=(1, 2), layout="KCRS")
    assert (p.m, p.n, p.k) == (32 * 14 * 14, 128, 64 * 9)
    assert p.dims() == (32, 28, 28, 64, 128, 3, 3, 14, 14, 1, 1, 2, 2, 1, 2)
    assert p.shapes()["B"] == (128, 64, 3, 3) and p.shapes()["A"] == (32, 28, 28, 64)
    assert problem_from_signature(p.signature()) == p
    assert p.key() != conv(stride=(2, 2), p=14, q=14, dilation=(1, 2)).key()  # layout is keyed
    with pytest.raises(CodegenError, match="layout_w='NCHW'"):
        conv(layout="NCHW")
    with pytest.raises(CodegenError, match="conv stride must be two ints >= 1"):
        conv(stride=(0, 1))
    with pytest.raises(CodegenError, match="kout must be a positive int"):
        conv(k=0)


@pytest.mark.parametrize("dtype, out, align_c", [
    ("float16", "float16", 8), ("bfloat16", "bfloat16", 8), ("float32", "float32", 4), ("float16", "float32", 8),
])  # fmt: skip
def test_candidates_are_sm80_optimized_fprop_kernels(dtype: str, out: str, align_c: int) -> None:
    cands = enumerate_candidates(conv(dtype, out), 80)
    assert len(cands) >= 10 and len({c.tile for c in cands}) >= 5
    align = 16 // {"float16": 2, "bfloat16": 2, "float32": 4}[dtype]
    for c in cands:
        assert c.is_conv and c.arch == 80 and "fprop_optimized" in c.name and "_nhwc_" in c.name
        assert c.iterator == "cutlass::conv::IteratorAlgorithm::kOptimized"
        assert (c.align_a, c.align_b, c.align_c) == (align, align, align_c)
        assert ("tf32" in c.name) == (dtype == "float32")
    # the GEMM candidates of the same types are other kernels (and the sm90 ones 3.x kernels)
    assert not set(cands) & set(enumerate_candidates(conv(dtype, out), 90))
    gemm = enumerate_candidates(GemmProblem(256, 256, 256, dtype, out), 90)
    assert not any(g.is_conv for g in gemm) and not set(gemm) & set(cands)


@pytest.mark.parametrize("dtype, out", [("float16", "float16"), ("bfloat16", "bfloat16"), ("float32", "float32")])
def test_sm90_candidates_are_3x_im2col_kernels_with_fp32_accumulators(dtype: str, out: str) -> None:
    p = conv(dtype, out)
    cands = enumerate_candidates(p, 90)
    for c in cands:
        assert c.is_conv and c.arch == 90 and c.iterator == "im2col_tma" and "_sm90_" in c.name
        assert c.kernel_schedule == "cutlass::conv::KernelImplicitTmaWarpSpecializedSm90"
        assert c.epilogue_schedule == "cutlass::epilogue::TmaWarpSpecialized"
    # one consumer warpgroup per tile (no persistent conv schedule on sm90): 128x256 and
    # 256x128 tiles would need 256 fp32 accumulators per thread and are never ranked
    ranked = rank_candidates(p, cands)
    assert ranked and all(c.tile[0] * c.tile[1] <= 128 * 128 for c in ranked)
    assert any(c.tile[0] * c.tile[1] > 128 * 128 for c in cands) and default_candidate(p, 90) == ranked[0]


@pytest.mark.parametrize("p, needle", [
    (conv(c=12), "C=12 input channels are not a multiple of 8"),
    (conv(k=36), "K=36 output channels are not a multiple of 8"),
    (conv("float16", "float32", k=12), "K=12 output channels are not a multiple of 8"),
    (conv("float32", c=6), "C=6 input channels are not a multiple of 4"),
    (conv(r=33, s=1), "at most 32x32"),
    (conv("float16", "bfloat16"), "mixed input/output element types"),
])  # fmt: skip
def test_unsupported_reasons(p: ConvProblem, needle: str) -> None:
    for arch in (90, 80):
        reason = unsupported_reason(p, arch)
        assert reason is not None and needle in reason
        with pytest.raises(CodegenError, match="cannot offload"):
            enumerate_candidates(p, arch)


def test_bias_plus_source_is_sm90_only() -> None:
    p = conv(epi=EpilogueSpec("relu", has_bias=True, has_source=True))
    assert unsupported_reason(p, 90) is None
    assert "bias vector and a source tensor" in (unsupported_reason(p, 80) or "")


def test_cost_model_reads_the_implicit_gemm() -> None:
    """Few output pixels and many channels want another tile than many pixels and few channels."""
    wide = conv(batch=32, h=56, w=56, p=56, q=56, c=64, k=64)
    deep = conv(batch=32, h=7, w=7, p=7, q=7, c=512, k=2048, r=1, s=1, pad=(0, 0))
    a, b = default_candidate(wide, 80), default_candidate(deep, 80)
    assert a.tile[0] >= a.tile[1] and a != b
    ranked = rank_candidates(deep, enumerate_candidates(deep, 80))
    assert ranked[0] == b and len(tuning_candidates(deep, ranked, 4)) == 4


def test_sm90_fixed_stage_counts_for_short_k() -> None:
    """CUTLASS's generator lists each sm90 conv tile with the automatic stage count only (the
    whole shared memory: one CTA per SM, and the kernel is not persistent); every tile is also
    offered with 2-4 fixed stages (a 1x1 conv of 64 channels has one 64-deep K tile: stages past
    two only take shared memory from other CTAs), emitted as ``StageCount<n>``. The automatic
    count stays the default."""
    p = conv(h=56, w=56, p=56, q=56, c=64, k=256, r=1, s=1, pad=(0, 0))
    cands = enumerate_candidates(p, 90)
    auto = [c for c in cands if c.stages == 0]
    assert len(cands) == len(auto) * (1 + len(CONV_SM90_STAGES))
    for n in CONV_SM90_STAGES:
        assert {attrs.evolve(c, stages=n) for c in auto} == {c for c in cands if c.stages == n}
    # the K tile that is the whole K, with the fewest stages, on a tile whose accumulators fit
    assert any(c.tile == (64, 256, 64) and c.stages == 2 for c in rank_candidates(p, cands))
    best = default_candidate(p, 90)
    assert best.stages == 0 and tuning_candidates(p, cands, 3)[0] == best
    two = emit_module([KernelSpec.for_problem(p, attrs.evolve(best, stages=2))])
    assert "cutlass::conv::collective::StageCount<2>,\n    cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>" in two
    assert "StageCountAutoCarveout" not in two
    assert "cutlass::conv::collective::StageCountAutoCarveout<" in emit_module([KernelSpec.for_problem(p, best)])


def test_emitted_sm90_unit() -> None:
    both = spec_for(conv(layout="RSCK", epi=EpilogueSpec("silu", beta=0.5, has_bias=True, has_source=True)), 90)
    plain = spec_for(conv("bfloat16"), 90)
    src = emit_module([both, plain])
    assert src.startswith("#define LOOPIR_CUTLASS_SM90 1\n#define LOOPIR_CUTLASS_CONV 1\n")
    assert src.count("cutlass::conv::collective::CollectiveBuilder<") == 2
    assert src.count("cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>::CollectiveOp") == 2
    # the output channels are the implicit GEMM's columns: a per-column bias
    assert "LinCombPerColBiasEltAct<cutlass::epilogue::thread::SiLu, ElementD, ElementCompute, ElementD, ElementD," in src
    assert "args.epilogue.thread.beta = beta;" in src and "args.epilogue.thread.beta = 0.0f;" in src
    assert "LinearCombination<ElementD, ElementCompute, void, ElementCompute>" in src
    assert src.count("krsc_filter<decltype(g_state), ElementAB>") == 1 and "DefaultConv2dFprop<" not in src


def test_emitted_units() -> None:
    krsc = spec_for(conv(epi=EpilogueSpec("relu", has_bias=True)))
    kcrs = spec_for(conv("bfloat16", layout="KCRS", epi=EpilogueSpec("gelu", beta=0.5, has_source=True)))
    rsck = spec_for(conv(layout="RSCK"))
    src = emit_module([krsc, kcrs, rsck])
    assert src.startswith("#define LOOPIR_CUTLASS_SM90 0\n#define LOOPIR_CUTLASS_CONV 1\n")
    assert src.count("cutlass::conv::kernel::DefaultConv2dFprop<") == 3
    assert src.count("cutlass::conv::StrideSupport::kStrided") == 3
    assert "Layout(Layout::Stride(0))" in src and "const void* src = bias;" in src  # broadcast bias
    assert "const void* src = S;" in src and "const float beta_eff = beta;" in src
    # only the KCRS and RSCK entries permute their filter, with their own strides
    assert src.count("krsc_filter<decltype(g_state), ElementAB>") == 2
    assert "(long long)C * R * S_, (long long)S_, 1LL, (long long)R * S_" in src
    assert "1LL, (long long)S_ * C * K, (long long)C * K, (long long)K" in src
    assert len({krsc.entry, kcrs.entry, rsck.entry}) == 3 and all("_conv_sm80_" in s.entry for s in (krsc, kcrs, rsck))
    gemm_only = emit_module([KernelSpec.make("float16", "float16", EpilogueSpec(),
                                             default_candidate(GemmProblem(256, 256, 256, "float16", "float16"), 80))])
    assert "#define LOOPIR_CUTLASS_CONV 0" in gemm_only
    with pytest.raises(CodegenError, match="is a GEMM kernel"):
        KernelSpec.for_problem(conv(), default_candidate(GemmProblem(256, 256, 256, "float16", "float16"), 80))


def test_sm90_convolutions_get_a_unit_of_their_own() -> None:
    from loopir.codegen_cuda.cutlass.emit import unit_groups

    conv90, conv80 = spec_for(conv(), 90), spec_for(conv())
    gemm90 = KernelSpec.make("float16", "float16", EpilogueSpec(),
                             default_candidate(GemmProblem(256, 256, 256, "float16", "float16"), 90))
    assert unit_groups([gemm90, conv90, conv80]) == [[conv90], [gemm90, conv80]]
    assert unit_groups([conv80, gemm90]) == [[conv80, gemm90]]
    with pytest.raises(CodegenError, match="need a translation unit of their own"):
        emit_module([conv90, gemm90])
    assert "#define LOOPIR_CUTLASS_CONV90 1" in emit_module([conv90])
    assert "#define LOOPIR_CUTLASS_CONV90 0" in emit_module([gemm90, conv80])


def test_tuning_choice_and_hook_plan(tmp_path) -> None:
    from loopir.codegen_cuda.cutlass import hook, tune
    from loopir.codegen_cuda.cutlass.offload import GemmOffload

    sp = ConvSpec(n=4, h=14, w=14, c=32, k=64, stride=(2, 2), layout="KCRS", activation="relu", bias=True)
    func = GemmOffload(arch=80)(conv2d(sp))
    plan = hook.ExternGemms(func, cache=tmp_path, tune_candidates=0)
    (call,) = plan.library_calls
    p = problem_from_signature(call["problem"])
    assert isinstance(p, ConvProblem) and call["config"] == default_candidate(p, 80).config() and not call["tuned"]
    (c,) = plan.calls
    assert c.conv == p.dims() == (4, 14, 14, 32, 64, 3, 3, 7, 7, 1, 1, 2, 2, 1, 1)
    assert c.int_args() == c.conv and c.operands == {"a": "X", "b": "Wt", "d": "D", "source": "", "bias": "bias"}
    assert "krsc_filter" in plan.source
    other = enumerate_candidates(p, 80)[1]
    assert tune.lookup(p, 80, tmp_path) is None
    tune.record_choice(p, 80, other, 0.5, [(other.short, 0.5)], tmp_path)
    assert tune.lookup(p, 80, tmp_path) == other
    (key,) = json.loads((tmp_path / "tuning.json").read_text())
    assert key.startswith(p.key()) and "-sm80-" in key
    tuned = hook.ExternGemms(func, cache=tmp_path, tune_candidates=0)
    assert tuned.library_calls[0]["tuned"] and tuned.library_calls[0]["config"] == other.config()


@pytest.mark.nvcc
def test_every_kind_of_conv_entry_compiles_and_checks_arguments(monkeypatch, tmp_path) -> None:
    """One nvcc call over every kind of entry point the emitter writes."""
    from loopir.codegen_cuda.cutlass import library as library_mod
    from loopir.codegen_cuda.cutlass.library import CutlassLibrary

    specs = [
        spec_for(conv(epi=EpilogueSpec("relu", has_bias=True))),
        spec_for(conv("bfloat16", layout="KCRS", epi=EpilogueSpec("gelu", alpha=0.5, beta=2.0, has_source=True))),
        spec_for(conv("float32", layout="RSCK", epi=EpilogueSpec("silu", has_bias=True))),
        spec_for(conv("float16", "float32", layout="KCRS")),
    ]
    lib = CutlassLibrary(specs, cache=tmp_path)
    assert lib.path.exists() and not lib.cache_hit and lib.source.count('extern "C" int') == 4
    # argument checks run before any CUDA call: they work without a GPU
    fn = lib.entry(specs[0].entry)
    dims = [1, 8, 8, 64, 128, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1]
    status = fn(None, None, None, None, None, *dims, ctypes.c_float(1.0), ctypes.c_float(0.0), None)
    assert status == 6 and "null pointer or invalid extent" in lib.last_error()
    monkeypatch.setattr(library_mod, "ensure_context", lambda: None)
    bad = [*dims[:13], 0, 1]  # dilation 0
    with pytest.raises(LaunchError, match=r"returned 6 \(invalid argument"):
        lib.bind(specs[0].entry, 0x1000, 0x2000, 0x3000, *bad, bias=0x4000)()
    with pytest.raises(LaunchError, match="takes 15 extents, got 4"):
        lib.call(specs[0].entry, 0x1000, 0x2000, 0x3000, 1, 2, 3, 4, bias=0x4000)


@pytest.mark.nvcc
def test_built_module_calls_the_conv_from_its_host_code() -> None:
    """te -> GemmOffload -> the sm90 conv unit (its own translation unit) linked into the
    function's library; a trace build records the call the host code makes, with the geometry and
    the folded padding."""
    import loopir

    sp = ConvSpec(n=2, h=9, w=9, c=16, k=24, stride=(2, 2), layout="KCRS", activation="relu", bias=True,
                  residual=True, beta=0.5)  # fmt: skip
    mod = loopir.build(conv2d(sp), target="cuda", nvcc_flags=("-DLOOPIR_HOST_TRACE",))
    (call,) = mod.library_calls
    assert call["fused"] == ("Xpad", "D") and call["kernel"].startswith("loopir_cutlass_conv_sm90_f16_")
    assert f'int {call["kernel"]}(' in mod.cutlass_source and call["kernel"] in mod.source
    assert "#define LOOPIR_CUTLASS_CONV90 1" in mod.cutlass_source and "LinCombPerColBiasEltAct" in mod.cutlass_source

    class Fake:
        def __init__(self, shape, ptr):
            self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f2", "data": (ptr, False),
                                             "version": 3, "strides": None}  # fmt: skip

    shapes = sp.shapes()
    mod(*(Fake(shapes[name], 0x1000 * (i + 1)) for i, name in enumerate(("X", "Wt", "bias", "S", "D"))))
    assert mod._library().trace().splitlines() == [
        f"call {call['kernel']} args= 0x1000 0x2000 0x4000 0x3000 0x5000 2 9 9 16 24 3 3 5 5 1 1 2 2 1 1 1 0.5 (nil)"]
