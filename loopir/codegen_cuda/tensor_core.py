"""CUDA for the warp-collective tensor-core calls: inline PTX ``ldmatrix`` and ``mma.sync``.

After ``LowerWarpMemory`` a fragment is a thread's ``local`` register array and a call's
fragment operand is a load of its first element; ``mma_fill`` and ``mma_store`` are plain
loops by then. What is left:

* ``ptx_ldmatrix(trans, num, dst, src)`` -> ``loopir_ldmatrix<num, trans>(&dst, &src)``:
  ``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16`` with the row address of ``src``
  converted by ``__cvta_generic_to_shared``; the ``num`` 32-bit results are copied into the
  fragment (two 16-bit elements each, the first in the low half, as PTX packs them);
* ``ptx_mma(shape, a, b, c)`` -> ``loopir_mma_m16n8k16(&c, &a, &b)``:
  ``mma.sync.aligned.m16n8k16.row.col.{f32.f16.f16.f32 | f32.bf16.bf16.f32 | f16.f16.f16.f16}``
  accumulating into ``c`` in place;
* ``ptx_shfl_xor(dst, src, mask)`` -> ``dst = __shfl_xor_sync(0xffffffff, src, mask)`` (a
  full-warp exchange of one 32-bit register per lane).

The ldmatrix asm clobbers ``memory``: the compiler must not move this thread's own shared
stores past it (a lane may supply the row it just wrote). Fragments go through ``memcpy`` to and from 32-bit registers, so a fragment needs no more
alignment than its element type; after inlining with constant offsets (the fragment loops are
unrolled) nvcc keeps it all in registers. ``ldmatrix`` rows must be 16-byte aligned: the emitter
refuses a source whose element offset it cannot prove a multiple of 8. Kernels using these need
sm_80 or newer (an ``#error`` says so for an older ``-arch``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopir import arith
from loopir.codegen_cuda.wgmma import wgmma_text
from loopir.errors import CodegenError
from loopir.ir.expr import BufferLoad, Call, IntImm, PrimExpr
from loopir.ir.op import WARPGROUP_COLLECTIVES, tensor_core_problem

if TYPE_CHECKING:
    from loopir.codegen_cuda.emitter import KernelEmitter

__all__ = ["TENSOR_CORE_HELPERS", "tensor_core_text"]


def _ldmatrix_asm(n: int, trans: bool) -> str:
    regs = ", ".join(f"%{i}" for i in range(n))
    outs = ", ".join(f'"=r"(r[{i}])' for i in range(n))
    t = ".trans" if trans else ""
    return (f'asm volatile("ldmatrix.sync.aligned.m8n8.x{n}{t}.shared.b16 {{{regs}}}, [%{n}];\\n" '
            f': {outs} : "r"(addr) : "memory");')  # fmt: skip


def _ldmatrix_helper() -> str:
    cases = []
    for n in (1, 2, 4):
        for trans in (False, True):
            cases.append(f"  if constexpr (N == {n} && {'TRANS' if trans else '!TRANS'}) {_ldmatrix_asm(n, trans)}")
    return "\n".join([
        "template <int N, bool TRANS, class T>",
        "__device__ __forceinline__ void loopir_ldmatrix(T* dst, const T* smem_row) {",
        "  unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));",
        "  unsigned r[N];",
        *cases,
        "  memcpy(dst, r, sizeof(r));",
        "}",
    ])  # fmt: skip


def _mma_helper(acc: str, ab: str, ptx: str) -> str:
    a_in = '"r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1])'
    head = [
        f"__device__ __forceinline__ void loopir_mma_m16n8k16({acc}* c, const {ab}* a, const {ab}* b) {{",
        "  unsigned A[4], B[2];",
        "  memcpy(A, a, sizeof(A));",
        "  memcpy(B, b, sizeof(B));",
    ]
    if acc == "float":
        body = [
            f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.{ptx} {{%0, %1, %2, %3}}, '
            '{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\\n"',
            f'               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : {a_in});',
        ]
    else:
        body = [
            "  unsigned C[2];",
            "  memcpy(C, c, sizeof(C));",
            f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.{ptx} {{%0, %1}}, '
            '{%2, %3, %4, %5}, {%6, %7}, {%0, %1};\\n"',
            f'               : "+r"(C[0]), "+r"(C[1]) : {a_in});',
            "  memcpy(c, C, sizeof(C));",
        ]
    return "\n".join([*head, *body, "}"])


#: Device helpers of the tensor-core calls (part of the kernels' source when used).
TENSOR_CORE_HELPERS = "\n".join([
    "// Tensor cores (loopir/codegen_cuda/tensor_core.py): ldmatrix and mma.sync, sm_80+.",
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800",
    '#error "loopir: kernels with ldmatrix / mma.sync.m16n8k16 need sm_80 or newer"',
    "#endif",
    _ldmatrix_helper(),
    _mma_helper("float", "half", "f32.f16.f16.f32"),
    _mma_helper("float", "nv_bfloat16", "f32.bf16.bf16.f32"),
    _mma_helper("half", "half", "f16.f16.f16.f16"),
])  # fmt: skip


def _address(em: KernelEmitter, load: PrimExpr) -> str:
    assert isinstance(load, BufferLoad)
    return f"&{em.buffer_name(load.buffer)}[{em.expr(em.flat_index(load.buffer, load.indices))}]"


def _check_fragment(em: KernelEmitter, call: Call, load: PrimExpr) -> None:
    assert isinstance(load, BufferLoad)
    if load.buffer.scope != "local":
        raise CodegenError(
            f"CUDA codegen: kernel {em.spec.name}: {call.op} on {load.buffer.scope} buffer "
            f"{load.buffer.name}: fragments must be registers (run LowerWarpMemory, as "
            "loopir.build(target='cuda') does)"
        )


def tensor_core_text(em: KernelEmitter, call: Call) -> str | None:
    """The CUDA of a warp-collective call (None for other calls)."""
    if call.op not in ("ptx_ldmatrix", "ptx_mma", "ptx_shfl_xor", *WARPGROUP_COLLECTIVES):
        return None
    problem = tensor_core_problem(call)
    if problem is not None:
        raise CodegenError(f"CUDA codegen: kernel {em.spec.name}: {problem}")
    if call.op == "ptx_shfl_xor":
        dst, src, mask = call.args
        assert isinstance(mask, IntImm)
        for x in (dst, src):
            _check_fragment(em, call, x)
        return f"*{_address(em, dst)} = __shfl_xor_sync(0xffffffffu, *{_address(em, src)}, {mask.value});"
    if call.op in WARPGROUP_COLLECTIVES:
        return wgmma_text(em, call)
    if call.op == "ptx_ldmatrix":
        trans, num, dst, src = call.args
        assert isinstance(trans, IntImm) and isinstance(num, IntImm) and isinstance(src, BufferLoad)
        _check_fragment(em, call, dst)
        offset = em.flat_index(src.buffer, src.indices)
        if not _multiple_of(em, offset, 8):
            raise CodegenError(
                f"CUDA codegen: kernel {em.spec.name}: the ldmatrix row {src} must be 16-byte "
                f"aligned, but its element offset {arith.simplify(offset)} is not provably a "
                "multiple of 8"
            )
        flag = "true" if trans.value else "false"
        return f"loopir_ldmatrix<{num.value}, {flag}>({_address(em, dst)}, {_address(em, src)});"
    _shape, a, b, c = call.args
    for x in (a, b, c):
        _check_fragment(em, call, x)
    return f"loopir_mma_m16n8k16({_address(em, c)}, {_address(em, a)}, {_address(em, b)});"


def _multiple_of(em: KernelEmitter, e: PrimExpr, n: int) -> bool:
    from loopir.codegen_cuda import analysis as an

    return an.is_multiple_of(e, n, em.env)
