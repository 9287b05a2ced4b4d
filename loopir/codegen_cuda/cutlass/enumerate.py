"""Candidate CUTLASS kernels for a :class:`GemmProblem`, enumerated with ``cutlass_library``.

The candidates come from CUTLASS's own generator (``Manifest`` + ``GenerateSM90`` /
``GenerateSM80``), the same source of kernels the CUTLASS profiler and PyTorch Inductor use, and
are filtered by element type, layout, alignment and epilogue support, then sorted
deterministically. Nothing here is a hand-written table of tile shapes.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any

import attrs

from loopir.codegen_cuda.cutlass.problem import DTYPES, GemmProblem, cutlass_operands
from loopir.errors import CodegenError

__all__ = [
    "GemmCandidate",
    "default_candidate",
    "enumerate_candidates",
    "rank_candidates",
    "supported_archs",
    "tuning_candidates",
    "unsupported_reason",
]

logger = logging.getLogger(__name__)

#: SM count used by the default heuristic when no device is queried (H100/H200 SXM: 132).
DEFAULT_SM_COUNT = {90: 132, 80: 108}

# CUDA version string handed to the generator: it gates which kernels CUTLASS emits (12.x
# enables every sm90 kernel this module uses); the real compile uses whatever nvcc is found.
_GENERATOR_CUDA_VERSION = "12.8.0"


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
        parts = [f"sm{self.arch}", t, c, f"s{self.stages}", sched, epi, ts, f"swz{swz}" if swz else ""]
        return "_".join(p for p in parts if p)

    def sort_key(self) -> tuple[Any, ...]:
        return (
            -self.arch, self.tile, self.cluster, self.stages, self.kernel_schedule,
            self.epilogue_schedule, self.tile_scheduler, self.swizzle, self.name,
        )  # fmt: skip


@functools.lru_cache(maxsize=4)
def _generator_ops(arch: int) -> tuple[Any, ...]:
    """All GEMM operations CUTLASS's generator emits for ``arch`` (cached: ~1-2 s to build)."""
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
            "--architectures", archs[arch], "--operations", "gemm",
            "--cuda-version", _GENERATOR_CUDA_VERSION, "--kernels", "all",
            "--log-level", "error",
        ]
    )  # fmt: skip
    manifest = man.Manifest(args)
    # The generator logs through the root logger at INFO; keep our logs readable.
    if arch == 90:
        gen.GenerateSM90(manifest, args.cuda_version)
    else:
        gen.GenerateSM80(manifest, args.cuda_version)
    ops: list[Any] = []
    for per_cc in manifest.operations.get(lib.OperationKind.Gemm, {}).values():
        for lst in per_cc.values():
            ops.extend(lst)
    return tuple(ops)


def unsupported_reason(problem: GemmProblem, arch: int) -> str | None:
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


def _names(lib: Any, op: Any) -> dict[str, Any]:
    return {
        "a": lib.DataTypeNames[op.A.element],
        "b": lib.DataTypeNames[op.B.element],
        "d": lib.DataTypeNames[op.D.element],
        "c": lib.DataTypeNames[op.C.element],
        "acc": lib.DataTypeNames[op.accumulator_type()],
        "math_a": lib.DataTypeNames[op.tile_description.math_instruction.element_a],
    }


def enumerate_candidates(problem: GemmProblem, arch: int = 90) -> list[GemmCandidate]:
    """Every generator kernel that can compute ``problem`` on ``arch``, sorted deterministically.

    Raises
    ------
    CodegenError
        If the problem is not supported (see :func:`unsupported_reason`) or nothing matches.
    """
    reason = unsupported_reason(problem, arch)
    if reason is not None:
        raise CodegenError(f"cutlass: cannot offload {problem.signature()}: {reason}")
    from cutlass_library import library as lib

    ops_map = cutlass_operands(problem)
    want_ab = DTYPES[problem.dtype_ab][0]
    want_d = DTYPES[problem.dtype_d][0]
    align16 = 16 // DTYPES[problem.dtype_ab][2]
    align_d = 16 // DTYPES[problem.dtype_d][2]
    seen: dict[tuple[Any, ...], GemmCandidate] = {}
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
        key = cand.sort_key()[:-1]  # the same kernel listed under several C types / names
        if key not in seen or cand.name < seen[key].name:
            seen[key] = cand
    out = sorted(seen.values(), key=GemmCandidate.sort_key)
    if not out:
        raise CodegenError(
            f"cutlass: the generator offers no sm_{arch} kernel for {problem.signature()}"
        )
    return out


def _element_tag(dtype_name: str, arch: int) -> str:
    if dtype_name == "f32":
        # sm90 builders take float and run TF32 WGMMA; 2.x kernels name the TF32 type.
        return "float" if arch == 90 else "cutlass::tfloat32_t"
    return {"f16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}[dtype_name]


def _score(problem: GemmProblem, cand: GemmCandidate, sm_count: int) -> float:
    """Heuristic quality of ``cand`` for ``problem`` (higher is better).

    Wave quantization (how full the last wave of tiles is) times the tile's arithmetic
    intensity, with small preferences for the schedules that are usually fastest on Hopper.
    """
    # CUTLASS's M' is the user's N and N' the user's M (transposed problem).
    tm, tn, _ = cand.tile
    tiles = math.ceil(problem.n / tm) * math.ceil(problem.m / tn) * problem.batch
    waves = math.ceil(tiles / sm_count)
    wave_eff = tiles / (waves * sm_count)
    # Partial edge tiles waste work too.
    edge_eff = (problem.n * problem.m) / (math.ceil(problem.n / tm) * tm * math.ceil(problem.m / tn) * tn)
    # Arithmetic intensity of the tile, saturating at 128x256: larger tiles rarely pay for their
    # register pressure and coarser waves on Hopper.
    intensity = min((tm * tn) / (tm + tn), 256 * 128 / 384) / (256 * 128 / 384)
    score = min(wave_eff, 1.0) ** 0.5 * edge_eff * intensity
    if cand.arch == 90:
        # fp32 accumulator registers per consumer thread: cooperative kernels split the tile
        # over two consumer warpgroups, ping-pong and basic kernels give each warpgroup a whole
        # tile. Past 128 the accumulators spill: on the H200 a 128x256 ping-pong kernel ran
        # 15x slower than the 128x256 cooperative one (docs/benchmarks.md, CUTLASS section).
        groups = 2 if "Cooperative" in cand.kernel_schedule else 1
        if tm * tn / (128 * groups) > 128:
            score *= 0.25
        if "Cooperative" in cand.kernel_schedule:
            score *= 1.05
        if cand.cluster == (2, 1, 1):
            score *= 1.03
        if "StreamK" in cand.tile_scheduler:
            score *= 0.97 if wave_eff > 0.8 else 1.02
        if "NoSmem" in cand.epilogue_schedule:
            score *= 0.98
    else:
        score *= 1.0 + 0.01 * cand.stages
    return score


def rank_candidates(
    problem: GemmProblem, candidates: list[GemmCandidate], sm_count: int | None = None
) -> list[GemmCandidate]:
    """``candidates`` ordered by the default heuristic, best first (ties: sort key)."""
    if not candidates:
        raise CodegenError("cutlass: rank_candidates got no candidates")
    sms = sm_count or DEFAULT_SM_COUNT.get(candidates[0].arch, 132)
    return sorted(candidates, key=lambda c: (-round(_score(problem, c, sms), 9), c.sort_key()))


def tuning_candidates(
    problem: GemmProblem, candidates: list[GemmCandidate], count: int, sm_count: int | None = None
) -> list[GemmCandidate]:
    """``count`` candidates to time: the heuristic's best of each (schedule, tile, cluster,
    scheduler) family first, so a small tuning budget still covers different kernel designs,
    then the rest in heuristic order."""
    if count < 1:
        raise CodegenError(f"cutlass: tuning candidate count must be >= 1, got {count}")
    ranked = rank_candidates(problem, candidates, sm_count)
    picked: list[GemmCandidate] = []
    # Pass 1: the best of each kernel schedule (cooperative, ping-pong, basic); pass 2: the
    # best of each (tile, tile scheduler); pass 3: the rest in heuristic order.
    family_keys = (
        lambda c: (c.kernel_schedule,),
        lambda c: (c.tile[:2], c.tile_scheduler),
        lambda c: (id(c),),
    )
    for family in family_keys:
        seen = {family(c) for c in picked}
        for cand in ranked:
            if len(picked) == count:
                return picked
            if cand not in picked and family(cand) not in seen:
                seen.add(family(cand))
                picked.append(cand)
    return picked


def default_candidate(problem: GemmProblem, arch: int = 90, sm_count: int | None = None) -> GemmCandidate:
    """The configuration used without tuning: the best candidate by :func:`rank_candidates`."""
    return rank_candidates(problem, enumerate_candidates(problem, arch), sm_count)[0]
