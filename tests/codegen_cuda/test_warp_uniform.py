"""Warp-uniform thread indices (``cuda.warp_uniform_thread_index``,
``loopir.codegen_cuda.warp_uniform``): threadIdx.y / .z read once through ``__shfl_sync`` where
the block's shape makes them the same in every lane of a warp."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import loopir
from loopir.codegen_cuda import emit_cuda, prepare_function
from loopir.codegen_cuda.warp_uniform import uniform_tags
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, IntImm, PrimExpr, Var
from loopir.ir.stmt import BufferStore, For, ForKind, PrimFunc, seq
from loopir.passes.context import PassContext

DECL_Y = "const int loopir_warp_y = __shfl_sync(0xffffffffu, (int)threadIdx.y, 0);"


def _i(v: int) -> IntImm:
    return IntImm(v, "int32")


@pytest.mark.parametrize(
    "x,y,want",
    [
        (32, 4, {"threadIdx.y", "threadIdx.z"}),
        (64, 3, {"threadIdx.y", "threadIdx.z"}),
        (96, 1, {"threadIdx.y", "threadIdx.z"}),
        (16, 2, set()),  # two threadIdx.y rows share a warp
        (48, 2, set()),  # warp 1 holds y = 0 and y = 1
    ],
)
def test_uniform_tags(x: int, y: int, want: set[str]) -> None:
    assert uniform_tags({"threadIdx.x": _i(x), "threadIdx.y": _i(y), "threadIdx.z": _i(1)}) == want


def test_uniform_tags_symbolic_block() -> None:
    assert uniform_tags({"threadIdx.x": Var("n"), "threadIdx.y": _i(4)}) == frozenset()
    # x a multiple of 32 but y symbolic: threadIdx.y is uniform, .z is not known to be
    assert uniform_tags({"threadIdx.x": _i(32), "threadIdx.y": Var("n")}) == {"threadIdx.y"}


def _rows(tx: int, ty: int, guard_ty: int | None = None) -> PrimFunc:
    """``Y[ty, tx] = X[ty, tx] * 2`` in blocks of ``tx x ty`` threads; with ``guard_ty`` a second
    threadIdx.y loop of that (smaller) extent writes row ``ty + ty_extent``."""
    X = Buffer("X", (2 * ty, tx), "float32")
    Y = Buffer("Y", (2 * ty, tx), "float32")
    x, y = Var("x"), Var("y")

    def store(row: PrimExpr) -> BufferStore:
        return BufferStore(Y, BufferLoad(X, (row, x)) * 2.0, (row, x))

    body: object = For(x, 0, tx, ForKind.THREAD_BINDING, store(y), thread_tag="threadIdx.x")
    loop = For(y, 0, ty, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.y")  # type: ignore[arg-type]
    if guard_ty is None:
        return PrimFunc((X, Y), loop)
    x2, y2 = Var("x2"), Var("y2")
    inner = For(x2, 0, tx, ForKind.THREAD_BINDING, BufferStore(Y, BufferLoad(X, (y2 + ty, x2)), (y2 + ty, x2)),
                thread_tag="threadIdx.x")
    second = For(y2, 0, guard_ty, ForKind.THREAD_BINDING, inner, thread_tag="threadIdx.y")
    bx = Var("bx")  # one kernel: both threadIdx.y loops under one block loop
    return PrimFunc((X, Y), For(bx, 0, 1, ForKind.THREAD_BINDING, seq(loop, second), thread_tag="blockIdx.x"))


def _text(f: PrimFunc, **config: bool) -> str:
    with PassContext(config={f"cuda.{k}": v for k, v in config.items()}):
        (text,) = emit_cuda(f).kernel_texts
    return text


def test_read_once_at_entry_and_used_for_loops_and_guards() -> None:
    text = _text(_rows(32, 4, guard_ty=2))
    body = text.split(") {", 1)[1].strip().splitlines()
    assert body[0].strip() == DECL_Y  # first: the block's threads are converged there
    assert text.count("threadIdx.y") == 1, text  # only in the declaration
    assert "const int y = loopir_warp_y;" in text
    assert "if (loopir_warp_y < 2)" in text


def test_not_where_lanes_differ_in_y() -> None:
    text = _text(_rows(16, 4))
    assert "loopir_warp_y" not in text and "__shfl_sync" not in text
    assert "const int y = ((int)threadIdx.y);" in text


def test_off_by_config() -> None:
    text = _text(_rows(32, 4, guard_ty=2), warp_uniform_thread_index=False)
    assert "loopir_warp_y" not in text and "__shfl_sync" not in text
    assert "const int y = ((int)threadIdx.y);" in text and "if (threadIdx.y < 2)" in text


def test_only_declared_when_read() -> None:
    # a block of 32 x 1 threads without a threadIdx.y loop: nothing to declare
    X, Y, x = Buffer("X", (32,), "float32"), Buffer("Y", (32,), "float32"), Var("x")
    f = PrimFunc((X, Y), For(x, 0, 32, ForKind.THREAD_BINDING, BufferStore(Y, BufferLoad(X, (x,)), (x,)),
                             thread_tag="threadIdx.x"))
    assert "__shfl_sync" not in _text(f)


def test_warp_specialized_roles_branch_on_the_uniform_index() -> None:
    sch = loopir.examples.attention(1, 2, 256, 256, 128, "float16", False, wgmma=True, overlap=True, tma=True)
    src = prepare_function(sch.func).emitted.source
    assert DECL_Y in src
    assert re.search(r"if \(loopir_warp_y < 4\)", src)
    assert "(int)threadIdx.y)" not in src.replace(DECL_Y, "")


@pytest.mark.nvcc
def test_warp_specialized_attention_needs_fewer_registers(tmp_path: Path) -> None:
    """nvcc keeps the role's loop counters and wgmma descriptors in uniform registers: the
    consumer's per-lane registers drop (ptxas 13.0: 168 -> 138), no spills either way."""
    from loopir.codegen_cuda import compile_cuda

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    sch = loopir.examples.attention(1, 32, 4096, 4096, 128, "float16", False, wgmma=True, overlap=True, tma=True)
    regs = {}
    for on in (True, False):
        with PassContext(config={"cuda.warp_uniform_thread_index": on}):
            src = prepare_function(sch.func).emitted.source
        assert (DECL_Y in src) is on
        binary = compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
        (res,) = binary.resources.values()
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, binary.log
        regs[on] = res.registers
    assert regs[True] < regs[False], regs
