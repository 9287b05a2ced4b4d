"""Integer arithmetic analysis: bounds, simplification, proofs and symbolic intervals.

The entry point is [`Analyzer`][loopir.arith.analyzer.Analyzer]; the module-level functions build a
fresh one::

    from loopir import arith
    ana = arith.Analyzer({i0: Range(0, 4), i1: Range(0, 32)})
    ana.simplify((i0 * 32 + i1) // 32)        # -> i0
    ana.can_prove(i0 * 32 + i1 < 128)         # -> True
    ana.int_set(i0 * 32 + i1, {i1: Range(0, 32)})  # -> [i0*32, i0*32 + 31]

Evaluation has one rule set, the C semantics the executors implement:
[`evaluate`][loopir.arith.evaluate.evaluate] at one point,
``loopir.arith.vectorized`` at every point of a small domain at once.

Everything is sound: a simplification never changes a value (floor semantics for ``//`` and
``%``, also for negative values), ``can_prove`` answers True only for conditions that hold,
bounds and intervals always contain every value. Integer overflow is assumed not to happen.
"""

from loopir.arith.analyzer import (
    Analyzer,
    can_prove,
    can_prove_equal,
    const_int_bound,
    detect_linear,
    int_set,
    simplify,
)
from loopir.arith.bound import NEG_INF, POS_INF, ConstIntBound
from loopir.arith.canonical import StructuralKey, structural_key
from loopir.arith.evaluate import evaluate
from loopir.arith.interval import IntervalSet
from loopir.arith.linear import ceildiv
from loopir.arith.modular import ModularSet, modular_set
from loopir.arith.vectorized import NotEnumerable

__all__ = [
    "Analyzer", "ConstIntBound", "IntervalSet", "POS_INF", "NEG_INF", "simplify", "can_prove",
    "can_prove_equal", "const_int_bound", "int_set", "detect_linear", "ceildiv", "evaluate",
    "ModularSet", "modular_set", "NotEnumerable", "StructuralKey", "structural_key",
]  # fmt: skip
