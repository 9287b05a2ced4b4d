"""Traced TensorIR-style schedules: :class:`Schedule`, handles and :class:`Trace`.

Primitives are pure functions on PrimFunc (``loops``, ``cache``, ``compute_at``, ``inline``,
``reduction``, ``pad``); :class:`Schedule` records every call through one decorator into a
:class:`Trace` that prints as Python, round-trips through versioned JSON and replays.
"""

from loopir.schedule.schedule import Schedule, instruction
from loopir.schedule.trace import (
    INSTRUCTION_KINDS,
    TRACE_VERSION,
    BlockRV,
    ExprRV,
    Instruction,
    InstructionKind,
    LoopRV,
    Trace,
)

__all__ = [
    "INSTRUCTION_KINDS", "TRACE_VERSION", "BlockRV", "ExprRV", "Instruction", "InstructionKind", "LoopRV",
    "Schedule", "Trace", "instruction",
]  # fmt: skip
