"""Passes over PrimFuncs, their configuration context and the lowering pipeline.

Importing this package registers every built-in configuration key (see
``PassContext.list_configs()``).
"""

from loopir.passes import cuda_config  # noqa: F401  (registers the CUDA target's keys)
from loopir.passes.base import (
    FunctionPass,
    Pass,
    PassInstrument,
    PrintIRInstrument,
    RecordIRInstrument,
    Sequential,
)
from loopir.passes.compact import CompactBufferAllocation
from loopir.passes.context import ConfigEntry, PassContext, register_config
from loopir.passes.cross_thread import LowerCrossThreadReduction
from loopir.passes.fast_math import FastMath
from loopir.passes.inject_vthread import InjectVirtualThread
from loopir.passes.local_pad import LocalPadding, LocalPaddingReport
from loopir.passes.lower_blocks import LowerBlocks
from loopir.passes.lower_warp_memory import LowerWarpMemory
from loopir.passes.pipeline import default_pipeline, lower
from loopir.passes.prefetch import InjectSharedPrefetch
from loopir.passes.simplify import Simplify
from loopir.passes.software_pipeline import InjectSoftwarePipeline
from loopir.passes.thread_sync import ThreadSync
from loopir.passes.unify_threads import UnifyThreadLoops
from loopir.passes.wgmma_waits import SinkWgmmaWaits

__all__ = [
    "CompactBufferAllocation", "ConfigEntry", "FastMath", "FunctionPass", "InjectSharedPrefetch", "InjectSoftwarePipeline", "InjectVirtualThread", "LocalPadding",
    "LocalPaddingReport", "LowerBlocks", "LowerWarpMemory", "LowerCrossThreadReduction", "Pass", "PassContext", "PassInstrument",
    "PrintIRInstrument", "RecordIRInstrument", "Sequential", "SinkWgmmaWaits", "Simplify", "ThreadSync",
    "UnifyThreadLoops", "default_pipeline", "lower", "register_config",
]  # fmt: skip
