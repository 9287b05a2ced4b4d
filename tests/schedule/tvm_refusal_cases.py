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


CASES: dict[str, Case] = {
    "rca_no_producer": ("reduce_max", dict(M=4, K=3), rca_no_producer),
    "rca_no_producer_split": ("reduce_min", dict(M=7, K=2), rca_no_producer_split),
}

TVM_WRONG: dict[str, Case] = {
    "rca_no_producer_after_consumer": ("matmul_bias_relu", dict(M=4, K=3, N=5),
                                       rca_no_producer_after_consumer),
}  # fmt: skip
