"""Vectorized loops that compute: vector loads, the value per lane, one vector store.

``for v in T.vectorized(4): Y[b + v] = f(X[b + v], B[c + v], s)`` becomes::

    const float4 X_v = *(const float4*)(X + b);     // one load per contiguous input
    const float* X_l = reinterpret_cast<const float*>(&X_v);
    ...
    float4 Y_v; float* Y_l = reinterpret_cast<float*>(&Y_v);
    Y_l[0] = f(X_l[0], B_l[0], s); ... Y_l[3] = ...;
    *(float4*)(Y + b) = Y_v;

Every load from memory that depends on the lane must be contiguous in it and aligned (the same
proof as for copies); loads that do not, and loads of register arrays (a fragment converted as
it is stored), are evaluated once per lane as written. Loads in a branch of a ``Select`` (or under ``&&`` / ``||``) are evaluated lazily by
the scalar code, so a loop with one stays scalar. The lanes' values are computed by the ordinary scalar printer, so a vectorized
loop means exactly what the scalar one means. 16-bit floats use the same carriers as copies
(``uint2`` / ``uint4`` for 4 / 8 halves).
"""

from __future__ import annotations

from typing import Any

from loopir.codegen_cuda.ctypes import ctype, vector_carrier
from loopir.ir import dtype as dt
from loopir.ir.equality import structural_equal
from loopir.ir.expr import And, BufferLoad, IntImm, Or, PrimExpr, Select, Var
from loopir.ir.functor import Mutator, collect_vars, post_order_visit, substitute
from loopir.ir.stmt import BufferStore

__all__ = ["vector_compute"]


def _lane_loads(value: PrimExpr, v: Var) -> list[BufferLoad]:
    """The distinct loads of ``value`` from memory whose indices use ``v``. Loads of register
    arrays are left to the lanes' scalar values (each lane's element by a constant index once
    unrolled): pointer-casting a register array would force it into local memory."""
    found: list[BufferLoad] = []

    def visit(n: object) -> None:
        if not isinstance(n, BufferLoad) or not any(v in collect_vars(i) for i in n.indices):
            return
        if n.buffer.scope == "local":
            return
        if not any(
            f.buffer is n.buffer and all(structural_equal(a, b) for a, b in zip(f.indices, n.indices))
            for f in found
        ):
            found.append(n)

    post_order_visit(value, visit)
    return found


def _reads_other_elements_of(store: BufferStore) -> bool:
    """Whether the value reads the stored buffer anywhere but at the stored element: a later
    lane would see an earlier lane's store sequentially, but not after vector loads."""
    other = False

    def visit(n: object) -> None:
        nonlocal other
        if isinstance(n, BufferLoad) and n.buffer is store.buffer and not all(
            structural_equal(a, b) for a, b in zip(n.indices, store.indices)
        ):
            other = True

    post_order_visit(store.value, visit)
    return other


def _guarded_lane_load(value: PrimExpr, v: Var) -> bool:
    """Whether a lane-dependent load sits in a branch of a ``Select`` or under ``&&`` / ``||``:
    those are evaluated lazily (a padded read past the end is never made), and a hoisted
    vector load would make it."""
    found = False

    def visit(n: object) -> None:
        nonlocal found
        if isinstance(n, Select):
            found |= bool(_lane_loads(n.true_value, v)) or bool(_lane_loads(n.false_value, v))
        elif isinstance(n, (And, Or)):
            found |= bool(_lane_loads(n.b, v))

    post_order_visit(value, visit)
    return found


class _LaneOf(Mutator):
    """Lane ``k`` of the value: each vector-loaded load becomes its lane variable."""

    def __init__(self, loads: list[BufferLoad], lane_vars: list[list[Var]], k: int) -> None:
        self.loads, self.lane_vars, self.k = loads, lane_vars, k

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        for load, names in zip(self.loads, self.lane_vars):
            if load.buffer is node.buffer and all(
                structural_equal(a, b) for a, b in zip(load.indices, node.indices)
            ):
                return names[self.k]
        same: PrimExpr = self.generic_visit(node)
        return same


def vector_compute(em: Any, store: BufferStore, v: Var, lanes: int) -> str | None:
    """The text of ``store`` as a ``lanes``-wide computed vector store, or None when it cannot
    be proven contiguous and aligned (``em`` is the KernelEmitter)."""
    dst = store.buffer
    if dst.scope == "local" or any(dt.lanes(i.dtype) != 1 for i in store.indices):
        return None
    carrier = vector_carrier(dst.dtype, lanes)
    loads = _lane_loads(store.value, v)
    if carrier is None:
        return None
    doff = em._vector_access_ok(dst, store.indices, v, lanes)
    if doff is None or _reads_other_elements_of(store) or _guarded_lane_load(store.value, v):
        return None
    lines: list[str] = []
    lane_vars: list[list[Var]] = []
    offsets = []
    for load in loads:
        c = vector_carrier(load.buffer.dtype, lanes)
        off = None if c is None else em._vector_access_ok(load.buffer, load.indices, v, lanes)
        if off is None:
            return None
        offsets.append((load, c, off))
    for load, c, off in offsets:
        name = em.buffer_name(load.buffer)
        tmp = em.names.get(object(), f"{name}_v")
        elem = ctype(load.buffer.dtype)
        sconst = "const " if load.buffer.scope == "global" and load.buffer not in em.spec.written else ""
        lines.append(f"const {c} {tmp} = *({sconst}{c}*)({name} + {em.expr(off)});")
        lines.append(f"const {elem}* {tmp}_l = reinterpret_cast<const {elem}*>(&{tmp});")
        names = [Var(f"{tmp}_{k}", load.buffer.dtype) for k in range(lanes)]
        lines += [f"const {elem} {em.var_name(n)} = {tmp}_l[{k}];" for k, n in enumerate(names)]
        lane_vars.append(names)
        _note(em, load.buffer, lanes)
    dname = em.buffer_name(dst)
    res = em.names.get(object(), f"{dname}_v")
    elem = ctype(dst.dtype)
    lines.append(f"{carrier} {res};")
    lines.append(f"{elem}* {res}_l = reinterpret_cast<{elem}*>(&{res});")
    for k in range(lanes):
        value = _LaneOf(loads, lane_vars, k).visit(store.value)
        value = substitute(value, {v: IntImm(k, v.dtype)})
        lines.append(f"{res}_l[{k}] = {em.expr(value)};")
    lines.append(f"*({carrier}*)({dname} + {em.expr(doff)}) = {res};")
    _note(em, dst, lanes)
    return "{\n  " + "\n  ".join(lines) + "\n}"


def _note(em: Any, buf: Any, lanes: int) -> None:
    em.note_dtype(buf.dtype)
    if buf.scope == "global":
        em.alignment[buf] = max(em.alignment.get(buf, 1), lanes * dt.bits(buf.dtype) // 8)
