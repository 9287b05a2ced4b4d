"""Shared memory of a kernel: static or dynamic, and the limits it is checked against.

CUDA lets a block declare at most 48 KB of static ``__shared__`` memory. More needs dynamic
shared memory: one ``extern __shared__`` array sized at launch, which the kernel must first be
allowed to use (``cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
bytes)``), up to the device's opt-in maximum (``cudaDevAttrMaxSharedMemoryPerBlockOptin``: 227 KB
on sm_90, 163 KB on sm_80).

The emitter keeps a kernel whose shared buffers fit in 48 KB on static arrays (the form it always
printed: nothing to set up at run time, and the compiler sees distinct arrays). In a larger one it
moves the largest buffers to 16-byte aligned offsets of the dynamic array until the rest fit
([`plan_dynamic`][loopir.codegen_cuda.shared_memory.plan_dynamic]: the fewer buffers share the
dynamic array, the better the compiler vectorizes their loads). Three checks, each naming the
kernel, its bytes and the limit:

* emission: no device allows more than [`MAX_OPTIN`][loopir.codegen_cuda.shared_memory.MAX_OPTIN];
* the build: the target architecture's opt-in maximum
  ([`optin_limit`][loopir.codegen_cuda.shared_memory.optin_limit],
  [`check_arch_limits`][loopir.codegen_cuda.shared_memory.check_arch_limits]);
* the first launch on a device: the device's own attribute (the host code, see
  ``loopir.codegen_cuda.host_runtime``), which also sets the kernel's dynamic size once per
  device.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from loopir.errors import CodegenError
from loopir.ir import dtype as dt
from loopir.ir.expr import IntImm
from loopir.ir.functor import Visitor
from loopir.ir.stmt import Allocate, Stmt
from loopir.passes.storage_align import allocation_size

__all__ = [
    "DYNAMIC_ALIGN",
    "allocation_bytes",
    "MAX_OPTIN",
    "OPTIN_LIMITS",
    "STATIC_LIMIT",
    "check_arch_limits",
    "optin_limit",
    "plan_dynamic",
    "shared_allocations",
]

STATIC_LIMIT = 48 * 1024
"""Static shared memory a block may declare (every architecture)."""

OPTIN_LIMITS: dict[int, int] = {
    70: 96 * 1024, 72: 96 * 1024, 75: 64 * 1024,
    80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024,
    90: 227 * 1024, 100: 227 * 1024, 101: 227 * 1024, 103: 227 * 1024, 110: 227 * 1024,
    120: 99 * 1024, 121: 99 * 1024,
}  # fmt: skip
"""Shared memory one block may opt in to, by compute capability (the CUDA C++ Programming
Guide's "maximum amount of shared memory per thread block"; the device attribute
``cudaDevAttrMaxSharedMemoryPerBlockOptin`` gives the same numbers)."""

MAX_OPTIN = max(OPTIN_LIMITS.values())
"""The most any architecture allows (sm_90's 227 KB)."""

DYNAMIC_ALIGN = 16
"""Alignment of each buffer's offset in the dynamic array (the static arrays'
``__align__(16)``: 16-byte vector accesses, ``cp.async`` of 16 bytes and ``ldmatrix`` rows)."""


def optin_limit(arch: str) -> tuple[int, str]:
    """The opt-in shared memory per block of ``arch`` (``"sm_90a"``, ``"sm_80"``...) and where
    the number comes from; an architecture not in
    [`OPTIN_LIMITS`][loopir.codegen_cuda.shared_memory.OPTIN_LIMITS] gets the static 48 KB."""
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)[af]?", arch.strip().lower())
    cc = int(m.group(1)) if m else None
    if cc is not None and cc in OPTIN_LIMITS:
        return OPTIN_LIMITS[cc], f"the {arch} opt-in maximum"
    return STATIC_LIMIT, f"the static limit (no opt-in maximum is known for {arch})"


def allocation_bytes(a: Allocate) -> int:
    """Bytes of a shared Allocate (padded strides and vector elements included)."""
    b = a.buffer
    shape = [e.value for e in b.shape if isinstance(e, IntImm)]
    strides = None if b.strides is None else [s.value for s in b.strides if isinstance(s, IntImm)]
    return allocation_size(shape, strides) * max(1, dt.bits(b.dtype) // 8) * dt.lanes(b.dtype)


def shared_allocations(body: Stmt) -> list[Allocate]:
    """The ``shared`` Allocates of a kernel, in program order (outer before inner)."""
    found: list[Allocate] = []

    class Find(Visitor):
        def visit_Allocate(self, n: Allocate) -> None:
            if n.buffer.scope == "shared":
                found.append(n)
            self.generic_visit(n)

    Find().visit(body)
    return found


def plan_dynamic(allocs: Sequence[Allocate], budget: int, align: int = DYNAMIC_ALIGN) -> tuple[dict[Allocate, int], int]:
    """The buffers that go to dynamic shared memory, their byte offsets there, and its size.

    The largest buffers move until the others fit in ``budget`` bytes of static shared memory;
    the others stay static arrays. Few dynamic buffers matter: the buffers of the dynamic array
    are one object to the compiler, which then vectorizes their loads worse (PTX of the 1024^3
    ``pipelined_gemm`` with both tiles dynamic: 80 ``ld.shared.v4`` + 192 ``.v2`` + 80 scalar
    loads, against 128 ``.v4`` + 128 ``.v2`` with either tile static and the other dynamic).
    Every buffer lives for the whole kernel, as a static ``__shared__`` array does, so the
    dynamic ones are laid out one after the other, each at a multiple of ``align`` (by default
    [`DYNAMIC_ALIGN`][loopir.codegen_cuda.shared_memory.DYNAMIC_ALIGN]; 1024 in a kernel with
    ``wgmma``, whose swizzled tiles start at 1024-byte atoms).
    """
    static = sum(allocation_bytes(a) for a in allocs)
    moved: set[Allocate] = set()
    for a in sorted(allocs, key=allocation_bytes, reverse=True):  # stable: program order on ties
        if static <= budget:
            break
        moved.add(a)
        static -= allocation_bytes(a)
    offsets: dict[Allocate, int] = {}
    total = 0
    for a in allocs:
        if a in moved:
            total = -(-total // align) * align
            offsets[a] = total
            total += allocation_bytes(a)
    return offsets, total


def check_arch_limits(kernels: Iterable[tuple[str, str, int, int]], arch: str) -> None:
    """Refuse a kernel whose shared memory exceeds ``arch``'s limit.

    Parameters
    ----------
    kernels
        ``(function, kernel, static bytes, dynamic bytes)`` per kernel.
    arch
        The nvcc target (``"sm_80"``).

    Raises
    ------
    CodegenError
        Naming the function, the kernel, its bytes and the limit.
    """
    limit, what = optin_limit(arch)
    for fn, kernel, static, dynamic in kernels:
        total = static + dynamic
        if total > limit:
            raise CodegenError(
                f"CUDA build ({fn}): kernel {kernel} needs {total} bytes of shared memory per "
                f"block ({dynamic} dynamic + {static} static), over the {limit}-byte limit of "
                f"{arch} ({what}); use smaller tiles, fewer pipeline stages or another target"
            )
