"""benchmarks/conv.py without a GPU: every ResNet-50 shape it times is handed to CUTLASS with
the geometry it says, its tuning candidates match the module's problems (so the tuned choices are
the ones ``loopir.build`` reads), and the stem is refused with its rule."""

from __future__ import annotations

from typing import Any

import pytest

from tests.benchmarks import load_script

pytest.importorskip("cutlass_library")


def _module() -> Any:
    return load_script("conv")


@pytest.mark.parametrize("family", ["plain", "fused"])
def test_every_shape_is_offloaded_as_the_benchmark_tunes_it(family: str) -> None:
    from loopir.codegen_cuda.cutlass.offload import GemmOffload, library_calls_of
    from loopir.codegen_cuda.cutlass.problem import problem_from_signature

    conv = _module()
    assert len(conv.SHAPES) == 22
    for name, shape in conv.SHAPES.items():
        sp = conv.conv_spec(shape, "bfloat16", family)
        p = GemmOffload()
        (call,) = library_calls_of(p(conv.conv2d(sp))).values()
        # the tuning key of the benchmark's problem is the one the module build looks up
        assert problem_from_signature(call["problem"]) == conv.problem_of(sp, family), name
        h, c, k, r, stride = shape
        assert call["problem"]["p"] == (h + 2 * (r // 2) - r) // stride + 1


def test_candidates_and_stem() -> None:
    conv = _module()
    fams = conv.candidate_specs(["float16", "bfloat16"], {"plain": 3, "fused": 2})
    assert {k: len(v) for k, v in fams.items()} == {
        ("float16", "plain"): 3, ("float16", "fused"): 2, ("bfloat16", "plain"): 3, ("bfloat16", "fused"): 2}
    assert all(s.is_conv and s.candidate.arch == conv.ARCH for specs in fams.values() for s in specs)
    assert fams[("float16", "fused")][0].has_bias and fams[("float16", "fused")][0].activation == "relu"
    assert "C=3 input channels are not a multiple of 8" in conv.stem_reason("float16")
