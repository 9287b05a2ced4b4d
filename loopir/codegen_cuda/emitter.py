"""CUDA C++ emission for lowered loopir functions.

Input: a PrimFunc in lowered form (For / IfThenElse / SeqStmt / BufferStore / Evaluate / Allocate;
see the lowering contract). [`emit_cuda`][loopir.codegen_cuda.translation_unit.emit_cuda] splits it into a
host program and kernels ([`loopir.codegen_cuda.split`][loopir.codegen_cuda.split]) and prints one
``extern "C" __global__`` function per kernel. The source is meant to be read: names come from the
IR, one statement per line.

Mapping (kernel side):

* ``blockIdx.*``/``threadIdx.*`` loops declare ``const int <var> = (int)threadIdx.x;`` and are
  guarded when their extent is smaller than the launched one; ``vthread.*`` loops have been
  folded into each thread by the InjectVirtualThread pass (``build_cuda`` runs it on any
  IR); one left over (a symbolic extent) is an ordinary loop, which is its meaning;
* serial loops that index a register array (``local`` buffer) and run at most
  ``AUTO_UNROLL_MAX_TRIPS`` innermost iterations get ``#pragma unroll``: a run-time index
  would move the array to local memory;
* ``shared`` Allocates become ``__shared__ __align__(16)`` arrays, or, in a kernel whose
  shared buffers exceed the 48 KB of static shared memory, pointers at aligned offsets of one
  ``extern __shared__`` array sized at launch
  ([`loopir.codegen_cuda.shared_memory`][loopir.codegen_cuda.shared_memory]); ``local`` ones
  register arrays; global buffers are ``__restrict__`` pointer parameters (``const`` when only
  read);
* ``floordiv``/``floormod`` print as ``/`` and ``%`` only when both operands are provably
  non-negative, otherwise as floor-correct helpers;
* ``tvm_storage_sync("shared")`` is ``__syncthreads()`` (after ``fence.proxy.async.shared::cta``
  in a kernel with ``wgmma``, whose shared buffers are then 1024-byte aligned:
  [`loopir.codegen_cuda.wgmma`][loopir.codegen_cuda.wgmma]);
* a vectorized loop whose store and load are provably contiguous and aligned becomes one
  ``float4``/``float2``/``half2``... access; other vectorized loops, and unrolled ones, become
  ``#pragma unroll`` loops; with a register array on one side, the register side is its
  scalar components, and loads from read-only global memory into registers are predicated PTX
  loads ([`loopir.codegen_cuda.registers`][loopir.codegen_cuda.registers]).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from loopir.codegen_cuda import analysis as an
from loopir.codegen_cuda import shared_memory as smem
from loopir.codegen_cuda.allreduce import emit_allreduce
from loopir.codegen_cuda.async_copy import (
    async_call_text,
    async_scalar_store,
    async_vector_text,
)
from loopir.codegen_cuda.base_pointers import (
    AUTO_UNROLL_MAX_TRIPS,
    BaseFrame,
    base_frame,
    frame_thread,
    global_ptr,
    hoist_frame_loop,
    trip_count,
)
from loopir.codegen_cuda.ctypes import ctype, vector_carrier
from loopir.codegen_cuda.exprs_cuda import ExprPrinter
from loopir.codegen_cuda.indexing import (
    add,
    fold_constants,
    lane_invariant,
    linear_coeff,
    mul,
    vector_splat,
)
from loopir.codegen_cuda.registers import REG_CARRIERS, predicated_register_load, register_offset
from loopir.codegen_cuda.source import CodeWriter, KernelSource, NameTable
from loopir.codegen_cuda.split import (
    BLOCK_TAGS,
    GRID_TAGS,
    KernelSpec,
)
from loopir.codegen_cuda.tensor_core import tensor_core_text
from loopir.codegen_cuda.tma import (
    TMA_SMEM_ALIGN,
    TensorMapParam,
    check_register_budget,
    has_tma,
    tma_text,
)
from loopir.codegen_cuda.vector_compute import (
    emit_unswitched,
    emit_vector_accumulate,
    vector_compute,
)
from loopir.codegen_cuda.warp_uniform import uniform_tags, warp_index_decl, warp_index_name
from loopir.codegen_cuda.wgmma import has_wgmma, wgmma_smem_align
from loopir.errors import CodegenError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import (
    And,
    BufferLoad,
    Call,
    FloatImm,
    IntImm,
    PrimExpr,
    Ramp,
    Select,
    StringImm,
    Var,
)
from loopir.ir.functor import Visitor, collect_vars, post_order_visit, substitute
from loopir.ir.op import is_barrier
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
)
from loopir.passes.context import PassContext
from loopir.passes.cuda_config import HOIST_GLOBAL_BASE_KEY, WARP_UNIFORM_KEY
from loopir.passes.software_pipeline import ASYNC_COPY_KEY
from loopir.passes.storage_align import allocation_size

logger = logging.getLogger(__name__)


#: The extern array of a kernel's dynamic shared memory.
DYNAMIC_SMEM = "loopir_smem"

def _indexes_register_array(s: For) -> bool:
    """Whether ``s`` is short (at most ``AUTO_UNROLL_MAX_TRIPS`` innermost iterations) and its
    variable indexes a ``local`` buffer in its body: such a loop is unrolled, since a run-time
    index would move the array to (slow) local memory."""
    if trip_count(s) > AUTO_UNROLL_MAX_TRIPS:
        return False
    var = s.loop_var
    found = False

    def f(n: object) -> None:
        nonlocal found
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer.scope == "local":
            if any(var in collect_vars(i) for i in n.indices):
                found = True

    post_order_visit(s.body, f)
    return found


class _HasBarrier(Visitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: Call) -> None:
        if is_barrier(node):
            self.found = True


def _has_barrier(stmt: Stmt) -> bool:
    h = _HasBarrier()
    h.visit(stmt)
    return h.found


class KernelEmitter(CodeWriter):
    """Prints one kernel."""

    def __init__(
        self, func: PrimFunc, spec: KernelSpec, size_vars: set[Var], min_blocks: int | None = None,
        dynamic: tuple[dict[Allocate, int], int] = ({}, 0),
    ) -> None:
        self.func = func
        self.min_blocks = min_blocks
        self.spec = spec
        self.names = NameTable()
        self.names.used.add(DYNAMIC_SMEM)
        # dynamic shared memory: the byte offset of each shared Allocate placed in the extern
        # array, and its size
        self.dynamic_offsets, self.dynamic_bytes = dynamic
        self.lines: list[str] = []
        self.indent = 1
        # variable bounds for the floordiv / alignment proofs
        self.env: dict[Var, an.Bound] = {v: (0, None) for v in size_vars}
        self.size_vars = frozenset(size_vars)
        self.alignment: dict[Buffer, int] = {}
        self.shared_bytes = 0
        self.launch: dict[str, PrimExpr] = dict(zip(GRID_TAGS, spec.grid)) | dict(
            zip(BLOCK_TAGS, spec.block)
        )
        self.printer = ExprPrinter(self)
        self.uses_fp16 = False
        self.uses_bf16 = False
        self.active_tags: set[str] = set()
        self.uses_allreduce = False
        self.uses_async = False
        self.uses_tensor_core = False
        self.uses_tma = False  # TMA or mbarrier calls: the translation unit's TMA helpers
        # warpgroup register reallocations (count, increase): a register cap at entry, checked
        self.setmaxnreg_counts: list[tuple[int, bool]] = []
        self.thread_vars: dict[str, Var] = {}  # the thread loops around the statement, by tag
        self.wgmma_shapes: set[tuple[str, int, int, str, str]] = set()
        self.smem_align = wgmma_smem_align(spec.name, spec.body)
        tma = has_tma(spec.body)
        if tma:  # swizzled TMA tiles follow address bits 7-9
            self.smem_align = max(self.smem_align, TMA_SMEM_ALIGN)
        # wgmma and TMA read shared memory through the async proxy: a block barrier then also
        # fences the generic proxy's writes before them
        self.async_proxy = tma or has_wgmma(spec.body)
        self.tensor_maps: list[TensorMapParam] = []
        self.in_async_copy = False  # inside a loop of a software pipeline's async stage
        self.hoist_bases = bool(PassContext.current().get(HOIST_GLOBAL_BASE_KEY))
        # threadIdx.y / .z read once as warp-uniform values (loopir.codegen_cuda.warp_uniform), in
        # kernels on Hopper's warpgroup instructions (their descriptors and roles)
        uniform = PassContext.current().get(WARP_UNIFORM_KEY) and self.async_proxy
        self.uniform_tags = uniform_tags(self.launch) if uniform else frozenset()
        self.uniform_used: set[str] = set()
        self.names.used.update(warp_index_name(t) for t in self.uniform_tags)
        self.scope: list[Var] = []  # loop and thread variables bound around the statement
        self.frame: BaseFrame | None = None

    # -- helpers used by the expression printer --------------------------------------------
    def var_name(self, v: Var) -> str:
        return self.names.get(v, v.name)

    def thread_index(self, tag: str, dtype: str = "int32") -> str:
        """The text of a ``threadIdx.*`` / ``blockIdx.*`` value as ``dtype``: a warp-uniform
        index's kernel-level name where the block's shape allows it."""
        c = ctype(dtype)
        if tag not in self.uniform_tags:
            return f"(({c}){tag})"
        self.uniform_used.add(tag)
        name = warp_index_name(tag)
        return name if dtype == "int32" else f"(({c}){name})"

    def buffer_name(self, b: Buffer) -> str:
        return self.names.get(b, b.name)

    def flat_index(self, buffer: Buffer, indices: tuple[PrimExpr, ...]) -> PrimExpr:
        """Row-major (or strided) linear offset of ``indices`` in ``buffer``."""
        if len(indices) != len(buffer.shape):
            raise CodegenError(
                f"CUDA codegen: access to {buffer.name} with {len(indices)} indices for "
                f"{len(buffer.shape)} dimensions"
            )
        if buffer.strides is not None:
            terms = [mul(i, s) for i, s in zip(indices, buffer.strides)]
        else:
            terms = []
            stride: PrimExpr = IntImm(1, "int32")
            for i, extent in reversed(list(zip(indices, buffer.shape))):
                terms.append(mul(i, stride))
                stride = mul(stride, extent)
            terms.reverse()
        out = terms[0] if terms else IntImm(0, "int32")
        for t in terms[1:]:
            out = add(out, t)
        return out

    def note_dtype(self, dtype: str) -> None:
        e = dt.element(dtype)
        if e == "float16":
            self.uses_fp16 = True
        elif e == "bfloat16":
            self.uses_bf16 = True

    @contextmanager
    def bound(self, v: Var, lo: PrimExpr, extent: PrimExpr) -> Iterator[None]:
        blo = an.const_int_bound(lo, self.env)
        bext = an.const_int_bound(extent, self.env)
        hi = None if blo[1] is None or bext[1] is None else blo[1] + bext[1] - 1
        saved = self.env.get(v)
        self.env[v] = (blo[0], hi)
        try:
            yield
        finally:
            if saved is None:
                del self.env[v]
            else:
                self.env[v] = saved

    def expr(self, e: PrimExpr) -> str:
        return self.printer.print(e)

    # -- kernel ------------------------------------------------------------------------------
    def emit(self) -> tuple[str, KernelSource]:
        spec = self.spec
        params: list[str] = []
        decls: list[str] = []
        for b in spec.buffers:
            self.note_dtype(b.dtype)
            name = self.buffer_name(b)
            params.append(name)
            const = "" if b in spec.written else "const "
            decls.append(f"{const}{ctype(b.dtype)}* __restrict__ {name}")
        for v in spec.scalars:
            name = self.var_name(v)
            params.append(name)
            decls.append(f"{ctype(v.dtype)} {name}")
        self.stmt(spec.body)
        for m in self.tensor_maps:  # known once the body is printed
            params.append(m.name)
            decls.append(f"const __grid_constant__ CUtensorMap {m.name}")
        threads = 1
        const_block = all(isinstance(e, IntImm) for e in spec.block)
        if const_block:
            for e in spec.block:
                threads *= e.value  # type: ignore[attr-defined]
        if not const_block:
            bounds = ""
        elif self.min_blocks:
            # caps registers so that min_blocks blocks of this size fit on one SM
            bounds = f"__launch_bounds__({threads}, {self.min_blocks}) "
        elif self.setmaxnreg_counts:
            # setmaxnreg takes effect only under a register cap at entry (ptxas ignores it else)
            bounds = f"__launch_bounds__({threads}, 1) "
        else:
            bounds = f"__launch_bounds__({threads}) "
        if const_block and self.setmaxnreg_counts:
            check_register_budget(spec.name, self.setmaxnreg_counts, threads, self.min_blocks or 1)
        head = f'extern "C" __global__ void {bounds}{spec.name}('
        sig = head + (",\n" + " " * len(head)).join(decls) + ") {" if decls else head + ") {"
        # read at the entry, where the block's threads are converged
        self.lines[:0] = ["  " + warp_index_decl(t) for t in sorted(self.uniform_used)]
        if self.dynamic_offsets:
            self.lines.insert(0, f"  extern __shared__ __align__({self.smem_align}) unsigned char {DYNAMIC_SMEM}[];")
        text = "\n".join([sig, *self.lines, "}"])
        return text, KernelSource(
            spec=spec,
            params=tuple(params),
            alignment=dict(self.alignment),
            shared_bytes=self.shared_bytes,
            dynamic_shared_bytes=self.dynamic_bytes,
            tensor_maps=tuple(self.tensor_maps),
        )

    # -- statements --------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        method = getattr(self, "visit_" + type(s).__name__, None)
        if method is None:
            raise CodegenError(
                f"CUDA codegen: {type(s).__name__} is not part of the lowered form (expected "
                f"For, IfThenElse, SeqStmt, BufferStore, Evaluate, Allocate); run "
                f"loopir.lower first:\n{s}"
            )
        method(s)

    def visit_SeqStmt(self, s: SeqStmt) -> None:
        for x in s.seq:
            self.stmt(x)

    def visit_Evaluate(self, s: Evaluate) -> None:
        v = s.value
        if isinstance(v, Call) and v.op == "loopir.thread_allreduce":
            self.line(emit_allreduce(self, v))
            self.uses_allreduce = True
            return
        if isinstance(v, Call) and (text := async_call_text(v)) is not None:
            self.line(text)
            self.uses_async = True
            return
        if isinstance(v, Call) and (text := tma_text(self, v)) is not None:
            self.line(text)
            self.uses_tma = True
            return
        if isinstance(v, Call) and (text := tensor_core_text(self, v)) is not None:
            self.line(text)
            self.uses_tensor_core = True
            return
        if isinstance(v, Call) and v.op == "tvm_storage_sync":
            scope = v.args[0].value if isinstance(v.args[0], StringImm) else None
            if scope == "shared":
                if self.async_proxy:
                    self.line('asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");')
                self.line("__syncthreads();")
            elif scope == "warp":
                self.line("__syncwarp();")
            else:
                raise CodegenError(
                    f"CUDA codegen: kernel {self.spec.name}: storage_sync({scope!r}) has no CUDA "
                    "equivalent inside a kernel (only 'shared' and 'warp')"
                )
            return
        if isinstance(v, Call) and not v.pure:
            self.line(f"(void)({self.expr(v)});")
        # pure expressions evaluated for nothing are dropped

    def _block_uniform(self, e: PrimExpr) -> bool:
        """Whether ``e`` is one value in every thread of a block: it reads only sizes and block
        coordinates (no thread or loop variable, no memory)."""
        blocks = {v for tag, v in self.thread_vars.items() if tag.startswith("blockIdx.")}
        loads: list[bool] = []
        post_order_visit(e, lambda n: loads.append(True) if isinstance(n, BufferLoad) else None)
        return not loads and all(v in self.size_vars or v in blocks for v in collect_vars(e))

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        barrier = _has_barrier(s.then_case) or (s.else_case is not None and _has_barrier(s.else_case))
        if barrier and not self._block_uniform(s.condition):
            logger.warning(
                "kernel %s: __syncthreads() under the condition %s; correct only if the "
                "condition is uniform across the thread block",
                self.spec.name,
                s.condition,
            )
        with self.block(f"if ({self.expr(s.condition)})"):
            self.stmt(s.then_case)
        if s.else_case is not None:
            self.lines.pop()
            with self.block("} else"):
                self.stmt(s.else_case)

    def visit_BufferStore(self, s: BufferStore) -> None:
        self.note_dtype(s.buffer.dtype)
        lanes = dt.lanes(s.value.dtype)
        if lanes > 1 or any(dt.lanes(i.dtype) > 1 for i in s.indices):
            self.vector_store(s)
            return
        idx = self.expr(self.flat_index(s.buffer, s.indices))
        copy = async_scalar_store(s) if self.in_async_copy else None
        if copy is not None:
            src, cond = copy
            nbytes = dt.bits(s.buffer.dtype) // 8
            sptr, soff = global_ptr(self, src.buffer, self.flat_index(src.buffer, src.indices))
            size = str(nbytes) if cond is None else f"({self.expr(cond)}) ? {nbytes} : 0"
            self.line(f"loopir_cp_async<{nbytes}>(&{self.buffer_name(s.buffer)}[{idx}], "
                      f"&{sptr}[{self.expr(soff)}], {size});")  # fmt: skip
            self.uses_async = True
            return
        self.line(f"{self.buffer_name(s.buffer)}[{idx}] = {self.expr(s.value)};")

    def visit_Allocate(self, s: Allocate) -> None:
        b = s.buffer
        self.note_dtype(b.dtype)
        for e in (*b.shape, *(b.strides or ())):
            if not isinstance(e, IntImm):
                raise CodegenError(
                    f"CUDA codegen: kernel {self.spec.name}: {b.scope} buffer {b.name} has "
                    f"non-constant shape {tuple(str(x) for x in b.shape)}; shared and local "
                    "buffers need constant extents"
                )
        shape = [e.value for e in b.shape if isinstance(e, IntImm)]  # all of them: checked above
        strides = None if b.strides is None else [st.value for st in b.strides if isinstance(st, IntImm)]
        size = allocation_size(shape, strides)  # padded strides included
        name = self.buffer_name(b)
        if b.scope == "shared" and s in self.dynamic_offsets:
            t, off = ctype(b.dtype), self.dynamic_offsets[s]
            base = f"{DYNAMIC_SMEM} + {off}" if off else DYNAMIC_SMEM
            self.line(f"{t}* {name} = reinterpret_cast<{t}*>({base});")
        elif b.scope == "shared":
            self.shared_bytes += smem.allocation_bytes(s)
            self.line(f"__shared__ __align__({self.smem_align}) {ctype(b.dtype)} {name}[{size}];")
        elif b.scope == "local":
            self.line(f"{ctype(b.dtype)} {name}[{size}];")
        else:
            hint = " (run LowerWarpMemory, as loopir.build(target='cuda') does)" if b.scope == "warp" else ""
            raise CodegenError(
                f"CUDA codegen: kernel {self.spec.name}: cannot allocate {b.scope} buffer "
                f"{b.name} inside a kernel{hint}"
            )
        self.stmt(s.body)

    def visit_For(self, s: For) -> None:
        if s.annotations.get(ASYNC_COPY_KEY) and not self.in_async_copy:
            self.in_async_copy = True
            try:
                self.visit_For(s)
            finally:
                self.in_async_copy = False
            return
        if s.kind is ForKind.THREAD_BINDING and s.thread_tag in self.launch:
            self.thread_loop(s)
            return
        if (s.kind is ForKind.VECTORIZED and self.try_vector_loop(s)) or emit_vector_accumulate(self, s) or emit_unswitched(self, s):
            return
        if self.frame is None and self.hoist_bases and hoist_frame_loop(s):
            with base_frame(self):
                self._emit_loop(s)
            return
        self._emit_loop(s)

    def _emit_loop(self, s: For) -> None:
        if s.kind in (ForKind.UNROLLED, ForKind.VECTORIZED) or (
            s.kind is ForKind.THREAD_BINDING  # a vthread loop left over: an ordinary loop
        ) or (s.kind is ForKind.SERIAL and _indexes_register_array(s)):
            self.line("#pragma unroll")
        elif s.kind is ForKind.PARALLEL:
            logger.info(
                "kernel %s: parallel loop %s runs serially inside each thread",
                self.spec.name,
                s.loop_var.name,
            )
        v = self.var_name(s.loop_var)
        t = ctype(s.loop_var.dtype)
        lo = self.expr(s.min)
        if isinstance(s.min, IntImm) and s.min.value == 0:
            end = self.expr(s.extent)
        else:
            end = self.expr(add(s.min, s.extent))
        if self.frame is not None and isinstance(s.min, IntImm):
            self.frame.inner.add(s.loop_var)
        with self.bound(s.loop_var, s.min, s.extent):
            self.scope.append(s.loop_var)
            try:
                with self.block(f"for ({t} {v} = {lo}; {v} < {end}; ++{v})"):
                    self.stmt(s.body)
            finally:
                self.scope.pop()

    def thread_loop(self, s: For) -> None:
        tag = s.thread_tag
        assert tag is not None
        if tag in self.active_tags:
            raise CodegenError(
                f"CUDA codegen: kernel {self.spec.name}: loop {s.loop_var.name} is bound to "
                f"{tag} inside another {tag} loop; nested loops of one thread tag must be "
                "unified first (loopir.lower does this for cooperative fetches)"
            )
        self.active_tags.add(tag)
        self.thread_vars[tag] = s.loop_var
        frame_thread(self, s, tag)
        self.scope.append(s.loop_var)
        try:
            self._thread_loop(s, tag)
        finally:
            self.scope.pop()
            self.active_tags.discard(tag)
            del self.thread_vars[tag]

    def _thread_loop(self, s: For, tag: str) -> None:
        hw = self.thread_index(tag, s.loop_var.dtype)
        v = self.var_name(s.loop_var)
        launched = self.launch[tag]
        init = hw if isinstance(s.min, IntImm) and s.min.value == 0 else f"{hw} + {self.expr(s.min)}"
        self.line(f"const {ctype(s.loop_var.dtype)} {v} = {init};")
        with self.bound(s.loop_var, s.min, s.extent):
            if s.extent is launched or (
                isinstance(s.extent, IntImm)
                and isinstance(launched, IntImm)
                and s.extent.value == launched.value
            ):
                self.stmt(s.body)
                return
            if _has_barrier(s.body):
                raise CodegenError(
                    f"CUDA codegen: kernel {self.spec.name}: loop {s.loop_var.name} bound to "
                    f"{tag} has extent {s.extent} < launched {launched} and contains "
                    "__syncthreads(); the guard would make the barrier divergent"
                )
            guard = self.thread_index(tag) if tag in self.uniform_tags else tag
            with self.block(f"if ({guard} < {self.expr(s.extent)})"):
                self.stmt(s.body)

    # -- vectorization -----------------------------------------------------------------------
    def _vector_access_ok(
        self, buffer: Buffer, indices: tuple[PrimExpr, ...], v: Var, lanes: int
    ) -> PrimExpr | None:
        """The flat offset at ``v = 0`` if the access is contiguous in ``v`` and aligned."""
        if buffer.scope == "local":
            return None  # pointer-casting register arrays would force them into local memory
        last_stride = None if buffer.strides is None else buffer.strides[-1]
        if last_stride is not None and not (isinstance(last_stride, IntImm) and last_stride.value == 1):
            return None  # padded (storage_align) strides are fine while the last axis is dense
        *outer, last = indices
        if any(linear_coeff(i, v) != 0 for i in outer) or linear_coeff(last, v) != 1:
            return None
        flat = self.flat_index(buffer, indices)
        off0 = fold_constants(substitute(flat, {v: IntImm(0, v.dtype)}))
        if not an.is_multiple_of(off0, lanes, self.env):
            return None
        # off0 being a multiple of lanes for every value of the other variables covers the
        # row length too; a global buffer's base pointer is checked by the runtime
        return off0

    def try_vector_loop(self, s: For) -> bool:
        """Emit ``s`` as vector accesses; False (and nothing emitted) if not provable.

        Accepted bodies: ``dst[...v] = src[...v]`` or ``dst[...v] = cond ? src[...v] : c`` (``c`` a
        constant), under guards without else. Conditions must not depend on ``v`` after
        [`lane_invariant`][loopir.codegen_cuda.indexing.lane_invariant] (a guard
        ``base + v < bound`` with both ``base`` and ``bound`` multiples of the lane count holds for
        all lanes iff it holds for lane 0). When the whole loop is not aligned (say, float4 rows of
        odd-multiple-of-2 length), it is split into aligned chunks (two float2 accesses) if those
        are provable.
        """
        if not (isinstance(s.min, IntImm) and s.min.value == 0 and isinstance(s.extent, IntImm)):
            return False
        lanes = s.extent.value
        v = s.loop_var
        chunk = lanes
        while chunk >= 2 and lanes % chunk == 0:
            with self.bound(v, s.min, s.extent):
                parts = []
                for c in range(lanes // chunk):
                    w = Var(v.name, v.dtype)
                    body = s.body if chunk == lanes else substitute(s.body, {v: w + c * chunk})
                    if chunk == lanes:
                        w = v
                    with self.bound(w, IntImm(0, v.dtype), IntImm(chunk, v.dtype)):
                        part = self._vector_part(body, w, chunk)
                    if part is None:
                        break
                    parts.append(part)
            if len(parts) == lanes // chunk:
                for conds, text in parts:
                    if conds:
                        guard = conds[0]
                        for cnd in conds[1:]:
                            guard = And(guard, cnd)
                        with self.block(f"if ({self.expr(guard)})"):
                            for ln in text.split("\n"):
                                self.line(ln)
                    else:
                        for ln in text.split("\n"):
                            self.line(ln)
                return True
            chunk //= 2
        return False

    def _vector_part(self, body: Stmt, v: Var, lanes: int) -> tuple[list[PrimExpr], str] | None:
        """Guards and text of one ``lanes``-wide access for lane variable ``v``, or None."""
        guards: list[PrimExpr] = []
        while isinstance(body, IfThenElse) and body.else_case is None:
            guards.append(body.condition)
            body = body.then_case
        if not isinstance(body, BufferStore):
            return None
        value, select_cond, fill = body.value, None, None
        if (
            isinstance(value, Select)
            and isinstance(value.true_value, BufferLoad)
            and isinstance(value.false_value, (IntImm, FloatImm))
        ):
            select_cond, fill, value = value.condition, value.false_value, value.true_value
        if not isinstance(value, BufferLoad):
            if select_cond is not None:
                return None
            conds = [lane_invariant(c, v, lanes, self.env) for c in guards]
            text = None if any(c is None for c in conds) else vector_compute(self, body, v, lanes)
            return None if text is None else ([c for c in conds if c is not None], text)
        dst, src = body, value
        if dst.buffer.dtype != src.buffer.dtype or dt.lanes(src.dtype) != 1:
            return None
        carrier = vector_carrier(dst.buffer.dtype, lanes)
        if carrier is None:
            return None
        splat = None if fill is None else vector_splat(carrier, fill, lanes)
        if fill is not None and splat is None:
            return None
        dreg, sreg = dst.buffer.scope == "local", src.buffer.scope == "local"
        if dreg or sreg:
            # A register array on one side (the prefetch registers of InjectSharedPrefetch):
            # the memory side is one vector access, the register side its scalar components,
            # so the array stays in registers (no pointer cast of a register array).
            if (dreg and sreg) or carrier not in REG_CARRIERS or lanes > 4:
                return None
        doff = (
            register_offset(self.flat_index, dst.buffer, dst.indices, v)
            if dreg else self._vector_access_ok(dst.buffer, dst.indices, v, lanes)
        )  # fmt: skip
        soff = (
            register_offset(self.flat_index, src.buffer, src.indices, v)
            if sreg else self._vector_access_ok(src.buffer, src.indices, v, lanes)
        )  # fmt: skip
        conds = [lane_invariant(c, v, lanes, self.env) for c in guards]
        sel = None if select_cond is None else lane_invariant(select_cond, v, lanes, self.env)
        if doff is None or soff is None or any(c is None for c in conds):
            return None
        if select_cond is not None and sel is None:
            return None
        nbytes = lanes * dt.bits(dst.buffer.dtype) // 8
        for b in (dst.buffer, src.buffer):
            if b.scope == "global":
                self.alignment[b] = max(self.alignment.get(b, 1), nbytes)
        self.note_dtype(dst.buffer.dtype)
        dname, sname = self.buffer_name(dst.buffer), self.buffer_name(src.buffer)
        if not dreg:
            dname, doff = global_ptr(self, dst.buffer, doff)
        if not sreg:
            sname, soff = global_ptr(self, src.buffer, soff)
        sconst = "const " if src.buffer.scope == "global" and src.buffer not in self.spec.written else ""
        comps = "xyzw"[:lanes]
        if sreg:
            regs = ", ".join(
                f"{sname}[{self.expr(fold_constants(add(soff, IntImm(c, 'int32'))))}]"
                for c in range(lanes)
            )
            load = f"make_{carrier}({regs})"
        else:
            load = f"*({sconst}{carrier}*)({sname} + {self.expr(soff)})"
        live = [c for c in conds if c is not None]
        if dreg and sconst:  # registers from read-only global memory: a predicated load
            text = predicated_register_load(
                self.expr, dname, doff, carrier, lanes, sname, soff, live, sel, splat
            )
            return [], text
        if sel is not None:
            load = f"({self.expr(sel)}) ? {load} : {splat}"
        if dreg:
            # one vector load into a temporary, then its components into the registers
            tmp = f"{dname}_v"
            lines = [f"{carrier} {tmp} = {load};"] + [
                f"{dname}[{self.expr(fold_constants(add(doff, IntImm(c, 'int32'))))}] = {tmp}.{comps[c]};"
                for c in range(lanes)
            ]
            text = "{\n  " + "\n  ".join(lines) + "\n}"
        else:
            text = f"*({carrier}*)({dname} + {self.expr(doff)}) = {load};"
            if self.in_async_copy and not sreg:
                cp = async_vector_text(dst.buffer, src.buffer, f"{dname} + {self.expr(doff)}",
                                       f"{sname} + {self.expr(soff)}", lanes,
                                       None if sel is None else self.expr(sel), fill)  # fmt: skip
                if cp is not None:
                    text = cp
                    self.uses_async = True
        return [c for c in conds if c is not None], text

    def vector_store(self, s: BufferStore) -> None:
        """A store with Ramp indices: one vector access when aligned, else per-lane stores."""
        lanes = max(dt.lanes(s.value.dtype), *(dt.lanes(i.dtype) for i in s.indices))
        carrier = vector_carrier(s.buffer.dtype, lanes)
        last = s.indices[-1]
        value = s.value
        if (
            carrier is not None
            and isinstance(value, BufferLoad)
            and value.buffer.dtype == s.buffer.dtype
            and all(dt.lanes(i.dtype) == 1 for i in s.indices[:-1])
            and isinstance(last, Ramp)
            and isinstance(last.stride, IntImm)
            and last.stride.value == 1
            and all(dt.lanes(i.dtype) == 1 for i in value.indices[:-1])
            and isinstance(value.indices[-1], Ramp)
            and isinstance(value.indices[-1].stride, IntImm)
            and value.indices[-1].stride.value == 1
            and s.buffer.scope != "local"
            and value.buffer.scope != "local"
            and s.buffer.strides is None
            and value.buffer.strides is None
        ):
            src_last = value.indices[-1]
            doff = self.flat_index(s.buffer, (*s.indices[:-1], last.base))
            soff = self.flat_index(value.buffer, (*value.indices[:-1], src_last.base))
            if an.is_multiple_of(doff, lanes, self.env) and an.is_multiple_of(soff, lanes, self.env):
                nbytes = lanes * dt.bits(s.buffer.dtype) // 8
                for b in (s.buffer, value.buffer):
                    if b.scope == "global":
                        self.alignment[b] = max(self.alignment.get(b, 1), nbytes)
                sconst = "const " if value.buffer.scope == "global" and value.buffer not in self.spec.written else ""
                dptr, doff = global_ptr(self, s.buffer, doff)
                sptr, soff = global_ptr(self, value.buffer, soff)
                self.line(
                    f"*({carrier}*)({dptr} + {self.expr(doff)}) = "
                    f"*({sconst}{carrier}*)({sptr} + {self.expr(soff)});"
                )
                return
        from loopir.codegen_cuda.exprs_cuda import lane_of

        for i in range(lanes):
            idx = tuple(lane_of(x, i) for x in s.indices)
            flat = self.expr(self.flat_index(s.buffer, idx))
            self.line(f"{self.buffer_name(s.buffer)}[{flat}] = {self.expr(lane_of(value, i))};")
