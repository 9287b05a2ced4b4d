"""benchmarks/conv_sweep.py without a GPU: the configurations it sweeps, the bytes it counts and
the table it prints (merged from two sweeps)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import load_script

pytest.importorskip("cutlass_library")


def _args(**kw: Any) -> argparse.Namespace:
    base = dict(shape="c2_1x1_64_256", dtypes="float16,bfloat16", stages="0,2",
                spilling="128x256x64,256x128x64", epilogues="tma,nosmem", nosmem_tk="64", gemm=0)  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_swept_configurations() -> None:
    """Every generator tile whose accumulators fit, automatic and 2 stages; the two spilling
    tiles once; NoSmem stores for the 64-deep K tiles with fixed stages; both dtypes alike."""
    from loopir.codegen_cuda.cutlass.enumerate import enumerate_candidates, fits_registers

    sweep = load_script("conv_sweep")
    specs = sweep.sweep_specs(_args())
    assert set(specs) == {"float16", "bfloat16"}
    fp16 = [s.candidate for s in specs["float16"]]
    assert [c.short for c in fp16] == [s.candidate.short for s in specs["bfloat16"]]
    assert len(fp16) == len(set(fp16)) == 33
    prob = sweep.problem_of(sweep.conv_spec(sweep.SHAPES["c2_1x1_64_256"], "float16", "plain"), "plain")
    fit = {c for c in enumerate_candidates(prob, 90) if c.stages in (0, 2) and fits_registers(c)}
    tma = [c for c in fp16 if c.epilogue_schedule.endswith("TmaWarpSpecialized")]
    assert fit <= set(tma) and {c.tile for c in set(tma) - fit} == {(128, 256, 64), (256, 128, 64)}
    assert all(c.stages == 2 and c.cluster == (1, 1, 1) for c in set(tma) - fit)
    nosmem = [c for c in fp16 if c.epilogue_schedule == sweep.NOSMEM]
    assert len(nosmem) == 7 and all(c.tile[2] == 64 and c.stages == 2 for c in nosmem)
    assert {(64, 256, 64), (128, 128, 64), (256, 64, 64)} <= {c.tile for c in nosmem}
    assert sweep.traffic_bytes(prob) == 2 * (32 * 56 * 56 * 64 + 256 * 64 + 32 * 56 * 56 * 256)
    # a 1x1 conv is also a GEMM: (N*H*W, C) row-major input, (K, C) filter, NHWC output
    gemm = sweep.gemm_equivalent(prob)
    assert (gemm.m, gemm.n, gemm.k, gemm.layout_a, gemm.layout_b) == (32 * 56 * 56, 256, 64, "row", "col")
    with_gemm = sweep.sweep_specs(_args(gemm=6))["bfloat16"]
    assert len(with_gemm) == 39 and all(not s.is_conv for s in with_gemm[33:])
    assert any("Pingpong" in s.candidate.kernel_schedule for s in with_gemm[33:])
    three = sweep.problem_of(sweep.conv_spec(sweep.SHAPES["c2_3x3_64"], "float16", "plain"), "plain")
    s2 = sweep.problem_of(sweep.conv_spec(sweep.SHAPES["c3_proj_256_512_s2"], "float16", "plain"), "plain")
    assert sweep.gemm_equivalent(three) is None and sweep.gemm_equivalent(s2) is None
    fused_tma_only = sweep.sweep_candidates(
        sweep.problem_of(sweep.conv_spec(sweep.SHAPES["c2_1x1_64_256"], "float16", "fused"), "fused"),
        {2}, set(), {"tma", "nosmem"}, {64})  # fmt: skip
    assert fused_tma_only and all(c.epilogue_schedule != sweep.NOSMEM for c in fused_tma_only)


def test_merged_table(tmp_path: Path) -> None:
    """Rows sorted by time per dtype, against the first sweep's cuDNN and copy bandwidth."""
    run = load_script("conv_sweep_run")
    base = {"shape": "c2_1x1_64_256", "bytes": 64_000_000, "bytes_in": 12_800_000, "bytes_out": 51_000_000,
            "bandwidth": {"copy_GBps": 4000.0, "write_GBps": 4200.0}}  # fmt: skip
    a = dict(base, rows=[{"dtype": "float16", "kernel": "cudnn", "ms": 0.024},
                         {"dtype": "float16", "kernel": "slow", "ms": 0.040, "rel_err": 1e-4},
                         {"dtype": "float16", "kernel": "bad", "error": "wrong: rel err 1"}])  # fmt: skip
    b = dict(base, rows=[{"dtype": "float16", "kernel": "cudnn", "ms": 1.0},
                         {"dtype": "float16", "kernel": "fast", "ms": 0.020, "rel_err": 1e-4}])  # fmt: skip
    paths = []
    for i, res in enumerate((a, b)):
        paths.append(str(tmp_path / f"{i}.json"))
        Path(paths[-1]).write_text(json.dumps(res))
    assert run.merge(paths, str(tmp_path / "m.json"), str(tmp_path / "m.txt")) == 0
    text = (tmp_path / "m.txt").read_text()
    assert text.index("  fast\n") < text.index("  cudnn\n") < text.index("  slow\n") < text.index("bad: wrong")
    merged = json.loads((tmp_path / "m.json").read_text())
    rows = {r["kernel"]: r for r in merged["rows"]}
    assert merged["best"] == {"float16": "fast"} and merged["best_by_kind"]["conv"] == {"float16": "fast"}
    assert rows["fast"]["vs_cudnn"] == pytest.approx(1.2) and rows["fast"]["frac_copy"] == pytest.approx(0.8)
    assert "floor 16.00 us" in text and sum(r == "cudnn" for r in rows) == 1
