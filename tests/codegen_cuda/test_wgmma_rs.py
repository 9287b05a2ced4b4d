"""``ptx_wgmma`` with A from registers and an MN-major B in the CUDA emitter (issue 33,
FlashAttention 3's ``P V``): the helper passes A as 4 x ``.b32`` registers per K step with
``imm-trans-b`` 1 and a descriptor whose leading byte offset is the stride of B's 64-column
blocks, stepping 16 rows (2048 bytes) per instruction; K-major tiles of K past 64 (``Q K^T``
at head_dim 128) step their descriptors to the next 64-column block every 4 instructions;
operands it cannot prove are refused by name (a B off its swizzle atom or depending on the
warp, a register A off a tile start, a blocked tile off its first column)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import pytest

import loopir
from loopir.codegen_cuda import emit_function, lower_for_cuda
from loopir.errors import CodegenError
from loopir.examples.attention import attention
from loopir.ir.expr import BufferLoad, Call, PrimExpr
from loopir.ir.functor import Mutator
from loopir.ir.stmt import Evaluate, For, Stmt


def _lowered(head_dim: int) -> loopir.PrimFunc:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return lower_for_cuda(attention(1, 2, 128, 128, head_dim, wgmma=True, overlap=False).func)


@pytest.mark.parametrize("head_dim, lbo", [(64, 1), (128, 64 * 64 * 2 // 16)])
def test_helper_takes_a_from_registers_and_b_mn_major(head_dim: int, lbo: int) -> None:
    src = emit_function(_lowered(head_dim)).emitted.source
    name = f"loopir_wgmma_m64n{head_dim}k64_f16_rs_tb{lbo}"
    helper = src[src.index(f"void {name}("):]
    helper = helper[:helper.index("\n}\n")]
    regs = head_dim // 2
    # 4 K steps: A's 4 registers each, B's descriptor 16 rows (128 units of 16 bytes) further
    for s in range(4):
        first = regs + 5 * s
        assert f"{{%{first}, %{first + 1}, %{first + 2}, %{first + 3}}}, %{first + 4}, p, 1, 1, 1;" in helper
        assert f'"r"(ar[{4 * s}]), "r"(ar[{4 * s + 1}]), "r"(ar[{4 * s + 2}]), "r"(ar[{4 * s + 3}]), "l"(db + {128 * s})' in helper
    assert f"unsigned long long db = loopir_sw128_mn_desc(b, {lbo});" in helper
    assert "wgmma.wait_group.sync.aligned 0" in helper
    assert re.search(rf"{name}\(&acc\[0\], &P\[0\], &V_s\[", src)


def test_k_major_tiles_past_64_columns_step_to_the_next_block() -> None:
    """head_dim 128: S in one wgmma of K = 128; Q_s [2, 64, 64] and K_s [2, 2, 64, 64] (two
    versions): both 64-column blocks 4096 elements (512 units of 16 bytes) apart."""
    src = emit_function(_lowered(128)).emitted.source
    helper = src[src.index("void loopir_wgmma_m64n64k128_f16_ka512_kb512("):]
    helper = helper[:helper.index("\n}\n")]
    steps = [0, 2, 4, 6, 512, 514, 516, 518]
    assert re.findall(r'"l"\(da \+ (\d+)\)', helper) == re.findall(r'"l"\(db \+ (\d+)\)', helper) == list(map(str, steps))
    assert helper.count("wgmma.mma_async") == 8 and helper.count("wait_group") == 1


class _EditPV(Mutator):
    """Rewrite the operands of the ``P V`` wgmma (A from registers) with ``edit(call, ty)``,
    ``ty`` the variable of the ``threadIdx.y`` loop around it."""

    def __init__(self, edit: Callable[[Call, PrimExpr], tuple[PrimExpr, ...]], trans_b: bool = True) -> None:
        super().__init__()
        self.edit = edit
        self.trans_b = trans_b
        self.ty: list[PrimExpr] = []

    def visit_For(self, s: For) -> Stmt:
        warp = s.thread_tag == "threadIdx.y"
        if warp:
            self.ty.append(s.loop_var)
        out = self.generic_visit(s)
        if warp:
            self.ty.pop()
        return out

    def visit_Evaluate(self, s: Evaluate) -> Stmt:
        v = s.value
        if isinstance(v, Call) and v.op == "ptx_wgmma" and str(v.args[0].value).endswith(".trans_b") == self.trans_b:  # type: ignore[attr-defined]
            return Evaluate(Call(v.dtype, v.op, self.edit(v, self.ty[-1])))
        return s


def _shift(load: PrimExpr, axis: int, by: PrimExpr | int) -> BufferLoad:
    assert isinstance(load, BufferLoad)
    idx = list(load.indices)
    idx[axis] = idx[axis] + by
    return BufferLoad(load.buffer, tuple(idx))


@pytest.mark.parametrize("edit, match", [
    (lambda c, ty: (c.args[0], c.args[1], _shift(c.args[2], -2, 1), c.args[3]),
     r"ptx_wgmma b: the MN-major tile .* must start at a 1024-byte swizzle atom"),
    (lambda c, ty: (c.args[0], c.args[1], _shift(c.args[2], -2, ty % 4 * 8), c.args[3]),
     r"ptx_wgmma b: its tile .* depends on the warp"),
    (lambda c, ty: (c.args[0], _shift(c.args[1], -1, 2), c.args[2], c.args[3]),
     r"ptx_wgmma a: the register fragment .* must start at a tile"),
])  # fmt: skip
def test_unproven_operands_are_refused(edit: Callable, match: str) -> None:
    func = _lowered(128)
    bad = func.with_body(_EditPV(edit).visit(func.body))
    with pytest.raises(CodegenError, match=match):
        emit_function(bad)


def test_a_blocked_tile_off_its_first_column_is_refused() -> None:
    """The S wgmma of K = 128 reading Q from column 16: not whole 64-column blocks."""
    func = _lowered(128)
    edit = _EditPV(lambda c, ty: (c.args[0], _shift(c.args[1], -1, 16), c.args[2], c.args[3]), trans_b=False)
    with pytest.raises(CodegenError, match=r"ptx_wgmma a: a tile of K = 128 .* must start at a 1024-byte swizzle atom"):
        emit_function(func.with_body(edit.visit(func.body)))


def test_a_register_a_written_while_its_wgmma_is_in_flight_is_refused() -> None:
    """An asynchronous issue with A from registers: the tensor cores read A until the wait, so
    a store into A before ``wgmma.wait_group 0`` is refused (as one into the accumulator)."""
    from loopir.codegen_cuda.wgmma_async import check_accumulators
    from loopir.ir import op
    from loopir.ir.buffer import Buffer
    from loopir.ir.expr import FloatImm, IntImm
    from loopir.ir.stmt import BufferStore, seq

    p = Buffer("P", (4, 8), "float16", scope="local")
    v = Buffer("V_s", (64, 64), "float16", scope="shared")
    acc = Buffer("acc", (4, 8), "float32", scope="local")
    zero = IntImm(0, "int32")
    issue = op.ptx_wgmma_async(p[zero, zero], v[zero, zero], acc[zero, zero], 64, 64, trans_b=True)
    write_p = BufferStore(p, FloatImm(0.0, "float16"), (zero, zero))
    with pytest.raises(CodegenError, match=r"P of an asynchronous wgmma .* is touched before a ptx_wgmma_wait retires"):
        check_accumulators("k", seq(Evaluate(issue), write_p, Evaluate(op.ptx_wgmma_wait(0, issue))))
    check_accumulators("k", seq(Evaluate(issue), Evaluate(op.ptx_wgmma_wait(0, issue)), write_p))  # retired first
