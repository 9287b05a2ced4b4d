"""The te frontend: describe a computation as tensors, then ``create_prim_func``.

>>> A = placeholder((4, 8), "float32", name="A")
>>> k = reduce_axis(8, name="k")
>>> B = compute((4,), lambda i: sum(A[i, k], axis=k), name="B")
>>> func = create_prim_func([A, B])
"""

from loopir.ir.expr import Var
from loopir.ir.op import (
    abs,
    cast,
    ceil,
    ceildiv,
    const,
    cos,
    erf,
    exp,
    exp2,
    fabs,
    floor,
    floordiv,
    floormod,
    fma,
    if_then_else,
    log,
    log1p,
    log2,
    pow,
    round,
    rsqrt,
    sigmoid,
    sin,
    sqrt,
    tanh,
)
from loopir.ir.op import all_ as all  # noqa: A004 - mirrors tvm.te.all
from loopir.ir.op import any_ as any  # noqa: A004 - mirrors tvm.te.any
from loopir.te.create import create_prim_func
from loopir.te.tensor import (
    ComputeOp,
    PlaceholderOp,
    Reduce,
    ReduceAxis,
    Tensor,
    comm_reducer_identity,
    compute,
    max,
    max_value,
    min,
    min_value,
    placeholder,
    reduce_axis,
    sum,
)

var = Var

__all__ = [
    "Tensor", "ComputeOp", "PlaceholderOp", "Reduce", "ReduceAxis", "placeholder", "compute", "reduce_axis",
    "sum", "max", "min", "comm_reducer_identity", "create_prim_func", "if_then_else", "const",
    "var", "cast", "exp", "exp2", "log", "log2", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid",
    "erf", "sin", "cos", "floor", "ceil", "round", "fabs", "abs", "pow", "fma", "floordiv",
    "floormod", "ceildiv", "all", "any", "max_value", "min_value",
]  # fmt: skip
