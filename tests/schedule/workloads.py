"""Small te workloads shared by the schedule tests."""

from __future__ import annotations

from typing import Any

from loopir import te
from loopir.ir.stmt import PrimFunc


def elementwise(m: Any = 100, n: Any = 24) -> PrimFunc:
    """``B[i, j] = A[i, j] * 2 + 1``."""
    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return te.create_prim_func([A, B])


def matmul(m: Any = 16, k: Any = 8, n: Any = 12) -> PrimFunc:
    """``C = A @ B`` as a reduction block."""
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def two_stage(m: Any = 16, n: Any = 8) -> PrimFunc:
    """``B = A + 1; C = B * 3``: two blocks under the root block."""
    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] * 3.0, name="C")
    return te.create_prim_func([A, C])
