"""Host code: the C++ that unpacks a call's arguments and launches a function's kernels.

The host/device split (``loopir.codegen_cuda.split``) leaves a host program -- launches,
serial host loops, conditions on sizes, device temporaries and CUTLASS calls. This module
prints it as C++ compiled into the same shared library as the kernels, so a call costs one
C function call (no Python walk over the program, no per-launch expression evaluation):

.. code-block:: c++

    extern "C" int loopir_call_<func>(void* A, void* B, ...,   // device pointers, in order
                                      int64_t n, ...,           // size variables
                                      void* workspace,          // device temporaries
                                      void* stream, int device);

It returns 0, or an error code with a message in ``loopir_rt_last_error()`` naming the
function, the kernel or the parameter. It checks the alignment the kernels' vector accesses
need and the launch limits, launches on ``stream`` and checks each launch with
``cudaGetLastError``; with ``cuda.sync_after_launch`` it also synchronizes after every launch,
so an asynchronous fault is reported at the kernel that caused it. It never allocates,
copies, or synchronizes otherwise, so a call can be captured in a CUDA graph.
``loopir_workspace_<func>(sizes...)`` gives the bytes of device temporaries for given sizes.

The runtime helpers every entry uses (errors, launch checks) and the ``loopir_rt_*`` exports
(allocation, copies, events, synchronization: the Python runtime's NumPy path and timing) are in
``loopir.codegen_cuda.host_runtime``; [`loopir.codegen_cuda.units`][loopir.codegen_cuda.units]
assembles the translation units.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from loopir.codegen_cuda import analysis as an
from loopir.codegen_cuda.ctypes import ctype, float_literal
from loopir.codegen_cuda.exprs_cuda import ExprPrinter
from loopir.codegen_cuda.source import CodeWriter, EmitResult, NameTable
from loopir.codegen_cuda.split import (
    HostAlloc,
    HostExtern,
    HostFor,
    HostIf,
    HostLaunch,
    HostNode,
    HostSeq,
    shape_vars,
)
from loopir.codegen_cuda.tma import TensorMapParam
from loopir.errors import CodegenError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import PrimExpr, Var
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import PrimFunc
from loopir.passes.storage_align import allocation_size_c

WORKSPACE_ALIGN = 256


@attrs.frozen(eq=False)
class ExternCall:
    """One CUTLASS entry point call of the host program (see ``cutlass.hook``): a GEMM's
    extents, or a convolution's 15 integer arguments in ``conv`` (then m, n, k are the implicit
    GEMM's, for messages only)."""

    call_id: str
    entry: str
    operands: dict[str, str]  # role (a, b, d, source, bias) -> buffer name ("" when absent)
    m: int
    n: int
    k: int
    batch: int
    alpha: float
    beta: float
    conv: tuple[int, ...] = ()

    def int_args(self) -> tuple[int, ...]:
        """The entry point's integer arguments, in order."""
        return self.conv or (self.m, self.n, self.k, self.batch)


@attrs.frozen(eq=False)
class HostCode:
    """The printed host code of one function.

    Attributes
    ----------
    source
        The C++ text (appended to the kernels' translation unit).
    entry, workspace_entry
        Exported symbol names.
    size_vars
        The size variables passed after the pointers, in order.
    temps
        Device temporaries carved out of the workspace.
    """

    source: str
    entry: str
    workspace_entry: str
    size_vars: tuple[Var, ...]
    temps: tuple[Buffer, ...]
    uses_floor_helpers: bool = False


def size_vars_of(func: PrimFunc) -> tuple[Var, ...]:
    """Variables in the parameters' shapes and strides, in first-appearance order."""
    return shape_vars(func.params)


class _HostEmitter(CodeWriter):
    """Prints one function's host program; quacks like a kernel emitter for ExprPrinter."""

    def __init__(self, func: PrimFunc, emitted: EmitResult, externs: Sequence[ExternCall],
                 sync_after_launch: bool) -> None:  # fmt: skip
        self.func = func
        self.emitted = emitted
        self.externs = {c.call_id: c for c in externs}
        self.sync = sync_after_launch
        self.names = NameTable()
        # the entry's own locals and the symbols around it
        n = len(func.params) + len(size_vars_of(func))
        self.names.used |= {"g", "t", "grid", "block", "rc", "rc2", "stream", "stream_handle",
                            "workspace", "device", "offsets", "total", f"{func.name}_layout"}
        self.names.used |= {f"p_{i}" for i in range(n)} | {f"s_{i}" for i in range(n)}
        self.names.used |= {k.name for k in emitted.kernels}
        self.names.used |= {f"{k.name}_smem" for k in emitted.kernels}
        self.env: dict[Var, an.Bound] = {}
        self.printer = ExprPrinter(self)
        self.printer.device_code = False
        self.lines: list[str] = []
        self.indent = 1
        self.size_vars = size_vars_of(func)
        for v in self.size_vars:
            self.env[v] = (0, None)
        self.buffer_ptr: dict[Buffer, str] = {}

    # -- the interface ExprPrinter uses -------------------------------------------------------
    def var_name(self, v: Var) -> str:
        return self.names.get(v, v.name)

    def buffer_name(self, b: Buffer) -> str:
        return self.buffer_ptr.get(b) or self.names.get(b, b.name)

    def flat_index(self, buffer: Buffer, indices: tuple[PrimExpr, ...]) -> PrimExpr:
        raise CodegenError(f"host code: buffer {buffer.name} is read on the host")

    def note_dtype(self, dtype: str) -> None:
        if dt.is_float(dtype):
            raise CodegenError(f"host code: {dtype} arithmetic on the host is not supported")

    # -- output -------------------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> str:
        return self.printer.print(e)

    def i64(self, e: PrimExpr) -> str:
        return f"static_cast<int64_t>({self.expr(e)})"

    # -- the entry ----------------------------------------------------------------------------
    def emit(self) -> HostCode:
        fname = self.func.name
        entry, ws_entry = f"loopir_call_{fname}", f"loopir_workspace_{fname}"
        temps = self.emitted.host_temps
        for b in temps:
            free = self._vars_in(b.shape)
            if any(v not in self.size_vars for v in free):
                raise CodegenError(
                    f"host code: device temporary {b.name} has shape {tuple(map(str, b.shape))}, "
                    "which must depend on parameter sizes only"
                )
        decls = [f"void* p_{i}" for i in range(len(self.func.params))]
        size_decls = [f"int64_t s_{i}" for i in range(len(self.size_vars))]
        out: list[str] = []
        out.extend(self._layout(temps, size_decls))
        sig = ", ".join([*size_decls]) or "void"
        out.append(f'extern "C" int64_t {ws_entry}({sig}) {{')
        args = ", ".join(f"s_{i}" for i in range(len(self.size_vars)))
        out.append(f"  return {fname}_layout({args}{', ' if args else ''}nullptr);")
        out.append("}")
        out.append("")
        all_decls = ", ".join([*decls, *size_decls, "void* workspace", "void* stream_handle",
                               "int device"])  # fmt: skip
        out.append(f'extern "C" int {entry}({all_decls}) {{')
        self.line("cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);")
        self.line("if (int rc = loopir_rt::use_device(device)) return rc;")
        for i, v in enumerate(self.size_vars):
            self.line(f"const {ctype(v.dtype)} {self.var_name(v)} = static_cast<{ctype(v.dtype)}>(s_{i});")
        self._unpack_params()
        if temps:
            self.line(f"int64_t offsets[{len(temps)}];")
            self.line(f"{fname}_layout({args}{', ' if args else ''}offsets);")
            for j, b in enumerate(temps):
                name = self.names.get(b, b.name)
                self.buffer_ptr[b] = name
                t = ctype(b.dtype)
                self.line(f"{t}* {name} = reinterpret_cast<{t}*>(static_cast<char*>(workspace) + offsets[{j}]);")
        self.node(self.emitted.host)
        self.line("return 0;")
        out.extend(self.lines)
        out.append("}")
        out.extend(self._python_entry(entry))
        return HostCode(
            source="\n".join(out) + "\n",
            entry=entry,
            workspace_entry=ws_entry,
            size_vars=self.size_vars,
            temps=tuple(temps),
            uses_floor_helpers=self.printer.uses_floor_helpers,
        )

    def _python_entry(self, entry: str) -> list[str]:
        """The entry as a CPython builtin (METH_FASTCALL): a call costs no ctypes marshalling.

        Built when the Python headers are found (``-DLOOPIR_PYTHON_ENTRY``); the runtime falls
        back to calling ``entry`` through ctypes otherwise.
        """
        npar, nsize = len(self.func.params), len(self.size_vars)
        total = npar + nsize + 3
        conv = [f"  void* a{i} = loopir_py::ptr(args[{i}]);" for i in range(npar)]
        conv += [f"  int64_t a{npar + i} = PyLong_AsLongLong(args[{npar + i}]);" for i in range(nsize)]
        conv += [f"  void* a{npar + nsize} = loopir_py::ptr(args[{npar + nsize}]);",
                 f"  void* a{npar + nsize + 1} = loopir_py::ptr(args[{npar + nsize + 1}]);",
                 f"  int a{total - 1} = static_cast<int>(PyLong_AsLong(args[{total - 1}]));"]  # fmt: skip
        call = ", ".join(f"a{i}" for i in range(total))
        return [
            "#ifdef LOOPIR_PYTHON_ENTRY",
            f"static PyObject* py_{entry}(PyObject*, PyObject* const* args, Py_ssize_t nargs) {{",
            f"  if (nargs != {total}) {{",
            f'    PyErr_SetString(PyExc_TypeError, "{entry}: expected {total} arguments");',
            "    return nullptr;",
            "  }",
            *conv,
            "  if (PyErr_Occurred()) return nullptr;",
            f"  return PyLong_FromLong({entry}({call}));",
            "}",
            f'static PyMethodDef py_def_{entry} = {{"{entry}", '
            f"reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(py_{entry})), "
            "METH_FASTCALL, nullptr};",
            f'extern "C" PyObject* loopir_py_{entry}(void) {{ return PyCFunction_New(&py_def_{entry}, nullptr); }}',
            "#endif",
        ]

    def _vars_in(self, exprs: Sequence[PrimExpr]) -> list[Var]:
        found: list[Var] = []
        for e in exprs:
            post_order_visit(e, lambda n: found.append(n) if isinstance(n, Var) else None)
        return found

    def _layout(self, temps: Sequence[Buffer], size_decls: list[str]) -> list[str]:
        """``<func>_layout(sizes..., offsets)``: the workspace's total bytes and each offset."""
        fname = self.func.name
        params = ", ".join([*size_decls, "int64_t* offsets"])
        lines = [f"static int64_t {fname}_layout({params}) {{", "  int64_t total = 0;"]
        saved, self.lines, self.indent = self.lines, [], 1
        for i, v in enumerate(self.size_vars):
            self.line(f"const {ctype(v.dtype)} {self.var_name(v)} = static_cast<{ctype(v.dtype)}>(s_{i});")
            self.line(f"(void){self.var_name(v)};")
        for j, b in enumerate(temps):
            nbytes = f"{self._elements(b)} * {max(1, dt.bits(b.dtype) // 8)}"
            self.line(f"if (offsets) offsets[{j}] = total;")
            self.line(f"total += ({nbytes} + {WORKSPACE_ALIGN - 1}) / {WORKSPACE_ALIGN} * {WORKSPACE_ALIGN};")
        body, self.lines = self.lines, saved
        return [*lines, *body, "  return total;", "}", ""]

    def _elements(self, b: Buffer) -> str:
        """The elements ``b`` spans: its shape's product, or with strides (storage_align's
        padding) ``1 + sum((extent - 1) * stride)``, none when an extent is zero."""
        if b.strides is None:
            return " * ".join(self.i64(e) for e in b.shape)
        return allocation_size_c([self.i64(e) for e in b.shape], [self.i64(st) for st in b.strides])

    def _unpack_params(self) -> None:
        align: dict[Buffer, int] = {}
        for k in self.emitted.kernels:
            for b, a in k.alignment.items():
                align[b] = max(align.get(b, 1), a)
        for i, b in enumerate(self.func.params):
            name = self.names.get(b, b.name)
            self.buffer_ptr[b] = name
            t = ctype(b.dtype)
            self.line(f"{t}* {name} = static_cast<{t}*>(p_{i});")
            a = align.get(b, 1)
            if a > 1:
                with self.block(f"if (reinterpret_cast<uintptr_t>({name}) % {a} != 0)"):
                    self.line(
                        f'return loopir_rt::fail(1, "{self.func.name}: parameter \'{b.name}\' must be '
                        f'{a}-byte aligned for vector accesses, got address %p", p_{i});'
                    )

    # -- the host program ---------------------------------------------------------------------
    def node(self, n: HostNode) -> None:
        if isinstance(n, HostSeq):
            for item in n.items:
                self.node(item)
        elif isinstance(n, HostLaunch):
            self.launch(n.kernel)
        elif isinstance(n, HostFor):
            t = ctype(n.var.dtype)
            v = self.var_name(n.var)
            lo = self.expr(n.min)
            with self.block(""):
                self.line(f"const {t} {v}_end = {lo} + {self.expr(n.extent)};")
                blo = an.const_int_bound(n.min, self.env)
                saved = self.env.get(n.var)
                self.env[n.var] = (blo[0], None)
                with self.block(f"for ({t} {v} = {lo}; {v} < {v}_end; ++{v})"):
                    self.node(n.body)
                if saved is None:
                    del self.env[n.var]
        elif isinstance(n, HostIf):
            with self.block(f"if ({self.expr(n.condition)})"):
                self.node(n.then_case)
            if n.else_case is not None:
                with self.block("else"):
                    self.node(n.else_case)
        elif isinstance(n, HostAlloc):
            self.node(n.body)  # carved from the workspace at entry
        elif isinstance(n, HostExtern):
            self.extern(n.call_id)
        else:  # pragma: no cover - the splitter builds only the node types above
            raise CodegenError(f"host code: unknown host node {type(n).__name__}")

    def launch(self, index: int) -> None:
        k = self.emitted.kernels[index]
        spec = k.spec
        dims = [self.i64(e) for e in (*spec.grid, *spec.block)]
        fn = self.func.name
        with self.block(""):
            self.line(f"const int64_t g[3] = {{{dims[0]}, {dims[1]}, {dims[2]}}};")
            self.line(f"const int64_t t[3] = {{{dims[3]}, {dims[4]}, {dims[5]}}};")
            # an empty iteration space launches nothing
            with self.block("if (g[0] > 0 && g[1] > 0 && g[2] > 0 && t[0] > 0 && t[1] > 0 && t[2] > 0)"):
                self.line(
                    f'if (int rc = loopir_rt::check_dims("{fn}", "{k.name}", g, t)) return rc;'
                )
                args = [self.buffer_name(b) for b in spec.buffers]
                args += [self.var_name(v) for v in spec.scalars]
                args += [self.tensor_map(k.name, j, m) for j, m in enumerate(k.tensor_maps)]
                self.line("const dim3 grid(g[0], g[1], g[2]), block(t[0], t[1], t[2]);")
                rest = "".join(", " + a for a in args)
                dyn = k.dynamic_shared_bytes
                if dyn:
                    # allowed once per kernel and device (a function-local static remembers it)
                    self.line(f"static loopir_rt::SharedOptIn {k.name}_smem;")
                    self.line(
                        f'if (int rc = loopir_rt::opt_in_shared({k.name}_smem, '
                        f'reinterpret_cast<const void*>(&{k.name}), "{fn}", "{k.name}", {dyn}, '
                        f"{k.shared_bytes}, device)) return rc;"
                    )
                    self.line(f"LOOPIR_LAUNCH_DYN({k.name}, grid, block, {dyn}, stream{rest});")
                else:
                    self.line(f"LOOPIR_LAUNCH({k.name}, grid, block, stream{rest});")
                sync = "true" if self.sync else "false"
                self.line(
                    f'if (int rc = loopir_rt::check_launch("{fn}", "{k.name}", stream, {sync})) '
                    "return rc;"
                )

    def tensor_map(self, kernel: str, j: int, m: TensorMapParam) -> str:
        """Encode the TMA tensor map ``m`` of ``kernel`` when its buffer's pointer, sizes or the
        device changed since the last call of this host thread (a thread_local static of the launch
        site: concurrent callers need no lock); its launch argument."""
        b = m.buffer
        cache = f"{kernel}_tmap{j}"
        esize = dt.bits(b.dtype) // 8
        dims = [f"static_cast<uint64_t>({self.expr(e)})" for e in reversed(b.shape)]
        strides, acc = [], f"uint64_t{{{esize}}}"
        for d in dims[:-1]:
            acc = f"{acc} * {d}"
            strides.append(acc)
        box = [str(n) for n in reversed(m.box)]
        self.line(f"static thread_local loopir_tma::MapCache {cache};")
        with self.block(""):
            self.line(f"const uint64_t d[{len(dims)}] = {{{', '.join(dims)}}};")
            self.line(f"const uint64_t s[{max(1, len(strides))}] = {{{', '.join(strides) or '0'}}};")
            self.line(f"const uint32_t b[{len(box)}] = {{{', '.join(box)}}};")
            self.line(
                f'if (int rc = loopir_tma::encode({cache}, "{self.func.name}", "{kernel}", "{b.name}", '
                f"{self.buffer_name(b)}, {m.data_type}, {len(dims)}, d, s, b, {m.swizzle_enum}, device)) return rc;"
            )
        return f"{cache}.map"

    def extern(self, call_id: str) -> None:
        c = self.externs.get(call_id)
        if c is None:
            raise CodegenError(f"host code: extern GEMM call {call_id!r} has no CUTLASS entry")
        by_name = {b.name: self.buffer_name(b) for b in self.buffer_ptr}

        def operand(role: str) -> str:
            name = c.operands.get(role, "")
            if not name:
                return "nullptr"
            if name not in by_name:
                raise CodegenError(f"host code: extern GEMM {call_id} uses unknown buffer {name!r}")
            return by_name[name]

        ops = [operand(r) for r in ("a", "b", "source", "bias", "d")]
        alpha, beta = float_literal(c.alpha, "float32"), float_literal(c.beta, "float32")
        fn = self.func.name
        with self.block(""):
            self.line(
                f"int rc = LOOPIR_EXTERN({c.entry}, {', '.join(ops)}, "
                f"{', '.join(map(str, c.int_args()))}, {alpha}, {beta}, stream_handle);"
            )
            what = "conv2d" if c.conv else "GEMM"
            self.line(
                f'if (rc != 0) return loopir_rt::fail(rc, "{fn}: CUTLASS {what} {call_id} '
                f'({c.entry}) returned %d: %s", rc, {c.entry}_error());'
            )
            sync = "true" if self.sync else "false"
            self.line(
                f'if (int rc2 = loopir_rt::check_launch("{fn}", "{c.entry}", stream, {sync})) '
                "return rc2;"
            )


def extern_declarations(externs: Sequence[ExternCall]) -> str:
    """``extern "C"`` declarations of the CUTLASS entry points the host code calls."""
    if not externs:
        return ""
    lines = []
    conv = {c.entry for c in externs if c.conv}
    for entry in sorted({c.entry for c in externs}):
        ints = ("int N, int H, int W, int C, int K, int R, int S_, int P, int Q, int pad_h, "
                "int pad_w, int stride_h, int stride_w, int dil_h, int dil_w"
                if entry in conv else "int M, int N, int K, int L")  # fmt: skip
        lines.append(f'extern "C" const char* {entry}_error(void);')
        lines.append(
            f'extern "C" int {entry}(const void* A, const void* B, const void* S, '
            f"const void* bias, void* D, {ints}, float alpha, float beta, void* stream);"
        )
    return "\n".join(lines) + "\n"


def emit_host(func: PrimFunc, emitted: EmitResult, externs: Sequence[ExternCall] = (),
              sync_after_launch: bool = False) -> HostCode:  # fmt: skip
    """Print the host code of ``func`` (lowered and split into ``emitted``).

    Parameters
    ----------
    func
        The lowered function ``emitted`` came from.
    emitted
        [`emit_cuda`][loopir.codegen_cuda.translation_unit.emit_cuda]'s result.
    externs
        The CUTLASS calls of its extern GEMM statements.
    sync_after_launch
        Synchronize the stream after every launch (``cuda.sync_after_launch``), so an
        asynchronous fault is reported at its kernel.

    Raises
    ------
    CodegenError
        If the host program uses something the host cannot compute.
    """
    return _HostEmitter(func, emitted, externs, sync_after_launch).emit()
