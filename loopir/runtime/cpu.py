"""The CPU reference executor: ``loopir.build(func, target="cpu")``.

The function is translated to C once (``loopir.runtime.c_codegen``), compiled with the
system C compiler into a shared library cached on disk (``loopir.runtime.cache``) and
called through ctypes. Calling the module checks the arguments against the parameter buffers
(count, type, dtype, rank, shape, contiguity, writeability), binds symbolic sizes from the
argument shapes, runs the function in place and turns any error the generated code recorded
(out-of-bounds access, integer division by zero, a block iter var outside its domain) into a
[`LaunchError`][loopir.errors.LaunchError].

``parallel`` loops whose iterations are proven independent run as OpenMP ``parallel for``
loops (``num_threads``), and without bounds checks ``vectorized`` loops as ``omp simd`` loops
(``loopir.runtime.c_parallel``); the library is then compiled with ``-fopenmp``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from loopir.errors import CodegenError, LaunchError
from loopir.ir import dtype as dt
from loopir.ir.expr import (
    Add,
    BinaryOp,
    Call,
    Cast,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    PrimExpr,
    Sub,
    Var,
)
from loopir.ir.functor import post_order_visit
from loopir.ir.op import WARPGROUP_COLLECTIVES, is_warp_collective
from loopir.ir.stmt import Block, BlockRealize, PrimFunc
from loopir.runtime.c_codegen import ENTRY, CProgram, generate_c
from loopir.runtime.c_fibers import ERR_DIVERGENCE, ERR_MBARRIER, ERR_WARP, SEED_ENTRY
from loopir.runtime.c_parallel import SIMD_ENTRY, THREADS_ENTRY
from loopir.runtime.c_types import ERR_ALLOC, ERR_DIV_ZERO, ERR_FIELDS, ERR_ITER_DOMAIN, ERR_OOB
from loopir.runtime.cache import DEFAULT_FLAGS, compile_shared, find_compiler, supports_flag
from loopir.runtime.module import bind_arguments

logger = logging.getLogger(__name__)

__all__ = ["CPUModule", "build_cpu", "THREAD_ORDERS"]

_LIB_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()
_PINNED: dict[str, ctypes.CDLL] = {}  # OpenMP runtimes, loaded for the life of the process
# Set in a child forked after an OpenMP runtime was loaded: the runtime's worker threads did
# not survive the fork, and a team of more than one thread would wait for them forever.
_FORKED_AFTER_OPENMP = False


def _after_fork_in_child() -> None:
    global _FORKED_AFTER_OPENMP
    _FORKED_AFTER_OPENMP = _FORKED_AFTER_OPENMP or bool(_PINNED)


os.register_at_fork(after_in_child=_after_fork_in_child)

_OPTIONS = (
    "check_bounds", "thread_regions", "thread_order", "seed", "cache_dir", "compiler", "opt_level",
    "extra_flags", "num_threads",
)  # fmt: skip

#: Values of the ``thread_order`` build option.
THREAD_ORDERS = ("sequential", "random")


def _eval_int(e: PrimExpr, env: dict[Var, int], what: str) -> int:
    """Value of an integer shape expression under ``env`` (symbolic size -> value)."""
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        if e not in env:
            raise LaunchError(f"{what}: symbolic size {e.name} is not bound by any argument shape")
        return env[e]
    if isinstance(e, Cast):
        return _eval_int(e.value, env, what)
    ops: dict[type[BinaryOp], Callable[[int, int], int]] = {
        Add: lambda a, b: a + b, Sub: lambda a, b: a - b, Mul: lambda a, b: a * b,
        FloorDiv: lambda a, b: a // b, FloorMod: lambda a, b: a % b, Min: min, Max: max,
    }  # fmt: skip
    for cls, fn in ops.items():
        if isinstance(e, cls):
            a, b = _eval_int(e.a, env, what), _eval_int(e.b, env, what)
            if cls in (FloorDiv, FloorMod) and b == 0:
                raise LaunchError(f"{what}: shape expression {e} divides by zero")
            return int(fn(a, b))
    raise LaunchError(f"{what}: cannot evaluate shape expression {e}")


class CPUModule:
    """A PrimFunc compiled for the CPU; call it with one numpy array per parameter.

    Attributes
    ----------
    func
        The PrimFunc it runs.
    source
        The generated C source.
    library_path
        The compiled shared library (in the cache directory).
    compile_seconds
        Time spent in the C compiler by this build (0.0 when the library came from the cache).
    codegen_seconds
        Time spent generating the C source.
    cache_hit
        Whether the library was found in the cache.
    compile_flags
        The C compiler flags (part of the cache key): ``-fopenmp`` when the function has
        parallel loops that run concurrently.
    check_bounds
        Whether every buffer access is bounds-checked.
    thread_order
        ``"sequential"`` or ``"random"`` (see [`build_cpu`][loopir.runtime.cpu.build_cpu]).
    seed
        Seed of the random thread order; settable between calls (``mod.seed = 3``), which
        reruns the same library with another order. Every call with one seed runs the same
        order.
    num_threads
        OpenMP threads of the parallel loops (0: OpenMP's default, ``OMP_NUM_THREADS`` or
        the number of cores; 1: serial); settable between calls without rebuilding. In a
        process forked after OpenMP was used, parallel loops run on one thread (OpenMP's
        worker threads do not survive ``fork()``).
    """

    def __init__(self, func: PrimFunc, program: CProgram, lib_path: str, *, check_bounds: bool,
                 compile_seconds: float, codegen_seconds: float, cache_hit: bool) -> None:  # fmt: skip
        self.func = func
        self.program = program
        self.source = program.source
        self.library_path = lib_path
        self.check_bounds = check_bounds
        self.compile_seconds = compile_seconds
        self.codegen_seconds = codegen_seconds
        self.cache_hit = cache_hit
        self.compile_flags: tuple[str, ...] = ()
        self.thread_order = program.thread_order
        self._seed = 0
        self._seed_fn: Any = None
        self._num_threads = 0
        self._threads_fn: Any = None
        self._simd_fn: Any = None
        try:
            self._lib = ctypes.CDLL(lib_path)
            self._fn = getattr(self._lib, ENTRY)
        except (OSError, AttributeError) as exc:
            raise CodegenError(
                f"build(target='cpu'): cannot load the compiled library {lib_path}: {exc} "
                "(delete it from the cache directory to force a rebuild)"
            ) from None
        self._fn.restype = ctypes.c_int32
        self._fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        if program.seeded:
            self._seed_fn = getattr(self._lib, SEED_ENTRY)
            self._seed_fn.restype = None
            self._seed_fn.argtypes = [ctypes.c_uint64]
        if program.parallel:
            self._threads_fn = getattr(self._lib, THREADS_ENTRY)
            self._threads_fn.restype = None
            self._threads_fn.argtypes = [ctypes.c_int]
            _pin_openmp_runtime(self._lib, lib_path)
        if program.simd:
            self._simd_fn = getattr(self._lib, SIMD_ENTRY)
            self._simd_fn.restype = None
            self._simd_fn.argtypes = [ctypes.c_int]
        # The generated code keeps thread-region (fiber) state in static variables, shared
        # by every module loaded from the same library file: serialize calls per library.
        with _LOCKS_GUARD:
            self._lock = _LIB_LOCKS.setdefault(lib_path, threading.Lock())

    def __repr__(self) -> str:
        params = ", ".join(f"{b.name}: {b.dtype}{list(map(str, b.shape))}" for b in self.func.params)
        order = f", thread_order='random', seed={self._seed}" if self.thread_order == "random" else ""
        return f"<CPUModule {self.func.name}({params}){order}>"

    @property
    def seed(self) -> int:
        return self._seed

    @seed.setter
    def seed(self, value: Any) -> None:
        self._seed = _check_seed(value, "CPUModule.seed")

    @property
    def num_threads(self) -> int:
        return self._num_threads

    @num_threads.setter
    def num_threads(self, value: Any) -> None:
        self._num_threads = _check_threads(value, "CPUModule.num_threads")

    def _aliased(self, arrays: list[np.ndarray]) -> bool:
        """Whether an array the function writes may overlap another argument: the proof
        that parallel (simd) iterations are independent assumed distinct buffers."""
        return any(
            k != m and np.may_share_memory(arrays[k], arrays[m])
            for k in self.program.written for m in range(len(arrays))
        )  # fmt: skip

    # --- argument handling ------------------------------------------------------------------
    def _check_args(self, args: tuple[Any, ...]) -> tuple[list[np.ndarray], dict[Var, int]]:
        params = self.func.params
        name = self.func.name
        if len(args) != len(params):
            raise LaunchError(
                f"{name}: expected {len(params)} arrays "
                f"({', '.join(b.name for b in params)}), got {len(args)}"
            )
        arrays: list[np.ndarray] = []
        for k, (b, a) in enumerate(zip(params, args)):
            what = f"{name}: argument {k} ({b.name})"
            if not isinstance(a, np.ndarray):
                raise LaunchError(
                    f"{what}: expected a numpy.ndarray, got {type(a).__name__} (the CPU "
                    "executor runs on numpy arrays; copy device arrays to the host first)"
                )
            want = dt.to_numpy(b.dtype)
            if a.dtype != want:
                if dt.element(b.dtype) == "bfloat16" and a.dtype.itemsize == 2 and a.dtype.name == "bfloat16":
                    a = a.view(np.uint16)  # ml_dtypes.bfloat16: same bits
                else:
                    extra = " (bfloat16 is passed as uint16 bit patterns)" if want == np.uint16 else ""
                    raise LaunchError(f"{what}: dtype {a.dtype} does not match {b.dtype}{extra}")
            if a.ndim != len(b.shape):
                raise LaunchError(
                    f"{what}: array has {a.ndim} dimensions {a.shape}, the buffer has "
                    f"{len(b.shape)} ({', '.join(map(str, b.shape))})"
                )
            if b.strides is None and not a.flags.c_contiguous:
                raise LaunchError(
                    f"{what}: array is not C-contiguous (strides {a.strides}); pass "
                    "np.ascontiguousarray(...) (outputs are written in place, so a copy must "
                    "be made by the caller)"
                )
            if k in self.program.written and not a.flags.writeable:
                raise LaunchError(f"{what}: the function writes this buffer but the array is read-only")
            arrays.append(a)
        env: dict[Var, int] = {}
        for b, a in zip(params, arrays):
            for d, s in enumerate(b.shape):
                if isinstance(s, Var) and s not in env:
                    env[s] = int(a.shape[d])
        for k, (b, a) in enumerate(zip(params, arrays)):
            what = f"{name}: argument {k} ({b.name})"
            for d, s in enumerate(b.shape):
                want_n = _eval_int(s, env, what)
                if want_n != a.shape[d]:
                    bound = ", ".join(f"{v.name}={x}" for v, x in env.items())
                    raise LaunchError(
                        f"{what}: shape {a.shape} does not match the buffer shape "
                        f"({', '.join(map(str, b.shape))}): dimension {d} should be {want_n}"
                        + (f" (with {bound})" if bound else "")
                    )
            if b.strides is not None:
                want_st = [_eval_int(s, env, what) * a.itemsize for s in b.strides]
                if list(a.strides) != want_st:
                    raise LaunchError(f"{what}: byte strides {a.strides} do not match {want_st}")
        for v, x in env.items():
            lo, hi = dt.min_value(v.dtype), dt.max_value(v.dtype)
            if not lo <= x <= hi:
                raise LaunchError(f"{name}: symbolic size {v.name}={x} does not fit {v.dtype}")
        return arrays, env

    # --- running ----------------------------------------------------------------------------
    def __call__(self, *args: Any, **named: Any) -> None:
        """Run the function on ``args`` (numpy arrays, one per parameter; outputs in place).

        Arrays may also be passed by parameter (buffer) name, ``mod(A=a, B=b, C=c)``, or
        both ways, as Python binds a call (see ``loopir.runtime.module.bind_arguments``).
        """
        if named:
            args = bind_arguments(self.func.name, [b.name for b in self.func.params], args, named)
        arrays, env = self._check_args(args)
        ptrs = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        syms = (ctypes.c_int64 * max(len(self.program.sym_vars), 1))(
            *[env[v] for v in self.program.sym_vars]
        )
        err = (ctypes.c_int64 * len(ERR_FIELDS))()
        with self._lock:
            if self._seed_fn is not None:
                # reseed at every call: the order depends on the seed only, not on history
                self._seed_fn(self._seed)
            if self._threads_fn is not None or self._simd_fn is not None:
                aliased = self._aliased(arrays)
                if self._threads_fn is not None:
                    serial = aliased or _FORKED_AFTER_OPENMP
                    self._threads_fn(1 if serial else self._num_threads)
                if self._simd_fn is not None:
                    self._simd_fn(0 if aliased else 1)
            code = self._fn(ptrs, syms, err)
        if code:
            raise self._error(list(err))

    def benchmark(self, *args: Any, warmup: int = 1, repeat: int = 5) -> float:
        """Median wall-clock milliseconds of a call on ``args`` (after ``warmup`` calls)."""
        if repeat < 1 or warmup < 0:
            raise LaunchError(f"benchmark: need repeat >= 1 and warmup >= 0, got {repeat}, {warmup}")
        for _ in range(warmup):
            self(*args)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            self(*args)
            times.append((time.perf_counter() - t0) * 1e3)
        times.sort()
        return times[len(times) // 2]

    def _error(self, err: list[int]) -> LaunchError:
        rec = dict(zip(ERR_FIELDS, err))
        name = self.func.name
        if rec["code"] == ERR_OOB:
            buf, shape = self.program.buffers[rec["id"]]
            kind = "store to" if rec["is_store"] else "load from"
            return LaunchError(
                f"{name}: out-of-bounds {kind} buffer {buf}{shape}: index {rec['value']} in "
                f"dimension {rec['dim']} is outside [0, {rec['extent']})"
            )
        if rec["code"] == ERR_DIV_ZERO:
            return LaunchError(f"{name}: integer division by zero (floordiv/floormod of {rec['value']} by 0)")
        if rec["code"] == ERR_ITER_DOMAIN:
            block, ivs = self.program.blocks[rec["id"]]
            iv = ivs[rec["dim"]]
            return LaunchError(
                f"{name}: block {block}: iter var {iv} is bound to {rec['value']}, outside its "
                f"domain [{rec['lo']}, {rec['lo'] + rec['extent']})"
            )
        if rec["code"] == ERR_DIVERGENCE:
            return LaunchError(
                f"{name}: barrier divergence in a thread region: {rec['value']} of "
                f"{rec['extent']} threads wait at a storage_sync that the others never reach "
                "(undefined behaviour on a GPU; is a barrier under a thread-dependent condition?)"
            )
        if rec["code"] == ERR_WARP:
            return self._warp_error(rec)
        if rec["code"] == ERR_MBARRIER and rec["id"] == 0:
            return LaunchError(f"{name}: an mbarrier arrival of count {rec['value']} where its phase expects "
                               f"{rec['extent']} more (of {rec['lo']}): more arrivals than its init count")
        if rec["code"] == ERR_MBARRIER:
            return LaunchError(f"{name}: mbarrier deadlock in a thread region: {rec['value']} of {rec['extent']} "
                               f"threads wait on mbarrier phases that no thread can complete ({rec['lo']} at "
                               "a block barrier)")
        if rec["code"] == ERR_ALLOC:
            buf, shape = self.program.buffers[rec["id"]]
            return LaunchError(f"{name}: cannot allocate {rec['value']} bytes for buffer {buf}{shape}")
        return LaunchError(f"{name}: the compiled function failed with error record {rec}")


    def _warp_error(self, rec: dict[str, int]) -> LaunchError:
        name = self.func.name
        if rec["id"] == 0:
            return LaunchError(
                f"{name}: a warp-collective call (ptx_ldmatrix / ptx_mma) in a thread region whose "
                f"threadIdx.x extent {rec['value']} is not a multiple of 32: its warps would mix "
                "threadIdx.y rows (LowerWarpMemory refuses this for CUDA too)"
            )
        return LaunchError(
            f"{name}: only {rec['value']} of the 32 lanes of warp {rec['dim']} reach a "
            f"warp-collective call (ptx_ldmatrix / ptx_mma); the others finished or wait at a "
            f"barrier ({rec['lo']} threads). All 32 lanes must execute it together (undefined on a "
            "GPU otherwise; is it under a lane-dependent condition or a threadIdx.x loop of extent "
            "below 32?)"
        )


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]  # fmt: skip


def _pin_openmp_runtime(lib: ctypes.CDLL, lib_path: str) -> None:
    """Keep the OpenMP runtime that ``lib`` uses loaded until the process exits.

    Its worker threads outlive a parallel region, waiting in the runtime's code; unloading
    a module's library (``loopir.testing`` does, to bound the memory of fuzz runs) would
    otherwise unload the runtime with it and crash them. Where the runtime cannot be found,
    the module's own library is pinned instead.
    """
    with _LOCKS_GUARD:
        try:
            addr = ctypes.cast(lib.omp_get_max_threads, ctypes.c_void_p)
        except AttributeError:
            return  # compiled without OpenMP: no runtime, no threads
        info = _DlInfo()
        try:
            found = ctypes.CDLL(None).dladdr(addr, ctypes.byref(info))
        except AttributeError:
            found = 0
        path = info.dli_fname.decode() if found and info.dli_fname else lib_path
        if path not in _PINNED:
            _PINNED[path] = ctypes.CDLL(path)


def _check_seed(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < 2**64:
        raise CodegenError(f"{what}: seed must be an integer in [0, 2**64), got {value!r}")
    return int(value)


def _check_threads(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= 4096:
        raise CodegenError(
            f"{what}: num_threads must be an integer in [0, 4096] (0: OpenMP's default), got {value!r}"
        )
    return int(value)


def _check_thread_order(options: dict[str, Any]) -> tuple[str, bool, int]:
    """Validated (thread_order, thread_regions, seed) build options."""
    order = options.get("thread_order", "sequential")
    if not isinstance(order, str) or order not in THREAD_ORDERS:
        raise CodegenError(
            f"build(target='cpu'): thread_order must be one of {', '.join(map(repr, THREAD_ORDERS))}, "
            f"got {order!r}"
        )
    regions = options.get("thread_regions", True)
    if not isinstance(regions, bool):
        raise CodegenError(f"build(target='cpu'): thread_regions must be True or False, got {regions!r}")
    if order == "random" and not regions:
        raise CodegenError(
            "build(target='cpu'): thread_order='random' runs threads as fibers and needs "
            "thread_regions=True, got thread_regions=False"
        )
    seed = _check_seed(options.get("seed", 0), "build(target='cpu')")
    return order, regions, seed


def _runnable(func: PrimFunc) -> PrimFunc:
    """What the executor runs for ``func``: itself, or, for TensorIR (blocks) with
    warp-collective calls, its lowered form (``loopir.lower``).

    A collective (``ldmatrix``, ``mma.sync``) needs its warp's 32 lanes together, so the thread
    loops around it run as fibers with GPU semantics: a nested thread loop (a cooperative
    shared-memory fetch) then does only its fiber's part, and its readers must wait at the
    barriers ThreadSync plans when lowering. Run unlowered, a warp read the rows of a shared
    tile that another warp had not fetched yet.
    """
    blocks = collectives = False

    def visit(n: object) -> None:
        nonlocal blocks, collectives
        if isinstance(n, (Block, BlockRealize)):
            blocks = True
        elif isinstance(n, Call) and (is_warp_collective(n) or n.op in WARPGROUP_COLLECTIVES):
            # wgmma reads its shared tiles by their compacted layout (rows of 64) too
            collectives = True

    post_order_visit(func.body, visit)
    if not (blocks and collectives):
        return func
    from loopir.passes import lower

    logger.debug("build(target='cpu'): %s has blocks and warp-collective calls; running it lowered", func.name)
    return lower(func)


def build_cpu(func: PrimFunc, **options: Any) -> CPUModule:
    """Compile ``func`` for the CPU reference executor.

    Parameters
    ----------
    func
        Any PrimFunc: TensorIR (blocks) or lowered. TensorIR with warp-collective calls
        (tensorized with ``ldmatrix`` / ``mma.sync``) runs as its lowered form: its thread
        loops run as fibers, whose shared-memory accesses need the barriers lowering plans.
    check_bounds : bool, default True
        Check every buffer index (and every block binding against its iter var domain) and
        raise LaunchError naming the buffer and index instead of touching memory outside it.
    thread_regions : bool, default True
        Run ``threadIdx`` loops whose body contains a ``storage_sync`` with GPU block
        semantics (one fiber per thread, barriers synchronize them), which lowered IR with
        cooperative fetches needs. False runs every loop serially, barriers as no-ops.
    thread_order : {"sequential", "random"}, default "sequential"
        How the threads of lowered IR run. ``"sequential"``: as above, the sequential meaning
        of the IR everywhere but in threadIdx loops with barriers, whose fibers run in thread
        order. ``"random"``: as a GPU may run them, so that a missing barrier changes the
        result: for lowered IR (no blocks) the whole work of every thread block (the statement
        under a kernel's innermost ``blockIdx`` loops) is a region, sibling threadIdx nests
        share the thread index, and between two barriers the fibers run to their next barrier
        in a random permutation drawn from ``seed``. IR with blocks keeps its sequential
        meaning. See ``loopir.runtime.c_fibers``.
    seed : int, default 0
        Seed of the random thread order (any integer in [0, 2**64); ignored by
        ``"sequential"``). Calls with one seed are reproducible; ``CPUModule.seed`` can be
        changed between calls without rebuilding.
    cache_dir : path, optional
        Directory for compiled libraries (see ``loopir.runtime.cache``).
    compiler : str, optional
        C compiler executable (default: ``$CC``, then gcc, then cc).
    opt_level : str, default "-O2"
        Optimization flag.
    extra_flags : sequence of str, optional
        Further compiler flags.
    num_threads : int, default 0
        Threads of the OpenMP team that runs a parallel loop: 0 is OpenMP's default
        (``OMP_NUM_THREADS``, else the number of cores), 1 runs everything serially; settable
        later as ``CPUModule.num_threads``. A ``parallel`` loop runs concurrently only when
        its iterations are proven independent and nothing under it is thread-bound (see
        ``loopir.runtime.c_parallel``); the C source says in a comment why a loop runs
        serially. With ``check_bounds=False``, a ``vectorized`` loop whose body cannot fail
        becomes an ``omp simd`` loop. An error is the one sequential execution reports, and
        a call whose written arrays overlap other arguments runs on one thread without simd.

    Raises
    ------
    CodegenError
        For unknown options, IR the executor cannot translate, or a compiler failure.
    """
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise CodegenError(
            f"build(target='cpu'): unknown option(s) {', '.join(unknown)}; known: {', '.join(_OPTIONS)}"
        )
    if not isinstance(func, PrimFunc):
        raise CodegenError(f"build(target='cpu'): expected a PrimFunc, got {type(func).__name__}")
    check = bool(options.get("check_bounds", True))
    order, regions, seed = _check_thread_order(options)
    threads = _check_threads(options.get("num_threads", 0), "build(target='cpu')")
    t0 = time.perf_counter()
    program = generate_c(_runnable(func), check_bounds=check, thread_regions=regions, thread_order=order)
    codegen_s = time.perf_counter() - t0
    opt = options.get("opt_level", "-O2")
    if isinstance(opt, int) and not isinstance(opt, bool) and 0 <= opt <= 3:
        opt = f"-O{opt}"
    if not (isinstance(opt, str) and opt.startswith("-O")):
        raise CodegenError(f"build(target='cpu'): opt_level must be 0-3 or '-O<n>', got {opt!r}")
    cc = find_compiler(options.get("compiler"))
    flags = tuple(opt if f == "-O2" else f for f in DEFAULT_FLAGS) + _openmp_flags(program, cc)
    flags += tuple(options.get("extra_flags", ()))
    res = compile_shared(
        program.source,
        compiler=cc,
        flags=flags,
        cache_dir=options.get("cache_dir"),
    )
    logger.debug(
        "built %s for cpu: codegen %.3f s, compile %.3f s (cache %s)",
        func.name, codegen_s, res.seconds, "hit" if res.cache_hit else "miss",
    )  # fmt: skip
    mod = CPUModule(func, program, os.fspath(res.path), check_bounds=check,
                    compile_seconds=res.seconds, codegen_seconds=codegen_s,
                    cache_hit=res.cache_hit)  # fmt: skip
    mod.seed = seed
    mod.num_threads = threads
    mod.compile_flags = flags
    return mod


def _openmp_flags(program: CProgram, cc: str) -> tuple[str, ...]:
    """``-fopenmp`` for parallel loops, ``-fopenmp-simd`` (no runtime library) for simd loops
    only; nothing when the compiler lacks it (the pragmas are then ignored: serial loops)."""
    if program.parallel and supports_flag(cc, "-fopenmp"):
        return ("-fopenmp",)
    if (program.simd or program.parallel) and supports_flag(cc, "-fopenmp-simd"):
        return ("-fopenmp-simd",)
    return ()
