"""Tensor-core calls on the CPU executor: their exact sequential meaning.

* ``mma_fill`` and ``mma_store`` act on one lane's fragment row: they run as the loops
  ``loopir.tensor_intrin.calls.per_lane_stmt`` gives (the lane is the fragment's lane index),
  so they need no thread region.
* ``ptx_ldmatrix``, ``ptx_mma`` and ``ptx_shfl_xor`` are warp-collective: they run inside a thread region (a
  ``threadIdx`` loop containing one becomes a region, like one containing a barrier) as a
  rendezvous of the warp's 32 fibers (``loopir.runtime.c_fibers``). Each lane leaves the
  addresses of its operands in its slots; the last lane to arrive computes the whole warp-level
  operation once, reading every lane's operands, per the PTX ISA:

  - ``ldmatrix``: element ``2q + h`` of lane ``l`` comes from the row whose address lane
    ``ldmatrix_source(l, q, h)[0]`` supplied (``loopir.tensor_intrin.layouts``);
  - ``ptx_shfl_xor``: every lane's ``src`` is read, then lane ``l``'s ``dst`` gets lane
    ``l ^ mask``'s value;
  - ``mma.m16n8k16``: the 16x16 A, 16x8 B and 16x8 C tiles are gathered from the lanes'
    fragments by the PTX layouts, and every ``C[i, j]`` becomes
    ``C[i, j] + A[i, k] * B[k, j]`` accumulated for ``k = 0 .. 15`` in order, each step
    computed (and rounded) exactly as the description PrimFunc's body
    ``C + cast(A) * cast(B)`` is by this executor; so the implementation and the description
    of an intrinsic give bit-identical results here (the hardware sums in another order).

The layout tables are generated from ``loopir.tensor_intrin.layouts``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopir.errors import CodegenError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, IntImm, PrimExpr, Var
from loopir.ir.functor import post_order_visit
from loopir.ir.op import WARPGROUP_COLLECTIVES, is_warp_collective, tensor_core_problem
from loopir.ir.stmt import BufferStore, Stmt
from loopir.ir.tma import MBARRIER_OPS, tma_problem
from loopir.runtime.c_fibers import WARP_SLOTS
from loopir.runtime.c_types import expr_ctype, storage_ctype
from loopir.tensor_intrin.calls import per_lane_stmt
from loopir.tensor_intrin.layouts import (
    LDMATRIX_ROW,
    MMA_A,
    WARP_SIZE,
    FragmentLayout,
    MMA_B_16x8,
    MMA_C_16x8,
    ldmatrix_source,
)
from loopir.tensor_intrin.tma import tma_stmt

if TYPE_CHECKING:
    from loopir.runtime.c_codegen import _StmtEmitter

__all__ = ["WARP_TABLES", "emit_collective", "emit_tensor_core", "merge_warp_copies", "open_warp_copies"]


def _table(name: str, values: list[int]) -> str:
    return f"static const int16_t {name}[{len(values)}] = {{{', '.join(map(str, values))}}};"


def _layout_table(name: str, layout: FragmentLayout) -> str:
    """``lane * 8 + local`` of each ``(row, col)`` of ``layout``, row-major."""
    out = []
    for r in range(layout.rows):
        for c in range(layout.cols):
            lane, local = layout.to_lane_local(r, c)
            out.append(lane * 8 + local)
    return _table(name, out)


def _ldmatrix_tables() -> str:
    lines = []
    for trans in (0, 1):
        prov, col = [], []
        for lane in range(WARP_SIZE):
            for e in range(8):
                p, c = ldmatrix_source(lane, e // 2, e % 2, bool(trans))
                prov.append(p)
                col.append(c)
        lines += [_table(f"lir_ldm_provider_{trans}", prov), _table(f"lir_ldm_col_{trans}", col)]
    return "\n".join(lines)


#: The layout tables of the collective calls (C; part of the prelude when a call is used).
WARP_TABLES = "\n".join([
    "/* ---- tensor-core layouts (loopir/tensor_intrin/layouts.py): lane * 8 + local ---- */",
    _layout_table("lir_mma_a", MMA_A),
    _layout_table("lir_mma_b", MMA_B_16x8),
    _layout_table("lir_mma_c", MMA_C_16x8),
    _ldmatrix_tables(),
    "",
])  # fmt: skip


def _ptr(em: _StmtEmitter, load: PrimExpr, span: int, store: bool) -> str:
    """``&buffer[indices]`` of an operand whose ``span`` elements along the last dimension
    are used; with bounds checks, the first and the last of them are checked."""
    assert isinstance(load, BufferLoad)
    info = em.buffer_info(load.buffer)
    first = em.flat_index(info, load.indices, 0, store)
    if em.check_bounds and span > 1:
        last = (*load.indices[:-1], load.indices[-1] + (span - 1))
        em.emit(f"(void)({em.flat_index(info, last, 0, store)});")
    if store:
        em.written.add(load.buffer)
    return f"(void*)&{info.cname}[{first}]"


def _value(dtype: str, ref: str) -> str:
    """A stored element as a value of its expression type."""
    return f"lir_bf16_to_f32({ref})" if dt.element(dtype) == "bfloat16" else ref


def emit_tensor_core(em: _StmtEmitter, call: Call) -> None:
    """Any tensor-core call (module doc)."""
    if is_warp_collective(call):
        emit_collective(em, call)
        return
    problem = tensor_core_problem(call)
    converge = call.op in WARPGROUP_COLLECTIVES and em.in_region and problem is None
    if converge:
        # ``.sync.aligned``: the warp's lanes reach the call together and leave it together (a
        # rendezvous before and after each lane computes its part: the operation's reads of
        # shared memory are the warp's, done when any lane goes on). Without them a lane could
        # still wait on an mbarrier phase that its warp's lane 0 has already released and a
        # producer completed again, or still read a tile that lane 0 has released.
        em.emit("if (lir_warp_arrive(err)) lir_warp_release();  /* the warp converges */")
    if call.op == "ptx_wgmma_wait" and problem is None:
        # the sequential meaning: the MMAs it retires happened at their issue
        em.emit("/* ptx_wgmma_wait: nothing is in flight */")
        return
    try:
        if problem is not None:
            raise ValueError(problem)
        stmt = per_lane_stmt(call)
    except ValueError as exc:
        raise CodegenError(
            f"cpu codegen: {exc} (the executor runs tensor-core calls on warp fragments, "
            "before LowerWarpMemory)"
        ) from None
    em.emit(f"/* {call.op} of one lane */")
    em.stmt(stmt)
    if converge:
        em.emit("if (lir_warp_arrive(err)) lir_warp_release();  /* the warp's operation is done */")


def emit_tma(em: _StmtEmitter, call: Call) -> None:
    """A TMA copy as the loop nest it means, and the mbarrier calls: sequentially nothing (the
    copy has landed when ``tma_load`` returns, ``loopir.tensor_intrin.tma``); in a thread
    region the fibers' barrier objects (``lir_mbar_*`` in ``c_fibers``: a wait suspends its
    fiber until the phase completes, so a consumer that waits on its producer with no block
    barrier between runs after it, as on the GPU). ``setmaxnreg`` is nothing."""
    if (problem := tma_problem(call)) is not None:
        raise CodegenError(f"cpu codegen: {problem}")
    if call.op in MBARRIER_OPS and em.in_region:
        bar, value = call.args
        ptr = _ptr(em, bar, 1, call.op == "ptx_mbarrier_init")
        fn = {"ptx_mbarrier_init": "init", "ptx_mbarrier_wait": "wait"}.get(call.op, "arrive")
        count = "1" if call.op == "ptx_mbarrier_arrive_expect_tx" else f"(int64_t)({em.expr(value)})"
        em.emit(f"lir_mbar_{fn}((uint64_t*){ptr}, {count}, err);")
        return
    if call.op != "ptx_tma_load":
        em.emit(f"/* {call.op}: nothing sequentially */")
        return
    em.emit("/* ptx_tma_load: the box, zeros out of bounds, swizzled */")
    em.stmt(tma_stmt(call))


def emit_collective(em: _StmtEmitter, call: Call) -> None:
    """``ptx_ldmatrix`` / ``ptx_mma`` as a rendezvous of the warp (module doc)."""
    problem = tensor_core_problem(call)
    if problem is not None:
        raise CodegenError(f"cpu codegen: {problem}")
    if not em.in_region:
        raise CodegenError(
            f"cpu codegen: {call.op} is warp-collective and must run in a thread region: under a "
            "threadIdx.x loop (build with thread_regions=True, the default)"
        )
    em.uses_tensor_core = True
    em.emit(f"{{ /* {call.op}: warp-collective */")
    em.indent += 1
    em.emit("void** const lir_ws = lir_warp_slot + lir_tid * LIR_WARP_SLOTS;")
    if call.op == "ptx_ldmatrix":
        _ldmatrix(em, call)
    elif call.op == "ptx_shfl_xor":
        _shfl_xor(em, call)
    else:
        _mma(em, call)
    em.indent -= 1
    em.emit("}")


def _operands(em: _StmtEmitter, loads: list[tuple[PrimExpr, int, bool]]) -> None:
    """Leave the lane's operands (load, elements used, written) in its slots and arrive."""
    assert len(loads) <= WARP_SLOTS
    for k, (load, span, store) in enumerate(loads):
        em.emit(f"lir_ws[{k}] = {_ptr(em, load, span, store)};")
    em.emit("if (lir_warp_arrive(err)) {  /* the last lane: the whole warp's operation */")
    em.indent += 1
    em.emit("void** const lir_wl = lir_warp_slot + (lir_tid / 32 * 32) * LIR_WARP_SLOTS;")


def _close(em: _StmtEmitter) -> None:
    em.emit("lir_warp_release();")
    em.indent -= 1
    em.emit("}")


def _ldmatrix(em: _StmtEmitter, call: Call) -> None:
    trans, num, dst, src = call.args
    assert isinstance(trans, IntImm) and isinstance(num, IntImm)
    n, t = num.value, trans.value
    st = storage_ctype(dst.dtype)
    _operands(em, [(dst, 2 * n, True), (src, LDMATRIX_ROW, False)])
    em.emit("for (int64_t l = 0; l < 32; ++l) {")
    em.emit(f"  for (int64_t e = 0; e < {2 * n}; ++e) {{")
    em.emit(f"    const int64_t p = lir_ldm_provider_{t}[l * 8 + e], c = lir_ldm_col_{t}[l * 8 + e];")
    em.emit(f"    (({st}*)lir_wl[l * LIR_WARP_SLOTS + 0])[e] = "
            f"((const {st}*)lir_wl[p * LIR_WARP_SLOTS + 1])[c];")  # fmt: skip
    em.emit("  }")
    em.emit("}")
    _close(em)


def _shfl_xor(em: _StmtEmitter, call: Call) -> None:
    dst, src, mask = call.args
    assert isinstance(mask, IntImm)
    st = storage_ctype(dst.dtype)
    _operands(em, [(dst, 1, True), (src, 1, False)])
    # every lane's value first: dst may be src (or another lane's src)
    em.emit(f"{st} lir_sh[32];")
    em.emit(f"for (int64_t l = 0; l < 32; ++l) lir_sh[l] = *(const {st}*)lir_wl[l * LIR_WARP_SLOTS + 1];")
    em.emit(f"for (int64_t l = 0; l < 32; ++l) *({st}*)lir_wl[l * LIR_WARP_SLOTS + 0] = lir_sh[l ^ {mask.value}];")
    _close(em)


def _mma(em: _StmtEmitter, call: Call) -> None:
    _shape, a, b, c = call.args
    assert isinstance(c, BufferLoad)
    in_t, out_t = a.dtype, c.dtype
    _operands(em, [(a, 8, False), (b, 4, False), (c, 4, True)])
    # the multiply-add is printed from the description's expression, on variables
    acc, av, bv = Var("acc", out_t), Var("a", in_t), Var("b", in_t)
    names = {v: em.fresh(v.name) for v in (acc, av, bv)}
    em.vars.update(names)
    step = em.expr(acc + av.astype(out_t) * bv.astype(out_t))

    def ref(slot: int, dtype: str, table: str, at: str) -> str:
        return (f"((const {storage_ctype(dtype)}*)lir_wl[({table}[{at}] >> 3) * LIR_WARP_SLOTS + "
                f"{slot}])[{table}[{at}] & 7]")  # fmt: skip

    cst = storage_ctype(out_t)
    em.emit("for (int64_t i = 0; i < 16; ++i) {")
    em.emit("  for (int64_t j = 0; j < 8; ++j) {")
    em.emit("    const int64_t cx = lir_mma_c[i * 8 + j];")
    em.emit(f"    {cst}* const cp = ({cst}*)lir_wl[(cx >> 3) * LIR_WARP_SLOTS + 2] + (cx & 7);")
    em.emit(f"    {expr_ctype(out_t)} {names[acc]} = {_value(out_t, '(*cp)')};")
    em.emit("    for (int64_t k = 0; k < 16; ++k) {")
    em.emit(f"      const {expr_ctype(in_t)} {names[av]} = {_value(in_t, ref(0, in_t, 'lir_mma_a', 'i * 16 + k'))};")
    em.emit(f"      const {expr_ctype(in_t)} {names[bv]} = {_value(in_t, ref(1, in_t, 'lir_mma_b', 'k * 8 + j'))};")
    em.emit(f"      {names[acc]} = {step};")
    em.emit("    }")
    em.emit(f"    *cp = {em.storage_value(c.buffer, names[acc])};")
    em.emit("  }")
    em.emit("}")
    for v in names:
        em.vars.pop(v, None)
    _close(em)


# --- warp buffers allocated outside a thread region -------------------------------------------
#: A warp's copy of a warp buffer open outside a region: (outer C name, copies' C name, element
#: type, elements of one instance).
WarpCopy = tuple[str, str, str, str]


def open_warp_copies(em: _StmtEmitter, region: Stmt, nwarps: str) -> list[WarpCopy]:
    """Give each warp of ``region`` its own instance of the ``warp`` buffers that are open
    around it (allocated outside, or parameters) and that it accesses.

    A ``warp`` buffer is one per warp, as its fragments are a warp's registers on a GPU. Outside
    a region the IR runs sequentially and one instance is that meaning; in a region the warps
    interleave at their collective calls, so a shared instance let one warp's ``ldmatrix``
    overwrite the fragment another warp's ``mma`` was still to read. Each warp's copy starts as
    the outer instance (what the code before wrote); :func:`merge_warp_copies` writes back
    what the warps changed. The region reads its warp's copy (``em.warp_spans``).
    """
    used: set[Buffer] = set()

    def visit(n: object) -> None:
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer.scope == "warp":
            used.add(n.buffer)

    post_order_visit(region, visit)
    copies = []
    for b, info in em.buffers.items():
        if b not in used or b in em.hoisted:
            continue
        st, span, pw = storage_ctype(b.dtype), em.product(b.shape), em.fresh(b.name + "_per_warp")
        em.emit(f"{st}* {pw} = ({st}*)lir_alloc(err, ({span}) * ({nwarps}) * (int64_t)sizeof({st}), "
                f"{info.id});  /* one {b.name} per warp, from the one outside the region */")  # fmt: skip
        em.emit(f"if ({pw}) {{")
        em.indent += 1
        em.emit(f"for (int64_t w = 0; w < ({nwarps}); ++w) "
                f"memcpy({pw} + w * ({span}), {info.cname}, ({span}) * sizeof({st}));")  # fmt: skip
        em.warp_spans[info.cname] = span
        em.warp_copies[info.cname] = pw
        copies.append((info.cname, pw, st, span))
    return copies


def merge_warp_copies(em: _StmtEmitter, copies: list[WarpCopy], nwarps: str) -> None:
    """After the region: each element of the outer instance takes the value of the last warp
    (in warp order, the sequential order of the warps) whose copy changed it (bitwise)."""
    for outer, pw, st, span in reversed(copies):
        em.emit(f"for (int64_t e = 0; e < ({span}); ++e) {{")
        em.emit(f"  {st} v = {outer}[e];")
        em.emit(f"  for (int64_t w = 0; w < ({nwarps}); ++w) "
                f"if (memcmp(&{pw}[w * ({span}) + e], &{outer}[e], sizeof({st}))) v = {pw}[w * ({span}) + e];")  # fmt: skip
        em.emit(f"  {outer}[e] = v;")
        em.emit("}")
        em.emit(f"free({pw});")
        em.indent -= 1
        em.emit("}")
        em.warp_spans.pop(outer, None)
        em.warp_copies.pop(outer, None)

