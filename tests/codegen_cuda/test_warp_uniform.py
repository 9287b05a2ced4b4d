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
from loopir.ir.expr import BufferLoad, IntImm, Var
from loopir.ir.stmt import BufferStore, For, ForKind, PrimFunc
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


def _rows(tx: int, ty: int) -> PrimFunc:
    """``Y[ty, tx] = X[ty, tx] * 2`` in one block of ``tx x ty`` threads (CUDA cores only)."""
    X = Buffer("X", (ty, tx), "float32")
    Y = Buffer("Y", (ty, tx), "float32")
    x, y = Var("x"), Var("y")
    body = For(x, 0, tx, ForKind.THREAD_BINDING, BufferStore(Y, BufferLoad(X, (y, x)) * 2.0, (y, x)),
               thread_tag="threadIdx.x")
    return PrimFunc((X, Y), For(y, 0, ty, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.y"))


def _ws_attention(**config: bool) -> str:
    """The warp-specialized attention's kernel (TMA producer, wgmma consumers; 32 x 8 threads)."""
    sch = loopir.examples.attention(1, 2, 256, 256, 128, "float16", False, wgmma=True, overlap=True, tma=True)
    with PassContext(config={f"cuda.{k}": v for k, v in config.items()}):
        (text,) = prepare_function(sch.func).emitted.kernel_texts
    return text


def test_read_once_at_entry_and_used_for_roles_and_guards() -> None:
    text = _ws_attention()
    body = [ln.strip() for ln in text.split(") {", 1)[1].strip().splitlines()]
    body = [ln for ln in body if not ln.startswith("extern __shared__")]
    assert body[0] == DECL_Y  # first: the block's threads are converged there
    assert text.count("threadIdx.y") == 1, text  # only in the declaration
    assert re.search(r"const int \w+ = loopir_warp_y;", text)  # the thread loops' variables
    assert re.search(r"if \(loopir_warp_y < 4\)", text)  # the consumers' guard of a statement


def test_off_by_config() -> None:
    text = _ws_attention(warp_uniform_thread_index=False)
    assert "loopir_warp_y" not in text and "__shfl_sync(0xffffffffu, (int)threadIdx.y" not in text
    assert "((int)threadIdx.y)" in text


def test_cuda_core_kernels_read_threadIdx_y_directly() -> None:
    # scope: kernels on wgmma / TMA (module doc: ptxas answered it with a spill on sm_80's FA2)
    with PassContext():
        (text,) = emit_cuda(_rows(32, 4)).kernel_texts
    assert "loopir_warp_y" not in text and "__shfl_sync" not in text
    assert "const int y = ((int)threadIdx.y);" in text


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
