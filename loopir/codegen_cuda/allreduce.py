"""CUDA for ``thread_allreduce``: warp shuffles within a warp, shared memory across warps.

A row is the ``NT`` threads ``threadIdx.x = 0 .. NT-1`` sharing ``threadIdx.y/z``. Each warp
reduces its lanes with ``__shfl_down_sync`` (lanes past the row's end, or that do not exist,
are skipped, which is the same as contributing the identity); with more than 32 threads lane 0
of every warp publishes its part in shared memory, warp 0 combines the parts and the total is
read back by every thread. Rows narrower than a warp (a power of two) are shuffled within
their own segment of ``NT`` lanes. Across warps the call ends with ``__syncthreads()``, and
the passes treat it as a barrier (ThreadSync and the race checker order shared memory across
it); within a warp it is shuffles only, no barrier (``loopir.ir.op.is_block_barrier``).
"""

from __future__ import annotations

from typing import Any

from loopir.codegen_cuda.ctypes import ctype
from loopir.errors import CodegenError
from loopir.ir import dtype as dt
from loopir.ir.expr import BufferLoad, Call, IntImm
from loopir.ir.reducer import identity

__all__ = ["ALLREDUCE_HELPERS", "emit_allreduce"]

ALLREDUCE_HELPERS = r"""// Cross-thread reductions (loopir.thread_allreduce, see loopir/codegen_cuda/allreduce.py).
struct loopir_sum { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct loopir_max { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return b > a ? b : a; } };
struct loopir_min { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return b < a ? b : a; } };
template <int NT, typename T, typename Op>
__device__ __forceinline__ T loopir_allreduce(T v, T id, T* smem, Op op) {
  constexpr int W = (NT < 32 && (NT & (NT - 1)) == 0) ? NT : 32;  // shuffle segment
  const unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned live = min(32u, nthreads - (linear & ~31u));
  const unsigned mask = live == 32u ? 0xffffffffu : ((1u << live) - 1u);
  const int tx = (int)threadIdx.x;
  const int lane = tx & 31;
  const int nl = NT <= 32 ? NT : min(32, NT - (tx & ~31));
  #pragma unroll
  for (int off = W / 2; off > 0; off >>= 1) {
    T o = __shfl_down_sync(mask, v, off, W);
    if (lane + off < nl) v = op(v, o);
  }
  if (NT <= 32) {
    return __shfl_sync(mask, v, 0, W);
  }
  constexpr int NW = (NT + 31) / 32;
  T* s = smem + (threadIdx.y + blockDim.y * threadIdx.z) * (NW + 1);
  if (lane == 0) s[tx / 32] = v;
  __syncthreads();
  if (tx < 32) {
    T w = tx < NW ? s[tx] : id;
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) w = op(w, __shfl_down_sync(0xffffffffu, w, off));
    if (tx == 0) s[NW] = w;
  }
  __syncthreads();
  return s[NW];
}"""

# dtypes __shfl_down_sync has overloads for (cuda_fp16.h / cuda_bf16.h for the 16-bit floats)
_SHUFFLE_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "uint32", "int64", "uint64")


def emit_allreduce(em: Any, call: Call) -> str:
    """The statement for ``call`` in kernel emitter ``em`` (a KernelEmitter)."""
    reducer, acc, extent = call.args
    assert isinstance(acc, BufferLoad) and isinstance(extent, IntImm)
    op = str(getattr(reducer, "value", ""))
    nt = extent.value
    dtype = acc.dtype
    where = f"CUDA codegen: kernel {em.spec.name}: cross-thread {op} of {acc.buffer.name}"
    if dt.element(dtype) not in _SHUFFLE_DTYPES:
        raise CodegenError(f"{where}: dtype {dtype} has no warp shuffle (supported: {', '.join(_SHUFFLE_DTYPES)})")
    rows = 1
    for tag in ("threadIdx.y", "threadIdx.z"):
        ext = em.launch.get(tag, IntImm(1, "int32"))
        if not isinstance(ext, IntImm):
            raise CodegenError(f"{where}: the block's {tag} extent {ext} must be a constant")
        rows *= ext.value
    if rows > 1 and not (nt % 32 == 0 or (nt < 32 and nt & (nt - 1) == 0)):
        raise CodegenError(
            f"{where}: {rows} rows of {nt} threads would share warps; with threadIdx.y/z bound "
            "the threadIdx.x extent of a cross-thread reduction must be a power of two below 32 "
            "or a multiple of 32"
        )
    em.note_dtype(dtype)
    t = ctype(dtype)
    acc_code = em.expr(acc)
    ident = em.expr(identity(op, dtype))
    if nt <= 32:
        smem = "nullptr"
        decl = ""
    else:
        smem = em.names.get(call, "loopir_red")
        decl = f"__shared__ {t} {smem}[{rows * ((nt + 31) // 32 + 1)}]; "
        em.shared_bytes += rows * ((nt + 31) // 32 + 1) * dt.bits(dtype) // 8
    return f"{{ {decl}{acc_code} = loopir_allreduce<{nt}>({acc_code}, ({t})({ident}), ({t}*){smem}, loopir_{op}()); }}"
