"""Global addresses in short unrolled loops: a pointer hoisted before the loop plus a constant
(``cuda.hoist_global_base``, ``KernelEmitter.global_ptr``)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import loopir
from loopir.codegen_cuda import emit_cuda
from loopir.codegen_cuda.indexing import split_invariant
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, FloorMod, IntImm, Var
from loopir.ir.stmt import BufferStore, For, ForKind, PrimFunc
from loopir.passes.context import PassContext


def _copy(row: object, extent: object = 4, index: Buffer | None = None) -> PrimFunc:
    """``Y[bx, j, tx*4 + v] = X[row(bx, j), tx*4 + v]``: a serial loop ``j`` of float4 copies."""
    X = Buffer("X", (64, 256), "float32")
    Y = Buffer("Y", (16, 64, 256), "float32")
    bx, tx, j, v = Var("bx"), Var("tx"), Var("j"), Var("v")
    r = row(bx, j) if index is None else BufferLoad(index, (bx,)) + j  # type: ignore[operator]
    col = tx * 4 + v
    body = BufferStore(Y, BufferLoad(X, (r, col)), (bx, j, col))
    n = extent(bx) if callable(extent) else extent
    loop = For(j, 0, n, ForKind.SERIAL, For(v, 0, 4, ForKind.VECTORIZED, body))
    threads = For(tx, 0, 64, ForKind.THREAD_BINDING, loop, thread_tag="threadIdx.x")
    params = (X, Y) if index is None else (X, Y, index)
    return PrimFunc(params, For(bx, 0, 16, ForKind.THREAD_BINDING, threads, thread_tag="blockIdx.x"))


def _text(f: PrimFunc, **config: bool) -> str:
    with PassContext(config={f"cuda.{k}": v for k, v in config.items()}):
        (text,) = emit_cuda(f).kernel_texts
    return text


def test_affine_vector_copy_hoists_both_pointers() -> None:
    text = _text(_copy(lambda bx, j: bx * 4 + j))
    head, loop = text.split("for (int j = 0; j < 4; ++j)")
    assert "const float* X_base = X + bx * 1024 + tx * 4;" in head
    assert "float* Y_base = Y + bx * 16384 + tx * 4;" in head
    assert "*(float4*)(Y_base + j * 256) = *(const float4*)(X_base + j * 256);" in loop


def test_off_by_config() -> None:
    text = _text(_copy(lambda bx, j: bx * 4 + j), hoist_global_base=False)
    assert "_base" not in text
    assert "*(const float4*)(X + (bx * 4 + j) * 256 + tx * 4)" in text


def test_constant_offsets_of_any_form_in_the_loop_variable() -> None:
    # j % 3 reads only the unrolled variable: a constant in each unrolled copy
    text = _text(_copy(lambda bx, j: bx * 4 + FloorMod(j, IntImm(3, "int32"))))
    assert "*(const float4*)(X_base + j % 3 * 256)" in text


@pytest.mark.parametrize(
    "row,extent,why",
    [
        (lambda bx, j: bx * j, 4, "product of the loop variable and an outer one"),
        (lambda bx, j: bx * 4 + j, lambda bx: bx % 4 + 1, "extent not constant: not unrolled"),
        (lambda bx, j: bx * 4 + j, 1024, "too long to unroll"),
    ],
)
def test_not_hoisted(row: object, extent: object, why: str) -> None:
    text = _text(_copy(row, extent))
    assert "X_base" not in text, why


def test_index_read_from_memory_is_not_hoisted() -> None:
    # X[idx[bx] + j, ...]: the loaded row may not be read before the loop (a guard, a store)
    idx = Buffer("idx", (16,), "int32")
    text = _text(_copy(lambda bx, j: bx, index=idx))
    assert "X_base" not in text and "Y_base" in text


def test_split_invariant() -> None:
    i, j, b = Var("i"), Var("j"), Var("b")
    inner, outer = frozenset({i, j}), frozenset({b})
    base, off = split_invariant((b * 64 + i * 8 + j + 3) * 128, inner, outer)  # type: ignore[misc]
    assert str(loopir.arith.simplify(base - (b * 64 + 3) * 128)) == "0"
    assert str(loopir.arith.simplify(off - (i * 1024 + j * 128))) == "0"
    assert split_invariant(b * i, inner, outer) is None
    assert split_invariant(b + Var("t"), inner, outer) is None  # t: bound inside the loop
    assert split_invariant((b + i) // b, inner, outer) is None


def test_attention_copies_are_pointer_plus_constant() -> None:
    from loopir.codegen_cuda import prepare_function

    sch = loopir.examples.attention(1, 2, 256, 256, 128, "float16", False, wgmma=True)
    src = prepare_function(sch.func).emitted.source
    copies = re.findall(r"loopir_cp_async<16>\([^;]*, (\w+) \+ ([^,]*), \(true\) \? 16 : 0\);", src)
    assert len(copies) >= 4
    for ptr, off in copies:
        assert ptr.startswith(("K_base", "V_base")) and re.fullmatch(r"\w+ \* \d+", off), (ptr, off)


@pytest.mark.nvcc
def test_attention_compiles_with_nvcc(tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda, prepare_function

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    # the cp.async form (from 1024 keys tma="auto" takes TMA, whose copies need no base pointers)
    sch = loopir.examples.attention(4, 32, 1024, 1024, 128, "float16", False, wgmma=True, tma=False)
    src = prepare_function(sch.func).emitted.source
    assert "const half* K_base" in src
    binary = compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_frame_bytes == 0, binary.log
