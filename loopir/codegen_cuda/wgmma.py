"""CUDA for ``ptx_wgmma``: Hopper's warpgroup MMA with both operands in shared memory (sm_90a).

One call is one warp's rows of a warpgroup's ``wgmma.mma_async.m64nNk16`` (see
[`loopir.ir.op.ptx_wgmma`][loopir.ir.op.ptx_wgmma] for its meaning). The four warps of a
warpgroup issue one instruction together, each passing the same two matrix descriptors, so the
emitter proves, per call, from the index expressions (symbolically, at no cost that grows with
the sizes):

* the block is ``threadIdx.x`` = 32 lanes and ``threadIdx.y`` a multiple of 4 warps (then warp
  ``w`` of a warpgroup is ``threadIdx.y % 4``: CUDA numbers warps by the linear thread index);
* ``a``'s linear offset does not depend on the lane, and is warp 0's plus ``16 * 64 * w`` (the
  warp's 16 rows of 64 elements): the warpgroup's A tile is 64 consecutive rows;
* ``b``'s offset depends on neither the lane nor ``w``;
* both buffers have rows of exactly 64 elements (128 bytes), and both tiles start at a 1024-byte
  swizzle atom plus a K offset of a multiple of 16 elements (32 bytes) below 64: the address bits
  the hardware swizzles are then the row within the atom, as
  [`sw128`][loopir.tensor_intrin.layouts.sw128] (the CPU executor's reading) assumes. Every
  shared buffer of a kernel with ``wgmma`` is 1024-byte aligned for this.

Anything unproven is a [`CodegenError`][loopir.errors.CodegenError] naming the kernel and the
operand. The emitted call passes warp 0's A address (``threadIdx.y`` rounded down to a multiple
of 4 in ``a``'s offset).

Each call is ``wgmma.fence``, its ``K / 16`` MMAs (the descriptors' start addresses advanced
32 bytes per step along the 128-byte rows), ``commit_group`` and ``wait_group 0`` in one ``asm``
statement: it has completed when the next statement runs, so the barrier planner and the race
checker may treat it as an ordinary read of its shared tiles and a read-modify-write of the
thread's accumulator registers, and the compiler sees the registers change at one point. Shared
memory written by ordinary stores or ``cp.async`` is read by ``wgmma`` through the async proxy:
in a kernel with ``wgmma`` every ``__syncthreads()`` is preceded by ``fence.proxy.async.shared::cta``
(HOPPER.md: "shared memory written by ordinary stores that the tensor cores read next also
needs ``fence.proxy.async.shared::cta`` in each writing thread before the barrier").

``ptx_wgmma_async`` (the asynchronous issue) is the same ``asm`` without the wait: the group
stays in flight until a ``ptx_wgmma_wait`` (``loopir_wgmma_wait<N>()``: ``wgmma.wait_group N``),
which is followed by a register fence on the accumulators of every group it names
(``loopir_wgmma_fence_n{N}``, CUTLASS's ``warpgroup_fence_operand``: an empty ``asm`` that reads
and writes them, so that the compiler keeps their uses after the wait). A kernel that touches
an accumulator between its issue and the ``wait_group 0`` that retires it is refused
([`check_accumulators`][loopir.codegen_cuda.wgmma_async.check_accumulators]); the race checker
keeps the issue's tile reads in flight until its retiring wait
([`loopir.passes.race_inflight`][loopir.passes.race_inflight]).

Matrix descriptors (PTX ISA, "Matrix Descriptor Format"): start address >> 4 in bits 0-13,
leading byte offset 1 (unused by K-major swizzled layouts), stride byte offset 1024 >> 4 (from
one 8-row atom to the next) in bits 32-45, layout type 1 (``SWIZZLE_128B``) in bits 62-63.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopir import arith
from loopir.codegen_cuda.wgmma_async import check_accumulators
from loopir.errors import CodegenError
from loopir.ir.buffer import Range
from loopir.ir.expr import BufferLoad, Call, IntImm, PrimExpr, Var
from loopir.ir.functor import post_order_visit, substitute
from loopir.ir.op import (
    WGMMA_ISSUES,
    wgmma_a_in_registers,
    wgmma_nk,
    wgmma_trans_b,
    wgmma_wait_groups,
)
from loopir.ir.stmt import Stmt
from loopir.tensor_intrin.layouts import SW128_ROW, WARP_SIZE, WARPGROUP_WARPS

if TYPE_CHECKING:
    from loopir.codegen_cuda.emitter import KernelEmitter

__all__ = ["WGMMA_SMEM_ALIGN", "has_wgmma", "wait_text", "wgmma_helpers", "wgmma_smem_align", "wgmma_text"]

#: Alignment of every shared buffer of a kernel with ``wgmma``: one 128-byte swizzle atom.
WGMMA_SMEM_ALIGN = 1024

_PTX_TYPE = {"float16": "f16", "bfloat16": "bf16"}
_CTYPE = {"float16": "half", "bfloat16": "nv_bfloat16"}

_DESC_HELPER = "\n".join([
    "// wgmma (loopir/codegen_cuda/wgmma.py): sm_90a.",
    "#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)",
    '#error "loopir: kernels with wgmma need sm_90a (-gencode=arch=compute_90a,code=sm_90a)"',
    "#endif",
    "__device__ __forceinline__ unsigned long long loopir_sw128_desc(const void* tile) {",
    "  unsigned long long addr = static_cast<unsigned long long>(__cvta_generic_to_shared(tile));",
    "  return ((addr & 0x3FFFFull) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);",
    "}",
    "// MN-major: the leading byte offset is the stride of the 64-column blocks (16-byte units)",
    "__device__ __forceinline__ unsigned long long loopir_sw128_mn_desc(const void* tile, unsigned long long lbo) {",
    "  unsigned long long addr = static_cast<unsigned long long>(__cvta_generic_to_shared(tile));",
    "  return ((addr & 0x3FFFFull) >> 4) | (lbo << 16) | ((1024ull >> 4) << 32) | (1ull << 62);",
    "}",
])  # fmt: skip


def _helper(n: int, k: int, dtype: str, wait: bool = True, form: str = "") -> str:
    """``k / 16`` wgmma instructions, one commit, one wait (none for the asynchronous issue:
    ``wait`` False). ``form`` (``_form``): A from a descriptor (K-major, the start address
    advanced 32 bytes, 2 in its 16-byte units, per step along the 128-byte rows, ``_k_step``) or from
    registers (``rs``: 4 x ``.b32`` per step, the thread's fragment of the step's 16 x 16
    tile); B K-major likewise, or MN-major (``tb{lbo}``: ``imm-trans-b`` 1, the descriptor's
    leading byte offset ``lbo`` 16-byte units, advanced 16 rows of 128 bytes, 128 units, per
    step)."""
    regs = n // 2
    a_regs, lbo, ka, kb = _parse_form(form)
    t, ct = _PTX_TYPE[dtype], _CTYPE[dtype]
    d = ", ".join(f"%{i}" for i in range(regs))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    ins: list[str] = []
    steps = []
    for s in range(k // 16):
        if a_regs:
            a_op = "{" + ", ".join(f"%{regs + len(ins) + r}" for r in range(4)) + "}"
            ins += [f'"r"(ar[{4 * s + r}])' for r in range(4)]
        else:
            a_op = f"%{regs + len(ins)}"
            ins.append(f'"l"(da + {_k_step(s, ka)})')
        b_op = f"%{regs + len(ins)}"
        ins.append(f'"l"(db + {_k_step(s, kb) if lbo is None else 128 * s})')
        # scale-d (p), imm-scale-a, imm-scale-b, [imm-trans-a: descriptors only], imm-trans-b
        tb = 0 if lbo is None else 1
        tail = f"p, 1, 1, {tb}" if a_regs else f"p, 1, 1, 0, {tb}"
        steps.append(f'               "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{d}}}, '
                     f'{a_op}, {b_op}, {tail};\\n"')  # fmt: skip
    pred = regs + len(ins)
    b_desc = "loopir_sw128_desc(b)" if lbo is None else f"loopir_sw128_mn_desc(b, {lbo})"
    setup = [f"  unsigned long long da = loopir_sw128_desc(a), db = {b_desc};"]
    if a_regs:
        # memcpy, as the mma.sync helper: no alignment or aliasing assumption on the halves
        # (the copy folds away once the fragment is in registers)
        setup = [f"  unsigned ar[{k // 4}];", "  memcpy(ar, a, sizeof(ar));", f"  unsigned long long db = {b_desc};"]
    return "\n".join([
        f"__device__ __forceinline__ void {_name(n, k, dtype, wait, form)}(float* d, const {ct}* a, const {ct}* b) {{",
        *setup,
        '  asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %' + str(pred) + ', 0;\\n"',
        '               "wgmma.fence.sync.aligned;\\n"',
        *steps,
        *(['               "wgmma.commit_group.sync.aligned;\\n"',
           '               "wgmma.wait_group.sync.aligned 0;\\n}\\n"'] if wait else
          ['               "wgmma.commit_group.sync.aligned;\\n}\\n"']),
        f'               : {outs}',
        f'               : {", ".join(ins)}, "r"(1) : "memory");',
        "}",
    ])  # fmt: skip


def _form(a_regs: bool, lbo: int | None, ka: int | None = None, kb: int | None = None) -> str:
    """The operand form of a helper, ``_``-joined parts: none (both descriptors, K-major along
    one 128-byte row), ``"rs"`` (A from registers), ``"tb{lbo}"`` (B MN-major with leading byte
    offset ``lbo``), ``"ka{u}"`` / ``"kb{u}"`` (a K-major A / B of K past 64, its 64-column
    blocks ``u`` 16-byte units apart)."""
    parts = (["rs"] if a_regs else []) + ([f"tb{lbo}"] if lbo is not None else []) + \
        ([f"ka{ka}"] if ka is not None else []) + ([f"kb{kb}"] if kb is not None else [])
    return "_".join(parts)


def _parse_form(form: str) -> tuple[bool, int | None, int, int]:
    """``(A from registers, B's MN-major leading byte offset or None, A's and B's block strides
    (0: one row))`` of a ``_form``."""
    parts = form.split("_") if form else []

    def num(prefix: str) -> int | None:
        return next((int(p[2:]) for p in parts if p.startswith(prefix)), None)

    return "rs" in parts, num("tb"), num("ka") or 0, num("kb") or 0


def _k_step(s: int, block: int) -> int:
    """The descriptor increment of K-major K step ``s`` (16 columns): 32 bytes along the row
    (2 units), the next 64-column block (``block`` units further) every 4 steps."""
    return s % 4 * 2 + s // 4 * block


def _name(n: int, k: int, dtype: str, wait: bool = True, form: str = "") -> str:
    return f"loopir_wgmma{'' if wait else '_async'}_m64n{n}k{k}_{_PTX_TYPE[dtype]}" + (f"_{form}" if form else "")


def _fence_helper(n: int) -> str:
    """A register fence on a warp's ``n / 2`` accumulators (CUTLASS's ``warpgroup_fence_operand``):
    an empty ``asm`` that reads and writes them, after a ``wgmma.wait_group``, so that the
    compiler moves no use of them above the wait (the issue's ``asm`` wrote them, as far as
    it knows)."""
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(n // 2))
    return "\n".join([
        f"__device__ __forceinline__ void loopir_wgmma_fence_n{n}(float* d) {{",
        f'  asm volatile("" : {outs} :: "memory");',
        "}",
    ])  # fmt: skip


_WAIT_HELPER = "\n".join([
    "template <int N> __device__ __forceinline__ void loopir_wgmma_wait() {",
    '  asm volatile("wgmma.wait_group.sync.aligned %0;\\n" :: "n"(N) : "memory");',
    "}",
])  # fmt: skip


def has_wgmma(body: Stmt) -> bool:
    """Whether a kernel body issues a ``wgmma`` (``ptx_wgmma`` or ``ptx_wgmma_async``)."""
    found: list[bool] = []
    post_order_visit(body, lambda n: found.append(True) if isinstance(n, Call) and n.op in WGMMA_ISSUES else None)
    return bool(found)


def wgmma_smem_align(name: str, body: Stmt) -> int:
    """The alignment of a kernel's shared buffers: ``WGMMA_SMEM_ALIGN`` with ``wgmma``, after
    checking its asynchronous accumulators
    ([`check_accumulators`][loopir.codegen_cuda.wgmma_async.check_accumulators]); else 16."""
    if not has_wgmma(body):
        return 16
    check_accumulators(name, body)
    return WGMMA_SMEM_ALIGN


def wgmma_helpers(shapes: set[tuple[str, int, int, str, str]]) -> str:
    """The device helpers a translation unit uses: ``(kind, N, K, dtype, form)`` with kind
    ``"sync"`` or ``"async"`` (an issue of that shape and operand form, ``_form``) or
    ``"fence"`` (the register fence of ``N`` columns; a ``"fence"`` also brings the wait)."""
    out = [_DESC_HELPER]
    if any(kind == "fence" for kind, *_ in shapes):
        out.append(_WAIT_HELPER)
    for kind, n, k, d, form in sorted(shapes):
        out.append(_fence_helper(n) if kind == "fence" else _helper(n, k, d, kind == "sync", form))
    return "\n".join(out)


def _fail(em: KernelEmitter, call: Call, why: str) -> CodegenError:
    return CodegenError(f"CUDA codegen: kernel {em.spec.name}: {why}:\n  {call}")


def _analyzer(em: KernelEmitter) -> arith.Analyzer:
    ana = arith.Analyzer()
    for v, (lo, hi) in em.env.items():
        if lo is not None and hi is not None:
            ana.bind(v, Range(lo, hi - lo + 1))
    return ana


def _warp_layout(em: KernelEmitter, call: Call) -> tuple[Var, Var]:
    """The lane and warp variables (``threadIdx.x``, ``threadIdx.y``) after checking the block
    is 32 x (4k) threads."""
    x, y = em.launch.get("threadIdx.x"), em.launch.get("threadIdx.y")
    tx, ty = em.thread_vars.get("threadIdx.x"), em.thread_vars.get("threadIdx.y")
    if not (isinstance(x, IntImm) and x.value == WARP_SIZE and isinstance(y, IntImm)
            and y.value % WARPGROUP_WARPS == 0 and tx is not None and ty is not None):  # fmt: skip
        raise _fail(em, call, f"ptx_wgmma needs a block of threadIdx.x = {WARP_SIZE} lanes and "
                    f"threadIdx.y a multiple of {WARPGROUP_WARPS} warps (whole warpgroups), and the "
                    f"call inside both loops; the block is x = {x}, y = {y}")  # fmt: skip
    return tx, ty


def _equal(ana: arith.Analyzer, a: PrimExpr, b: PrimExpr) -> bool:
    return isinstance(d := ana.simplify(a - b), IntImm) and d.value == 0


def _check_rows(em: KernelEmitter, call: Call, what: str, load: BufferLoad) -> None:
    """Refuse operand ``what`` unless its buffer's rows are one swizzle row (64 elements)."""
    last = load.buffer.shape[-1]
    if not (isinstance(last, IntImm) and last.value == SW128_ROW):
        raise _fail(em, call, f"ptx_wgmma {what}: the rows of {load.buffer.name} must be {SW128_ROW} elements "
                    f"(128 bytes, one swizzle row), got {last}")  # fmt: skip


def _operand(em: KernelEmitter, call: Call, what: str, load: PrimExpr, lanes: tuple[Var, Var],
             rows_per_warp: int, depth: int) -> tuple[PrimExpr, int | None]:  # fmt: skip
    """Warp 0's linear offset of operand ``load`` after proving the warpgroup's uniformity and
    the tile's alignment (module doc), and for a ``depth`` past 64 the stride of its 64-column
    blocks in 16-byte units (``_block_stride``; else None)."""
    assert isinstance(load, BufferLoad)
    _check_rows(em, call, what, load)
    tx, ty = lanes
    ana = _analyzer(em)
    q, w = Var("wg_q", "int32"), Var("wg_w", "int32")
    y = em.launch["threadIdx.y"]
    assert isinstance(y, IntImm)
    ana.bind(q, Range(0, y.value // WARPGROUP_WARPS))
    ana.bind(w, Range(0, WARPGROUP_WARPS))
    off = em.flat_index(load.buffer, load.indices)
    base = substitute(off, {ty: q * WARPGROUP_WARPS})
    if not _equal(ana, substitute(off, {tx: IntImm(0, "int32")}), off):
        raise _fail(em, call, f"ptx_wgmma {what}: its tile ({load}) depends on the lane")
    step = rows_per_warp * SW128_ROW
    moved = substitute(off, {ty: q * WARPGROUP_WARPS + w})
    if not _equal(ana, moved, base + w * step):
        raise _fail(em, call, (f"ptx_wgmma {what}: cannot prove that warp w of a warpgroup reads the tile "
                               f"{rows_per_warp * SW128_ROW} * w elements after warp 0's ({load})"))  # fmt: skip
    k = ana.simplify(base % (8 * SW128_ROW))
    first: PrimExpr = substitute(off, {ty: ty // WARPGROUP_WARPS * WARPGROUP_WARPS})
    if depth > SW128_ROW:  # whole 64-column blocks along the dimension before the rows
        if not _equal(ana, k, IntImm(0, "int32")):
            raise _fail(em, call, (f"ptx_wgmma {what}: a tile of K = {depth} ({load}) must start at a 1024-byte "
                                   f"swizzle atom (column 0 of its first 64-column block); its offset in the atom is {k}"))  # fmt: skip
        return first, _block_stride(em, call, what, load, ana)
    aligned = ana.can_prove(k + depth <= SW128_ROW) and _equal(ana, k % 16, IntImm(0, "int32"))
    if not aligned:
        raise _fail(em, call, (f"ptx_wgmma {what}: the tile ({load}) must start at a 1024-byte swizzle "
                               f"atom plus a multiple of 16 elements at most {SW128_ROW - depth}; its offset "
                               f"in the atom is {k}"))  # fmt: skip
    return first, None


def _block_stride(em: KernelEmitter, call: Call, what: str, load: BufferLoad, ana: arith.Analyzer) -> int:
    """The stride of ``load``'s 64-column blocks (its dimension before the rows) in 16-byte
    units: a constant that keeps the blocks' 1024-byte atoms aligned, and fits a descriptor's
    14-bit fields."""
    if len(load.indices) < 3:
        raise _fail(em, call, f"ptx_wgmma {what}: a K-major tile of more than {SW128_ROW} columns needs its 64-column "
                    f"blocks along a dimension before the rows (a buffer of rank >= 3); {load.buffer.name} has "
                    f"rank {len(load.indices)}")  # fmt: skip
    off = em.flat_index(load.buffer, load.indices)
    idx = list(load.indices)
    idx[-3] = idx[-3] + 1
    stride = ana.simplify(em.flat_index(load.buffer, tuple(idx)) - off)
    elems = stride.value if isinstance(stride, IntImm) else 0
    units = elems * 2 // 16
    if units <= 0 or units > _MAX_LBO or elems % (8 * SW128_ROW):
        raise _fail(em, call, f"ptx_wgmma {what}: the stride of {load.buffer.name}'s 64-column blocks ({stride} "
                    f"elements) must be a constant multiple of {8 * SW128_ROW} of at most {_MAX_LBO * 8}")  # fmt: skip
    return units


def wait_text(em: KernelEmitter, call: Call) -> str:
    """The CUDA of a ``ptx_wgmma_wait``: ``wgmma.wait_group``, then a register fence on the
    accumulator of every group it names."""
    pending = call.args[0]
    assert isinstance(pending, IntImm)
    lines = [f"loopir_wgmma_wait<{pending.value}>();"]
    for shape, _, _, c in wgmma_wait_groups(call):
        nk = wgmma_nk(shape)
        assert nk is not None and isinstance(c, BufferLoad)
        if c.buffer.scope != "local":
            raise _fail(em, call, "ptx_wgmma_wait's accumulator must be registers (run LowerWarpMemory)")
        em.wgmma_shapes.add(("fence", nk[0], 0, "", ""))
        acc = f"&{em.buffer_name(c.buffer)}[{em.expr(em.flat_index(c.buffer, c.indices))}]"
        lines.append(f"loopir_wgmma_fence_n{nk[0]}({acc});")
    return " ".join(lines)


def wgmma_text(em: KernelEmitter, call: Call) -> str:
    """The CUDA of one ``ptx_wgmma`` or ``ptx_wgmma_async`` call (module doc)."""
    if call.op == "ptx_wgmma_wait":
        return wait_text(em, call)
    shape, a, b, c = call.args
    nk = wgmma_nk(shape)
    assert nk is not None and isinstance(a, BufferLoad) and isinstance(b, BufferLoad) and isinstance(c, BufferLoad)
    n, depth = nk
    if c.buffer.scope != "local":
        raise _fail(em, call, "ptx_wgmma's accumulator must be registers (run LowerWarpMemory)")
    lanes = _warp_layout(em, call)
    a_regs = wgmma_a_in_registers(call)
    ka = kb = lbo = None
    if a_regs:
        a_text = _register_a(em, call, a)
    else:
        off_a, ka = _operand(em, call, "a", a, lanes, 16, depth)
        a_text = f"&{em.buffer_name(a.buffer)}[{em.expr(off_a)}]"
    if wgmma_trans_b(shape):
        off_b, lbo = _operand_mn(em, call, b, lanes, n)
    else:
        off_b, kb = _operand(em, call, "b", b, lanes, 0, depth)
    form = _form(a_regs, lbo, ka, kb)
    sync = call.op == "ptx_wgmma"
    em.wgmma_shapes.add(("sync" if sync else "async", n, depth, a.dtype, form))
    name = _name(n, depth, a.dtype, sync, form)
    acc = f"&{em.buffer_name(c.buffer)}[{em.expr(em.flat_index(c.buffer, c.indices))}]"
    return f"{name}({acc}, {a_text}, &{em.buffer_name(b.buffer)}[{em.expr(off_b)}]);"


def _register_a(em: KernelEmitter, call: Call, a: BufferLoad) -> str:
    """The address of a register A (the thread's fragment: ``k / 16`` tiles of 8 elements, one
    after the other), after checking it is registers starting at a tile."""
    if a.buffer.scope != "local":
        raise _fail(em, call, "ptx_wgmma's register A must be registers (run LowerWarpMemory)")
    last = a.buffer.shape[-1]
    off = em.flat_index(a.buffer, a.indices)
    ana = _analyzer(em)
    if not (isinstance(last, IntImm) and last.value == 8 and _equal(ana, off % 8, IntImm(0, "int32"))):
        raise _fail(em, call, f"ptx_wgmma a: the register fragment ({a}) must start at a tile of a buffer "
                    "with 8 elements per tile (its k / 16 tiles one after the other)")  # fmt: skip
    return f"&{em.buffer_name(a.buffer)}[{em.expr(off)}]"


#: The largest leading byte offset a descriptor holds (14 bits of 16-byte units).
_MAX_LBO = (1 << 14) - 1


def _operand_mn(em: KernelEmitter, call: Call, load: BufferLoad, lanes: tuple[Var, Var],
                n: int) -> tuple[PrimExpr, int]:  # fmt: skip
    """The offset of an MN-major B (the same for every lane and warp, at a 1024-byte swizzle
    atom: row 0 of an 8-row group, column 0) and its descriptor's leading byte offset (the
    stride of the buffer's dimension before the rows, in 16-byte units; 1, unused, for N = 64: one
    block)."""
    _check_rows(em, call, "b", load)
    tx, ty = lanes
    ana = _analyzer(em)
    off = em.flat_index(load.buffer, load.indices)
    for v, what in ((tx, "lane"), (ty, "warp")):
        if not _equal(ana, substitute(off, {v: IntImm(0, "int32")}), off):
            raise _fail(em, call, f"ptx_wgmma b: its tile ({load}) depends on the {what}")
    if not _equal(ana, off % (8 * SW128_ROW), IntImm(0, "int32")):
        raise _fail(em, call, f"ptx_wgmma b: the MN-major tile ({load}) must start at a 1024-byte swizzle atom "
                    f"(row 0 of 8, column 0); its offset in the atom is {ana.simplify(off % (8 * SW128_ROW))}")  # fmt: skip
    if n <= SW128_ROW:
        return off, 1  # one 64-column block: the offset is unused (1, as K-major layouts have it)
    if len(load.indices) < 3:
        raise _fail(em, call, f"ptx_wgmma b: an MN-major B of N = {n} > {SW128_ROW} needs its 64-column blocks along "
                    f"a dimension before the rows (a buffer of rank >= 3, each block's rows one 8-row atom "
                    f"after the other); {load.buffer.name} has rank {len(load.indices)}")  # fmt: skip
    idx = list(load.indices)
    idx[-3] = idx[-3] + 1
    stride = ana.simplify(em.flat_index(load.buffer, tuple(idx)) - off)
    lbo = stride.value * 2 // 16 if isinstance(stride, IntImm) else None
    if lbo is None or lbo <= 0 or lbo > _MAX_LBO:
        raise _fail(em, call, f"ptx_wgmma b: the stride of {load.buffer.name}'s 64-column blocks ({stride} "
                    f"elements) must be a constant of at most {_MAX_LBO * 8} (the descriptor's leading byte offset)")  # fmt: skip
    return off, lbo
