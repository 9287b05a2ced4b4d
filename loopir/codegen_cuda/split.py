"""Host/device split of a lowered PrimFunc.

Each outermost thread-bound loop (``blockIdx.*``, ``threadIdx.*`` or ``vthread.*``) starts one
kernel: that loop and everything under it run on the GPU. What lies outside kernels is the
host program, which may only be control flow around launches:

* ``SeqStmt`` (launch in order), serial ``For`` loops (the loop variable becomes an ``int``
  kernel parameter), ``IfThenElse`` on sizes and host loop variables;
* ``Allocate`` of a ``global`` buffer (a device temporary allocated by the runtime);
* ``Allocate`` of a ``shared``/``local`` buffer is moved into every kernel that uses it;
* side-effect-free ``Evaluate`` and ``storage_sync`` (launches on one stream are already
  ordered) are dropped.

Any other host statement that touches a buffer cannot run on the host and is reported as a
[`CodegenError`][loopir.errors.CodegenError].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

import attrs

from loopir.arith import structural_key
from loopir.errors import CodegenError
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, IntImm, PrimExpr, Var
from loopir.ir.functor import Visitor, post_order_visit
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
from loopir.passes.lower_warp_memory import WARP_REGISTERS_ATTR
from loopir.passes.thread_registers import THREAD_REGISTERS_ATTR

GRID_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
BLOCK_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


# --------------------------------------------------------------------------------------------
# Host program
# --------------------------------------------------------------------------------------------


@attrs.frozen(eq=False)
class HostLaunch:
    """Launch kernel number ``kernel``."""

    kernel: int


@attrs.frozen(eq=False)
class HostSeq:
    items: tuple[HostNode, ...]


@attrs.frozen(eq=False)
class HostFor:
    """A serial host loop around launches; ``var`` is passed to the kernels as an int."""

    var: Var
    min: PrimExpr
    extent: PrimExpr
    body: HostNode


@attrs.frozen(eq=False)
class HostIf:
    condition: PrimExpr
    then_case: HostNode
    else_case: HostNode | None


@attrs.frozen(eq=False)
class HostAlloc:
    """A device temporary (a global buffer allocated outside every kernel)."""

    buffer: Buffer
    body: HostNode


@attrs.frozen(eq=False)
class HostExtern:
    """An extern library call (a CUTLASS GEMM from the GemmOffload pass), run on the host."""

    call_id: str


HostNode = HostLaunch | HostSeq | HostFor | HostIf | HostAlloc | HostExtern


def extern_call_id(stmt: Stmt) -> str | None:
    """The call id of an extern GEMM statement (``loopir.extern_gemm``), else None."""
    if not (isinstance(stmt, Evaluate) and isinstance(stmt.value, Call)):
        return None
    if stmt.value.op != "loopir.extern_gemm":
        return None
    first = stmt.value.args[0] if stmt.value.args else None
    from loopir.ir.expr import StringImm

    return first.value if isinstance(first, StringImm) else None


@attrs.frozen(eq=False)
class KernelSpec:
    """One device kernel before emission.

    Attributes
    ----------
    name
        The ``extern "C"`` symbol name.
    body
        The kernel's statement (the outermost thread-bound loop, wrapped in the shared/local
        Allocates hoisted from the host part).
    buffers
        Global buffers it accesses, in parameter order (function params first, then host
        temporaries).
    written
        Which of ``buffers`` it stores to (the others become ``const``).
    scalars
        Integer parameters: symbolic sizes and host loop variables it uses.
    grid, block
        Launch extents per axis (x, y, z) as expressions of the scalars; 1 where unbound.
    """

    name: str
    body: Stmt
    buffers: tuple[Buffer, ...]
    written: frozenset[Buffer]
    scalars: tuple[Var, ...]
    grid: tuple[PrimExpr, PrimExpr, PrimExpr]
    block: tuple[PrimExpr, PrimExpr, PrimExpr]


class _LocalAccesses(Visitor):
    """Which threadIdx loops (below its allocation) enclose each access of a local buffer."""

    def __init__(self) -> None:
        self.thread_loops: list[For] = []
        self.alloc_depth: dict[Buffer, int] = {}
        self.keys: dict[Buffer, dict[tuple[Var, ...], Stmt | PrimExpr]] = {}

    def visit_For(self, node: For) -> None:
        tag = node.thread_tag or ""
        threaded = node.kind is ForKind.THREAD_BINDING and tag.startswith("threadIdx")
        if threaded:
            self.thread_loops.append(node)
        self.generic_visit(node)
        if threaded:
            self.thread_loops.pop()

    def visit_Allocate(self, node: Allocate) -> None:
        if node.buffer.scope == "local":
            self.alloc_depth[node.buffer] = len(self.thread_loops)
        self.generic_visit(node)

    def _access(self, buf: Buffer, node: Stmt | PrimExpr) -> None:
        depth = self.alloc_depth.get(buf)
        if depth is None:
            return
        key = tuple(lp.loop_var for lp in self.thread_loops[depth:])
        self.keys.setdefault(buf, {}).setdefault(key, node)

    def visit_BufferStore(self, node: BufferStore) -> None:
        self._access(node.buffer, node)
        self.generic_visit(node)

    def visit_BufferLoad(self, node: BufferLoad) -> None:
        self._access(node.buffer, node)
        self.generic_visit(node)


def _check_thread_private_locals(body: Stmt, kernel: str, lane_rows: frozenset[str] = frozenset()) -> None:
    """Refuse a local buffer that different threads' code would share.

    Local memory is private to a CUDA thread. A local buffer allocated above a threadIdx loop
    and written inside it but read outside it (or inside another threadIdx loop) means, in the
    sequential meaning of the IR, that one thread reads what other threads wrote: on the GPU it
    would read its own uninitialized copy. Such schedules (e.g. a local cache_read whose copy
    loop is bound to threads while its consumer is not) must use shared memory instead.
    ``lane_rows`` names the registers ``LowerWarpMemory`` made of warp buffers: each thread's
    holds its lane's row (proven there), whichever sibling threadIdx loop accesses it.
    """
    acc = _LocalAccesses()
    acc.visit(body)
    for buf, keys in acc.keys.items():
        if len(keys) > 1 and buf.name not in lane_rows:
            where = sorted(
                "outside any threadIdx loop" if not k else "under threadIdx loop "
                + ", ".join(v.name for v in k)
                for k in keys
            )
            raise CodegenError(
                f"kernel {kernel}: local buffer {buf.name} is accessed {where[0]} and "
                f"{where[1]}; local memory is private to each CUDA thread, so threads would "
                "not see each other's values (use shared scope, or bind the consumer to the "
                "same thread loop)"
            )


def _touched_buffers(stmt: Stmt) -> tuple[list[Buffer], set[Buffer]]:
    """Buffers loaded or stored in ``stmt`` (first-use order) and the stored ones."""
    order: dict[Buffer, None] = {}
    written: set[Buffer] = set()

    def f(n: object) -> None:
        if isinstance(n, BufferLoad):
            order.setdefault(n.buffer, None)
        elif isinstance(n, BufferStore):
            order.setdefault(n.buffer, None)
            written.add(n.buffer)

    post_order_visit(stmt, f)
    return list(order), written


def _is_kernel_root(stmt: object) -> TypeGuard[For]:
    return isinstance(stmt, For) and stmt.kind is ForKind.THREAD_BINDING


def _contains_kernel(stmt: Stmt) -> bool:
    found = False

    def f(n: object) -> None:
        nonlocal found
        if _is_kernel_root(n):
            found = True

    post_order_visit(stmt, f)
    return found


def shape_vars(buffers: Sequence[Buffer]) -> tuple[Var, ...]:
    """Variables in the buffers' shapes and strides, in first-appearance order (the symbolic
    sizes a kernel or the host program receives)."""
    seen: dict[Var, None] = {}
    for b in buffers:
        for e in (*b.shape, *(b.strides or ())):
            post_order_visit(e, lambda n: seen.setdefault(n, None) if isinstance(n, Var) else None)
    return tuple(seen)


def _is_barrier(expr: PrimExpr) -> bool:
    return is_barrier(expr)


class _ThreadExtents(Visitor):
    """Collects the extent of every thread-bound loop in a kernel, per tag."""

    def __init__(self) -> None:
        self.extents: dict[str, list[PrimExpr]] = {}

    def visit_For(self, node: For) -> None:
        if node.kind is ForKind.THREAD_BINDING and node.thread_tag is not None:
            self.extents.setdefault(node.thread_tag, []).append(node.extent)
        self.generic_visit(node)


def launch_extent(tag: str, extents: Sequence[PrimExpr], kernel: str) -> PrimExpr:
    """The launch extent for ``tag``: the largest constant, or the one symbolic extent."""
    consts = [e.value for e in extents if isinstance(e, IntImm)]
    symbolic = [e for e in extents if not isinstance(e, IntImm)]
    if symbolic:
        keys = {structural_key(e) for e in symbolic}
        if len(keys) > 1 or consts:
            shown = ", ".join(sorted({str(e) for e in extents}))
            raise CodegenError(
                f"kernel {kernel}: loops bound to {tag} have different extents ({shown}); "
                "a symbolic thread extent must be the same for every loop with that tag"
            )
        return symbolic[0]
    return IntImm(max(consts), "int32")


class HostDeviceSplitter:
    """Splits a lowered function into a host program and kernel specs."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.kernels: list[KernelSpec] = []
        self.host_temps: list[Buffer] = []
        self.host_vars: list[Var] = []
        # shared/local buffers allocated on the host side -> the one kernel that uses them
        self.scoped_owner: dict[Buffer, str] = {}
        self.extern_calls: list[str] = []

    # -- entry point ----------------------------------------------------------------------
    def run(self) -> HostNode:
        return self._host(self.func.body, ())

    # -- host statements ------------------------------------------------------------------
    def _host(self, stmt: Stmt, allocs: tuple[Allocate, ...]) -> HostNode:
        if isinstance(stmt, SeqStmt):
            return HostSeq(tuple(self._host(s, allocs) for s in stmt.seq))
        if _is_kernel_root(stmt):
            return HostLaunch(self._make_kernel(stmt, allocs))
        if isinstance(stmt, Allocate):
            if stmt.buffer.scope == "global":
                self.host_temps.append(stmt.buffer)
                return HostAlloc(stmt.buffer, self._host(stmt.body, allocs))
            # shared/local memory only exists inside a kernel: declare it in each user kernel
            return self._host(stmt.body, (*allocs, stmt))
        if isinstance(stmt, For) and _contains_kernel(stmt.body):
            if stmt.kind not in (ForKind.SERIAL, ForKind.UNROLLED, ForKind.PARALLEL):
                raise CodegenError(
                    f"host/device split: loop {stmt.loop_var.name} of kind {stmt.kind.value} "
                    "encloses thread-bound loops; only serial loops may run on the host"
                )
            self.host_vars.append(stmt.loop_var)
            return HostFor(stmt.loop_var, stmt.min, stmt.extent, self._host(stmt.body, allocs))
        if isinstance(stmt, IfThenElse) and _contains_kernel(stmt):
            self._check_host_expr(stmt.condition, "if condition")
            return HostIf(
                stmt.condition,
                self._host(stmt.then_case, allocs),
                None if stmt.else_case is None else self._host(stmt.else_case, allocs),
            )
        call_id = extern_call_id(stmt)
        if call_id is not None:
            self.extern_calls.append(call_id)
            return HostExtern(call_id)
        if isinstance(stmt, Evaluate) and not _touched_buffers(stmt)[0]:
            if _is_barrier(stmt.value) or not isinstance(stmt.value, Call) or stmt.value.pure:
                # launches on one stream are ordered: a host-level barrier is a no-op
                return HostSeq(())
            raise CodegenError(
                f"host/device split: call {stmt.value.op!r} has side effects but no host "
                "implementation; it must run inside a kernel"
            )
        touched, written = _touched_buffers(stmt)
        if not touched:
            return HostSeq(())  # no buffer access and no side effect: nothing to run
        what = "writes" if written else "reads"
        names = ", ".join(sorted(b.name for b in (written or touched)))
        raise CodegenError(
            f"host/device split: a {type(stmt).__name__} outside every thread-bound loop {what} "
            f"buffer(s) {names}; bind its outer loops to blockIdx/threadIdx so that it runs in "
            f"a kernel:\n{stmt}"
        )

    def _check_host_expr(self, expr: PrimExpr, what: str) -> None:
        touched = []

        def f(n: object) -> None:
            if isinstance(n, BufferLoad):
                touched.append(n.buffer.name)

        post_order_visit(expr, f)
        if touched:
            raise CodegenError(
                f"host/device split: host {what} {expr} reads buffer(s) {', '.join(touched)}, "
                "which live on the device"
            )

    # -- kernels --------------------------------------------------------------------------
    def _make_kernel(self, root: For, allocs: tuple[Allocate, ...]) -> int:
        index = len(self.kernels)
        name = f"{self.func.name}_kernel{index}"
        body: Stmt = root
        touched, _ = _touched_buffers(root)
        for alloc in reversed(allocs):
            if alloc.buffer in touched:
                owner = self.scoped_owner.setdefault(alloc.buffer, name)
                if owner != name:
                    raise CodegenError(
                        f"host/device split: {alloc.buffer.scope} buffer {alloc.buffer.name} is "
                        f"used by kernels {owner} and {name}; {alloc.buffer.scope} memory does "
                        "not persist across kernels (put both under one blockIdx loop)"
                    )
                body = Allocate(alloc.buffer, body)
        touched, written = _touched_buffers(body)
        inner_allocs: set[Buffer] = set()

        def f(n: object) -> None:
            if isinstance(n, Allocate):
                if n.buffer.scope == "global":
                    raise CodegenError(
                        f"kernel {name}: global buffer {n.buffer.name} is allocated inside a "
                        "thread-bound loop; global temporaries must be allocated outside kernels"
                    )
                inner_allocs.add(n.buffer)

        post_order_visit(body, f)

        def no_extern(n: object) -> None:
            if isinstance(n, Call) and n.op == "loopir.extern_gemm":
                raise CodegenError(
                    f"kernel {name}: extern library call {n} inside a thread-bound loop; "
                    "library calls run between kernels"
                )

        post_order_visit(body, no_extern)
        globals_ = [b for b in touched if b.scope == "global"]
        for b in touched:
            if b.scope != "global" and b not in inner_allocs:
                raise CodegenError(
                    f"kernel {name}: {b.scope} buffer {b.name} is used but never allocated "
                    "(expected an Allocate around its uses)"
                )
        order = {b: i for i, b in enumerate((*self.func.params, *self.host_temps))}
        for b in globals_:
            if b not in order:
                raise CodegenError(
                    f"kernel {name}: global buffer {b.name} is neither a parameter of "
                    f"{self.func.name} nor allocated on the host"
                )
        buffers = tuple(sorted(globals_, key=lambda b: order[b]))

        regs = (*self.func.attrs.get(WARP_REGISTERS_ATTR, ()), *self.func.attrs.get(THREAD_REGISTERS_ATTR, ()))
        _check_thread_private_locals(body, name, frozenset(regs))
        ext = _ThreadExtents()
        ext.visit(body)
        one = IntImm(1, "int32")
        grid = tuple(
            launch_extent(t, ext.extents[t], name) if t in ext.extents else one for t in GRID_TAGS
        )
        block = tuple(
            launch_extent(t, ext.extents[t], name) if t in ext.extents else one
            for t in BLOCK_TAGS
        )
        scalars = self._free_scalars(body, buffers, name)
        self.kernels.append(
            KernelSpec(
                name=name,
                body=body,
                buffers=buffers,
                written=frozenset(b for b in buffers if b in written),
                scalars=scalars,
                grid=grid,  # type: ignore[arg-type]
                block=block,  # type: ignore[arg-type]
            )
        )
        return index

    def _free_scalars(self, body: Stmt, buffers: Sequence[Buffer], name: str) -> tuple[Var, ...]:
        """Vars a kernel uses but does not define: they become int parameters."""
        defined: set[Var] = set()
        used: dict[Var, None] = {}

        class _Collect(Visitor):
            visit_buffer_shapes = True

            def visit_For(self, node: For) -> None:
                defined.add(node.loop_var)
                self.generic_visit(node)

            def visit_Var(self, node: Var) -> None:
                used.setdefault(node, None)

        c = _Collect()
        c.visit(body)
        for b in buffers:  # flattening uses the shapes (and strides) of global buffers
            for e in (*b.shape, *(b.strides or ())):
                c.visit(e)
        allowed = set(self.host_vars)
        for b in (*self.func.params, *self.host_temps):
            for e in (*b.shape, *(b.strides or ())):
                post_order_visit(e, lambda n: allowed.add(n) if isinstance(n, Var) else None)
        free = [v for v in used if v not in defined]
        for v in free:
            if v not in allowed:
                raise CodegenError(
                    f"kernel {name}: variable {v.name} is used but defined neither by a loop "
                    "inside the kernel, nor as a size of a parameter, nor by a host loop"
                )
            if v.dtype not in ("int32", "int64"):
                raise CodegenError(
                    f"kernel {name}: scalar parameter {v.name} has dtype {v.dtype}; only int32 "
                    "and int64 sizes are supported"
                )
        return tuple(free)
