"""Vector accesses with a register array on one side (the prefetch registers of
[`loopir.passes.prefetch.InjectSharedPrefetch`][loopir.passes.prefetch.InjectSharedPrefetch]).

A register array must never be pointer-cast (that moves it to local memory), so the memory side
of such an access is one vector load/store and the register side its scalar components. Loads
from read-only global memory into registers are emitted as one *predicated* PTX load: a guarded
load written as an ``if`` compiles to a branch around a small block, and ptxas places such
blocks after the independent FMAs that follow them, which would defeat the prefetch. With the
guards folded into a predicate the load stays in the compute's basic block and ptxas issues it
ahead of the FMAs (as CUTLASS's ``global_load`` does).
"""

from __future__ import annotations

from collections.abc import Callable

from loopir.codegen_cuda.ctypes import ctype
from loopir.codegen_cuda.indexing import add, fold_constants, linear_coeff
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import And, IntImm, PrimExpr, Var
from loopir.ir.functor import substitute

__all__ = ["REG_CARRIERS", "predicated_register_load", "register_offset"]

REG_CARRIERS = frozenset({"float2", "float4", "int2", "int4"})
"""Vector types whose components (``.x .y .z .w``) move to and from register arrays with
``make_<type>(...)``; other element types keep scalar loops."""

_ELEMENT = {"float2": "float32", "float4": "float32", "int2": "int32", "int4": "int32"}


def register_offset(
    flat_index: Callable[[Buffer, tuple[PrimExpr, ...]], PrimExpr],
    buffer: Buffer,
    indices: tuple[PrimExpr, ...],
    v: Var,
) -> PrimExpr | None:
    """The flat offset at ``v = 0`` of a register-array access contiguous in lane ``v``, or None.

    No alignment is needed: the registers are addressed one component at a time.
    """
    if buffer.strides is not None:
        return None
    *outer, last = indices
    if any(linear_coeff(i, v) != 0 for i in outer) or linear_coeff(last, v) != 1:
        return None
    return fold_constants(substitute(flat_index(buffer, indices), {v: IntImm(0, v.dtype)}))


def predicated_register_load(
    expr: Callable[[PrimExpr], str],
    dname: str,
    doff: PrimExpr,
    carrier: str,
    lanes: int,
    sname: str,
    soff: PrimExpr,
    guards: list[PrimExpr],
    sel: PrimExpr | None,
    splat: str | None,
) -> str:
    """C++ for ``if (guards) regs[doff:doff+lanes] = sel ? src[soff:...] : splat``, branch-free.

    ``src`` must be a global buffer the kernel never writes (the load is ``ld.global.nc``).
    The registers not taken keep their values: they are the asm's in/out operands, preset to
    the old registers, or to the Select's fill when only the Select's condition fails.

    Parameters
    ----------
    expr
        Prints an expression in the kernel's C++.
    dname, doff
        Register array name and the flat offset of lane 0.
    carrier, lanes
        Vector type (one of [`REG_CARRIERS`][loopir.codegen_cuda.registers.REG_CARRIERS]) and its
        lane count.
    sname, soff
        Global buffer name and the flat offset of lane 0 (aligned to the vector size).
    guards
        Lane-invariant conditions of the enclosing ``if``\\ s, outermost first.
    sel, splat
        The Select's lane-invariant condition and the C++ vector of its fill (or None).
    """
    comps = "xyzw"[:lanes]
    regs = [f"{dname}[{expr(fold_constants(add(doff, IntImm(c, 'int32'))))}]" for c in range(lanes)]
    tmp = f"{dname}_v"
    lines = [f"{carrier} {tmp} = make_{carrier}({', '.join(regs)});"]
    guard: PrimExpr | None = None
    for c in guards:
        guard = c if guard is None else And(guard, c)
    if sel is not None:
        fill = splat if guard is None else f"({expr(guard)}) ? {splat} : {tmp}"
        lines.append(f"{tmp} = {fill};")
        guard = sel if guard is None else And(guard, sel)
    # C's && keeps the guards' order: the select's condition is evaluated only under them
    pred = "1" if guard is None else expr(guard)
    is_float = carrier.startswith("float")
    outs = ", ".join(f"%{c}" for c in range(lanes))
    asm = (
        f'"{{ .reg .pred p; setp.ne.b32 p, %{lanes}, 0; '
        f'@p ld.global.nc.v{lanes}.{"f32" if is_float else "b32"} {{{outs}}}, [%{lanes + 1}]; }}"'
    )
    operands = ", ".join(f'"+{"f" if is_float else "r"}"({tmp}.{comps[c]})' for c in range(lanes))
    ptr = f"(const {ctype(dt.element(_ELEMENT[carrier]))}*)({sname} + {expr(soff)})"
    lines.append(f'asm volatile({asm} : {operands} : "r"((int)({pred})), "l"({ptr}));')
    lines += [f"{regs[c]} = {tmp}.{comps[c]};" for c in range(lanes)]
    return "{\n  " + "\n  ".join(lines) + "\n}"
