"""The C++ runtime every generated library carries: errors, launch checks, the exported helpers.

[`RUNTIME_DECL`][loopir.codegen_cuda.host_runtime.RUNTIME_DECL] goes into every translation unit of
a library (includes, the launch macros, declarations);
[`RUNTIME_DEF`][loopir.codegen_cuda.host_runtime.RUNTIME_DEF] into exactly one (the definitions and
the ``loopir_rt_*`` exports the Python runtime calls: allocation, copies, events, synchronization,
whether a stream is capturing a CUDA graph, the last error message). A trace build
(``-DLOOPIR_HOST_TRACE``) records launches, library calls and copies instead of running them, hands
out fake device pointers, and answers the capture query as a test set it
(``loopir_rt_set_capture_status``) and the shared memory limit as one set it
(``loopir_rt_set_fake_smem_optin``, default sm_90's 227 KB), so the host program runs without a
GPU.

A kernel on dynamic shared memory (``loopir.codegen_cuda.shared_memory``) is launched by
``LOOPIR_LAUNCH_DYN`` after ``opt_in_shared``, which checks its bytes against the device's
``cudaDevAttrMaxSharedMemoryPerBlockOptin`` and sets its
``cudaFuncAttributeMaxDynamicSharedMemorySize`` once per kernel and device.
"""

from __future__ import annotations

RUNTIME_DECL = r"""
// ---- loopir host runtime: declarations (every unit) ----
#ifdef LOOPIR_PYTHON_ENTRY
#define PY_SSIZE_T_CLEAN
#include <Python.h>
namespace loopir_py {
static void* ptr(PyObject* o) { return o == Py_None ? nullptr : PyLong_AsVoidPtr(o); }
}  // namespace loopir_py
#endif
#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

#ifdef LOOPIR_HOST_TRACE
#include <string>
#include <type_traits>
#endif

namespace loopir_rt {
extern thread_local char last_error[2048];

#ifdef LOOPIR_HOST_TRACE
// A test build (nvcc -DLOOPIR_HOST_TRACE): launches, library calls and copies are recorded in
// a text trace instead of run, and fake device pointers are handed out, so the host program
// runs without a GPU.
extern std::string trace;
extern uintptr_t next_fake;
template <class T>
inline void trace_arg(T v) {
  char b[40];
  if constexpr (std::is_pointer_v<T> || std::is_null_pointer_v<T>)
    std::snprintf(b, sizeof b, " %p", static_cast<const void*>(v));
  else if constexpr (std::is_floating_point_v<T>)
    std::snprintf(b, sizeof b, " %g", static_cast<double>(v));
  else if constexpr (std::is_class_v<T>)  // a TMA tensor map, passed by value
    std::snprintf(b, sizeof b, " tensormap");
  else
    std::snprintf(b, sizeof b, " %lld", static_cast<long long>(v));
  trace += b;
}
template <class... A>
inline void record(const char* kernel, dim3 g, dim3 t, long long smem, A... args) {
  char b[256];
  std::snprintf(b, sizeof b, "launch %s grid=(%u,%u,%u) block=(%u,%u,%u) ", kernel, g.x, g.y,
                g.z, t.x, t.y, t.z);
  trace += b;
  if (smem) trace += "smem=" + std::to_string(smem) + " ";
  trace += "args=";
  (trace_arg(args), ...);
  trace += "\n";
}
template <class... A>
inline int record_call(const char* entry, A... args) {
  trace += std::string("call ") + entry + " args=";
  (trace_arg(args), ...);
  trace += "\n";
  return 0;
}
#define LOOPIR_LAUNCH(K, G, T, S, ...) loopir_rt::record(#K, G, T, 0, ##__VA_ARGS__)
#define LOOPIR_LAUNCH_DYN(K, G, T, M, S, ...) loopir_rt::record(#K, G, T, M, ##__VA_ARGS__)
#define LOOPIR_EXTERN(E, ...) loopir_rt::record_call(#E, __VA_ARGS__)
#else
#define LOOPIR_LAUNCH(K, G, T, S, ...) K<<<G, T, 0, S>>>(__VA_ARGS__)
// a kernel on dynamic shared memory: M bytes of it (allowed first by opt_in_shared)
#define LOOPIR_LAUNCH_DYN(K, G, T, M, S, ...) K<<<G, T, M, S>>>(__VA_ARGS__)
#define LOOPIR_EXTERN(E, ...) E(__VA_ARGS__)
#endif

// Whether a kernel on dynamic shared memory has been allowed its size, per device (a static
// of the launching code: zero-initialized, so "not yet" everywhere).
constexpr int kMaxDevices = 64;
struct SharedOptIn {
  std::atomic<int> ready[kMaxDevices];
};

int fail(int code, const char* fmt, ...);
int cuda_fail(int code, const char* what, cudaError_t err);
int use_device(int device);
int check_dims(const char* fn, const char* kernel, const int64_t* g, const int64_t* t);
int check_launch(const char* fn, const char* kernel, cudaStream_t stream, bool sync);
int opt_in_shared(SharedOptIn& state, const void* kernel_fn, const char* fn, const char* kernel,
                  long long dynamic_bytes, long long static_bytes, int device);
}  // namespace loopir_rt
"""

RUNTIME_DEF = r"""// ---- loopir host runtime: definitions (one unit per library) ----
namespace loopir_rt {
thread_local char last_error[2048] = "";
#ifdef LOOPIR_HOST_TRACE
std::string trace;
uintptr_t next_fake = 0x70000000;
int fake_smem_optin = 227 * 1024;  // the device attribute the trace build answers (sm_90's)
void* fake_capture_stream = nullptr;  // the stream the trace build says is capturing
int fake_capture_status = 0;
#endif

int fail(int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(last_error, sizeof(last_error), fmt, ap);
  va_end(ap);
  return code;
}

int cuda_fail(int code, const char* what, cudaError_t err) {
  return fail(code, "%s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

int use_device(int device) {
#ifdef LOOPIR_HOST_TRACE
  (void)device;
  return 0;
#endif
  int current = -1;
  cudaError_t err = cudaGetDevice(&current);
  if (err != cudaSuccess) return cuda_fail(2, "no usable CUDA device", err);
  if (current != device) {
    err = cudaSetDevice(device);
    if (err != cudaSuccess) return cuda_fail(2, "cannot select the CUDA device", err);
  }
  return 0;
}

int check_dims(const char* fn, const char* kernel, const int64_t* g, const int64_t* t) {
  if (g[0] > 2147483647LL || g[1] > 65535 || g[2] > 65535)
    return fail(3, "%s: kernel %s: grid (%lld, %lld, %lld) is out of range (at most "
                "2147483647 x 65535 x 65535)", fn, kernel, (long long)g[0], (long long)g[1],
                (long long)g[2]);
  if (t[0] > 1024 || t[1] > 1024 || t[2] > 64 || t[0] * t[1] * t[2] > 1024)
    return fail(3, "%s: kernel %s: block (%lld, %lld, %lld) exceeds the 1024-thread limit", fn,
                kernel, (long long)t[0], (long long)t[1], (long long)t[2]);
  return 0;
}

int check_launch(const char* fn, const char* kernel, cudaStream_t stream, bool sync) {
#ifdef LOOPIR_HOST_TRACE
  (void)fn; (void)kernel; (void)stream; (void)sync;
  return 0;
#endif
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess && sync) err = cudaStreamSynchronize(stream);
  if (err == cudaSuccess) return 0;
  bool config = err == cudaErrorInvalidConfiguration || err == cudaErrorInvalidValue ||
                err == cudaErrorLaunchOutOfResources;
  return fail(4, "%s: kernel %s failed: %s (%s)%s", fn, kernel, cudaGetErrorString(err),
              cudaGetErrorName(err),
              config || sync ? "" : " -- an earlier asynchronous kernel may have caused it; "
              "build with PassContext(config={'cuda.sync_after_launch': True}) to find it");
}

// Before a launch on dynamic shared memory: check the block's shared memory against the device's
// opt-in maximum and allow the kernel its dynamic size, once per kernel and device (`state`); a
// CUDA graph capture may run it (it is no stream operation).
int opt_in_shared(SharedOptIn& state, const void* kernel_fn, const char* fn, const char* kernel,
                  long long dynamic_bytes, long long static_bytes, int device) {
  const bool cached = device >= 0 && device < kMaxDevices;
  if (cached && state.ready[device].load(std::memory_order_acquire)) return 0;
  int limit = 0;
#ifdef LOOPIR_HOST_TRACE
  (void)kernel_fn;
  limit = fake_smem_optin;
#else
  cudaError_t err = cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return fail(3, "%s: kernel %s: cannot read the device's shared memory limit "
                "(cudaDevAttrMaxSharedMemoryPerBlockOptin): %s (%s)", fn, kernel,
                cudaGetErrorString(err), cudaGetErrorName(err));
  }
#endif
  if (dynamic_bytes + static_bytes > limit)
    return fail(3, "%s: kernel %s needs %lld bytes of shared memory per block (%lld dynamic + "
                "%lld static); device %d allows at most %d "
                "(cudaDevAttrMaxSharedMemoryPerBlockOptin)", fn, kernel,
                dynamic_bytes + static_bytes, dynamic_bytes, static_bytes, device, limit);
#ifdef LOOPIR_HOST_TRACE
  trace += std::string("smem_optin ") + kernel + " " + std::to_string(dynamic_bytes) + "\n";
#else
  err = cudaFuncSetAttribute(kernel_fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(dynamic_bytes));
  if (err != cudaSuccess) {
    cudaGetLastError();  // not the next launch's error
    return fail(3, "%s: kernel %s: cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize, "
                "%lld) failed: %s (%s)", fn, kernel, dynamic_bytes, cudaGetErrorString(err),
                cudaGetErrorName(err));
  }
#endif
  if (cached) state.ready[device].store(1, std::memory_order_release);
  return 0;
}
}  // namespace loopir_rt

extern "C" const char* loopir_rt_last_error(void) { return loopir_rt::last_error; }

#ifdef LOOPIR_HOST_TRACE
extern "C" const char* loopir_rt_trace(void) { return loopir_rt::trace.c_str(); }
extern "C" void loopir_rt_set_fake_smem_optin(int bytes) { loopir_rt::fake_smem_optin = bytes; }
extern "C" int loopir_rt_malloc(void** out, int64_t bytes, int) {
  *out = reinterpret_cast<void*>(loopir_rt::next_fake);
  loopir_rt::next_fake += (bytes + 255) / 256 * 256 + 256;
  return 0;
}
extern "C" int loopir_rt_free(void*) { return 0; }
extern "C" int loopir_rt_copy(void*, const void*, int64_t bytes, int to_device, void*) {
  loopir_rt::trace += (to_device ? "htod " : "dtoh ") + std::to_string(bytes) + "\n";
  return 0;
}
extern "C" int loopir_rt_stream_sync(void*) { return 0; }
extern "C" int loopir_rt_device_sync(int) { return 0; }
extern "C" int loopir_rt_event_create(void** out) { *out = &loopir_rt::next_fake; return 0; }
extern "C" int loopir_rt_event_destroy(void*) { return 0; }
extern "C" int loopir_rt_event_record(void*, void*) { return 0; }
extern "C" int loopir_rt_event_elapsed(void*, void*, float* ms) { *ms = 1.5f; return 0; }
extern "C" void loopir_rt_set_capture_status(void* stream, int status) {
  loopir_rt::fake_capture_stream = stream;
  loopir_rt::fake_capture_status = status;
}
extern "C" int loopir_rt_capture_status(void* stream, int) {
  if (stream != loopir_rt::fake_capture_stream) return 0;
  if (loopir_rt::fake_capture_status < 0)
    return loopir_rt::fail(-1, "cudaStreamIsCapturing: a failure the test asked for");
  return loopir_rt::fake_capture_status;
}
#else

extern "C" int loopir_rt_malloc(void** out, int64_t bytes, int device) {
  if (int rc = loopir_rt::use_device(device)) return rc;
  cudaError_t err = cudaMalloc(out, bytes > 0 ? bytes : 1);
  return err == cudaSuccess ? 0 : loopir_rt::cuda_fail(5, "cudaMalloc", err);
}

extern "C" int loopir_rt_free(void* p) {
  cudaError_t err = cudaFree(p);
  return err == cudaSuccess ? 0 : loopir_rt::cuda_fail(5, "cudaFree", err);
}

extern "C" int loopir_rt_copy(void* dst, const void* src, int64_t bytes, int to_device,
                              void* stream) {
  if (bytes <= 0) return 0;
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes,
                                    to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                    static_cast<cudaStream_t>(stream));
  return err == cudaSuccess ? 0 : loopir_rt::cuda_fail(5, "cudaMemcpyAsync", err);
}

extern "C" int loopir_rt_stream_sync(void* stream) {
  cudaError_t err = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  return err == cudaSuccess ? 0 : loopir_rt::cuda_fail(6, "a kernel failed on the GPU", err);
}

extern "C" int loopir_rt_device_sync(int device) {
  if (int rc = loopir_rt::use_device(device)) return rc;
  cudaError_t err = cudaDeviceSynchronize();
  return err == cudaSuccess ? 0 : loopir_rt::cuda_fail(6, "a kernel failed on the GPU", err);
}

extern "C" int loopir_rt_event_create(void** out) {
  cudaEvent_t ev;
  cudaError_t err = cudaEventCreate(&ev);
  *out = ev;
  return err == cudaSuccess ? 0 : loopir_rt::cuda_fail(7, "cudaEventCreate", err);
}

extern "C" int loopir_rt_event_destroy(void* ev) {
  cudaEventDestroy(static_cast<cudaEvent_t>(ev));
  return 0;
}

extern "C" int loopir_rt_event_record(void* ev, void* stream) {
  cudaError_t err = cudaEventRecord(static_cast<cudaEvent_t>(ev),
                                    static_cast<cudaStream_t>(stream));
  return err == cudaSuccess ? 0 : loopir_rt::cuda_fail(7, "cudaEventRecord", err);
}

extern "C" int loopir_rt_event_elapsed(void* start, void* stop, float* ms) {
  cudaError_t err = cudaEventSynchronize(static_cast<cudaEvent_t>(stop));
  if (err == cudaSuccess)
    err = cudaEventElapsedTime(ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop));
  return err == cudaSuccess ? 0 : loopir_rt::cuda_fail(6, "a kernel failed on the GPU", err);
}

// Whether `stream` is capturing a CUDA graph: 0 no, 1 yes, 2 its capture was invalidated, 3 it
// is the legacy default stream while a blocking stream captures (using it would invalidate that
// capture), -1 the query failed (message in the last error). Asked before anything that a
// capture cannot record (allocation, copies, synchronization); it changes nothing itself.
extern "C" int loopir_rt_capture_status(void* stream, int device) {
  if (loopir_rt::use_device(device)) return -1;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status);
  if (err != cudaSuccess) {
    cudaGetLastError();  // a failed query must not surface as the next launch's error
    if (err == cudaErrorStreamCaptureImplicit) return 3;
    return loopir_rt::cuda_fail(-1, "cudaStreamIsCapturing", err);
  }
  if (status == cudaStreamCaptureStatusActive) return 1;
  return status == cudaStreamCaptureStatusInvalidated ? 2 : 0;
}
#endif  // LOOPIR_HOST_TRACE

#ifdef LOOPIR_PYTHON_ENTRY
// The capture query as a CPython builtin (METH_FASTCALL: stream handle, device): the runtime
// asks it on every call of a function with device temporaries, so it costs no ctypes marshalling.
static PyObject* loopir_py_capture_status(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "loopir_rt_capture_status: expected 2 arguments");
    return nullptr;
  }
  void* stream = loopir_py::ptr(args[0]);
  int device = static_cast<int>(PyLong_AsLong(args[1]));
  if (PyErr_Occurred()) return nullptr;
  return PyLong_FromLong(loopir_rt_capture_status(stream, device));
}
static PyMethodDef loopir_py_capture_status_def = {
    "loopir_rt_capture_status",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(loopir_py_capture_status)),
    METH_FASTCALL, nullptr};
extern "C" PyObject* loopir_py_rt_capture_status(void) {
  return PyCFunction_New(&loopir_py_capture_status_def, nullptr);
}
#endif
"""

__all__ = ["RUNTIME_DECL", "RUNTIME_DEF"]
