"""``cp.async`` for the copies of a software pipeline's async stages.

[`loopir.passes.software_pipeline`][loopir.passes.software_pipeline] marks the loops of async-stage
statements (``loopir.async_copy``) and places ``loopir.cp_async_commit`` / ``loopir.cp_async_wait``.
In such a loop, a store of a global element (or of ``cond ? global : 0``, the guarded fetch of local
padding) into shared memory is emitted as an asynchronous copy:

- a whole 16-byte vector (the vector path's proof of contiguity and alignment):
  ``cp.async.cg.shared.global [dst], [src], 16, src_size``;
- 4 or 8 bytes (a scalar float, a 2-lane vector): ``cp.async.ca ... N, src_size``;

with ``src_size = cond ? N : 0``: a false guard zero-fills the destination without reading the
source. Any other store in the loop (another element size, a non-zero fill, a computed value)
stays an ordinary store, which is correct: the wait then has nothing of it to wait for.
Before sm_80 the helpers copy synchronously.
"""

from __future__ import annotations

from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, FloatImm, IntImm, PrimExpr, Select
from loopir.ir.stmt import BufferStore

__all__ = ["ASYNC_HELPERS", "async_call_text", "async_scalar_store", "async_vector_text"]

ASYNC_HELPERS = r"""// Asynchronous global -> shared copies (loopir.passes.software_pipeline).
template <int N>
__device__ __forceinline__ void loopir_cp_async(void* smem, const void* gmem, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(gmem), "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" :: "r"(s), "l"(gmem), "n"(N), "r"(src_bytes));
  }
#else
  for (int b = 0; b < N; ++b)
    static_cast<char*>(smem)[b] = b < src_bytes ? static_cast<const char*>(gmem)[b] : 0;
#endif
}
__device__ __forceinline__ void loopir_cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void loopir_cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
#endif
}"""


def async_call_text(call: Call) -> str | None:
    """The CUDA of a commit or wait intrinsic (None for other calls)."""
    if call.op == "loopir.cp_async_commit":
        return "loopir_cp_async_commit();"
    if call.op == "loopir.cp_async_wait":
        n = call.args[0]
        assert isinstance(n, IntImm)
        return f"loopir_cp_async_wait<{n.value}>();"
    return None


def _zero(e: PrimExpr) -> bool:
    return isinstance(e, (IntImm, FloatImm)) and e.value == 0


def _copy_kind(dst: Buffer, src: Buffer) -> bool:
    return dst.scope == "shared" and src.scope == "global" and dst.dtype == src.dtype


def async_vector_text(dst: Buffer, src: Buffer, dptr: str, sptr: str, lanes: int, cond: str | None,
                      fill: PrimExpr | None) -> str | None:  # fmt: skip
    """``cp.async`` of one proven-contiguous vector, or None when it does not apply."""
    nbytes = lanes * dt.bits(dst.dtype) // 8
    if not _copy_kind(dst, src) or nbytes not in (4, 8, 16) or (fill is not None and not _zero(fill)):
        return None
    size = str(nbytes) if cond is None else f"({cond}) ? {nbytes} : 0"
    return f"loopir_cp_async<{nbytes}>({dptr}, {sptr}, {size});"


def async_scalar_store(s: BufferStore) -> tuple[BufferLoad, PrimExpr | None] | None:
    """``(source load, guard)`` of a scalar store that can be one 4/8-byte ``cp.async``."""
    value, cond = s.value, None
    if isinstance(value, Select) and isinstance(value.true_value, BufferLoad) and _zero(value.false_value):
        cond, value = value.condition, value.true_value
    if not isinstance(value, BufferLoad) or not _copy_kind(s.buffer, value.buffer):
        return None
    if dt.lanes(value.dtype) != 1 or dt.bits(s.buffer.dtype) // 8 not in (4, 8):
        return None
    return value, cond
