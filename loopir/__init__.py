"""loopir: GPU kernels as loop nests, optimized by traced schedules.

The user-facing API (see docs/ and the design contract) is re-exported here lazily, so that
``import loopir`` stays cheap and optional parts (CUDA) load only when used.
"""

from __future__ import annotations

import importlib
from typing import Any

from loopir.errors import (
    CodegenError,
    IRValidationError,
    LaunchError,
    LoopIRError,
    PassError,
    ScheduleError,
    TraceError,
)
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import PrimExpr, Var
from loopir.ir.stmt import PrimFunc

__version__ = "0.1.0"

_LAZY = {
    "te": ("loopir.te", None),
    "ir": ("loopir.ir", None),
    "arith": ("loopir.arith", None),
    "verify": ("loopir.analysis.verifier", "verify"),
    "structural_equal": ("loopir.ir.equality", "structural_equal"),
    "assert_structural_equal": ("loopir.ir.equality", "assert_structural_equal"),
    # the package loopir.script (the parser); calling it prints, as loopir.ir.printer.script
    "script": ("loopir.script", None),
    "prim_func": ("loopir.script", "prim_func"),
    "IRModule": ("loopir.ir.module", "IRModule"),
    "Schedule": ("loopir.schedule", "Schedule"),
    "BlockRV": ("loopir.schedule", "BlockRV"),
    "LoopRV": ("loopir.schedule", "LoopRV"),
    "Trace": ("loopir.schedule", "Trace"),
    "PassContext": ("loopir.passes", "PassContext"),
    "lower": ("loopir.passes", "lower"),
    "build": ("loopir.driver", "build"),
    "runtime": ("loopir.runtime", None),
    "examples": ("loopir.examples", None),
    "testing": ("loopir.testing", None),
    "tune": ("loopir.tune", None),
}


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'loopir' has no attribute {name!r}") from None
    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CodegenError", "IRValidationError", "LaunchError", "LoopIRError", "PassError",
    "ScheduleError", "TraceError", "Buffer", "BufferRegion", "Range", "PrimExpr", "Var",
    "PrimFunc", *_LAZY,
]  # fmt: skip
