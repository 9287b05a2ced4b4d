"""Statement part of the IR -> C translation: one C function per PrimFunc.

The generated entry point is::

    int32_t loopir_entry(void** args, const int64_t* syms, int64_t* err);

``args`` holds one data pointer per parameter buffer, ``syms`` the values of the symbolic
sizes (in :attr:`CProgram.sym_vars` order) and ``err`` the error record of
:data:`loopir.runtime.c_types.ERR_FIELDS`; the return value is the error code (0 = success).

Semantics (see docs/semantics): the IR is a sequential program. Thread-bound, vthread,
vectorized, unrolled and parallel loops run as ordinary loops, except that a parallel loop
whose iterations are proven independent runs as an OpenMP ``parallel for`` loop, and without
bounds checks a vectorized one as an ``omp simd`` loop (:mod:`loopir.runtime.c_parallel`:
the result is the sequential one, errors included); a BlockRealize binds its iter
vars and runs the block when its predicate holds, running ``init`` first when every reduce
iter var is at its domain minimum; ``alloc_buffers`` and ``Allocate`` live for the statement
they belong to. The one exception is lowered IR with barriers: a ``threadIdx`` loop whose body
contains a ``storage_sync`` runs with GPU thread-block semantics (one fiber per thread, the
barrier synchronizes them; see :mod:`loopir.runtime.c_fibers`). Elsewhere ``storage_sync``
is a no-op. With ``thread_order="random"``, lowered IR (no blocks) runs every kernel's
threads as fibers instead, in a seeded random order between barriers (GPU semantics, so a
missing barrier shows; see :mod:`loopir.runtime.c_fibers`).
"""

from __future__ import annotations

from typing import Any

import attrs

from loopir.errors import CodegenError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer, Range
from loopir.ir.expr import BufferLoad, Call, IntImm, PrimExpr, Var
from loopir.ir.functor import post_order_visit
from loopir.ir.op import is_tensor_core_call
from loopir.ir.reducer import identity
from loopir.ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    IterKind,
    PrimFunc,
    SeqStmt,
    Stmt,
)
from loopir.ir.tma import is_tma_call
from loopir.runtime.c_expr import BufferInfo, ExprEmitter, c_ident
from loopir.runtime.c_fibers import (
    THREAD_COORDS,
    contains_sync,
    contains_tag,
    fiber_prelude,
    thread_extents,
)
from loopir.runtime.c_parallel import OMP_PRELUDE, SIMD_PRELUDE, concurrency_problem
from loopir.runtime.c_types import ERR_FIELDS, PRELUDE, expr_ctype, storage_bytes, storage_ctype
from loopir.runtime.c_warp import (
    WARP_TABLES,
    emit_tensor_core,
    emit_tma,
    merge_warp_copies,
    open_warp_copies,
)

__all__ = ["CProgram", "generate_c", "ENTRY"]

ENTRY = "loopir_entry"
_MAX_THREADS = 1024  # threads of one block (CUDA's limit): the exchange of thread_allreduce

# Allocations up to this many bytes with a constant size go on the C stack.
_STACK_LIMIT = 16384


@attrs.frozen
class CProgram:
    """Generated C source and what the caller needs to run and explain it.

    Attributes
    ----------
    source
        The complete C translation unit.
    sym_vars
        Symbolic size variables, in the order of the ``syms`` argument.
    buffers
        Buffer descriptions indexed by the ids used in error records: (name, shape text).
    blocks
        Block descriptions indexed by block ids: (name, iter var names).
    written
        Parameter buffers the function stores to (their arrays must be writeable).
    thread_order
        The ``thread_order`` it was generated for.
    seeded
        Whether the library exports the seed of a random thread order.
    parallel
        Whether some parallel loop runs as an OpenMP team (the library then needs
        ``-fopenmp`` and exports the team size setter of :mod:`loopir.runtime.c_parallel`).
    simd
        Whether some vectorized loop is an ``omp simd`` loop (the library then exports the
        switch of :data:`~loopir.runtime.c_parallel.SIMD_ENTRY`).
    """

    source: str
    sym_vars: tuple[Var, ...]
    buffers: tuple[tuple[str, str], ...]
    blocks: tuple[tuple[str, tuple[str, ...]], ...]
    written: frozenset[int]
    thread_order: str = "sequential"
    seeded: bool = False
    parallel: bool = False
    simd: bool = False


def _const_int(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) else None


class _StmtEmitter(ExprEmitter):
    def __init__(self, check_bounds: bool, thread_regions: bool = True, gpu_regions: bool = False) -> None:
        super().__init__(check_bounds)
        self.thread_regions = thread_regions
        # thread_order="random" on lowered IR: every kernel's threads are a region
        self.gpu_regions = gpu_regions
        self.in_kernel = False
        self.hoisted: set[Buffer] = set()  # non-local buffers allocated before their region
        self.region_tags: list[str] = []  # threadIdx tags of the enclosing loops in a region
        self.lines: list[str] = []
        self.indent = 1
        self.counter = 0
        self.buffer_table: list[tuple[str, str]] = []
        self.block_table: list[tuple[str, tuple[str, ...]]] = []
        self.written: set[Buffer] = set()
        self.uses_fibers = False
        self.functions: list[str] = []  # thread-region functions, emitted before the entry
        self.in_region = False
        self.loop_ranges: dict[Var, Range] = {}  # the enclosing loops and block iter vars
        self.concurrent: ForKind | None = None  # inside an OpenMP parallel / simd loop
        self.uses_parallel = False
        self.uses_simd = False
        self.uses_tensor_core = False  # a warp-collective call: the layout tables are needed
        self.warp_spans: dict[str, str] = {}  # per-warp allocations of a region: cname -> span
        self.warp_copies: dict[str, str] = {}  # outer warp buffers' per-warp copies: cname -> copies

    # --- helpers ----------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{c_ident(base)}_{self.counter}"

    def define_var(self, v: Var) -> tuple[str, str | None]:
        """Give ``v`` a new C name (shadowing any outer definition); returns (name, old)."""
        old = self.vars.get(v)
        name = self.fresh(v.name)
        self.vars[v] = name
        return name, old

    def undefine_var(self, v: Var, old: str | None) -> None:
        if old is None:
            self.vars.pop(v, None)
        else:
            self.vars[v] = old

    def register_buffer(self, b: Buffer, cname: str) -> BufferInfo:
        bid = len(self.buffer_table)
        shape_txt = "(" + ", ".join(str(s) for s in b.shape) + ")"
        self.buffer_table.append((b.name, shape_txt))
        extents = [self.index64(s) for s in b.shape]
        if b.strides is not None:
            strides = [self.index64(s) for s in b.strides]
        else:
            # row-major: stride of dim d = product of the later extents (folded when constant)
            strides = []
            for d in range(len(b.shape)):
                strides.append(self.product(b.shape[d + 1 :]))
        return BufferInfo(b, cname, bid, extents, strides)

    def product(self, extents: Any) -> str:
        """C code of the product of ``extents`` (an integer literal when all are constant)."""
        const = 1
        parts = []
        for e in extents:
            c = _const_int(e)
            if c is None:
                parts.append(self.index64(e))
            else:
                const *= c
        if not parts:
            return str(const)
        code = " * ".join(parts)
        return code if const == 1 else f"{code} * {const}"

    # --- allocation -------------------------------------------------------------------------
    @staticmethod
    def _span(b: Buffer, strides: tuple[PrimExpr, ...], extents: list[str], steps: list[str]) -> str:
        """The elements ``b`` with padded ``strides`` spans: a number when every extent and
        stride is constant, else the C expression over ``extents`` and ``steps``."""
        from loopir.ir.expr import IntImm
        from loopir.passes.storage_align import allocation_size, allocation_size_c

        shape = [e.value for e in b.shape if isinstance(e, IntImm)]
        consts = [x.value for x in strides if isinstance(x, IntImm)]
        if len(shape) == len(b.shape) and len(consts) == len(strides):
            return str(allocation_size(shape, consts))
        return allocation_size_c(extents, steps)

    def open_buffer(self, b: Buffer) -> tuple[BufferInfo, BufferInfo | None, bool]:
        """Declare a local allocation of ``b``; returns (info, shadowed info, on heap)."""
        cname = self.fresh(b.name)
        info = self.register_buffer(b, cname)
        st = storage_ctype(b.dtype)
        nelem = self.product(b.shape)
        if b.strides is not None:  # padded (storage_align) strides: the span of the last element
            extents = [self.index64(e) for e in b.shape]
            nelem = self._span(b, b.strides, extents, [self.index64(st_) for st_ in b.strides])
        const_n = int(nelem) if nelem.lstrip("-").isdigit() else None
        nbytes = None if const_n is None else const_n * storage_bytes(b.dtype)
        # fibers have fixed 256 KiB stacks: keep their stack arrays small
        limit = _STACK_LIMIT // 4 if self.in_region else _STACK_LIMIT
        heap = nbytes is None or nbytes > limit
        if heap:
            self.emit(
                f"{st}* {cname} = ({st}*)lir_alloc(err, {nelem} * (int64_t)sizeof({st}), {info.id});"
            )
        else:
            self.emit(f"{st} {cname}[{max(const_n or 0, 1)}];")
            self.emit(f"memset({cname}, 0xFF, sizeof({cname}));")
        old = self.buffers.get(b)
        self.buffers[b] = info
        if heap:
            # on allocation failure skip the body (the error is already recorded)
            self.emit(f"if ({cname}) {{")
            self.indent += 1
        return info, old, heap

    def close_buffer(self, b: Buffer, info: BufferInfo, old: BufferInfo | None, heap: bool) -> None:
        if heap:
            self.emit(f"free({info.cname});")
            self.indent -= 1
            self.emit("}")
        if old is None:
            self.buffers.pop(b, None)
        else:
            self.buffers[b] = old

    # --- statements -------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        if self.gpu_regions and not self.in_region and self._is_kernel_region(s):
            self._thread_region(s)
            return
        method = getattr(self, "visit_" + type(s).__name__, None)
        if method is None:
            raise CodegenError(f"cpu codegen: cannot translate statement {type(s).__name__}")
        method(s)

    def visit_SeqStmt(self, s: SeqStmt) -> None:
        for x in s.seq:
            self.stmt(x)

    def visit_Evaluate(self, s: Evaluate) -> None:
        if isinstance(s.value, Call) and s.value.op == "tvm_storage_sync" and self.in_region:
            self.emit("lir_barrier();")
            return
        if isinstance(s.value, Call) and s.value.op == "loopir.thread_allreduce":
            self._allreduce(s.value)
            return
        if isinstance(s.value, Call) and s.value.op in ("loopir.cp_async_commit", "loopir.cp_async_wait"):
            return  # the executor's copies are synchronous: nothing is in flight
        if isinstance(s.value, Call) and is_tensor_core_call(s.value):
            emit_tensor_core(self, s.value)
            return
        if isinstance(s.value, Call) and is_tma_call(s.value):
            emit_tma(self, s.value)
            return
        code = self.expr(s.value)
        if code != "0":
            self.emit(f"(void)({code});")

    def _allreduce(self, call: Call) -> None:
        """``thread_allreduce`` among the fibers of a threadIdx.x row: each publishes its part,
        waits for the others, combines the row's parts in thread order, waits again so that
        the exchange can be reused, and stores the total into the accumulator element the
        call loads."""
        reducer, acc, extent = call.args
        if not self.in_region:
            raise CodegenError(
                "cpu codegen: thread_allreduce outside a thread region (build with "
                "thread_regions=True, the default, to run lowered cross-thread reductions)"
            )
        assert isinstance(acc, BufferLoad)
        op = str(getattr(reducer, "value", ""))
        vt = expr_ctype(acc.dtype)
        xchg, tot, t = self.fresh("lir_xchg"), self.fresh("tot"), self.fresh("t")
        step = {"sum": f"{tot} + {xchg}[{t}]", "max": f"({xchg}[{t}] > {tot} ? {xchg}[{t}] : {tot})",
                "min": f"({xchg}[{t}] < {tot} ? {xchg}[{t}] : {tot})"}[op]  # fmt: skip
        info = self.buffer_info(acc.buffer)
        self.emit(f"{{ /* thread_allreduce {op} over {extent} threads of threadIdx.x */")
        self.indent += 1
        self.emit(f"static {vt} {xchg}_all[{_MAX_THREADS}];")
        self.emit(f"{vt}* const {xchg} = {xchg}_all + (lir_tid - lir_tx);")
        self.emit(f"{xchg}[lir_tx] = {self.expr(acc)};")
        self.emit("lir_barrier();")
        self.emit(f"{vt} {tot} = {self.expr(identity(op, acc.dtype))};")
        self.emit(f"for (int64_t {t} = 0; {t} < {self.index64(extent)}; ++{t}) {tot} = {step};")
        self.emit("lir_barrier();")
        # the element the call loads: one accumulator among several (per virtual thread, say)
        where = self.flat_index(info, acc.indices, 0, True)
        guard = "if (!err[0]) " if self.check_bounds else ""  # a failed check prevents the write
        self.emit(f"{guard}{info.cname}[{where}] = {self.storage_value(acc.buffer, tot)};")
        self.indent -= 1
        self.emit("}")

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        self.emit(f"if ({self.expr(s.condition)}) {{")
        self.indent += 1
        self.stmt(s.then_case)
        self.indent -= 1
        if s.else_case is not None:
            self.emit("} else {")
            self.indent += 1
            self.stmt(s.else_case)
            self.indent -= 1
        self.emit("}")

    def visit_BufferStore(self, s: BufferStore) -> None:
        info = self.buffer_info(s.buffer)
        self.written.add(s.buffer)
        n = max([dt.lanes(s.value.dtype)] + [dt.lanes(i.dtype) for i in s.indices])
        if n == 1 and not self.check_bounds:
            val = self.storage_value(s.buffer, self.expr(s.value))
            self.emit(f"{info.cname}[{self.flat_index(info, s.indices, 0, True)}] = {val};")
            return
        # Evaluate every lane (and index) before storing any: a vector store reads its
        # operands first, and a failed bounds check must prevent the write.
        vt = expr_ctype(s.value.dtype)
        self.emit("{")
        self.indent += 1
        names = []
        for lane in range(n):
            v = self.fresh("v")
            f = self.fresh("f")
            self.emit(f"const {vt} {v} = {self.expr(s.value, lane)};")
            self.emit(f"const int64_t {f} = {self.flat_index(info, s.indices, lane, True)};")
            names.append((v, f))
        guard = "if (!err[0]) " if self.check_bounds else ""
        for v, f in names:
            self.emit(f"{guard}{info.cname}[{f}] = {self.storage_value(s.buffer, v)};")
        self.indent -= 1
        self.emit("}")

    def _is_kernel_region(self, s: Stmt) -> bool:
        """Whether ``s`` is a whole thread block's work: inside a kernel (or a kernel's
        outermost thread-bound loop), free of ``blockIdx`` loops, with ``threadIdx`` loops."""
        starts_kernel = isinstance(s, For) and s.kind is ForKind.THREAD_BINDING
        if not (self.in_kernel or starts_kernel):
            return False
        return not contains_tag(s, "blockIdx.") and bool(thread_extents(s))

    def visit_For(self, s: For) -> None:
        if self.gpu_regions and s.kind is ForKind.THREAD_BINDING and not (self.in_kernel or self.in_region):
            # a kernel's outer (blockIdx) loops run serially; the regions lie below them
            self.in_kernel = True
            try:
                self._serial_for(s)
            finally:
                self.in_kernel = False
            return
        if s.kind is ForKind.THREAD_BINDING and s.thread_tag in THREAD_COORDS:
            if self.in_region:
                self._thread_loop(s, s.thread_tag)
                return
            if self.thread_regions and contains_sync(s.body):
                self._thread_region(s)
                return
        note = None
        if s.kind in (ForKind.PARALLEL, ForKind.VECTORIZED):
            note = self._concurrent_for(s)
            if note is None:
                return
        self._serial_for(s, note)

    def _loop_head(self, s: For) -> tuple[str, str]:
        """Open a loop's scope: ``{``, its min and extent; returns their C names."""
        ext, mn = self.fresh("ext"), self.fresh("lo")
        self.emit("{")
        self.indent += 1
        self.emit(f"const int64_t {mn} = {self.index64(s.min)};")
        self.emit(f"const int64_t {ext} = {self.index64(s.extent)};")
        return mn, ext

    def _loop_body(self, s: For, mn: str, cnt: str) -> None:
        """The loop variable (from the iteration count ``cnt``) and the body."""
        name, old = self.define_var(s.loop_var)
        t = expr_ctype(s.loop_var.dtype)
        self.emit(f"const {t} {name} = ({t})({mn} + {cnt});")
        self.loop_ranges[s.loop_var] = Range(s.min, s.extent)
        self.stmt(s.body)
        self.loop_ranges.pop(s.loop_var, None)
        self.undefine_var(s.loop_var, old)

    def _serial_for(self, s: For, note: str | None = None) -> None:
        mn, ext = self._loop_head(s)
        cnt = self.fresh("it")
        tag = f"{s.kind.value}{' ' + s.thread_tag if s.thread_tag else ''}"
        if note is not None:
            tag += f", run serially: {note}".replace("*/", "* /")
        self.emit(f"for (int64_t {cnt} = 0; {cnt} < {ext}; ++{cnt}) {{ /* {tag} */")
        self.indent += 1
        # stop early once an error is recorded (loops wind down; allocations are freed)
        self.emit("if (__builtin_expect(err[0] != 0, 0)) break;")
        self._loop_body(s, mn, cnt)
        self.indent -= 1
        self.emit("}")
        self.indent -= 1
        self.emit("}")

    # --- OpenMP (see c_parallel) ------------------------------------------------------------
    def _concurrent_for(self, s: For) -> str | None:
        """Emit a parallel (vectorized) loop as ``omp parallel for`` (``omp simd``) when its
        iterations are proven independent (:mod:`loopir.runtime.c_parallel`); otherwise emit
        nothing and return why it runs serially."""
        simd = s.kind is ForKind.VECTORIZED
        if self.in_region:
            return "inside a thread region"
        if self.concurrent is not None and (not simd or self.concurrent is ForKind.VECTORIZED):
            return f"inside a {self.concurrent.value} loop that already runs concurrently"
        if simd and self.check_bounds:
            return "bounds checks keep it scalar (build with check_bounds=False)"
        why = concurrency_problem(s, self.loop_ranges, simd=simd)
        if why is not None:
            return why
        outer, self.concurrent = self.concurrent, s.kind
        try:
            (self._simd_for if simd else self._parallel_for)(s)
        finally:
            self.concurrent = outer
        return None

    def _simd_for(self, s: For) -> None:
        """A vectorized loop whose body can record no error: no early exit needed."""
        self.uses_simd = True
        mn, ext = self._loop_head(s)
        cnt = self.fresh("it")
        self.emit("if (!err[0]) {")
        self.emit("#pragma omp simd if(lir_simd)")
        self.emit(f"for (int64_t {cnt} = 0; {cnt} < {ext}; ++{cnt}) {{ /* vectorized: omp simd */")
        self.indent += 1
        self._loop_body(s, mn, cnt)
        self.indent -= 1
        self.emit("}")
        self.emit("}")
        self.indent -= 1
        self.emit("}")

    def _parallel_for(self, s: For) -> None:
        """A parallel loop as an OpenMP team. Each thread records errors in its own record
        and stops at its first; the error of the lowest failing iteration is kept, which is
        the one sequential execution records (the iterations are independent)."""
        self.uses_parallel = True
        mn, ext = self._loop_head(s)
        out, best, nt = self.fresh("err_out"), self.fresh("first_err"), self.fresh("team")
        mine, first, cnt = self.fresh("err_mine"), self.fresh("first"), self.fresh("it")
        self.emit(f"int64_t* const {out} = err;")
        self.emit(f"int64_t {best} = INT64_MAX;")
        self.emit(f"const int {nt} = lir_team({ext});")
        self.emit("if (!err[0]) {")
        self.emit(f"#pragma omp parallel num_threads({nt}) if({nt} > 1)")
        self.emit("{")
        self.indent += 1
        self.emit(f"int64_t {mine}[{len(ERR_FIELDS)}] = {{0}};")
        self.emit(f"int64_t* const err = {mine};  /* this thread's error record */")
        self.emit(f"int64_t {first} = -1;")
        self.emit("#pragma omp for schedule(static)")
        self.emit(f"for (int64_t {cnt} = 0; {cnt} < {ext}; ++{cnt}) {{ /* parallel: omp parallel for */")
        self.indent += 1
        self.emit("if (__builtin_expect(err[0] != 0, 0)) continue;")
        self._loop_body(s, mn, cnt)
        self.emit(f"if (__builtin_expect(err[0] != 0, 0)) {first} = {cnt};")
        self.indent -= 1
        self.emit("}")
        self.emit("if (err[0]) {")
        self.emit("#pragma omp critical(lir_error)")
        self.emit(f"if ({first} < {best}) {{ {best} = {first}; memcpy({out}, err, sizeof({mine})); }}")
        self.emit("}")
        self.indent -= 1
        self.emit("}")
        self.emit("}")
        self.indent -= 1
        self.emit("}")

    # --- thread regions (see c_fibers) --------------------------------------------------------
    def _thread_loop(self, s: For, tag: str) -> None:
        """A threadIdx loop inside a region: the fiber's coordinate, guarded by the extent.

        ``tag`` is ``s.thread_tag``, which the callers have checked is a THREAD_COORDS key.
        """
        coord = THREAD_COORDS[tag]
        if self.gpu_regions and tag in self.region_tags:
            raise CodegenError(
                f"cpu codegen (thread_order='random'): loop {s.loop_var.name} is bound to "
                f"{tag} inside another {tag} loop; a GPU has one index per "
                "tag, so nested loops of one tag must be unified first (loopir.lower does)"
            )
        self.region_tags.append(tag)
        name, old = self.define_var(s.loop_var)
        t = expr_ctype(s.loop_var.dtype)
        self.emit(f"if ({coord} < {self.index64(s.extent)}) {{ /* {tag} */")
        self.indent += 1
        self.emit(f"const {t} {name} = ({t})({self.index64(s.min)} + {coord});")
        self.stmt(s.body)
        self.indent -= 1
        self.emit("}")
        self.undefine_var(s.loop_var, old)
        self.region_tags.pop()

    def _hoist_allocations(self, s: Stmt, nwarps: str) -> list[tuple[Buffer, BufferInfo, BufferInfo | None, bool]]:
        """Allocate the buffers of region ``s`` that its threads share, before its fibers
        start: with ``gpu_regions`` the non-local ones (shared memory belongs to the thread
        block, not to one thread), and always the ``warp`` ones, one instance per warp
        (``nwarps``: C code), each fiber seeing its warp's (see :meth:`_thread_region`)."""
        found: list[Buffer] = []

        def visit(n: Any) -> None:
            if isinstance(n, Allocate) and n.buffer not in found:
                if n.buffer.scope == "warp" or (self.gpu_regions and n.buffer.scope != "local"):
                    found.append(n.buffer)

        post_order_visit(s, visit)
        opened = []
        for b in found:
            try:
                if b.scope == "warp":
                    opened.append((b, *self._open_per_warp(b, nwarps)))
                else:
                    opened.append((b, *self.open_buffer(b)))
            except CodegenError as exc:
                raise CodegenError(
                    f"cpu codegen: the size of {b.scope} buffer {b.name} must be known when its "
                    f"thread region starts ({exc})"
                ) from None
            self.hoisted.add(b)
        return opened

    def _open_per_warp(self, b: Buffer, nwarps: str) -> tuple[BufferInfo, BufferInfo | None, bool]:
        """A warp buffer of a region: ``nwarps`` instances on the heap, poisoned."""
        if b.strides is not None:
            raise CodegenError(f"warp buffer {b.name} has explicit strides")
        cname = self.fresh(b.name)
        info = self.register_buffer(b, cname)
        st = storage_ctype(b.dtype)
        span = self.product(b.shape)
        self.emit(f"{st}* {cname} = ({st}*)lir_alloc(err, ({span}) * ({nwarps}) * (int64_t)sizeof({st}), "
                  f"{info.id});  /* one {b.name} per warp */")  # fmt: skip
        self.emit(f"if ({cname}) {{")
        self.indent += 1
        old = self.buffers.get(b)
        self.buffers[b] = info
        self.warp_spans[cname] = span
        return info, old, True

    def _thread_region(self, s: Stmt) -> None:
        """Run ``s`` (a threadIdx loop containing barriers, or with ``gpu_regions`` a thread
        block's whole work) as one fiber per thread."""
        rid = self.fresh("lir_region")
        dims = []
        for tag in THREAD_COORDS:
            exts = thread_extents(s).get(tag, [])
            try:
                codes = [self.index64(e) for e in exts]
            except CodegenError as exc:
                raise CodegenError(
                    f"cpu codegen: the extent of a {tag} loop in a thread region must be known "
                    f"when the region starts ({exc})"
                ) from None
            code = "1"
            for c in codes:
                code = c if code == "1" else f"lir_max_int64_t({code}, {c})"
            dims.append(code)
        nwarps = f"({' * '.join(dims)} + 31) / 32"
        hoisted = self._hoist_allocations(s, nwarps)
        copies = open_warp_copies(self, s, nwarps)
        fields = [(cname, expr_ctype(v.dtype)) for v, cname in self.vars.items()]
        fields += [(info.cname, storage_ctype(b.dtype) + "*") for b, info in self.buffers.items()]
        env_t = f"{rid}_env"
        decl = ["typedef struct { int64_t* err;"]
        decl += [f"  {t} {n};" for n, t in fields]
        decl.append(f"}} {env_t};")
        # the region body, as its own function reading the captured scope from the env
        saved_lines, saved_indent = self.lines, self.indent
        self.lines, self.indent = [], 1
        self.in_region = True
        try:
            self.emit(f"{env_t}* env = ({env_t}*)lir_fiber_env;")
            self.emit("const int64_t lir_tid = lir_fiber_id;")
            self.emit("const int64_t lir_tx = lir_tid % lir_fiber_dims[0];")
            self.emit("const int64_t lir_ty = (lir_tid / lir_fiber_dims[0]) % lir_fiber_dims[1];")
            self.emit("const int64_t lir_tz = lir_tid / (lir_fiber_dims[0] * lir_fiber_dims[1]);")
            self.emit("int64_t* err = env->err;")
            for n, t in fields:
                if n not in self.warp_spans:
                    self.emit(f"{t} const {n} = env->{n};")
            for n, t in fields:  # the fiber's warp's instance of a per-warp buffer
                if n in self.warp_spans:
                    self.emit(f"{t} const {n} = env->{n} + (lir_tid / 32) * ({self.warp_spans[n]});")
            self.emit("(void)lir_tx; (void)lir_ty; (void)lir_tz;")
            if isinstance(s, For) and s.kind is ForKind.THREAD_BINDING and s.thread_tag in THREAD_COORDS:
                self._thread_loop(s, s.thread_tag)
            else:
                self.stmt(s)
            body = self.lines
        finally:
            self.lines, self.indent = saved_lines, saved_indent
            self.in_region = False
        self.functions.append("\n".join(decl + [f"static void {rid}(void) {{", *body, "}", ""]))
        env = self.fresh("env")
        what = "thread block" if self.gpu_regions else f"{getattr(s, 'thread_tag', '')} loop with barriers"
        self.emit(f"{{ /* thread region: {what}, run as fibers */")
        self.indent += 1
        self.emit(f"{env_t} {env};")
        self.emit(f"{env}.err = err;")
        for n, _ in fields:
            self.emit(f"{env}.{n} = {self.warp_copies.get(n, n)};")
        self.emit(f"const int64_t {env}_dims[3] = {{{', '.join(dims)}}};")
        self.emit(f"lir_run_fibers(err, &{env}, {env}_dims, {rid});")
        self.indent -= 1
        self.emit("}")
        merge_warp_copies(self, copies, nwarps)
        for b, info, old, heap in reversed(hoisted):
            self.close_buffer(b, info, old, heap)
            self.hoisted.discard(b)
            self.warp_spans.pop(info.cname, None)
        self.uses_fibers = True

    def visit_Allocate(self, s: Allocate) -> None:
        if s.buffer in self.hoisted:  # allocated before the region's fibers started
            self.stmt(s.body)
            return
        self.emit("{")
        self.indent += 1
        info, old, heap = self.open_buffer(s.buffer)
        self.stmt(s.body)
        self.close_buffer(s.buffer, info, old, heap)
        self.indent -= 1
        self.emit("}")

    def visit_Block(self, s: Block) -> None:
        if s.iter_vars:
            raise CodegenError(
                f"cpu codegen: block {s.name!r} has iter vars but no BlockRealize binds them"
            )
        self._block_body(s, [])

    def visit_BlockRealize(self, s: BlockRealize) -> None:
        b = s.block
        bid = len(self.block_table)
        self.block_table.append((b.name, tuple(iv.var.name for iv in b.iter_vars)))
        self.emit(f"/* block {b.name} */")
        pred = s.predicate
        always = _const_int(pred) == 1
        self.emit("{" if always else f"if ({self.expr(pred)}) {{")
        self.indent += 1
        # Bindings are evaluated in the enclosing scope, before any iter var is visible.
        values = [self.expr(v) for v in s.iter_values]
        defined: list[tuple[Var, str | None]] = []
        self.loop_ranges.update((iv.var, iv.dom) for iv in b.iter_vars)
        for k, (iv, code) in enumerate(zip(b.iter_vars, values)):
            name, old = self.define_var(iv.var)
            defined.append((iv.var, old))
            t = expr_ctype(iv.var.dtype)
            self.emit(f"const {t} {name} = ({t})({code});")
            if self.check_bounds:
                self.emit(
                    f"lir_dom(err, (int64_t){name}, {self.index64(iv.dom.min)}, "
                    f"{self.index64(iv.dom.extent)}, {bid}, {k});"
                )
        self._block_body(b, [iv for iv in b.iter_vars if iv.kind is IterKind.REDUCE])
        for v, old in reversed(defined):
            self.undefine_var(v, old)
            self.loop_ranges.pop(v, None)
        self.indent -= 1
        self.emit("}")

    def _block_body(self, b: Block, reduce_ivs: list[Any]) -> None:
        opened = [(buf, *self.open_buffer(buf)) for buf in b.alloc_buffers]
        if b.init is not None:
            conds = [f"({self.var_name(iv.var)} == {self.expr(iv.dom.min)})" for iv in reduce_ivs]
            self.emit(f"if ({' && '.join(conds) if conds else '1'}) {{")
            self.indent += 1
            self.stmt(b.init)
            self.indent -= 1
            self.emit("}")
        self.stmt(b.body)
        for buf, info, old, heap in reversed(opened):
            self.close_buffer(buf, info, old, heap)


def _sym_vars(func: PrimFunc) -> list[Var]:
    """Vars that are whole dimensions of parameter shapes: bound from the argument shapes."""
    out: dict[Var, None] = {}
    for b in func.params:
        for s in b.shape:
            if isinstance(s, Var):
                out.setdefault(s, None)
    return list(out)


def _has_blocks(func: PrimFunc) -> bool:
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        if isinstance(n, (Block, BlockRealize)):
            found = True

    post_order_visit(func.body, visit)
    return found


def generate_c(
    func: PrimFunc,
    check_bounds: bool = True,
    thread_regions: bool = True,
    thread_order: str = "sequential",
) -> CProgram:
    """Translate ``func`` to a C translation unit (see the module docstring).

    Parameters
    ----------
    func
        The function.
    check_bounds
        Bounds-check every buffer index and every block binding.
    thread_regions
        Run ``threadIdx`` loops that contain barriers as fiber regions (GPU block semantics,
        see :mod:`loopir.runtime.c_fibers`); when False they run serially and barriers are
        no-ops.
    thread_order
        ``"sequential"``: as above. ``"random"``: for lowered IR (no blocks), every kernel's
        thread block is a region (the statement under its innermost ``blockIdx`` loops) whose
        fibers run in a random order between barriers, seeded at run time through
        :data:`~loopir.runtime.c_fibers.SEED_ENTRY`. IR with blocks keeps its sequential
        meaning (the regions of ``"sequential"``, resumed in random order).

    Raises
    ------
    CodegenError
        If the IR uses something the executor cannot run (an unknown intrinsic, a variable
        outside its scope, a buffer that is never declared, a symbolic size that no parameter
        shape determines).
    """
    if not isinstance(func, PrimFunc):
        raise CodegenError(f"build(target='cpu'): expected a PrimFunc, got {type(func).__name__}")
    random_order = thread_order == "random"
    em = _StmtEmitter(check_bounds, thread_regions, gpu_regions=random_order and not _has_blocks(func))
    syms = _sym_vars(func)
    header = [PRELUDE, f"int32_t {ENTRY}(void** args, const int64_t* syms, int64_t* err) {{"]
    for k, v in enumerate(syms):
        name, _ = em.define_var(v)
        t = expr_ctype(v.dtype)
        em.emit(f"const {t} {name} = ({t})syms[{k}];")
    for k, b in enumerate(func.params):
        cname = em.fresh(b.name)
        try:
            info = em.register_buffer(b, cname)
        except CodegenError as exc:
            raise CodegenError(
                f"build(target='cpu'): parameter {b.name}: shape {b.shape} uses a size that no "
                f"parameter dimension determines ({exc})"
            ) from None
        st = storage_ctype(b.dtype)
        em.emit(f"{st}* {cname} = ({st}*)args[{k}];")
        em.buffers[b] = info
    em.emit("(void)syms;")
    em.stmt(func.body)
    em.emit("return (int32_t)err[0];")
    if em.uses_fibers:
        tables = [WARP_TABLES] if em.uses_tensor_core else []
        header[1:1] = [fiber_prelude(random_order), *tables, *em.functions]
    if em.uses_parallel:
        header[1:1] = [OMP_PRELUDE]
    if em.uses_simd:
        header[1:1] = [SIMD_PRELUDE]
    body = "\n".join(header + em.lines + ["}", ""])
    written = frozenset(k for k, b in enumerate(func.params) if b in em.written)
    return CProgram(
        source=body,
        sym_vars=tuple(syms),
        buffers=tuple(em.buffer_table),
        blocks=tuple(em.block_table),
        written=written,
        thread_order=thread_order,
        seeded=random_order and em.uses_fibers,
        parallel=em.uses_parallel,
        simd=em.uses_simd,
    )
