"""Round trip as a property: ``from_source(f.script())`` is structurally equal to ``f``.

For te functions (random expressions, dtypes, reductions, symbolic sizes; the fuzzer's
workloads), for fuzzed schedules of them before and after ``loopir.lower`` with local padding
on and off, for thread-bound GPU schedules and their lowerings, and for every example. The
parsed function also prints to the same text, so printing is a fixed point.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given

import loopir
from loopir import examples as E
from loopir.errors import PassError
from loopir.ir.stmt import PrimFunc
from loopir.schedule import Schedule
from loopir.script import T, from_source
from loopir.testing.gpu_fuzz import GpuCase
from loopir.testing.strategies import gpu_schedules, schedules, te_functions, workloads
from loopir.testing.workloads import Workload


def roundtrip(f: PrimFunc) -> None:
    text = f.script()
    g = from_source(text)
    loopir.assert_structural_equal(f, g)
    assert g.script() == text


def lowered(f: PrimFunc) -> list[PrimFunc]:
    """``f`` lowered with local padding off and on (a PassError is a refusal: none then)."""
    out = []
    for pad in (False, True):
        try:
            with loopir.PassContext(config={"tir.enable_local_pad": pad}):
                out.append(loopir.lower(f))
        except PassError:
            pass
    return out


@given(te_functions())
def test_te_functions(f: PrimFunc) -> None:
    roundtrip(f)


@given(workloads())
def test_fuzzer_workloads(w: Workload) -> None:
    roundtrip(w.func)


@given(schedules(max_steps=10))
def test_fuzzed_schedules_and_their_lowerings(sch: Schedule) -> None:
    roundtrip(sch.func)
    for low in lowered(sch.func):
        roundtrip(low)


@given(gpu_schedules())
def test_gpu_schedules_and_their_lowerings(case: GpuCase) -> None:
    assert case.func is not None
    roundtrip(case.func)
    for low in lowered(case.func):
        roundtrip(low)


def _examples() -> dict[str, Any]:
    return {
        "dense": lambda: E.dense(960, 770, 2304),
        "dense_symbolic": lambda: E.dense(loopir.te.var("m"), 770, 2304),
        "dense_3_stages_unrolled": lambda: E.dense(130, 70, 150, stages=3, unroll=True, k_tiles=(2, 4), pad_a=4),
        "pipelined_gemm": lambda: E.pipelined_gemm(130, 12, 150),
        "softmax": lambda: E.softmax(4, 100),
        "layernorm": lambda: E.layernorm(3, 70),
        "rmsnorm": lambda: E.rmsnorm(5, 64),
        "row_sum": lambda: E.row_sum(2, 5000),
        "transpose": lambda: E.transpose(67, 45),
        "transpose_nopad": lambda: E.transpose(64, 32, pad=False),
        "tc_gemm": lambda: E.tc_gemm(128, 64, 128),
        "tc_gemm_padded": lambda: E.tc_gemm(97, 100, 50),
        "hopper_gemm": lambda: E.hopper_gemm(97, 100, 50, block=(64, 32, 64), wn=32),
        "hopper_gemm_ws": lambda: E.hopper_gemm(97, 200, 30, block=(64, 32, 64), wn=32, tma=True,
                                                warp_specialized=(40, 232)),  # mbarrier_arrive, setmaxnreg
        "attention": lambda: E.attention(1, 2, 70, 100, 32, causal=True, lse=True, block_m=32, fragments=False),
        "attention_fragments": lambda: E.attention(1, 2, 70, 100, 32, causal=True, lse=True, block_m=32,
                                                   fragments=True),
        "decode_attention": lambda: E.decode_attention(1, 4, loopir.Var("seq_kv"), 32, kv_heads=2),
        "tma_copy": lambda: SimpleNamespace(func=E.tma_copy(loopir.Var("M"), 72, tiles=2)),  # lowered IR
    }


def test_every_example_is_listed() -> None:
    # a new example must join the round trip
    made = {n for n in E.__all__ if not n.endswith("_func")}
    covered = {n.split("_")[0] if n.startswith(("dense", "transpose")) else n for n in _examples()}
    covered |= {n for n in _examples() if n.startswith("tc_gemm")}
    assert made <= covered | {"pipelined_gemm"}, sorted(made - covered)


@pytest.mark.parametrize("name", sorted(_examples()))
def test_examples(name: str) -> None:
    sch = _examples()[name]()
    roundtrip(sch.func)
    lows = lowered(sch.func)
    assert lows, "an example lowers"
    for low in lows:
        roundtrip(low)


@pytest.mark.parametrize("name", sorted(n for n in E.__all__ if n.endswith("_func")))
def test_example_functions(name: str) -> None:
    sizes = {"dense_func": (37, 64, 45), "tc_gemm_func": (37, 64, 45), "attention_func": (1, 2, 37, 45, 16),
             "decode_attention_func": (1, 2, 45, 16)}.get(name, (37, 64))  # fmt: skip
    roundtrip(getattr(E, name)(*sizes))


GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _printed_functions(path: Path) -> list[str]:
    """The functions printed into a golden file (several in "# before" / "# after" files)."""
    out: list[list[str]] = []
    for line in path.read_text().splitlines():
        if line.startswith("@T.prim_func"):
            out.append([line])
        elif out and out[-1] is not None and not line.startswith("#"):
            out[-1].append(line)
        elif line.startswith("#") and not line.startswith("    "):
            out.append(None)  # type: ignore[arg-type]  # a header ends the function
    return ["\n".join(f).rstrip() for f in out if f]


_SCRIPTS = sorted(
    p for p in GOLDEN.rglob("*.txt")
    if "tvm" not in p.parts and "^^^" not in p.read_text() and _printed_functions(p)
)  # fmt: skip


def test_golden_scripts_are_found() -> None:
    assert len(_SCRIPTS) > 60


@pytest.mark.parametrize("path", _SCRIPTS, ids=lambda p: str(p.relative_to(GOLDEN)))
def test_golden_scripts_parse_back_to_themselves(path: Path) -> None:
    """Every function printed into a golden file parses, and prints the same again."""
    import loopir.codegen_cuda.cutlass.offload  # noqa: F401 - registers loopir.extern_gemm

    for text in _printed_functions(path):
        assert from_source(text, file=str(path)).script() == text


def test_the_namespace_covers_what_the_printer_prints() -> None:
    from loopir.ir.expr import INTRINSICS
    from loopir.script import CONSTRUCTS
    from loopir.script.exprs import _is_dtype

    used = set()
    for p in _SCRIPTS:
        used |= set(re.findall(r"\bT\.([A-Za-z_][\w.]*)", p.read_text()))
    for name in used:
        assert (name in CONSTRUCTS or name.split(".")[0] in CONSTRUCTS or _is_dtype(name)
                or name in INTRINSICS or name == "prim_func"), name  # fmt: skip
        assert getattr(T, name.split(".")[0]) is not None
