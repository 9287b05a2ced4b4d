"""Candidate CUTLASS kernels for a [`GemmProblem`][loopir.codegen_cuda.cutlass.problem.GemmProblem]
or a [`ConvProblem`][loopir.codegen_cuda.cutlass.problem.ConvProblem], enumerated with
``cutlass_library``.

The candidates come from CUTLASS's own generator (``Manifest`` + ``GenerateSM90`` /
``GenerateSM80``), the same source of kernels the CUTLASS profiler and PyTorch Inductor use, and
are filtered by element type, layout, alignment and epilogue support, then sorted
deterministically. Nothing here is a hand-written table of tile shapes.

Convolutions come from the generator's ``conv2d`` fprop operations (NHWC, 16-byte aligned
channels, fp32 accumulation): for ``arch`` 90 the CUTLASS 3.x implicit-GEMM kernels of
``GenerateSM90`` (im2col TMA, warp-specialized; CUTLASS has no persistent conv schedule on sm_90),
for ``arch`` 80 the 2.x ``Conv2dFprop`` kernels of ``GenerateSM80`` with the optimized iterators
(they run on sm_90 too). The generator lists its sm90 conv kernels with the automatic stage count
only; each is also offered with the fixed counts of ``CONV_SM90_STAGES`` (short-K convolutions).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from typing import Any

import attrs

from loopir.codegen_cuda.cutlass.problem import (
    DTYPES,
    ConvProblem,
    GemmProblem,
    Problem,
    cutlass_operands,
)
from loopir.errors import CodegenError

__all__ = [
    "CONV_SM90_STAGES",
    "GemmCandidate",
    "default_candidate",
    "enumerate_candidates",
    "accumulator_registers",
    "estimated_cost",
    "fits_registers",
    "rank_candidates",
    "shared_tuning_candidates",
    "supported_archs",
    "tuning_candidates",
    "unsupported_reason",
]

logger = logging.getLogger(__name__)

DEFAULT_SM_COUNT = {90: 132, 80: 108}
"""SM count used by the default heuristic when no device is queried (H100/H200 SXM: 132)."""

# CUDA version string handed to the generator: it gates which kernels CUTLASS emits (12.x
# enables every sm90 kernel this module uses); the real compile uses whatever nvcc is found.
_GENERATOR_CUDA_VERSION = "12.8.0"
# Generator instantiation level (digits: pruning, cluster sizes, MMA multipliers, WGMMA shapes).
# CUTLASS's default for ``--kernels all`` is 131, which only emits 2-CTA clusters; cluster
# level 2 adds 1x1x1 clusters (no multicast, but no cluster-shaped scheduling constraint).
_GENERATOR_INSTANTIATION_LEVEL = "231"


def supported_archs() -> tuple[int, ...]:
    """The compute capabilities this module emits kernels for (90 = sm90a 3.x, 80 = 2.x)."""
    return (90, 80)


@attrs.frozen
class GemmCandidate:
    """One CUTLASS kernel configuration (in CUTLASS's transposed coordinates, see problem.py).

    Attributes
    ----------
    arch
        90 (CUTLASS 3.x, CollectiveBuilder, sm_90a) or 80 (CUTLASS 2.x device-level GEMM).
    name
        CUTLASS's procedural name of the generator kernel this configuration came from.
    tile, cluster, warp_count, instruction
        Threadblock tile (M', N', K'), cluster shape, warps per tile and MMA shape.
    stages
        Pipeline stages (0 = let the 3.x builder choose from the shared memory left over).
    kernel_schedule, epilogue_schedule, tile_scheduler
        C++ tags of the 3.x schedules (empty for 2.x).
    swizzle
        C++ threadblock swizzle of a 2.x kernel (empty for 3.x).
    layout_a, layout_b
        CUTLASS layouts of A' and B'.
    align_a, align_b, align_c
        Alignments in elements.
    element_ab
        C++ element type of A' and B'.
    math_op
        2.x math operator tag (e.g. ``cutlass::arch::OpMultiplyAdd``).
    iterator
        How an implicit-GEMM convolution reads its activations: the 2.x iterator algorithm tag
        (``cutlass::conv::IteratorAlgorithm::kOptimized``) or ``"im2col_tma"`` (3.x); "" for a
        GEMM.
    """

    arch: int
    name: str
    tile: tuple[int, int, int]
    cluster: tuple[int, int, int]
    stages: int
    warp_count: tuple[int, int, int]
    instruction: tuple[int, int, int]
    kernel_schedule: str
    epilogue_schedule: str
    tile_scheduler: str
    swizzle: str
    layout_a: str
    layout_b: str
    align_a: int
    align_b: int
    align_c: int
    element_ab: str
    math_op: str
    iterator: str = ""

    @property
    def is_conv(self) -> bool:
        """Whether this is an implicit-GEMM convolution kernel."""
        return bool(self.iterator)

    def config(self) -> dict[str, Any]:
        """JSON-ready configuration (what ``mod.library_calls`` shows)."""
        out = attrs.asdict(self)
        for key in ("tile", "cluster", "warp_count", "instruction"):
            out[key] = list(out[key])
        return out

    @property
    def short(self) -> str:
        """A compact, C-identifier-safe description used in entry point names."""
        t = "x".join(map(str, self.tile))
        c = "x".join(map(str, self.cluster))
        sched = self.kernel_schedule.rsplit("::", 1)[-1] or "sm80"
        epi = self.epilogue_schedule.rsplit("::", 1)[-1]
        ts = self.tile_scheduler.rsplit("::", 1)[-1]
        swz = "".join(ch for ch in self.swizzle if ch.isdigit())
        parts = ["conv" if self.is_conv else "", f"sm{self.arch}", t, c, f"s{self.stages}", sched,
                 epi, ts, f"swz{swz}" if swz else ""]  # fmt: skip
        return "_".join(p for p in parts if p)

    def sort_key(self) -> tuple[Any, ...]:
        return (
            -self.arch, self.tile, self.cluster, self.stages, self.kernel_schedule,
            self.epilogue_schedule, self.tile_scheduler, self.swizzle, self.iterator, self.name,
        )  # fmt: skip


@functools.lru_cache(maxsize=4)
def _generator_ops(arch: int, operation: str = "gemm") -> tuple[Any, ...]:
    """All ``operation`` ("gemm" or "conv2d") operations CUTLASS's generator emits for ``arch``
    (cached: ~1-2 s to build)."""
    try:
        from cutlass_library import generator as gen
        from cutlass_library import library as lib
        from cutlass_library import manifest as man
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise CodegenError(
            "cutlass: cutlass_library is not importable; install nvidia-cutlass "
            "(pip install --no-deps nvidia-cutlass==4.2.0.0)"
        ) from exc
    archs = {90: "90a", 80: "80"}
    if arch not in archs:
        raise CodegenError(f"cutlass: unsupported arch {arch}; supported: {supported_archs()}")
    args = gen.define_parser().parse_args(
        [
            "--architectures", archs[arch], "--operations", operation,
            "--cuda-version", _GENERATOR_CUDA_VERSION, "--kernels", "all",
            "--log-level", "error", "--instantiation-level", _GENERATOR_INSTANTIATION_LEVEL,
        ]
    )  # fmt: skip
    manifest = man.Manifest(args)
    # The generator logs through the root logger at INFO; keep our logs readable.
    if arch == 90:
        gen.GenerateSM90(manifest, args.cuda_version)
    else:
        gen.GenerateSM80(manifest, args.cuda_version)
    kind = lib.OperationKind.Gemm if operation == "gemm" else lib.OperationKind.Conv2d
    ops: list[Any] = []
    for per_cc in manifest.operations.get(kind, {}).values():
        for lst in per_cc.values():
            ops.extend(lst)
    return tuple(ops)


def unsupported_reason(problem: Problem, arch: int) -> str | None:
    """Why CUTLASS cannot take ``problem`` on ``arch`` (None when it can).

    The checks mirror the kernels' requirements: 16-byte aligned contiguous extents (TMA on
    sm90 and the vectorized loads the 2.x kernels are generated with), a supported element type
    and an epilogue the kernel family can fuse.
    """
    if arch not in supported_archs():
        return f"arch sm_{arch} is not supported (supported: {supported_archs()})"
    if problem.dtype_ab != problem.dtype_d and problem.dtype_d != "float32":
        return (
            f"mixed input/output element types {problem.dtype_ab}/{problem.dtype_d} are not "
            "offloaded"
        )
    if isinstance(problem, ConvProblem):
        return _conv_unsupported_reason(problem, arch)
    ops = cutlass_operands(problem)
    nbytes = DTYPES[problem.dtype_ab][2]
    align = 16 // nbytes
    extents = {"m": problem.m, "n": problem.n, "k": problem.k}
    for operand, key in (("A", "contig_b"), ("B", "contig_a"), ("D", "contig_d")):
        dim = ops[key]
        if extents[dim] % align:
            return (
                f"{dim.upper()}={extents[dim]} is not a multiple of {align} "
                f"({problem.dtype_ab} operand {operand} is contiguous along {dim.upper()}; "
                "CUTLASS needs 16-byte aligned rows)"
            )
    if DTYPES[problem.dtype_d][2] * problem.n % 16:
        return f"N={problem.n} rows of {problem.dtype_d} output are not 16-byte aligned"
    epi = problem.epilogue
    if arch == 80 and epi.has_bias and epi.has_source:
        return "the sm80 (2.x) epilogue cannot add both a bias vector and a source matrix"
    return None


def _conv_unsupported_reason(problem: ConvProblem, arch: int) -> str | None:
    """The fprop kernels' requirements (their ``can_implement``: 16-byte accesses along the
    channels, the 2.x iterators' filter size limit), checked early."""
    align = 16 // DTYPES[problem.dtype_ab][2]
    if problem.c % align:
        return (f"C={problem.c} input channels are not a multiple of {align} (the {problem.dtype_ab} "
                "activations and filter are read in 16-byte vectors along C)")  # fmt: skip
    align_d = max(16 // DTYPES[problem.dtype_d][2], align)
    if problem.kout % align_d:
        return (f"K={problem.kout} output channels are not a multiple of {align_d} (the "
                f"{problem.dtype_d} output is written in 16-byte vectors along K)")  # fmt: skip
    if problem.r > 32 or problem.s > 32:
        return f"filter {problem.r}x{problem.s}: the optimized iterators take at most 32x32"
    if arch == 80 and problem.epilogue.has_bias and problem.epilogue.has_source:
        return "the sm80 (2.x) epilogue cannot add both a bias vector and a source tensor"
    return None


def _names(lib: Any, op: Any) -> dict[str, Any]:
    return {
        "a": lib.DataTypeNames[op.A.element],
        "b": lib.DataTypeNames[op.B.element],
        "d": lib.DataTypeNames[getattr(op, "D", op.C).element],  # 2.x convs: C is the output
        "c": lib.DataTypeNames[op.C.element],
        "acc": lib.DataTypeNames[op.accumulator_type()],
        "math_a": lib.DataTypeNames[op.tile_description.math_instruction.element_a],
    }


# What the generator offers depends on dtypes, layouts, the epilogue's kind and the arch only,
# not on the shape; scanning its ~30k operations takes ~0.1 s, so each answer is kept.
_CANDIDATES: dict[tuple[Any, ...], tuple[GemmCandidate, ...]] = {}


def enumerate_candidates(problem: Problem, arch: int = 90) -> list[GemmCandidate]:
    """Every generator kernel that can compute ``problem`` on ``arch``, sorted deterministically.

    Raises
    ------
    CodegenError
        If the problem is not supported (see
        [`unsupported_reason`][loopir.codegen_cuda.cutlass.enumerate.unsupported_reason]) or nothing
        matches.
    """
    reason = unsupported_reason(problem, arch)
    if reason is not None:
        raise CodegenError(f"cutlass: cannot offload {problem.signature()}: {reason}")
    if isinstance(problem, ConvProblem):
        key: tuple[Any, ...] = ("conv2d_fprop", problem.dtype_ab, problem.dtype_d, arch)
    else:
        key = (problem.dtype_ab, problem.dtype_d, problem.layout_a, problem.layout_b,
               problem.epilogue.is_plain, arch)  # fmt: skip
    hit = _CANDIDATES.get(key)
    if hit is None:
        if isinstance(problem, ConvProblem):
            found = _scan_conv_sm90(problem) if arch == 90 else _scan_conv_generator(problem)
        else:
            found = _scan_generator(problem, arch)
        hit = _CANDIDATES[key] = tuple(found)
    return list(hit)


def _scan_conv_sm90(problem: ConvProblem) -> list[GemmCandidate]:
    """The generator's sm_90 3.x fprop configurations for ``problem``'s input type.

    The generator lists each configuration with one accumulator and output type (its fp16
    kernels accumulate in fp16); the tile, cluster and schedule are what is taken, with fp32
    accumulation and the problem's output type, so configurations whose fp32 accumulators do
    not fit in registers are dropped by the ranking
    ([`fits_registers`][loopir.codegen_cuda.cutlass.enumerate.fits_registers]). bf16 takes the
    fp16 configurations too (the generator lists only four bf16 ones, all 256-wide): the operands
    have the same width, so the same tiles, copies and instructions apply.
    """
    from cutlass_library import library as lib

    want_ab = DTYPES[problem.dtype_ab][0]
    align = 16 // DTYPES[problem.dtype_ab][2]
    align_d = 16 // DTYPES[problem.dtype_d][2]
    found: list[GemmCandidate] = []
    for op in _generator_ops(90, "conv2d"):
        if op.conv_kind != lib.ConvKind.Fprop or not op.is_3x or op.A.layout.name != "TensorNHWC":
            continue
        same_width = ("f16", "bf16") if want_ab in ("f16", "bf16") else (want_ab,)
        if lib.DataTypeNames[op.A.element] not in same_width or op.B.element != op.A.element:
            continue
        if op.A.alignment != align or op.B.alignment != align:
            continue
        if op.epilogue_schedule.name != "TmaWarpSpecialized":
            continue  # the bias/activation fusion needs the TMA (EVT) epilogue
        td = op.tile_description
        cand = GemmCandidate(
            arch=90, name=op.procedural_name(), tile=tuple(td.tile_shape), cluster=tuple(td.cluster_shape),
            stages=int(td.stages), warp_count=tuple(td.warp_count),
            instruction=tuple(td.math_instruction.instruction_shape),
            kernel_schedule=lib.KernelScheduleTag[op.kernel_schedule].replace("gemm::", "conv::"),
            epilogue_schedule=lib.EpilogueScheduleTag[op.epilogue_schedule], tile_scheduler="",
            swizzle="", layout_a="TensorNHWC", layout_b="TensorNHWC", align_a=align, align_b=align,
            align_c=align_d, element_ab=_element_tag(want_ab, 90), math_op="", iterator="im2col_tma",
        )  # fmt: skip
        found.extend(_with_stage_counts(cand))
    return _distinct(found, f"sm_90 conv2d fprop kernel for {problem.signature()}")


CONV_SM90_STAGES = (2, 3, 4)
"""Fixed mainloop stage counts offered besides the generator's automatic one for each sm90 conv
tile. CUTLASS's conv generator lists only ``StageCountAuto`` kernels, which fill the shared
memory (one CTA per SM); its sm90 conv kernel is not persistent, so a short-K convolution
(K = C*R*S of one or two K tiles, e.g. ResNet-50's 1x1 convs of 64 channels) then serializes
each tile's loads, MMA and output store on an SM. Fewer stages leave room for more CTAs per SM,
whose epilogues overlap the others' loads."""


def _with_stage_counts(cand: GemmCandidate) -> list[GemmCandidate]:
    """``cand`` (automatic stage count) and its variants with each of
    [`CONV_SM90_STAGES`][loopir.codegen_cuda.cutlass.enumerate.CONV_SM90_STAGES]."""
    return [cand, *(attrs.evolve(cand, stages=n) for n in CONV_SM90_STAGES)]


def _scan_conv_generator(problem: ConvProblem) -> list[GemmCandidate]:
    """The generator's sm80 implicit-GEMM fprop kernels for ``problem``'s element types (the
    optimized iterators, no groups, NHWC, 16-byte accesses, fp32 accumulation)."""
    from cutlass_library import library as lib

    want_ab = DTYPES[problem.dtype_ab][0]
    want_d = DTYPES[problem.dtype_d][0]
    align = 16 // DTYPES[problem.dtype_ab][2]
    align_d = 16 // DTYPES[problem.dtype_d][2]
    found: list[GemmCandidate] = []
    for op in _generator_ops(80, "conv2d"):
        if op.conv_kind != lib.ConvKind.Fprop or op.group_mode != lib.GroupMode.NoneGroup:
            continue
        if op.iterator_algorithm != lib.IteratorAlgorithm.Optimized:
            continue
        n = _names(lib, op)
        math_a = n["math_a"]
        if want_ab == "f32":
            ok_ab = math_a == "tf32" and n["a"] in ("f32", "tf32")
        else:
            ok_ab = n["a"] == want_ab and n["b"] == want_ab
        if not ok_ab or n["acc"] != "f32" or n["c"] != want_d or op.A.layout.name != "TensorNHWC":
            continue
        # an fp32 output of fp16/bf16 convolutions is generated with the inputs' alignment
        if op.A.alignment != align or op.B.alignment != align or op.C.alignment not in (align_d, align):
            continue
        td = op.tile_description
        if td.math_instruction.math_operation.name != "multiply_add":
            continue
        cand = GemmCandidate(
            arch=80, name=op.procedural_name(), tile=tuple(td.threadblock_shape), cluster=(1, 1, 1),
            stages=int(td.stages), warp_count=tuple(td.warp_count),
            instruction=tuple(td.math_instruction.instruction_shape),
            kernel_schedule="", epilogue_schedule="", tile_scheduler="",
            swizzle=lib.SwizzlingFunctorTag[op.swizzling_functor],
            layout_a="TensorNHWC", layout_b="TensorNHWC", align_a=align, align_b=align,
            align_c=int(op.C.alignment), element_ab=_element_tag(want_ab, 80),
            math_op=lib.MathOperationTag[td.math_instruction.math_operation],
            iterator=lib.IteratorAlgorithmTag[op.iterator_algorithm],
        )  # fmt: skip
        found.append(cand)
    return _distinct(found, f"sm_80 conv2d fprop kernel for {problem.signature()}")


def _scan_generator(problem: GemmProblem, arch: int) -> list[GemmCandidate]:
    from cutlass_library import library as lib

    ops_map = cutlass_operands(problem)
    want_ab = DTYPES[problem.dtype_ab][0]
    want_d = DTYPES[problem.dtype_d][0]
    align16 = 16 // DTYPES[problem.dtype_ab][2]
    align_d = 16 // DTYPES[problem.dtype_d][2]
    found: list[GemmCandidate] = []
    for op in _generator_ops(arch):
        n = _names(lib, op)
        if n["acc"] != "f32" or n["d"] != want_d or n["c"] not in (want_d, "void"):
            continue
        if want_ab == "f32":
            # fp32 operands run on tensor cores as TF32 only (the caller opted in).
            if n["math_a"] != "tf32" or n["a"] not in ("f32", "tf32") or n["b"] != n["a"]:
                continue
        elif n["a"] != want_ab or n["b"] != want_ab:
            continue
        if op.A.layout.name != ops_map["layout_a"] or op.B.layout.name != ops_map["layout_b"]:
            continue
        if op.C.layout.name != "ColumnMajor" or op.D.layout.name != "ColumnMajor":
            continue
        if op.A.alignment != align16 or op.B.alignment != align16 or op.C.alignment != align_d:
            continue
        td = op.tile_description
        if arch == 90:
            if not op.is_3x or op.gemm_kind != lib.GemmKind.Universal3x:
                continue
            ks = op.kernel_schedule.name
            es = op.epilogue_schedule.name
            # TMA warp-specialized kernels only: cp.async kernels are the low-alignment path,
            # PtrArray kernels are grouped GEMMs, Auto lets CUTLASS pick (not reproducible).
            if not ks.startswith("TmaWarpSpecialized") or getattr(op, "mixed_input_mode", None):
                continue
            if not problem.epilogue.is_plain and not es.startswith("TmaWarpSpecialized"):
                continue  # bias/activation fusion needs the TMA (EVT) epilogue
            if problem.epilogue.is_plain and es != "NoSmemWarpSpecialized" and not es.startswith(
                "TmaWarpSpecialized"
            ):
                continue
            cand = GemmCandidate(
                arch=90, name=op.procedural_name(),
                tile=tuple(td.tile_shape), cluster=tuple(td.cluster_shape), stages=int(td.stages),
                warp_count=tuple(td.warp_count),
                instruction=tuple(td.math_instruction.instruction_shape),
                kernel_schedule=lib.KernelScheduleTag[op.kernel_schedule],
                epilogue_schedule=lib.EpilogueScheduleTag[op.epilogue_schedule],
                tile_scheduler=lib.TileSchedulerTag[op.tile_scheduler],
                swizzle="", layout_a=ops_map["layout_a"], layout_b=ops_map["layout_b"],
                align_a=align16, align_b=align16, align_c=align_d,
                element_ab=_element_tag(want_ab, arch), math_op="",
            )  # fmt: skip
        else:
            if op.is_3x or op.gemm_kind != lib.GemmKind.Universal:
                continue
            if want_ab == "f32" and td.math_instruction.math_operation.name != "multiply_add":
                continue
            if want_ab != "f32" and td.math_instruction.math_operation.name != "multiply_add":
                continue
            cand = GemmCandidate(
                arch=80, name=op.procedural_name(),
                tile=tuple(td.threadblock_shape), cluster=(1, 1, 1), stages=int(td.stages),
                warp_count=tuple(td.warp_count),
                instruction=tuple(td.math_instruction.instruction_shape),
                kernel_schedule="", epilogue_schedule="", tile_scheduler="",
                swizzle=lib.SwizzlingFunctorTag[op.swizzling_functor],
                layout_a=ops_map["layout_a"], layout_b=ops_map["layout_b"],
                align_a=align16, align_b=align16, align_c=align_d,
                element_ab=_element_tag(want_ab, arch),
                math_op=lib.MathOperationTag[td.math_instruction.math_operation],
            )  # fmt: skip
        found.append(cand)
    return _distinct(found, f"sm_{arch} kernel for {problem.signature()}")


def _distinct(found: list[GemmCandidate], what: str) -> list[GemmCandidate]:
    """``found`` without repeats, sorted: the generator lists one kernel under several C types
    and names; the first name in order is kept.

    Raises
    ------
    CodegenError
        When nothing was found (``what`` names the request).
    """
    seen: dict[tuple[Any, ...], GemmCandidate] = {}
    for cand in found:
        key = cand.sort_key()[:-1]
        if key not in seen or cand.name < seen[key].name:
            seen[key] = cand
    if not seen:
        raise CodegenError(f"cutlass: the generator offers no {what}")
    return sorted(seen.values(), key=GemmCandidate.sort_key)


def _element_tag(dtype_name: str, arch: int) -> str:
    if dtype_name == "f32":
        # sm90 builders take float and run TF32 WGMMA; 2.x kernels name the TF32 type.
        return "float" if arch == 90 else "cutlass::tfloat32_t"
    return {"f16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}[dtype_name]


MAX_ACCUMULATOR_REGISTERS = 128
"""Most fp32 accumulator registers per consumer thread a sm90 kernel may need. Consumer
warpgroups get 232-240 registers (``setmaxnreg``); a 256-register accumulator tile cannot fit
and spills to local memory: on the H200 the 128x256 ping-pong kernel (256 accumulators per
thread) ran 15x slower than the 128x256 cooperative one (docs/benchmarks.md, CUTLASS section)."""


def accumulator_registers(cand: GemmCandidate) -> int:
    """fp32 accumulator registers per MMA thread of ``cand``.

    sm90: cooperative kernels split the tile over two consumer warpgroups (256 threads),
    ping-pong and basic kernels give one warpgroup (128 threads) a whole tile. sm80: each warp
    (32 threads) owns a ``tile / warp_count`` warp tile.
    """
    tm, tn, _ = cand.tile
    if cand.arch == 90:
        threads = 256 if "Cooperative" in cand.kernel_schedule else 128
    else:
        threads = 32 * cand.warp_count[0] * cand.warp_count[1] * cand.warp_count[2]
    return tm * tn // threads


def fits_registers(cand: GemmCandidate) -> bool:
    """Whether ``cand``'s accumulators fit in registers (see
    [`MAX_ACCUMULATOR_REGISTERS`][loopir.codegen_cuda.cutlass.enumerate.MAX_ACCUMULATOR_REGISTERS]).

    Only sm90 kernels are filtered: CUTLASS's 2.x generator configurations are already sized to
    fit (warp tiles of at most 64x64 fp32 accumulators).
    """
    return cand.arch != 90 or accumulator_registers(cand) <= MAX_ACCUMULATOR_REGISTERS


# Cost model constants (relative units: one 128x256x64 main-loop iteration of one SM = 1.0).
# Per-tile overhead of the epilogue + pipeline fill, in main-loop iterations of a 128x256 tile:
# the epilogue writes the tile once (a 128x256 fp16 tile is ~1.3 iterations of operand traffic)
# and the pipeline drains and refills between tiles. Ping-pong kernels overlap one warpgroup's
# epilogue with the other's main loop, so they pay less of it.
_EPILOGUE_ITERS = 4.0
_PINGPONG_EPILOGUE_ITERS = 1.5
# Stream-K: partial tiles go through an fp32 workspace (write + read back), about two epilogues.
_STREAMK_FIXUP_ITERS = 8.0


def _mainloop_efficiency(cand: GemmCandidate) -> float:
    """Relative main-loop throughput of one SM running ``cand`` (1.0: 128x256 cooperative).

    Smaller tiles load more operand bytes per FLOP (arithmetic intensity tm*tn/(tm+tn));
    non-persistent kernels relaunch CTAs per tile; 2-CTA clusters multicast one operand.
    """
    tm, tn, _ = cand.tile
    intensity = (tm * tn) / (tm + tn) / (128 * 256 / 384)
    eff: float = min(intensity, 1.0) ** 0.35  # a positive base: a float, never complex
    if cand.arch == 90:
        if "Cooperative" not in cand.kernel_schedule and "Pingpong" not in cand.kernel_schedule:
            eff *= 0.93  # basic: one CTA per tile, no persistent overlap
        if cand.cluster[0] * cand.cluster[1] == 2:
            # TMA multicast halves one operand's L2 traffic. 2x1 (pairs along M', the user's
            # N) is slightly preferred: it is the cluster of the kernel measured at 0.97x
            # cuBLAS on the H200 (docs/benchmarks.md), the 1x2 one was not measured.
            eff *= 1.02 if cand.cluster[0] == 2 else 1.015
        if "NoSmem" in cand.epilogue_schedule:
            eff *= 0.98  # uncoalesced direct stores
    else:
        eff *= 0.7 + 0.01 * cand.stages  # 2.x mma.sync kernels on Hopper
    return eff


def estimated_cost(problem: Problem, cand: GemmCandidate, sm_count: int) -> float:
    """Modelled run time of ``cand`` on ``problem`` (relative units; lower is better).

    Tiles are scheduled in waves over ``sm_count`` SMs. A data-parallel kernel pays for the
    last, partly idle wave in full (wave quantization); a stream-K kernel splits the
    remainder's K loops over all SMs at the price of a partial-sum fix-up. Each tile costs its
    K loop plus a fixed epilogue overhead, divided by the tile's main-loop efficiency, so
    short-K problems favour smaller tiles and long-K problems with few tiles favour stream-K.
    """
    tm, tn, tk = cand.tile
    if isinstance(problem, ConvProblem):
        # implicit GEMM, not transposed: M' is N*P*Q (output pixels), N' the output channels
        tiles = math.ceil(problem.m / tm) * math.ceil(problem.n / tn)
    else:
        # CUTLASS's M' is the user's N and N' the user's M (transposed problem).
        tiles = math.ceil(problem.n / tm) * math.ceil(problem.m / tn) * problem.batch
    k_iters = math.ceil(problem.k / tk)
    area = (tm * tn) / (128 * 256)
    pingpong = "Pingpong" in cand.kernel_schedule
    epi = (_PINGPONG_EPILOGUE_ITERS if pingpong else _EPILOGUE_ITERS) * area
    per_iter = area / _mainloop_efficiency(cand)
    tile_cost = k_iters * per_iter + epi
    full, rem = divmod(tiles, sm_count)
    if "StreamK" in cand.tile_scheduler and rem:
        # CUTLASS's heuristic keeps full waves data-parallel and spreads the rest over the SMs.
        return full * tile_cost + rem * k_iters * per_iter / sm_count + epi + _STREAMK_FIXUP_ITERS * area
    cost = math.ceil(tiles / sm_count) * tile_cost
    if "StreamK" in cand.tile_scheduler:
        cost *= 1.01  # same schedule as data-parallel, plus the workspace reset
    return cost


def rank_candidates(
    problem: Problem, candidates: list[GemmCandidate], sm_count: int | None = None
) -> list[GemmCandidate]:
    """``candidates`` ordered by the default heuristic
    ([`estimated_cost`][loopir.codegen_cuda.cutlass.enumerate.estimated_cost]), best first.

    Candidates whose accumulators do not fit in registers are dropped (see
    [`fits_registers`][loopir.codegen_cuda.cutlass.enumerate.fits_registers]); ties are broken by
    the sort key, so the order is deterministic.
    """
    if not candidates:
        raise CodegenError("cutlass: rank_candidates got no candidates")
    sms = sm_count or DEFAULT_SM_COUNT.get(candidates[0].arch, 132)
    fit = [c for c in candidates if fits_registers(c)]
    if not fit:
        raise CodegenError(
            f"cutlass: none of the {len(candidates)} candidates fits its accumulators in "
            f"registers (limit {MAX_ACCUMULATOR_REGISTERS} per thread)"
        )
    return sorted(fit, key=lambda c: (round(estimated_cost(problem, c, sms), 6), c.sort_key()))


_COMPETITIVE = 1.3
"""Candidates modelled within this factor of the best are "competitive" for tuning."""


def tuning_candidates(
    problem: Problem, candidates: list[GemmCandidate], count: int, sm_count: int | None = None
) -> list[GemmCandidate]:
    """``count`` candidates worth timing for ``problem``, the heuristic's default first.

    The cost model is only a model, so the set is spread over kernel designs rather than taken
    from the top of the ranking (which would be near-copies of one design): first the best of
    each design (tile area, kernel schedule) among the competitive candidates (modelled within
    1.3x of the best), then the best stream-K / data-parallel alternative of each design, then
    the transposed tile (128x256 vs 256x128), then the other cluster shapes, then the rest in
    heuristic order. Candidates whose accumulators
    spill are never proposed.

    Raises
    ------
    CodegenError
        If ``count`` < 1.
    """
    if count < 1:
        raise CodegenError(f"cutlass: tuning candidate count must be >= 1, got {count}")
    sms = sm_count or DEFAULT_SM_COUNT.get(candidates[0].arch, 132) if candidates else 132
    ranked = rank_candidates(problem, candidates, sms)
    best = estimated_cost(problem, ranked[0], sms)
    # Non-persistent ("basic") sm90 kernels run the same main loop as the persistent kernel of
    # their tile without overlapping tile transitions: they are only tried after the others.
    competitive = [
        c for c in ranked
        if estimated_cost(problem, c, sms) <= _COMPETITIVE * best and _persistent(c)
    ]  # fmt: skip
    picked: list[GemmCandidate] = [ranked[0]]
    def design(c: GemmCandidate) -> tuple[Any, ...]:
        # tile area + schedule: 128x256 and 256x128 cooperative are one design
        return (c.tile[0] * c.tile[1], c.kernel_schedule)

    passes = (
        (competitive, design),
        (competitive, lambda c: (*design(c), "StreamK" in c.tile_scheduler)),
        (competitive, lambda c: (c.tile[:2], c.kernel_schedule, "StreamK" in c.tile_scheduler)),
        # cluster size 1 vs 2: no multicast, but no paired-CTA scheduling constraint
        (competitive, lambda c: (c.tile[:2], c.kernel_schedule, c.tile_scheduler, c.cluster[0] * c.cluster[1])),
        (ranked, design),
        (ranked, lambda c: c.sort_key()),
    )
    for pool, family in passes:
        seen = {family(c) for c in picked}
        for cand in pool:
            if len(picked) >= count:
                return picked
            if cand not in picked and family(cand) not in seen:
                seen.add(family(cand))
                picked.append(cand)
    return picked[:count]


def _persistent(cand: GemmCandidate) -> bool:
    return cand.arch != 90 or "Cooperative" in cand.kernel_schedule or "Pingpong" in cand.kernel_schedule


def _family(p: Problem) -> tuple[Any, ...]:
    """What decides a problem's kernels (all but its shape)."""
    if isinstance(p, ConvProblem):
        return ("conv2d_fprop", p.dtype_ab, p.dtype_d, p.layout_w, p.epilogue)
    return (p.dtype_ab, p.dtype_d, p.layout_a, p.layout_b, p.epilogue)


def shared_tuning_candidates(
    problems: Sequence[Problem], arch: int, count: int, sm_count: int | None = None
) -> list[GemmCandidate]:
    """One set of at most ``count`` kernels to tune several problems of one kernel family.

    The problems (GEMMs, or convolutions) must share element types, layouts and epilogue (they
    differ in shape), so one compiled kernel serves all of them; only their shapes differ. Each problem's
    [`tuning_candidates`][loopir.codegen_cuda.cutlass.enumerate.tuning_candidates] list is merged
    round-robin (every default first, then every problem's second choice, ...), so each shape class
    gets its best guesses compiled. Deterministic for a given list of problems.

    Raises
    ------
    CodegenError
        If ``problems`` is empty, ``count`` < 1, or the problems are different kernel families.
    """
    if not problems:
        raise CodegenError("cutlass: shared_tuning_candidates got no problems")
    if count < 1:
        raise CodegenError(f"cutlass: tuning candidate count must be >= 1, got {count}")
    families = {_family(p) for p in problems}
    if len(families) != 1:
        raise CodegenError(
            f"cutlass: shared_tuning_candidates needs one kernel family, got {len(families)}: "
            f"{sorted(map(str, families))}"
        )
    candidates = enumerate_candidates(problems[0], arch)
    lists = [tuning_candidates(p, candidates, count, sm_count) for p in problems]
    out: list[GemmCandidate] = []
    for i in range(count):
        for lst in lists:
            if len(out) == count:
                return out
            if i < len(lst) and lst[i] not in out:
                out.append(lst[i])
    return out


def default_candidate(problem: Problem, arch: int = 90, sm_count: int | None = None) -> GemmCandidate:
    """The configuration used without tuning: the best candidate by
    [`rank_candidates`][loopir.codegen_cuda.cutlass.enumerate.rank_candidates]."""
    return rank_candidates(problem, enumerate_candidates(problem, arch), sm_count)[0]
