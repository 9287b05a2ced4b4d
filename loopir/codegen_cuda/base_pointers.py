"""Global addresses in short unrolled loops as a base pointer plus a constant
(``cuda.hoist_global_base``, on by default).

A vector or ``cp.async`` access ``K + idx`` inside a loop nest nvcc unrolls makes ptxas compute a
64-bit address per unrolled access: the int32 index is sign-extended each time (on sm_90 about
six integer instructions a copy). When ``idx`` splits into a part that reads only variables
bound before the nest and a part that reads only the nest's loop variables
(``loopir.codegen_cuda.indexing.split_invariant``: sums and products by constants, exact in
wrapping int32 too), the emitter declares ``const T* K_base = K + <base>;`` before the nest and
prints ``K_base + <offset>``: a constant once unrolled, which ptxas folds into the instruction's
immediate. Before and after (the attention kernel's K copies, abridged):

```c
for (int jj = 0; jj < 8; ++jj) {
  loopir_cp_async<16>(..., &K[(j0 * 64 + jj * 8 + ty * 2) * 128 + tx * 8], 16);
}
// with cuda.hoist_global_base
const half* K_base = K + ((j0 * 64 + ty * 2) * 128 + tx * 8);
for (int jj = 0; jj < 8; ++jj) {
  loopir_cp_async<16>(..., &K_base[jj * 1024], 16);
}
```

The nest is the outermost serial or unrolled loop with a constant start and extent whose body
runs at most ``AUTO_UNROLL_MAX_TRIPS`` statements per thread (thread loops inside count once;
their ``threadIdx.*`` is declared before the nest when a base reads it). Anything else (a clamp,
a load, a division by a variable, a term mixing the nest's variables with outer ones) keeps its
full index.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loopir.codegen_cuda import analysis as an
from loopir.codegen_cuda.ctypes import ctype
from loopir.codegen_cuda.indexing import add, split_invariant
from loopir.ir.buffer import Buffer
from loopir.ir.expr import IntImm, PrimExpr, Var
from loopir.ir.functor import collect_vars, substitute
from loopir.ir.stmt import Allocate, For, ForKind, IfThenElse, SeqStmt, Stmt

if TYPE_CHECKING:
    from loopir.codegen_cuda.emitter import KernelEmitter

__all__ = ["AUTO_UNROLL_MAX_TRIPS", "BaseFrame", "base_frame", "frame_thread", "global_ptr", "hoist_frame_loop",
           "trip_count"]  # fmt: skip

#: loops of at most this many innermost iterations are unrolled (``#pragma unroll``, or by nvcc)
AUTO_UNROLL_MAX_TRIPS = 512


def trip_count(s: Stmt, per_thread: bool = False) -> float:
    """Innermost statements executed by ``s`` (inf when an extent is not constant); with
    ``per_thread``, those one thread executes (``threadIdx`` / ``blockIdx`` loops counted once)."""
    if isinstance(s, For):
        inner = trip_count(s.body, per_thread)
        if per_thread and s.kind is ForKind.THREAD_BINDING and (s.thread_tag or "").startswith(
            ("threadIdx.", "blockIdx.")
        ):
            return inner
        return float("inf") if not isinstance(s.extent, IntImm) else s.extent.value * inner
    if isinstance(s, SeqStmt):
        return sum(trip_count(x, per_thread) for x in s.seq)
    if isinstance(s, IfThenElse):
        return max(trip_count(s.then_case, per_thread),
                   0 if s.else_case is None else trip_count(s.else_case, per_thread))  # fmt: skip
    if isinstance(s, Allocate):
        return trip_count(s.body, per_thread)
    return 1


@dataclass
class BaseFrame:
    """The outermost short constant-extent loop around the statement being printed: global
    addresses in it are a pointer computed before it plus an offset that reads only its (and
    its inner loops') variables, a constant once nvcc unrolls them."""

    at: int  # where the loop's lines start: the pointers are declared there
    indent: int
    outer: frozenset[Var]  # variables bound before the loop
    inner: set[Var] = field(default_factory=set)  # constant-start loop variables inside
    threads: dict[Var, PrimExpr] = field(default_factory=dict)  # thread loops inside: their value
    tag_vars: dict[str, Var] = field(default_factory=dict)  # threadIdx.* declared before the loop
    declared: set[Var] = field(default_factory=set)
    decls: list[str] = field(default_factory=list)
    bases: dict[tuple[Buffer, str], str] = field(default_factory=dict)


def hoist_frame_loop(s: For) -> bool:
    """Whether ``s`` is a loop nvcc unrolls: constant start and extent, serial or unrolled,
    at most ``AUTO_UNROLL_MAX_TRIPS`` innermost statements per thread."""
    return (
        s.kind in (ForKind.SERIAL, ForKind.UNROLLED)
        and isinstance(s.min, IntImm)
        and isinstance(s.extent, IntImm)
        and trip_count(s, per_thread=True) <= AUTO_UNROLL_MAX_TRIPS
    )


@contextmanager
def base_frame(em: KernelEmitter) -> Iterator[BaseFrame]:
    """Print a loop (the body of the ``with``) as a frame: its base pointers are declared
    before its first line when it is done."""
    frame = BaseFrame(len(em.lines), em.indent, frozenset(em.scope) | em.size_vars | frozenset(em.spec.scalars))
    em.frame = frame
    try:
        yield frame
    finally:
        em.frame = None
        for tv in frame.tag_vars.values():
            del em.env[tv]
    pad = "  " * frame.indent
    em.lines[frame.at:frame.at] = [pad + d for d in frame.decls]


def global_ptr(em: KernelEmitter, buffer: Buffer, off: PrimExpr) -> tuple[str, PrimExpr]:
    """``(pointer, offset)`` for the address ``buffer + off`` of a vector or ``cp.async``
    access: in a frame, a global buffer's pointer at the offset's loop-invariant part, declared
    before the frame's loop, and the rest; else ``(buffer, off)``."""
    name = em.buffer_name(buffer)
    f = em.frame
    if f is None or buffer.scope != "global" or buffer not in em.spec.buffers:
        return name, off
    e = substitute(off, f.threads) if f.threads else off
    parts = split_invariant(e, frozenset(f.inner), f.outer | frozenset(f.tag_vars.values()))
    if parts is None:
        return name, off
    base, delta = parts
    if any(isinstance(x, IntImm) and x.value == 0 for x in parts):
        return name, off  # nothing to hoist, or nothing left in the loop
    text = em.expr(base)
    key = (buffer, text)
    if key not in f.bases:
        for tag, tv in f.tag_vars.items():
            if tv not in f.declared and tv in collect_vars(base):
                f.declared.add(tv)
                f.decls.append(f"const {ctype(tv.dtype)} {em.var_name(tv)} = {em.thread_index(tag, tv.dtype)};")
        pname = em.names.get(object(), f"{name}_base")
        const = "" if buffer in em.spec.written else "const "
        f.decls.append(f"{const}{ctype(buffer.dtype)}* {pname} = {name} + {text};")
        f.bases[key] = pname
    return f.bases[key], delta


def frame_thread(em: KernelEmitter, s: For, tag: str) -> None:
    """Note a thread loop inside the frame: its variable is ``threadIdx.* + min`` before the
    loop too."""
    f = em.frame
    if f is None or not isinstance(s.min, IntImm) or not tag.startswith("threadIdx."):
        return
    tv = f.tag_vars.get(tag)
    if tv is None:
        tv = f.tag_vars[tag] = Var(tag.replace(".", "_"), s.loop_var.dtype)
        launched = an.const_int_bound(em.launch[tag], em.env)[1]
        em.env[tv] = (0, None if launched is None else launched - 1)
    if tv.dtype != s.loop_var.dtype:
        return  # left unknown: its accesses keep their address
    f.threads[s.loop_var] = tv if s.min.value == 0 else add(tv, s.min)
