"""CUDA for TMA copies and mbarriers (sm_90a): device calls, kernel parameters, host encoding.

Device side (``TMA_DEVICE_HELPERS``), one inline function per call of
[`loopir.ir.tma`][loopir.ir.tma]:

* ``ptx_mbarrier_init`` -> ``mbarrier.init.shared::cta.b64``, then
  ``fence.mbarrier_init.release.cluster`` (CUTLASS's ``fence_barrier_init``: the init is made
  visible to the async proxy that completes the transactions);
* ``ptx_mbarrier_arrive_expect_tx`` -> ``mbarrier.arrive.expect_tx.shared::cta.b64``;
* ``ptx_mbarrier_arrive`` -> ``mbarrier.arrive.shared::cta.b64`` with a count (release);
* ``ptx_mbarrier_wait`` -> ``mbarrier.try_wait.parity.shared::cta.b64`` in a loop until it
  succeeds;
* ``ptx_setmaxnreg`` -> ``setmaxnreg.{inc,dec}.sync.aligned.u32``;
* ``ptx_tma_load`` -> ``fence.proxy.async.shared::cta`` (the issuing thread's own earlier
  shared accesses ordered before the async proxy's write; other threads' are ordered by the
  fence before every barrier) and
  ``cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes`` with the
  coordinates innermost first, through a tensor map.

Each distinct ``(global buffer, box, swizzle)`` of a kernel's copies is one tensor map
([`TensorMapParam`][loopir.codegen_cuda.tma.TensorMapParam]), passed to the kernel as a
``const __grid_constant__ CUtensorMap`` parameter after the scalars (the copy names its address;
a map must live in parameter, constant or global memory). The host program encodes it before
the launch with ``cuTensorMapEncodeTiled``, obtained through
``cudaGetDriverEntryPointByVersion`` (no link-time dependency on ``libcuda``), and keeps it in
a thread-local static of the launch site with the pointer, sizes and device it was made for: it is encoded
again only when one of them changes (``TMA_HOST_HELPERS``). Out-of-bounds elements are filled
with zeros (``CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE``).

Checked here (a [`CodegenError`][loopir.errors.CodegenError] naming the kernel, the buffer and
the value): the global buffer is compact, its strides (``prod(shape[i + 1:]) * element size``)
are multiples of 16 bytes where the shape is constant (the host checks symbolic ones at each
call), and the shared tile starts at a multiple of 128 bytes (1024 when swizzled: the swizzle
pattern follows address bits 7-9, which the CPU executor's meaning takes relative to the tile).
Every shared buffer of a kernel with TMA is 1024-byte aligned for this, and a
``fence.proxy.async.shared::cta`` precedes each ``__syncthreads()`` as in kernels with ``wgmma``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from loopir.codegen_cuda import analysis as an
from loopir.errors import CodegenError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, IntImm
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import Stmt
from loopir.ir.tma import is_tma_call, tma_box, tma_problem

if TYPE_CHECKING:
    from loopir.codegen_cuda.emitter import KernelEmitter

__all__ = ["TMA_DEVICE_HELPERS", "TMA_HOST_HELPERS", "TMA_SMEM_ALIGN", "TensorMapParam", "has_tma", "tma_text"]

#: Shared buffers of a kernel with TMA copies start at this many bytes (the swizzle atom).
TMA_SMEM_ALIGN = 1024
#: ``CUtensorMapDataType`` of each element type.
_MAP_TYPES = {
    "uint8": "UINT8", "int8": "UINT8", "uint16": "UINT16", "int16": "UINT16", "uint32": "UINT32",
    "int32": "INT32", "uint64": "UINT64", "int64": "INT64", "float16": "FLOAT16",
    "bfloat16": "BFLOAT16", "float32": "FLOAT32", "float64": "FLOAT64",
}  # fmt: skip


@attrs.frozen(eq=False)
class TensorMapParam:
    """One tensor map a kernel takes: the global ``buffer``, the ``box`` (outermost first) and
    the ``swizzle`` in bytes; ``name`` is the kernel parameter."""

    buffer: Buffer
    box: tuple[int, ...]
    swizzle: int
    name: str

    @property
    def data_type(self) -> str:
        return f"CU_TENSOR_MAP_DATA_TYPE_{_MAP_TYPES[self.buffer.dtype]}"

    @property
    def swizzle_enum(self) -> str:
        return f"CU_TENSOR_MAP_SWIZZLE_{self.swizzle}B" if self.swizzle else "CU_TENSOR_MAP_SWIZZLE_NONE"


def has_tma(body: Stmt) -> bool:
    """Whether a kernel body has TMA or mbarrier calls."""
    found: list[bool] = []
    post_order_visit(body, lambda n: found.append(True) if is_tma_call(n) else None)
    return bool(found)


def _fail(em: KernelEmitter, why: str, call: Call) -> CodegenError:
    return CodegenError(f"CUDA codegen: kernel {em.spec.name}: {why}:\n  {call}")


def _address(em: KernelEmitter, load: BufferLoad) -> str:
    return f"&{em.buffer_name(load.buffer)}[{em.expr(em.flat_index(load.buffer, load.indices))}]"


def _check_global(em: KernelEmitter, src: BufferLoad, call: Call) -> None:
    """The global tensor's layout as TMA needs it (module doc)."""
    b = src.buffer
    if b.strides is not None:
        raise _fail(em, f"TMA copies from global buffer {b.name} need a compact (row-major) buffer", call)
    esize = dt.bits(b.dtype) // 8
    stride = esize
    for extent in reversed(b.shape[1:]):
        if not isinstance(extent, IntImm):
            return  # the host checks the rest at each call
        stride *= extent.value
        if stride % 16:
            raise _fail(em, f"TMA needs the global strides of {b.name} to be multiples of 16 bytes, got "
                            f"{stride} bytes (shape {tuple(str(x) for x in b.shape)}, {b.dtype})", call)  # fmt: skip


def _tensor_map(em: KernelEmitter, src: BufferLoad, box: tuple[int, ...], swizzle: int) -> TensorMapParam:
    for m in em.tensor_maps:
        if m.buffer is src.buffer and m.box == box and m.swizzle == swizzle:
            return m
    m = TensorMapParam(src.buffer, box, swizzle, em.names.get(("tmap", len(em.tensor_maps)), f"{src.buffer.name}_tmap"))
    em.tensor_maps.append(m)
    em.alignment[src.buffer] = max(em.alignment.get(src.buffer, 1), 16)  # TMA's global address
    return m


def _load_text(em: KernelEmitter, call: Call) -> str:
    dst, src, bar = call.args[:3]
    assert isinstance(dst, BufferLoad) and isinstance(src, BufferLoad) and isinstance(bar, BufferLoad)
    box, swizzle = tma_box(call)
    _check_global(em, src, call)
    align = TMA_SMEM_ALIGN if swizzle else 128
    esize = dt.bits(dst.dtype) // 8
    if not an.is_multiple_of(em.flat_index(dst.buffer, dst.indices), align // esize, em.env):
        raise _fail(em, f"the shared tile {dst} must start at a multiple of {align} bytes "
                        f"({'swizzled' if swizzle else 'TMA'} destination)", call)  # fmt: skip
    m = _tensor_map(em, src, box, swizzle)
    coords = ", ".join(f"static_cast<int>({em.expr(i)})" for i in reversed(src.indices))
    return f"loopir_tma_load_{len(box)}d({_address(em, dst)}, &{m.name}, {_address(em, bar)}, {coords});"


def tma_text(em: KernelEmitter, call: Call) -> str | None:
    """The CUDA of a TMA or mbarrier call (None for other calls)."""
    if not is_tma_call(call):
        return None
    if (problem := tma_problem(call)) is not None:
        raise _fail(em, problem, call)
    if call.op == "ptx_tma_load":
        return _load_text(em, call)
    if call.op == "ptx_setmaxnreg":
        n, inc = call.args
        assert isinstance(n, IntImm) and isinstance(inc, IntImm)
        em.setmaxnreg_counts.append((n.value, bool(inc.value)))
        return f'asm volatile("setmaxnreg.{"inc" if inc.value else "dec"}.sync.aligned.u32 {n.value};");'
    bar, value = call.args
    assert isinstance(bar, BufferLoad)
    name = call.op.removeprefix("ptx_")
    return f"loopir_{name}({_address(em, bar)}, static_cast<unsigned>({em.expr(value)}));"


#: an SM's 32-bit registers, and ptxas's unit of a thread's registers
_SM_REGISTERS, _REGISTER_UNIT = 65536, 8


def check_register_budget(kernel: str, counts: list[tuple[int, bool]], threads: int, min_blocks: int) -> None:
    """Refuse ``setmaxnreg`` counts that the block's registers cannot cover: ``setmaxnreg.inc``
    waits until the per-CTA pool has the registers, and the pool holds only what the block got at
    entry (``__launch_bounds__(threads, min_blocks)``: at most ``65536 / (min_blocks x
    threads)`` a thread, in units of 8) and what ``setmaxnreg.dec`` released, so a reallocation
    that needs more never completes (the kernel hangs). The warp-specialized pipelines
    (``pipeline_ws``) decrease one producer warpgroup (128 threads) and increase the rest:
    ``128 dec + (threads - 128) inc`` must fit (counted so for several decreasing warpgroups
    too, which need less). ``(24, 240)`` at 384 threads, one block an SM, fits exactly."""
    incs = [n for n, inc in counts if inc]
    if not incs:
        return
    decs = [n for n, inc in counts if not inc]
    warps = -(-threads // 32)
    cap = min(256, _SM_REGISTERS // (min_blocks * warps * 32) // _REGISTER_UNIT * _REGISTER_UNIT)
    pool = cap * warps * 32
    low = 128 if decs else 0
    need = low * max(decs, default=0) + (warps * 32 - low) * max(incs)
    if need > pool:
        dec = f"128 x {max(decs)} + " if decs else ""
        raise CodegenError(f"CUDA codegen: kernel {kernel}: setmaxnreg asks {dec}{warps * 32 - low} x {max(incs)} = "
                           f"{need} registers, more than the block's {warps * 32} x {cap} = {pool} at entry "
                           f"({threads} threads, {min_blocks} block(s) an SM): setmaxnreg.inc would wait forever; "
                           f"lower the increase (or the blocks an SM)")  # fmt: skip


def _load_helper(rank: int) -> str:
    cs = ", ".join(f"int c{i}" for i in range(rank))
    regs = ", ".join(f"%{i + 3}" for i in range(rank))
    ins = "".join(f', "r"(c{i})' for i in range(rank))
    return f"""\
__device__ __forceinline__ void loopir_tma_load_{rank}d(void* dst, const CUtensorMap* map, void* bar, {cs}) {{
  // this thread's own earlier shared accesses before the async proxy's write
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {{{regs}}}], [%2];"
               :: "r"(loopir_smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(loopir_smem_addr(bar)){ins}
               : "memory");
}}"""


TMA_DEVICE_HELPERS = "\n".join([
    "#include <cuda.h>",
    """\
// TMA copies and mbarriers (sm_90a; loopir.codegen_cuda.tma)
__device__ __forceinline__ unsigned loopir_smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void loopir_mbarrier_init(void* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(loopir_smem_addr(bar)), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void loopir_mbarrier_arrive_expect_tx(void* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(loopir_smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void loopir_mbarrier_arrive(void* bar, unsigned count) {
  // release (the default): this thread's earlier accesses before the phase's completion
  asm volatile("{\\n .reg .b64 state;\\n mbarrier.arrive.shared::cta.b64 state, [%0], %1;\\n}"
               :: "r"(loopir_smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void loopir_mbarrier_wait(void* bar, unsigned phase) {
  unsigned done;
  do {
    asm volatile("{\\n .reg .pred p;\\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n"
                 " selp.u32 %0, 1, 0, p;\\n}" : "=r"(done) : "r"(loopir_smem_addr(bar)), "r"(phase) : "memory");
  } while (!done);
}""",
    *(_load_helper(r) for r in range(1, 6)),
])

TMA_HOST_HELPERS = r"""// ---- TMA tensor maps: encoded on the host, cached per launch site (loopir.codegen_cuda.tma) ----
#include <cuda.h>
namespace loopir_tma {
struct MapCache {  // the map last encoded at one launch site, and what it was encoded for
  bool ready = false;
  void* ptr = nullptr;
  int device = -1;
  uint64_t dims[5] = {0, 0, 0, 0, 0};
  alignas(64) CUtensorMap map;
};
typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline EncodeTiled encode_tiled() {  // through the runtime: no link-time dependency on libcuda
  static EncodeTiled fn = nullptr;
  if (!fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
#else
    cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q);
#endif
    if (err == cudaSuccess && q == cudaDriverEntryPointSuccess) fn = reinterpret_cast<EncodeTiled>(p);
  }
  return fn;
}
// dims and box innermost first; strides: bytes between elements of dims 1 .. rank - 1
inline int encode(MapCache& c, const char* fn, const char* kernel, const char* buffer, void* ptr,
                  CUtensorMapDataType type, int rank, const uint64_t* dims, const uint64_t* strides,
                  const uint32_t* box, CUtensorMapSwizzle swizzle, int device) {
  bool same = c.ready && c.ptr == ptr && c.device == device;
  for (int i = 0; same && i < rank; ++i) same = c.dims[i] == dims[i];
  if (same) return 0;
  for (int i = 0; i + 1 < rank; ++i)
    if (strides[i] % 16 != 0)
      return loopir_rt::fail(1, "%s: kernel %s: TMA needs the strides of '%s' to be multiples of 16 bytes, "
                             "got %llu bytes for dimension %d", fn, kernel, buffer,
                             static_cast<unsigned long long>(strides[i]), rank - 2 - i);
#ifdef LOOPIR_HOST_TRACE
  char b[160];
  std::snprintf(b, sizeof b, "tensormap %s %s rank=%d dims=%llu,%llu box=%u,%u swizzle=%d\n", kernel, buffer,
                rank, static_cast<unsigned long long>(dims[0]), static_cast<unsigned long long>(rank > 1 ? dims[1] : 0),
                box[0], rank > 1 ? box[1] : 0u, static_cast<int>(swizzle));
  loopir_rt::trace += b;
#else
  EncodeTiled encode = encode_tiled();
  if (!encode)
    return loopir_rt::fail(1, "%s: kernel %s: cuTensorMapEncodeTiled is not available from the CUDA driver", fn, kernel);
  const cuuint32_t ones[5] = {1, 1, 1, 1, 1};
  CUresult r = encode(&c.map, type, rank, ptr, dims, strides, box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return loopir_rt::fail(1, "%s: kernel %s: cuTensorMapEncodeTiled failed for '%s' (CUresult %d)", fn, kernel,
                           buffer, static_cast<int>(r));
#endif
  c.ptr = ptr;
  c.device = device;
  for (int i = 0; i < rank; ++i) c.dims[i] = dims[i];
  c.ready = true;
  return 0;
}
}  // namespace loopir_tma
"""
