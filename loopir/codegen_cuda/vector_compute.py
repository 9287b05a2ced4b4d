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
it is stored), are evaluated once per lane as written. Loads in a branch of a ``Select`` (or
under ``&&`` / ``||``) are evaluated lazily by the scalar code (a padded read past the end is
never made): when the condition is the same for every lane (no lane variable, no load: the
guard of a whole vector, such as a last chunk's ``col // 8 < vocab // 8``) the vector load is
made under it (``float4 X_v = {}; if (cond) X_v = *(const float4*)(X + b);``), else the loop
stays scalar. The lanes' values are computed by the ordinary scalar printer, so a vectorized
loop means exactly what the scalar one means. 16-bit floats use the same carriers as copies
(``uint2`` / ``uint4`` for 4 / 8 halves).
"""

from __future__ import annotations

from typing import Any

import attrs

from loopir.arith import can_prove, simplify
from loopir.codegen_cuda.base_pointers import global_ptr
from loopir.codegen_cuda.ctypes import ctype, vector_carrier
from loopir.ir import dtype as dt
from loopir.ir.equality import structural_equal
from loopir.ir.expr import LE, LT, And, BufferLoad, IntImm, Not, Or, PrimExpr, Select, Var
from loopir.ir.functor import Mutator, Visitor, collect_vars, post_order_visit, substitute
from loopir.ir.stmt import BufferStore, For, ForKind, IfThenElse

__all__ = ["VECTOR_SHARED_KEY", "emit_unswitched", "emit_vector_accumulate", "vector_compute"]

VECTOR_SHARED_KEY = "cuda.vector_shared_loads"
"""A loop annotation (``sch.annotate(loop, VECTOR_SHARED_KEY, True)``): an unrolled register
accumulation (``emit_vector_accumulate``) loads its shared-memory operands as vectors too, as it
does global ones. Opt-in: the shared tiles of GEMMs keep the scalar loads their schedules were
tuned with; a lane that reads a 16-byte row slice of a shared tile each step (decode attention's
K / V tiles staged by ``cp.async``) wants one 16-byte load, not eight 2-byte ones."""


def _same_load(a: BufferLoad, b: BufferLoad) -> bool:
    """Whether two loads read the same element (one buffer, structurally equal indices)."""
    return a.buffer is b.buffer and all(structural_equal(x, y) for x, y in zip(a.indices, b.indices))


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
        if not any(_same_load(f, n) for f in found):
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


def _uniform(cond: PrimExpr, v: Var) -> bool:
    """Whether ``cond`` has one value for every lane of a statement: no lane variable and no
    load (a register the lanes update, say), only indices and sizes."""
    loads = False

    def visit(n: object) -> None:
        nonlocal loads
        loads = loads or isinstance(n, BufferLoad)

    post_order_visit(cond, visit)
    return not loads and v not in collect_vars(cond)


class _Guards(Visitor):
    """The conditions under which each load of ``loads`` is evaluated (see ``_load_guards``)."""

    def __init__(self, loads: list[BufferLoad], v: Var) -> None:
        self.loads, self.v = loads, v
        self.under: PrimExpr | None = None
        self.guards: dict[int, PrimExpr | None] = {}
        self.ok = True

    def visit_BufferLoad(self, n: BufferLoad) -> None:
        for k, f in enumerate(self.loads):
            if _same_load(f, n):
                if self.under is None:
                    self.guards[k] = None  # evaluated eagerly somewhere: always loaded
                elif k not in self.guards:
                    self.guards[k] = self.under
                elif (g := self.guards[k]) is not None:
                    self.guards[k] = Or(g, self.under)  # read in two lazy places
        self.generic_visit(n)

    def _lazy(self, branch: PrimExpr, cond: PrimExpr) -> None:
        if not _lane_loads(branch, self.v):
            return
        if not _uniform(cond, self.v):
            self.ok = False
            return
        outer = self.under
        self.under = cond if outer is None else And(outer, cond)
        self.visit(branch)
        self.under = outer

    def visit_Select(self, n: Select) -> None:
        self.visit(n.condition)
        self._lazy(n.true_value, n.condition)
        self._lazy(n.false_value, Not(n.condition))

    def visit_And(self, n: And) -> None:
        self.visit(n.a)
        self._lazy(n.b, n.a)

    def visit_Or(self, n: Or) -> None:
        self.visit(n.a)
        self._lazy(n.b, Not(n.a))


def _hoistable_guard(value: PrimExpr, v: Var) -> PrimExpr | None:
    """The condition of a ``Select`` in ``value`` that is the same for every lane
    (``_uniform``) and chooses between branches of which one reads memory at the lane, or None."""
    found: list[PrimExpr] = []

    def visit(n: object) -> None:
        if (isinstance(n, Select) and not found and _uniform(n.condition, v)
                and (_lane_loads(n.true_value, v) or _lane_loads(n.false_value, v))):  # fmt: skip
            found.append(n.condition)

    post_order_visit(value, visit)
    return found[0] if found else None


class _Specialize(Mutator):
    """An expression with every ``Select`` on ``cond`` replaced by the branch ``taken`` picks."""

    def __init__(self, cond: PrimExpr, taken: bool) -> None:
        self.cond, self.taken = cond, taken

    def visit_Select(self, node: Select) -> PrimExpr:
        if structural_equal(node.condition, self.cond):
            out: PrimExpr = self.visit(node.true_value if self.taken else node.false_value)
            return out
        same: PrimExpr = self.generic_visit(node)
        return same


def _load_guards(value: PrimExpr, v: Var) -> dict[int, PrimExpr | None] | None:
    """Under which condition each lane-dependent load of ``value`` is evaluated (keyed by its
    position in ``_lane_loads``; None: always). A load in a branch of a ``Select`` or under
    ``&&`` / ``||`` is evaluated lazily (a padded read past the end is never made): its vector
    load is made under the same condition, which must then be the same for every lane
    (``_uniform``: the guard of a tile of 8 columns, say); None when one is not."""
    g = _Guards(_lane_loads(value, v), v)
    g.visit(value)
    return g.guards if g.ok else None


class _LaneOf(Mutator):
    """Lane ``k`` of the value: each vector-loaded load becomes its lane variable."""

    def __init__(self, loads: list[BufferLoad], lane_vars: list[list[Var]], k: int) -> None:
        self.loads, self.lane_vars, self.k = loads, lane_vars, k

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        for load, names in zip(self.loads, self.lane_vars):
            if _same_load(load, node):
                return names[self.k]
        same: PrimExpr = self.generic_visit(node)
        return same


def _vector_loads(em: Any, value: PrimExpr, v: Var, lanes: int) -> tuple[list[str], list[BufferLoad], list[list[Var]]] | None:
    """The declarations of one ``lanes``-wide vector load per distinct lane-dependent load of
    ``value`` (and its lanes as named scalars), or None when one is not provably contiguous and
    aligned or sits in a lazily evaluated branch."""
    guards = _load_guards(value, v)
    if guards is None:
        return None
    loads = _lane_loads(value, v)
    offsets = []
    for load in loads:
        c = vector_carrier(load.buffer.dtype, lanes)
        off = None if c is None else em._vector_access_ok(load.buffer, load.indices, v, lanes)
        if c is None or off is None:
            return None
        offsets.append((load, c, off))
    lines: list[str] = []
    lane_vars: list[list[Var]] = []
    for idx, (load, c, off) in enumerate(offsets):
        name = em.buffer_name(load.buffer)
        tmp = em.names.get(object(), f"{name}_v")
        name, off = global_ptr(em, load.buffer, off)
        elem = ctype(load.buffer.dtype)
        sconst = "const " if load.buffer.scope == "global" and load.buffer not in em.spec.written else ""
        guard = guards.get(idx)
        if guard is None:
            lines.append(f"const {c} {tmp} = *({sconst}{c}*)({name} + {em.expr(off)});")
        else:  # loaded where some lane reads it; zeros (never read) elsewhere
            lines.append(f"{c} {tmp} = {{}};")
            lines.append(f"if ({em.expr(guard)}) {tmp} = *({sconst}{c}*)({name} + {em.expr(off)});")
        names = [Var(f"{tmp}_{k}", load.buffer.dtype) for k in range(lanes)]
        parts = _lanes_of(tmp, c, dt.element(load.buffer.dtype), lanes)
        if parts is None:  # through a pointer to the vector (nvcc keeps it in registers mostly)
            lines.append(f"const {elem}* {tmp}_l = reinterpret_cast<const {elem}*>(&{tmp});")
            parts = [f"{tmp}_l[{k}]" for k in range(lanes)]
        lines += [f"const {elem} {em.var_name(n)} = {p};" for n, p in zip(names, parts)]
        lane_vars.append(names)
        _note(em, load.buffer, lanes)
    return lines, loads, lane_vars


_WORDS = {"uint4": 4, "uint2": 2, "unsigned int": 1, "float4": 4, "float2": 2, "int4": 4, "int2": 2}
_FROM_BITS = {"float16": "__ushort_as_half", "bfloat16": "__ushort_as_bfloat16"}


def _lanes_of(tmp: str, carrier: str, elem: str, lanes: int) -> list[str] | None:
    """The lanes of vector ``tmp`` as expressions on its 32-bit words (no address taken, so
    the vector stays in registers), or None for element types without such a form."""
    words = _WORDS.get(carrier)
    if words is None:
        return None
    names = [tmp] if words == 1 else [f"{tmp}.{c}" for c in "xyzw"[:words]]
    if elem in _FROM_BITS and lanes == 2 * words and carrier.startswith(("uint", "unsigned")):
        conv = _FROM_BITS[elem]
        return [f"{conv}((unsigned short)({names[k // 2]}{' >> 16' if k % 2 else ' & 0xffffu'}))"
                for k in range(lanes)]  # fmt: skip
    if lanes == words and not carrier.startswith(("uint", "unsigned")):
        return names
    return None


def _lane_value(value: PrimExpr, loads: list[BufferLoad], lane_vars: list[list[Var]], v: Var, k: int) -> PrimExpr:
    """Lane ``k`` of ``value``: its vector-loaded loads replaced by their lane, ``v`` by ``k``."""
    out: PrimExpr = substitute(_LaneOf(loads, lane_vars, k).visit(value), {v: IntImm(k, v.dtype)})
    return out


def vector_compute(em: Any, store: BufferStore, v: Var, lanes: int) -> str | None:
    """The text of ``store`` as a ``lanes``-wide computed vector store, or None when it cannot
    be proven contiguous and aligned (``em`` is the KernelEmitter)."""
    dst = store.buffer
    if dst.scope == "local" or any(dt.lanes(i.dtype) != 1 for i in store.indices):
        return None
    carrier = vector_carrier(dst.dtype, lanes)
    if carrier is None:
        return None
    doff = em._vector_access_ok(dst, store.indices, v, lanes)
    if doff is None or _reads_other_elements_of(store):
        return None
    found = _vector_loads(em, store.value, v, lanes)
    if found is None:
        return None
    lines, loads, lane_vars = found
    dname = em.buffer_name(dst)
    res = em.names.get(object(), f"{dname}_v")
    dname, doff = global_ptr(em, dst, doff)
    elem = ctype(dst.dtype)
    lines.append(f"{carrier} {res};")
    lines.append(f"{elem}* {res}_l = reinterpret_cast<{elem}*>(&{res});")
    for k in range(lanes):
        lines.append(f"{res}_l[{k}] = {em.expr(_lane_value(store.value, loads, lane_vars, v, k))};")
    lines.append(f"*({carrier}*)({dname} + {em.expr(doff)}) = {res};")
    _note(em, dst, lanes)
    return "{\n  " + "\n  ".join(lines) + "\n}"


def emit_vector_accumulate(em: Any, loop: For) -> bool:
    """Emit an unrolled or vectorized loop that stores into registers, fed by vector loads;
    False (nothing emitted) when ``loop`` is not one.

    ``for v in T.unroll(8): acc[0] = acc[0] + f(X[b + v])``, ``acc`` a register (``local``)
    array, becomes one 16-byte load of ``X[b:b + 8]`` followed by the eight updates in lane
    order, so that the loop means exactly what it meant sequentially (each lane's update reads
    the previous one's result). The same holds for stores at lane-dependent registers, such as
    ``R[v] = X[b + v]`` (a row kept in registers: one vector load, then its lanes). Every load
    from memory that depends on ``v`` must be contiguous in it and aligned (as for vector
    stores), and none may sit in a lazily evaluated branch; the registers may be of another
    type (fp32 sums of fp16 inputs). Registers are only ever indexed by constants once the lanes
    are unrolled, so they stay in registers. Only loads from global memory are taken: loops over
    shared-memory tiles (GEMMs) keep their scalar loads, unless the loop carries
    ``VECTOR_SHARED_KEY``.
    """
    if loop.kind not in (ForKind.UNROLLED, ForKind.VECTORIZED) or not isinstance(loop.extent, IntImm):
        return False
    if not (isinstance(loop.min, IntImm) and loop.min.value == 0 and loop.extent.value in (2, 4, 8)):
        return False
    store, v, lanes = loop.body, loop.loop_var, loop.extent.value
    if not isinstance(store, BufferStore) or store.buffer.scope != "local":
        return False
    if any(dt.lanes(i.dtype) != 1 for i in store.indices):
        return False
    scopes = ("global", "shared") if loop.annotations.get(VECTOR_SHARED_KEY) else ("global",)
    if any(ld.buffer.scope not in scopes for ld in _lane_loads(store.value, v)):
        return False  # shared-memory operands (GEMM tiles) keep the loads their schedules were tuned with
    cond = _hoistable_guard(store.value, v)
    if cond is not None:
        # ``acc = max(acc, cond ? X[b + v] : pad)`` with ``cond`` the same for every lane (a last
        # chunk's ``col // 8 < vocab // 8``): one branch per vector, not a select per element;
        # each side is emitted as a loop of its own (the taken side's loads as one vector)
        sides = [attrs.evolve(loop, body=attrs.evolve(store, value=_Specialize(cond, t).visit(store.value)))
                 for t in (True, False)]  # fmt: skip
        em.stmt(IfThenElse(cond, sides[0], sides[1]))
        return True
    with em.bound(v, loop.min, loop.extent):
        found = _vector_loads(em, store.value, v, lanes)
    if found is None or not found[1]:
        return False
    lines, loads, lane_vars = found
    with em.block(""):
        for ln in lines:
            em.line(ln)
        for k in range(lanes):
            at = tuple(substitute(i, {v: IntImm(k, v.dtype)}) for i in store.indices)
            em.stmt(BufferStore(store.buffer, _lane_value(store.value, loads, lane_vars, v, k), at))
    return True


#: The annotation of the loop ``emit_unswitched`` keeps in its else branch (not unswitched again).
_UNSWITCHED = "cuda.unswitched"


def emit_unswitched(em: Any, loop: For) -> bool:
    """Emit a serial loop around a guarded vector accumulation as two loops, the guard dropped
    where it holds for every iteration; False (nothing emitted) when ``loop`` is not one.

    ``for o in range(n): for v in T.unroll(8): acc[0] = max(acc[0], g(o) ? X[b(o) + v] : pad)``,
    ``g`` the same for the 8 lanes (``_hoistable_guard``) and ``g(o)`` of the form ``e(o) < c``
    with ``e`` provably non-decreasing in ``o`` (a ragged last chunk's ``col // 8 < vocab // 8``),
    becomes ``if (g(n - 1)) { the loop without the guard } else { the loop }``: every block but
    the last chunk's runs a loop nvcc unrolls as it does an unguarded one (all of a thread's
    vector loads issued first); a guard in the loop stops that (cross-entropy over LLaMA 3's
    128256 logits, session 16). The loops mean what ``loop`` means: ``g(n - 1)`` implies
    ``g(o)`` for every ``o``.
    """
    if loop.kind is not ForKind.SERIAL or loop.annotations.get(_UNSWITCHED) or not isinstance(loop.body, For):
        return False
    inner, o = loop.body, loop.loop_var
    if not (isinstance(loop.min, IntImm) and isinstance(loop.extent, IntImm) and loop.extent.value > 1):
        return False
    store = inner.body
    if inner.kind not in (ForKind.UNROLLED, ForKind.VECTORIZED) or not isinstance(store, BufferStore):
        return False
    cond = _hoistable_guard(store.value, inner.loop_var)
    if not isinstance(cond, (LT, LE)) or o not in collect_vars(cond):
        return False
    last = IntImm(loop.min.value + loop.extent.value - 1, o.dtype)
    step = substitute(cond.a - cond.b, {o: last}) - (cond.a - cond.b)
    if not can_prove(step >= 0, {o: (loop.min, loop.extent)}):
        return False
    unguarded = attrs.evolve(inner, body=attrs.evolve(store, value=_Specialize(cond, True).visit(store.value)))
    kept = attrs.evolve(loop, annotations={**loop.annotations, _UNSWITCHED: True})
    em.stmt(IfThenElse(simplify(substitute(cond, {o: last})), attrs.evolve(loop, body=unguarded), kept))
    return True


def _note(em: Any, buf: Any, lanes: int) -> None:
    em.note_dtype(buf.dtype)
    if buf.scope == "global":
        em.alignment[buf] = max(em.alignment.get(buf, 1), lanes * dt.bits(buf.dtype) // 8)
