"""C++ source for CUTLASS GEMM kernels behind ``extern "C"`` host entry points.

Each [`KernelSpec`][loopir.codegen_cuda.cutlass.emit.KernelSpec] (a problem family + a candidate
configuration) becomes one namespace holding the CUTLASS type definitions and one entry point

.. code-block:: c++

    extern "C" int <entry>(const void* A, const void* B, const void* S, const void* bias,
                           void* D, int M, int N, int K, int L,
                           float alpha, float beta, void* stream);

in the user's coordinates (compact row-major buffers, see ``problem.py``); it returns one of
the ``STATUS_*`` codes below, and ``loopir_cutlass_last_error()`` gives the message. The
CUTLASS device adapters are host code (they build TMA descriptors and launch), which is why the
entry points live in a shared library called through ctypes. Each entry point keeps one adapter
and one workspace: the workspace grows when a larger one is needed and is otherwise reused, and
``initialize`` (which rebuilds the TMA descriptors) runs only when the arguments change.

sm90 kernels are CUTLASS 3.x ``CollectiveBuilder`` kernels under ``GemmUniversalAdapter``;
sm80 kernels are CUTLASS 2.x ``device::GemmUniversal`` kernels (they also run on sm90).

Convolutions (a candidate with an ``iterator``) are implicit-GEMM fprop kernels: on sm90
CUTLASS 3.x ``conv::collective::CollectiveBuilder`` kernels (im2col TMA) under
``ConvUniversalAdapter``, with the epilogue's fusion as for GEMMs (a bias per output channel is
a per-column bias there: the implicit GEMM is not transposed); on sm80 CUTLASS 2.x
``Conv2dFprop`` kernels under ``device::ImplicitGemmConvolution``. The entry point is

.. code-block:: c++

    extern "C" int <entry>(const void* X, const void* W, const void* S, const void* bias,
                           void* Y, int N, int H, int W, int C, int K, int R, int S, int P,
                           int Q, int pad_h, int pad_w, int stride_h, int stride_w,
                           int dilation_h, int dilation_w, float alpha, float beta, void* stream);

on NHWC tensors (``problem.ConvProblem``). A KCRS or RSCK filter (``KernelSpec.layout_w``) is
permuted to KRSC on the stream into a buffer the entry point keeps, before every launch (the
filter's values may change between calls at the same address).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import attrs

from loopir.codegen_cuda.cutlass.enumerate import GemmCandidate
from loopir.codegen_cuda.cutlass.problem import (
    ACTIVATIONS,
    DTYPES,
    ConvProblem,
    EpilogueSpec,
    Problem,
)
from loopir.errors import CodegenError

__all__ = [
    "KernelSpec",
    "STATUS_MESSAGES",
    "emit_kernel",
    "emit_module",
    "unit_groups",
]

STATUS_MESSAGES = {
    0: "success",
    1: "CUTLASS cannot implement the problem (can_implement failed)",
    2: "workspace allocation failed",
    3: "CUTLASS initialize failed",
    4: "CUTLASS kernel launch failed",
    5: "CUDA error after launch",
    6: "invalid argument (null pointer or non-positive extent)",
}


@attrs.frozen
class KernelSpec:
    """What one entry point computes: element types, layouts, epilogue kind and a candidate.

    Shapes and scalars are run-time arguments, so one compiled entry point serves every problem
    of its family (the tuner still times each candidate on the real shape).

    Attributes
    ----------
    dtype_ab, dtype_d
        loopir element types of A/B and of D (and the source matrix / bias).
    activation, has_bias, has_source
        The epilogue's structure (alpha/beta are run-time arguments).
    candidate
        The CUTLASS configuration.
    layout_w
        A convolution's filter layout as the caller stores it ("" for a GEMM).
    """

    dtype_ab: str
    dtype_d: str
    activation: str
    has_bias: bool
    has_source: bool
    candidate: GemmCandidate
    layout_w: str = ""

    @classmethod
    def make(cls, dtype_ab: str, dtype_d: str, epilogue: EpilogueSpec, cand: GemmCandidate) -> KernelSpec:
        return cls(dtype_ab, dtype_d, epilogue.activation, epilogue.has_bias, epilogue.has_source, cand)

    @classmethod
    def for_problem(cls, problem: Problem, cand: GemmCandidate) -> KernelSpec:
        """The spec computing ``problem`` (a GEMM or a convolution) with ``cand``."""
        spec = cls.make(problem.dtype_ab, problem.dtype_d, problem.epilogue, cand)
        if isinstance(problem, ConvProblem):
            if not cand.is_conv:
                raise CodegenError(f"cutlass emit: {cand.short} is a GEMM kernel, not a convolution")
            return attrs.evolve(spec, layout_w=problem.layout_w)
        return spec

    @property
    def is_conv(self) -> bool:
        return self.candidate.is_conv

    @property
    def entry(self) -> str:
        """The ``extern "C"`` symbol name (stable: a hash of the whole spec)."""
        text = repr(attrs.astuple(self, recurse=True))
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        tile = "x".join(map(str, self.candidate.tile))
        return _ident(
            f"loopir_cutlass_{'conv_' if self.is_conv else ''}sm{self.candidate.arch}_"
            f"{DTYPES[self.dtype_ab][0]}_{tile}_"
            f"{self.activation}{'_bias' if self.has_bias else ''}_{digest}"
        )


def _ident(text: str) -> str:
    return re.sub(r"\W", "_", text)


_PREAMBLE = r"""// Generated by loopir.codegen_cuda.cutlass.emit -- do not edit.
#include <cstdio>
#include <cstdint>
#include <mutex>
#include <cuda_runtime.h>
#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/epilogue/thread/linear_combination_generic.h"
#if LOOPIR_CUTLASS_CONV90
// A 3.x convolution kernel derives from gemm::kernel::GemmUniversal, which the GEMM headers also
// specialize for 2.x kernels: with both, a ConvProblemShape matches two specializations. Such
// kernels get a translation unit of their own (emit.unit_groups).
#include "cute/tensor.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
#include "cutlass/conv/device/conv_universal_adapter.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#else
#include "cutlass/gemm/device/gemm_universal.h"
#if LOOPIR_CUTLASS_SM90
#include "cute/tensor.hpp"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/util/packed_stride.hpp"
#endif
#if LOOPIR_CUTLASS_CONV
#include "cutlass/conv/conv2d_problem_size.h"
#include "cutlass/conv/kernel/default_conv2d_fprop.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#endif
#endif

namespace loopir_cutlass_rt {
// The last error message of any entry point in this module (read by the Python side).
static char g_last_error[1024] = "";
static std::mutex g_error_mutex;

static int fail(int code, const char* where, const char* what) {
  std::lock_guard<std::mutex> lock(g_error_mutex);
  std::snprintf(g_last_error, sizeof(g_last_error), "%s: %s", where, what);
  return code;
}

// One adapter + workspace per entry point. initialize() builds the kernel parameters (TMA
// descriptors on sm90) and only runs again when an argument changes.
struct CallKey {
  const void* a; const void* b; const void* s; const void* bias; void* d;
  int m, n, k, l; float alpha, beta; void* stream;
  int conv[15];  // a convolution's geometry (zeros for GEMMs)
  bool operator==(const CallKey& o) const {
    for (int i = 0; i < 15; ++i)
      if (conv[i] != o.conv[i]) return false;
    return a == o.a && b == o.b && s == o.s && bias == o.bias && d == o.d && m == o.m &&
           n == o.n && k == o.k && l == o.l && alpha == o.alpha && beta == o.beta &&
           stream == o.stream;
  }
};

template <class Gemm>
struct State {
  std::mutex mutex;
  Gemm op;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  bool initialized = false;
  CallKey last{};
  int sm_count = 0;
  void* filter = nullptr;  // a convolution's filter permuted to KRSC
  size_t filter_bytes = 0;
};

static int sm_count_of_current_device() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  int count = 0;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 0;
  return count;
}

// Grow the device buffer *buf of *have bytes to at least `bytes` (its contents are not kept);
// *grown tells whether it was reallocated.
static int grow_buffer(void** buf, size_t* have, size_t bytes, bool* grown, const char* entry) {
  *grown = false;
  if (bytes <= *have) return 0;
  if (*buf) cudaFree(*buf);
  *buf = nullptr;
  *have = 0;
  cudaError_t err = cudaMalloc(buf, bytes);
  if (err != cudaSuccess) return fail(2, entry, cudaGetErrorString(err));
  *have = bytes;
  *grown = true;
  return 0;
}

// Run `args` on `st`: can_implement, grow the workspace if needed, initialize when the
// arguments changed, launch, check the launch. ResetWorkspace: the kernel's workspace holds
// state that one launch consumes (the stream-K scheduler's barrier counters only ever grow
// within a launch), so it is re-zeroed on the stream before every launch, as initialize()
// would do; TMA descriptors are still only rebuilt when the arguments change.
template <class Gemm, bool ResetWorkspace = false>
static int run_gemm(State<Gemm>& st, typename Gemm::Arguments const& args, CallKey const& key,
                    cudaStream_t stream, const char* entry) {
  cutlass::Status status = Gemm::can_implement(args);
  if (status != cutlass::Status::kSuccess) return fail(1, entry, cutlassGetStatusString(status));
  bool grown = false;
  if (int rc = grow_buffer(&st.workspace, &st.workspace_bytes, Gemm::get_workspace_size(args), &grown, entry))
    return rc;
  if (grown) st.initialized = false;
  if (!st.initialized || !(st.last == key)) {
    status = st.op.initialize(args, st.workspace, stream);
    if (status != cutlass::Status::kSuccess) {
      st.initialized = false;
      return fail(3, entry, cutlassGetStatusString(status));
    }
    st.initialized = true;
    st.last = key;
  } else if constexpr (ResetWorkspace) {
    status = Gemm::GemmKernel::initialize_workspace(args, st.workspace, stream);
    if (status != cutlass::Status::kSuccess) return fail(3, entry, cutlassGetStatusString(status));
  }
  status = st.op.run(stream);
  if (status != cutlass::Status::kSuccess) return fail(4, entry, cutlassGetStatusString(status));
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return fail(5, entry, cudaGetErrorString(err));
  return 0;
}
#if LOOPIR_CUTLASS_CONV
// dst (KRSC, compact) = src read with element strides (sk, sr, ss, sc): a KCRS or RSCK filter.
template <class T>
__global__ void permute_filter(T* dst, const T* src, int K, int R, int S, int C, long long sk,
                               long long sr, long long ss, long long sc) {
  long long total = static_cast<long long>(K) * R * S * C;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    long long c = i % C, t = i / C;
    long long s = t % S;
    t /= S;
    long long r = t % R, k = t / R;
    dst[i] = src[k * sk + r * sr + s * ss + c * sc];
  }
}

// Permute a filter stored with strides (sk, sr, ss, sc) into st.filter (grown as needed) on
// `stream`; *out is what the kernel reads.
template <class State, class T>
static int krsc_filter(State& st, const void* w, const void** out, int K, int R, int S, int C,
                       long long sk, long long sr, long long ss, long long sc,
                       cudaStream_t stream, const char* entry) {
  bool grown = false;
  size_t bytes = sizeof(T) * static_cast<size_t>(K) * R * S * C;
  if (int rc = grow_buffer(&st.filter, &st.filter_bytes, bytes, &grown, entry)) return rc;
  long long total = static_cast<long long>(K) * R * S * C;
  int blocks = static_cast<int>((total + 255) / 256 < 4096 ? (total + 255) / 256 : 4096);
  permute_filter<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(st.filter),
                                                static_cast<const T*>(w), K, R, S, C, sk, sr,
                                                ss, sc);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return fail(5, entry, cudaGetErrorString(err));
  *out = st.filter;
  return 0;
}
#endif
}  // namespace loopir_cutlass_rt

// Weak: a library linking several CUTLASS units (one per configuration) keeps one; each
// entry point also has its own getter, reading its unit's message.
extern "C" __attribute__((weak)) const char* loopir_cutlass_last_error(void) {
  return loopir_cutlass_rt::g_last_error;
}
"""

_SM90 = r"""
#if LOOPIR_CUTLASS_SM90
// ${name}: CUTLASS 3.x ${cutlass_name}
namespace ${ns} {
using ElementAB = ${element_ab};
using ElementD = ${element_d};
using ElementC = ${element_c};
using ElementAcc = float;
using ElementCompute = float;
using TileShape = cute::Shape<cute::_${tm}, cute::_${tn}, cute::_${tk}>;
using ClusterShape = cute::Shape<cute::_${cm}, cute::_${cn}, cute::_${ck}>;
using FusionOp = ${fusion};
using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementCompute,
    ElementC, cutlass::layout::ColumnMajor, ${align_c},
    ElementD, cutlass::layout::ColumnMajor, ${align_c},
    ${epilogue_schedule}, FusionOp>::CollectiveOp;
using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    ElementAB, cutlass::layout::${layout_a}, ${align_a},
    ElementAB, cutlass::layout::${layout_b}, ${align_b},
    ElementAcc, TileShape, ClusterShape,
    ${stages},
    ${kernel_schedule}>::CollectiveOp;
using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    cute::Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue, ${tile_scheduler}>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
static loopir_cutlass_rt::State<Gemm> g_state;
}  // namespace ${ns}

extern "C" int ${entry}(const void* A, const void* B, const void* S, const void* bias, void* D,
                        int M, int N, int K, int L, float alpha, float beta, void* stream) {
  using namespace ${ns};
  if (!A || !B || !D || M <= 0 || N <= 0 || K <= 0 || L <= 0${null_checks})
    return loopir_cutlass_rt::fail(6, "${entry}", "null pointer or non-positive extent");
  std::lock_guard<std::mutex> lock(g_state.mutex);
  if (g_state.sm_count == 0) g_state.sm_count = loopir_cutlass_rt::sm_count_of_current_device();
  // Transposed problem: D^T (N x M, column-major) = B^T (N x K) * A^T (K x M).
  const int Mp = N, Np = M;
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideC = typename Gemm::GemmKernel::StrideC;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  StrideA stride_a = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(Mp, K, L));
  StrideB stride_b = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(Np, K, L));
  StrideC stride_c = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(Mp, Np, L));
  StrideD stride_d = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(Mp, Np, L));
  cutlass::KernelHardwareInfo hw_info;
  hw_info.device_id = 0;
  cudaGetDevice(&hw_info.device_id);
  hw_info.sm_count = g_state.sm_count;
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {Mp, Np, K, L},
      {static_cast<const ElementAB*>(B), stride_a, static_cast<const ElementAB*>(A), stride_b},
      {{}, ${source_ptr}, stride_c, static_cast<ElementD*>(D), stride_d},
      hw_info};
  args.epilogue.thread.alpha = alpha;
  args.epilogue.thread.beta = ${beta};
${bias_arg}
  loopir_cutlass_rt::CallKey key{A, B, S, bias, D, M, N, K, L, alpha, beta, stream, {}};
  return loopir_cutlass_rt::run_gemm<Gemm, ${reset_workspace}>(
      g_state, args, key, static_cast<cudaStream_t>(stream), "${entry}");
}
extern "C" const char* ${entry}_error(void) { return loopir_cutlass_rt::g_last_error; }
#endif  // LOOPIR_CUTLASS_SM90
"""

_SM80 = r"""
// ${name}: CUTLASS 2.x ${cutlass_name}
namespace ${ns} {
using ElementAB = ${element_ab};
using ElementD = ${element_d};
using EpilogueOp = ${epilogue_op};
using Gemm = cutlass::gemm::device::GemmUniversal<
    ElementAB, cutlass::layout::${layout_a}, ElementAB, cutlass::layout::${layout_b},
    ElementD, cutlass::layout::ColumnMajor, float,
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<${tm}, ${tn}, ${tk}>,
    cutlass::gemm::GemmShape<${wm}, ${wn}, ${wk}>,
    cutlass::gemm::GemmShape<${im}, ${in_}, ${ik}>,
    EpilogueOp, ${swizzle}, ${stages}, ${align_a}, ${align_b}, ${math_op}>;
static loopir_cutlass_rt::State<Gemm> g_state;
}  // namespace ${ns}

extern "C" int ${entry}(const void* A, const void* B, const void* S, const void* bias, void* D,
                        int M, int N, int K, int L, float alpha, float beta, void* stream) {
  using namespace ${ns};
  if (!A || !B || !D || M <= 0 || N <= 0 || K <= 0 || L <= 0${null_checks})
    return loopir_cutlass_rt::fail(6, "${entry}", "null pointer or non-positive extent");
  std::lock_guard<std::mutex> lock(g_state.mutex);
  // Transposed problem: D^T (N x M, column-major) = B^T (N x K) * A^T (K x M).
  const int Mp = N, Np = M;
  const int64_t lda = ${lda}, ldb = ${ldb}, ldd = Mp;
  // The source operand: the bias broadcast over rows (leading dimension 0), the source
  // matrix, or D itself with beta = 0 (CUTLASS then skips reading it).
  const void* src = ${src_expr};
  const int64_t ldc = ${ldc};
  const int64_t batch_c = ${batch_c};
  const float beta_eff = ${beta_eff};
  typename Gemm::Arguments args(
      L > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm,
      {Mp, Np, K}, L, {alpha, beta_eff},
      B, A, src, D,
      int64_t(Mp) * K, int64_t(Np) * K, batch_c, int64_t(Mp) * Np,
      lda, ldb, ldc, ldd);
  loopir_cutlass_rt::CallKey key{A, B, S, bias, D, M, N, K, L, alpha, beta, stream, {}};
  return loopir_cutlass_rt::run_gemm(g_state, args, key, static_cast<cudaStream_t>(stream), "${entry}");
}
extern "C" const char* ${entry}_error(void) { return loopir_cutlass_rt::g_last_error; }
"""


# The part of a convolution's entry point both kernel families share: the argument checks, the
# lock, the filter permutation (``${permute}``) before the problem is set up ...
_CONV_ENTRY_HEAD = r"""extern "C" int ${entry}(const void* X, const void* Wt, const void* S, const void* bias, void* Y,
                        int N, int H, int W, int C, int K, int R, int S_, int P, int Q,
                        int pad_h, int pad_w, int stride_h, int stride_w, int dil_h, int dil_w,
                        float alpha, float beta, void* stream) {
  using namespace ${ns};
  if (!X || !Wt || !Y || N <= 0 || H <= 0 || W <= 0 || C <= 0 || K <= 0 || R <= 0 || S_ <= 0 ||
      P <= 0 || Q <= 0 || pad_h < 0 || pad_w < 0 || stride_h <= 0 || stride_w <= 0 ||
      dil_h <= 0 || dil_w <= 0${null_checks})
    return loopir_cutlass_rt::fail(6, "${entry}", "null pointer or invalid extent");
  std::lock_guard<std::mutex> lock(g_state.mutex);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const void* filter = Wt;
${permute}
"""

# ... and, once ``args`` are built, the call through the shared runner.
_CONV_ENTRY_TAIL = r"""  loopir_cutlass_rt::CallKey key{X, filter, S, bias, Y, 0, 0, 0, 0, alpha, beta, stream,
                                 {N, H, W, C, K, R, S_, P, Q, pad_h, pad_w, stride_h, stride_w,
                                  dil_h, dil_w}};
  return loopir_cutlass_rt::run_gemm(g_state, args, key, st, "${entry}");
}
extern "C" const char* ${entry}_error(void) { return loopir_cutlass_rt::g_last_error; }
"""

_CONV_SM80 = r"""
// ${name}: CUTLASS 2.x ${cutlass_name} (implicit-GEMM conv2d fprop)
namespace ${ns} {
using ElementAB = ${element_ab};
using ElementD = ${element_d};
using EpilogueOp = ${epilogue_op};
using Layout = cutlass::layout::TensorNHWC;
using Kernel = typename cutlass::conv::kernel::DefaultConv2dFprop<
    ElementAB, Layout, ElementAB, Layout, ElementD, Layout, float,
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<${tm}, ${tn}, ${tk}>,
    cutlass::gemm::GemmShape<${wm}, ${wn}, ${wk}>,
    cutlass::gemm::GemmShape<${im}, ${in_}, ${ik}>,
    EpilogueOp, ${swizzle}, ${stages}, ${math_op}, ${iterator},
    cutlass::conv::StrideSupport::kStrided, ${align_a}, ${align_b}>::Kernel;
using Conv = cutlass::conv::device::ImplicitGemmConvolution<Kernel>;
static loopir_cutlass_rt::State<Conv> g_state;
}  // namespace ${ns}

""" + _CONV_ENTRY_HEAD + r"""  cutlass::conv::Conv2dProblemSize problem(N, H, W, C, K, R, S_, P, Q, pad_h, pad_w, stride_h,
                                           stride_w, dil_h, dil_w,
                                           cutlass::conv::Mode::kCrossCorrelation, 1, 1);
  // The source operand: the bias broadcast over N, P, Q (all strides 0), the source tensor,
  // or Y itself with beta = 0 (CUTLASS then skips reading it).
  const void* src = ${src_expr};
  const Layout layout_c = ${layout_c};
  const float beta_eff = ${beta_eff};
  typename Conv::Arguments args(
      problem,
      {static_cast<ElementAB*>(const_cast<void*>(X)), Layout::packed({N, H, W, C})},
      {static_cast<ElementAB*>(const_cast<void*>(filter)), Layout::packed({K, R, S_, C})},
      {static_cast<ElementD*>(const_cast<void*>(src)), layout_c},
      {static_cast<ElementD*>(Y), Layout::packed({N, P, Q, K})},
      {alpha, beta_eff});
""" + _CONV_ENTRY_TAIL

_CONV_SM90 = r"""
#if LOOPIR_CUTLASS_CONV90
// ${name}: CUTLASS 3.x ${cutlass_name} (implicit-GEMM conv2d fprop, im2col TMA)
namespace ${ns} {
using ElementAB = ${element_ab};
using ElementD = ${element_d};
using ElementC = ${element_c};
using ElementCompute = float;
using Layout = cutlass::layout::TensorNHWC;
using TileShape = cute::Shape<cute::_${tm}, cute::_${tn}, cute::Shape<cute::_${tk}>>;
using ClusterShape = cute::Shape<cute::_${cm}, cute::_${cn}, cute::_${ck}>;
using FusionOp = ${fusion};
using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, ElementCompute,
    ElementC, Layout, ${align_c}, ElementD, Layout, ${align_c},
    ${epilogue_schedule}, FusionOp>::CollectiveOp;
using CollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop,
    ElementAB, Layout, ${align_a}, ElementAB, Layout, ${align_b}, float, TileShape, ClusterShape,
    ${stages},
    ${kernel_schedule}>::CollectiveOp;
using ProblemShape = cutlass::conv::ConvProblemShape<
    cutlass::conv::Operator::kFprop, CollectiveMainloop::DispatchPolicy::NumSpatialDimensions>;
using Kernel = cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
using Conv = cutlass::conv::device::ConvUniversalAdapter<Kernel>;
static loopir_cutlass_rt::State<Conv> g_state;
}  // namespace ${ns}

""" + _CONV_ENTRY_HEAD + r"""  // The upper paddings that give exactly P x Q (a larger bottom/right padding only adds rows
  // that no output reads): the smallest that do, and at least 0.
  int up_h = (P - 1) * stride_h + dil_h * (R - 1) + 1 - H - pad_h;
  int up_w = (Q - 1) * stride_w + dil_w * (S_ - 1) + 1 - W - pad_w;
  up_h = up_h < 0 ? 0 : up_h;
  up_w = up_w < 0 ? 0 : up_w;
  ProblemShape problem(cutlass::conv::Mode::kCrossCorrelation, {N, H, W, C}, {K, R, S_, C},
                       {pad_h, pad_w}, {up_h, up_w}, {stride_h, stride_w}, {dil_h, dil_w}, 1);
  if (problem.shape_C[1] != P || problem.shape_C[2] != Q)
    return loopir_cutlass_rt::fail(1, "${entry}", "the output size does not match the geometry");
  typename Conv::ConvKernel::StrideC stride_c;
  typename Conv::ConvKernel::StrideD stride_d;
  cute::for_each(cute::make_seq<cute::rank<0>(typename Conv::ConvKernel::StrideC{})>{}, [&](auto i) {
    cute::get<0, i>(stride_c) = problem.stride_C[ProblemShape::RankT - 2 - i];
  });
  cute::for_each(cute::make_seq<cute::rank<0>(typename Conv::ConvKernel::StrideD{})>{}, [&](auto i) {
    cute::get<0, i>(stride_d) = problem.stride_C[ProblemShape::RankT - 2 - i];
  });
  typename Conv::Arguments args{
      problem,
      {static_cast<const ElementAB*>(X), static_cast<const ElementAB*>(filter)},
      {{}, ${source_ptr}, stride_c, static_cast<ElementD*>(Y), stride_d}};
  args.epilogue.thread.alpha = alpha;
  args.epilogue.thread.beta = ${beta};
${bias_arg}
""" + _CONV_ENTRY_TAIL + r"""#endif  // LOOPIR_CUTLASS_CONV90
"""

# (sk, sr, ss, sc): element strides of a filter layout, read as KRSC by permute_filter
_FILTER_STRIDES = {
    "KCRS": "(long long)C * R * S_, (long long)S_, 1LL, (long long)R * S_",
    "RSCK": "1LL, (long long)S_ * C * K, (long long)C * K, (long long)K",
}


def _subst(template: str, values: dict[str, object]) -> str:
    def repl(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in values:
            raise CodegenError(f"cutlass emit: template value {key!r} is missing")
        return str(values[key])

    return re.sub(r"\$\{(\w+)\}", repl, template)


def _fusion_sm90(spec: KernelSpec, element_c: str) -> str:
    act = ACTIVATIONS[spec.activation]
    if spec.has_bias:
        # GEMMs compute the transposed product (the bias runs along rows there); a convolution's
        # implicit GEMM is not transposed: its output channels are the columns
        per = "PerCol" if spec.is_conv else "PerRow"
        return (
            f"cutlass::epilogue::fusion::LinComb{per}BiasEltAct<{act}, ElementD, ElementCompute, "
            f"ElementD, {element_c}, ElementCompute>"
        )
    if spec.activation != "identity":
        return (
            f"cutlass::epilogue::fusion::LinCombEltAct<{act}, ElementD, ElementCompute, "
            f"{element_c}, ElementCompute>"
        )
    return f"cutlass::epilogue::fusion::LinearCombination<ElementD, ElementCompute, {element_c}, ElementCompute>"


def _sm80_epilogue_op(spec: KernelSpec, element_d: str) -> str:
    count = f"128 / cutlass::sizeof_bits<{element_d}>::value"
    if spec.activation == "identity":
        return f"cutlass::epilogue::thread::LinearCombination<ElementD, {count}, float, float>"
    return (
        f"cutlass::epilogue::thread::LinearCombinationGeneric<{ACTIVATIONS[spec.activation]}, "
        f"ElementD, {count}, float, float>"
    )


def _filter_permute(spec: KernelSpec) -> str:
    """The entry point's lines that permute a KCRS/RSCK filter to KRSC ("" for KRSC)."""
    if spec.layout_w == "KRSC":
        return ""
    if spec.layout_w not in _FILTER_STRIDES:
        raise CodegenError(f"cutlass emit: conv kernel {spec.entry} has filter layout {spec.layout_w!r}")
    return (
        f"  if (int rc = loopir_cutlass_rt::krsc_filter<decltype(g_state), ElementAB>(\n"
        f"          g_state, Wt, &filter, K, R, S_, C, {_FILTER_STRIDES[spec.layout_w]}, st, "
        f'"{spec.entry}"))\n'
        "    return rc;"
    )


def _conv_sm90_stages(stages: int) -> str:
    """The 3.x conv mainloop's stage count: ``stages`` fixed, or (0) as many as the shared memory
    left after the epilogue's holds (one CTA per SM: short-K convolutions want fewer)."""
    if stages:
        return f"cutlass::conv::collective::StageCount<{stages}>"
    return ("cutlass::conv::collective::StageCountAutoCarveout<\n"
            "        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>")  # fmt: skip


def _emit_conv_sm90(spec: KernelSpec, common: dict[str, object]) -> str:
    cand = spec.candidate
    element_c = "ElementD" if spec.has_source else "void"
    cm, cn, ck = cand.cluster
    values = dict(
        common, element_c=element_c, fusion=_fusion_sm90(spec, element_c), cm=cm, cn=cn, ck=ck,
        epilogue_schedule=cand.epilogue_schedule, kernel_schedule=cand.kernel_schedule,
        stages=_conv_sm90_stages(cand.stages), permute=_filter_permute(spec),
        source_ptr="static_cast<const ElementD*>(S)" if spec.has_source else "nullptr",
        beta="beta" if spec.has_source else "0.0f",
        bias_arg="  args.epilogue.thread.bias_ptr = static_cast<const ElementD*>(bias);" if spec.has_bias else "",
    )  # fmt: skip
    return _subst(_CONV_SM90, values)


def _emit_conv(spec: KernelSpec, common: dict[str, object]) -> str:
    cand = spec.candidate
    if cand.arch == 90:
        return _emit_conv_sm90(spec, common)
    if spec.has_bias and spec.has_source:
        raise CodegenError(f"cutlass emit: conv kernel {spec.entry} cannot fuse both a bias and a source")
    element_d = DTYPES[spec.dtype_d][1]
    wm, wn, wk = (t // w for t, w in zip(cand.tile, cand.warp_count))
    im, in_, ik = cand.instruction
    if spec.has_bias:
        src_expr, layout_c, beta_eff = "bias", "Layout(Layout::Stride(0))", "1.0f"
    elif spec.has_source:
        src_expr, layout_c, beta_eff = "S", "Layout::packed({N, P, Q, K})", "beta"
    else:
        src_expr, layout_c, beta_eff = "Y", "Layout::packed({N, P, Q, K})", "0.0f"
    permute = _filter_permute(spec)
    values = dict(
        common, epilogue_op=_sm80_epilogue_op(spec, element_d), wm=wm, wn=wn, wk=wk, im=im,
        in_=in_, ik=ik, swizzle=cand.swizzle, stages=cand.stages, math_op=cand.math_op,
        iterator=cand.iterator, src_expr=src_expr, layout_c=layout_c, beta_eff=beta_eff,
        permute=permute,
    )  # fmt: skip
    return _subst(_CONV_SM80, values)


def emit_kernel(spec: KernelSpec) -> str:
    """The C++ definitions and entry point of one kernel (needs the module preamble)."""
    cand = spec.candidate
    element_d = DTYPES[spec.dtype_d][1]
    tm, tn, tk = cand.tile
    null_checks = (" || !S" if spec.has_source else "") + (" || !bias" if spec.has_bias else "")
    common = {
        "name": spec.entry, "entry": spec.entry, "ns": spec.entry + "_ns",
        "cutlass_name": cand.name, "element_ab": cand.element_ab, "element_d": element_d,
        "tm": tm, "tn": tn, "tk": tk, "layout_a": cand.layout_a, "layout_b": cand.layout_b,
        "align_a": cand.align_a, "align_b": cand.align_b, "align_c": cand.align_c,
        "null_checks": null_checks,
    }  # fmt: skip
    if spec.is_conv:
        return _emit_conv(spec, common)
    if cand.arch == 90:
        element_c = "ElementD" if spec.has_source else "void"
        if spec.has_source:
            source_ptr = "static_cast<const ElementD*>(S)"
        else:
            source_ptr = "nullptr"
        stages = (
            f"cutlass::gemm::collective::StageCount<{cand.stages}>"
            if cand.stages
            else "cutlass::gemm::collective::StageCountAutoCarveout<"
            "static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>"
        )
        bias_arg = (
            "  args.epilogue.thread.bias_ptr = static_cast<const ElementD*>(bias);"
            if spec.has_bias
            else ""
        )
        cm, cn, ck = cand.cluster
        values = dict(
            common, element_c=element_c, fusion=_fusion_sm90(spec, element_c),
            cm=cm, cn=cn, ck=ck, epilogue_schedule=cand.epilogue_schedule,
            kernel_schedule=cand.kernel_schedule, tile_scheduler=cand.tile_scheduler,
            stages=stages, source_ptr=source_ptr,
            beta="beta" if spec.has_source else "0.0f", bias_arg=bias_arg,
            reset_workspace="true" if "StreamK" in cand.tile_scheduler else "false",
        )  # fmt: skip
        return _subst(_SM90, values)
    if cand.arch == 80:
        if spec.has_bias and spec.has_source:
            raise CodegenError(
                f"cutlass emit: sm80 kernel {spec.entry} cannot fuse both a bias and a source"
            )
        wm, wn, wk = (t // w for t, w in zip(cand.tile, cand.warp_count))
        im, in_, ik = cand.instruction
        epilogue_op = _sm80_epilogue_op(spec, element_d)
        if spec.has_bias:
            src_expr, ldc, batch_c, beta_eff = "bias", "0", "0", "1.0f"
        elif spec.has_source:
            src_expr, ldc, batch_c, beta_eff = "S", "Mp", "int64_t(Mp) * Np", "beta"
        else:
            src_expr, ldc, batch_c, beta_eff = "D", "Mp", "int64_t(Mp) * Np", "0.0f"
        values = dict(
            common, epilogue_op=epilogue_op, wm=wm, wn=wn, wk=wk, im=im, in_=in_, ik=ik,
            swizzle=cand.swizzle, stages=cand.stages, math_op=cand.math_op,
            lda="Mp" if cand.layout_a == "ColumnMajor" else "K",
            ldb="K" if cand.layout_b == "ColumnMajor" else "Np",
            src_expr=src_expr, ldc=ldc, batch_c=batch_c, beta_eff=beta_eff,
        )  # fmt: skip
        return _subst(_SM80, values)
    raise CodegenError(f"cutlass emit: unsupported arch {cand.arch} in {spec.entry}")


def _own_unit(spec: KernelSpec) -> bool:
    """Whether ``spec`` is a 3.x convolution, which cannot share a unit with the GEMM headers."""
    return spec.is_conv and spec.candidate.arch == 90


def unit_groups(specs: Sequence[KernelSpec]) -> list[list[KernelSpec]]:
    """``specs`` split into the fewest translation units that can hold them: the sm90 (3.x)
    convolutions, and everything else (see the preamble's note)."""
    groups = [[s for s in specs if _own_unit(s)], [s for s in specs if not _own_unit(s)]]
    return [g for g in groups if g]


def emit_module(specs: Sequence[KernelSpec]) -> str:
    """One translation unit with the runtime preamble and every spec's entry point.

    Entry points are deduplicated and emitted in a deterministic order (by symbol name), so
    the same set of kernels always yields the same source (and the same cache key).

    Raises
    ------
    CodegenError
        Without specs, or for specs that need two units (see
        [`unit_groups`][loopir.codegen_cuda.cutlass.emit.unit_groups]).
    """
    if not specs:
        raise CodegenError("cutlass emit: emit_module needs at least one kernel spec")
    unique = {s.entry: s for s in specs}
    if len(unit_groups(list(unique.values()))) > 1:
        raise CodegenError(
            "cutlass emit: sm90 convolution kernels need a translation unit of their own; "
            "split the specs with unit_groups()"
        )
    sm90 = any(s.candidate.arch == 90 for s in unique.values())
    conv = any(s.is_conv for s in unique.values())
    conv90 = any(_own_unit(s) for s in unique.values())
    head = (f"#define LOOPIR_CUTLASS_SM90 {int(sm90)}\n#define LOOPIR_CUTLASS_CONV {int(conv)}\n"
            f"#define LOOPIR_CUTLASS_CONV90 {int(conv90)}\n")  # fmt: skip
    body = "".join(emit_kernel(unique[name]) for name in sorted(unique))
    return head + _PREAMBLE + body
