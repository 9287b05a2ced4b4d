"""Schedules of issue 29 item 2 (refusals TVM 0.27 does not make), written once for both
schedules: they only call methods loopir and TVM's ``s_tir.Schedule`` share (``get_sblock``,
``pad_einsum``...). tests/schedule/test_tvm_refusals.py applies them to loopir's workloads,
tests/schedule/_tvm_refusals_reference.py to the same workloads built with TVM's te, writing
TVM's IR into tests/golden/schedule/tvm/.

``CASES``: what TVM accepts and computes right (loopir must accept, with TVM's loops).
``TVM_WRONG``: what TVM accepts and computes wrong (loopir refuses; the reference script
records TVM's IR to show why).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Case = tuple[str, dict[str, Any], Callable[[Any], None]]


def rca_no_producer(sch: Any) -> None:
    """R reads only the input: moved under its consumer's loop, R is computed whole in each
    iteration of it, before S."""
    (i,) = sch.get_loops(sch.get_sblock("S"))
    sch.reverse_compute_at(sch.get_sblock("R"), i)


def rca_no_producer_split(sch: Any) -> None:
    """As above under the outer loop of an inexact split of S's loop, keeping unit loops."""
    (i,) = sch.get_loops(sch.get_sblock("S"))
    i0, _ = sch.split(i, [None, 3])
    sch.reverse_compute_at(sch.get_sblock("R"), i0, preserve_unit_loops=True)


def rca_no_producer_after_consumer(sch: Any) -> None:
    """C moved under D's loop runs after BiasAdd, which reads C: TVM computes garbage."""
    i, _ = sch.get_loops(sch.get_sblock("D"))
    sch.reverse_compute_at(sch.get_sblock("C"), i)


def pad_after_split(sch: Any) -> None:
    """An inexact split of i, then pad i (7 -> 8) and k (5 -> 8): the split loops and their
    predicate stay; the block's domains and buffers grow."""
    i, _, _ = sch.get_loops(sch.get_sblock("C"))
    sch.split(i, [None, 4])
    sch.pad_einsum(sch.get_sblock("C"), [4, 1, 4])


def pad_after_split_k(sch: Any) -> None:
    """The reduction loop split (5 = 2 * 3 inexact) and padded to 6: the k loops stay, j (own
    loop, 6 -> 8) grows."""
    _, _, k = sch.get_loops(sch.get_sblock("C"))
    sch.split(k, [None, 3])
    sch.pad_einsum(sch.get_sblock("C"), [1, 4, 3])


def pad_after_fuse(sch: Any) -> None:
    """B's loops fused (symbolic n): the fused loop stays, B's domain is padded."""
    sch.fuse(*sch.get_loops(sch.get_sblock("B")))
    sch.pad_einsum(sch.get_sblock("B"), [4, 2])


def pad_under_shared_loop(sch: Any) -> None:
    """T1 computed at T2's row loop, then T2 padded: TVM grows the row loop that T1 shares
    and writes T1 into T1_pad; its build then computes a wrong T2 (T1's values). loopir
    grows no loop another block shares and copies under it."""
    i, _ = sch.get_loops(sch.get_sblock("T2"))
    sch.compute_at(sch.get_sblock("T1"), i, preserve_unit_loops=True)
    sch.pad_einsum(sch.get_sblock("T2"), [4, 1])


def ca_after_layout(sch: Any) -> None:
    """C stored as C[i // 2, j, i % 2], then computed at BiasAdd's row loop: C's rows are
    solved from the two dimensions the layout split i into (TVM computes the pair of rows
    i // 2 holds, relaxing the i % 2 dimension)."""
    sch.transform_layout(sch.get_sblock("C"), ("write", 0), lambda i, j: (i // 2, j, i % 2))
    i, _ = sch.get_loops(sch.get_sblock("BiasAdd"))
    sch.compute_at(sch.get_sblock("C"), i)


def rca_after_layout(sch: Any) -> None:
    """The consumer moved under C's row loop reads C[i // 2, j, i % 2]: exactly row i."""
    sch.transform_layout(sch.get_sblock("C"), ("write", 0), lambda i, j: (i // 2, j, i % 2))
    i, _, _ = sch.get_loops(sch.get_sblock("C"))
    sch.reverse_compute_at(sch.get_sblock("BiasAdd"), i)


def ca_after_layout_unit(sch: Any) -> None:
    """R (2 rows) stored as R[i // 2, i % 2]: with i < 2 that is R[0, i] (TVM simplifies the
    indices at transform_layout; loopir when solving the rows)."""
    sch.transform_layout(sch.get_sblock("R"), ("write", 0), lambda i: (i // 2, i % 2))
    (i,) = sch.get_loops(sch.get_sblock("S"))
    sch.compute_at(sch.get_sblock("R"), i)


CASES: dict[str, Case] = {
    "ca_after_layout": ("matmul_bias_relu", dict(M=4, K=3, N=6), ca_after_layout),
    "rca_after_layout": ("matmul_bias_relu", dict(M=4, K=3, N=6), rca_after_layout),
    "ca_after_layout_unit": ("reduce_max", dict(M=2, K=3), ca_after_layout_unit),
    "pad_after_split": ("matmul", dict(M=7, K=5, N=6), pad_after_split),
    "pad_after_split_k": ("matmul", dict(M=4, K=5, N=6), pad_after_split_k),
    "pad_after_fuse": ("symbolic_elementwise", dict(n=9, N=5), pad_after_fuse),
    "rca_no_producer": ("reduce_max", dict(M=4, K=3), rca_no_producer),
    "rca_no_producer_split": ("reduce_min", dict(M=7, K=2), rca_no_producer_split),
}

TVM_WRONG: dict[str, Case] = {
    "pad_under_shared_loop": ("elementwise_chain", dict(M=1, N=2, stages=2),
                              pad_under_shared_loop),
    "rca_no_producer_after_consumer": ("matmul_bias_relu", dict(M=4, K=3, N=5),
                                       rca_no_producer_after_consumer),
}  # fmt: skip
